"""Issue 29's numerics gate (fade.measure.suites.llm.gate) on tiny-llama on the CPU: the gate text's tokens, a
bf16 decode loop (static cache) that passes against the bf16 plain forward, the same loop over a perturbed weight
that fails, and the perplexity reported for a model loaded from a folder."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from fade.analyze.llm_table import resolve_config  # noqa: E402
from fade.measure.suites.llm import gate, generation  # noqa: E402

TOKENS, PROMPT = 48, 16


def _ids(shape):
    ids, _ = gate.gate_tokens(shape, TOKENS)
    return torch.tensor([ids])


def _record(shape, model, reference_model, perplexity=False):
    loop = generation.FadeLoop(model, prompt_tokens=PROMPT, new_tokens=TOKENS - PROMPT, device="cpu", compile=False)
    return gate.gate(reference_model, loop.forced, _ids(shape), prompt=PROMPT, dtype="bf16", perplexity=perplexity)


def test_the_gate_text_gives_the_same_tokens_within_the_vocabulary(shape):
    ids, source = gate.gate_tokens(shape, 300)
    again, _ = gate.gate_tokens(shape, 300)
    assert ids == again and len(ids) == 300 and all(0 <= i < shape.vocab_size for i in ids)
    assert "UTF-8 bytes" in source and len(set(ids)) > 20  # prose, not one repeated id
    assert gate.gate_text().split()[:2] == ["The", "lighthouse"]


def test_a_static_cache_decode_loop_passes_and_a_perturbed_weight_fails(shape):
    reference = generation.cast_model(generation.build_model(shape, "cpu"), "bf16")
    candidate = generation.cast_model(generation.build_model(shape, "cpu"), "bf16")  # same seed: same weights
    record = _record(shape, candidate, reference)
    assert record["verdict"] == "ok", record["failed"]
    assert record["positions"] == TOKENS - PROMPT and record["checked"] == TOKENS - PROMPT
    assert record["kl_max"] <= gate.MAX_KL and record["perplexity"] is None
    with torch.no_grad():
        candidate.model.layers[-1].mlp.down_proj.weight.mul_(4.0)
    broken = _record(shape, candidate, reference)
    assert broken["verdict"] == "differ" and broken["failed"], broken
    assert broken["kl_max"] > record["kl_max"]


def test_a_model_from_a_folder_gets_its_perplexity(shape, tmp_path):
    model = generation.build_model(shape, "cpu")
    model.save_pretrained(tmp_path)
    folder = resolve_config(str(tmp_path))
    assert gate.perplexity_reason(folder) is None and gate.perplexity_reason(shape)
    reference = generation.cast_model(generation.build_model(folder, "cpu"), "bf16")
    candidate = generation.cast_model(generation.build_model(folder, "cpu"), "bf16")
    record = _record(folder, candidate, reference, perplexity=True)
    ppl = record["perplexity"]
    assert ppl["reference"] > 1 and ppl["candidate"] > 1 and abs(ppl["change"]) < 0.05, ppl


def test_the_floor_measures_what_the_dtype_does_and_still_fails_a_broken_weight(shape):
    """The gate's floor (the same weights in fp32 over the text) is recorded beside the verdict and widens the
    bounds only to what bf16 itself does: a correct bf16 loop passes, one over a weight scaled 4x still fails."""
    fp32 = generation.build_model(shape, "cpu")
    floor = gate.reference_of(fp32, _ids(shape), PROMPT)
    reference = generation.cast_model(generation.build_model(shape, "cpu"), "bf16")
    candidate = generation.cast_model(generation.build_model(shape, "cpu"), "bf16")

    def judged(model):
        loop = generation.FadeLoop(model, prompt_tokens=PROMPT, new_tokens=TOKENS - PROMPT, device="cpu")
        return gate.gate(reference, loop.forced, _ids(shape), prompt=PROMPT, dtype="bf16", floor=floor)

    record = judged(candidate)
    assert record["verdict"] == "ok", record["failed"]
    assert record["floor"]["checked"] == TOKENS - PROMPT and 0 < record["floor"]["kl_max"] < gate.MAX_KL
    assert record["floor"]["error_std_max"] > 0 and record["bounds"]["max_kl_nats"] == gate.MAX_KL
    with torch.no_grad():
        candidate.model.layers[-1].mlp.down_proj.weight.mul_(4.0)
    broken = judged(candidate)
    assert broken["verdict"] == "differ" and broken["kl_max"] > record["kl_max"]
