"""FadeLoop's decode options (the knobs `fade tune --generate` will search) on tiny-llama on the CPU: a dynamic
cache and each SDPA backend the CPU has give the static cache's greedy tokens in fp32 and pass the generation gate
in bf16; a compiled step over a dynamic cache, an unknown cache, compile mode or backend are refused."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from fade.measure.suites.llm import gate, generation  # noqa: E402

PROMPT, NEW = 12, 10


@pytest.fixture(scope="module")
def model(shape):
    return generation.build_model(shape, "cpu")


def _loop(model, **options):
    return generation.FadeLoop(model, prompt_tokens=PROMPT, new_tokens=NEW, device="cpu", **options)


@pytest.mark.parametrize("options", [{"cache": "dynamic"}, {"sdpa": "math"}, {"cache": "dynamic", "sdpa": "math"}])
def test_decode_options_give_the_static_caches_tokens(shape, model, options):
    ids = generation.prompt_ids(shape.vocab_size, 2, PROMPT, "cpu")
    expected = _loop(model).generate(ids, NEW)
    loop = _loop(model, **options)
    assert loop.generate(ids, NEW).tolist() == expected.tolist()
    assert loop.generate(ids, NEW).tolist() == expected.tolist()  # a second run starts from an empty cache
    facts = loop.facts()
    assert facts["cache"] == ("DynamicCache" if options.get("cache") == "dynamic" else "StaticCache")
    assert facts["sdpa_backend"] == options.get("sdpa", "default") and facts["compiled"] is False


def test_a_dynamic_cache_loop_passes_the_generation_gate_in_bf16(shape):
    reference = generation.cast_model(generation.build_model(shape, "cpu"), "bf16")
    candidate = generation.cast_model(generation.build_model(shape, "cpu"), "bf16")
    ids, _ = gate.gate_tokens(shape, 40)
    loop = generation.FadeLoop(candidate, prompt_tokens=16, new_tokens=24, device="cpu", cache="dynamic")
    record = gate.gate(reference, loop.forced, torch.tensor([ids]), prompt=16)
    assert record["verdict"] == "ok", record["failed"]


@pytest.mark.parametrize("options, message", [
    ({"cache": "dynamic", "compile": "reduce-overhead"}, "needs the static cache"),
    ({"cache": "paged"}, "cache 'paged'"),
    ({"compile": "max-autotune-cudagraphs"}, "compile mode 'max-autotune-cudagraphs'"),
    ({"sdpa": "fast"}, "SDPA backend 'fast'"),
])
def test_unknown_or_impossible_options_are_refused(model, options, message):
    with pytest.raises(ValueError, match=message):
        _loop(model, **options)


def test_each_compile_mode_is_one_set_of_torch_compile_arguments_and_its_text():
    """generation.STEP_COMPILE_MODES is the one table of the decode step's compile modes: FadeLoop, the tuning
    file's snippet and Tuning.apply read it. gpt-fast's setting is reduce-overhead's options plus coordinate
    descent (torch.compile takes a mode or options, not both)."""
    import torch._inductor

    from fade.analyze.knobs import load_knobs
    from fade.measure.suites.llm.generation import STEP_COMPILE_MODES, compile_arguments, compile_call_text

    gpt_fast = compile_arguments("reduce-overhead+coordinate-descent")
    assert gpt_fast == {"options": {**torch._inductor.list_mode_options("reduce-overhead"),
                                    "coordinate_descent_tuning": True}}  # fmt: skip
    assert compile_call_text("model.forward", "reduce-overhead") == "torch.compile(model.forward, mode='reduce-overhead')"
    assert "coordinate_descent_tuning" in compile_call_text("step", "reduce-overhead+coordinate-descent")
    decode_compile = next(knob for knob in load_knobs() if knob.id == "decode_compile")
    assert set(decode_compile.values[1:]) == set(STEP_COMPILE_MODES)
    with pytest.raises(ValueError, match="compile mode 'autotune'"):
        compile_arguments("autotune")


@pytest.mark.parametrize("variant, mode", [("fade-loop+coordinate-descent", "reduce-overhead+coordinate-descent"),
                                           ("fade-loop+max-autotune", "max-autotune")])
def test_the_bench_names_a_loop_compiled_in_each_mode_the_tuner_searches(shape, model, variant, mode):
    """fade bench llm's fade-loop spellings for the tuner's other compile modes: measured as decode tokens/s
    against the roofline, the figure `fade tune --generate` (whole greedy runs) does not give."""
    from fade.analyze.compare import LLM_VARIANT_ORDER
    from fade.measure.suites.llm.generation import VARIANTS, variant_generator

    generate, facts = variant_generator(variant, model, batch=1, prompt_tokens=8, new_tokens=4, device="cpu")
    assert facts == {"cache": "StaticCache", "compiled": True, "compile_mode": mode}
    assert generate.__self__.compile_mode == mode and variant in VARIANTS and variant in LLM_VARIANT_ORDER


def test_the_gate_runs_the_graph_that_is_timed(shape, model, monkeypatch):
    """An int8 8B trial on an H200 spent 205 s compiling its timed step and 158 s more compiling the gate's own
    logits step (results/s22-h200/C). One function now returns the token and its logits: a loop compiles it once,
    the timed run and the teacher-forced run both call it, and a second loop of the same shapes traces the same
    code (Inductor's cache then serves its graph)."""
    compiled = []

    def fake_compile(function, **arguments):
        compiled.append((function, arguments))
        calls = []

        def run(*args):
            calls.append(args)
            return function(*args)

        run.calls = calls
        return run

    monkeypatch.setattr(torch, "compile", fake_compile)
    loop = _loop(model, compile="reduce-overhead")
    assert len(compiled) == 1 and compiled[0][0].__func__ is generation.FadeLoop.eager_decode
    assert compiled[0][1] == generation.compile_arguments("reduce-overhead")
    ids = generation.prompt_ids(shape.vocab_size, 1, PROMPT, "cpu")
    tokens = loop.generate(ids, NEW)
    assert len(loop.decode.calls) == NEW - 1
    seen = []
    loop.forced(ids, tokens, lambda step, logits: seen.append(logits.argmax(dim=-1)))
    assert len(compiled) == 1 and len(loop.decode.calls) == 2 * (NEW - 1)
    # fed its own tokens, the forced run's logits pick them again: the same forward
    assert [int(row[0]) for row in seen] == tokens[0].tolist()
    assert _loop(model).decode.__func__ is generation.FadeLoop.eager_decode and len(compiled) == 1  # eager: no compile
