"""run_tune end to end on a fake timer (issue 14): the host load decides, the profile is written before the
journal is cleared, the batch is the workload's, temporary caches go, torn journal lines, fade.tune's loss."""

import json
import os

import pytest

from fade.act.tune.cache import open_cache
from fade.act.tune.tuner import run_tune
from tests.tune.fakes import REFERENCE, FakeTimer, FixedHost
from tests.tune.test_tuning_file import H100


def tune_fake(tmp_path, timer, **kwargs):
    options = {"fingerprint": dict(H100), "measure": timer, "reference": REFERENCE, "clock": getattr(timer, "clock", None),
               "cache_base": tmp_path / "cache", "budget_min": 10.0, "host_probe": FixedHost()}  # fmt: skip
    return run_tune("resnet50", **{**options, **kwargs}).to_dict()


def test_a_quiet_host_keeps_the_proven_choice_and_records_the_load(tmp_path):
    profile = tune_fake(tmp_path, FakeTimer({("precision", "amp-bf16"): 0.5}))
    assert profile["verdict"] == "faster" and profile["recommends"]
    assert profile["knobs"]["precision"] == "amp-bf16"
    assert profile["host_load"]["other_cores"] == 0.0


def test_a_busy_host_recommends_nothing(tmp_path):
    """Other processes kept 15.5 of 16 cores busy: less than one left for the step's host thread."""
    profile = tune_fake(tmp_path, FakeTimer({("precision", "amp-bf16"): 0.5}), host_probe=FixedHost(15.5))
    assert profile["verdict"] == "noisy-host" and not profile["recommends"]
    assert profile["changed"] == {} and profile["speedup"] is None
    assert "15.50 of the 16 cores" in profile["verdict_reason"]
    assert profile["final_check"]["candidate"]["precision"] == "amp-bf16"  # what was found stays on record


def test_a_profile_that_cannot_be_written_keeps_the_journal_for_a_resume(tmp_path):
    speedups = {("precision", "amp-bf16"): 0.5}
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    with pytest.raises(OSError):
        tune_fake(tmp_path, FakeTimer(speedups), output=blocked)  # a directory: the atomic rename fails
    journal = open_cache(H100, base=tmp_path / "cache").journal("resnet50-train-b64")
    assert journal.path.exists() and len(journal.load()) >= 5
    again = FakeTimer(speedups)
    out = tmp_path / "profile.json"
    profile = tune_fake(tmp_path, again, output=out)
    assert profile["search"]["trials_resumed"] >= 5
    assert json.loads(out.read_text())["knobs"]["precision"] == "amp-bf16"
    assert not journal.path.exists()  # cleared once the profile was safely written


def test_the_profile_records_the_batch_the_workload_has(tmp_path):
    """A user workload built with batch 32 under the default --batch 64."""
    timer = FakeTimer({})

    def measure(config):
        trial = timer(config)
        return type(trial)(trial.config, trial.samples_s, "ok", None, trial.numerics, 32, trial.cost_s)

    assert tune_fake(tmp_path, measure, clock=timer.clock)["batch"] == 32


def test_a_fallback_temporary_cache_is_removed(tmp_path, monkeypatch):
    import tempfile

    made = []
    real = tempfile.mkdtemp

    def mkdtemp(**kwargs):
        made.append(real(dir=tmp_path, **kwargs))
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    profile = tune_fake(tmp_path, FakeTimer({}), cache_base=blocker)
    assert made and profile["cache_dir"] == made[0]
    assert not os.path.exists(made[0])


def test_a_torn_journal_line_does_not_swallow_the_next_trial(tmp_path):
    journal = open_cache(H100, base=tmp_path).journal("x")
    timer = FakeTimer({})
    journal.path.parent.mkdir(parents=True, exist_ok=True)
    journal.path.write_text('{"config": {"precis')  # killed mid-write
    journal.append(timer({"precision": "default"}).to_dict())
    journal.append(timer({"precision": "tf32"}).to_dict())
    assert len(journal.load()) == 2 and journal.torn_lines == 1


