"""The model bench: which (network, mode, variant) cases a request means, and `run_models`, which runs them
isolated through the same runner and JSONL records as the micro suite (suite "models").

Each case trains or runs one network under one variant in a worker process with a timeout; an OOM, a
timeout, a crash, a non-finite loss or a loss far from fp32's becomes that case's record, never the end
of the run. models_case.py states the method of one case; this module states the sizes and the budgets.
"""

from __future__ import annotations

import difflib
import fnmatch
from typing import Optional, Sequence

from fade.errors import FadeUsageError
from fade.measure.case import Case
from fade.measure.suites.models.case import TIMING_BUDGET_KEY
from fade.measure.suites.models.variants import Variant, parse_variants
from fade.measure.runner import (RunProgress, RunSummary, check_output_path, combine_runs, device_list, make_executor,
                                 new_run_id, run_cases, start_devices)
from fade.measure.zoo import SEED_NETWORKS, ZOO
from fade.measure.zoo.workload import import_function, is_user_spec

SUITE = "models"
MODES = ("train", "infer")
DEFAULT_BATCH = 64  # dlprimitives' "large" training batch and its AMD inference batch
DEFAULT_VARIANTS = ("fp32", "default", "tf32", "amp-bf16+channels-last", "compile")  # the H100 set
QUICK_BATCH = 2
QUICK_IMAGE_SIZE = 64  # px: the five CNNs all accept it (AlexNet needs >= 63)
QUICK_SEQUENCE = 32  # tokens
# one combined variant exercises autocast, channels-last and the loss check against fp32 in one case;
# compile is left out: minutes of C++ builds on a small CPU
QUICK_VARIANTS = ("fp32", "amp-bf16+channels-last")
# --quick runs the five CNNs unless --models names others: a transformer's 110-124M parameters cost seconds
# per step on a 2-core CPU (AdamW alone touches 2 GB per step) even at 32 tokens
QUICK_MODELS = SEED_NETWORKS
MAX_BATCH = 65536  # a batch beyond this is a typo, not a benchmark

# timing.measure settings for one step per call, as totals over a case's timing segments (models_case
# TIMING_SEGMENTS; budget, minimum run and sample counts are split between them). A training step is
# 1-500 ms. Blocks of >= 25 ms keep the device queue full across several short steps, as in a training loop,
# so a launch-bound network is timed at its launch rate. Steps that converge (CoV <= 1% in each segment)
# stop after about 0.5 s of samples; a launch-bound step, whose host rate wanders 10-30% over a second, runs
# the 2 s budget, so that its median rests on several such spells, and up to three times that when its
# segments disagree by more than 10% (models_case NOISY_SEGMENT_SPREAD_PCT). The 50-case H100 matrix
# (benchmarks/models_h100.py) took 205-222 s eager + 264-285 s compiled (cold Inductor cache) with the
# plain-loop check (three runs, docs/performance.md). The checked steps have already compiled and warmed
# the step; the engine's settle phase (first segment) waits out clock changes.
FULL_TIMING = {
    "warmup_s": 0.2,
    "min_warmup_calls": 2,
    "min_run_s": 0.5,
    "budget_s": 2.0,
    "min_samples": 8,
    "max_samples": 80,
    "target_cov": 0.01,
    "min_block_s": 0.025,
    "max_settle_s": 0.5,
}
# Quick: a CPU smoke run. Three samples is the least that gives a median and quartiles; no settle phase
# (the checked steps warmed the step, and a 2-core VM's noise is larger than any clock ramp).
QUICK_TIMING = {
    "warmup_s": 0.0,
    "min_warmup_calls": 1,
    "min_run_s": 0.2,
    "budget_s": 0.8,
    "min_samples": 3,
    "max_samples": 20,
    "target_cov": 0.03,
    "min_block_s": 0.0,
    "max_settle_s": 0.0,
}
CASE_TIMEOUT_S = 300.0  # torch.compile of resnet50's training step takes about a minute on an H100 host
QUICK_CASE_TIMEOUT_S = 120.0


def case_id(model: str, mode: str, variant: Variant, batch: int, size: Optional[int]) -> str:
    """`models/resnet50/train/amp-bf16+channels-last/b64`; a non-default input size adds `-64px` or `-128tok`."""
    entry = ZOO.get(model)
    suffix = ""
    if entry is not None and size is not None and size != entry.default_size:
        suffix = f"-{size}px" if entry.kind == "image" else f"-{size}tok"
    return f"{SUITE}/{model}/{mode}/{variant.name}/b{batch}{suffix}"


