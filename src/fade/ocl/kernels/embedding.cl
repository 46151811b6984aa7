__kernel void gather_rows(__global const T* weight, long w_off, long w_row, __global const long* index,
                          long i_off, __global T* out, long count, long width) {
    long g = get_global_id(0);
    if (g >= count * width) return;
    long i = g / width, j = g % width;
    out[g] = weight[w_off + index[i_off + i] * w_row + j];
}
__kernel void scatter_add_rows(__global const T* grad, __global const long* index, long i_off, __global T* out,
                               long count, long width, long rows, long padding) {
    long j = get_global_id(0);
    if (j >= width) return;
    for (long i = 0; i < count; ++i) {
        long r = index[i_off + i];
        if (r != padding && r >= 0 && r < rows) out[r * width + j] += grad[i * width + j];
    }
}
