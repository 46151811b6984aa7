"""The public Python API (fade.api, re-exported by `import fade`): real signatures and docstrings, the same
parameters as the library functions it fronts, results as dataclasses with `to_dict()`, and `fade.doctor()`
and `fade.bench()` running on a CPU-only machine."""

import inspect
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

import fade
from fade.cli import main
from fade.errors import FadeUsageError

FIXTURES = Path(__file__).parent / "fixtures" / "snapshots"
SRC_ROOT = str(Path(__file__).resolve().parents[1] / "src")
PUBLIC_FUNCTIONS = ["doctor", "bench", "tune", "load_tuning", "guard", "apply_fade_patches", "device_truth",
                    "collect_snapshot", "diagnose"]


@pytest.mark.parametrize("name", PUBLIC_FUNCTIONS)
def test_every_public_function_has_real_parameters_and_a_docstring(name):
    function = getattr(fade, name)
    kinds = {parameter.kind for parameter in inspect.signature(function).parameters.values()}
    assert not kinds & {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}, name
    assert name in fade.__all__ and len(inspect.getdoc(function) or "") > 40


def _parameters(function, leave_out=()) -> list:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values() if p.name not in leave_out]


def test_the_api_mirrors_the_library_functions_it_fronts():
    """Same names, kinds and defaults: a default changed in the library must change here too."""
    from fade.act import patches
    from fade.act.tune import tuner, tuning_file
    from fade.collect import snapshot
    from fade.hostwork import process, session

    api_tune = {name: (kind, default) for name, kind, default in _parameters(fade.tune)}
    # fade.tune fronts both tuners: the in-process one (a module) and run_tune (a zoo name or module:function)
    for name, kind, default in _parameters(tuner.tune, leave_out=("clock", "output", "example_inputs")):
        assert api_tune[name] == (kind, default), name
    for name, kind, default in _parameters(tuner.run_tune, leave_out=("model", "mode", "output")):
        if name in api_tune:
            assert api_tune[name][1] == default, name
    assert {"batch", "size", "exhaustive", "quick", "resume", "out"} <= set(api_tune)
    assert _parameters(fade.guard) == _parameters(session.guard)
    assert _parameters(fade.load_tuning) == _parameters(tuning_file.load_tuning, leave_out=("on_message",))
    assert _parameters(fade.apply_fade_patches) == _parameters(patches.apply_fade_patches,
                                                               leave_out=("on_message", "guard_at_exit"))
    assert _parameters(fade.collect_snapshot) == _parameters(snapshot.collect_snapshot)
    assert _parameters(fade.api.enable_process_guard) == _parameters(process.enable_process_guard,
                                                                     leave_out=("at_exit",))