def test_cli_exit_code_says_when_nothing_is_recommended(tmp_path, monkeypatch, capsys):
    from fade.act.tune import tuner as tune_package
    from fade.cli.tune import add_verbs
    import argparse

    real = tune_package.run_tune
    timer = FakeTimer({})  # nothing is faster

    def fake_run_tune(model, **kwargs):
        kwargs.pop("device"), kwargs.pop("quick")
        return real(model, **kwargs, fingerprint=dict(H100), measure=timer, reference=REFERENCE, clock=timer.clock,
                    cache_base=tmp_path / "cache", host_probe=FixedHost())  # fmt: skip

    monkeypatch.setattr(tune_package, "run_tune", fake_run_tune)
    parser = argparse.ArgumentParser()
    add_verbs(parser.add_subparsers())
    out = tmp_path / "p.json"
    args = parser.parse_args(["tune", "resnet50", "-o", str(out)])
    assert args.func(args) == 1
    assert json.loads(out.read_text())["verdict"] == "baseline-kept"
    assert "nothing recommended" in capsys.readouterr().out


@pytest.mark.parametrize("output", ["{tmp}/", "{tmp}", "{tmp}/a-file/p.json"])
def test_an_unwritable_output_is_refused_before_the_search(tmp_path, output):
    from fade.cli.tune import check_output
    from fade.errors import FadeUsageError

    (tmp_path / "a-file").write_text("")
    with pytest.raises(FadeUsageError, match="-o"):
        check_output(output.format(tmp=tmp_path))


def test_tune_resnet19_names_the_model_argument():
    from fade.act.tune.tuner import check_request
    from fade.errors import FadeUsageError

    with pytest.raises(FadeUsageError) as raised:
        check_request("resnet19", mode="infer", batch=64, budget_min=1)
    assert "--models" not in str(raised.value) and "fade tune MODEL 'resnet19'" in str(raised.value)


def test_the_tuning_file_starts_with_the_diagnosis_and_the_order_it_gave(tmp_path):
    """A launch-bound baseline: the tuning file carries the diagnosis and the plan, and the search's first compiled
    trial is CUDA graphs (the launch-bound verdict's fix), after the knobs that need no compile."""
    from fade.report.tune import render_tuning

    verdict = {"rule": "launch_bound", "share": 0.6, "title": "launch-bound: the device waits on the host 60% of the step",
               "fix": "capture the step in a CUDA/HIP graph"}  # fmt: skip
    diagnosis = {"status": "ok", "verdicts": [verdict], "device_timeline": True, "platform": "cuda", "step_ms": 12.0,
                 "busy_share": 0.4, "host_wait_share": 0.6, "gemm_conv_share": 0.2, "mfu_gemm_conv": None, "peak_dtype": None}  # fmt: skip
    timer = FakeTimer({("compile", "reduce-overhead"): 0.4})
    tuning = tune_fake(tmp_path, timer, diagnosis=diagnosis)
    assert tuning["diagnosis"]["verdicts"][0]["rule"] == "launch_bound"
    compile_visit = next(visit for visit in tuning["plan"]["visits"] if visit["knob"] == "compile")
    assert compile_visit["values"][0] == "reduce-overhead" and "launch_bound" in compile_visit["why"]
    assert next(call for call in timer.calls if call["compile"] != "off")["compile"] == "reduce-overhead"
    assert tuning["knobs"]["compile"] == "reduce-overhead"
    text = render_tuning(tuning)
    assert text.splitlines()[0].startswith("diagnosis: the baseline step, profiled: step 12 ms, device busy 40%")
    assert text.index("launch-bound") < text.index("search order:") < text.index(": faster")


def test_on_the_cpu_no_profile_is_taken_and_the_plan_says_why(tmp_path):
    """A CPU profile has no device timeline: the diagnosis would only cost budget (and a worker restart)."""
    timer = FakeTimer({("precision", "amp-bf16"): 0.5})
    asked = []

    class Measure:
        def __call__(self, config):
            return timer(config)

        def diagnose(self):
            asked.append(1)
            return {"status": "ok", "verdicts": [], "device_timeline": False}

    cpu = {**H100, "backend": "cpu", "name": "x86_64"}
    tuning = tune_fake(tmp_path, Measure(), fingerprint=cpu, clock=timer.clock)
    assert asked == []
    assert tuning["plan"]["note"].startswith("no diagnosis: on the CPU")
    assert tuning["knobs"]["precision"] == "amp-bf16"


def test_worker_only_options_with_a_module_are_one_usage_line():
    import torch

    import fade
    from fade.errors import FadeUsageError

    model = torch.nn.Linear(4, 2)
    with pytest.raises(FadeUsageError, match="quick, resume: only for a zoo name or module:function"):
        fade.tune(model, torch.randn(3, 4), quick=True, resume=False)
    with pytest.raises(FadeUsageError, match="builds its own inputs"):
        fade.tune("resnet18", torch.randn(3, 4))


