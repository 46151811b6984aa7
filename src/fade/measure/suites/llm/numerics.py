"""The decode-path numerics check of a `fade bench llm` case (`extra.numerics`): each variant run along the
reference's greedy token path through its own decode path, its next-token distributions compared with the
reference's step by step on the device; fade.analyze.llm_numerics judges the numbers (its docstring states the
bounds and why).

Why teacher-forced: with random weights the logits over a 128k vocabulary are nearly flat, so bf16 rounding flips
a free-running argmax at once and the sequences are unrelated after it (the H200 run of issue 28 parted at new
token 0 or 1 for every variant). Feeding every variant the reference's tokens keeps each step's context the same,
so each step is compared on its own.

Reference
    hf-generate in fp32, eager, the same weights (before the cast to the case's dtype): its greedy tokens, and
    for the first `steps` steps its log-softmax over the vocabulary (the raw scores generate() hands its logits
    processors, recorded by one that changes nothing). Kept on the host (the case's timing sees no extra device
    memory), at most REFERENCE_BYTES_CAP of them: steps = min(new tokens, cap / (batch x vocab x 4 bytes)) and
    at least 1 (llama-3.1-8b, batch 32: 65 of 128 steps). Each step goes back to the device when compared.
Variant
    hf-generate, hf-static: the same generate() call as timed, plus a LogitsProcessor (forcing_processor) that
    records the scores it is handed, then returns -inf everywhere except the reference's token, so greedy
    selection takes that token. transformers 5.17 (GenerationMixin._sample) hands processors
    `outputs.logits[:, -1]` copied to fp32 before any processing; a greedy call with a bare generation config
    builds no processor of its own, and custom processors run after any default one
    (_merge_criteria_processor_list), so the recorded scores are the model's logits (a CPU test checks them
    against a forward). hf-static runs the forward transformers compiled for it (CUDA).
    fade-loop: FadeLoop.forced: its eager prefill, then its step with the reference's token fed in place of its
    own argmax; the step returns the logits (FadeLoop.logits_step: the very function the timed step calls,
    FadeLoop.decode, which returns the token and its logits; compiled when the timed step is, the same graph).
Floor
    The plain eager forward in the case's dtype over prompt + the reference's tokens at once (no cache): what
    the dtype alone does to this model's logits, the yardstick of the near-tie tolerance and the KL bound.
Per step and sequence, on the device (compare_step): KL(reference || candidate) in nats over the whole
vocabulary, whether the top-1 tokens agree, the reference's log-prob gap between its token and the candidate's
top-1, the reference's logit standard deviation and the candidate's logit error standard deviation. Only these
scalars come back to the host.

The check runs after the case's timing and its memory reading, untimed; it changes nothing that is timed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from fade.analyze import llm_numerics
from fade.measure.suites.llm import generation
from fade.measure.step.runner import inference_context

REFERENCE_BYTES_CAP = 1 << 30  # fp32 log-probs of the reference kept for the check (module docstring)
REFERENCE = "hf-generate, fp32, eager, same weights"
FLOOR = "the plain eager forward in the case's dtype over prompt + the reference's tokens at once (no cache)"
METHOD = ("teacher-forced: the variant runs its own decode path fed the reference's greedy tokens; per step and "
          "sequence KL(reference || variant) over the vocabulary and top-1 agreement (fade.measure.suites.llm.numerics)")  # fmt: skip
PATHS = {
    "hf": "generate() as timed, with a LogitsProcessor that records the raw scores and forces the reference's token",
    "fade-loop": "fade-loop's prefill and its step (compiled as the timed one is) returning the logits, the reference's token fed in",
}


def check_steps(batch: int, vocab: int, new_tokens: int) -> int:
    """How many steps' reference log-probs fit REFERENCE_BYTES_CAP (module docstring, "Reference")."""
    return max(1, min(new_tokens, REFERENCE_BYTES_CAP // (batch * vocab * 4)))


def forcing_processor(prompt_tokens: int, on_scores: Callable, forced=None):
    """A transformers LogitsProcessorList whose one processor calls on_scores(step, scores) with the raw fp32
    scores of each new token (step 0 = the prefill's) and, given `forced` (batch x new tokens), returns scores
    that are -inf except at forced[:, step], so greedy decoding emits exactly `forced`; without it the scores
    pass unchanged."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    class ForcedTokens(LogitsProcessor):
        def __call__(self, input_ids, scores):
            step = input_ids.shape[1] - prompt_tokens
            on_scores(step, scores)
            if forced is None:
                return scores
            out = torch.full_like(scores, float("-inf"))
            return out.scatter_(1, forced[:, step : step + 1].to(scores.device), 0.0)

    return LogitsProcessorList([ForcedTokens()])


@dataclass
class Reference:
    tokens: object  # batch x new_tokens, on the device
    log_probs: list  # per checked step, batch x vocab fp32, on the host


def reference_run(model, ids, new_tokens: int, steps: int) -> Reference:
    """The fp32 eager hf-generate run: greedy tokens and the first `steps` steps' log-probs (module docstring)."""
    log_probs = []

    def record(step, scores):
        if step < steps:
            log_probs.append(scores.log_softmax(dim=-1).cpu())

    tokens = generation.hf_generator(model, static=False)(ids, new_tokens,
                                                          logits_processor=forcing_processor(ids.shape[1], record))  # fmt: skip
    return Reference(tokens=tokens, log_probs=log_probs)


def compare_step(reference_log_probs, logits, reference_token):
    """(batch x 5) float tensor on the device: KL(reference || candidate) nats, top-1 agreement (1/0), the
    reference's log-prob gap between its token and the candidate's top-1 (>= 0), the reference's logit std,
    the candidate's logit error std (both over the vocabulary; log-probs differ from logits by a constant per
    row, so these are the logits')."""
    import torch

    reference = reference_log_probs.to(device=logits.device, dtype=torch.float32)
    candidate = logits.float().log_softmax(dim=-1)
    kl = (reference.exp() * (reference - candidate)).sum(dim=-1)
    top = candidate.argmax(dim=-1, keepdim=True)
    token = reference_token.reshape(-1, 1).to(logits.device)
    agree = (top == token).squeeze(1).float()
    gap = (reference.gather(1, token) - reference.gather(1, top)).squeeze(1).clamp(min=0.0) * (1.0 - agree)
    return torch.stack([kl, agree, gap, reference.std(dim=-1), (candidate - reference).std(dim=-1)], dim=1)


class Collector:
    """compare_step of each observed step < len(reference.log_probs), kept on the device until `rows`."""

    def __init__(self, reference: Reference):
        self.reference = reference
        self.steps: dict = {}

    def __call__(self, step: int, logits) -> None:
        if step < len(self.reference.log_probs) and step not in self.steps:
            self.steps[step] = compare_step(self.reference.log_probs[step], logits, self.reference.tokens[:, step])

    def rows(self) -> dict:
        """{kl, agree, gap, logit_std, error_std}: each steps x sequences, plain floats."""
        missing = [step for step in range(len(self.reference.log_probs)) if step not in self.steps]
        if missing:
            raise RuntimeError(f"the forced run produced no scores for steps {missing[:5]}")
        import torch

        table = torch.stack([self.steps[step] for step in sorted(self.steps)]).cpu()  # steps x batch x 5
        names = ("kl", "agree", "gap", "logit_std", "error_std")
        return {name: table[:, :, index].tolist() for index, name in enumerate(names)}


def floor_rows(model, ids, reference: Reference) -> dict:
    """The floor (module docstring) compared with the reference: Collector.rows' fields."""
    import torch

    steps = len(reference.log_probs)
    sequence = torch.cat([ids, reference.tokens[:, : steps - 1]], dim=1)
    collector = Collector(reference)
    with inference_context(str(ids.device)):
        logits = model(sequence, use_cache=False, logits_to_keep=steps).logits
        for step in range(steps):
            collector(step, logits[:, step])
    return collector.rows()


def variant_rows(generate, ids, reference: Reference) -> tuple:
    """(Collector.rows of the variant forced along the reference's tokens, which path ran); RuntimeError when the
    forced run did not emit the reference's tokens (the forcing did not take)."""
    collector = Collector(reference)
    loop = getattr(generate, "__self__", None)
    if isinstance(loop, generation.FadeLoop):
        loop.forced(ids, reference.tokens[:, : len(reference.log_probs)], collector)
        return collector.rows(), PATHS["fade-loop"]
    new_tokens = reference.tokens.shape[1]
    tokens = generate(ids, new_tokens, logits_processor=forcing_processor(ids.shape[1], collector, reference.tokens))
    if not bool((tokens == reference.tokens).all()):
        raise RuntimeError("the forced generate() run did not emit the reference's tokens")
    return collector.rows(), PATHS["hf"]


def numerics_record(dtype: str, variant: dict, floor: dict, *, new_tokens: int, path: str,
                    max_kl: Optional[float] = None) -> dict:
    """`extra.numerics`: the judgement (fade.analyze.llm_numerics.judge) with the floor's figures beside it."""
    judged = llm_numerics.judge(dtype, agree=variant["agree"], gap=variant["gap"], kl=variant["kl"],
                                logit_std=variant["logit_std"], floor_std=floor["error_std"], floor_kl=floor["kl"],
                                max_kl=max_kl)  # fmt: skip
    steps, sequences = len(variant["kl"]), len(variant["kl"][0]) if variant["kl"] else 0
    floor_summary = llm_numerics.summarize(floor["agree"], floor["kl"])
    errors = [value for row in floor["error_std"] for value in row]
    return {
        "reference": REFERENCE,
        "method": METHOD,
        "path": path,
        "dtype": dtype,
        "steps": steps,
        "sequences": sequences,
        "steps_note": None if steps == new_tokens else
        f"the first {steps} of {new_tokens} steps: the reference's log-probs are capped at {REFERENCE_BYTES_CAP >> 20} MiB",
        **judged,
        "floor": {"what": FLOOR, **floor_summary, "logit_error_std_mean": sum(errors) / len(errors) if errors else None},
        "bounds": {"near_tie_z": llm_numerics.NEAR_TIE_Z, "unit_roundoff": llm_numerics.UNIT_ROUNDOFF[dtype],
                   "kl_factor": llm_numerics.KL_FACTOR, "kl_min_nats": llm_numerics.KL_MIN_NATS,
                   "note": llm_numerics.BOUNDS_NOTE},  # fmt: skip
    }
