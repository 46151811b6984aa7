"""The LLM inference bench: which prefill and decode cases a request means, and `run_llm`, which checks the
request and runs them isolated through the same runner and JSONL records as the other suites (suite "llm").

case.py states the method of one case; this module states the sizes and the budgets. Sizes: a full run is
issue 28's: decode at batch 1, 8 and 32 after a 512-token prompt, 128 new tokens, prefill at 128 to 8192
tokens (up to the model's context), in bf16. --quick is a smoke run a 2-core CPU finishes in seconds with
tiny-llama: a 16-token prompt, 16 new tokens, batch 1 and 2, one 16-token prefill, in fp32 (so that every
variant's greedy tokens must equal the reference's).
"""

from __future__ import annotations

import difflib
import importlib.util
from dataclasses import dataclass
from typing import Optional, Sequence

from fade.analyze.llm import DTYPE_BYTES
from fade.analyze.llm_table import config_to_params, resolve_config
from fade.errors import FadeUsageError
from fade.measure.case import Case
from fade.measure.runner import RunProgress, RunSummary, check_output_path, make_executor, run_cases
from fade.measure.suites.llm.generation import VARIANTS

SUITE = "llm"
CASE_MODULE = "fade.measure.suites.llm.case"
DEFAULT_VARIANTS = ("hf-generate", "hf-static", "fade-loop")
MAX_BATCH = 4096  # sequences per step; beyond this a batch is a typo, not a benchmark
REQUIREMENT = "transformers>=5.17"  # StaticCache(config=, max_cache_len=), dtype= in from_config


@dataclass(frozen=True)
class Plan:
    """The sizes of a run; each is a default the CLI's flags replace."""

    config: str  # a bundled name
    dtype: str
    batches: tuple
    prompt_tokens: int
    new_tokens: int
    prefill_tokens: tuple  # prefill lengths, batch 1; lengths past the model's context are left out


FULL_PLAN = Plan(config="llama-3.1-8b", dtype="bf16", batches=(1, 8, 32), prompt_tokens=512, new_tokens=128,
                 prefill_tokens=(128, 512, 2048, 8192))  # fmt: skip
# 16 new tokens, not 8: decode time is a difference of two timings, and on a busy 2-core VM 7 steps of tiny-llama
# (~1 ms each) drowned in the spread of generate(1)
QUICK_PLAN = Plan(config="tiny-llama", dtype="fp32", batches=(1, 2), prompt_tokens=16, new_tokens=16, prefill_tokens=(16,))

# timing.measure settings per mode. One call is a whole generate(): ms to seconds, so one call per sample
# (min_block_s 0). Full: 2 warm-up calls (the checked run has compiled and warmed everything already), >= 5
# samples over >= 1 s, up to 4 s, and a settle phase for GPU clocks. Quick: 5 samples (3 give a median and
# quartiles; a median of 5 rode out the bursts of other work on a shared 2-core VM); no settle (a 2-core VM's
# noise is larger than any clock ramp).
FULL_TIMING = {
    "warmup_s": 0.5,
    "min_warmup_calls": 2,
    "min_run_s": 1.0,
    "budget_s": 4.0,
    "min_samples": 5,
    "max_samples": 40,
    "target_cov": 0.02,
    "min_block_s": 0.0,
    "max_settle_s": 0.5,
}
QUICK_TIMING = {
    "warmup_s": 0.0,
    "min_warmup_calls": 1,
    "min_run_s": 0.05,
    "budget_s": 0.5,
    "min_samples": 5,
    "max_samples": 15,
    "target_cov": 0.05,
    "min_block_s": 0.0,
    "max_settle_s": 0.0,
}
# an 8B model built in fp32, its fp32 reference at batch 32 and a torch.compile of the step: minutes, not more
CASE_TIMEOUT_S = 900.0
QUICK_CASE_TIMEOUT_S = 120.0


def decode_case_id(config_name: str, dtype: str, variant: str, batch: int, prompt_tokens: int, new_tokens: int) -> str:
    """`llm/llama-3.1-8b/bf16/fade-loop/b8/p512+n128`."""
    return f"{SUITE}/{config_name}/{dtype}/{variant}/b{batch}/p{prompt_tokens}+n{new_tokens}"


def prefill_case_id(config_name: str, dtype: str, tokens: int, batch: int = 1) -> str:
    """`llm/llama-3.1-8b/bf16/prefill/s2048/b1`."""
    return f"{SUITE}/{config_name}/{dtype}/prefill/s{tokens}/b{batch}"


def build_cases(config, *, dtype: str, variants: Sequence[str], batches: Sequence[int], prompt_tokens: int,
                new_tokens: int, prefill_tokens: Sequence[int]) -> list:
    """One decode case per (batch, variant), a batch's variants side by side, then the prefill cases (shortest
    first). Decode first: the cases share one worker, and each prefill case runs the attention probe, which
    records under torch.profiler; on the H100 a launch-bound step timed after a torch.profiler session in the
    same process ran 34.3 ms against 25.4 ms in a fresh one (fade.measure.profile.profile_steps). On the H200
    (session 20, results/llm-h200-s20) the eager, host-bound variants timed after the prefill cases read 58-89%
    of the hand-written reference's tokens/s, which runs no profiler, while the compiled fade-loop read 96-101%."""
    shape = config_to_params(config)
    cases = []
    for batch in batches:
        for variant in variants:
            params = {"config": shape, "variant": variant, "dtype": dtype, "batch": batch,
                      "prompt_tokens": prompt_tokens, "new_tokens": new_tokens}  # fmt: skip
            case_id = decode_case_id(config.name, dtype, variant, batch, prompt_tokens, new_tokens)
            cases.append(Case(case_id, SUITE, CASE_MODULE, "decode_case", params, dtype=dtype))
    for tokens in prefill_tokens:
        params = {"config": shape, "dtype": dtype, "batch": 1, "tokens": tokens}
        cases.append(Case(prefill_case_id(config.name, dtype, tokens), SUITE, CASE_MODULE, "prefill_case", params, dtype=dtype))
    return cases


