"""benchmarks/tune_matrix.py --hand (issue 26) without a GPU or a child process: the orchestration driven by an
injected runner that writes what `fade tune` and hand_config.py would, on a fake clock. What is specified:
which commands run (one process per side, CUDA_VISIBLE_DEVICES from --gpu, channels_last on conv nets, fade
tune at its default budget), FADE's choice against the fastest hand configuration that ran (a crashed,
failed or diverged side is never the best), the 0.95 bar, the tune's wall time against budget + 60 s,
resuming, the deadline, and the table."""

import json
from pathlib import Path

import pytest

from tests.cliutil import load_benchmark

from fade.act.tune.tuning_file import KIND, SCHEMA_VERSION

BUDGET_S = 300.0
CHOICE = {"precision": "amp-bf16", "channels_last": "on", "compile": "reduce-overhead", "cudnn_benchmark": "off"}


@pytest.fixture(scope="module")
def script():
    return load_benchmark("tune_matrix")


def tuning_file(knobs: dict, env=None) -> dict:
    """The fields the harness reads from a tuning file, as `fade tune` writes them."""
    return {"schema_version": SCHEMA_VERSION, "kind": KIND, "device": {"backend": "cuda", "name": "fake"}, "model": "m",
            "mode": "train", "batch": 64, "knobs": {"optimizer_impl": "default", **knobs}, "env": dict(env or {}),
            "changed": {k: v for k, v in knobs.items() if v not in ("off", "default")}, "verdict": "faster",
            "before": {"samples_per_s": 100.0}, "after": {"samples_per_s": 390.0}, "final_check": {"speedup": 3.9},
            "search": {"budget_s": BUDGET_S, "elapsed_s": 290.0}}  # fmt: skip


def child_run(exit_code, wall_s, timed_out=False):
    """What run_child returns (tune_matrix.ChildRun's fields)."""
    from types import SimpleNamespace

    return SimpleNamespace(exit_code=exit_code, wall_s=wall_s, timed_out=timed_out)


class FakeChildren:
    """runner(command, env=, log=, timeout_s=): `fade tune` writes `tuning` after `tune_wall_s`; a hand side
    named N writes samples_per_s = rates[N], or crashes ("crash"), raises in the loop ("failed"), diverges
    (("diverged", rate)) or hangs to its timeout ("hang"). Every call is recorded; the clock moves by each
    child's wall time."""

    def __init__(self, rates: dict, tuning: dict, *, tune_wall_s=320.0, tune_exit=0):
        self.rates, self.tuning, self.tune_wall_s, self.tune_exit = rates, tuning, tune_wall_s, tune_exit
        self.now = 0.0
        self.calls = []

    def clock(self):
        return self.now

    def __call__(self, command, *, env, log, timeout_s):
        from types import SimpleNamespace

        self.calls.append(SimpleNamespace(command=list(command), env=env, timeout_s=timeout_s))
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("child output\n")
        if "tune" in command:
            self.now += self.tune_wall_s
            Path(command[command.index("-o") + 1]).write_text(json.dumps(self.tuning))
            return child_run(self.tune_exit, self.tune_wall_s)
        path = Path(command[command.index("--json") + 1])
        behaviour = self.rates[path.stem]
        self.now += 20.0
        if behaviour == "crash":
            log.write_text("Segmentation fault (core dumped)\n")
            return child_run(-11, 20.0)
        if behaviour == "hang":
            self.now += timeout_s
            return child_run(124, timeout_s, timed_out=True)
        record = {"kind": "fade-hand-config", "config": {}, "status": "ok", "loss_finite": True, "relative_iqr": 0.01}
        if behaviour == "failed":
            record = {**record, "status": "failed", "reason": "RuntimeError: CUDA out of memory"}
        elif isinstance(behaviour, tuple):
            record = {**record, "samples_per_s": behaviour[1], "loss_finite": False}
        else:
            record = {**record, "samples_per_s": behaviour}
        path.write_text(json.dumps(record))
        return child_run(0 if record["status"] == "ok" else 1, 20.0)