def test_the_attention_probe_cuts_the_sdpa_backends_to_those_that_run_fastest_first():
    """The 8B decode on an H200 (results/s21-h200/C) spent a compiled trial each on forced flash and efficient
    attention, which torch then refused. With the probe of the decode's real attention in the diagnosis, a refused
    backend is left out with torch's cause, and the ones that ran are tried fastest first."""
    from fade.act.tune.tuner import drop_unused
    from fade.analyze.knobs import Target, load_knobs, searched_knobs
    from fade.analyze.tuneplan import plan_search

    knobs, left_out = searched_knobs(load_knobs(), Target("cuda", "2.11.0+cu130", "generate", image=False, attention=True))
    probe = {"label": "d128 bf16 b1 32q/8kv repeat_kv q1/kv136 explicit", "backends": [
        {"requested": "default", "ran": True, "median_ms": 0.031},
        {"requested": "flash", "ran": False, "error": "RuntimeError: No available kernel. Aborting execution.",
         "causes": [{"cause": "an explicit attn_mask (flash takes none)"}]},
        {"requested": "efficient", "ran": True, "median_ms": 0.024},
        {"requested": "cudnn", "ran": True, "median_ms": 0.029},
        {"requested": "math", "ran": True, "median_ms": 0.198}]}
    dynamic = {"label": "d128 bf16 b1 32q/8kv q1/kv136 none", "backends": [
        {"requested": "flash", "ran": False, "error": "RuntimeError: No available kernel."},
        {"requested": "cudnn", "ran": False, "error": "RuntimeError: No available kernel."}]}
    kept, reasons = drop_unused(knobs, left_out, {"status": "ok", "calls_sdpa": True, "attention": [probe, dynamic]})
    sdpa = next(knob for knob in kept if knob.id == "sdpa_backend")
    assert sdpa.baseline == "default" and sdpa.alternatives == ("efficient", "cudnn", "math")
    # cudnn is refused over the dynamic cache but runs over the static one: kept (a value that ran in either)
    assert "explicit attn_mask" in reasons["sdpa_backend=flash"] and probe["label"] in reasons["sdpa_backend=flash"]
    assert dynamic["label"] in reasons["sdpa_backend=flash"] and "sdpa_backend=cudnn" not in reasons
    assert "sdpa_backend=flash" not in left_out
    plan = plan_search(kept, mode="generate")
    assert [visit.values for visit in plan.visits if visit.knob == "sdpa_backend"] == [("efficient", "cudnn", "math")]
    refused_all = {"label": "x", "backends": [{"requested": name, "ran": False, "error": "RuntimeError: no"}
                                              for name in ("flash", "efficient", "cudnn")]}  # fmt: skip
    kept, reasons = drop_unused(knobs, left_out, {"status": "ok", "attention": [refused_all]})
    assert next(knob for knob in kept if knob.id == "sdpa_backend").alternatives == ("math",)
    assert reasons["sdpa_backend=cudnn"].endswith("RuntimeError: no")
    nothing = {"label": "x", "backends": [{"requested": name, "ran": False, "error": "RuntimeError: no"}
                                          for name in ("flash", "efficient", "cudnn", "math")]}  # fmt: skip
    kept, reasons = drop_unused(knobs, left_out, {"status": "ok", "attention": [nothing]})
    assert "sdpa_backend" not in {knob.id for knob in kept} and "no forced backend could speed up" in reasons["sdpa_backend"]


def row(requested, backend, median_us, q1_us, q3_us):
    """A probe row as fade.measure.attention.probe_attention writes it (times in microseconds here)."""
    return {"requested": requested, "ran": True, "backend": backend, "median_ms": median_us / 1e3,
            "timing": {"median_s": median_us / 1e6, "q1_s": q1_us / 1e6, "q3_s": q3_us / 1e6}}


