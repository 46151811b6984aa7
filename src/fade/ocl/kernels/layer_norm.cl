/* Layer norm over the last n elements of a contiguous (rows, n) x, one work-group of LOCAL work items per row
   (fixed-order tree sums in local memory, accumulated in ACC). Defines: T, ACC, LOCAL (a power of two). */
ACC row_sum(__local ACC* red, ACC v, int t) {
    red[t] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = LOCAL / 2; h > 0; h >>= 1) {
        if (t < h) red[t] += red[t + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    ACC s = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return s;
}
/* forward: the row's mean, then 1/sqrt(variance + eps) from the centred values (two passes over the row, the
   second from cache), then out = (x - mean) * rstd * w + b; mean and rstd saved per row */
__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void ln_forward(__global const T* x, long x_off, __global const T* w, long w_off, __global const T* b, long b_off,
                int affine_w, int affine_b, ACC eps, __global T* out, long out_off, __global T* mean,
                __global T* rstd, long n) {
    long r = get_group_id(0);
    int t = get_local_id(0);
    __local ACC red[LOCAL];
    __global const T* xr = x + x_off + r * n;
    ACC s = 0;
    for (long j = t; j < n; j += LOCAL) s += (ACC)xr[j];
    ACC mu = row_sum(red, s, t) / n;
    ACC q = 0;
    for (long j = t; j < n; j += LOCAL) { ACC d = (ACC)xr[j] - mu; q += d * d; }
    ACC var = row_sum(red, q, t) / n;
    ACC rs = 1 / sqrt(var + eps);
    for (long j = t; j < n; j += LOCAL) {
        ACC v = ((ACC)xr[j] - mu) * rs;
        if (affine_w) v *= (ACC)w[w_off + j];
        if (affine_b) v += (ACC)b[b_off + j];
        out[out_off + r * n + j] = (T)v;
    }
    if (t == 0) { mean[r] = (T)mu; rstd[r] = (T)rs; }
}
/* the input gradient, per row: with g = grad * w and xhat = (x - mean) * rstd,
   grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)) */
__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void ln_backward_input(__global const T* grad, long g_off, __global const T* x, long x_off, __global const T* mean,
                       long m_off, __global const T* rstd, long r_off, __global const T* w, long w_off, int affine_w,
                       __global T* out, long n) {
    long r = get_group_id(0);
    int t = get_local_id(0);
    __local ACC red[LOCAL];
    __global const T* gr = grad + g_off + r * n;
    __global const T* xr = x + x_off + r * n;
    ACC mu = (ACC)mean[m_off + r], rs = (ACC)rstd[r_off + r];
    ACC s1 = 0, s2 = 0;
    for (long j = t; j < n; j += LOCAL) {
        ACC g = (ACC)gr[j] * (affine_w ? (ACC)w[w_off + j] : 1);
        s1 += g; s2 += g * ((ACC)xr[j] - mu) * rs;
    }
    ACC mean_g = row_sum(red, s1, t) / n, mean_gx = row_sum(red, s2, t) / n;
    for (long j = t; j < n; j += LOCAL) {
        ACC g = (ACC)gr[j] * (affine_w ? (ACC)w[w_off + j] : 1);
        out[r * n + j] = (T)(rs * (g - mean_g - ((ACC)xr[j] - mu) * rs * mean_gx));
    }
}
/* the weight and bias gradients' partial sums over a slice of part_rows rows, one work item per (part, column):
   partial[p * n + j] = sum of grad * xhat, partial[(parts + p) * n + j] = sum of grad (reads coalesced along j) */
__kernel void ln_backward_params(__global const T* grad, long g_off, __global const T* x, long x_off,
                                 __global const T* mean, long m_off, __global const T* rstd, long r_off,
                                 __global ACC* partial, long rows, long n, long parts, long part_rows) {
    long g = get_global_id(0);
    if (g >= parts * n) return;
    long p = g / n, j = g % n;
    long begin = p * part_rows, end = min(rows, begin + part_rows);
    ACC sw = 0, sb = 0;
    for (long r = begin; r < end; ++r) {
        ACC gv = (ACC)grad[g_off + r * n + j];
        sw += gv * ((ACC)x[x_off + r * n + j] - (ACC)mean[m_off + r]) * (ACC)rstd[r_off + r];
        sb += gv;
    }
    partial[p * n + j] = sw;
    partial[(parts + p) * n + j] = sb;
}
/* the parts summed: grad_w[j] and grad_b[j] (either may be skipped) */
__kernel void ln_params_finish(__global const ACC* partial, long parts, long n, __global T* grad_w, long gw_off,
                               __global T* grad_b, long gb_off, int want_w, int want_b) {
    long j = get_global_id(0);
    if (j >= n) return;
    ACC sw = 0, sb = 0;
    for (long p = 0; p < parts; ++p) { sw += partial[p * n + j]; sb += partial[(parts + p) * n + j]; }
    if (want_w) grad_w[gw_off + j] = (T)sw;
    if (want_b) grad_b[gb_off + j] = (T)sb;
}
/* the forward over rows laid out as blocks of INNER adjacent rows: row r's element j at
   x_off + (r / inner) * outer + r % inner + j * js (a channels-first tensor normalized over its channels:
   convnext's permuted layer norm, which otherwise copies its input first). A work-group of 32 rows x 8 column
   slices: the statistics' reads are coalesced along the rows; the output (contiguous rows of n) goes through a
   32 x 32 local tile, so its writes are coalesced along the row too. */
__kernel __attribute__((reqd_work_group_size(32, 8, 1)))
void ln_forward_blocks(__global const T* x, long x_off, long inner, long outer, long js, __global const T* w,
                       long w_off, __global const T* b, long b_off, int affine_w, int affine_b, ACC eps,
                       __global T* out, long out_off, __global T* mean, __global T* rstd, long rows, long n) {
    int lx = get_local_id(0), ly = get_local_id(1);
    long r0 = get_group_id(0) * 32, r = r0 + lx;
    bool live = r < rows;
    __global const T* xr = x + x_off + (live ? (r / inner) * outer + r % inner : 0);
    __local ACC red[8][33];
    __local ACC mu_s[32], rs_s[32];
    __local T tile[32][33];
    ACC s = 0;
    if (live) for (long j = ly; j < n; j += 8) s += (ACC)xr[j * js];
    red[ly][lx] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (ly == 0) {
        ACC t = 0;
        for (int k = 0; k < 8; k++) t += red[k][lx];
        mu_s[lx] = t / n;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    ACC mu = mu_s[lx], q = 0;
    if (live) for (long j = ly; j < n; j += 8) { ACC d = (ACC)xr[j * js] - mu; q += d * d; }
    red[ly][lx] = q;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (ly == 0) {
        ACC t = 0;
        for (int k = 0; k < 8; k++) t += red[k][lx];
        rs_s[lx] = 1 / sqrt(t / n + eps);
        if (live) { mean[r] = (T)mu; rstd[r] = (T)rs_s[lx]; }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (long jb = 0; jb < n; jb += 32) {
        for (int k = ly; k < 32; k += 8) {  /* column jb + k of row lx, read along the rows */
            long j = jb + k;
            tile[k][lx] = (live && j < n) ? xr[j * js] : (T)0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = ly; k < 32; k += 8) {  /* column jb + lx of row k, written along the row */
            long rr = r0 + k, j = jb + lx;
            if (rr < rows && j < n) {
                ACC v = ((ACC)tile[lx][k] - mu_s[k]) * rs_s[k];
                if (affine_w) v *= (ACC)w[w_off + j];
                if (affine_b) v += (ACC)b[b_off + j];
                out[out_off + rr * n + j] = (T)v;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