RATES = {"fp32": 100.0, "amp-bf16": 180.0, "amp-fp16": "crash", "fp32+ro": 150.0, "amp-bf16+ro": 400.0,
         "amp-fp16+ro": ("diverged", 900.0), "fade": 390.0}  # fmt: skip


def run_case(script, tmp_path, children, case="resnet50/train", **kwargs):
    (case_spec,) = script.parse_hand_cases(case)
    return script.run_hand_case(tmp_path, case_spec, runner=children, clock=children.clock, **kwargs)


def test_each_side_runs_in_its_own_process_on_the_asked_gpu(script, tmp_path):
    children = FakeChildren(RATES, tuning_file({**CHOICE, "cudnn_benchmark": "on"}))
    run_case(script, tmp_path, children, gpu="1")
    tune, *sides = children.calls
    assert tune.command[1:5] == ["-m", "fade", "tune", "resnet50"] and "--budget" not in tune.command  # the default budget
    assert tune.command[tune.command.index("-o") + 1] == str(tmp_path / "resnet50-train.tuning.json")
    assert [Path(call.command[call.command.index("--json") + 1]).stem for call in sides] == list(script.HAND_CONFIGS) + ["fade"]
    assert all(call.env["CUDA_VISIBLE_DEVICES"] == "1" for call in children.calls)
    assert all(call.command[1].endswith("hand_config.py") and "--channels-last" in call.command for call in sides)
    assert all(call.timeout_s == script.HAND_TIMEOUT_S for call in sides)
    fade = sides[-1].command
    assert fade[fade.index("--precision") + 1] == "amp-bf16" and fade[fade.index("--compile") + 1] == "reduce-overhead"
    assert "--cudnn-benchmark" in fade


def test_a_crashed_failed_or_diverged_hand_side_is_never_the_best(script, tmp_path):
    rates = {**RATES, "amp-bf16": "failed", "fp32+ro": "hang"}
    children = FakeChildren(rates, tuning_file({**CHOICE, "cudnn_benchmark": "on"}))
    result = run_case(script, tmp_path, children)
    statuses = {name: side["status"] for name, side in result["hand"].items()}
    assert statuses == {"fp32": "ok", "amp-bf16": "failed", "amp-fp16": "crashed", "fp32+ro": "timeout",
                        "amp-bf16+ro": "ok", "amp-fp16+ro": "diverged"}  # fmt: skip
    assert "Segmentation fault" in result["hand"]["amp-fp16"]["reason"]
    judged = result["judged"]
    assert judged["best_hand"] == "amp-bf16+ro" and judged["ratio"] == pytest.approx(390 / 400)
    assert judged["ok"], judged["bars"]
    assert json.loads((tmp_path / "resnet50-train.hand.json").read_text())["judged"]["ok"]


def test_the_bars_hold_fade_to_095_of_the_best_hand_and_the_tune_to_its_budget(script, tmp_path):
    slow = run_case(script, tmp_path / "slow", FakeChildren({**RATES, "fade": 370.0}, tuning_file({**CHOICE, "cudnn_benchmark": "on"})))
    assert not slow["judged"]["ok"] and any("below 0.95" in bar for bar in slow["judged"]["bars"])
    late = FakeChildren(RATES, tuning_file({**CHOICE, "cudnn_benchmark": "on"}), tune_wall_s=BUDGET_S + 61)
    over = run_case(script, tmp_path / "late", late)
    assert not over["judged"]["ok"] and any("OVER" in bar for bar in over["judged"]["bars"])
    on_time = run_case(script, tmp_path / "on-time", FakeChildren(RATES, tuning_file(CHOICE), tune_wall_s=BUDGET_S + 59))
    assert on_time["judged"]["ok"]


def test_a_choice_equal_to_a_hand_configuration_is_measured_once(script, tmp_path):
    children = FakeChildren(RATES, tuning_file(CHOICE))
    result = run_case(script, tmp_path, children)
    assert result["fade"]["same_as"] == "amp-bf16+ro" and result["judged"]["ratio"] == 1.0
    assert len(children.calls) == 1 + len(script.HAND_CONFIGS)


