/* per (channel, part) work-group: sums over the part's elements of channel c of a contiguous (N, C, HW) x.
   forward: d = x - x[n=0, c, 0] (a shift against cancellation), sums d and d*d;
   backward: d = x - center[c], sums g and g*d. */
__kernel void bn_partials(__global const T* x, long x_off, __global const T* g, long g_off,
                          __global const T* center, long center_off, __global ACC* partials, long C, long HW, long M,
                          long part_len, long parts, int backward) {
    long c = get_group_id(0) / parts, p = get_group_id(0) % parts;
    int t = get_local_id(0);
    long begin = p * part_len, end = min(M, begin + part_len);
    ACC shift = backward ? (ACC)center[center_off + c] : (ACC)x[x_off + c * HW];
    ACC s1 = 0, s2 = 0;
    for (long j = begin + t; j < end; j += LOCAL) {
        long i = (j / HW) * C * HW + c * HW + j % HW;
        ACC d = (ACC)x[x_off + i] - shift;
        if (backward) { ACC gv = (ACC)g[g_off + i]; s1 += gv; s2 += gv * d; } else { s1 += d; s2 += d * d; }
    }
    __local ACC l1[LOCAL], l2[LOCAL];
    l1[t] = s1; l2[t] = s2;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = LOCAL / 2; h > 0; h >>= 1) {
        if (t < h) { l1[t] += l1[t + h]; l2[t] += l2[t + h]; }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (t == 0) { partials[(c * parts + p) * 2] = l1[0]; partials[(c * parts + p) * 2 + 1] = l2[0]; }
}
/* per channel: the sum of g from bn_partials (a convolution's bias gradient) */
__kernel void channel_sums(__global const ACC* partials, long parts, __global T* out, long C) {
    long c = get_global_id(0);
    if (c >= C) return;
    ACC s = 0;
    for (long p = 0; p < parts; ++p) s += partials[(c * parts + p) * 2];
    out[c] = (T)s;
}
/* per channel, training forward: batch mean and 1/std, the running statistics (unbiased variance), and the
   coefficients of bn_apply: (mean, invstd * weight, bias, unused) */
__kernel void bn_forward_stats(__global const ACC* partials, long parts, long M, __global const T* x, long x_off,
                               long HW, __global const T* w, long w_off, __global const T* b, long b_off,
                               int affine_w, int affine_b, __global T* save_mean, __global T* save_invstd,
                               __global T* rmean, long rm_off, __global T* rvar, long rv_off, int running,
                               ACC eps, ACC momentum, __global ACC* coef, long C) {
    long c = get_global_id(0);
    if (c >= C) return;
    ACC s1 = 0, s2 = 0;
    for (long p = 0; p < parts; ++p) { s1 += partials[(c * parts + p) * 2]; s2 += partials[(c * parts + p) * 2 + 1]; }
    ACC mu = s1 / M, var = s2 / M - mu * mu;
    var = var < 0 ? 0 : var;
    ACC mean = (ACC)x[x_off + c * HW] + mu, invstd = 1 / sqrt(var + eps);
    save_mean[c] = (T)mean; save_invstd[c] = (T)invstd;
    if (running) {
        rmean[rm_off + c] = (T)((ACC)rmean[rm_off + c] * (1 - momentum) + mean * momentum);
        rvar[rv_off + c] = (T)((ACC)rvar[rv_off + c] * (1 - momentum) + var * M / (M > 1 ? M - 1 : 1) * momentum);
    }
    coef[c * 4] = mean; coef[c * 4 + 1] = invstd * (affine_w ? (ACC)w[w_off + c] : 1);
    coef[c * 4 + 2] = affine_b ? (ACC)b[b_off + c] : 0; coef[c * 4 + 3] = 0;
}
/* per channel, backward: grad_weight = sum(g * xhat), grad_bias = sum(g), and bn_backward_apply's
   coefficients (center, k1, k2, invstd * weight): grad_input = (g - k1 - (x - center) * k2) * invstd * weight */
