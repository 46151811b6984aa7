"""Measuring what PyTorch gets from a device: the timing engine, the isolated case runner, the versioned
result records and the micro suite. torch is imported only when something is measured.

    from fade.measure import run_micro, summarize
    summary = run_micro("cuda", quick=True, out="results/micro.jsonl")
    rows = summarize(summary.records)

    from fade.measure import measure
    timing = measure(lambda: a @ b, device="cuda:0")   # median_s, iqr_s, cov, noisy, samples_s
"""

from fade.measure.suites.micro.suite import run_micro
from fade.results import read_records, summarize
from fade.measure.timing import Timing, measure

__all__ = ["run_micro", "measure", "Timing", "read_records", "summarize"]
