"""`fade bench dist` end to end on the CPU (gloo): every collective on 2 and 4 ranks, the DDP and FSDP2
scaling path at tiny size, a hung rank's timeout record, resume, and one-line errors for bad input. Exit
codes and record fields only; no figure is asserted (a 2-core CI host gives any number)."""

import json
import time

import pytest

from tests.cliutil import one_line

from fade.errors import ExitCode
from fade.measure.suites.dist.collectives import BUS_FACTORS, COLLECTIVES
from fade.measure.suites.dist.rank import TEST_HANG_RANK
from fade.results import read_records

TINY_MODEL = "tests.dist.tiny_model:make"
HANG_TIMEOUT_S = 3  # the collective's --timeout in the hang test
HANG_BOUND_S = 120  # generous: torchrun start-up on a loaded 2-core host, the timeout, and the tear-down




def records_of(path) -> list:
    return read_records(path, strict=True).records  # strict: every line is a record the readers accept


def test_quick_two_ranks_runs_every_collective_checks_it_and_resumes(fade, tmp_path):
    out = tmp_path / "dist.jsonl"
    code, _, _ = fade("bench", "dist", "--device", "cpu", "--nproc", 2, "--quick", "-o", out, "--json", tmp_path / "run.json")
    assert code == ExitCode.OK
    records = records_of(out)
    assert {record["extra"]["collective"] for record in records} == set(COLLECTIVES)
    assert {record["status"] for record in records} == {"ok"}
    for record in records:
        extra = record["extra"]
        assert record["suite"] == "dist" and extra["world"] == 2 and extra["backend"] == "gloo"
        assert extra["checked"] == "exact match on every rank"
        assert record["value"] == pytest.approx(extra["algbw_gbs"] * BUS_FACTORS[extra["collective"]][1](2))
        assert f"algbw * {extra['bus_factor']}" in record["formula"]
        assert record["timing"]["method"] == "host-clock" and record["stats"]["n"] == 5
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["suite"] == "dist" and summary["statuses"] == {"ok": len(records)}
    assert summary["env"] == []  # nothing set for a CPU run
    code, _, _ = fade("bench", "dist", "--device", "cpu", "--nproc", 2, "--quick", "-o", out, "--resume",
                      "--json", tmp_path / "resumed.json")  # fmt: skip
    resumed = json.loads((tmp_path / "resumed.json").read_text())
    assert code == ExitCode.OK and (resumed["selected"], resumed["resumed"], resumed["statuses"]) == (18, 18, {})
    assert len(records_of(out)) == len(records)  # nothing measured twice


def test_four_ranks_run_every_collective_and_ddp_and_fsdp2_scaling(fade, tmp_path):
    out = tmp_path / "dist.jsonl"
    code, _, err = fade("bench", "dist", "--device", "cpu", "--nproc", 4, "--quick", "--sizes", "4K",
                        "--collectives", ",".join(COLLECTIVES), "--scaling", TINY_MODEL, "--strategies", "ddp,fsdp2",
                        "-o", out)  # fmt: skip
    assert code == ExitCode.OK, err
    records = {record["case_id"]: record for record in records_of(out)}
    assert {record["status"] for record in records.values()} == {"ok"}
    assert {f"dist/{name}/fp32/4KiB/x4" for name in COLLECTIVES} <= set(records)
    for strategy in ("ddp", "fsdp2"):
        scaling = records[f"dist/scaling/{TINY_MODEL}/{strategy}/x4/b2"]["extra"]["scaling"]
        assert [entry["world"] for entry in scaling] == [1, 2, 4]
        assert scaling[0]["efficiency_pct"] == pytest.approx(100.0)
        for entry in scaling:
            assert entry["samples_per_s_per_process"] > 0 and 0 <= entry["exposed_comm_pct"] <= 100
            assert all(loss == loss for loss in entry["checked_losses"])  # finite, checked before timing