def test_the_probe_leaves_out_the_backends_that_cannot_speed_up_the_attention():
    """Session 22's 8B decode on an H200 (results/s22-h200/A, the diagnosis's probes, rounded): flash ran over the
    dynamic cache only, cudnn is what torch picks by default, math ran 5x slower than the default. All four were
    kept (each had run somewhere) and each expected at a compiled trial; only efficient can speed up the step."""
    from fade.act.tune.tuner import drop_unused
    from fade.analyze.knobs import Target, load_knobs, searched_knobs

    knobs, left_out = searched_knobs(load_knobs(), Target("cuda", "2.11.0+cu130", "generate", image=False, attention=True))
    static = {"label": "d128 bf16 b1 32q/8kv repeat_kv q1/kv192 explicit", "backends": [
        row("default", "cudnn", 75.6, 74.4, 77.3),
        {"requested": "flash", "ran": False, "error": "RuntimeError: No available kernel. Aborting execution."},
        row("efficient", "efficient", 65.8, 63.3, 67.7), row("cudnn", "cudnn", 70.4, 70.0, 71.5),
        row("math", "math", 408.0, 384.2, 422.5)]}
    dynamic = {"label": "d128 bf16 b1 32q/8kv q1/kv192 none", "backends": [
        row("default", "cudnn", 39.9, 33.7, 40.7), row("flash", "flash", 52.0, 51.2, 55.1),
        row("efficient", "efficient", 25.2, 24.7, 26.4), row("cudnn", "cudnn", 31.7, 31.2, 32.3),
        row("math", "math", 219.2, 210.8, 256.2)]}
    kept, reasons = drop_unused(knobs, left_out, {"status": "ok", "calls_sdpa": True, "attention": [static, dynamic]})
    assert next(knob for knob in kept if knob.id == "sdpa_backend").alternatives == ("efficient",)
    assert "No available kernel" in reasons["sdpa_backend=flash"]
    assert "already picks cudnn" in reasons["sdpa_backend=cudnn"]
    assert "0.408 ms against the default cudnn's 0.076 ms" in reasons["sdpa_backend=math"]
    # within the noise of the default somewhere: kept (a trial decides)
    close = {"label": "x", "backends": [row("default", "cudnn", 40.0, 38.0, 42.0), row("math", "math", 41.0, 39.0, 43.0)]}
    kept, reasons = drop_unused(knobs, left_out, {"status": "ok", "attention": [close]})
    assert "math" in next(knob for knob in kept if knob.id == "sdpa_backend").alternatives


def test_after_a_graph_mode_wins_a_decode_tries_the_mode_that_led_the_measured_decodes_next():
    """Session 22's 8B tune (results/s22-h200/A) spent its last budget on decode_compile=default, the cheapest
    mode, which no measured decode has led; coordinate descent (205 tokens/s against reduce-overhead's 179 in fade
    bench llm) was never reached. The knob table's compiled_order puts it first once a mode compiles."""
    from fade.analyze.knobs import load_knobs

    decode_compile = next(knob for knob in load_knobs() if knob.id == "decode_compile")
    order = decode_compile.compiled_order["generate"]
    assert order[0] == "reduce-overhead+coordinate-descent"
    assert order.index("max-autotune") < order.index("default") < order.index("max-autotune-no-cudagraphs")


def test_the_sdpa_backend_is_left_out_when_the_profiled_step_called_no_sdpa():
    """EfficientNet-B0 on an H200 spent four trials on SDPA backends it never called (results/tune-h200-s11/): a
    diagnosis whose trace has no scaled_dot_product_attention op drops the knob, with the reason; no diagnosis, or
    one that cannot tell, keeps it."""
    from fade.act.tune.trial import calls_sdpa
    from fade.act.tune.tuner import drop_unused
    from fade.analyze.knobs import Target, load_knobs, searched_knobs

    knobs, left_out = searched_knobs(load_knobs(), Target("cuda", "2.11.0+cu130", "train", image=True, attention=True))
    assert any(knob.id == "sdpa_backend" for knob in knobs)
    conv = {"traceEvents": [{"cat": "cpu_op", "name": "aten::convolution"}, {"cat": "kernel", "name": "sm90_xmma"}]}
    attention = {"traceEvents": [{"cat": "cpu_op", "name": "aten::_scaled_dot_product_flash_attention"}]}
    assert (calls_sdpa(conv), calls_sdpa(attention), calls_sdpa({"traceEvents": []})) == (False, True, None)
    kept, reasons = drop_unused(knobs, left_out, {"status": "ok", "calls_sdpa": False})
    assert "sdpa_backend" not in {knob.id for knob in kept} and "no scaled_dot_product_attention" in reasons["sdpa_backend"]
    assert "sdpa_backend" not in left_out  # the caller's dict is not changed
    for diagnosis in (None, {"status": "ok", "calls_sdpa": None}, {"status": "ok", "calls_sdpa": True},
                      {"status": "failed", "calls_sdpa": False}):  # fmt: skip
        assert drop_unused(knobs, left_out, diagnosis)[0] == knobs
