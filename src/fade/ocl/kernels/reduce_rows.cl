/* One work-group per (part, row) of a contiguous (rows, n) x: its work items stride over the part's elements,
   then a tree in local memory combines them in a fixed order (results repeat; no atomics, so NaN cannot hang
   it). Defines: TX, TO (element types), ACC (accumulator), LOCAL (work-group size, a power of two), IDENTITY,
   COMBINE(a, b) (NaN-propagating for max and min) and FINAL(acc) (mean divides by `divisor`). out[p * rows + r]
   is the part's result: one part per row writes out[r]. */
__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void reduce_rows(__global const TX* xs, long x_off, __global TO* out, long out_off, long n, long rows,
                 long part_len, long divisor) {
    long group = get_group_id(0), r = group % rows, p = group / rows;
    int t = get_local_id(0);
    long begin = p * part_len, end = min(n, begin + part_len);
    __global const TX* x = xs + x_off + r * n;
    __local ACC red[LOCAL];
    ACC acc = IDENTITY;
    for (long j = begin + t; j < end; j += LOCAL) { ACC v = (ACC)x[j]; acc = COMBINE(acc, v); }
    red[t] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = LOCAL / 2; h > 0; h >>= 1) {
        if (t < h) { ACC a = red[t], b = red[t + h]; red[t] = COMBINE(a, b); }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (t == 0) { ACC a = red[0]; out[out_off + group] = (TO)(FINAL(a)); }
}
