"""`fade tune --generate` (fade.act.tune.generate_trial, tuner.GenerateMeasure) on tiny-llama on the CPU: the
generate knobs become FadeLoop options and stay out of training and inference steps; a trial reports tokens/s
with timing samples and the generation gate's record; int8 weight-only quantization (torchao) reads fewer
weight bytes and passes the gate; the search's numerics check rejects a gate's `differ`; the whole search runs
through real workers (int4 rejected on the CPU, with the reason) and writes a generate profile, which
load_tuning(path).apply(model) applies to a fresh model. ~20 s on 2 cores."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from fade.act.tune.generate_trial import decode_options, tune_generate_trial  # noqa: E402
from fade.analyze import knobs as knob_table  # noqa: E402
from fade.measure.case import CaseContext  # noqa: E402
from fade.measure.step.config import step_knobs  # noqa: E402
from fade.measure.step.numerics import check  # noqa: E402

TIMING = {"warmup_s": 0.0, "min_warmup_calls": 1, "budget_s": 0.5, "min_samples": 3, "max_samples": 5,
          "min_run_s": 0.0}


@pytest.fixture(scope="module")
def cpu_profile(tmp_path_factory):
    """(run_tune's result, the tuning file) of tiny-llama's whole generate search on the CPU, made once. The search
    ends when its knobs do (~8 s on an idle 2-core VM); the 10-minute budget only keeps a loaded host (a CI machine
    beside PoCL builds: a 29-47 s first trial, the worker's start included) from cutting it: at 1 and 3 minutes
    int4 was left untried there."""
    from fade.act.tune.tuner import run_tune

    out = tmp_path_factory.mktemp("generate") / "gen.json"
    result = run_tune("tiny-llama", mode="generate", batch=1, budget_min=10.0, device="cpu", quick=True, output=out)
    return result, out


def test_generate_knobs_become_decode_options_and_stay_out_of_steps():
    assert decode_options({}) == {"cache": "dynamic", "compile": None, "sdpa": None}
    assert decode_options({"kv_cache": "static", "decode_compile": "reduce-overhead", "sdpa_backend": "math"}) == \
        {"cache": "static", "compile": "reduce-overhead", "sdpa": "math"}
    with pytest.raises(ValueError, match="precision"):
        decode_options({"precision": "amp-bf16"})
    rows = {knob.id: knob for knob in knob_table.load_knobs()}
    assert rows["kv_cache"].modes == ("generate",) and rows["decode_compile"].needs == {"kv_cache": "static"}
    assert "generate" in rows["sdpa_backend"].modes
    assert not {"kv_cache", "decode_compile"} & set(step_knobs())


@pytest.mark.parametrize("knobs", [{}, {"kv_cache": "static"}])
def test_a_trial_reports_tokens_per_second_and_passes_the_gate(knobs):
    ctx = CaseContext(device="cpu", run_id="test", timing=dict(TIMING))
    result = tune_generate_trial(ctx, config="tiny-llama", batch=2, knobs=knobs, prompt_tokens=8, new_tokens=6)
    assert result.unit == "tokens/s" and result.value > 0
    assert len(result.timing.samples_s) >= 3 and result.extra["samples_per_step"] == 12
    numerics = result.extra["numerics"]
    assert numerics["mode"] == "generate" and numerics["verdict"] == "ok", numerics["failed"]
    assert "UTF-8 bytes" in numerics["tokens"] and numerics["perplexity"] is None
    assert result.extra["decode"]["cache"] == ("StaticCache" if knobs else "DynamicCache")
    assert check(numerics, None) is None


def test_the_search_rejects_a_configuration_the_gate_finds_different():
    failed = {"mode": "generate", "verdict": "differ", "failed": ["max KL 0.3 nats > bound 0.1"]}
    assert check(failed, None) == "the generation gate: max KL 0.3 nats > bound 0.1"
    assert "no verdict" in check({"mode": "generate"}, None)


def test_fade_tune_generate_searches_a_tiny_config_on_the_cpu_end_to_end(cpu_profile):
    """The whole pipeline through real workers: the decode trials, the search, the final check and the tuning
    file, which reads back as a generate profile with a generate() snippet."""
    from fade.act.tune.tuning_file import read_tuning

    result, out = cpu_profile
    profile = read_tuning(out)
    assert profile["mode"] == "generate" and profile["batch"] == 1 and profile["model"] == "tiny-llama"
    tried = {(row["knob"], row["value"]) for row in profile["candidates"] if row["knob"]}
    assert ("kv_cache", "static") in tried and ("weight_quant", "int8") in tried  # what changes on the CPU
    int4 = next(row for row in profile["candidates"] if (row["knob"], row["value"]) == ("weight_quant", "int4"))
    assert int4["status"] == "rejected" and "CUDA only" in int4["reason"], [(r["knob"], r["value"], r["status"], r["cost_s"], r["reason"]) for r in profile["candidates"]]
    assert profile["left_out"]["decode_compile"] and profile["left_out"]["precision"]
    assert profile["verdict"] == result.verdict and "model.generate(" in profile["python_snippet"]


def test_fade_tune_generate_refuses_a_config_it_cannot_build():
    from fade.act.tune.tuner import check_request
    from fade.errors import FadeUsageError

    with pytest.raises(FadeUsageError, match="nosuch"):
        check_request("nosuch", mode="generate", batch=1, budget_min=1.0)
    with pytest.raises(FadeUsageError, match="batch"):
        check_request("tiny-llama", mode="generate", batch=0, budget_min=1.0)
    check_request("tiny-llama", mode="generate", batch=1, budget_min=1.0)  # no error


def test_a_generate_profile_applies_to_a_fresh_model_and_says_what_it_did(cpu_profile, tmp_path):
    """load_tuning(path).apply(model) on a transformers LM: the static cache, the forced SDPA backend around
    generate() (its tokens unchanged in fp32), and a line per change; the tuner's own CPU profile too."""
    import json

    import fade
    from fade.analyze.llm_table import resolve_config
    from fade.measure.suites.llm import generation

    _, out = cpu_profile
    shape = resolve_config("tiny-llama")
    ids = generation.prompt_ids(shape.vocab_size, 1, 8, "cpu")
    expected = generation.hf_generator(generation.build_model(shape, "cpu"), static=False)(ids, 6)

    tuning = fade.load_tuning(out)
    model = tuning.apply(generation.build_model(shape, "cpu"))
    assert tuning.mode == "generate" and tuning.model_changes  # what it did, or that nothing was to change
    assert generation.hf_generator(model, static=False)(ids, 6).tolist() == expected.tolist()

    profile = json.loads(out.read_text())
    profile["knobs"].update(kv_cache="static", sdpa_backend="math")
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(profile))
    tuning = fade.load_tuning(edited)
    model = tuning.apply(generation.build_model(shape, "cpu"))
    assert model.generation_config.cache_implementation == "static"
    assert any("cache_implementation" in line for line in tuning.model_changes)
    assert any("SDPBackend.MATH" in line for line in tuning.model_changes)
    assert generation.hf_generator(model, static=False)(ids, 6).tolist() == expected.tolist()


def test_an_int8_trial_reads_fewer_weight_bytes_and_passes_the_gate():
    ctx = CaseContext(device="cpu", run_id="test", timing=dict(TIMING))
    result = tune_generate_trial(ctx, config="tiny-llama", batch=1, knobs={"weight_quant": "int8"}, prompt_tokens=8,
                                 new_tokens=6)
    decode = result.extra["decode"]
    assert decode["weight_quant"] == "int8" and decode["weight_bytes"] < 0.8 * decode["reference_weight_bytes"]
    assert result.extra["numerics"]["verdict"] == "ok", result.extra["numerics"]["failed"]


def test_applying_an_int8_profile_quantizes_the_users_model(cpu_profile, tmp_path):
    import json

    import fade
    from fade.analyze.llm_table import resolve_config
    from fade.measure.suites.llm import generation

    profile = json.loads(cpu_profile[1].read_text())
    profile["knobs"]["weight_quant"] = "int8"
    out = tmp_path / "int8.json"
    out.write_text(json.dumps(profile))
    tuning = fade.load_tuning(out)
    shape = resolve_config("tiny-llama")
    model = generation.build_model(shape, "cpu")
    before = generation.weight_bytes(model)
    model = tuning.apply(model)
    assert generation.weight_bytes(model) < 0.8 * before
    assert any("int8 weight-only" in line for line in tuning.model_changes)
    ids = generation.prompt_ids(shape.vocab_size, 1, 8, "cpu")
    assert generation.hf_generator(model, static=False)(ids, 4).shape == (1, 4)


def test_a_latency_target_searches_the_batch_and_rejects_what_is_slower_than_it():
    """decode_batch sets a trial's batch; the per-token latency joins its numerics, over the target it is
    rejected; the search compares rates, so a larger batch is faster by the tokens it delivers; --latency-ms
    only with --generate."""
    from fade.act.tune.search import Trial, compare
    from fade.act.tune.tuner import check_request
    from fade.errors import FadeUsageError

    ctx = CaseContext(device="cpu", run_id="test", timing=dict(TIMING))
    result = tune_generate_trial(ctx, config="tiny-llama", batch=1, knobs={"decode_batch": "2"}, prompt_tokens=8,
                                 new_tokens=6, latency_ms=1e6)
    numerics = result.extra["numerics"]
    assert result.extra["samples_per_step"] == 12 and numerics["latency_target_ms"] == 1e6
    assert numerics["latency_ms"] == pytest.approx(1e3 * result.timing.median_s / 6) and check(numerics, None) is None
    slow = dict(numerics, latency_ms=12.5, latency_target_ms=10.0)
    assert check(slow, None) == "per-token latency 12.5 ms, more than the 10 ms target"
    one, two = Trial({}, (0.010, 0.010, 0.010), "ok", None, None, 64), Trial({}, (0.015,) * 3, "ok", None, None, 128)
    assert compare(two, one)[0] == pytest.approx(4 / 3)  # twice the tokens in 1.5x the time
    with pytest.raises(FadeUsageError, match="latency"):
        check_request("resnet18", mode="infer", batch=1, budget_min=1.0, latency_ms=5.0)


def test_the_baseline_decode_is_profiled_as_a_step_is_and_orders_nothing_on_the_cpu():
    """tuner.GenerateMeasure.diagnose runs generate_trial.tune_generate_diagnose in its worker: greedy runs of the
    baseline (dynamic cache, eager) under torch.profiler, summarized by the same rules as `fade profile`. On the
    CPU the profile has no device timeline: the verdict is cpu_only, and the plan keeps the default order."""
    import importlib

    from fade.act.tune import generate_trial
    from fade.act.tune.tuner import GenerateMeasure, plan_for

    assert callable(getattr(importlib.import_module(GenerateMeasure.trial_module), GenerateMeasure.diagnose_function))
    ctx = CaseContext(device="cpu", run_id="test", timing=dict(TIMING))
    result = generate_trial.tune_generate_diagnose(ctx, config="tiny-llama", batch=1, prompt_tokens=8, dtype="fp32")
    diagnosis = result.extra["diagnosis"]
    assert [verdict["rule"] for verdict in diagnosis["verdicts"]] == ["cpu_only"]
    assert diagnosis["device_timeline"] is False and diagnosis["calls_sdpa"] is True
    assert diagnosis["step_ms"] is None or diagnosis["step_ms"] > 0
    knobs, _ = knob_table.searched_knobs(knob_table.load_knobs(), knob_table.Target("cpu", "2.13.0+cpu", "generate",
                                                                                    attention=True))  # fmt: skip
    plan = plan_for(knobs, {"status": "ok", **diagnosis}, "generate")
    assert "CPU-only profile" in plan.note and not plan.named
