/* torch's bins (adaptive_bins.cl); the forward averages each bin, the backward gathers per input element */
__kernel void adaptive_avg_pool2d(__global const T* x, long x_off, __global T* out, long planes, long H, long W,
                                  long OH, long OW) {
    long g = get_global_id(0);
    if (g >= planes * OH * OW) return;
    long p = g / (OH * OW), oy = (g / OW) % OH, ox = g % OW;
    long y0 = bin_start(oy, H, OH), y1 = bin_end(oy, H, OH), x0 = bin_start(ox, W, OW), x1 = bin_end(ox, W, OW);
    __global const T* plane = x + x_off + p * H * W;
    ACC acc = 0;
    for (long iy = y0; iy < y1; ++iy)
        for (long ix = x0; ix < x1; ++ix) acc += plane[iy * W + ix];
    out[g] = (T)(acc / (ACC)((y1 - y0) * (x1 - x0)));
}
__kernel void adaptive_avg_pool2d_backward(__global const T* grad, __global T* gx, long planes, long H, long W,
                                           long OH, long OW) {
    /* gather: each input element sums grad / bin size over the bins that hold it */
    long g = get_global_id(0);
    if (g >= planes * H * W) return;
    long p = g / (H * W), iy = (g / W) % H, ix = g % W;
    ACC acc = 0;
    for (long oy = bin_start(iy, OH, H); oy < OH; ++oy) {
        long y0 = bin_start(oy, H, OH), y1 = bin_end(oy, H, OH);
        if (y0 > iy) break;
        if (iy >= y1) continue;
        for (long ox = bin_start(ix, OW, W); ox < OW; ++ox) {
            long x0 = bin_start(ox, W, OW), x1 = bin_end(ox, W, OW);
            if (x0 > ix) break;
            if (ix >= x1) continue;
            acc += grad[(p * OH + oy) * OW + ox] / (ACC)((y1 - y0) * (x1 - x0));
        }
    }
    gx[g] = (T)acc;
}
