"""One tuner: `run_tune` (a zoo model or module:function, trials in isolated workers) and `tune` (a model object in
this process) both hand a measurement to `drive`, which profiles the baseline step, plans the search from that
diagnosis (fade.analyze.tuneplan), runs search.search, judges the host load and builds the tuning file; both
return a TuneResult.

Workers: one IsolatedExecutor per environment. Env knobs (MIOpen find mode, TunableOp, NHWC suggestion)
are read at runtime start-up, so a configuration with other env values gets a fresh worker started with
that env (and the cache's paths: TunableOp CSV, MIOpen user DB, Inductor and Triton caches). In-process
`tune` cannot restart the runtime: it leaves env knobs out and says so in the tuning file; nor can it stop a
trial that overruns its limit (a worker is killed), so there a compile's cost is bounded only by starting it
when its expected cost fits.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Callable, Optional

from fade.analyze import knobs as knob_table
from fade.act.tune.cache import journal_key, open_cache
from fade.act.tune.hostload import HostLoadProbe, is_busy
from fade.act.tune.tuning_file import build_tuning, save_tuning
from fade.act.tune.search import Trial, recommend_nothing, search, takes_timeout
from fade.analyze.tuneplan import Plan, plan_search
from fade.errors import FadeUsageError

# Trial timing: models.FULL_TIMING's shape, shorter: a search measures ~10-20 configurations within minutes
TUNE_TIMING = {
    "warmup_s": 0.2,
    "min_warmup_calls": 2,
    "min_run_s": 0.3,
    "budget_s": 1.0,
    "min_samples": 8,
    "max_samples": 60,
    "target_cov": 0.01,
    "min_block_s": 0.025,
    "max_settle_s": 0.3,
}
QUICK_TIMING = {"warmup_s": 0.0, "min_warmup_calls": 1, "min_run_s": 0.1, "budget_s": 0.4, "min_samples": 3,
                "max_samples": 10, "target_cov": 0.03, "min_block_s": 0.0, "max_settle_s": 0.0}  # fmt: skip
TRIAL_TIMEOUT_S = 300.0  # torch.compile max-autotune of a ResNet training step takes minutes
DEFAULT_BUDGET_MIN = 5.0  # the "<= 5 min per model"
MODES = ("train", "infer", "generate")  # generate: a causal LM's greedy decode (`fade tune CONFIG --generate`)
DIAGNOSIS_TIMEOUT_S = 180.0  # the profiled window builds the model and runs ~8 eager steps; a hang must not eat the budget
DIAGNOSIS_SHARE = 0.2  # ... nor more than this share of it (a 5-minute budget: 60 s; it took 10-20 s on an H200)


@dataclass
class TuneResult:
    """What one tuning run found: `tuning` is the tuning file's content (fade.act.tune.tuning_file.build_tuning;
    `to_dict()` returns it), `path` where it was written (None when not). `exit_status`: 0 when the final check
    proved the chosen configuration faster (fade.errors.ExitCode.OK), 1 when nothing is recommended."""

    tuning: dict
    path: Optional[str] = None

    @property
    def recommends(self) -> bool:
        return bool(self.tuning.get("recommends"))

    @property
    def verdict(self) -> str:
        return self.tuning["verdict"]

    @property
    def changed(self) -> dict:
        """The knobs the tuning sets, as {knob: value}; empty when it recommends nothing."""
        return dict(self.tuning.get("changed") or {})

    @property
    def diagnosis(self) -> Optional[dict]:
        return self.tuning.get("diagnosis")

    @property
    def exit_status(self) -> int:
        return 0 if self.recommends else 1

    def to_dict(self) -> dict:
        return dict(self.tuning)


def check_request(model: str, *, mode: str, batch: int, budget_min: float, latency_ms=None) -> None:
    """FadeUsageError (one line) for anything that cannot run anywhere."""
    from fade.measure.suites.models.suite import check_request as check_models

    if isinstance(budget_min, bool) or not isinstance(budget_min, (int, float)) or not budget_min > 0:
        raise FadeUsageError(f"--budget {budget_min}: the budget in minutes must be > 0")
    if mode not in MODES:
        raise FadeUsageError(f"--mode {mode!r}: use train or infer")
    if latency_ms is not None and (mode != "generate" or isinstance(latency_ms, bool) or
                                   not isinstance(latency_ms, (int, float)) or not latency_ms > 0):
        raise FadeUsageError(f"--latency-ms {latency_ms}: a per-token latency target > 0, with --generate")
    if mode == "generate":  # an LLM config (a bundled shape, a config.json, a .toml or a local model folder)
        from fade.analyze.llm_table import LlmTableError, resolve_config

        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise FadeUsageError(f"--batch {batch}: the batch must be >= 1")
        try:
            resolve_config(model)
        except LlmTableError as error:
            raise FadeUsageError(f"fade tune {model} --generate: {error}") from None
        return
    check_models([model], batch=batch, mode=mode, image_size=None, sequence_length=None, models_flag="fade tune MODEL")


def target_for(model: str, mode: str, fingerprint: dict) -> knob_table.Target:
    from fade.measure.zoo import ZOO

    if mode == "generate":  # a causal LM: attention, no image input
        return knob_table.Target(backend=fingerprint["backend"], torch_version=fingerprint["torch"], mode=mode,
                                 image=False, attention=True)
    entry = ZOO.get(model)
    return knob_table.Target(
        backend=fingerprint["backend"],
        torch_version=fingerprint["torch"],
        mode=mode,
        image=entry is None or entry.kind == "image",  # a user's workload: searched, skipped if it has no 4-D input
        attention=entry is None or entry.kind == "tokens",
    )


@contextlib.contextmanager
def patched_environ(values: dict):
    """Set `values` in os.environ for the block (None removes); restore after."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        _set_environ(values)
        yield
    finally:
        _set_environ(saved)


