/* FOR_READERS(BODY): BODY for each output (oy, ox) and kernel tap (ki, kj) whose window reads input (iy, ix) */
#define FOR_READERS(BODY) \
    for (IDX ki = 0; ki < KH; ++ki) { \
        IDX ty = iy + PH - ki * DH; \
        if (ty < 0 || ty % SH) continue; \
        IDX oy = ty / SH; \
        if (oy >= OH) continue; \
        for (IDX kj = 0; kj < KW; ++kj) { \
            IDX tx = ix + PW - kj * DW; \
            if (tx < 0 || tx % SW) continue; \
            IDX ox = tx / SW; \
            if (ox >= OW) continue; \
            BODY; \
        } \
    }