def test_import_fade_is_light_and_fade_guard_stays_the_function():
    """`import fade` imports no torch and no library module (fade.version holds one line); importing the guard's
    package (fade.hostwork) afterwards does not rebind `fade.guard` (it used to be both a function and a
    subpackage)."""
    code = (
        "import json, sys, fade; loaded = sorted(m for m in sys.modules if m.startswith('fade'));"
        "torch_loaded = 'torch' in sys.modules; import fade.hostwork;"
        "print(json.dumps([loaded, torch_loaded, callable(fade.guard), type(fade.guard).__name__]))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={"PYTHONPATH": SRC_ROOT, "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    loaded, torch_loaded, guard_callable, guard_type = json.loads(result.stdout)
    assert loaded == ["fade", "fade.api", "fade.version"] and not torch_loaded
    assert guard_callable and guard_type == "function"


def test_doctor_on_a_saved_snapshot_returns_a_result_with_versioned_json():
    result = fade.doctor(snapshot=FIXTURES / "amd_rx6800_cpu_wheel_installed.json")
    assert isinstance(result, fade.DoctorResult) and not result.live and result.measurements is None
    assert result.exit_status == 1 and any(finding["severity"] == "fail" for finding in result.findings)
    data = result.to_dict()
    assert list(data)[:2] == ["schema_version", "fade_version"]
    assert data["schema_version"] == fade.api.DOCTOR_SCHEMA_VERSION and data["fade_version"] == fade.__version__
    assert data["devices"] == result.devices and json.loads(json.dumps(data)) == data


def test_doctor_json_on_the_command_line_carries_the_schema_and_fade_versions(capsys):
    code = main(["doctor", "--snapshot", str(FIXTURES / "amd_rx6800_cpu_wheel_installed.json"), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["schema_version"] == 1 and report["fade_version"] == fade.__version__
    assert report == fade.doctor(snapshot=FIXTURES / "amd_rx6800_cpu_wheel_installed.json").to_dict() | {
        "elapsed_s": report["elapsed_s"]}


def test_doctor_measures_this_machine_from_python():
    """The live doctor on a CPU-only machine: a torch probe and the quick measurements in one child."""
    result = fade.doctor()
    assert result.live and result.exit_status in (0, 1)
    assert result.stack["torch"] and result.measurements is not None and "devices" in result.measurements
    assert result.to_dict()["elapsed_s"] == result.elapsed_s > 0


def test_doctor_rejects_a_rules_file_that_does_not_load(tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text("[[rule]]\nid = 1\n")
    with pytest.raises(FadeUsageError, match="rules file"):
        fade.doctor(snapshot=FIXTURES / "amd_rx6800_cpu_wheel_installed.json", rules=rules)


class RecordingProgress:
    """A RunProgress that writes down what it heard."""

    def __init__(self):
        self.calls = []

    def start(self, total, device):
        self.calls.append(("start", total, device))

    def case_started(self, case_id):
        self.calls.append(("case_started", case_id))

    def case_finished(self, record):
        self.calls.append(("case_finished", record["case_id"], record["status"]))

    def finished(self, summary):
        self.calls.append(("finished", summary.selected))


def test_bench_micro_runs_from_python_and_reports_progress_through_the_callback(tmp_path):
    progress = RecordingProgress()
    result = fade.bench("micro", "cpu", quick=True, only="gemm/fp32/256x256x256", out=tmp_path / "micro.jsonl",
                        isolate=False, progress=progress)
    assert isinstance(result, fade.BenchResult) and result.exit_status == 0
    (record,) = result.records
    assert progress.calls == [("start", 1, "cpu"), ("case_started", record["case_id"]),
                              ("case_finished", record["case_id"], "ok"), ("finished", 1)]
    assert [row["case_id"] for row in result.summary] == [record["case_id"]]
    data = result.to_dict()
    assert data["schema_version"] == fade.api.BENCH_SCHEMA_VERSION and data["suite"] == "micro"
    assert data["statuses"] == {"ok": 1} and data["records"] == [record]
    assert (tmp_path / "micro.jsonl").read_text().count("\n") == 1


def test_bench_models_runs_a_tiny_selection_from_python(tmp_path):
    result = fade.bench("models", "cpu", models=["resnet18"], batch=1, image_size=32, mode="infer", variants=["fp32"],
                        quick=True, out=tmp_path / "models.jsonl", isolate=False, progress=False)
    (record,) = result.records
    assert record["status"] == "ok" and record["case_id"] == "models/resnet18/infer/fp32/b1-32px"
    assert result.summary[0]["case_id"] == record["case_id"] and "FLOP/s" in result.summary[0]["note"]
    assert result.to_dict(with_records=False).keys() >= {"schema_version", "suite", "statuses", "summary"}


def test_bench_rejects_an_unknown_suite_before_anything_runs(tmp_path):
    with pytest.raises(FadeUsageError, match="unknown suite 'macro'"):
        fade.bench("macro", out=tmp_path / "never.jsonl")
    assert not (tmp_path / "never.jsonl").exists()


def test_the_progress_bar_prints_one_line_per_case_and_a_closing_line():
    from rich.console import Console

    from fade.measure.runner import RunSummary
    from fade.report.progress import ProgressBar

    output = io.StringIO()
    bar = ProgressBar(Console(file=output, width=120))
    bar.start(1, "cpu")
    bar.case_started("gemm/fp32/a")
    bar.case_finished({"case_id": "gemm/fp32/a", "status": "ok", "value": 1.5, "unit": "TFLOP/s"})
    bar.finished(RunSummary(out="r.jsonl", run_id="x", device="cpu", selected=1, resumed=0, statuses={"ok": 1}))
    lines = output.getvalue().splitlines()
    assert "ok  gemm/fp32/a  1.5 TFLOP/s" in lines[0]
    assert lines[-1].startswith("done: 1 of 1 cases (1 ok) in 0.0 s -> r.jsonl")


def test_apply_fade_patches_reports_changes_through_the_facade_and_the_library_stays_silent(capsys):
    from fade.act.patches import apply_fade_patches
    from tests.test_patches import _static_rocm_snapshot

    snapshot = _static_rocm_snapshot([100301])  # gfx1031 on a wheel without it: HSA_OVERRIDE_GFX_VERSION
    heard = []
    changes = apply_fade_patches(environ={}, snapshot=snapshot, on_message=heard.append)
    assert capsys.readouterr().err == "" and heard == [str(change) for change in changes] and changes
    fade.apply_fade_patches(environ={}, snapshot=snapshot)
    assert capsys.readouterr().err.splitlines() == heard