def _set_environ(values: dict) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def record_failure(record: dict) -> str:
    """One line (at most 300 characters) for a failed worker record: its status and the first line of its error."""
    return f"{record['status']}: {record.get('error') or 'no reason given'}".splitlines()[0][:300]


def error_line(error: BaseException) -> str:
    """One line (at most 300 characters) for an exception raised in this process."""
    return f"{type(error).__name__}: {error}".splitlines()[0][:300]


class WorkerMeasure:
    """measure(config) -> Trial through isolated workers, one per distinct env; close() stops them."""

    trial_module = "fade.act.tune.trial"  # the worker functions: tune_trial, tune_side_by_side, tune_diagnose, ...
    trial_function, side_by_side_function, diagnose_function = "tune_trial", "tune_side_by_side", "tune_diagnose"

    def _params(self) -> dict:
        """What every worker function of this measure is called with, besides the configuration."""
        return {"model": self.model, "mode": self.mode, "batch": self.batch, "size": self.size}

    def __init__(self, knobs: list, *, model: str, mode: str, batch: int, size, device, cache_env: dict,
                 quick: bool = False, timeout_s: float = TRIAL_TIMEOUT_S, run_id: Optional[str] = None):  # fmt: skip
        from fade.measure.runner import new_run_id

        self.knobs, self.model, self.mode, self.batch, self.size = knobs, model, mode, batch, size
        self.device, self.cache_env, self.quick, self.timeout_s = device, cache_env, quick, timeout_s
        self.run_id = run_id or new_run_id()
        self.timing = QUICK_TIMING if quick else TUNE_TIMING
        self._executor = None
        self._env_key = None
        self.side_by_side_failure: Optional[str] = None

    def _executor_for(self, config: dict):
        from fade.measure.runner import IsolatedExecutor

        env = {**self.cache_env, **knob_table.config_env(self.knobs, config)}
        all_env_names = {name for knob in self.knobs for variables in knob.env.values() for name in variables}
        wanted = {name: env.get(name) for name in all_env_names | set(self.cache_env)}
        key = tuple(sorted((name, value or "") for name, value in wanted.items()))
        if key != self._env_key:
            self.close()
            with patched_environ(wanted):
                self._executor = IsolatedExecutor(self.device, timeout_s=self.timeout_s)
                self._executor.start()
            self._env_key = key
        return self._executor

    def _run(self, function: str, params: dict, config: dict, *, timeout_s: Optional[float] = None) -> dict:
        from fade.measure.case import Case, CaseContext

        executor = self._executor_for(config)
        case = Case(f"tune/{self.model}/{self.mode}/b{self.batch}/{function}", "tune", self.trial_module, function, params)
        ctx = CaseContext(device=executor.session["device"], run_id=self.run_id, quick=self.quick, timing=dict(self.timing))
        executor.timeout_s = min(self.timeout_s, timeout_s) if timeout_s else self.timeout_s
        return executor.run(case, ctx)

    def pairable(self, first: dict, second: dict) -> bool:
        """Whether side_by_side can time these two configurations in one worker: they need the same env."""
        return knob_table.config_env(self.knobs, first) == knob_table.config_env(self.knobs, second)

    def side_by_side(self, configs: dict, *, rounds: int, timeout_s: Optional[float] = None) -> Optional[dict]:
        """{name: Trial} for configurations (name -> config) timed in turns in one worker (trial.side_by_side),
        or None when they need different env (separate processes) or the shared run failed: the caller then
        measures them one by one."""
        envs = {tuple(sorted(knob_table.config_env(self.knobs, config).items())) for config in configs.values()}
        if len(envs) != 1:
            return None
        first = next(iter(configs.values()))
        params = {**self._params(), "configs": {name: dict(config) for name, config in configs.items()},
                  "rounds": rounds}  # fmt: skip
        record = self._run(self.side_by_side_function, params, first,
                           timeout_s=timeout_s or self.timeout_s * len(configs))
        if record["status"] != "ok":
            self.side_by_side_failure = record_failure(record)
            return None
        extra = record["extra"]
        per_step = extra.get("samples_per_step", self.batch)
        return {name: Trial(dict(configs[name]), tuple(side["samples_s"]), "ok", None, side["numerics"],
                            side.get("samples_per_step", per_step),
                            extra={"round_medians_s": list(side["round_medians_s"])})
                for name, side in extra["sides"].items()}  # fmt: skip

    def diagnose(self, timeout_s: float = DIAGNOSIS_TIMEOUT_S) -> dict:
        """What `fade profile` says of the baseline step (trial.diagnose_step), with "status": "ok"; or
        {"status": "failed", "reason"}: the search then runs in its default order."""
        try:
            record = self._run(self.diagnose_function, self._diagnose_params(), knob_table.baseline_config(self.knobs),
                               timeout_s=timeout_s)  # fmt: skip
        finally:
            # the trials get a fresh worker: a launch-bound step timed after a torch.profiler session in the same
            # process ran 34.3 ms against 25.4 ms in a fresh one on the H100 (fade.measure.profile.profile_steps)
            self.close()
        if record["status"] != "ok":
            return {"status": "failed", "reason": record_failure(record)}
        return {"status": "ok", **record["extra"]["diagnosis"]}

    def _diagnose_params(self) -> dict:
        return {"model": self.model, "mode": self.mode, "batch": self.batch, "size": self.size}

    def reference(self) -> dict:
        record = self._run("tune_reference", {"model": self.model, "mode": self.mode, "batch": self.batch, "size": self.size},
                           knob_table.baseline_config(self.knobs))  # fmt: skip
        if record["status"] != "ok":
            raise RuntimeError(f"the fp32 reference failed: {record.get('error')}")
        return record["extra"]["reference"]

    def __call__(self, config: dict, *, timeout_s: Optional[float] = None) -> Trial:
        self._executor_for(config)  # a worker (re)start is not the trial's cost: the reserve doubles the baseline's
        started = time.monotonic()
        params = {**self._params(), "knobs": dict(config)}
        record = self._run(self.trial_function, params, config, timeout_s=timeout_s)
        cost_s = time.monotonic() - started
        if record["status"] != "ok":
            reason = record_failure(record)
            return Trial(dict(config), (), "failed", reason, None, self.batch, cost_s)
        extra = record.get("extra") or {}
        samples = tuple((record.get("timing") or {}).get("samples_s") or ())
        return Trial(dict(config), samples, "ok", None, extra.get("numerics"), extra.get("samples_per_step", self.batch), cost_s,
                     extra={"compile_cache": extra.get("compile_cache") or {}})

    @property
    def running(self) -> bool:
        """Whether a worker process is up (diagnose() closes the one that profiled)."""
        return self._executor is not None

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None
            self._env_key = None


