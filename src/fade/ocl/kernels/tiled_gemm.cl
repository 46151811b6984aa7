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
   of k (a multiple of BK), C[b] its partial product. VA / VB: the operand is read from global memory as T4s along
   its unit-stride index (the geometry sets them where that index's extent, the other stride, the batch stride and
   the offset are multiples of 4, so every T4 is aligned and lies wholly inside or outside the matrix). The local
   tiles are declared as T4s so that the products' reads from them are 16-byte loads (NVIDIA's compiler loads a
   vload4 from a T array as four scalars). The beta term reads S (C itself unless a caller passes another
   matrix: addmm's bias, broadcast by stride 0), element (m, n) at m * S_RS + n * S_CS, batch entries S_BS apart.

   RUNTIME_GEOMETRY: M, N, K and the strides are arguments (after s_off, as IDX) instead of compiled in, so one
   program per tiling, dtype and operand layout serves every shape (small products, whose per-shape builds would
   cost more than they gain); edges always guarded, operands read element by element; the last argument, KC_R,
   is KC (0: not split). */
#define WX (BN / TN)
#define WY (BM / TM)
#define THREADS (WX * WY)
#define LA (BM * BK / THREADS)
#define LB (BK * BN / THREADS)
#ifndef VA
#define VA 0
#endif
#ifndef VB
#define VB 0
#endif
#ifndef RUNTIME_GEOMETRY
#define RUNTIME_GEOMETRY 0
#endif
#define LA4 (BM * BK / 4 / THREADS)
#define LB4 (BK * BN / 4 / THREADS)
#define PA (BM + 4)
#define PB (BN + 4)
#if RUNTIME_GEOMETRY
#define KC KC_R
#define KSPLIT (KC_R > 0)
#elif !defined(KC)
#define KC K
#define KSPLIT 0
#else
#define KSPLIT 1
#endif
#define EDGE_M (M % BM != 0)
#define EDGE_N (N % BN != 0)
#define EDGE_K (K % BK != 0)

#if RUNTIME_GEOMETRY
#define GEOMETRY_ARGUMENTS , IDX M, IDX N, IDX K, IDX A_RS, IDX A_CS, IDX A_BS, IDX B_RS, IDX B_CS, IDX B_BS, \
    IDX C_RS, IDX C_BS, IDX S_RS, IDX S_CS, IDX S_BS, IDX KC_R
#else
#define GEOMETRY_ARGUMENTS
#endif

__kernel __attribute__((reqd_work_group_size(WX, WY, 1)))
void tiled_gemm(__global const T* A, long a_off, __global const T* B, long b_off, __global T* C, long c_off,
                ACC alpha, ACC beta, __global const T* S, long s_off GEOMETRY_ARGUMENTS) {
    __local T4 As4[2 * BK * PA / 4];
    __local T4 Bs4[2 * BK * PB / 4];
    __local T* As = (__local T*)As4;
    __local T* Bs = (__local T*)Bs4;
#define AS(s, kk, m) As[((s) * BK + (kk)) * PA + (m)]
#define BS(s, kk, n) Bs[((s) * BK + (kk)) * PB + (n)]
    const int tx = get_local_id(0), ty = get_local_id(1), tid = ty * WX + tx;
    const IDX m0 = (IDX)get_group_id(1) * BM, n0 = (IDX)get_group_id(0) * BN, b = get_group_id(2);
    const IDX kbeg = KSPLIT ? b * KC : 0;
    const IDX kend = KSPLIT ? min((IDX)K, kbeg + KC) : K;
    A += a_off + (KSPLIT ? 0 : b * A_BS);
    B += b_off + (KSPLIT ? 0 : b * B_BS);
#if VA
    T4 ra[LA4];
#else
    T ra[LA];
#endif
#if VB
    T4 rb[LB4];
#else
    T rb[LB];
#endif
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
#if VA && A_K1 /* T4s along k: a row's BK / 4 of them by neighbouring items */
#define LOAD_A(k0)                                                                                   \
    _Pragma("unroll") for (int l = 0; l < LA4; l++) {                                               \
        const int f = tid + l * THREADS;                                                             \
        const IDX gm = m0 + f / (BK / 4), gk = (k0) + (f % (BK / 4)) * 4;                           \
        ra[l] = ((!EDGE_M || gm < M) && (!EDGE_K || gk < kend)) ?                                    \
            *(__global const T4*)(A + gm * A_RS + gk) : (T4)0;                                       \
    }
#define STORE_A(s)                                                                                   \
    _Pragma("unroll") for (int l = 0; l < LA4; l++) {                                               \
        const int f = tid + l * THREADS, r = f / (BK / 4), q = (f % (BK / 4)) * 4;                  \
        AS(s, q, r) = ra[l].x; AS(s, q + 1, r) = ra[l].y; AS(s, q + 2, r) = ra[l].z; AS(s, q + 3, r) = ra[l].w; \
    }
#elif VA /* T4s along m */
#define LOAD_A(k0)                                                                                   \
    _Pragma("unroll") for (int l = 0; l < LA4; l++) {                                               \
        const int f = tid + l * THREADS;                                                             \
        const IDX gm = m0 + (f % (BM / 4)) * 4, gk = (k0) + f / (BM / 4);                           \
        ra[l] = ((!EDGE_M || gm < M) && (!EDGE_K || gk < kend)) ?                                    \
            *(__global const T4*)(A + gm + gk * A_CS) : (T4)0;                                       \
    }
#define STORE_A(s)                                                                                   \
    _Pragma("unroll") for (int l = 0; l < LA4; l++) {                                               \
        const int f = tid + l * THREADS;                                                             \
        As4[(((s) * BK + f / (BM / 4)) * PA + (f % (BM / 4)) * 4) / 4] = ra[l];                     \
    }
#else
#define LOAD_A(k0)                                                                                   \
    _Pragma("unroll") for (int l = 0; l < LA; l++) {                                                \
        const int e = tid + l * THREADS;                                                             \
        const IDX gm = m0 + A_ROW(e), gk = (k0) + A_KK(e);                                          \
        ra[l] = ((!EDGE_M || gm < M) && (!EDGE_K || gk < kend)) ? A[gm * A_RS + gk * A_CS] : (T)0;  \
    }
#define STORE_A(s)                                                                                   \
    _Pragma("unroll") for (int l = 0; l < LA; l++) {                                                \
        const int e = tid + l * THREADS;                                                             \
        AS(s, A_KK(e), A_ROW(e)) = ra[l];                                                            \
    }
#endif
#if VB && B_K1 /* T4s along k: a column's BK / 4 of them by neighbouring items */
#define LOAD_B(k0)                                                                                   \
    _Pragma("unroll") for (int l = 0; l < LB4; l++) {                                               \
        const int f = tid + l * THREADS;                                                             \
        const IDX gn = n0 + f / (BK / 4), gk = (k0) + (f % (BK / 4)) * 4;                           \
        rb[l] = ((!EDGE_N || gn < N) && (!EDGE_K || gk < kend)) ?                                    \
            *(__global const T4*)(B + gk + gn * B_CS) : (T4)0;                                       \
    }
#define STORE_B(s)                                                                                   \
    _Pragma("unroll") for (int l = 0; l < LB4; l++) {                                               \
        const int f = tid + l * THREADS, c = f / (BK / 4), q = (f % (BK / 4)) * 4;                  \
        BS(s, q, c) = rb[l].x; BS(s, q + 1, c) = rb[l].y; BS(s, q + 2, c) = rb[l].z; BS(s, q + 3, c) = rb[l].w; \
    }
#elif VB /* T4s along n */
#define LOAD_B(k0)                                                                                   \
    _Pragma("unroll") for (int l = 0; l < LB4; l++) {                                               \
        const int f = tid + l * THREADS;                                                             \
        const IDX gn = n0 + (f % (BN / 4)) * 4, gk = (k0) + f / (BN / 4);                           \
        rb[l] = ((!EDGE_N || gn < N) && (!EDGE_K || gk < kend)) ?                                    \
            *(__global const T4*)(B + gk * B_RS + gn) : (T4)0;                                       \
    }
#define STORE_B(s)                                                                                   \
    _Pragma("unroll") for (int l = 0; l < LB4; l++) {                                               \
        const int f = tid + l * THREADS;                                                             \
        Bs4[(((s) * BK + f / (BN / 4)) * PB + (f % (BN / 4)) * 4) / 4] = rb[l];                     \
    }
#else
#define LOAD_B(k0)                                                                                   \
    _Pragma("unroll") for (int l = 0; l < LB; l++) {                                                \
        const int e = tid + l * THREADS;                                                             \
        const IDX gn = n0 + B_COL(e), gk = (k0) + B_KK(e);                                          \
        rb[l] = ((!EDGE_N || gn < N) && (!EDGE_K || gk < kend)) ? B[gk * B_RS + gn * B_CS] : (T)0;  \
    }
#define STORE_B(s)                                                                                   \
    _Pragma("unroll") for (int l = 0; l < LB; l++) {                                                \
        const int e = tid + l * THREADS;                                                             \
        BS(s, B_KK(e), B_COL(e)) = rb[l];                                                            \
    }
#endif
#define LOAD(k0) LOAD_A(k0) LOAD_B(k0)
#define STORE(s) STORE_A(s) STORE_B(s)

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
                const T4 q = As4[((s * BK + kk) * PA + i * (BM / (TM / 4)) + ty * 4) / 4];
                a[4 * i] = q.x; a[4 * i + 1] = q.y; a[4 * i + 2] = q.z; a[4 * i + 3] = q.w;
            }
            _Pragma("unroll") for (int j = 0; j < TN / 4; j++) {
                const T4 q = Bs4[((s * BK + kk) * PB + j * (BN / (TN / 4)) + tx * 4) / 4];
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
    S += s_off + b * S_BS;
    _Pragma("unroll") for (int i = 0; i < TM; i++) {
        const IDX m = m0 + (i / 4) * (BM / (TM / 4)) + ty * 4 + (i % 4);
        if (EDGE_M && m >= M) continue;
        _Pragma("unroll") for (int j = 0; j < TN; j++) {
            const IDX n = n0 + (j / 4) * (BN / (TN / 4)) + tx * 4 + (j % 4);
            if (EDGE_N && n >= N) continue;
            C[m * C_RS + n] = (T)(alpha * acc[i][j] + (beta != 0 ? beta * (ACC)S[m * S_RS + n * S_CS] : (ACC)0));
        }
    }
}
