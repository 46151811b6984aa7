"""The sweep's rules without torch or a worker: classes, the slow thresholds, dtype-claim findings, families,
the curated list, request parsing, and the gap between two sets of rows."""

import pytest

from fade.errors import FadeUsageError
from fade.analyze.ops import outcome
from fade.analyze.ops.curated import CURATED, CuratedRow, curated_rows_for, is_always_swept
from fade.analyze.ops.families import FAMILIES, family_of
from fade.analyze.ops.gap import GAP_MIN_SLOWER_S, GAP_SPEED_RATIO, compare_sweeps, family_summary
from fade.analyze.ops.rows import ops_row
from fade.measure.suites.ops.sweep import build_cases, parse_dtypes, select_ops


def test_not_implemented_and_dtype_messages_are_unsupported_other_exceptions_are_errors():
    assert outcome.class_of_exception("NotImplementedError", "Could not run 'aten::foo'", claimed=True) == "unsupported"
    assert outcome.class_of_exception("RuntimeError", '"addmm_cuda" not implemented for \'BFloat16\'', claimed=True) == "unsupported"
    assert outcome.class_of_exception("RuntimeError", "No available kernel. Aborting execution.", claimed=True) == "unsupported"
    assert outcome.class_of_exception("RuntimeError", "CUDA error: an illegal memory access was encountered", claimed=True) == "error"
    assert outcome.class_of_exception("ValueError", "expected a 2-D tensor", claimed=True) == "error"


def test_any_failure_of_a_dtype_the_op_does_not_claim_is_unsupported():
    assert outcome.class_of_exception("RuntimeError", "expected scalar type Float", claimed=False) == "unsupported"


def test_worst_sample_decides_and_no_sample_is_untested():
    assert outcome.worst_sample_class(["ok", "mismatch", "unsupported"]) == "mismatch"
    assert outcome.worst_sample_class(["ok", "error", "mismatch"]) == "error"
    assert outcome.worst_sample_class([]) is None


def test_random_and_uninitialized_ops_are_not_compared_by_name():
    for op_id in ("normal.number_mean", "randn_like", "nn.functional.dropout2d", "empty_strided", "new_empty", "bernoulli"):
        assert outcome.not_compared_reason(op_id), op_id
    for op_id in ("nn.functional.normalize", "add", "linalg.svd"):
        assert outcome.not_compared_reason(op_id) is None, op_id


def test_gpu_slower_than_cpu_on_a_tiny_input_is_not_slow():
    """Launch latency: a GPU losing 20 us to 2 us on 400 floats is by design."""
    assert outcome.slow_reason("cuda", 20e-6, 2e-6, 1600) is None


def test_gpu_ten_times_slower_than_cpu_on_a_large_input_is_slow():
    reason = outcome.slow_reason("cuda", 10e-3, 0.5e-3, outcome.SLOW_VS_CPU_MIN_BYTES)
    assert reason and "20x the CPU" in reason


def test_milliseconds_on_a_tiny_input_and_slower_than_cpu_is_slow():
    tiny = 1600
    limit = outcome.SLOW_VS_SIZE_RATIO * outcome.predicted_device_s(tiny)
    assert outcome.slow_reason("cuda", limit * 1.1, 50e-6, tiny)
    assert outcome.slow_reason("cuda", limit * 0.9, 50e-6, tiny) is None
    assert outcome.slow_reason("cuda", limit * 1.1, limit * 2, tiny) is None  # the CPU is slower still
    assert outcome.slow_reason("cpu", 1.0, 1e-6, tiny) is None  # the CPU is the reference


def test_claim_findings_are_a_failing_claim_and_an_unclaimed_dtype_that_runs():
    assert outcome.claim_finding("unsupported", True) == "claimed_fails"
    assert outcome.claim_finding("hang", True) == "claimed_fails"
    assert outcome.claim_finding("ok", False) == "works_unclaimed"
    assert outcome.claim_finding("mismatch", False) == "works_unclaimed"
    assert outcome.claim_finding("unsupported", False) is None
    assert outcome.claim_finding("ok", True) is None
    assert outcome.claim_finding("ok", None) is None  # sized probes claim nothing


