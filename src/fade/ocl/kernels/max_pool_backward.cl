/* one work item per input element: it gathers the gradients of the outputs whose window can hold it and whose
   index names it, in output order (the CPU's order of accumulation); no atomics, every element in parallel */
__kernel void max_pool2d_backward_c(__global const T* grad, long grad_off, __global const long* index,
                                    long index_off, __global T* out) {
    IDX g = get_global_id(0);
    if (g >= PLANES * H * W) return;
    IDX p = g / (H * W), where = g % (H * W), iy = where / W, ix = where % W;
    IDX y0 = iy + PH - EH, x0 = ix + PW - EW;  /* EH = (KH - 1) * DH: the window's extent less one */
    IDX oy_lo = y0 <= 0 ? 0 : (y0 + SH - 1) / SH, oy_hi = min((IDX)((iy + PH) / SH), (IDX)(OH - 1));
    IDX ox_lo = x0 <= 0 ? 0 : (x0 + SW - 1) / SW, ox_hi = min((IDX)((ix + PW) / SW), (IDX)(OW - 1));
    T acc = 0;
    for (IDX oy = oy_lo; oy <= oy_hi; ++oy)
        for (IDX ox = ox_lo; ox <= ox_hi; ++ox) {
            IDX o = p * OH * OW + oy * OW + ox;
            if (index[index_off + o] == (long)where) acc += grad[grad_off + o];
        }
    out[g] = acc;
}