class GenerateMeasure(WorkerMeasure):
    """WorkerMeasure for `fade tune CONFIG --generate`: the decode trial of fade.act.tune.generate_trial (its
    numerics are the generation gate's, so there is no fp32 reference) and the profile of the baseline's decode
    (generate_trial.tune_generate_diagnose)."""

    trial_module = "fade.act.tune.generate_trial"
    trial_function, side_by_side_function = "tune_generate_trial", "tune_generate_side_by_side"
    diagnose_function = "tune_generate_diagnose"

    def __init__(self, knobs: list, *, latency_ms: Optional[float] = None, **options):
        super().__init__(knobs, **options)
        self.latency_ms = latency_ms  # a per-token latency target: the decode_batch search's bound

    def _params(self) -> dict:
        params = {"config": self.model, "batch": self.batch}
        if self.latency_ms is not None:
            params["latency_ms"] = self.latency_ms
        return params

    def _diagnose_params(self) -> dict:
        return {"config": self.model, "batch": self.batch}

    def reference(self) -> dict:
        return {}


def worker_fingerprint(device: Optional[str]) -> dict:
    """device.device_fingerprint read in a short-lived child, so this process never starts a GPU runtime."""
    import json
    import subprocess
    import sys

    code = "import json,sys; from fade.act.tune.device import device_fingerprint; print(json.dumps(device_fingerprint(sys.argv[1])))"
    completed = subprocess.run([sys.executable, "-c", code, device or "cuda"], capture_output=True, text=True, timeout=120)
    if completed.returncode != 0:
        raise RuntimeError(f"could not read the device fingerprint: {completed.stderr.strip().splitlines()[-1:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def run_tune(
    model: str,
    *,
    mode: str = "train",
    batch: int = 64,
    budget_min: float = DEFAULT_BUDGET_MIN,
    device: Optional[str] = None,
    size: Optional[int] = None,
    exhaustive: bool = False,
    quick: bool = False,
    resume: bool = True,
    cache_base=None,
    fingerprint: Optional[dict] = None,
    measure: Optional[Callable[[dict], Trial]] = None,
    reference: Optional[dict] = None,
    diagnosis: Optional[dict] = None,
    clock: Callable[[], float] = time.monotonic,
    progress: Optional[Callable[[str], None]] = None,
    output=None,
    host_probe=None,
    latency_ms: Optional[float] = None,
) -> TuneResult:
    """Tune `model` (a zoo name or module:function) in isolated workers on `device`.

    `measure`, `reference`, `diagnosis`, `fingerprint`, `clock` and `host_probe` (start()/stop() -> host load,
    default hostload.HostLoadProbe) are injectable (tests use a fake timer; a measure without `diagnose()` and no
    `diagnosis` searches in the default order). The search journal lives in the device's cache, so an interrupted
    run resumes where it stopped (`resume=False` starts over). With `output` the tuning file is written there
    atomically before the journal is cleared: a file that cannot be written (OSError) leaves the journal, and the
    next run resumes instead of searching again.
    """
    check_request(model, mode=mode, batch=batch, budget_min=budget_min, latency_ms=latency_ms)
    started = clock()  # the budget covers the set-up below too: "<= budget" is the whole run
    host_probe = host_probe or HostLoadProbe()
    host_probe.start()
    fingerprint = fingerprint or worker_fingerprint(device)
    cache = open_cache(fingerprint, base=cache_base)
    for message in cache.messages:
        (progress or (lambda text: None))(message)
    try:
        searched, left_out = knob_table.searched_knobs(knob_table.load_knobs(), target_for(model, mode, fingerprint))
        if latency_ms is None and any(knob.id == "decode_batch" for knob in searched):
            searched = [knob for knob in searched if knob.id != "decode_batch"]
            left_out["decode_batch"] = "only with a per-token latency target (--latency-ms); the batch is --batch"
        journal = cache.journal(journal_key(model, mode, batch, size, exhaustive) +
                                ("" if latency_ms is None else f"-latency{latency_ms:g}"))
        if not resume:
            journal.clear()
        worker = None
        if measure is None:
            options = dict(model=model, mode=mode, batch=batch, size=size, device=device, cache_env=cache.env(),
                           quick=quick)
            worker = GenerateMeasure(searched, latency_ms=latency_ms, **options) if mode == "generate" else \
                WorkerMeasure(searched, **options)
            measure = worker
        try:
            tuning = drive(measure, searched, left_out, label=model, mode=mode, batch=batch, size=size,
                           fingerprint=fingerprint, budget_min=budget_min, exhaustive=exhaustive, journal=journal,
                           reference=reference, diagnosis=diagnosis, clock=clock, progress=progress,
                           host_probe=host_probe, started=started, cache_dir=str(cache.root),
                           cache_messages=cache.messages)  # fmt: skip
        finally:
            if worker is not None:
                worker.close()
        if output is not None:
            save_tuning(tuning, output)  # atomic; an OSError here leaves the journal for a resume
        journal.clear()  # finished and kept: the next run of the same request measures afresh
        return TuneResult(tuning, str(output) if output is not None else None)
    finally:
        cache.remove_if_temporary()  # a fallback /tmp/fade-tune-* directory: nothing in it persists anyway