__kernel void bn_backward_stats(__global const ACC* partials, long parts, long M, __global const T* center,
                                long center_off, __global const T* invstd_in, long invstd_off, int invstd_is_var,
                                ACC eps, __global const T* w, long w_off, int affine_w, int training,
                                __global T* grad_w, __global T* grad_b, __global ACC* coef, long C) {
    long c = get_global_id(0);
    if (c >= C) return;
    ACC s1 = 0, s2 = 0;
    for (long p = 0; p < parts; ++p) { s1 += partials[(c * parts + p) * 2]; s2 += partials[(c * parts + p) * 2 + 1]; }
    ACC invstd = invstd_is_var ? 1 / sqrt((ACC)invstd_in[invstd_off + c] + eps) : (ACC)invstd_in[invstd_off + c];
    grad_w[c] = (T)(s2 * invstd); grad_b[c] = (T)s1;
    coef[c * 4] = (ACC)center[center_off + c];
    coef[c * 4 + 1] = training ? s1 / M : 0;
    coef[c * 4 + 2] = training ? s2 * invstd * invstd / M : 0;
    coef[c * 4 + 3] = invstd * (affine_w ? (ACC)w[w_off + c] : 1);
}
/* eval forward in one pass: each element reads its channel's running statistics and affine parameters, and
   computes in T, as the CPU's kernel does (nothing is summed; a double square root per element cost the H100
   a third more time than the two-kernel version it replaced) */
__kernel void bn_eval(__global const T* x, long x_off, __global const T* rmean, long rm_off, __global const T* rvar,
                      long rv_off, __global const T* w, long w_off, __global const T* b, long b_off, int affine_w,
                      int affine_b, ACC eps, __global T* out, long C, long HW, long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    long c = (i / HW) % C;
    T scale = (T)1 / sqrt(rvar[rv_off + c] + (T)eps) * (affine_w ? w[w_off + c] : (T)1);
    out[i] = (x[x_off + i] - rmean[rm_off + c]) * scale + (affine_b ? b[b_off + c] : (T)0);
}
/* an inference graph's convolution with the eval-mode batch norm after it folded in (graph_rewrite.py): per output
   channel o, scale = bn_w[o] / sqrt(rvar[o] + eps) as bn_eval computes it; w_out[o, ...] = w[o, ...] * scale and
   b_out[o] = bn_b[o] + (cb[o] - rmean[o]) * scale (cb: the convolution's own bias, where it has one). One work
   item per weight; the first of each channel writes its bias. */
__kernel void bn_fold(__global const T* w, long w_off, __global const T* cb, long cb_off, int has_cb,
                      __global const T* rmean, long rm_off, __global const T* rvar, long rv_off,
                      __global const T* bw, long bw_off, __global const T* bb, long bb_off, int affine_w,
                      int affine_b, ACC eps, __global T* w_out, __global T* b_out, long per, long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    long o = i / per;
    T scale = (T)1 / sqrt(rvar[rv_off + o] + (T)eps) * (affine_w ? bw[bw_off + o] : (T)1);
    w_out[i] = w[w_off + i] * scale;
    if (i % per == 0)
        b_out[o] = (affine_b ? bb[bb_off + o] : (T)0) + ((has_cb ? cb[cb_off + o] : (T)0) - rmean[rm_off + o]) * scale;
}
__kernel void bn_apply(__global const T* x, long x_off, __global const ACC* coef, __global T* out, long C, long HW,
                       long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    long c = (i / HW) % C;
    out[i] = (T)(((ACC)x[x_off + i] - coef[c * 4]) * coef[c * 4 + 1] + coef[c * 4 + 2]);
}
__kernel void bn_backward_apply(__global const T* g, long g_off, __global const T* x, long x_off,
                                __global const ACC* coef, __global T* out, long C, long HW, long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    long c = (i / HW) % C;
    out[i] = (T)(((ACC)g[g_off + i] - coef[c * 4 + 1] - ((ACC)x[x_off + i] - coef[c * 4]) * coef[c * 4 + 2])
                 * coef[c * 4 + 3]);
}
