"""Choices measured on the device once per shape and kept for the process, like cudnn.benchmark: a convolution's
GEMM layout (convolution.py), a GEMM's kernel (gemm.py)."""

from __future__ import annotations

import math
import time

RUNS = 3  # timed runs per option, the fastest kept: with one run, a busy host once made resnet18 inference run
# its 14 x 14 and 7 x 7 layers per image on the H100 (device time 15.3 -> 22.0 ms a step)


def fastest(dev, table: dict, key, options: tuple, run, clock=time.perf_counter):
    """table[key], or, the first time, the fastest of `options` by `run(option)` (each run once to build its
    programs, then RUNS times with the queue finished on both sides, its fastest run counted; the first option
    on a tie), remembered in table[key]."""
    chosen = table.get(key)
    if chosen is None:
        seconds = {}
        for option in options:
            run(option)
            dev.queue.finish()
            for _ in range(RUNS):
                start = clock()
                run(option)
                dev.queue.finish()
                seconds[option] = min(seconds.get(option, math.inf), clock() - start)
        chosen = table[key] = min(options, key=seconds.__getitem__)
    return chosen
