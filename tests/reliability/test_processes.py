"""Issue 30, processes: one run at a time per results file (a second one is one line, exit 2, before any work;
a lock left by a killed run never blocks), and a full disk under `fade bench dist` is exit 2 with one line.
docs/reliability.md, "The independent battery (issue 30)", lists them; tests/dist/test_dist_lifetimes.py has
the dist kills."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fade.cli import main
from fade.errors import FadeUsageError
from fade.measure.results_lock import holding_results, lock_path

SRC_ROOT = str(Path(__file__).resolve().parents[2] / "src")
HOLDER = ("import sys, time\n"
          f"sys.path.insert(0, {SRC_ROOT!r})\n"
          "from fade.measure.results_lock import holding_results\n"
          "with holding_results(sys.argv[1]):\n"
          "    print('held', flush=True)\n"
          "    time.sleep(300)\n")  # fmt: skip


@pytest.fixture
def held_by_another_process(tmp_path):
    """A process holding the run lock of tmp_path/r.jsonl, as a running `fade bench` does: (out, its pid)."""
    out = tmp_path / "r.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield out, holder
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("verb", [
    ["bench", "micro", "--quick", "--device", "cpu", "--only", "launch/*"],
    ["bench", "models", "--quick", "--device", "cpu", "--models", "alexnet"],
    ["bench", "dist", "--quick", "--device", "cpu", "--nproc", "2"],
    ["ops", "--device", "cpu", "--only", "abs", "--no-curated", "--quiet"],
])  # fmt: skip
def test_a_second_run_of_one_results_file_is_one_line_and_exit_2_before_any_work(held_by_another_process, capsys,
                                                                                 monkeypatch, verb):  # fmt: skip
    """Two `--resume` runs of one file would measure the same cases twice: the second stops at once, naming the
    first. No worker or torchrun starts (their start would fail this test through the patched Popen)."""
    out, holder = held_by_another_process

    def no_process(*args, **kwargs):
        raise AssertionError(f"a process was started: {args[0] if args else kwargs}")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    assert main([*verb, "--resume", "-o", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"fade: error: another fade run (pid {holder.pid}) is writing r.jsonl; wait for it or use another -o"]


def test_a_lock_left_by_a_run_killed_with_sigkill_does_not_block(tmp_path):
    """The lock is the kernel's (flock), released when its holder dies; the stale FILE.lock stays and is harmless."""
    out = tmp_path / "r.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(FadeUsageError, match=f"pid {holder.pid}"):
        with holding_results(out):
            pass
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert lock_path(out).exists()
    with holding_results(out) as held:
        assert held == lock_path(out)
        assert lock_path(out).read_text().strip() == str(os.getpid())


def test_the_lock_nests_within_one_process_and_skips_what_is_not_a_regular_file(tmp_path):
    """A multi-device models run holds the lock around each device's run_cases; /dev/null has no resume to guard."""
    out = tmp_path / "r.jsonl"
    with holding_results(out):
        with holding_results(out):
            pass
        other = subprocess.run([sys.executable, "-c", HOLDER.replace("time.sleep(300)", "pass"), str(out)],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert other.returncode != 0 and f"another fade run (pid {os.getpid()})" in other.stderr  # still held
    if Path("/dev/null").exists():
        with holding_results("/dev/null") as held:
            assert held is None


def test_full_disk_in_bench_dist_is_exit_2_with_one_line(tmp_path, monkeypatch, capsys):
    """What the dist launcher returns after a full disk (tests/dist/test_dist_lifetimes.py: for real, /dev/full):
    one line, exit 2, not 'stopped early' on top of it."""
    import fade.api
    from fade.measure.runner import RunSummary

    error = "cannot write r.jsonl: No space left on device; the r.jsonl records before this case are intact"
    run = RunSummary(out="r.jsonl", run_id="x", device="cpu", selected=2, resumed=0, write_error=error,
                     stopped="the launcher died: it did not matter")  # fmt: skip
    monkeypatch.setattr(fade.api, "bench", lambda *a, **k: fade.api.BenchResult("dist", run))
    assert main(["bench", "dist", "--device", "cpu", "--nproc", "2", "-o", str(tmp_path / "r.jsonl")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"fade: error: {error}"]
