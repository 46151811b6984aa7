__kernel void im2col(__global const T* x, long x_off, __global T* cols, long CS) {
    /* cols is (C*KH*KW, CS >= images*OH*OW): the columns of a chunk's images side by side, image-major in a row;
       work item (rest, row): rest = image * OH*OW + pixel. The geometry is compile-time (#defines): constant
       divisors become multiplications */
    IDX rest = get_global_id(0), row = get_global_id(1);
    IDX image = rest / (OH * OW), l = rest % (OH * OW);
    IDX c = row / (KH * KW), r = row % (KH * KW);
    IDX iy = (l / OW) * SH - PH + (r / KW) * DH, ix = (l % OW) * SW - PW + (r % KW) * DW;
    cols[(long)row * CS + rest] = (iy >= 0 && iy < H && ix >= 0 && ix < W)
        ? x[x_off + ((long)(image * C + c) * H + iy) * W + ix] : (T)0;
}
__kernel void col2im(__global const T* cols, __global T* x, long x_off, long CS, long NB) {
    /* the gather form of col2im: each input element sums the columns that read it, in a fixed order */
    IDX g = get_global_id(0);
    if (g >= NB * C * H * W) return;
    IDX image = g / (C * H * W), c = (g / (H * W)) % C, iy = (g / W) % H, ix = g % W;
    T acc = 0;
    FOR_READERS(acc += cols[(long)((c * KH + ki) * KW + kj) * CS + image * (OH * OW) + oy * OW + ox]);
    x[x_off + g] = acc;
}
__kernel void depthwise(__global const T* x, long x_off, __global const T* w, long w_off, __global T* out) {
    /* groups == C: output channel o reads input channel o / M (M outputs per input channel) */
    IDX g = get_global_id(0);
    x += x_off; w += w_off;
    if (g >= N * C * M * OH * OW) return;
    IDX ox = g % OW, oy = (g / OW) % OH, o = (g / (OH * OW)) % (C * M), n = g / (C * M * OH * OW);
    __global const T* plane = x + (n * C + o / M) * H * W;
    T acc = 0;
    for (IDX ki = 0; ki < KH; ++ki) {
        IDX iy = oy * SH - PH + ki * DH;
        if (iy < 0 || iy >= H) continue;
        for (IDX kj = 0; kj < KW; ++kj) {
            IDX ix = ox * SW - PW + kj * DW;
            if (ix < 0 || ix >= W) continue;
            acc += plane[iy * W + ix] * w[(o * KH + ki) * KW + kj];
        }
    }
    out[g] = acc;
}
__kernel void depthwise_grad_input(__global const T* grad, long grad_off, __global const T* w, long w_off,
                                   __global T* gx) {
    IDX g = get_global_id(0);
    grad += grad_off; w += w_off;
    if (g >= N * C * H * W) return;
    IDX ix = g % W, iy = (g / W) % H, c = (g / (H * W)) % C, n = g / (C * H * W);
    T acc = 0;
    for (IDX m = 0; m < M; ++m) {
        IDX o = c * M + m;
        __global const T* plane = grad + (n * C * M + o) * OH * OW;
        FOR_READERS(acc += plane[oy * OW + ox] * w[(o * KH + ki) * KW + kj]);
    }
    gx[g] = acc;
}
__kernel void depthwise_grad_weight(__global const T* grad, long grad_off, __global const T* x, long x_off,
                                    __global T* partial) {
    /* partial[n * C * M * KH * KW + o * KH * KW + r]: one image's share of one weight's gradient; summed over
       the images after (sum_pieces) */
    IDX g = get_global_id(0);
    grad += grad_off; x += x_off;
    if (g >= C * M * KH * KW * N) return;
    IDX n = g / (C * M * KH * KW), r = g % (KH * KW), o = (g / (KH * KW)) % (C * M);
    IDX ki = r / KW, kj = r % KW;
    __global const T* gplane = grad + (n * C * M + o) * OH * OW;
    __global const T* xplane = x + (n * C + o / M) * H * W;
    ACC acc = 0;
    for (IDX oy = 0; oy < OH; ++oy) {
        IDX iy = oy * SH - PH + ki * DH;
        if (iy < 0 || iy >= H) continue;
        for (IDX ox = 0; ox < OW; ++ox) {
            IDX ix = ox * SW - PW + kj * DW;
            if (ix < 0 || ix >= W) continue;
            acc += gplane[oy * OW + ox] * xplane[iy * W + ix];
        }
    }
    partial[g] = acc;
}