def test_a_hung_rank_gives_a_timeout_record_naming_it_and_exit_1(fade, tmp_path, monkeypatch):
    """One rank sleeps before its first collective (the test-only hook); rank 0 waits --timeout seconds, writes
    a timeout record naming the rank that never arrived, and every process ends."""
    monkeypatch.setenv(TEST_HANG_RANK, "1")
    out = tmp_path / "dist.jsonl"
    started = time.monotonic()
    code, _, err = fade("bench", "dist", "--device", "cpu", "--nproc", 2, "--quick", "--timeout", HANG_TIMEOUT_S, "-o", out)
    assert time.monotonic() - started < HANG_BOUND_S
    assert code == ExitCode.FINDINGS
    (record,) = records_of(out)
    assert record["status"] == "timeout" and record["case_id"] == "dist/all_reduce/fp32/8B/x2"
    assert "rank(s) that did not arrive: 1" in record["error"]
    assert "stopped early" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--nproc", "0"], "--nproc 0: must be a positive integer"),
        (["--nproc", "2", "--collectives", "allreduce"], "did you mean 'all_reduce'"),
        (["--nproc", "2", "--dtypes", "fp8"], "--dtypes 'fp8': unknown"),
        (["--nproc", "2", "--sizes", "12Q"], "--sizes '12Q': not a size"),
        (["--nproc", "1"], "collectives need at least 2 processes"),
        ([], "give --nproc N"),
        (["--nproc", "2", "--device", "cuda:1"], "give the device type"),
        (["--nproc", "2", "--scaling", "resnet51"], "did you mean 'resnet50'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(fade, tmp_path, argv, message):
    code, _, err = fade("bench", "dist", "--device", "cpu", "-o", tmp_path / "out.jsonl", *argv)
    assert code == ExitCode.USAGE
    assert message in one_line(err)


def test_under_the_users_torchrun_each_process_is_a_rank_and_rank_0_writes(tmp_path):
    """`torchrun -m fade bench dist` without --nproc: FADE starts nothing itself; rank 0 alone writes and prints."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "dist.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), os.environ.get("PYTHONPATH", "")])}
    completed = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                                "-m", "fade", "bench", "dist", "--device", "cpu", "--quick", "--sizes", "8",
                                "--collectives", "broadcast", "-o", str(out)], env=env, cwd=tmp_path,
                               capture_output=True, text=True, timeout=300)  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-2000:]
    (record,) = records_of(out)
    assert record["case_id"] == "dist/broadcast/fp32/8B/x2" and record["status"] == "ok"
    assert completed.stdout.count("1 ok in") == 1  # one summary: rank 0's


def test_resume_lets_rank_0_skip_what_is_done_and_the_ranks_run_the_rest(fade, tmp_path):
    """Half the cases measured: the resumed run starts the ranks, rank 0 tells them which cases are left."""
    out = tmp_path / "dist.jsonl"
    first = ("bench", "dist", "--device", "cpu", "--nproc", 2, "--quick", "--sizes", "8", "--collectives", "broadcast")
    assert fade(*first, "-o", out)[0] == ExitCode.OK
    code, _, _ = fade("bench", "dist", "--device", "cpu", "--nproc", 2, "--quick", "--sizes", "8",
                      "--collectives", "broadcast,send_recv", "-o", out, "--resume", "--json", tmp_path / "run.json")  # fmt: skip
    summary = json.loads((tmp_path / "run.json").read_text())
    assert code == ExitCode.OK and (summary["selected"], summary["resumed"], summary["statuses"]) == (2, 1, {"ok": 1})
    assert [record["case_id"] for record in records_of(out)] == ["dist/broadcast/fp32/8B/x2", "dist/send_recv/fp32/8B/x2"]


def test_the_parent_kills_every_rank_when_a_case_outlives_its_wall_limit(tmp_path, monkeypatch):
    """Rank 0 itself hangs (the test hook) while the collective timeout is long: the parent's wall limit ends
    torchrun and both ranks, and writes the timeout record for the case in flight."""
    import os

    from fade.measure.suites.dist.launch import descendants, launch
    from fade.measure.suites.dist.suite import build_request

    monkeypatch.setenv(TEST_HANG_RANK, "0")
    out = tmp_path / "dist.jsonl"
    request = build_request("cpu", collectives=["broadcast"], sizes=[8], quick=True, timeout_s=600, out=out, run_id="r1")
    started = time.monotonic()
    summary = launch(request, 2, dict(os.environ), case_limit_s=2.0)
    assert time.monotonic() - started < HANG_BOUND_S
    (record,) = records_of(out)
    assert record["status"] == "timeout" and "wall limit" in record["error"] and summary.stopped
    assert descendants(os.getpid()) == []  # no rank left behind


def test_ranks_that_cannot_use_the_device_exit_3_with_the_ranks_reason(fade, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a CUDA device: the ranks would start")
    code, _, err = fade("bench", "dist", "--device", "cuda", "--nproc", 2, "--quick", "-o", tmp_path / "out.jsonl")
    assert code == ExitCode.CANNOT_RUN
    assert "is not available here" in one_line(err)
