/* torch's bins (adaptive_bins.cl). The forward is one work item per output, the CPU's loop: the bin's first
   element is the index until a larger value or a NaN replaces it (so the last NaN of a bin wins, and a bin of
   -inf names its first element). */
__kernel void adaptive_max_pool2d(__global const T* x, long x_off, __global T* out, __global long* index,
                                  long planes, long H, long W, long OH, long OW) {
    long g = get_global_id(0);
    if (g >= planes * OH * OW) return;
    long p = g / (OH * OW), oy = (g / OW) % OH, ox = g % OW;
    long y0 = bin_start(oy, H, OH), y1 = bin_end(oy, H, OH), x0 = bin_start(ox, W, OW), x1 = bin_end(ox, W, OW);
    __global const T* plane = x + x_off + p * H * W;
    T best = -INFINITY;
    long where = y0 * W + x0;
    for (long iy = y0; iy < y1; ++iy)
        for (long ix = x0; ix < x1; ++ix) {
            T v = plane[iy * W + ix];
            if (v > best || v != v) { best = v; where = iy * W + ix; }
        }
    out[g] = best;
    index[g] = where;
}
/* one work item per input element: it gathers the gradients of the outputs whose bin holds it and whose index
   names it, in output order (the order in which the CPU's scatter adds them); no atomics */
__kernel void adaptive_max_pool2d_backward(__global const T* grad, long grad_off, __global const long* index,
                                           long index_off, __global T* gx, long planes, long H, long W, long OH,
                                           long OW) {
    long g = get_global_id(0);
    if (g >= planes * H * W) return;
    long p = g / (H * W), where = g % (H * W), iy = where / W, ix = where % W;
    T acc = 0;
    for (long oy = bin_start(iy, OH, H); oy < OH; ++oy) {
        long y0 = bin_start(oy, H, OH), y1 = bin_end(oy, H, OH);
        if (y0 > iy) break;
        if (iy >= y1) continue;
        for (long ox = bin_start(ix, OW, W); ox < OW; ++ox) {
            long x0 = bin_start(ox, W, OW), x1 = bin_end(ox, W, OW);
            if (x0 > ix) break;
            if (ix >= x1) continue;
            long o = (p * OH + oy) * OW + ox;
            if (index[index_off + o] == where) acc += grad[grad_off + o];
        }
    }
    gx[g] = acc;
}
