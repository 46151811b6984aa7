"""The operator-coverage sweep: every OpInfo op × dtype run on a device against the CPU and classified
(ok, mismatch, unsupported, error, crash, hang, slow), and the gap table between two such sweeps.

    from fade.measure.suites.ops import run_ops_sweep, compare_ops
    sweep = run_ops_sweep("cuda", dtypes=["float32", "bfloat16"], out="ops-cuda.jsonl")
    sweep.summary["families"]["linalg"]["pct_ok"]
    gap = compare_ops("ops-cuda.jsonl", "ops-rocm.jsonl")   # works_a_not_b, mismatch_b_only, speed, ...

Modules, in processing order: opdb (op_db, claims, test_compare_cpu policy), sized (realistic-size
probes), probe (one op × dtype in the worker), closeness (output vs CPU), outcome (classes and
thresholds), sweep (the run), results (reading records back), gap (summaries, compare), render.
"""

from fade.analyze.ops.gap import compare_ops
from fade.analyze.ops.rows import load_ops_file
from fade.measure.suites.ops.sweep import OpsCannotRun, OpsSweep, run_ops_sweep

__all__ = ["run_ops_sweep", "compare_ops", "load_ops_file", "OpsSweep", "OpsCannotRun"]