def drive(measure, searched: list, left_out: dict, *, label: str, mode: str, batch: int, size: Optional[int],
          fingerprint: dict, budget_min: float, exhaustive: bool = False, journal=None, reference: Optional[dict] = None,
          diagnosis: Optional[dict] = None, clock: Callable[[], float] = time.monotonic,
          progress: Optional[Callable[[str], None]] = None, host_probe=None, started: Optional[float] = None,
          cache_dir: Optional[str] = None, cache_messages: Optional[list] = None) -> dict:  # fmt: skip
    """The one tuning pipeline over a measurement (WorkerMeasure, InProcessMeasure or a test's fake): the fp32
    reference (training), the diagnosis of the baseline step (`measure.diagnose()` unless `diagnosis` is given),
    the plan, the search, the host-load judgement, the tuning file's content. Everything from `started` on counts
    against the budget."""
    say = progress or (lambda message: None)
    started = clock() if started is None else started
    if reference is None and mode == "train" and hasattr(measure, "reference"):
        say("measuring the fp32 reference losses (TF32 off)")
        reference = measure.reference()
    if diagnosis is None and fingerprint.get("backend") == "cpu":
        diagnosis = {"status": "skipped", "reason": "on the CPU a profile has no device timeline to order the search "
                                                    "by, so none is taken (it would only cost budget)"}  # fmt: skip
    if diagnosis is None and hasattr(measure, "diagnose") and not exhaustive:
        say("profiling the baseline step (PyTorch's defaults) to decide what to try first")
        diagnosis = measure.diagnose(timeout_s=diagnosis_limit_s(budget_min)) if takes_timeout(measure.diagnose) else measure.diagnose()
    searched, left_out = drop_unused(searched, left_out, diagnosis)
    plan = plan_for(searched, diagnosis, mode)
    for line in plan_lines(plan):
        say(line)
    result = search(searched, measure, reference=reference, budget_s=60.0 * budget_min, exhaustive=exhaustive,
                    journal=journal, left_out=left_out, clock=clock, progress=progress, spent_s=clock() - started,
                    plan=plan)  # fmt: skip
    result, host_load = judge_host(result, host_probe, fingerprint) if host_probe is not None else (result, None)
    return build_tuning(result, searched, fingerprint=fingerprint, model=label, mode=mode, batch=batch, size=size,
                        budget_s=60.0 * budget_min, exhaustive=exhaustive, cache_dir=cache_dir,
                        cache_messages=cache_messages, host_load=host_load, diagnosis=diagnosis)  # fmt: skip


