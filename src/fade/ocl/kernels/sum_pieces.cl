__kernel void sum_pieces(__global const T* partial, long pieces, long m, long n, __global T* out, long out_off,
                         long ldc, T beta) {
    long i = get_global_id(0);
    if (i >= m * n) return;
    ACC acc = 0;
    for (long p = 0; p < pieces; ++p) acc += (ACC)partial[p * m * n + i];
    long o = out_off + (i / n) * ldc + i % n;
    out[o] = (T)(beta != 0 ? acc + (ACC)beta * (ACC)out[o] : acc);
}
