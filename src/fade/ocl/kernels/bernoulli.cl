/* out[i] = (the uniform dropout draws) < p, or < probs[i] with PROBS */
__kernel void bernoulli(__global T* out, long out_off, uint k0, uint k1, float p, __global const P* probs,
                        long probs_off, long n) {
    long g = get_global_id(0);
    uint r[4];
    philox(g, k0, k1, r);
    for (int j = 0; j < 4; j++) {
        long i = g * 4 + j;
        if (i < n) {
            float u = philox_uniform(r[j]);
#ifdef PROBS
            out[out_off + i] = (T)((P)u < probs[probs_off + i]);
#else
            out[out_off + i] = (T)(u < p);
#endif
        }
    }
}
