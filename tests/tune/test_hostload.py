"""The host load from /proc: other processes' CPU time over the run, from a fake /proc tree; the judgement."""

from fade.act.tune.hostload import HostLoadProbe, is_busy


def write_proc(root, busy_ticks, processes):
    """/proc/stat with `busy_ticks` of user time, /proc/loadavg, and /proc/<pid>/stat for (pid, ppid, ticks)."""
    (root / "stat").write_text(f"cpu  {busy_ticks} 0 0 100000 0 0 0 0 0 0\ncpu0 0 0 0 0\n")
    (root / "loadavg").write_text("3.10 2.00 1.00 4/300 999\n")
    for pid, ppid, ticks in processes:
        (root / str(pid)).mkdir(exist_ok=True)
        fields = ["S", str(ppid)] + ["0"] * 9 + [str(ticks), "0", "0", "0"] + ["0"] * 5
        (root / str(pid) / "stat").write_text(f"{pid} (python worker) " + " ".join(fields) + "\n")


def test_other_processes_cpu_time_is_the_busy_time_less_this_process_tree(tmp_path):
    now = [0.0]
    probe = HostLoadProbe(proc=tmp_path, clock=lambda: now[0], pid=10)
    write_proc(tmp_path, 1000, [(10, 1, 100), (11, 10, 0), (20, 1, 0)])
    probe.start()
    now[0] = 10.0
    # 10 s later: all cores 1600 ticks busier; this tree (10 and its worker 11) 600 of them; pid 20 is another's
    write_proc(tmp_path, 2600, [(10, 1, 300), (11, 10, 400), (20, 1, 1000)])
    load = probe.stop()
    ticks = 100.0  # SC_CLK_TCK on Linux
    assert load["own_cpu_s"] == 600 / ticks and load["other_cpu_s"] == 1000 / ticks
    assert load["other_cores"] == 1.0 and load["run_queue"] == 4


def test_no_proc_means_no_judgement(tmp_path):
    probe = HostLoadProbe(proc=tmp_path / "missing")
    probe.start()
    assert probe.stop() is None and is_busy(None, "cpu") is None


def test_busy_means_the_cores_the_step_needs():
    load = {"other_cores": 1.0, "cores": 2, "wall_s": 60.0}
    assert "a CPU step needs them all" in is_busy(load, "cpu")  # half of a 2-core host
    assert is_busy(load, "gpu") is None  # one core left to launch kernels
    assert "less than one left" in is_busy({**load, "other_cores": 1.5}, "gpu")
    assert is_busy({**load, "wall_s": 1.0}, "cpu") is None  # too short to judge
