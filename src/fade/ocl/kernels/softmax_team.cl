/* Row softmax (LOG: log-softmax) of a contiguous (rows, N) matrix, N at most TEAM * VALUES: a team of TEAM work
   items per row (get_local_id(0)), TEAMS rows a work-group (get_local_id(1)); each item holds VALUES of the row's
   values in registers (elements lane, lane + TEAM, ...), so the row is read once and written once; the team's
   max and sum go through local memory. NaN wins the max (a row holding NaN gives NaN, as on the CPU). SAFE
   (_safe_softmax): a row of -inf only gives zeros. Defines: T, ACC, N, VALUES, TEAM, TEAMS, LOG, SAFE. */

/* The max (NaN winning) and the sum of the values `v` a team's items hold, through `red`, the team's TEAM slots
   of local memory; every item of the work-group calls them (they hold barriers), and `red` is free again when
   they return. */
ACC team_max(__local ACC* red, const int lane, const ACC v) {
    red[lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = TEAM / 2; h > 0; h >>= 1) {
        if (lane < h) {
            const ACC o = red[lane + h], w = red[lane];
            red[lane] = (w != w) ? w : ((o != o || o > w) ? o : w);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const ACC m = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return m;
}

ACC team_sum(__local ACC* red, const int lane, const ACC v) {
    red[lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = TEAM / 2; h > 0; h >>= 1) {
        if (lane < h) red[lane] += red[lane + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const ACC s = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return s;
}

__kernel __attribute__((reqd_work_group_size(TEAM, TEAMS, 1)))
void softmax_team(__global const T* xs, long x_off, __global T* out, long out_off, long rows) {
    const int lane = get_local_id(0), team = get_local_id(1);
    const long r = (long)get_group_id(1) * TEAMS + team;
    const bool live = r < rows;
    __global const T* x = xs + x_off + r * N;
    __global T* y = out + out_off + r * N;
    __local ACC red[TEAMS][TEAM];
    ACC v[VALUES];
    ACC m = -INFINITY;
    _Pragma("unroll") for (int k = 0; k < VALUES; k++) {
        const int j = lane + k * TEAM;
        v[k] = (live && j < N) ? (ACC)x[j] : -INFINITY;
        m = (m != m) ? m : ((v[k] != v[k] || v[k] > m) ? v[k] : m);
    }
    m = team_max(red[team], lane, m);
    ACC s = 0;
    _Pragma("unroll") for (int k = 0; k < VALUES; k++) {
        if (lane + k * TEAM < N) s += exp(v[k] - m);
    }
    s = team_sum(red[team], lane, s);
    if (!live) return;
    _Pragma("unroll") for (int k = 0; k < VALUES; k++) {
        const int j = lane + k * TEAM;
        if (j < N) {
#if LOG
            ACC value = (v[k] - m) - log(s);
#else
            ACC value = exp(v[k] - m) / s;
#endif
#if SAFE
            if (m == -INFINITY) value = 0;
#endif
            y[j] = (T)value;
        }
    }
}

/* The backward of softmax_team's rows: grad_in = y * (g - sum(g * y)) (LOG: g - exp(y) * sum(g)), y the forward's
   output and g the output's gradient, both contiguous (rows, N); same teams. */
__kernel __attribute__((reqd_work_group_size(TEAM, TEAMS, 1)))
void softmax_team_backward(__global const T* gs, long g_off, __global const T* ys, long y_off, __global T* out,
                           long out_off, long rows) {
    const int lane = get_local_id(0), team = get_local_id(1);
    const long r = (long)get_group_id(1) * TEAMS + team;
    const bool live = r < rows;
    __global const T* g = gs + g_off + r * N;
    __global const T* y = ys + y_off + r * N;
    __local ACC red[TEAMS][TEAM];
    ACC gv[VALUES], yv[VALUES];
    ACC s = 0;
    _Pragma("unroll") for (int k = 0; k < VALUES; k++) {
        const int j = lane + k * TEAM;
        const bool in = live && j < N;
        gv[k] = in ? (ACC)g[j] : 0;
        yv[k] = in ? (ACC)y[j] : 0;
#if LOG
        s += gv[k];
#else
        s += gv[k] * yv[k];
#endif
    }
    s = team_sum(red[team], lane, s);
    if (!live) return;
    _Pragma("unroll") for (int k = 0; k < VALUES; k++) {
        const int j = lane + k * TEAM;
        if (j < N) {
#if LOG
            out[out_off + r * N + j] = (T)(gv[k] - exp(yv[k]) * s);
#else
            out[out_off + r * N + j] = (T)(yv[k] * (gv[k] - s));
#endif
        }
    }
}