@pytest.mark.parametrize(
    "op_id, opinfo_class, family",
    [
        ("nn.functional.scaled_dot_product_attention", "OpInfo", "attention"),
        ("fade.sdpa_flash", None, "attention"),
        ("sparse.sampled_addmm", "OpInfo", "sparse"),
        ("fft.rfft2", "SpectralFuncInfo", "fft"),
        ("nn.functional.grid_sample", "OpInfo", "conv/pool"),
        ("nn.functional.conv_transpose3d", "OpInfo", "conv/pool"),
        ("linalg.vector_norm", "ReductionOpInfo", "linalg"),
        ("addmm.decomposed", "OpInfo", "linalg"),
        ("sin", "UnaryUfuncInfo", "pointwise"),
        ("nn.functional.gelu", "OpInfo", "pointwise"),
        ("masked.softmax", "OpInfo", "reductions"),
        ("var_mean.unbiased", "OpInfo", "reductions"),
        ("index_put", "OpInfo", "indexing"),
        ("scatter_reduce.amax", "OpInfo", "indexing"),
        ("unflatten", "OpInfo", "shape"),
        ("randn", "OpInfo", "other"),
        ("normal.in_place", "OpInfo", "other"),
        ("norm.fro", "OpInfo", "reductions"),
    ],
)
def test_family_of_an_op(op_id, opinfo_class, family):
    assert family_of(op_id, opinfo_class) == family


def test_every_curated_row_has_a_source_and_a_target():
    assert all(row.source and row.why for row in CURATED)
    with pytest.raises(ValueError):
        CuratedRow("broken", "why", "source")
    assert curated_rows_for("nn.functional.grid_sample", "float32") == ["grid_sample"]
    assert curated_rows_for("add", "bfloat16") == ["bf16"]
    assert is_always_swept("fade.sdpa_flash") and not is_always_swept("add")


def test_dtype_aliases_and_an_unknown_dtype():
    assert parse_dtypes(["fp32,bf16", "long"]) == ["float32", "bfloat16", "int64"]
    assert parse_dtypes(None) == ["float32", "float16", "bfloat16", "int64"]
    with pytest.raises(FadeUsageError, match="unknown dtype 'flaot16'; did you mean 'float16'"):
        parse_dtypes(["flaot16"])


CATALOG = [
    {"op": "add", "family": "pointwise", "claimed": ["float32", "bfloat16"], "dtypes": None},
    {"op": "addmm", "family": "linalg", "claimed": ["float32"], "dtypes": None},
    {"op": "nn.functional.grid_sample", "family": "conv/pool", "claimed": ["float32"], "dtypes": None},
    {"op": "fade.sdpa_flash", "family": "attention", "claimed": None, "dtypes": ["float16"]},
]


def test_an_op_id_matches_exactly_and_curated_ops_are_always_swept():
    chosen = [entry["op"] for entry in select_ops(CATALOG, ["add"])]
    assert chosen == ["add", "nn.functional.grid_sample", "fade.sdpa_flash"]
    assert [entry["op"] for entry in select_ops(CATALOG, ["add"], curated=False)] == ["add"]
    assert [entry["op"] for entry in select_ops(CATALOG, ["add*"], curated=False)] == ["add", "addmm"]


def test_a_pattern_matching_no_op_is_a_usage_error_with_a_suggestion():
    with pytest.raises(FadeUsageError, match="--only 'xyz' matches no OpInfo op"):
        select_ops(CATALOG, ["add", "xyz"])
    with pytest.raises(FadeUsageError, match="did you mean 'addmm'"):
        select_ops(CATALOG, ["adddmm"])


def test_every_dtype_of_an_opinfo_is_a_case_but_a_probe_only_gets_its_own():
    cases = build_cases(CATALOG, ["float32", "float16"], samples=2, inject=None)
    ids = [case.case_id for case in cases]
    assert "opinfo/add/float16" in ids  # unclaimed: tried, because a dtype that works unclaimed is a finding
    assert "opinfo/fade.sdpa_flash/float16" in ids and "opinfo/fade.sdpa_flash/float32" not in ids
    add16 = next(case for case in cases if case.case_id == "opinfo/add/float16")
    assert add16.params["claimed"] is False and add16.params["family"] == "pointwise"


