/* torch's adaptive pooling bins: output o of O over an input of I covers [floor(o I / O), ceil((o + 1) I / O)).
   Prefixed to adaptive_avg_pool.cl and adaptive_max_pool.cl. */
inline long bin_start(long o, long in, long out) { return (o * in) / out; }
inline long bin_end(long o, long in, long out) { return ((o + 1) * in + out - 1) / out; }
