/* out[i] (contiguous, n elements) from the dropout kernels' Philox draws, 4 per work item: UNIFORM, a + (b - a) * u
   for u in [0, 1) (a value that rounds to b becomes a, as CUDA's uniform_ does: the range stays [a, b)); else
   normal, a + b * z with z by Box-Muller on pairs of draws. Doubles take two 32-bit draws per uniform (53 bits),
   so 2 elements per work item; floats 24 bits, 4 elements. Defines: T, ACC (double for doubles), UNIFORM. */
#if IS_DOUBLE
#define PER 2
#else
#define PER 4
#endif
__kernel void random_fill(__global T* out, long out_off, uint k0, uint k1, ACC a, ACC b, long n) {
    long g = get_global_id(0);
    uint r[4];
    philox(g, k0, k1, r);
    ACC u[PER];
#if IS_DOUBLE
    u[0] = ((ACC)(r[0] >> 5) * 67108864.0 + (ACC)(r[1] >> 6)) * (1.0 / 9007199254740992.0);
    u[1] = ((ACC)(r[2] >> 5) * 67108864.0 + (ACC)(r[3] >> 6)) * (1.0 / 9007199254740992.0);
#else
    for (int j = 0; j < 4; j++) u[j] = philox_uniform(r[j]);
#endif
    T v[PER];
    for (int j = 0; j < PER; j += 2) {
#if UNIFORM
        for (int h = 0; h < 2; h++) {
            T value = (T)(a + (b - a) * u[j + h]);
            v[j + h] = value == (T)b ? (T)a : value;
        }
#else
        ACC radius = sqrt((ACC)-2 * log((ACC)1 - u[j]));  /* 1 - u in (0, 1]: log is finite */
        ACC angle = (ACC)6.283185307179586 * u[j + 1];
        v[j] = (T)(a + b * radius * cos(angle));
        v[j + 1] = (T)(a + b * radius * sin(angle));
#endif
    }
    for (int j = 0; j < PER; j++) {
        long i = g * PER + j;
        if (i < n) out[out_off + i] = v[j];
    }
}
