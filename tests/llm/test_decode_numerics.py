"""The decode-path numerics check (fade.measure.suites.llm.numerics) on tiny-llama on the CPU: the forcing
LogitsProcessor records the model's own logits and emits the forced tokens; each variant run along the fp32
reference's tokens passes in bf16; a variant with one perturbed weight, and a fade-loop step that loses the KV
cache's last position, fail. ~10 s on 2 cores."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from fade.measure.suites.llm import generation, numerics  # noqa: E402

BATCH, PROMPT, NEW = 2, 12, 10


def _case(shape, dtype: str, variant: str, *, break_model=None, break_loop=None) -> dict:
    """extra.numerics of `variant` in `dtype` after the fp32 reference, as decode_case builds it."""
    model = generation.build_model(shape, "cpu")
    ids = generation.prompt_ids(shape.vocab_size, BATCH, PROMPT, "cpu")
    reference = numerics.reference_run(model, ids, NEW, numerics.check_steps(BATCH, shape.vocab_size, NEW))
    generation.cast_model(model, dtype)
    floor = numerics.floor_rows(model, ids, reference)  # the floor sees the intact model
    if break_model:
        break_model(model)
    generate, _ = generation.variant_generator(variant, model, batch=BATCH, prompt_tokens=PROMPT, new_tokens=NEW,
                                               device="cpu")  # fmt: skip
    if break_loop:
        break_loop(generate.__self__)
    rows, path = numerics.variant_rows(generate, ids, reference)
    return numerics.numerics_record(dtype, rows, floor, new_tokens=NEW, path=path)


def test_the_processor_records_the_models_own_logits_and_forces_its_tokens(shape):
    model = generation.build_model(shape, "cpu")
    ids = generation.prompt_ids(shape.vocab_size, BATCH, PROMPT, "cpu")
    forced = torch.randint(0, shape.vocab_size, (BATCH, NEW), generator=torch.Generator().manual_seed(7))
    seen = {}
    processor = numerics.forcing_processor(PROMPT, lambda step, scores: seen.setdefault(step, scores.clone()), forced)
    tokens = generation.hf_generator(model, static=False)(ids, NEW, logits_processor=processor)
    assert tokens.tolist() == forced.tolist()  # not the greedy path: the forcing took
    with torch.inference_mode():
        logits = model(torch.cat([ids, forced[:, :-1]], dim=1), logits_to_keep=NEW).logits
    assert sorted(seen) == list(range(NEW))
    for step in range(NEW):
        assert seen[step].dtype == torch.float32
        torch.testing.assert_close(seen[step], logits[:, step], rtol=1e-4, atol=1e-5)  # raw logits, not -inf'd


@pytest.mark.parametrize("variant", ["hf-generate", "hf-static", "fade-loop"])
def test_each_variant_along_the_reference_path_passes_in_bf16(shape, variant):
    record = _case(shape, "bf16", variant)
    assert record["verdict"] == "ok", record["failed"]
    assert (record["steps"], record["sequences"], record["checked"]) == (NEW, BATCH, NEW * BATCH)
    assert record["kl_max"] <= record["kl_bound"] and record["top1_agreement_with_near_ties"] >= 0.99
    assert record["floor"]["checked"] == NEW * BATCH and record["floor"]["logit_error_std_mean"] > 0
    assert record["path"] == numerics.PATHS["fade-loop" if variant == "fade-loop" else "hf"]


def test_fp32_variants_agree_with_the_reference_on_every_token(shape):
    record = _case(shape, "fp32", "fade-loop")
    assert record["verdict"] == "ok" and record["top1_agreement"] == 1.0 and record["kl_max"] < 1e-6


def _perturb_one_weight(model):
    with torch.no_grad():
        model.model.layers[-1].mlp.down_proj.weight.mul_(1.25)


def _drop_last_kv_position(loop):
    """fade-loop's step, broken: before each step the cache's previous position (the last token's K and V)
    is zeroed, as a step that writes its K/V one slot off would leave it."""
    step = loop.eager_logits_step

    def broken(token, position):
        for layer in loop.cache.layers:
            layer.keys[:, :, position - 1] = 0
            layer.values[:, :, position - 1] = 0
        return step(token, position)

    loop.eager_logits_step = broken


@pytest.mark.parametrize("variant, breaks", [
    ("hf-generate", {"break_model": _perturb_one_weight}),
    ("fade-loop", {"break_loop": _drop_last_kv_position}),
])  # fmt: skip
def test_a_broken_variant_differs(shape, variant, breaks):
    record = _case(shape, "bf16", variant, **breaks)
    assert record["verdict"] == "differ", record
    assert any("max KL" in reason for reason in record["failed"])
