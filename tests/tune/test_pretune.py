"""Pre-tuning: three fresh processes (cold, exhaustive tuning into the cache, warm lookup), with a fake runner."""

from fade.act.tune.pretune import LOOKUP_ENV, PRETUNE_ENV, run_pretune

MI300 = {"backend": "rocm", "name": "AMD Instinct MI300X", "arch": "gfx942", "torch": "2.11.0", "hip": "6.4", "miopen": 30400, "driver": "6.10"}


def test_pretune_writes_into_the_cache_and_reports_first_step_before_and_after(tmp_path):
    runs = []

    def fake_child(env, arguments):
        runs.append((env, arguments))
        first = {0: 40.0, 1: 90.0, 2: 2.0}[len(runs) - 1]  # cold find, exhaustive search, DB hit
        return {"first_step_s": first, "second_step_s": 0.1, "steps": 2}

    result = run_pretune("resnet50", fingerprint=MI300, cache_base=tmp_path, run_child=fake_child)
    cold, tuning, warm = (env for env, _ in runs)
    assert cold["MIOPEN_USER_DB_PATH"] != tuning["MIOPEN_USER_DB_PATH"]  # before: an empty DB
    assert tuning["MIOPEN_USER_DB_PATH"] == warm["MIOPEN_USER_DB_PATH"] == result["cache_dir"] + "/miopen/db"
    assert {name: tuning[name] for name in PRETUNE_ENV} == PRETUNE_ENV
    assert {name: warm[name] for name in LOOKUP_ENV} == LOOKUP_ENV
    assert "--benchmark" in runs[1][1]
    assert result["first_step_speedup"] == 20.0


def test_a_killed_parent_takes_the_pretune_child_along_and_frees_the_cache_lock(tmp_path):
    """The parent holds the cache lock and runs a child the way pretune's child_main starts (die_with_parent);
    SIGKILL the parent: the child ends and another tuner gets the lock."""
    import os
    import signal
    import subprocess
    import sys

    from filelock import FileLock

    lock_path = tmp_path / "lock"
    child_code = "from fade.measure.worker import die_with_parent; die_with_parent(); import time; print('ready', flush=True); time.sleep(120)"
    parent_code = (
        "import subprocess, sys, time; from filelock import FileLock\n"
        f"lock = FileLock({str(lock_path)!r}); lock.acquire()\n"
        f"child = subprocess.Popen([sys.executable, '-c', {child_code!r}], stdout=subprocess.PIPE, text=True)\n"
        "child.stdout.readline(); print(child.pid, flush=True); time.sleep(120)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True, env=env)
    child_pid = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    for _ in range(200):  # the kernel signals the child at once; allow a slow CI host 20 s
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            break
        subprocess.run(["sleep", "0.1"])
    else:
        os.kill(child_pid, signal.SIGKILL)
        raise AssertionError("the child outlived its parent")
    with FileLock(str(lock_path), timeout=5):
        pass
