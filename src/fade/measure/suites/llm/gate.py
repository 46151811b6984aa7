"""The numerics gate of `fade tune --generate` (issue 29): does a candidate decode configuration (its KV cache, a
compiled step, another attention backend, quantized weights) still compute the model's next-token distributions?

Over a text shipped with FADE (data/gate.txt), teacher-forced: the text's first GATE_PROMPT tokens are the
prompt, then the candidate's own decode path is fed the text's next tokens one at a time (FadeLoop.forced's
interface: `forced(prompt_ids, tokens, observe)`), so every position sees the same context whatever the
candidate predicts. The reference is the unquantized model in the same dtype (bf16 in the tuner), one plain
forward over the whole text with no cache: transformers' reference kernels. Per position, on the device
(numerics.compare_step): KL(reference || candidate) over the vocabulary, whether the top-1 tokens agree, the
reference's logit gap to the candidate's top-1. fade.analyze.llm_numerics.judge gives the verdict against the
gate's stated bounds:
    MAX_KL          the largest per-position KL, nats
    MIN_AGREEMENT   top-1 agreement with the reference, near-ties counted (a disagreement whose reference
                    logit gap is below NEAR_TIE_Z x the larger of the dtype's unit roundoff x the logit std and
                    the floor's logit error)
Floor
    What the dtype alone does to this model: the reference's log-probs against the same weights' in fp32 over
    the same text (the tuner computes the fp32 ones before casting the model). Its logit error widens the
    near-tie tolerance, and the KL bound is the larger of MAX_KL and llm_numerics.kl_bound of the floor's
    largest KL. With trained weights the floor is small and the stated bounds decide; with random ones it is
    not: on an H200 (session 20) llama-3.1-8b's random weights failed the bounds without a floor in the
    baseline itself, its eager dynamic-cache decode at 93.0% top-1 agreement against the no-cache forward in
    the same dtype (a random 32-layer stack amplifies rounding ~200-fold: fade.analyze.llm_numerics). There
    the gate says only "no worse than the dtype", and the record's `floor` shows how much that is.
With real weights (a local model folder) the text is tokenized by the folder's tokenizer where it has one, and
the perplexity of the text's tokens under the reference and under the candidate is reported beside the verdict
(the gate does not judge it: its bounds are the two above). Random-weight shapes have no tokenizer; their text
is the UTF-8 bytes mapped into the vocabulary, and no perplexity is given (it would say nothing about text).
"""

from __future__ import annotations

import importlib.resources
import math
from typing import Callable, Optional

from fade.analyze import llm_numerics
from fade.measure.step.runner import inference_context
from fade.measure.suites.llm.numerics import Collector, Reference

GATE_TOKENS = 192  # positions of the text the gate runs over: the prompt and the forced tokens
GATE_PROMPT = 64  # the prompt: its last position is the first compared (the prefill's logits)
MAX_KL = 0.1  # nats: the largest per-position KL(reference || candidate) the gate allows
MIN_AGREEMENT = 0.95  # top-1 agreement with the reference, near-ties counted
BOUNDS = {"max_kl_nats": MAX_KL, "min_agreement": MIN_AGREEMENT,
          "note": "ok when the largest per-position KL(reference || candidate) <= max_kl_nats and top-1 agreement "
                  "with the reference (near-ties counted) >= min_agreement (fade.measure.suites.llm.gate)"}


def gate_text() -> str:
    """The text the gate runs over (package data, our own prose)."""
    return importlib.resources.files("fade").joinpath("data").joinpath("gate.txt").read_text(encoding="utf-8")


def gate_tokens(config, count: int = GATE_TOKENS, tokenizer=None) -> tuple:
    """(token ids, how they were made): `count` tokens of the gate text by `tokenizer`, else by the tokenizer of
    the config's model folder where it has one, else the text's UTF-8 bytes modulo the vocabulary (a random-weight
    shape has no tokenizer). The text repeats when it is shorter than `count`."""
    text = gate_text()
    source = None
    if tokenizer is None and getattr(config, "weights", None):
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(config.weights, local_files_only=True)
            source = f"the tokenizer of {config.weights}"
        except (OSError, ValueError, KeyError):  # a folder with weights and no tokenizer files
            tokenizer = None
    if tokenizer is not None:
        ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        source = source or f"{type(tokenizer).__name__}"
    else:
        ids = [byte % config.vocab_size for byte in text.encode("utf-8")]
        source = f"the text's UTF-8 bytes modulo the vocabulary ({config.vocab_size}): no tokenizer"
    if not ids:
        raise ValueError("the gate text gave no tokens")
    while len(ids) < count:
        ids = ids + ids
    return ids[:count], source