def drop_unused(searched: list, left_out: dict, diagnosis: Optional[dict]) -> tuple:
    """(searched, left_out) without the knobs the profiled baseline step shows to change nothing: the SDPA backend
    when the step called no scaled_dot_product_attention (diagnosis["calls_sdpa"] False; a user's workload is
    searched for it otherwise, since nothing else tells whether it calls SDPA). EfficientNet-B0 on an H200 spent
    four trials on SDPA backends it never called (results/tune-h200-s11/)."""
    if not diagnosis or diagnosis.get("status") != "ok":
        return searched, left_out
    if diagnosis.get("attention") and diagnosis.get("calls_sdpa") is not False:
        return narrow_by_probe(searched, left_out, list(diagnosis["attention"]))
    if diagnosis.get("calls_sdpa") is not False:
        return searched, left_out
    unused = [knob for knob in searched if knob.attention_only]
    if not unused:
        return searched, left_out
    left_out = dict(left_out)
    for knob in unused:
        left_out[knob.id] = "the profiled baseline step called no scaled_dot_product_attention"
    return [knob for knob in searched if not knob.attention_only], left_out


def narrow_by_probe(searched: list, left_out: dict, probes: list) -> tuple:
    """(searched, left_out) with the SDPA backend knob's values cut to those that could speed up the step's real
    attention in one of the attention probes (`probes`: fade.measure.attention.probe_attention dicts, a decode's
    over a static and a dynamic cache: generate_trial.decode_attention_probes): a value that did not run, ran
    the backend torch already picks, or ran slower than it, in every probe, is left out with the first probe's
    reason (analyze.attention.forced_prospect); with none left the knob is. The rest are ordered by the first
    probe's time, fastest first. Each value costs a whole compiled trial: on an H200 the 8B decode's forced
    flash and efficient attention failed only after one (results/s21-h200/C), and its four values, cudnn (the
    default's own kernel) and math (5x slower) among them, were expected at a trial each (results/s22-h200/A)."""
    from dataclasses import replace

    from fade.analyze.attention import forced_prospect

    knob = next((knob for knob in searched if knob.id == "sdpa_backend"), None)
    tables = [probe.get("backends") for probe in probes if probe.get("backends")]
    if knob is None or not tables:
        return searched, left_out
    left_out = dict(left_out)
    kept = []
    labels = " or ".join(str(probe.get("label")) for probe in probes if probe.get("backends"))
    for value in knob.alternatives:
        reasons = [forced_prospect(rows, value) for rows in tables]
        if any(reason is None for reason in reasons):
            kept.append(value)
            continue
        left_out[f"{knob.id}={value}"] = f"cannot speed up this attention ({labels}): {reasons[0]}"
    if not kept:
        left_out[knob.id] = "no forced backend could speed up this attention (the sdpa_backend=... lines)"
        return [item for item in searched if item is not knob], left_out
    first = {row.get("requested"): row for row in tables[0]}
    kept.sort(key=lambda value: (first.get(value) or {}).get("median_ms") or float("inf"))  # stable: unknown last
    narrowed = replace(knob, values=(knob.baseline, *kept), order=tuple(kept))
    return [narrowed if item is knob else item for item in searched], left_out


