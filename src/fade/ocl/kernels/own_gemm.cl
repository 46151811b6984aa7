/* C[b] = alpha * A[b] @ B[b] + beta * C[b] for small batched GEMMs, launched without CLBlast's host cost (~50 us
   a call on the H100's host). Geometry and strides compiled in (M, N, K, A_RS, A_CS, A_BS, B_RS, B_CS, B_BS,
   C_RS, C_BS); a 64 x 64 tile of C per 16 x 16 work-group, 4 x 4 per work item, k in steps of 16 through local
   memory. Optional: KL, k walks blocks of KL (k = block * KL + j: A at block * A_KB + j * A_CS, B at block *
   B_KB + j * B_RS; a 1x1 convolution's weight gradient sums over (image, pixel)); KC, split-K: the third
   work-group index is a slice of KC of k, not a batch entry, and C[b] its partial product. */
#ifdef KL
#define KOFF(k, S, SB) (((k) / KL) * (SB) + ((k) % KL) * (S))
#else
#define KOFF(k, S, SB) ((k) * (S))
#define A_KB 0
#define B_KB 0
#endif
#ifndef KC
#define KC K
#define KSPLIT 0
#else
#define KSPLIT 1
#endif
__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void own_gemm(__global const T* A, long a_off, __global const T* B, long b_off, __global T* C, long c_off,
              ACC alpha, ACC beta) {
    int tx = get_local_id(0), ty = get_local_id(1);
    long n0 = get_group_id(0) * 64, m0 = get_group_id(1) * 64, b = get_group_id(2);
    __local T As[16][65];
    __local T Bs[16][64];
    ACC acc[4][4];
    for (int i = 0; i < 4; i++) for (int j = 0; j < 4; j++) acc[i][j] = 0;
    long kbeg = KSPLIT ? b * KC : 0, kend = KSPLIT ? min((long)K, kbeg + KC) : K;
    A += a_off + (KSPLIT ? 0 : b * A_BS); B += b_off + (KSPLIT ? 0 : b * B_BS);
    for (long k0 = kbeg; k0 < kend; k0 += 16) {
        for (int l = 0; l < 4; l++) {
            int e = ty * 16 + tx + l * 256;
            int mm = e / 16, ka = e % 16, kb = e / 64, nn = e % 64;
            long gm = m0 + mm, ga = k0 + ka, gb = k0 + kb, gn = n0 + nn;
            As[ka][mm] = (gm < M && ga < kend) ? A[gm * A_RS + KOFF(ga, A_CS, A_KB)] : (T)0;
            Bs[kb][nn] = (gb < kend && gn < N) ? B[KOFF(gb, B_RS, B_KB) + gn * B_CS] : (T)0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < 16; kk++) {
            T a[4], v[4];
            for (int i = 0; i < 4; i++) a[i] = As[kk][ty + 16 * i];
            for (int j = 0; j < 4; j++) v[j] = Bs[kk][tx + 16 * j];
            for (int i = 0; i < 4; i++) for (int j = 0; j < 4; j++) acc[i][j] += (ACC)a[i] * (ACC)v[j];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int i = 0; i < 4; i++) {
        long m = m0 + ty + 16 * i;
        if (m >= M) continue;
        for (int j = 0; j < 4; j++) {
            long n = n0 + tx + 16 * j;
            if (n >= N) continue;
            long at = c_off + b * C_BS + m * C_RS + n;
            C[at] = (T)(alpha * acc[i][j] + (beta != 0 ? beta * (ACC)C[at] : (ACC)0));
        }
    }
}
