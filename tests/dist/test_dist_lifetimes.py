"""Issue 30, processes: every process of `fade bench dist` dies with its parent, a dead launcher is recorded as
such (never as the cases' errors), no case is recorded twice, and a full disk is one line, exit 2.
benchmarks/dist_kill_battery.py repeats the SIGKILL at 20 random moments; this is its CI sample."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from fade.errors import ExitCode
from fade.measure.suites.dist.launch import launch
from fade.measure.suites.dist.lifeline import Lifeline
from fade.measure.suites.dist.suite import build_request, plan_cases
from fade.results import read_records

ROOT = Path(__file__).resolve().parents[2]
TAG_VARIABLE = "FADE_TEST_RUN_TAG"
SAFETY_TIMEOUT_S = 120  # never reached on a healthy host: torchrun's start on a loaded 2-core CI machine, then cases
LINUX = sys.platform.startswith("linux")


def gloo_available() -> bool:
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return dist.is_available() and dist.is_gloo_available()


needs_gloo = pytest.mark.skipif(not (LINUX and gloo_available()), reason="needs Linux (/proc) and torch.distributed gloo")


def tagged_processes(tag: str) -> list:
    """Live processes whose environment holds TAG_VARIABLE=tag (children inherit it)."""
    marker = f"{TAG_VARIABLE}={tag}".encode()
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if marker not in environ.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # ended, not yet reaped
        except OSError:
            continue
        found.append(int(entry))
    return found


def wait_for(condition, timeout_s: float = SAFETY_TIMEOUT_S, poll_s: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"not within the {timeout_s} s safety timeout")


@needs_gloo
def test_sigkill_of_fade_mid_run_leaves_no_process_and_no_record_after_it(fade, tmp_path):
    """SIGKILL of `fade bench dist` while its ranks measure: torchrun and both ranks die with it (parent-death
    signals), nothing is appended after, every line parses, no case twice; a --resume run right after is not
    blocked by the dead run's lock and measures only what is missing."""
    out = tmp_path / "dist.jsonl"
    tag = uuid.uuid4().hex
    env = {**os.environ, TAG_VARIABLE: tag,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    process = subprocess.Popen([sys.executable, "-m", "fade", "bench", "dist", "--device", "cpu", "--nproc", "2",
                                "--sizes", "8,4K,64K", "-o", str(out)], env=env, cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for(lambda: out.exists() and out.read_bytes().count(b"\n") >= 1 or process.poll() is not None)
        assert process.poll() is None, "the run ended before the kill"
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        wait_for(lambda: not tagged_processes(tag), timeout_s=15)  # PDEATHSIG: milliseconds, in practice
    finally:
        process.kill()
        for pid in tagged_processes(tag):  # only if the assertion above failed: leave nothing behind
            os.kill(pid, signal.SIGKILL)
    size = out.stat().st_size
    time.sleep(0.5)
    assert out.stat().st_size == size  # no orphan appends
    records = read_records(out, strict=True).records
    assert records and {record["status"] for record in records} == {"ok"}
    assert len({record["case_id"] for record in records}) == len(records)
    code, _, err = fade("bench", "dist", "--device", "cpu", "--nproc", 2, "--sizes", "8,4K,64K", "--quick",
                        "--resume", "-o", out)  # fmt: skip
    assert code == ExitCode.OK, err
    after = read_records(out, strict=True).records
    assert not {record["case_id"] for record in after[len(records):]} & {record["case_id"] for record in records}
    assert len(after) == len(plan_cases(build_request("cpu", sizes=[8, 4096, 65536], out=out, run_id="x"), 2))


@pytest.mark.skipif(not LINUX, reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_a_child_started_with_the_parent_death_preexec_dies_with_its_parent(tmp_path):
    """The launcher -> torchrun link: a process started through parent_death_preexec gets SIGKILL when the
    process that started it is killed."""
    pid_file = tmp_path / "child.pid"
    parent_code = (
        "import subprocess, sys, time\n"
        f"sys.path.insert(0, {str(ROOT / 'src')!r})\n"
        "from fade.measure.suites.dist.lifeline import parent_death_preexec\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True,\n"
        "                         preexec_fn=parent_death_preexec())\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(300)\n"
    )  # fmt: skip
    parent = subprocess.Popen([sys.executable, "-c", parent_code])
    try:
        child = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), timeout_s=30))
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        wait_for(lambda: not Path(f"/proc/{child}").exists() or "Z" in _state(child), timeout_s=10)
    finally:
        parent.kill()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_a_rank_whose_parent_changed_or_whose_launcher_is_gone_is_not_alive(tmp_path):
    """Rank 0 appends a record only while its parent chain is alive (lifeline.Lifeline.alive)."""
    proc = tmp_path / "proc"
    (proc / "500").mkdir(parents=True)
    (proc / "500" / "stat").write_text("500 (python) S 400 500 500 0")  # torchrun 500, started by launcher 400
    ppid = [500]
    lifeline = Lifeline(400, getppid=lambda: ppid[0], proc=str(proc))
    assert lifeline.alive()
    (proc / "500" / "stat").write_text("500 (python) S 1 500 500 0")  # the launcher died: torchrun reparented
    assert not lifeline.alive()
    (proc / "500" / "stat").write_text("500 (python) S 400 500 500 0")
    ppid[0] = 1  # torchrun died: the rank reparented
    assert not lifeline.alive()
    assert Lifeline(None, getppid=lambda: 7).alive()  # under a user's launcher: the parent is all there is