def diagnosis_limit_s(budget_min: float) -> float:
    """How long the profiled window may take: DIAGNOSIS_SHARE of the budget, at most DIAGNOSIS_TIMEOUT_S."""
    return max(30.0, min(DIAGNOSIS_TIMEOUT_S, DIAGNOSIS_SHARE * 60.0 * budget_min))


def plan_for(searched: list, diagnosis: Optional[dict], mode: Optional[str] = None) -> Plan:
    """The search plan from a diagnosis (WorkerMeasure.diagnose's dict), or the default order with the reason."""
    if not diagnosis:
        return plan_search(searched, note="no diagnosis: the search runs in the default order", mode=mode)
    if diagnosis.get("status") == "skipped":
        return plan_search(searched, note=f"no diagnosis: {diagnosis.get('reason')}; the default order", mode=mode)
    if diagnosis.get("status") != "ok":
        return plan_search(searched, note=f"the baseline step could not be profiled ({diagnosis.get('reason')}); "
                                          "the search runs in the default order", mode=mode)  # fmt: skip
    verdicts = list(diagnosis.get("verdicts") or [])
    if not diagnosis.get("device_timeline"):
        verdicts = [verdict for verdict in verdicts if verdict.get("rule") != "cpu_only"]
        note = ("CPU-only profile: no device timeline, so no verdict on kernels or launches; the knobs that need no "
                "compile go first, the compile modes last")  # fmt: skip
    else:
        facts = []
        if diagnosis.get("step_ms"):
            facts.append(f"step {diagnosis['step_ms']:.3g} ms")
        if diagnosis.get("busy_share") is not None:
            facts.append(f"device busy {100 * diagnosis['busy_share']:.0f}%")
        if diagnosis.get("gemm_conv_share") is not None:
            facts.append(f"GEMM/conv {100 * diagnosis['gemm_conv_share']:.0f}% of device time")
        if diagnosis.get("mfu_gemm_conv") is not None:
            facts.append(f"at {100 * diagnosis['mfu_gemm_conv']:.0f}% of {diagnosis.get('peak_dtype') or 'the'} peak")
        note = "the baseline step, profiled: " + (", ".join(facts) or "no figures")
    return plan_search(searched, verdicts, note=note, mode=mode)


def plan_lines(plan: Plan) -> list:
    """The diagnosis and the order it gives, as progress lines (report.tune renders the same from the file)."""
    lines = [f"diagnosis: {plan.note}"]
    for verdict in plan.diagnosis:
        lines.append(f"diagnosis: {verdict.get('title')}")
    for entry in plan.unanswered:
        lines.append(f"diagnosis: no knob fixes {entry['rule']}: {entry['fix']}")
    lines.append("order: " + ", ".join(f"{visit.knob} ({'/'.join(visit.values)})" for visit in plan.visits))
    return lines


