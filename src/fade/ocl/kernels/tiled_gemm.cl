/* C[b] = alpha * op(A)[b] @ op(B)[b] + beta * C[b] for the large GEMMs (transformers' linear layers and attention,
   convolutions' im2col products), read in place in any of the four transposition cases: no padded or transposed
   copies (CLBlast's indirect kernel makes them for every shape off its tile multiples), one launch, and on the
   graph mode's replay its arguments set once.

   Geometry compiled in: M, N, K; A element (m, k) at m * A_RS + k * A_CS, B element (k, n) at k * B_RS + n * B_CS,
   C element (m, n) at m * C_RS + n; batch entries A_BS, B_BS, C_BS apart (get_group_id(2)); IDX, int where every
   index fits. Tiling compiled in: a BM x BN tile of C per work-group of (BN / TN) x (BM / TM) work items, TM x TN
   per item as TM / 4 x TN / 4 blocks of 4 x 4 (a block's rows and columns are 4 apart in the tile by work item, so neighbouring items read
   neighbouring 16 bytes of local memory), k in steps of BK through two local tiles (the next step's global loads
   are in registers while this step's products run). A_K1 / B_K1: the operand's k is its unit-stride index (the
   global loads then walk k across neighbouring items). Optional: KC, split-K: get_group_id(2) is a slice of KC
   of k (a multiple of BK), C[b] its partial product. */
#define WX (BN / TN)
#define WY (BM / TM)
#define THREADS (WX * WY)
#define LA (BM * BK / THREADS)
#define LB (BK * BN / THREADS)
#define PA (BM + 4)
#define PB (BN + 4)
#ifndef KC
#define KC K
#define KSPLIT 0
#else
#define KSPLIT 1
#endif
#define EDGE_M (M % BM != 0)
#define EDGE_N (N % BN != 0)
#define EDGE_K (K % BK != 0)

__kernel __attribute__((reqd_work_group_size(WX, WY, 1)))
void tiled_gemm(__global const T* A, long a_off, __global const T* B, long b_off, __global T* C, long c_off,
                ACC alpha, ACC beta) {
    __local T As[2][BK][PA];
    __local T Bs[2][BK][PB];
    const int tx = get_local_id(0), ty = get_local_id(1), tid = ty * WX + tx;
    const IDX m0 = (IDX)get_group_id(1) * BM, n0 = (IDX)get_group_id(0) * BN, b = get_group_id(2);
    const IDX kbeg = KSPLIT ? b * KC : 0;
    const IDX kend = KSPLIT ? min((IDX)K, kbeg + KC) : K;
    A += a_off + (KSPLIT ? 0 : b * A_BS);
    B += b_off + (KSPLIT ? 0 : b * B_BS);
    T ra[LA], rb[LB];
    ACC acc[TM][TN];
    _Pragma("unroll") for (int i = 0; i < TM; i++)
        _Pragma("unroll") for (int j = 0; j < TN; j++) acc[i][j] = 0;

#if A_K1
#define A_ROW(e) ((e) / BK)
#define A_KK(e) ((e) % BK)
#else
#define A_ROW(e) ((e) % BM)
#define A_KK(e) ((e) / BM)
#endif
#if B_K1
#define B_COL(e) ((e) / BK)
#define B_KK(e) ((e) % BK)
#else
#define B_COL(e) ((e) % BN)
#define B_KK(e) ((e) / BN)
#endif
#define LOAD(k0)                                                                                     \
    _Pragma("unroll") for (int l = 0; l < LA; l++) {                                                \
        const int e = tid + l * THREADS;                                                             \
        const IDX gm = m0 + A_ROW(e), gk = (k0) + A_KK(e);                                          \
        ra[l] = ((!EDGE_M || gm < M) && (!EDGE_K || gk < kend)) ? A[gm * A_RS + gk * A_CS] : (T)0;                \
    }                                                                                                \
    _Pragma("unroll") for (int l = 0; l < LB; l++) {                                                \
        const int e = tid + l * THREADS;                                                             \
        const IDX gn = n0 + B_COL(e), gk = (k0) + B_KK(e);                                          \
        rb[l] = ((!EDGE_N || gn < N) && (!EDGE_K || gk < kend)) ? B[gk * B_RS + gn * B_CS] : (T)0;                \
    }
#define STORE(s)                                                                                     \
    _Pragma("unroll") for (int l = 0; l < LA; l++) {                                                \
        const int e = tid + l * THREADS;                                                             \
        As[s][A_KK(e)][A_ROW(e)] = ra[l];                                                            \
    }                                                                                                \
    _Pragma("unroll") for (int l = 0; l < LB; l++) {                                                \
        const int e = tid + l * THREADS;                                                             \
        Bs[s][B_KK(e)][B_COL(e)] = rb[l];                                                            \
    }

    LOAD(kbeg)
    STORE(0)
    barrier(CLK_LOCAL_MEM_FENCE);
    int s = 0;
    for (IDX k0 = kbeg; k0 < kend; k0 += BK) {
        const bool more = k0 + BK < kend;
        if (more) {
            LOAD(k0 + BK)
        }
        _Pragma("unroll") for (int kk = 0; kk < BK; kk++) {
            T a[TM], v[TN];
            _Pragma("unroll") for (int i = 0; i < TM / 4; i++) {
                const T4 q = vload4(0, &As[s][kk][i * (BM / (TM / 4)) + ty * 4]);
                a[4 * i] = q.x; a[4 * i + 1] = q.y; a[4 * i + 2] = q.z; a[4 * i + 3] = q.w;
            }
            _Pragma("unroll") for (int j = 0; j < TN / 4; j++) {
                const T4 q = vload4(0, &Bs[s][kk][j * (BN / (TN / 4)) + tx * 4]);
                v[4 * j] = q.x; v[4 * j + 1] = q.y; v[4 * j + 2] = q.z; v[4 * j + 3] = q.w;
            }
            _Pragma("unroll") for (int i = 0; i < TM; i++)
                _Pragma("unroll") for (int j = 0; j < TN; j++) acc[i][j] += (ACC)a[i] * (ACC)v[j];
        }
        if (more) {
            STORE(s ^ 1)
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        s ^= 1;
    }

    C += c_off + b * C_BS;
    _Pragma("unroll") for (int i = 0; i < TM; i++) {
        const IDX m = m0 + (i / 4) * (BM / (TM / 4)) + ty * 4 + (i % 4);
        if (EDGE_M && m >= M) continue;
        _Pragma("unroll") for (int j = 0; j < TN; j++) {
            const IDX n = n0 + (j / 4) * (BN / (TN / 4)) + tx * 4 + (j % 4);
            if (EDGE_N && n >= N) continue;
            const IDX at = m * C_RS + n;
            C[at] = (T)(alpha * acc[i][j] + (beta != 0 ? beta * (ACC)C[at] : (ACC)0));
        }
    }
}
