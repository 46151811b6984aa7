"""FADE's public Python API: one function per thing FADE does, each with its real parameters, returning data
(result dataclasses with `to_dict()`); `import fade` re-exports these names and the `fade` CLI calls them.

This module is the facade layer: it may write to stderr (the messages `apply_fade_patches` and
`load_tuning` have always printed, progress bars, the guard's summary at exit), and it imports every
library module inside the function that needs it, so `import fade` stays light and never imports torch.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

from fade.version import __version__

DOCTOR_SCHEMA_VERSION = 1  # `fade doctor --json`: bump only on an incompatible change of the report's keys
BENCH_SCHEMA_VERSION = 1  # BenchResult.to_dict(): the same rule
SUITES = ("micro", "models", "dist", "llm")
DEFAULT_OUTPUTS = {"micro": "results/micro.jsonl", "models": "results/models.jsonl",
                   "dist": "results/dist.jsonl", "llm": "results/llm.jsonl"}  # the CLI's -o defaults
LLM_SELECTION = ("config", "variants", "batches", "prompt_tokens", "new_tokens", "prefill_tokens", "dtype")  # bench(llm=)
INTERRUPTED = 130  # the exit status of a run stopped by Ctrl-C, as a shell reports a SIGINT death


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr)


# -- doctor -----------------------------------------------------------------------------------------------
@dataclass
class DoctorResult:
    """What `fade doctor` found: the devices as the hardware has them, the findings with their fixes, and the
    quick measurements (None when not measured). `exit_status`: 0 no `fail` finding, 1 at least one."""

    devices: list
    findings: list
    measurements: Optional[dict]
    stack: dict
    snapshot_source: Optional[str]
    probe: dict
    collection_errors: dict
    elapsed_s: float
    exit_status: int
    live: bool = True  # False when a saved snapshot was diagnosed
    opencl: Optional[dict] = None  # the snapshot's OpenCL section (platforms, devices, ICDs, CLBlast) or None

    def to_dict(self) -> dict:
        """The JSON of `fade doctor --json`: `schema_version` and `fade_version` first."""
        return {
            "schema_version": DOCTOR_SCHEMA_VERSION,
            "fade_version": __version__,
            "devices": self.devices,
            "findings": self.findings,
            "measurements": self.measurements,
            "stack": self.stack,
            "snapshot_source": self.snapshot_source,
            "probe": self.probe,
            "collection_errors": self.collection_errors,
            "elapsed_s": self.elapsed_s,
            "opencl": self.opencl,
        }


def doctor(
    *,
    measure: bool = True,
    snapshot: Union[str, os.PathLike, dict, None] = None,
    fresh: bool = False,
    rules: Union[str, os.PathLike, None] = None,
) -> DoctorResult:
    """The truth about this machine's GPUs and stack, with exact fixes: what `fade doctor` does.

    measure: also run the quick GEMM/copy/self-test measurements (in one child process that probes torch
        too); False probes torch only (`--no-measure`).
    snapshot: diagnose this saved snapshot (a path, or the dict `collect_snapshot` returns) instead of this
        machine; nothing is measured then.
    fresh: re-probe torch even if a cached probe is still valid (with measure=False).
    rules: a rules file to use instead of the bundled one (FadeUsageError if it does not load).
    """
    from fade.analyze.doctor import diagnose as diagnose_snapshot, exit_code
    from fade.collect.snapshot import collect_snapshot as collect, load_snapshot

    started = time.perf_counter()
    rules_path = _rules_path(rules)
    measurements = None
    if snapshot is not None:
        snap = snapshot if isinstance(snapshot, dict) else load_snapshot(os.fspath(snapshot))
    elif not measure:
        snap = collect(torch="subprocess", probe_cache=not fresh)
    else:
        from fade.measure.suites.quick import run_quick_subprocess

        child: dict = {}

        def probe_and_measure():  # one child process imports torch once for both jobs
            child.update(run_quick_subprocess(with_probe=True))
            if child.get("torch") is None:
                return None, child.get("error") or "torch is not importable in this Python"
            return child["torch"], None

        snap = collect(torch=probe_and_measure)
        measurements = {k: v for k, v in child.items() if k != "torch"}
    report = diagnose_snapshot(snap, measurements, rules_path=rules_path)
    return DoctorResult(
        devices=report["devices"],
        findings=report["findings"],
        measurements=report["measurements"],
        stack=report["stack"],
        snapshot_source=report["snapshot_source"],
        probe=report["probe"],
        collection_errors=report["collection_errors"],
        elapsed_s=round(time.perf_counter() - started, 3),
        exit_status=exit_code(report),
        live=snapshot is None,
        opencl=report.get("opencl"),
    )


def _rules_path(path):
    from fade.analyze.rules import RULES_FILE, RuleError, load_rules
    from fade.errors import FadeUsageError

    if path is None:
        return RULES_FILE
    try:
        load_rules(path)
    except RuleError as exc:
        raise FadeUsageError(f"rules file {exc}") from None
    return path


# -- bench ------------------------------------------------------------------------------------------------
@dataclass
class BenchResult:
    """What a `fade bench` run did. `run`: the runner's summary (statuses, failures, wall time, ...);
    `records`: this run's JSONL records, in order; `summary`: one row per case as the terminal table shows
    it (figure, % of peak, spread, note); `plots`: PNG paths when plots were asked for."""

    suite: str
    run: object  # fade.measure.runner.RunSummary
    summary: list = field(default_factory=list)
    plots: list = field(default_factory=list)
    env: list = field(default_factory=list)  # fade.env_change.EnvChange per variable FADE set for the run's processes
    rank: int = 0  # dist: this process's rank (only rank 0 holds records and renders)
    comparison: object = None  # models on several devices: fade.analyze.compare.Comparison, the last device the baseline

    @property
    def records(self) -> list:
        return self.run.records

    @property
    def exit_status(self) -> int:
        """130 interrupted, 1 a case failed (or a dist run stopped early), else 0 (fade.errors.ExitCode)."""
        if self.run.interrupted:
            return INTERRUPTED
        return 1 if self.run.failed or getattr(self.run, "stopped", None) else 0

    def to_dict(self, *, with_records: bool = True) -> dict:
        data = {"schema_version": BENCH_SCHEMA_VERSION, "fade_version": __version__, "suite": self.suite}
        data.update(self.run.to_dict())
        data["plots"] = [str(path) for path in self.plots]
        data["summary"] = list(self.summary)
        data["env"] = [{"name": change.name, "value": change.value, "status": change.status, "reason": change.reason}
                       for change in self.env]  # fmt: skip
        if self.comparison is not None:
            data["comparison"] = self.comparison.to_dict()
        if with_records:
            data["records"] = list(self.run.records)
        return data


def bench(
    suite: str = "micro",
    device: Optional[str] = None,
    *,
    quick: bool = False,
    only: Optional[str] = None,
    dtypes: Optional[Sequence[str]] = None,
    models: Optional[Sequence[str]] = None,
    batch: Optional[int] = None,
    mode: str = "both",
    variants: Optional[Sequence[str]] = None,
    image_size: Optional[int] = None,
    sequence_length: Optional[int] = None,
    validate: bool = False,
    out: Union[str, os.PathLike, None] = None,
    resume: bool = False,
    plot: bool = False,
    timeout_s: Optional[float] = None,
    isolate: bool = True,
    progress: Union[bool, object] = True,
    dist: Optional[dict] = None,
    timing_budget_s: Optional[float] = None,
    llm: Optional[dict] = None,
) -> BenchResult:
    """Run a benchmark suite and append one JSONL record per case to `out`: what `fade bench SUITE` does.

    suite: "micro" (GEMM, bandwidth, transfers, launch, conv, attention, norms, CPU vs GPU, as % of the
        device's peaks), "models" (train/infer throughput of real networks per variant), "dist"
        (torch.distributed collectives and data-parallel scaling on several processes; docs/dist.md) or "llm"
        (a causal LM's prefill TFLOP/s and greedy decode tokens/s against the bandwidth roofline; docs/llm.md).
    device: a torch device (None: cuda:0 if available, else cpu; dist: a device type, each rank takes its
        own). models: also several, "ocl:0,cuda:0" or a list: each runs the cases in turn into `out`, and
        `comparison` lays them side by side as % of the last one listed. quick: small sizes and short timing.
    only: comma-separated case patterns: micro: globs or substrings ("gemm/bf16/*"); models: globs of case
        ids ("models/*/train/compile/*"). dtypes: micro: dtypes to keep.
    models, batch, mode ("train", "infer", "both"), variants, image_size, sequence_length, validate: the
        model suite's selection (fade.measure.suites.models.suite.run_models says each default).
    out: JSONL results file, appended to (default results/<suite>.jsonl).
    resume: skip cases already measured ok in `out`. plot: micro: also write PNGs to `<out stem>-plots/`.
    timeout_s: per case, in the worker process (`isolate`; False runs cases here, without a timeout).
    progress: True draws a progress bar on stderr, False draws nothing, or a
        fade.measure.runner.RunProgress object that hears of each case.
    timing_budget_s: models: a case whose timing segments disagree gets further batches of them only while its
        timing has used less than this many seconds (the first batch always runs); None: no bound.
    dist: the dist suite's selection, keyword arguments of fade.measure.suites.dist.suite.run_dist (nproc,
        collectives, sizes, scaling, strategies, batch, image_size, sequence_length); `dtypes` and
        `timeout_s` (a collective's wait for its peers) apply too.
    llm: the llm suite's selection, keyword arguments of fade.measure.suites.llm.suite.run_llm (config, variants,
        batches, prompt_tokens, new_tokens, prefill_tokens, dtype; each defaults to `fade bench llm`'s, --quick's
        with `quick`); `variants` above applies when the dict names none.
    FadeUsageError for a bad request (before anything runs); WorkerStartError (a RuntimeError) when the
    worker cannot start on this device.
    """
    from fade.errors import FadeUsageError

    if suite not in SUITES:
        raise FadeUsageError(f"unknown suite {suite!r}: choose {' or '.join(SUITES)}")
    if suite != "models" and (not isinstance(device, (str, type(None))) or "," in (device or "")):
        raise FadeUsageError(f"--device {device!r}: several devices are for `fade bench models`; run {suite} once per device")
    out = DEFAULT_OUTPUTS[suite] if out is None else out
    watcher = _progress(progress)
    if suite == "micro":
        from fade.measure.suites.micro.suite import run_micro
        from fade.results import summarize

        if plot:
            from fade.report.plots import require_matplotlib

            require_matplotlib("--plot")
        run = run_micro(device, quick=quick, only=only, out=out, resume=resume, timeout_s=timeout_s,
                        isolate=isolate, dtypes=dtypes, progress=watcher)
        result = BenchResult("micro", run, summary=summarize(run.records))
        if plot:
            result.plots = run.plots = _plot_micro(run)
        return result
    if suite == "llm":
        from fade.measure.suites.llm.suite import run_llm
        from fade.results import summarize

        selection = dict(llm or {})
        unknown = sorted(set(selection) - set(LLM_SELECTION))
        if unknown:
            raise FadeUsageError(f"llm={{{', '.join(map(repr, unknown))}: ...}}: unknown; the llm suite takes {', '.join(LLM_SELECTION)}")
        if variants is not None:
            selection.setdefault("variants", variants)
        run = run_llm(device, quick=quick, out=out, resume=resume, timeout_s=timeout_s, isolate=isolate,
                      progress=watcher, **selection)  # fmt: skip
        return BenchResult("llm", run, summary=summarize(run.records))
    if suite == "dist":
        return _bench_dist(device, quick=quick, dtypes=dtypes, out=out, resume=resume, timeout_s=timeout_s,
                           progress=watcher, **(dist or {}))  # fmt: skip
    from fade.measure.suites.models.suite import run_models
    from fade.report.console import model_rows

    patterns = [part.strip() for part in only.split(",") if part.strip()] if only else None
    run = run_models(device, models=models, batch=batch, mode=mode, variants=variants, quick=quick,
                     image_size=image_size, sequence_length=sequence_length, validate=validate, out=out,
                     resume=resume, timeout_s=timeout_s, isolate=isolate, progress=watcher, only=patterns,
                     timing_budget_s=timing_budget_s)
    result = BenchResult("models", run, summary=model_rows(run.records))
    if len(run.devices) > 1:  # side by side, as % of the last device listed (the vendor stack)
        from fade.analyze.compare import compare_devices
        from fade.results import read_records

        result.comparison = compare_devices(run.out, read_records(run.out).records, run.devices, case_ids=run.case_ids)
    return result


def _bench_dist(device, *, quick, dtypes, out, resume, timeout_s, progress, **selection) -> BenchResult:
    """`fade bench dist`: on this process's rank under a launcher, else on ranks started here (run_dist)."""
    from fade.measure.suites.dist.launch import rank_environment
    from fade.measure.suites.dist.suite import run_dist
    from fade.report.console import dist_rows

    ranks = rank_environment(os.environ)
    rank = int(ranks["RANK"]) if ranks else 0
    run, env = run_dist(device, quick=quick, dtypes=dtypes, out=out, resume=resume, timeout_s=timeout_s,
                        progress=progress if rank == 0 else None, **selection)  # fmt: skip
    return BenchResult("dist", run, summary=dist_rows(run.records), env=env, rank=rank)


def _progress(progress):
    if progress is True:
        from fade.report.progress import ProgressBar

        return ProgressBar()
    return progress or None


def _plot_micro(run) -> list:
    """The micro suite's plots, drawn after the run from every record `out` holds for this device."""
    from pathlib import Path

    from fade.report.plots import plot_micro
    from fade.results import read_records

    out_path = Path(run.out)
    records = [record for record in read_records(out_path).records if record.get("torch_device") == run.device]
    return plot_micro(records, out_path.parent / f"{out_path.stem}-plots")


# -- act: patches, device truth, tuning, the guard --------------------------------------------------------
def apply_fade_patches(
    *,
    environ: Optional[dict] = None,
    snapshot: Optional[dict] = None,
    verbose: bool = True,
    guard: Union[bool, str] = False,
    profile: Union[str, os.PathLike, None] = None,
) -> list:
    """Set the safe env fixes for this machine's GPUs. Call it before the first torch.cuda call.

    Returns every change considered (fade.env_change.EnvChange), including the ones skipped because you
    set the variable. verbose: print each change (and a profile's warnings) to stderr.
    profile: a `fade tune` profile; its env lines follow the doctor's fixes (a profile from another device
        warns and applies nothing). Model-level knobs come back from fade.load_tuning(profile).
    guard: True (or "warn"/"strict"/"sampled") also turns fade.guard on for this thread until exit and
        prints its summary table to stderr then; it never starts the GPU runtime, so the env fixes still
        take effect.
    environ, snapshot: injectable for tests (default: os.environ and a static snapshot of this machine).
    """
    from fade.act.patches import apply_fade_patches as apply

    return apply(environ=environ, snapshot=snapshot, verbose=verbose, guard=guard, profile=profile,
                 on_message=_to_stderr, guard_at_exit=_print_guard_summary)


def device_truth(index: int = 0):
    """The corrected view of torch device `index`: CUs, wave size, peaks (fade.analyze.devices.DeviceTruth).
    Never patches torch. IndexError when torch has no such device."""
    from fade.analyze.devices import torch_device_truth
    from fade.collect.snapshot import collect_snapshot

    return torch_device_truth(collect_snapshot(torch="inprocess"), index)


def load_tuning(
    path: Union[str, os.PathLike],
    *,
    environ: Optional[dict] = None,
    fingerprint: Optional[dict] = None,
    set_torch_flags: bool = True,
    verbose: bool = True,
):
    """Apply the `fade tune` profile at `path` to this process: env (user values win) and process-wide torch
    flags; returns the Tuning (env set, model knobs to apply, warnings).

    Call it before the first torch.cuda call: TunableOp and MIOpen read their variables once. TuningFileError
    for an unreadable or corrupt profile; a profile from another device warns and applies nothing.
    verbose: print each env variable and warning to stderr. fingerprint: this device (default: read
    without starting the GPU runtime).
    """
    from fade.act.tune.tuning_file import load_tuning as load

    return load(path, environ=environ, fingerprint=fingerprint, set_torch_flags=set_torch_flags, verbose=verbose,
                on_message=_to_stderr)


def tune(
    model,
    example_inputs=None,
    loss_fn: Optional[Callable] = None,
    *,
    target=None,
    mode: Optional[str] = None,
    batch: int = 64,
    size: Optional[int] = None,
    budget_min: float = 5.0,  # fade.act.tune.tuner.DEFAULT_BUDGET_MIN (a test holds them equal)
    device: Optional[str] = None,
    exhaustive: bool = False,
    quick: bool = False,
    resume: bool = True,
    out: Union[str, os.PathLike, None] = None,
    progress: Optional[Callable[[str], None]] = None,
    latency_ms: Optional[float] = None,
):
    """Search the fastest numerically sound knobs for a model on this device; returns a TuneResult
    (fade.act.tune.tuner: `.tuning` is the tuning file's content, `.to_dict()` its JSON, `.recommends`,
    `.changed`, `.diagnosis`, `.exit_status`). What `fade tune` runs.

    model: a zoo name ("resnet50") or "module:function" (see fade.measure.zoo.workload): trials run in isolated
        workers, env knobs included, with `mode` (default "train"), `batch`, `size` (image side or sequence
        length), `exhaustive`, `quick` (short timing) and `resume` (reuse an interrupted search's journal).
        Or a torch.nn.Module: trials run in this process on `example_inputs` (a tensor or tuple), env knobs are
        left out (and the file says so); `loss_fn` is `loss_fn(output) -> loss` or `loss_fn(output, target)`
        (nn.CrossEntropyLoss()) for training, None for inference; `target` the loss's target (default: derived
        from one forward pass, the file's loss_target says how).
    budget_min: the whole run in minutes (set-up, the profiled window of the baseline, the search and the final
        check). out: where to write the tuning file (atomically), or None. progress: one line per step.
    mode "generate" (`fade tune CONFIG --generate`): `model` is an LLM config; `latency_ms` a per-token latency
        target under which the batch is searched.
    Apply a tuning file with fade.load_tuning.
    """
    from fade.act.tune.tuner import run_tune
    from fade.act.tune.tuner import tune as tune_module
    from fade.errors import FadeUsageError

    if isinstance(model, str):
        if example_inputs is not None or loss_fn is not None or target is not None:
            raise FadeUsageError(f"tune({model!r}): a zoo name or module:function builds its own inputs and loss; "
                                 "pass example_inputs/loss_fn only with a torch.nn.Module")  # fmt: skip
        return run_tune(model, mode=mode or "train", batch=batch, budget_min=budget_min, device=device, size=size,
                        exhaustive=exhaustive, quick=quick, resume=resume, progress=progress, output=out,
                        latency_ms=latency_ms)  # fmt: skip
    if example_inputs is None:
        raise FadeUsageError("tune(model, example_inputs, ...): a torch.nn.Module needs example_inputs")
    worker_only = {"batch": batch != 64, "size": size is not None, "exhaustive": exhaustive, "quick": quick, "resume": not resume,
                   "latency_ms": latency_ms is not None}
    given = [name for name, set_ in worker_only.items() if set_]
    if given:
        raise FadeUsageError(f"tune(module, ...): {', '.join(given)}: only for a zoo name or module:function (trials in "
                             "workers); a module is tuned on its example_inputs as they are")  # fmt: skip
    return tune_module(model, example_inputs, loss_fn, target=target, mode=mode, budget_min=budget_min, device=device,
                       progress=progress, output=out)  # fmt: skip


def enable_process_guard(mode: str = "warn", device=None, *, sample_every: int = 20,
                         json_path: Optional[str] = None):
    """Guard the calling thread until the interpreter exits, then print the summary table to stderr (and
    write the JSON report to `json_path` if given); what `apply_fade_patches(guard=...)` turns on.
    sample_every: fade.hostwork.session.DEFAULT_SAMPLE_EVERY (a test holds them equal)."""
    from fade.hostwork.process import enable_process_guard as enable

    return enable(mode, device, sample_every=sample_every, json_path=json_path, at_exit=_print_guard_summary)


def _print_guard_summary(report) -> None:
    from fade.report.guard import print_summary

    print_summary(report)


def guard(mode: str = "warn", device=None, *, sample_every: int = 20, sync_debug: Optional[bool] = None,
          quiet: bool = False):
    """A guard over a GPU region: `with fade.guard(): ...` or `@fade.guard(mode="strict")`. It reports CPU
    compute, host<->device copies, syncs, device mixing and CPU fallbacks per line of your code.

    mode: "warn" (a FadeGuardWarning per new offence), "strict" (raise GuardViolation at the first) or
        "sampled" (inspect one training step in `sample_every`; steps end at optimizer.step()).
    device: the accelerator's device type ("cuda" on NVIDIA and ROCm, "xpu", "mps", a PrivateUse1 name);
        None picks the accelerator torch was built for (without starting its runtime).
    sync_debug: on CUDA, also torch.cuda.set_sync_debug_mode("warn") while active; None: on for warn and
        strict. quiet: record only; read `.report` (a GuardReport) afterwards.
    sample_every: fade.hostwork.session.DEFAULT_SAMPLE_EVERY (a test holds them equal).
    """
    from fade.hostwork.session import Guard

    return Guard(mode, device, sample_every=sample_every, sync_debug=sync_debug, quiet=quiet)


def profile(steps: int = 3, *, wait: int = 1, warmup: int = 1, device: Optional[str] = None,
            dtype: Optional[str] = None, trace_path: Optional[str] = None):
    """Profile the steps run inside the block: `with fade.profile(steps=3) as p: train()`, then `p.summary`
    (the JSON `fade profile` writes: device busy by kernel class, idle by cause, top kernels and host ops,
    launches, TFLOP/s and MFU, host syncs with your lines, and a verdict with the fix to try).

    A step ends at each optimizer.step(), or, once the code calls fade.step(), at each fade.step(). The first
    `wait` steps run unprofiled (compile, first calls), `warmup` more with the profiler warming up, then
    `steps` are recorded; one step after them names your lines of .item()/syncs/copies.
    device: "cuda" (NVIDIA and ROCm) or "cpu"; None: cuda if available, else cpu.
    dtype: the dtype the step's matmuls run in ("bf16", "fp16", "tf32", "fp32"), for MFU from the doctor's
        spec table; None: no MFU. trace_path: also write the Chrome trace there (.json.gz).
    `p.summary` raises FadeUsageError with the reason when too few steps ran; `p.steps_seen` counts them.
    """
    from fade.measure.profile import StepProfiler

    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return StepProfiler(device=device, wait=wait, warmup=warmup, active=steps, trace_path=trace_path, dtype=dtype,
                        context={"kind": "python"})


def step() -> None:
    """Mark the end of a training step for fade.profile() and fade.guard() (mode="sampled"): from the first
    call on, optimizer.step() calls no longer end steps. Costs nothing when neither is active."""
    from fade.hostwork.hooks import explicit_step

    explicit_step()


# -- collect and analyze ----------------------------------------------------------------------------------
def collect_snapshot(
    *,
    torch: Union[str, Callable] = "subprocess",
    root: str = "/",
    environ: Optional[dict] = None,
    run_tools: bool = True,
    probe_cache: bool = False,
) -> dict:
    """Describe this machine as a snapshot dict (docs/snapshot.md): OS, kernel driver, vendor tools, torch.

    torch: "subprocess" (safe default), "inprocess", "static" (what the wheel was built for, without
    starting the GPU runtime), "skip", or a callable returning (torch section, failure reason).
    root, environ: read another filesystem root / environment (tests). run_tools: run vendor tools
    (nvidia-smi, rocminfo). probe_cache: reuse a still-valid cached torch probe.
    """
    from fade.collect.snapshot import collect_snapshot as collect

    return collect(torch=torch, root=root, environ=environ, run_tools=run_tools, probe_cache=probe_cache)


def diagnose(snapshot: dict, measurements: Optional[dict] = None,
             rules_path: Union[str, os.PathLike, None] = None) -> dict:
    """The doctor's report of a snapshot, as a dict {devices, findings, measurements, stack, ...}: pure, no
    probing. measurements: the quick measurements, {"devices": {"cuda:0": {...}}}. rules_path: a rules
    file instead of the bundled one."""
    from fade.analyze.doctor import diagnose as run
    from fade.analyze.rules import RULES_FILE

    return run(snapshot, measurements, rules_path=RULES_FILE if rules_path is None else rules_path)


__all__ = ["doctor", "DoctorResult", "bench", "BenchResult", "tune", "load_tuning", "guard", "apply_fade_patches",
           "device_truth", "collect_snapshot", "diagnose", "enable_process_guard"]