def judge_host(result, host_probe, fingerprint: dict) -> tuple:
    """(result, host load): the probe stopped; the result recommends nothing when hostload.is_busy says so."""
    host_load = host_probe.stop()
    busy = is_busy(host_load, "cpu" if fingerprint.get("backend") == "cpu" else "gpu")
    if busy:
        result = recommend_nothing(result, "noisy-host", f"the host was noisy: {busy}; nothing is recommended, run again on a quiet host")
    return result, host_load


class InProcessMeasure:
    """measure(config) -> Trial in this process, on fresh deep copies of the user's model (tune()): no worker, so a
    trial cannot be stopped when it overruns (`timeout_s` is accepted and not enforced) and env knobs are left out."""

    def __init__(self, make_workload, mode: str, device: str, samples: int, label: str):
        self.make_workload, self.mode, self.device, self.samples, self.label = make_workload, mode, device, samples, label

    def __call__(self, config: dict, *, timeout_s: Optional[float] = None) -> Trial:
        from fade.act.tune.trial import measure_trial

        started = time.monotonic()
        try:
            result = measure_trial(self.make_workload, self.mode, config, self.device, TUNE_TIMING)
        except Exception as error:  # noqa: BLE001 - in-process: a failing candidate is rejected, not fatal
            reason = error_line(error)
            return Trial(dict(config), (), "failed", reason, None, self.samples, time.monotonic() - started)
        return Trial(dict(config), tuple(result.timing.samples_s), "ok", None, result.extra["numerics"], self.samples,
                     time.monotonic() - started)  # fmt: skip

    def reference(self) -> dict:
        from fade.act.tune.trial import measure_reference

        return measure_reference(self.make_workload, self.mode, self.device)

    def diagnose(self) -> dict:
        from fade.act.tune.trial import diagnose_step

        try:
            found = diagnose_step(self.make_workload, self.label, self.mode, self.samples, None, self.device)
        except Exception as error:  # noqa: BLE001 - the diagnosis only orders the search: its failure is not fatal
            return {"status": "failed", "reason": error_line(error)}
        return {"status": "ok", **found}


def tune(model, example_inputs, loss_fn=None, *, target=None, mode: Optional[str] = None,
         budget_min: float = DEFAULT_BUDGET_MIN, device: Optional[str] = None,
         progress: Optional[Callable[[str], None]] = None, clock: Callable[[], float] = time.monotonic,
         output=None) -> TuneResult:  # fmt: skip
    """Tune `model` on `example_inputs` in this process.

    `loss_fn` (or None: inference) is `loss_fn(output) -> loss`, or `loss_fn(output, target) -> loss` such as
    nn.CrossEntropyLoss(): the target is `target`, or derived (derive_target) when not given. Trials run here,
    not in workers: env knobs (MIOpen find mode, TunableOp, NHWC suggestion) are left out because the
    runtime already read its env; `fade tune module:function` searches them. Each trial starts from a deep
    copy of `model` with SGD (lr 0.01, momentum 0.9) when training. With `output` the tuning file is written there.
    """
    import copy

    import torch

    from fade.act.tune.device import device_fingerprint
    from fade.measure.zoo.workload import Workload

    started = clock()
    mode = mode or ("train" if loss_fn is not None else "infer")
    if mode not in ("train", "infer"):
        raise FadeUsageError(f"tune(module, mode={mode!r}): a module is tuned for train or infer; generation "
                             "takes an LLM config (fade tune CONFIG --generate)")
    if mode == "train" and loss_fn is None:
        raise FadeUsageError("tune(mode='train') needs loss_fn(output) -> loss")
    if isinstance(budget_min, bool) or not isinstance(budget_min, (int, float)) or not budget_min > 0:
        raise FadeUsageError(f"budget_min {budget_min}: must be > 0")
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    parameter = next(model.parameters(), None)
    device = device or (str(parameter.device) if parameter is not None else "cpu")
    samples = next((value.shape[0] for value in inputs if torch.is_tensor(value) and value.dim() > 0), 1)
    image = any(torch.is_tensor(value) and value.dim() == 4 for value in inputs)

    loss_fn = loss_fn or (lambda output: output.float().mean())
    target, target_note = loss_target(model, inputs, loss_fn, target) if mode == "train" else (None, "inference: no loss")

    def make_workload():
        return Workload(copy.deepcopy(model), tuple(value for value in inputs), target, loss_fn, samples)

    fingerprint = device_fingerprint(device)
    knob_target = knob_table.Target(fingerprint["backend"], fingerprint["torch"], mode, image=image, attention=True)
    searched, left_out = knob_table.searched_knobs(knob_table.load_knobs(), knob_target)
    for knob in [knob for knob in searched if knob.kind == "env"]:
        left_out[knob.id] = "an env knob: needs a fresh process (fade tune module:function searches it)"
    searched = [knob for knob in searched if knob.kind != "env"]
    host_probe = HostLoadProbe()
    host_probe.start()
    label = type(model).__name__
    tuning = drive(InProcessMeasure(make_workload, mode, device, samples, label), searched, left_out, label=label,
                   mode=mode, batch=samples, size=None, fingerprint=fingerprint, budget_min=budget_min, clock=clock,
                   progress=progress, host_probe=host_probe, started=started)  # fmt: skip
    tuning["loss_target"] = target_note
    if output is not None:
        save_tuning(tuning, output)
    return TuneResult(tuning, str(output) if output is not None else None)


