"""Regression tests for issue 15's holes: every bad file, full disk and busy host gets one clear line, and
nothing already measured is lost. docs/reliability.md lists each case with the test that proves it."""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fade.analyze.compare import compare_files
from fade.cli import main
from fade.errors import FadeUsageError
from fade.measure.case import Case
from fade.measure.runner import InProcessExecutor, run_cases
from fade.results import read_records, summarize

from measure import fault_cases  # tests/ is on sys.path: tests/reliability is a package under it

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "snapshots"
SRC_ROOT = str(Path(__file__).resolve().parents[2] / "src")


def record(case_id="micro/gemm/fp32/1024", value=100.0, **fields) -> dict:
    """A minimal valid record; `fields` override or add top-level fields."""
    base = {"schema_version": 1, "fade_version": "0", "run_id": "r", "case_id": case_id, "suite": "micro",
            "status": "ok", "torch_device": "cpu", "params": {}, "value": value, "unit": "GFLOP/s",
            "stats": {"median_s": 0.01, "iqr_s": 0.0001, "n": 10, "noisy": False}, "extra": {}, "telemetry": {},
            "warnings": []}  # fmt: skip
    base.update(fields)
    return base


def write_jsonl(path: Path, lines) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def fault_case(name: str, function: str) -> Case:
    return Case(case_id=f"test/{name}", suite="test", module=fault_cases.__name__, function=function, params={})


# -- hole 1: one bad field loses only its own line --------------------------------------------------------
BAD_FIELDS = [{"stats": "x"}, {"extra": "s"}, {"value": "fast"}, {"torch_device": ["x"]}, {"telemetry": 3},
              {"params": [1]}, {"status": "weird"}, {"stats": {"median_s": "1"}}, {"value": True},
              {"telemetry": {"throttle_reasons": [1]}}]  # fmt: skip


@pytest.mark.parametrize("bad", BAD_FIELDS, ids=[next(iter(b)) + "=" + json.dumps(next(iter(b.values()))) for b in BAD_FIELDS])
def test_a_wrong_type_in_one_record_skips_that_line_and_keeps_the_rest(tmp_path, bad):
    path = write_jsonl(tmp_path / "r.jsonl", [record("a"), record("b", **bad), record("c")])
    found = read_records(path)
    assert [r["case_id"] for r in found.records] == ["a", "c"]
    (problem,) = found.problems
    assert problem.startswith(f"{path}:2: ") and "\n" not in problem
    comparison = compare_files([path])
    assert [row["row"] for row in comparison.rows] == ["a", "c"]


