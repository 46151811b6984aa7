"""A real sweep of the CPU against itself, in this process (op_db is imported once for the module): every op
that runs matches, random and uninitialized ops run without being compared, dtype claims are checked,
the sized probes run, and --resume skips finished op × dtypes."""

import json

import pytest

from fade.measure.suites.ops import run_ops_sweep
from fade.analyze.ops.outcome import claim_finding

OPS = (
    "sum", "mean", "linalg.svd", "nn.functional.conv2d", "fft.fft", "gather", "as_strided.partial_views",
    "normal", "empty_like", "bernoulli", "nn.functional.dropout", "broadcast_shapes", "jiterator_unary", "linalg.matrix_power", "svd",
    "nn.functional.grid_sample", "index_put",
)
DTYPES = ["float32", "bfloat16", "int64"]


@pytest.fixture(scope="module")
def cpu_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("ops") / "cpu.jsonl"
    sweep = run_ops_sweep("cpu", dtypes=DTYPES, only=",".join(OPS), curated=False, isolate=False, out=out)
    return sweep, out


def rows_by_key(sweep):
    return {(row["op"], row["dtype"]): row for row in sweep.rows}


def test_the_cpu_against_itself_gives_only_ok_unsupported_and_untested(cpu_sweep):
    sweep, _ = cpu_sweep
    assert len(sweep.rows) == len(OPS) * len(DTYPES)
    classes = {(row["op"], row["dtype"]): row["class"] for row in sweep.rows}
    expected = {"ok", "unsupported", "untested"}
    assert set(classes.values()) <= expected, {key: c for key, c in classes.items() if c not in expected}
    assert classes[("sum", "float32")] == "ok" and classes[("linalg.svd", "int64")] == "unsupported"


def test_random_and_uninitialized_ops_run_but_are_not_compared(cpu_sweep):
    sweep, out = cpu_sweep
    records = {json.loads(line)["case_id"]: json.loads(line) for line in out.read_text().splitlines()}
    for op in ("normal", "empty_like", "bernoulli", "nn.functional.dropout"):
        extra = records[f"opinfo/{op}/float32"]["extra"]
        assert extra["class"] == "ok" and extra["compared"] is False and extra["not_compared_reason"], op


def test_a_view_of_part_of_a_storage_reads_the_same_memory_on_the_cpu_copy(cpu_sweep):
    sweep, _ = cpu_sweep
    assert rows_by_key(sweep)[("as_strided.partial_views", "float32")]["class"] == "ok"


def test_dtype_claims_are_checked_against_what_ran(cpu_sweep):
    sweep, _ = cpu_sweep
    rows = rows_by_key(sweep)
    assert rows[("linalg.matrix_power", "int64")]["claim_finding"] == "works_unclaimed"
    assert rows[("jiterator_unary", "float32")]["claimed"] is False  # onlyCUDA: no CPU claim
    assert rows[("jiterator_unary", "float32")]["class"] == "unsupported"
    for row in sweep.rows:
        assert row["claim_finding"] == claim_finding(row["class"], row["claimed"])
    assert sweep.summary["claims"].get("works_unclaimed", 0) >= 1


def test_a_dtype_the_samples_do_not_really_use_is_untested_not_a_claim_finding(cpu_sweep):
    """broadcast_shapes takes no tensor at all; svd's first samples are 0 x n matrices and are passed over."""
    rows = rows_by_key(cpu_sweep[0])
    assert rows[("broadcast_shapes", "int64")]["class"] == "untested"
    assert rows[("broadcast_shapes", "int64")]["claim_finding"] is None
    assert rows[("svd", "float32")]["class"] == "ok"


def test_every_op_that_ran_was_timed_on_both_sides(cpu_sweep):
    sweep, _ = cpu_sweep
    row = rows_by_key(sweep)[("nn.functional.conv2d", "float32")]
    assert row["device_median_s"] > 0 and row["cpu_median_s"] > 0 and row["timed_input_bytes"] > 0


def test_sized_probes_run_and_match_in_low_precision(tmp_path):
    sweep = run_ops_sweep(
        "cpu", dtypes=["float32", "bfloat16", "int64"], only="fade.grid_sample_bilinear,fade.sparse_coo_mm",
        curated=False, isolate=False, out=tmp_path / "sized.jsonl",
    )
    classes = {(row["op"], row["dtype"]): row["class"] for row in sweep.rows}
    assert classes == {
        ("fade.grid_sample_bilinear", "float32"): "ok",
        ("fade.grid_sample_bilinear", "bfloat16"): "ok",
        ("fade.sparse_coo_mm", "float32"): "ok",
        ("fade.sparse_coo_mm", "bfloat16"): "ok",
    }  # no int64 case: a probe runs only its own dtypes
    assert all(row["curated"] for row in sweep.rows)
    assert {entry["name"]: entry["tried"] for entry in sweep.summary["curated"]}["grid_sample"] == 2


def test_resume_skips_what_the_file_already_holds(tmp_path):
    out = tmp_path / "ops.jsonl"
    first = run_ops_sweep("cpu", dtypes=["float32"], only="sum", curated=False, isolate=False, out=out)
    assert first.run.selected == 1 and first.run.resumed == 0
    second = run_ops_sweep("cpu", dtypes=["float32"], only="sum,mean", curated=False, isolate=False, out=out, resume=True)
    assert second.run.selected == 2 and second.run.resumed == 1
    assert [record["case_id"] for record in second.run.records] == ["opinfo/mean/float32"]
    assert {row["op"] for row in second.rows} == {"sum", "mean"}
    assert len(out.read_text().splitlines()) == 2


def test_timing_on_ocl_makes_one_more_untimed_call_first(monkeypatch):
    """fade.ocl builds a shape's own kernels at its second call: the timed calls come after one more untimed
    call there, and their number follows that call's time, not the build-laden correctness call's."""
    from fade.measure.suites.ops import probe

    monkeypatch.setattr(probe, "synchronize", lambda device: None)
    monkeypatch.setattr(probe, "TIMING_BUDGET_S", 100.0)  # any call under 20 s allows every rep: no clock race
    calls = []
    for device, ocl in (("ocl:0", True), ("cpu", False)):
        monkeypatch.setattr(probe.ocldevice, "is_ocl", lambda d, ocl=ocl: ocl)
        calls.clear()
        _, reps = probe._median_call_s(lambda: calls.append(1), device, first_call_s=1000.0)
        # the correctness call took 1000 s (a build): alone it would allow one timed call
        assert (len(calls), reps) == ((1 + probe.TIMING_REPS, probe.TIMING_REPS) if ocl else (1, 1))
