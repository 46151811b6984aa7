/* Winograd F(2x2, 3x3) for stride-1, undilated 3x3 convolutions (Lavin and Gray, "Fast Algorithms for
   Convolutional Neural Networks", CVPR 2016): each 2x2 output tile is A^T [(G g G^T) . (B^T d B)] A over a 4x4
   input tile d, so the 16 element-wise products become 16 GEMMs, (CO x CI) @ (CI x tiles), with 4 multiplies per
   output where direct convolution has 9. #defines: CI, CO channels in and out, H x W in, OH x OW out, PAD, TH x TW
   tiles per image. */
__kernel void wino_weight(__global const T* w, long w_off, __global T* u, int flip) {
    /* u[xi][co][ci] = (G g G^T)[xi]; g = w[co][ci], or with flip (the data gradient) w[ci][co] turned 180 degrees */
    IDX g = get_global_id(0);
    if (g >= CO * CI) return;
    IDX co = g / CI, ci = g % CI;
    T k[3][3], t[4][3];
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j)
            k[i][j] = flip ? w[w_off + ((long)(ci * CO + co) * 3 + (2 - i)) * 3 + (2 - j)]
                           : w[w_off + ((long)(co * CI + ci) * 3 + i) * 3 + j];
    for (int j = 0; j < 3; ++j) {
        t[0][j] = k[0][j];
        t[1][j] = (T)0.5 * (k[0][j] + k[1][j] + k[2][j]);
        t[2][j] = (T)0.5 * (k[0][j] - k[1][j] + k[2][j]);
        t[3][j] = k[2][j];
    }
    for (int i = 0; i < 4; ++i) {
        T r[4] = {t[i][0], (T)0.5 * (t[i][0] + t[i][1] + t[i][2]), (T)0.5 * (t[i][0] - t[i][1] + t[i][2]), t[i][2]};
        for (int j = 0; j < 4; ++j) u[(long)(i * 4 + j) * CO * CI + g] = r[j];
    }
}
__kernel void wino_input(__global const T* x, long x_off, __global T* v, long NT) {
    /* v[xi][ci][p] = (B^T d B)[xi] for tile p (image-major) of a chunk's NT tiles */
    IDX g = get_global_id(0);
    if (g >= CI * NT) return;
    IDX ci = g / NT, p = g % NT;
    IDX n = p / (TH * TW), tile = p % (TH * TW);
    IDX y0 = (tile / TW) * 2 - PAD, x0 = (tile % TW) * 2 - PAD;
    __global const T* plane = x + x_off + (long)(n * CI + ci) * H * W;
    T d[4][4], s[4][4];
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
            IDX y = y0 + i, xx = x0 + j;
            d[i][j] = (y >= 0 && y < H && xx >= 0 && xx < W) ? plane[y * W + xx] : (T)0;
        }
    for (int j = 0; j < 4; ++j) {
        s[0][j] = d[0][j] - d[2][j]; s[1][j] = d[1][j] + d[2][j];
        s[2][j] = d[2][j] - d[1][j]; s[3][j] = d[1][j] - d[3][j];
    }
    long plane_size = (long)CI * NT;
    for (int i = 0; i < 4; ++i) {
        v[(i * 4 + 0) * plane_size + g] = s[i][0] - s[i][2];
        v[(i * 4 + 1) * plane_size + g] = s[i][1] + s[i][2];
        v[(i * 4 + 2) * plane_size + g] = s[i][2] - s[i][1];
        v[(i * 4 + 3) * plane_size + g] = s[i][1] - s[i][3];
    }
}
__kernel void wino_output(__global const T* m, __global T* out, long out_off, long NT) {
    /* out tile = A^T m A from m[xi][co][p] */
    IDX g = get_global_id(0);
    if (g >= CO * NT) return;
    IDX co = g / NT, p = g % NT;
    IDX n = p / (TH * TW), tile = p % (TH * TW);
    IDX oy = (tile / TW) * 2, ox = (tile % TW) * 2;
    long plane_size = (long)CO * NT;
    T a[4][4], s[2][4];
    for (int i = 0; i < 16; ++i) a[i / 4][i % 4] = m[i * plane_size + g];
    for (int j = 0; j < 4; ++j) {
        s[0][j] = a[0][j] + a[1][j] + a[2][j];
        s[1][j] = a[1][j] - a[2][j] - a[3][j];
    }
    __global T* plane = out + out_off + (long)(n * CO + co) * OH * OW;
    for (int i = 0; i < 2; ++i) {
        if (oy + i >= OH) break;
        plane[(oy + i) * OW + ox] = s[i][0] + s[i][1] + s[i][2];
        if (ox + 1 < OW) plane[(oy + i) * OW + ox + 1] = s[i][1] - s[i][2] - s[i][3];
    }
}