def test_deep_nesting_and_nan_are_problems_not_crashes(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", ["[" * 200000, record("a"), json.dumps(record("b")).replace("100.0", "NaN")])
    found = read_records(path)
    assert [r["case_id"] for r in found.records] == ["a"]
    assert "nested deeper" in found.problems[0] and "NaN is not a JSON number" in found.problems[1]


def test_compare_report_and_ops_compare_exit_2_with_one_line_per_bad_line(tmp_path, capsys):
    path = write_jsonl(tmp_path / "r.jsonl", [record("a"), record("b", stats="x"), "{torn"])
    assert main(["compare", str(path)]) == 2
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 2
    assert "a" in (tmp_path / "r.html").read_text()
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fade: error")]
    assert len(errors) == 4 and all(":2: field 'stats'" in e or ":3: not valid JSON" in e for e in errors)
    assert main(["ops", "compare", str(path), str(path)]) == 2
    assert "Traceback" not in capsys.readouterr().err


# -- hole 2: resume follows the latest record -------------------------------------------------------------
def test_resume_reruns_a_case_whose_latest_record_failed_after_an_ok_one(tmp_path):
    out = tmp_path / "r.jsonl"
    run_cases([fault_case("a", "fine")], executor=InProcessExecutor("cpu"), out=out)
    crashed = dict(read_records(out).records[0], status="crashed", value=None)
    with open(out, "a") as handle:
        handle.write(json.dumps(crashed) + "\n{torn\n")
    summary = run_cases([fault_case("a", "fine")], executor=InProcessExecutor("cpu"), out=out, resume=True)
    assert summary.resumed == 0 and [r["case_id"] for r in summary.records] == ["test/a"]
    assert summary.problems == [f"{out}:3: not valid JSON (Expecting property name enclosed in double quotes; column 2)"]


def test_bench_prints_the_unreadable_lines_resume_skipped(tmp_path, capsys):
    from fade.cli.args import report_run_problems
    from fade.measure.runner import RunSummary

    summary = RunSummary(out="r.jsonl", run_id="x", device="cpu", selected=1, resumed=0, problems=["r.jsonl:3: torn"])
    assert report_run_problems(summary) == 0
    assert capsys.readouterr().err == "fade: error: r.jsonl:3: torn\n"


# -- hole 3: a profile is validated whole before any of it is applied ------------------------------------
def profile(**changes) -> dict:
    from fade.act.tune.tuning_file import KIND, SCHEMA_VERSION

    data = {"schema_version": SCHEMA_VERSION, "kind": KIND, "device": {"name": "cpu"}, "model": "m", "mode": "train",
            "batch": 2, "knobs": {"precision": "default"}, "env": {"A_FIRST": "1", "Z_LAST": "2"}}  # fmt: skip
    data.update(changes)
    return data


@pytest.mark.parametrize("content, says", [
    (b"\x89PNG\r\n\x1a\n\xff\xfe", "not UTF-8"),
    (b"[" * 100000, "nested too deeply"),
    (json.dumps(profile(knobs={"precision": ["amp"]})).encode(), "knobs.precision must be a string"),
    (json.dumps(profile(env={"A_FIRST": "1", "B=C": "2"})).encode(), "not a valid environment variable name"),
    (json.dumps(profile(env={"A_FIRST": "1", "Z_LAST": "a\0b"})).encode(), "without NUL"),
], ids=["binary", "deep", "knob-list", "env-name-equals", "env-nul"])  # fmt: skip
def test_a_bad_profile_is_one_line_and_sets_nothing(tmp_path, content, says):
    from fade.act.tune.tuning_file import TuningFileError, load_tuning

    path = tmp_path / "p.json"
    path.write_bytes(content)
    environ: dict = {}
    with pytest.raises(TuningFileError) as raised:
        load_tuning(path, environ=environ, fingerprint={"name": "cpu"}, set_torch_flags=False)
    assert says in str(raised.value) and "\n" not in str(raised.value)
    assert environ == {}


def test_tune_show_of_a_binary_file_is_exit_2(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_bytes(b"\xff\xfe\x00binary")
    assert main(["tune", "--show", str(path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


# -- hole 4: a full disk stops the run in one line; finished records and previous files stay ----------------
def test_full_disk_mid_run_keeps_every_finished_record_whole(tmp_path, monkeypatch):
    import fade.results

    out = tmp_path / "r.jsonl"
    write_jsonl(out, [record("earlier")])
    before = out.read_bytes()
    real_write_all, calls = fade.results.write_all, []

    def write_then_fill(fd, data):
        calls.append(data)
        if len(calls) == 3:  # the third line: half of it lands, then the disk is full
            os.write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write_all(fd, data)

    monkeypatch.setattr(fade.results, "write_all", write_then_fill)
    cases = [fault_case(name, "fine") for name in ("a", "b", "c", "d")]
    summary = run_cases(cases, executor=InProcessExecutor("cpu"), out=out)
    assert summary.write_error.startswith(f"cannot write {out}: No space left on device")
    assert out.read_bytes().startswith(before)
    assert [json.loads(line)["case_id"] for line in out.read_text().splitlines()] == ["earlier", "test/a", "test/b"]


def test_full_disk_in_bench_is_exit_2_with_one_line(tmp_path, monkeypatch, capsys):
    import fade.api
    from fade.measure.runner import RunSummary

    run = RunSummary(out="r.jsonl", run_id="x", device="cpu", selected=2, resumed=0,
                     write_error="cannot write r.jsonl: No space left on device; the r.jsonl records before this case are intact")  # fmt: skip
    monkeypatch.setattr(fade.api, "bench", lambda *a, **k: fade.api.BenchResult("micro", run))
    assert main(["bench", "micro", "-o", str(tmp_path / "r.jsonl")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"fade: error: {run.write_error}"]


@pytest.mark.parametrize("verb", ["report", "compare-json", "compare-markdown", "snapshot", "doctor-json"])
def test_full_disk_on_rewrite_leaves_the_previous_file_untouched(tmp_path, monkeypatch, capsys, verb):
    import fade.api

    results = write_jsonl(tmp_path / "r.jsonl", [record("a")])
    out = tmp_path / "previous.out"
    out.write_text("the previous file\n")
    snapshot = json.loads((FIXTURES / "cpu_only_server_cpu_wheel.json").read_text())
    monkeypatch.setattr(fade.api, "collect_snapshot", lambda **k: snapshot)
    monkeypatch.setattr(fade.api, "doctor", lambda **k: type("R", (), {"to_dict": lambda self: {"a": 1}, "exit_status": 0})())
    argv = {"report": ["report", str(results), "-o", str(out)],
            "compare-json": ["compare", str(results), "--json", str(out)],
            "compare-markdown": ["compare", str(results), "--markdown", str(out)],
            "snapshot": ["snapshot", "-o", str(out)],
            "doctor-json": ["doctor", "--no-measure", "--json", str(out)]}[verb]  # fmt: skip

    def full(descriptor):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    assert main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [f"fade: error: cannot write {out}: No space left on device"] or (
        verb == "report" and error == [f"fade: error: -o {out}: cannot write there (No space left on device)"])
    assert out.read_text() == "the previous file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["previous.out", "r.jsonl"]  # no temp file left


# -- hole 5: outputs are checked before any work ---------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["bench", "models", "--json", "{dir}"], ["bench", "models", "--json", "{file}/x.json"],
    ["bench", "micro", "-o", "{dir}"], ["snapshot", "-o", "{dir}"], ["doctor", "--json", "{dir}"],
    ["report", "{results}", "-o", "{dir}"], ["compare", "{results}", "--json", "{dir}"],
    ["compare", "{results}", "--markdown", "{dir}"], ["ops", "compare", "{results}", "{results}", "--json", "{dir}"],
    ["tune", "resnet18", "-o", "{dir}"], ["watch", "--json", "{dir}", "--", "python", "{script}"],
])  # fmt: skip
def test_an_unwritable_output_is_exit_2_before_any_work(tmp_path, monkeypatch, capsys, argv):
    import fade.api
    import fade.act.tune
    import fade.hostwork.process

    def no_work(*args, **kwargs):
        raise AssertionError("work started before the output was checked")

    for module, name in ((fade.api, "bench"), (fade.api, "doctor"), (fade.api, "collect_snapshot"),
                         (fade.act.tune, "run_tune"), (fade.hostwork.process, "run_watched")):  # fmt: skip
        monkeypatch.setattr(module, name, no_work)
    (tmp_path / "a_file").write_text("x")
    script = tmp_path / "s.py"
    script.write_text("print('ran')\n")
    results = write_jsonl(tmp_path / "r.jsonl", [record("a")])
    values = {"dir": str(tmp_path), "file": str(tmp_path / "a_file"), "results": str(results), "script": str(script)}
    assert main([part.format(**values) for part in argv]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("fade: error: ") and ("directory" in line or "not a directory" in line)


def test_a_missing_parent_that_can_be_created_is_writable(tmp_path):
    from fade.cli.args import check_writable

    check_writable(str(tmp_path / "new" / "dir" / "out.json"), "--json")
    assert not (tmp_path / "new").exists()  # checked, not created


# -- hole 6: snapshot defaults and encodings -------------------------------------------------------------
def test_node_and_device_index_default_to_their_position(tmp_path):
    from fade.collect.snapshot import load_snapshot

    snapshot = json.loads((FIXTURES / "rdna2_rx6800xt_rocm62_healthy.json").read_text())
    for node in snapshot["kfd_nodes"]:
        del node["node"]
    for device in snapshot["torch"]["devices"]:
        del device["index"]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(snapshot))
    loaded = load_snapshot(path)
    assert [node["node"] for node in loaded["kfd_nodes"]] == list(range(len(loaded["kfd_nodes"])))
    assert [device["index"] for device in loaded["torch"]["devices"]] == list(range(len(loaded["torch"]["devices"])))


def test_a_kfd_property_outside_uint64_is_one_line(tmp_path):
    from fade.collect.snapshot import load_snapshot

    snapshot = json.loads((FIXTURES / "rdna2_rx6800xt_rocm62_healthy.json").read_text())
    snapshot["kfd_nodes"][1]["properties"]["simd_count"] = 2**70
    path = tmp_path / "s.json"
    path.write_text(json.dumps(snapshot))
    with pytest.raises(FadeUsageError, match=r"kfd_nodes\[1\]\.properties\.simd_count must be an integer in 0\.\.2\*\*64-1"):
        load_snapshot(path)


def test_files_are_read_as_utf8_whatever_the_locale(tmp_path):
    snapshot = json.loads((FIXTURES / "cpu_only_server_cpu_wheel.json").read_text())
    snapshot["os"]["release"] = "6.8 — ünïcode"
    (tmp_path / "s.json").write_text(json.dumps(snapshot, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "rules.toml").write_text('# ünïcode comment\n', encoding="utf-8")
    script = tmp_path / "read.py"
    script.write_text(
        "import sys\nfrom fade.collect.snapshot import load_snapshot\nfrom fade.analyze.rules import load_rules\n"
        "assert sys.flags.utf8_mode == 0\n"
        "assert load_snapshot(sys.argv[1])['os']['release'].endswith('\u00fcn\u00efcode')\n"
        "assert load_rules(sys.argv[2]) == ()\n", encoding="utf-8")
    environment = dict(os.environ, LC_ALL="C", LANG="C", PYTHONPATH=SRC_ROOT)
    environment.pop("PYTHONUTF8", None)
    result = subprocess.run([sys.executable, "-X", "utf8=0", str(script), str(tmp_path / "s.json"), str(tmp_path / "rules.toml")],
                            env=environment, capture_output=True, text=True, encoding="utf-8", errors="replace")  # fmt: skip
    assert result.returncode == 0, result.stderr


# -- hole 7: a busy host is measured, recorded and shown ----------------------------------------------------
def fake_proc(root: Path, busy_ticks: int, procs_running: int = 1, load: str = "0.10") -> Path:
    root.mkdir(exist_ok=True)
    (root / "stat").write_text(f"cpu  {busy_ticks} 0 0 9999 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\nprocs_running {procs_running}\n")
    (root / "loadavg").write_text(f"{load} 0.1 0.1 {procs_running}/80 1234\n")
    return root


def monitor_over(tmp_path, *, busy_ticks_during: int, own_cpu_s: float, window_s: float = 1.0, pids=None):
    from fade.measure.telemetry import ContentionMonitor, ProcReader

    root = fake_proc(tmp_path / "proc", 1000)
    clock = iter([0.0, window_s])
    own = iter([10.0, 10.0 + own_cpu_s])
    reader = ProcReader(root, own_cpu_s=lambda: next(own), clock=lambda: next(clock), cpus=2)
    with ContentionMonitor(reader, processes=(lambda: pids) if pids is not None else None, own_pid=42) as monitor:
        fake_proc(root, 1000 + busy_ticks_during, procs_running=5, load="3.9")
    return monitor.summary()


def test_other_processes_taking_the_cpus_make_the_case_contended(tmp_path):
    # 2 CPUs over 1 s = 2 CPU-s; busy 1.8 CPU-s (180 ticks of 10 ms), 0.6 of it ours: others took 60%.
    summary = monitor_over(tmp_path, busy_ticks_during=180, own_cpu_s=0.6)
    assert summary["contended"] is True and summary["other_cpu_share"] == pytest.approx(0.6)
    assert summary["reasons"] == ["other processes used 60% of the 2 CPUs' time (CONTENDED_OTHER_CPU_SHARE 25%)"]
    assert summary["procs_running"] == [1, 5] and summary["load_1min"] == 3.9


def test_a_quiet_host_is_not_contended_and_a_short_window_is_not_judged(tmp_path):
    quiet = monitor_over(tmp_path, busy_ticks_during=110, own_cpu_s=1.0)
    assert quiet["contended"] is False and quiet["judged"] is True
    short = monitor_over(tmp_path, busy_ticks_during=3, own_cpu_s=0.0, window_s=0.05)
    assert short["contended"] is False and short["judged"] is False


def test_another_process_on_the_gpu_makes_the_case_contended(tmp_path):
    assert monitor_over(tmp_path, busy_ticks_during=0, own_cpu_s=0.0, pids=[42, 77])["gpu_other_processes"] == 1
    assert monitor_over(tmp_path, busy_ticks_during=0, own_cpu_s=0.0, pids=[42, 77])["contended"] is True
    assert monitor_over(tmp_path, busy_ticks_during=0, own_cpu_s=0.0, pids=[9001])["contended"] is False  # ourselves, by host pid


def contended_records():
    telemetry = {"contended": True, "contention_reasons": ["other processes used 60% of the 2 CPUs' time"]}
    return [record("a", telemetry=telemetry), record("b")]


def test_contended_shows_in_the_console_summary_compare_and_html(tmp_path):
    from fade.report.compare import cell_text, render_markdown
    from fade.report.console import make_console, render_bench_summary
    from fade.report.html import render_report

    rows = summarize(contended_records())
    assert [row["contended"] for row in rows] == [True, False]
    console = make_console(record=True, width=160)
    render_bench_summary(rows, {"device": "cpu", "out": "r.jsonl", "statuses": {"ok": 2}}, console)
    text = console.export_text()
    assert "other processes used 60%" in text and "1 of 2 case(s) ran while other work" in text
    path = write_jsonl(tmp_path / "r.jsonl", contended_records())
    comparison = compare_files([path, write_jsonl(tmp_path / "again.jsonl", contended_records())])
    assert cell_text(comparison.rows[0]["cells"][1]).endswith("contended") and comparison.contended == 2
    assert "contended: 2 cell(s)" in render_markdown(comparison)
    html, _, _ = render_report([path])
    assert "contended: other processes used 60%" in html


def test_the_contention_reasons_are_said_once_below_the_table_not_on_every_row():
    """Issue 30: at 80 columns (a pipe, a log) every contended row repeated its reasons, and 35 cases took 301
    lines. Each row says "contended"; the reasons come once, below the table."""
    from fade.report.console import make_console, render_bench_summary

    telemetry = {"contended": True, "contention_reasons": ["other processes used 84% of the 2 CPUs' time"]}
    rows = summarize([record(f"memory/copy/{n}MiB", telemetry=telemetry) for n in range(20)])
    console = make_console(record=True, width=80)
    render_bench_summary(rows, {"device": "cpu", "out": "r.jsonl", "statuses": {"ok": 20}}, console)
    text = " ".join(console.export_text().split())
    assert text.count("other processes used 84%") == 1 and text.count("contended") >= 20
    assert "20 of 20 case(s) ran while other work" in text


def test_a_progress_line_is_one_line_per_case_even_for_a_multi_line_error():
    from fade.report.progress import case_line

    line = case_line({"status": "error", "case_id": "x/1", "error": "RuntimeError: boom\n  File a.py\n  File b.py"})
    assert "\n" not in line and "RuntimeError: boom" in line


def test_a_cases_progress_line_and_its_table_row_give_one_unit():
    """Issue 30: `fade bench dist` showed 0.5246 GB/s in progress and 524.6 MB/s in the table."""
    from fade.report.console import make_console, render_bench_summary
    from fade.report.progress import case_line

    measured = record("dist/all_reduce/float32/1MiB", 0.5246, unit="GB/s")
    console = make_console(record=True, width=80)
    render_bench_summary(summarize([measured]), {"device": "cpu", "out": "r.jsonl", "statuses": {"ok": 1}}, console)
    assert "524.6 MB/s" in case_line(measured) and "524.6 MB/s" in console.export_text()


def test_every_record_carries_contention_telemetry(tmp_path):
    out = tmp_path / "r.jsonl"
    run_cases([fault_case("a", "fine")], executor=InProcessExecutor("cpu"), out=out)
    (written,) = read_records(out).records
    assert written["telemetry"]["contention"]["source"] == "/proc/stat, os.times"
    assert isinstance(written["telemetry"]["contended"], bool)


# -- hole 8: the smaller ones --------------------------------------------------------------------------
@pytest.mark.parametrize("function", ["memory_error", "cpu_allocator_error"])
def test_cpu_out_of_memory_is_oom(tmp_path, function):
    out = tmp_path / "r.jsonl"
    summary = run_cases([fault_case("m", function)], executor=InProcessExecutor("cpu"), out=out)
    assert summary.statuses == {"oom": 1}


def test_columns_0_still_prints_the_table(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "0")
    path = write_jsonl(tmp_path / "r.jsonl", [record("a")])
    assert main(["compare", str(path)]) == 0
    assert "Compared with" in capsys.readouterr().out


def test_report_of_a_snapshot_says_what_it_is(tmp_path, capsys):
    assert main(["report", str(FIXTURES / "cpu_only_server_cpu_wheel.json"), "-o", str(tmp_path / "r.html")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fade: error")]
    assert len(errors) == 1 and "this is a snapshot" in errors[0] and "not a results file" in errors[0]


def test_compare_of_files_sharing_no_case_says_so(tmp_path, capsys):
    micro = write_jsonl(tmp_path / "micro.jsonl", [record("micro/a")])
    models = write_jsonl(tmp_path / "models.jsonl", [record("models/b")])
    assert main(["compare", str(micro), str(models)]) == 0
    assert "share no case with the baseline 'micro.jsonl'" in capsys.readouterr().out.replace("\n", " ")


def test_bench_micro_help_states_what_was_measured(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "micro", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "~10 s" not in text and "measured" in text


def test_cpu_figures_read_in_a_unit_that_fits():
    from fade.report.compare import fitting_unit

    assert fitting_unit(0.0007738, "TFLOP/s") == pytest.approx((773.8, "MFLOP/s"))
    assert fitting_unit(65.9, "GFLOP/s") == (65.9, "GFLOP/s")
    assert fitting_unit(0.0, "TFLOP/s") == (0.0, "TFLOP/s")


def test_summary_rows_take_a_null_iqr_and_non_text_reasons():
    """Found by the random fuzz (benchmarks/corrupt_inputs.py --fuzz): the schema allows stats.iqr_s = null and
    the reader lets a list of numbers through as reasons; the summary must still render a row."""
    from fade.results import summarize

    record = {"schema_version": 1, "case_id": "gemm/x", "status": "ok", "torch_device": "cpu", "value": 1.0,
              "unit": "TFLOP/s", "stats": {"median_s": 0.5, "iqr_s": None, "cov": 0.01, "n": 3},
              "telemetry": {"throttled": True, "throttle_reasons": [1, 2], "contended": True, "contention_reasons": [3]}}
    row = summarize([record])[0]
    assert row["iqr_pct"] == 0.0 and "throttled: 1, 2" in row["note"] and "contended: 3" in row["note"]


def test_an_atomic_write_gives_the_mode_a_plain_write_would(tmp_path):
    """A temp file is created 0o600; the output must not be (a report others cannot read), and a replaced file
    keeps its own mode."""
    import os
    import stat

    from fade.files import atomic_write_text

    umask = os.umask(0o022)
    try:
        fresh = atomic_write_text(tmp_path / "report.html", "<p>")
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o644
        kept = tmp_path / "snapshot.json"
        kept.write_text("{}")
        kept.chmod(0o640)
        atomic_write_text(kept, "{}\n")
        assert stat.S_IMODE(kept.stat().st_mode) == 0o640
    finally:
        os.umask(umask)


def test_a_file_that_is_not_jsonl_gets_ten_lines_and_a_count_not_one_line_each(tmp_path, capsys):
    from fade.cli.args import MAX_PROBLEM_LINES_PER_FILE, report_problems

    report_problems([f"notes.md:{line}: not valid JSON (Expecting value; column 1)" for line in range(1, 101)])
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == MAX_PROBLEM_LINES_PER_FILE + 1
    assert lines[-1].startswith("fade: error: notes.md: 90 more unreadable lines")


def test_a_gzip_results_file_reads_like_the_plain_one_and_a_damaged_one_is_one_line(tmp_path):
    import gzip

    import pytest

    from fade.errors import FadeUsageError
    from fade.results import read_records

    line = '{"schema_version": 1, "case_id": "launch/x", "status": "ok", "torch_device": "cpu", "value": 1.0}\n'
    plain = tmp_path / "r.jsonl"
    plain.write_text(line * 2)
    packed = tmp_path / "r.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert read_records(packed).records == read_records(plain).records
    damaged = tmp_path / "bad.jsonl.gz"
    damaged.write_bytes(packed.read_bytes()[:20])
    with pytest.raises(FadeUsageError, match="damaged gzip"):
        read_records(damaged)