CLASS_INDEX_LOSSES = ("CrossEntropyLoss", "NLLLoss", "MultiMarginLoss")  # target: class indices, not the output's shape
PROBABILITY_LOSSES = ("BCELoss", "BCEWithLogitsLoss")  # target: values in [0, 1]


def takes_target(loss_fn) -> bool:
    """Whether `loss_fn` is called as loss_fn(output, target): a torch.nn loss module, or a callable with two
    or more required positional parameters."""
    import inspect

    import torch

    if isinstance(loss_fn, torch.nn.modules.loss._Loss):
        return True
    try:
        parameters = inspect.signature(loss_fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for item in parameters if item.kind in positional and item.default is inspect.Parameter.empty) >= 2


def derive_target(loss_fn, output):
    """A seeded target for `loss_fn` from one fp32 output: class indices for CLASS_INDEX_LOSSES (classes on
    dim 1), uniform [0, 1) for PROBABILITY_LOSSES, standard normal of the output's shape otherwise. Throughput
    does not depend on the values; the numerics check compares candidates on the same target."""
    import torch

    generator = torch.Generator().manual_seed(0)
    name = type(loss_fn).__name__
    if name in CLASS_INDEX_LOSSES:
        shape = output.shape[:1] + output.shape[2:]
        return torch.randint(0, output.shape[1], tuple(shape), generator=generator).to(output.device), f"random class indices ({name})"
    if name in PROBABILITY_LOSSES:
        return torch.rand(output.shape, generator=generator).to(output.device), f"uniform [0, 1) of the output's shape ({name})"
    return torch.randn(output.shape, generator=generator).to(output.device), "standard normal of the output's shape"


def loss_target(model, inputs: tuple, loss_fn, target) -> tuple:
    """(target or None, what the profile says about it); FadeUsageError (one line) when the loss cannot be
    computed on one forward pass of `model`."""
    import copy

    import torch

    if not takes_target(loss_fn):
        if target is not None:
            raise FadeUsageError("tune(target=...): loss_fn takes only the output; give loss_fn(output, target)")
        note = "loss_fn(output)"
    else:
        note = "given"
    with torch.no_grad():
        output = copy.deepcopy(model)(*inputs)
    if note == "given" and target is None:
        if not torch.is_tensor(output):
            raise FadeUsageError(f"tune: loss_fn takes (output, target) and the model returns {type(output).__name__}, not a tensor: pass target=")
        target, derived = derive_target(loss_fn, output.float())
        note = f"derived: {derived}"
    try:
        loss = loss_fn(output) if note == "loss_fn(output)" else loss_fn(output, target)
        if not torch.is_tensor(loss) or loss.numel() != 1:
            raise ValueError(f"it returned {type(loss).__name__}, not a one-element tensor")
    except Exception as error:  # noqa: BLE001 - the user's loss: one line naming what to fix, no traceback
        call = "loss_fn(output)" if note == "loss_fn(output)" else "loss_fn(output, target)"
        raise FadeUsageError(f"tune: {call} failed on one forward pass: {type(error).__name__}: {error}".splitlines()[0][:300]) from None
    return target, note