def test_no_hand_side_ran_or_no_tuning_file_fails_the_case(script, tmp_path):
    crashed = {name: "crash" for name in RATES}
    result = run_case(script, tmp_path / "crashed", FakeChildren(crashed, tuning_file({**CHOICE, "cudnn_benchmark": "on"})))
    assert result["judged"]["bars"][0] == "no hand configuration ran" and not result["judged"]["ok"]
    failed_tune = run_case(script, tmp_path / "tune", FakeChildren(RATES, {"kind": "not a tuning file"}, tune_exit=4))
    assert failed_tune["fade"]["status"] == "not run" and "not a FADE tuning" in failed_tune["tuning_error"]
    assert not failed_tune["judged"]["ok"]


def test_a_second_run_resumes_and_retries_only_what_did_not_finish(script, tmp_path):
    run_case(script, tmp_path, FakeChildren(RATES, tuning_file({**CHOICE, "cudnn_benchmark": "on"})))
    again = FakeChildren(RATES, tuning_file({**CHOICE, "cudnn_benchmark": "on"}))
    result = run_case(script, tmp_path, again)
    rerun = [Path(call.command[call.command.index("--json") + 1]).stem for call in again.calls]
    assert rerun == ["amp-fp16"]  # the crashed side; the tune is kept, and a diverged side would diverge again
    assert result["hand"]["fp32"]["resumed"] and result["tune"]["wall_s"] == 320.0


def test_no_child_starts_past_the_deadline(script, tmp_path):
    children = FakeChildren(RATES, tuning_file({**CHOICE, "cudnn_benchmark": "on"}))
    result = run_case(script, tmp_path, children, deadline=380.0)  # the tune ends at 320 s, then two 20 s sides
    assert [side["status"] for side in result["hand"].values()].count("not run") == 4
    assert result["fade"]["status"] == "not run" and [call.timeout_s for call in children.calls[1:]] == [60.0, 40.0]
    short = run_case(script, tmp_path / "short", FakeChildren(RATES, tuning_file(CHOICE)), deadline=100.0)
    assert short["tune"]["status"] == "not run" and not short["judged"]["ok"]


def test_main_writes_the_table_and_exits_by_the_bars(script, tmp_path, capsys):
    children = FakeChildren(RATES, tuning_file({**CHOICE, "cudnn_benchmark": "on"}))
    code = script.main([str(tmp_path), "--hand", "--cases", "resnet50/train", "--gpu", "0"], runner=children, clock=children.clock)
    assert code == 0
    table = (tmp_path / "hand-table.md").read_text()
    assert "| resnet50/train | 64 |" in table and "| crashed |" in table and "0.975" in table
    assert "resnet50/train" in capsys.readouterr().out
    assert script.main([str(tmp_path), "--hand", "--table"]) == 0
    assert "resnet50" not in script.table(tmp_path)  # the issue-14 table reads none of --hand's files


def test_cases_and_knobs_map_to_hand_config_flags(script):
    convnext, custom = script.parse_hand_cases("convnext_tiny/train,mypkg.models:build/infer", None)
    assert (convnext.model, convnext.batch, convnext.convolutional) == ("benchmarks.outside_zoo:convnext_tiny", 32, True)
    assert (custom.model, custom.mode, custom.batch, custom.convolutional) == ("mypkg.models:build", "infer", 64, False)
    assert [case.batch for case in script.parse_hand_cases("llama_lm/train,mobilenet_v2/infer", 16)] == [16, 16]
    with pytest.raises(SystemExit, match="unknown case 'resnet50/both'"):
        script.parse_hand_cases("resnet50/both")
    flags, unexpressed = script.fade_flags({"precision": "default", "compile": "off", "optimizer_impl": "fused",
                                            "sdpa_backend": "flash", "miopen_immediate": "on", "tunableop": "off"})  # fmt: skip
    assert flags == ["--precision", "fp32", "--compile", "off", "--optimizer-impl", "fused", "--sdpa-backend", "flash"]
    assert unexpressed == {"miopen_immediate": "on"}
