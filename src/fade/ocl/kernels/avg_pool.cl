/* torch's windows (cpu_avg_pool): [o S - P, min(o S - P + K, I + P)) sized for count_include_pad, then clipped
   to the input [0, I) for the sum and for the divisor without count_include_pad; DIV > 0: divisor_override */
inline long avg_divisor(long oy, long ox, long H, long W, long KH, long KW, long SH, long SW, long PH, long PW,
                        long DIV, int include_pad) {
    if (DIV > 0) return DIV;
    long y0 = oy * SH - PH, x0 = ox * SW - PW;
    long y1 = min(y0 + KH, H + PH), x1 = min(x0 + KW, W + PW);
    if (include_pad) return (y1 - y0) * (x1 - x0);
    return (min(y1, H) - max(y0, (long)0)) * (min(x1, W) - max(x0, (long)0));
}
__kernel void avg_pool2d(__global const T* x, long x_off, __global T* out, long planes, long H, long W, long OH,
                         long OW, long KH, long KW, long SH, long SW, long PH, long PW, long DIV, int include_pad) {
    long g = get_global_id(0);
    if (g >= planes * OH * OW) return;
    long p = g / (OH * OW), oy = (g / OW) % OH, ox = g % OW;
    long y0 = oy * SH - PH, x0 = ox * SW - PW;
    long y1 = min(min(y0 + KH, H + PH), H), x1 = min(min(x0 + KW, W + PW), W);
    y0 = max(y0, (long)0); x0 = max(x0, (long)0);
    if (y0 >= y1 || x0 >= x1) { out[g] = 0; return; }
    __global const T* plane = x + x_off + p * H * W;
    ACC acc = 0;
    for (long iy = y0; iy < y1; ++iy)
        for (long ix = x0; ix < x1; ++ix) acc += plane[iy * W + ix];
    out[g] = (T)(acc / (ACC)avg_divisor(oy, ox, H, W, KH, KW, SH, SW, PH, PW, DIV, include_pad));
}
/* one work item per input element: it sums grad / divisor over the windows that hold it (no atomics) */
__kernel void avg_pool2d_backward(__global const T* grad, long grad_off, __global T* gx, long planes, long H,
                                  long W, long OH, long OW, long KH, long KW, long SH, long SW, long PH, long PW,
                                  long DIV, int include_pad) {
    long g = get_global_id(0);
    if (g >= planes * H * W) return;
    long p = g / (H * W), iy = (g / W) % H, ix = g % W;
    long y0 = iy + PH - KH + 1, x0 = ix + PW - KW + 1;
    long oy_lo = y0 <= 0 ? 0 : (y0 + SH - 1) / SH, oy_hi = min((iy + PH) / SH, OH - 1);
    long ox_lo = x0 <= 0 ? 0 : (x0 + SW - 1) / SW, ox_hi = min((ix + PW) / SW, OW - 1);
    __global const T* plane = grad + grad_off + p * OH * OW;
    ACC acc = 0;
    for (long oy = oy_lo; oy <= oy_hi; ++oy)
        for (long ox = ox_lo; ox <= ox_hi; ++ox)
            acc += (ACC)plane[oy * OW + ox] / (ACC)avg_divisor(oy, ox, H, W, KH, KW, SH, SW, PH, PW, DIV,
                                                                include_pad);
    gx[g] = (T)acc;
}
