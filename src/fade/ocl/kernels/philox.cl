/* Philox4x32-10 (Salmon et al., SC'11: the counter-based generator of cuRAND and torch's CUDA dropout): one
   call per 4 elements, counter = (work item, 0, 0, 0), key = the seed drawn from torch's CPU generator */
inline void philox(long g, uint k0, uint k1, uint* r) {
    uint c0 = (uint)g, c1 = (uint)(g >> 32), c2 = 0, c3 = 0;
    for (int round = 0; round < 10; round++) {
        uint hi0 = mul_hi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        uint hi1 = mul_hi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    r[0] = c0; r[1] = c1; r[2] = c2; r[3] = c3;
}
float philox_uniform(uint r) { return (float)(r >> 8) * (1.0f / 16777216.0f); }  /* in [0, 1), 24 bits */