# -- the launcher's records, with a fake torchrun: what it writes when torchrun dies --------------------------------
FAKE_TORCHRUN = """#!{python}
import json, os, signal, sys
request = json.load(open(sys.argv[-1]))
def event(kind, **fields):
    with open(request["events"], "a") as events:
        events.write(json.dumps(dict(event=kind, **fields)) + "\\n")
event("start", total=2, device="cpu", session={{"device": "cpu"}})
event("case_started", case_id={case!r})
if {append_first}:  # rank 0 appended the case's record, then died before saying so
    with open(request["out"], "a") as out:
        out.write(json.dumps({{"run_id": request["run_id"], "case_id": {case!r}, "status": "ok"}}) + "\\n")
os.kill(os.getpid(), signal.{signal})
"""


def fake_launch(tmp_path, *, append_first: bool = False, signal_name: str = "SIGKILL"):
    out = tmp_path / "dist.jsonl"
    request = build_request("cpu", collectives=["all_reduce"], sizes=[8, 4096], quick=True, out=out, run_id="run-1")
    case = plan_cases(request, 2)[0].case_id
    fake = tmp_path / "python"
    fake.write_text(FAKE_TORCHRUN.format(python=sys.executable, case=case, append_first=append_first, signal=signal_name))
    fake.chmod(0o755)
    summary = launch(request, 2, dict(os.environ), python=str(fake))
    lines = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return summary, lines, case


def test_torchrun_killed_inside_a_case_gives_one_record_saying_the_launcher_died(tmp_path):
    summary, lines, case = fake_launch(tmp_path)
    (record,) = lines
    assert record["case_id"] == case and record["status"] == "crashed"
    assert record["error"].startswith("the launcher died: torchrun was killed by SIGKILL (signal 9)")
    assert "the case itself did not fail" in record["error"]
    assert summary.stopped.startswith("the launcher died")


def test_a_case_rank_0_recorded_before_torchrun_died_is_not_recorded_again(tmp_path):
    summary, lines, case = fake_launch(tmp_path, append_first=True)
    assert [line["case_id"] for line in lines] == [case]  # the rank's record, and no second one from the launcher
    assert summary.stopped.startswith("the launcher died")


def test_a_full_disk_when_the_launcher_writes_is_a_write_error_not_a_crash(tmp_path, monkeypatch):
    """The exit-4 path of issue 30: the launcher's own record met the full disk (OutputFull escaped)."""
    import errno

    import fade.results

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fade.results, "write_all", full)
    summary, lines, _ = fake_launch(tmp_path)
    assert lines == []
    assert summary.write_error.startswith(f"cannot write {tmp_path / 'dist.jsonl'}: No space left on device")


@needs_gloo
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_under_bench_dist_is_exit_2_with_one_line(fade):
    """Rank 0's first append fails (ENOSPC): the run stops, every process ends at once (rank 0 exits non-zero,
    so torchrun ends rank 1 instead of letting it wait out --timeout), one line, exit 2."""
    started = time.monotonic()
    code, _, err = fade("bench", "dist", "--device", "cpu", "--nproc", 2, "--quick", "--collectives", "all_reduce",
                        "--timeout", 100, "-o", "/dev/full")  # fmt: skip
    assert code == ExitCode.USAGE
    assert err.strip().splitlines() == ["fade: error: cannot write /dev/full: No space left on device; the full "
                                        "records before this case are intact"]  # fmt: skip
    assert time.monotonic() - started < 100  # rank 1 did not wait out its collective's --timeout