def reference_of(model, ids, prompt: int) -> Reference:
    """The reference (module docstring) of a 1 x n token tensor: per position from the prompt's last on, the
    log-probs of the next token (on the host) and the reference's own top-1."""
    with inference_context(str(ids.device)):
        logits = model(ids, use_cache=False).logits[:, prompt - 1 : -1].float()
    log_probs = logits.log_softmax(dim=-1)
    return Reference(tokens=log_probs.argmax(dim=-1), log_probs=[log_probs[:, step].cpu() for step in
                                                                 range(log_probs.shape[1])])


def floor_of(reference: Reference, floor: Reference, device) -> dict:
    """What the dtype alone does to this model over the gate text: Collector.rows of the reference's log-probs
    (the unquantized model in the gate's dtype) against `floor`'s (the same weights in fp32, reference_of before
    the cast)."""
    collector = Collector(floor)
    for step, log_probs in enumerate(reference.log_probs):
        collector(step, log_probs.to(device))
    return collector.rows()


def gate(reference_model, forced: Callable, ids, *, prompt: int = GATE_PROMPT, dtype: str = "bf16",
         perplexity: bool = False, max_kl: float = MAX_KL, min_agreement: float = MIN_AGREEMENT,
         floor: Optional[Reference] = None) -> dict:
    """The gate's record for one candidate: `forced(prompt_ids, tokens, observe)` runs its decode path over `ids`
    (1 x n, on the device) after `prompt` tokens, teacher-forced; `reference_model` is the unquantized model in
    `dtype`. With `perplexity`, the text's perplexity under both is added (real weights). `floor`: the same
    weights' fp32 reference_of over `ids` (module docstring, "Floor"): the dtype's own effect widens the
    near-tie tolerance and the KL bound to what the dtype alone does, never below the stated bounds."""
    steps = ids.shape[1] - prompt
    if prompt < 1 or steps < 1:
        raise ValueError(f"the gate needs a prompt and at least one token after it ({ids.shape[1]} tokens, "
                         f"prompt {prompt})")
    reference = reference_of(reference_model, ids, prompt)
    floor_rows = floor_of(reference, floor, ids.device) if floor is not None else None
    if floor_rows is not None:
        max_kl = max(max_kl, llm_numerics.kl_bound(max(value for row in floor_rows["kl"] for value in row)))
    collector = Collector(reference)
    nll: list = []
    text_next = ids[0, prompt:]

    def observe(step: int, logits) -> None:
        collector(step, logits)
        if perplexity and step < steps:
            log_probs = logits.float().log_softmax(dim=-1)
            nll.append(-log_probs[0, text_next[step]].item())

    forced(ids[:, :prompt], ids[:, prompt:], observe)
    rows = collector.rows()
    judged = llm_numerics.judge(dtype, agree=rows["agree"], gap=rows["gap"], kl=rows["kl"],
                                logit_std=rows["logit_std"], min_agreement=min_agreement, max_kl=max_kl,
                                floor_std=None if floor_rows is None else floor_rows["error_std"])  # fmt: skip
    record = {"reference": f"the unquantized model in {dtype}, one forward over the text, no cache",
              "method": "teacher-forced over the gate text: the candidate's decode path fed the text's tokens",
              "positions": steps, "prompt": prompt, **judged, "bounds": dict(BOUNDS, max_kl_nats=max_kl,
                                                                             min_agreement=min_agreement)}
    if floor_rows is not None:
        errors = [value for row in floor_rows["error_std"] for value in row]
        record["floor"] = {"what": f"the reference ({dtype}) against the same weights in fp32",
                           **llm_numerics.summarize(floor_rows["agree"], floor_rows["kl"]),
                           "error_std_max": max(errors)}
    if perplexity:
        reference_nll = [-float(reference.log_probs[step][0, text_next[step]]) for step in range(steps)]
        ppl_reference = math.exp(sum(reference_nll) / steps)
        ppl_candidate = math.exp(sum(nll) / len(nll)) if len(nll) == steps else None
        record["perplexity"] = {"reference": ppl_reference, "candidate": ppl_candidate,
                                "change": None if ppl_candidate is None else ppl_candidate / ppl_reference - 1}
    else:
        record["perplexity"] = None
    return record


def perplexity_reason(config) -> Optional[str]:
    """Why the gate gives no perplexity for `config` (None when it does)."""
    if getattr(config, "weights", None):
        return None
    return "random weights: the text's perplexity under them says nothing"