def build_cases(
    models: Sequence[str],
    *,
    modes: Sequence[str],
    variants: Sequence[Variant],
    batch: int,
    image_size: Optional[int] = None,
    sequence_length: Optional[int] = None,
    validate: bool = False,
) -> list:
    """One case per (model, mode, variant), in that nesting: a network's variants run side by side."""
    cases = []
    for model in models:
        entry = ZOO.get(model)
        size = None
        if entry is not None:
            size = image_size if entry.kind == "image" else sequence_length
        for mode in modes:
            for variant in variants:
                params = {"model": model, "mode": mode, "variant": variant.name, "batch": batch, "size": size}
                if validate:
                    params["validate"] = True
                cases.append(Case(case_id(model, mode, variant, batch, size), SUITE, "fade.measure.suites.models.case", "model_case", params))
    return cases


def select_cases(cases: Sequence[Case], only: Optional[Sequence[str]]) -> list:
    """The cases whose id matches one of the shell-style patterns `only` (fnmatch); all of them if None."""
    if not only:
        return list(cases)
    return [case for case in cases if any(fnmatch.fnmatchcase(case.case_id, pattern) for pattern in only)]


def check_request(
    models: Sequence[str],
    *,
    batch: int,
    mode: str,
    image_size: Optional[int],
    sequence_length: Optional[int],
    models_flag: str = "--models",
) -> list:
    """FadeUsageError for anything that cannot run anywhere; returns the modes `mode` stands for. The error
    for an unknown model names `models_flag` (`fade tune` passes "MODEL")."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0:
        raise FadeUsageError(f"--batch {batch}: the batch size must be a positive integer")
    if batch > MAX_BATCH:
        raise FadeUsageError(f"--batch {batch}: larger than {MAX_BATCH}; is it a typo?")
    if mode not in MODES + ("both",):
        raise FadeUsageError(f"--mode {mode!r}: use train, infer or both")
    if not models:
        raise FadeUsageError("--models: no model given")
    for model in models:
        if is_user_spec(model):
            import_function(model)  # FadeUsageError naming the missing module or function
            continue
        if model not in ZOO:
            close = difflib.get_close_matches(model, list(ZOO), n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise FadeUsageError(
                f"{models_flag} {model!r}: unknown model{hint} (known: {', '.join(ZOO)}; or give module:function)"
            )
        entry = ZOO[model]
        size = image_size if entry.kind == "image" else sequence_length
        flag = "--image-size" if entry.kind == "image" else "--seq-len"
        if size is not None and size < entry.min_size:
            raise FadeUsageError(f"{flag} {size}: {model} needs inputs of at least {entry.min_size} {entry.size_unit}")
        if size is not None and entry.max_size is not None and size > entry.max_size:
            raise FadeUsageError(f"{flag} {size}: {model} has position embeddings for {entry.max_size} "
                                 f"{entry.size_unit} at most")  # fmt: skip
    for flag, size in (("--image-size", image_size), ("--seq-len", sequence_length)):
        if size is not None and size <= 0:
            raise FadeUsageError(f"{flag} {size}: must be a positive integer")
    return list(MODES) if mode == "both" else [mode]


def run_models(
    device: Optional[str] = None,
    *,
    models: Optional[Sequence[str]] = None,
    batch: Optional[int] = None,
    mode: str = "both",
    variants: Optional[Sequence[str]] = None,
    quick: bool = False,
    image_size: Optional[int] = None,
    sequence_length: Optional[int] = None,
    validate: bool = False,
    out="results.jsonl",
    resume: bool = False,
    timeout_s: Optional[float] = None,
    isolate: bool = True,
    progress: Optional[RunProgress] = None,
    run_id: Optional[str] = None,
    only: Optional[Sequence[str]] = None,
    timing_budget_s: Optional[float] = None,
) -> RunSummary:
    """Train and/or run forward each of `models` under each of `variants` on `device`; append records to `out`.

    `device` may list several devices ("ocl:0,cuda:0" or a list): the same cases then run on each in turn,
    each device in its own worker (one at a time), into the one file under one run id; every device is started
    first (runner.start_devices), so a bad, absent or repeated device stops the run before any case. The
    summary is runner.combine_runs' (`devices` in order); fade.analyze.compare.compare_devices lays them side
    by side against the last device listed.

    Defaults: the whole zoo, batch DEFAULT_BATCH, both modes, DEFAULT_VARIANTS, inputs at each network's
    own size (224 px, 512 tokens). `quick` defaults instead to QUICK_MODELS, QUICK_BATCH,
    QUICK_IMAGE_SIZE, QUICK_SEQUENCE and QUICK_VARIANTS, with shorter timing. `models` may name a user's `module:function`
    (zoo.workload). `validate` re-times every case with a plain event-timed loop (`extra.plain_loop`).
    `only` keeps the cases whose id matches one of its fnmatch patterns (`models/*/train/compile/*`); when
    it keeps none, nothing starts and the summary selects 0 cases. Bad requests raise FadeUsageError before
    anything runs. `progress` hears of each case (fade.measure.runner.RunProgress). `timing_budget_s` bounds
    the further batches of timing segments a case with disagreeing segments gets (case.py "Timing"; the
    first batch always runs); unset, nothing bounds them. Returns the RunSummary.
    """
    models = list(models or (QUICK_MODELS if quick else ZOO))
    batch = (QUICK_BATCH if quick else DEFAULT_BATCH) if batch is None else batch
    if quick:
        if image_size is None:  # the quick size is FADE's choice, not the user's: say so when a network refuses it
            for model in models:
                entry = ZOO.get(model)
                if entry is not None and entry.kind == "image" and entry.min_size > QUICK_IMAGE_SIZE:
                    raise FadeUsageError(f"--quick runs image networks at {QUICK_IMAGE_SIZE} px and {model} needs "
                                         f"{entry.min_size} px: add --image-size {entry.min_size}")  # fmt: skip
        image_size = image_size or QUICK_IMAGE_SIZE
        sequence_length = sequence_length or QUICK_SEQUENCE
    modes = check_request(models, batch=batch, mode=mode, image_size=image_size, sequence_length=sequence_length)
    parsed = parse_variants(variants or (QUICK_VARIANTS if quick else DEFAULT_VARIANTS))
    out_path = check_output_path(out)
    cases = build_cases(
        models, modes=modes, variants=parsed, batch=batch, image_size=image_size,
        sequence_length=sequence_length, validate=validate,
    )  # fmt: skip
    cases = select_cases(cases, only)
    if not cases:  # no worker to start for nothing
        return RunSummary(out=str(out_path), run_id=run_id or new_run_id(), device=device, selected=0, resumed=0)
    devices = device_list(device)
    if len(devices) > 1 and not isolate:
        raise FadeUsageError("--device: several devices need a worker process each (fade.ocl and CUDA cannot share "
                             "one process); run them isolated")
    def executor_for(request):
        return make_executor(request, isolate=isolate, timeout_s=timeout_s,
                             default_timeout_s=QUICK_CASE_TIMEOUT_S if quick else CASE_TIMEOUT_S)

    timing = dict(QUICK_TIMING if quick else FULL_TIMING)
    if timing_budget_s is not None:
        if not timing_budget_s > 0:
            raise FadeUsageError(f"--timing-budget {timing_budget_s}: give seconds > 0")
        timing[TIMING_BUDGET_KEY] = float(timing_budget_s)

    def run_on(executor) -> RunSummary:
        return run_cases(cases, executor=executor, out=out_path, run_id=run_id, quick=quick, timing=timing,
                         resume=resume, progress=progress)

    executors = [executor_for(request) for request in devices]
    if len(devices) == 1:
        return run_on(executors[0])
    from fade.measure.results_lock import holding_results

    with holding_results(out_path):  # the whole multi-device run, not each device's turn (run_cases nests in it)
        resolved = start_devices(executors)  # before any case: a bad device stops the run here
        run_id = run_id or new_run_id()
        runs = []
        for position, device_name in enumerate(resolved):
            runs.append(run_on(executors[0] if position == 0 else executor_for(device_name)))
            if runs[-1].interrupted or runs[-1].write_error:
                break
    return combine_runs(runs)


__all__ = ["run_models", "build_cases", "select_cases", "case_id", "SEED_NETWORKS", "DEFAULT_VARIANTS", "SUITE"]
