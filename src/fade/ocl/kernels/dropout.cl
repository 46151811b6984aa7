__kernel void dropout(__global const T* x, long x_off, __global T* out, __global uchar* mask, uint k0, uint k1,
                      float keep, T scale, long n) {
    long g = get_global_id(0);
    uint r[4];
    philox(g, k0, k1, r);
    for (int j = 0; j < 4; j++) {
        long i = g * 4 + j;
        if (i < n) {
            uchar kept = philox_uniform(r[j]) < keep;
            mask[i] = kept;
            out[i] = x[x_off + i] * (T)kept * scale;  /* x * mask * scale, as the CPU computes it */
        }
    }
}
