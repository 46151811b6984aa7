/* Direct grouped convolution (groups > 1, more than one input channel a group: ResNeXt, RegNet), no im2col and
   one launch for every group, for groups whose GEMMs are too small to feed a GPU (8 x 72 x pixels a group in
   RegNet). Geometry compiled in (#defines of convolution.cl's set: N C H W KH KW OH OW SH SW PH PW DH DW, M =
   output channels a group) and: CG (input channels a group), OCB (output channels a forward work item makes,
   dividing M), ICB (input channels a data-gradient or weight-gradient work item covers, dividing CG), CHUNK
   (pixels a weight-gradient work-group sums), LANES (its work-group size, a power of two). */
#define KK (KH * KW)
#define COUT (C / CG * M)
/* forward: a work item per (output pixel of an image, block of OCB output channels); x read once per block */
__kernel void grouped_forward(__global const T* x, long x_off, __global const T* w, long w_off, __global T* out) {
    IDX p = get_global_id(0), block = get_global_id(1);
    if (p >= N * OH * OW) return;
    IDX n = p / (OH * OW), l = p % (OH * OW), oy = l / OW, ox = l % OW;
    IDX oc0 = block * OCB, g = oc0 / M;
    __global const T* xg = x + x_off + (n * C + g * CG) * H * W;
    __global const T* wb = w + w_off + oc0 * CG * KK;
    ACC acc[OCB];
    for (int o = 0; o < OCB; ++o) acc[o] = 0;
    for (IDX ic = 0; ic < CG; ++ic) {
        for (IDX ki = 0; ki < KH; ++ki) {
            IDX iy = oy * SH - PH + ki * DH;
            if (iy < 0 || iy >= H) continue;
            for (IDX kj = 0; kj < KW; ++kj) {
                IDX ix = ox * SW - PW + kj * DW;
                if (ix < 0 || ix >= W) continue;
                ACC v = xg[(ic * H + iy) * W + ix];
                for (int o = 0; o < OCB; ++o) acc[o] += v * wb[(o * CG + ic) * KK + ki * KW + kj];
            }
        }
    }
    for (int o = 0; o < OCB; ++o) out[((n * COUT + oc0 + o) * OH * OW) + l] = (T)acc[o];
}
/* data gradient: a work item per (input pixel of an image, block of ICB input channels), summing over its
   group's M output channels and the taps whose windows read the pixel */
__kernel void grouped_grad_input(__global const T* grad, long grad_off, __global const T* w, long w_off,
                                 __global T* gx) {
    IDX p = get_global_id(0), block = get_global_id(1);
    if (p >= N * H * W) return;
    IDX n = p / (H * W), q = p % (H * W), iy = q / W, ix = q % W;
    IDX ic0 = block * ICB, g = ic0 / CG, icl = ic0 % CG;
    ACC acc[ICB];
    for (int i = 0; i < ICB; ++i) acc[i] = 0;
    for (IDX m = 0; m < M; ++m) {
        IDX oc = g * M + m;
        __global const T* plane = grad + grad_off + (n * COUT + oc) * OH * OW;
        __global const T* wo = w + w_off + (oc * CG + icl) * KK;
        FOR_READERS(ACC d = plane[oy * OW + ox]; for (int i = 0; i < ICB; ++i) acc[i] += d * wo[i * KK + ki * KW + kj]);
    }
    for (int i = 0; i < ICB; ++i) gx[(n * C + ic0 + i) * H * W + q] = (T)acc[i];
}
/* weight gradient: a work-group of LANES work items per (output channel, block of ICB input channels, chunk of
   CHUNK pixels of the batch); each lane walks every LANES-th pixel of the chunk (neighbouring lanes, neighbouring
   pixels) summing grad * x for its ICB x KK weights, then the lanes are summed by a tree in local memory, one
   input channel at a time. partial[chunk][oc][CG * KK] (summed over the chunks after). */
__kernel __attribute__((reqd_work_group_size(LANES, 1, 1)))
void grouped_grad_weight(__global const T* grad, long grad_off, __global const T* x, long x_off,
                         __global T* partial) {
    IDX t = get_local_id(0), wg = get_group_id(0);
    IDX blocks = CG / ICB;
    IDX chunk = wg / (COUT * blocks), rest = wg % (COUT * blocks), oc = rest / blocks, icl = (rest % blocks) * ICB;
    IDX g = oc / M;
    ACC acc[ICB * KK];
    for (int i = 0; i < ICB * KK; ++i) acc[i] = 0;
    IDX end = min((IDX)(N * OH * OW), (IDX)((chunk + 1) * CHUNK));
    for (IDX p = chunk * CHUNK + t; p < end; p += LANES) {
        IDX n = p / (OH * OW), l = p % (OH * OW), oy = l / OW, ox = l % OW;
        ACC d = grad[grad_off + (n * COUT + oc) * OH * OW + l];
        __global const T* xg = x + x_off + (n * C + g * CG + icl) * H * W;
        for (IDX ki = 0; ki < KH; ++ki) {
            IDX iy = oy * SH - PH + ki * DH;
            if (iy < 0 || iy >= H) continue;
            for (IDX kj = 0; kj < KW; ++kj) {
                IDX ix = ox * SW - PW + kj * DW;
                if (ix < 0 || ix >= W) continue;
                for (int i = 0; i < ICB; ++i) acc[i * KK + ki * KW + kj] += d * xg[(i * H + iy) * W + ix];
            }
        }
    }
    __local ACC red[KK * LANES];
    __global T* out = partial + ((long)chunk * COUT + oc) * CG * KK + icl * KK;
    for (int i = 0; i < ICB; ++i) {
        for (int k = 0; k < KK; ++k) red[k * LANES + t] = acc[i * KK + k];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int h = LANES / 2; h > 0; h >>= 1) {
            if (t < h) for (int k = 0; k < KK; ++k) red[k * LANES + t] += red[k * LANES + t + h];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        for (int k = t; k < KK; k += LANES) out[i * KK + k] = (T)red[k * LANES];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