def require_transformers() -> None:
    """FadeUsageError (one line, exit 2) when transformers cannot be imported here: checked before a worker starts."""
    if importlib.util.find_spec("transformers") is None:
        raise FadeUsageError(f"fade bench llm needs transformers, which is not installed: pip install '{REQUIREMENT}'")


def check_request(config, *, dtype: str, variants: Sequence[str], batches: Sequence[int], prompt_tokens: int,
                  new_tokens: int, prefill_tokens: Sequence[int]) -> None:
    """FadeUsageError for anything that cannot run anywhere, naming the flag."""
    if dtype not in DTYPE_BYTES:
        raise FadeUsageError(f"--dtype {dtype!r}: use one of {', '.join(DTYPE_BYTES)}")
    if not variants:
        raise FadeUsageError("--variants: no variant given")
    for variant in variants:
        if variant not in VARIANTS:
            close = difflib.get_close_matches(variant, VARIANTS, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise FadeUsageError(f"--variants {variant!r}: unknown variant{hint} (known: {', '.join(VARIANTS)})")
    for flag, numbers in (("--batch", batches), ("--prefill-tokens", prefill_tokens),
                          ("--prompt-tokens", [prompt_tokens]), ("--new-tokens", [new_tokens])):  # fmt: skip
        for number in numbers:
            if isinstance(number, bool) or not isinstance(number, int) or number <= 0:
                raise FadeUsageError(f"{flag} {number}: must be a positive integer")
    if max(batches, default=1) > MAX_BATCH:
        raise FadeUsageError(f"--batch {max(batches)}: larger than {MAX_BATCH}; is it a typo?")
    if not batches and variants:
        raise FadeUsageError("--batch: no batch size given")
    if new_tokens < 2:
        raise FadeUsageError(f"--new-tokens {new_tokens}: decode is timed as generate(N) - generate(1); give at least 2")
    context = config.max_position_embeddings
    if prompt_tokens + new_tokens > context:
        raise FadeUsageError(f"--prompt-tokens {prompt_tokens} + --new-tokens {new_tokens}: {config.name} has "
                             f"positions for {context} tokens")
    for tokens in prefill_tokens:
        if tokens > context:
            raise FadeUsageError(f"--prefill-tokens {tokens}: {config.name} has positions for {context} tokens")


def run_llm(
    device: Optional[str] = None,
    *,
    config: Optional[str] = None,
    variants: Optional[Sequence[str]] = None,
    batches: Optional[Sequence[int]] = None,
    prompt_tokens: Optional[int] = None,
    new_tokens: Optional[int] = None,
    prefill_tokens: Optional[Sequence[int]] = None,
    dtype: Optional[str] = None,
    quick: bool = False,
    out="results/llm.jsonl",
    resume: bool = False,
    timeout_s: Optional[float] = None,
    isolate: bool = True,
    progress: Optional[RunProgress] = None,
    run_id: Optional[str] = None,
) -> RunSummary:
    """Prefill and greedy decode of one causal LM on `device`; one record per case appended to `out`.

    `config`: a bundled name (data/llm.toml), a TOML file of one [[config]] row, a Hugging Face config.json or a
    local model folder (its weights loaded)
    (fade.analyze.llm_table.resolve_config). The other arguments default to FULL_PLAN's (QUICK_PLAN's with
    `quick`), except `variants` (DEFAULT_VARIANTS). Prefill lengths past the model's context are left out of the
    defaults (and refused when asked for). Bad requests raise FadeUsageError before anything runs, a missing
    transformers among them. `progress` hears of each case (fade.measure.runner.RunProgress). Returns the
    RunSummary.
    """
    plan = QUICK_PLAN if quick else FULL_PLAN
    shape = resolve_config(config or plan.config)
    dtype = dtype or plan.dtype
    variants = list(variants or DEFAULT_VARIANTS)
    batches = list(batches or plan.batches)
    prompt_tokens = plan.prompt_tokens if prompt_tokens is None else prompt_tokens
    new_tokens = plan.new_tokens if new_tokens is None else new_tokens
    if prefill_tokens is None:
        prefill_tokens = [tokens for tokens in plan.prefill_tokens if tokens <= shape.max_position_embeddings]
    prefill_tokens = list(prefill_tokens)
    check_request(shape, dtype=dtype, variants=variants, batches=batches, prompt_tokens=prompt_tokens,
                  new_tokens=new_tokens, prefill_tokens=prefill_tokens)  # fmt: skip
    require_transformers()
    out_path = check_output_path(out)
    cases = build_cases(shape, dtype=dtype, variants=variants, batches=batches, prompt_tokens=prompt_tokens,
                        new_tokens=new_tokens, prefill_tokens=prefill_tokens)  # fmt: skip
    executor = make_executor(device, isolate=isolate, timeout_s=timeout_s,
                             default_timeout_s=QUICK_CASE_TIMEOUT_S if quick else CASE_TIMEOUT_S)  # fmt: skip
    return run_cases(cases, executor=executor, out=out_path, run_id=run_id, quick=quick,
                     timing=QUICK_TIMING if quick else FULL_TIMING, resume=resume, progress=progress)  # fmt: skip


__all__ = ["run_llm", "build_cases", "decode_case_id", "prefill_case_id", "DEFAULT_VARIANTS", "SUITE"]