def _row(op, dtype, op_class, *, family="pointwise", seconds=None, sample=0, message=None):
    return {
        "op": op, "dtype": dtype, "family": family, "class": op_class, "claimed": True, "claim_finding": None,
        "curated": curated_rows_for(op, dtype), "message": message, "note": None,
        "max_tolerance_ratio": 30.0 if op_class == "mismatch" else None, "known_mismatch": False,
        "device_median_s": seconds, "cpu_median_s": None, "timed_input_bytes": 1600, "timed_sample": sample,
        "slow_reason": None, "torch_device": "x",
    }


def _side(label, rows):
    return {"label": label, "path": f"{label}.jsonl", "device": label, "rows": rows}


def test_gap_lists_support_and_mismatch_on_one_side_and_large_speed_ratios():
    a = _side("A", [
        _row("add", "float32", "ok", seconds=1e-3),
        _row("add", "bfloat16", "ok"),
        _row("mul", "float32", "ok"),
        _row("sub", "float32", "unsupported", message="NotImplementedError: nope"),
        _row("svd", "float32", "ok", family="linalg", seconds=10e-6),
        _row("only_a", "float32", "ok"),
        _row("nn.functional.grid_sample", "float32", "ok", family="conv/pool"),
    ])
    b = _side("B", [
        _row("add", "float32", "ok", seconds=1e-3 * GAP_SPEED_RATIO * 2),
        _row("add", "bfloat16", "unsupported", message="RuntimeError: not implemented for 'BFloat16'"),
        _row("mul", "float32", "mismatch"),
        _row("sub", "float32", "ok"),
        _row("svd", "float32", "ok", family="linalg", seconds=10e-6 * GAP_SPEED_RATIO * 2),  # both launch-bound
        _row("nn.functional.grid_sample", "float32", "slow", family="conv/pool"),
    ])
    gap = compare_sweeps(a, b)
    assert [(p["op"], p["dtype"]) for p in gap["works_a_not_b"]] == [("add", "bfloat16")]
    assert gap["works_a_not_b"][0]["b_message"].startswith("RuntimeError")
    assert [(p["op"], p["dtype"]) for p in gap["works_b_not_a"]] == [("sub", "float32")]
    assert [p["op"] for p in gap["mismatch_b_only"]] == ["mul"] and not gap["mismatch_a_only"]
    assert [(p["op"], round(p["b_over_a"])) for p in gap["speed"]] == [("add", 2 * GAP_SPEED_RATIO)]
    assert 10e-6 * GAP_SPEED_RATIO * 2 < GAP_MIN_SLOWER_S
    assert gap["common"] == 6 and gap["only_in_a"] == 1 and gap["only_in_b"] == 0
    assert gap["families"]["pointwise"]["works_a_not_b"] == 1
    # Curated ops are listed side by side; the bf16 row (every op) is only counted.
    assert [p["op"] for p in gap["curated"]] == ["nn.functional.grid_sample"]
    rows = {entry["name"]: entry for entry in gap["curated_rows"]}
    assert (rows["bf16"]["a_ok"], rows["bf16"]["b_ok"], rows["bf16"]["a_tried"]) == (1, 0, 1)
    assert (rows["grid_sample"]["a_ok"], rows["grid_sample"]["b_ok"]) == (1, 1)  # slow still ran correctly


def test_family_summary_counts_ok_and_slow_over_tried():
    rows = [_row("a", "float32", "ok"), _row("b", "float32", "slow"), _row("c", "float32", "error"), _row("d", "float32", "untested")]
    summary = family_summary(rows)
    assert summary["pointwise"]["tried"] == 3 and summary["pointwise"]["ok"] == 2
    assert summary["all"]["pct_ok"] == pytest.approx(200 / 3)
    assert set(summary) == set(FAMILIES) | {"all"}


def test_a_record_whose_worker_died_or_hung_is_crash_or_hang():
    params = {"op": "abs", "dtype": "float32", "family": "pointwise", "claimed": True}
    crashed = ops_row({"case_id": "opinfo/abs/float32", "status": "crashed", "params": params, "error": "SIGABRT"})
    hung = ops_row({"case_id": "opinfo/abs/float32", "status": "timeout", "params": params, "error": "no result"})
    assert (crashed["class"], crashed["claim_finding"], crashed["family"]) == ("crash", "claimed_fails", "pointwise")
    assert hung["class"] == "hang" and hung["message"] == "no result"
