"""CI's fault-injection sweep: the CPU against itself, in the isolated worker, with one op that hangs, one that
aborts its process and one that returns wrong values (tests/ops/faults.py). Each is classified, and every
other op and the sweep itself complete."""

import json
import time
from pathlib import Path

import pytest

from . import faults

FAULTS = str(Path(faults.__file__).resolve())
HEALTHY = ("cos", "exp", "sum")


def test_hang_abort_and_wrong_values_are_classified_and_the_sweep_completes(tmp_path, fade_main, capsys):
    out = tmp_path / "ops.jsonl"
    only = ",".join((faults.HANG_OP, faults.ABORT_OP, faults.WRONG_OP) + HEALTHY)
    started = time.monotonic()
    code = fade_main(
        ["ops", "--device", "cpu", "--only", only, "--no-curated", "--dtypes", "float32", "--timeout", "4",
         "-o", str(out), "--inject", FAULTS, "--quiet", "--json", str(tmp_path / "summary.json")]
    )
    assert code == 0
    assert time.monotonic() - started < 70
    records = [json.loads(line) for line in out.read_text().splitlines()]
    by_op = {record["params"]["op"]: record for record in records}
    assert set(by_op) == {faults.HANG_OP, faults.ABORT_OP, faults.WRONG_OP, *HEALTHY}
    assert by_op[faults.HANG_OP]["status"] == "timeout"
    assert by_op[faults.ABORT_OP]["status"] == "crashed" and "SIGABRT" in by_op[faults.ABORT_OP]["error"]
    wrong = by_op[faults.WRONG_OP]["extra"]
    assert wrong["class"] == "mismatch"
    assert wrong["samples"][0]["closeness"]["max_abs_error"] == pytest.approx(1.0, abs=1e-6)
    for name in HEALTHY:
        assert by_op[name]["extra"]["class"] == "ok", by_op[name]["extra"]
    summary = json.loads((tmp_path / "summary.json").read_text())["summary"]
    assert summary["classes"] == {"ok": 3, "hang": 1, "crash": 1, "mismatch": 1}
    # A claimed dtype that hung or crashed is a dtype-claim finding too.
    assert summary["claims"] == {"claimed_fails": 2}
