__kernel void max_pool2d(__global const T* x, long x_off, __global T* out, __global long* index, long planes,
                         long H, long W, long OH, long OW, long KH, long KW, long SH, long SW, long PH, long PW,
                         long DH, long DW) {
    long g = get_global_id(0);
    if (g >= planes * OH * OW) return;
    long p = g / (OH * OW), oy = (g / OW) % OH, ox = g % OW;
    __global const T* plane = x + x_off + p * H * W;
    T best = -INFINITY;
    long where = -1;
    for (long ki = 0; ki < KH; ++ki) {
        long iy = oy * SH - PH + ki * DH;
        if (iy < 0 || iy >= H) continue;
        for (long kj = 0; kj < KW; ++kj) {
            long ix = ox * SW - PW + kj * DW;
            if (ix < 0 || ix >= W) continue;
            T v = plane[iy * W + ix];
            if (where < 0 || v > best || v != v) { best = v; where = iy * W + ix; }
        }
    }
    out[g] = best;
    index[g] = where;
}
