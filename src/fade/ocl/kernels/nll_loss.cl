__kernel void nll_rows(__global const T* x, long x_off, __global const long* target, long t_off,
                       __global T* loss, __global T* weight, long rows, long classes, long ignore) {
    long r = get_global_id(0);
    if (r >= rows) return;
    long t = target[t_off + r];
    int skip = t == ignore || t < 0 || t >= classes;
    loss[r] = skip ? (T)0 : -x[x_off + r * classes + t];
    weight[r] = skip ? (T)0 : (T)1;
}
__kernel void nll_grad(__global T* grad, __global const long* target, long t_off, __global const T* scale,
                       long s_off, long s_stride, __global const T* total_weight, long w_off, int mean, long rows,
                       long classes, long ignore) {
    /* "mean" divides by total_weight read here, on the device: no host read (and so no sync) per step */
    long r = get_global_id(0);
    if (r >= rows) return;
    long t = target[t_off + r];
    if (t == ignore || t < 0 || t >= classes) return;
    grad[r * classes + t] = -scale[s_off + r * s_stride] / (mean ? total_weight[w_off] : (T)1);
}
