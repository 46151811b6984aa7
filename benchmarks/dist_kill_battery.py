"""Issue 30's must-show: `fade bench dist` killed with SIGKILL at random moments leaves no process behind and
no record that misnames the cause.

    python benchmarks/dist_kill_battery.py OUT [--runs 20] [--seed N] [--nproc 2]

Each run starts `fade bench dist --device cpu --nproc 2 --sizes 8,4K,64K` (gloo, 18 cases at full timing:
torchrun's start, then the cases for about as long again) with FADE_BATTERY_TAG=<a tag of its own> in its
environment, which torchrun and every rank inherit, then sends SIGKILL, at a moment drawn from the seeded
generator between KILL_FROM_S and KILL_UNTIL of the length of an uncut run (timed first, once), to the fade
process or (every other run, on average) to torchrun. A run that ended before its moment is checked too but
does not count: attempts go on until RUNS runs were killed (at most twice as many attempts). Then, per run:

* no process is left: /proc holds no process whose environment carries the run's tag (any found is killed
  and counted as a failure);
* the results file stops growing once the run is over, and every line of it parses (fade.results, strict);
* no record names a cause that was really the launcher's death: after a SIGKILL of fade, no failed record
  at all; after a SIGKILL of torchrun, at most one failed record, and it says "the launcher died";
* no case is recorded twice within a run (run_id, case_id);
* the stale lock does not block: `--resume` on the same file right after (with --quick: the same case
  ids) exits 0, measures none of the cases already ok, and leaves every case ok.

OUT gets run-NN/ (results, console text) and summary.json. Exits 1 when any run failed a check.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

TAG_VARIABLE = "FADE_BATTERY_TAG"
KILL_FROM_S = 0.3  # the earliest kill: fade is still importing
KILL_UNTIL = 0.9  # of an uncut run's length: runs vary, and a kill after the end proves nothing
SIZES = "8,4K,64K"  # x 6 collectives = CASES; at full timing, about as long as torchrun's start on 2 shared cores
CASES = 18
EXIT_WAIT_S = 60.0  # how long fade may take to end after its torchrun was killed
SETTLE_S = 3.0  # after the run: time for parent-death signals to land before /proc is searched
GROWTH_WATCH_S = 1.0  # the results file must not grow during this long after the run is over
RESUME_TIMEOUT_S = 180.0
LAUNCHER_DEATH = "the launcher died"  # how launch.py words torchrun's death


def fade_command(out: Path, resume: bool, nproc: int) -> list:
    return [sys.executable, "-m", "fade", "bench", "dist", "--device", "cpu", "--nproc", str(nproc), "--sizes", SIZES,
            "-o", str(out)] + (["--resume", "--quick"] if resume else [])  # fmt: skip


def environment(tag: str) -> dict:
    python_path = os.pathsep.join([str(ROOT / "src")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    return {**os.environ, "PYTHONPATH": python_path, TAG_VARIABLE: tag, "COLUMNS": "160"}


def tagged_processes(tag: str) -> list:
    """(pid, command line) of every process whose environment holds TAG_VARIABLE=tag."""
    marker = f"{TAG_VARIABLE}={tag}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if marker not in environ.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":  # a zombie has ended; its parent has not reaped it yet
            found.append((int(entry), command))
    return found


def torchrun_pid(parent: int) -> int | None:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if b"torch.distributed.run" in cmdline.read():
                    return int(entry)
        except (OSError, IndexError, ValueError):
            continue
    return None


def read_lines(path: Path) -> tuple:
    """(records, unreadable line numbers): every line must be a whole JSON record."""
    from fade.results import read_records

    if not path.exists() or not path.stat().st_size:
        return [], []
    found = read_records(path)
    return found.records, list(found.problems)


def uncut_run(out_dir: Path, nproc: int) -> float:
    """Seconds an uncut run takes here (the kill window's end); SystemExit when it does not pass."""
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    completed = subprocess.run(fade_command(out_dir / "dist.jsonl", False, nproc), capture_output=True, text=True,
                               env=environment(f"battery-uncut-{uuid.uuid4().hex[:8]}"), cwd=out_dir, timeout=600)  # fmt: skip
    wall_s = time.monotonic() - started
    records, problems = read_lines(out_dir / "dist.jsonl")
    if completed.returncode != 0 or problems or len(records) != CASES:
        raise SystemExit(f"dist_kill_battery: the uncut run failed (exit {completed.returncode}): {completed.stderr[-500:]}")
    return wall_s


def one_run(index: int, rng: random.Random, out_dir: Path, nproc: int, window_s: tuple) -> dict:
    run_dir = out_dir / f"run-{index:02d}"
    run_dir.mkdir(parents=True, exist_ok=True)
    results = run_dir / "dist.jsonl"
    tag = f"battery-{index}-{uuid.uuid4().hex[:8]}"
    target = rng.choice(["fade", "torchrun"])
    delay_s = round(rng.uniform(*window_s), 3)
    failures: list = []
    with open(run_dir / "console.txt", "w", encoding="utf-8") as console:
        process = subprocess.Popen(fade_command(results, False, nproc), stdout=console, stderr=subprocess.STDOUT,
                                   env=environment(tag), cwd=run_dir)  # fmt: skip
        started = time.monotonic()
        killed_pid = None
        while time.monotonic() - started < delay_s and process.poll() is None:
            time.sleep(0.01)
        if process.poll() is None:
            killed_pid = process.pid if target == "fade" else torchrun_pid(process.pid)
            if killed_pid is not None:
                os.kill(killed_pid, signal.SIGKILL)
        killed_at_s = round(time.monotonic() - started, 3)
        try:
            code = process.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            failures.append(f"fade did not end within {EXIT_WAIT_S:g} s of the kill")
            process.kill()
            code = process.wait()
    time.sleep(SETTLE_S)
    left = tagged_processes(tag)
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if left:
        failures.append(f"{len(left)} process(es) left: " + "; ".join(f"{pid} {command[:100]}" for pid, command in left))
    size_after = results.stat().st_size if results.exists() else 0
    time.sleep(GROWTH_WATCH_S)
    if (results.stat().st_size if results.exists() else 0) != size_after:
        failures.append("the results file grew after the run was over")
    records, problems = read_lines(results)
    if problems:
        failures.append(f"unreadable lines: {problems}")
    failed = [record for record in records if record.get("status") != "ok"]
    if killed_pid is not None and target == "fade" and failed:
        failures.append(f"{len(failed)} failed record(s) after a SIGKILL of fade: "
                        + "; ".join(f"{r['case_id']}: {r.get('error')}" for r in failed))  # fmt: skip
    if killed_pid is not None and target == "torchrun":
        misnamed = [record for record in failed if LAUNCHER_DEATH not in (record.get("error") or "")]
        if misnamed or len(failed) > 1:
            failures.append("records blaming cases for torchrun's death: "
                            + "; ".join(f"{r['case_id']} {r['status']}: {r.get('error')}" for r in failed))  # fmt: skip
    seen: dict = {}
    for record in records:
        key = (record.get("run_id"), record.get("case_id"))
        seen[key] = seen.get(key, 0) + 1
    twice = [case for (_, case), count in seen.items() if count > 1]
    if twice:
        failures.append(f"recorded twice: {twice}")
    resume = resume_check(results, tag, run_dir, nproc, records)
    failures += resume.pop("failures")
    return {
        "run": index, "target": target, "kill_after_s": delay_s, "killed_at_s": killed_at_s,
        "killed": killed_pid is not None, "fade_exit": code, "records": len(records), "failed_records": len(failed),
        "failed_record_errors": [record.get("error") for record in failed], "processes_left": len(left),
        "resume": resume, "failures": failures,
    }  # fmt: skip


def resume_check(results: Path, tag: str, run_dir: Path, nproc: int, before: list) -> dict:
    """`--resume` right after the kill: the dead run's lock must not block, nothing ok is measured again."""
    ok_before = {record["case_id"] for record in before if record.get("status") == "ok"}
    completed = subprocess.run(fade_command(results, True, nproc), capture_output=True, text=True, encoding="utf-8",
                               errors="replace", env=environment(tag + "-resume"), cwd=run_dir, timeout=RESUME_TIMEOUT_S)  # fmt: skip
    (run_dir / "resume.console.txt").write_text(completed.stdout + completed.stderr, encoding="utf-8")
    failures = []
    if completed.returncode != 0:
        failures.append(f"--resume exited {completed.returncode}: {completed.stderr.strip()[-300:]}")
    records, problems = read_lines(results)
    new = records[len(before):]
    again = sorted({record["case_id"] for record in new} & ok_before)
    if again:
        failures.append(f"--resume measured again: {again}")
    latest = {}
    for record in records:
        latest[record["case_id"]] = record["status"]
    not_ok = sorted(case for case, status in latest.items() if status != "ok")
    if completed.returncode == 0 and (not_ok or len(latest) < CASES):
        failures.append(f"after --resume, cases not ok: {not_ok or len(latest)}")
    left = tagged_processes(tag + "-resume")
    if left:
        failures.append(f"{len(left)} process(es) left by --resume")
    return {"exit": completed.returncode, "measured": len(new), "failures": failures}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=None, help="default: drawn, and printed")
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args(argv)
    if not sys.platform.startswith("linux"):
        print("dist_kill_battery: needs Linux (/proc)", file=sys.stderr)
        return 3
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    print(f"dist_kill_battery: seed {seed}, {args.runs} runs", flush=True)
    rng = random.Random(seed)
    args.out.mkdir(parents=True, exist_ok=True)
    uncut_s = uncut_run(args.out / "uncut", args.nproc)
    window_s = (KILL_FROM_S, round(KILL_UNTIL * uncut_s, 2))
    print(f"dist_kill_battery: an uncut run takes {uncut_s:.1f} s; kills fall in {window_s[0]}-{window_s[1]} s", flush=True)
    runs = []
    index = 0
    while sum(run["killed"] for run in runs) < args.runs and index < 2 * args.runs:
        run = one_run(index, rng, args.out, args.nproc, window_s)
        index += 1
        runs.append(run)
        verdict = "ok" if not run["failures"] else "FAIL: " + " | ".join(run["failures"])
        moment = "" if run["killed"] else " (ended before; not counted)"
        print(f"run {run['run']:2d}: SIGKILL {run['target']:8s} at {run['kill_after_s']:5.2f} s{moment} -> fade exit "
              f"{run['fade_exit']}, {run['records']} records ({run['failed_records']} failed), resume measured "
              f"{run['resume']['measured']}: {verdict}", flush=True)  # fmt: skip
    summary = {
        "seed": seed, "attempts": len(runs), "runs_killed": sum(r["killed"] for r in runs), "nproc": args.nproc,
        "uncut_run_s": round(uncut_s, 2), "kill_window_s": list(window_s),
        "killed": {"fade": sum(r["killed"] and r["target"] == "fade" for r in runs),
                   "torchrun": sum(r["killed"] and r["target"] == "torchrun" for r in runs),
                   "ended_before_the_kill": sum(not r["killed"] for r in runs)},
        "processes_left": sum(r["processes_left"] for r in runs),
        "records": sum(r["records"] for r in runs),
        "killed_before_the_first_record": sum(r["killed"] and not r["records"] for r in runs),
        "failed_records": sum(r["failed_records"] for r in runs),
        "launcher_death_records": sum(LAUNCHER_DEATH in (e or "") for r in runs for e in r["failed_record_errors"]),
        "resume_exit_nonzero": sum(r["resume"]["exit"] != 0 for r in runs),
        "runs_failed": sum(bool(r["failures"]) for r in runs),
        "details": runs,
    }  # fmt: skip
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    print(json.dumps({key: value for key, value in summary.items() if key != "details"}), flush=True)
    return 1 if summary["runs_failed"] or summary["runs_killed"] < args.runs else 0


if __name__ == "__main__":
    sys.exit(main())
