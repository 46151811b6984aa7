"""`fade tune` validated on one device (issue 14's must-show): each case tuned within its budget, then FADE's
choice, PyTorch's defaults, true fp32 and the hand configurations re-measured side by side in one worker.

    python benchmarks/tune_matrix.py OUT_DIR                                   # the 12 cases of results/tune-h100/
    python benchmarks/tune_matrix.py OUT_DIR --cases mobilenet_v2/infer --budget 3   # one case, a short budget
    python benchmarks/tune_matrix.py OUT_DIR --table                           # OUT_DIR/tune-table.md from every case
    python benchmarks/tune_matrix.py OUT_DIR --smoke                           # the CPU path: resnet18 infer, 32 px, batch 2

Cases: CASES, five CNNs and gpt2-small, train and infer, batch 64 (results/tune-h100/). `--cases` takes a
comma-separated subset (model/mode), `--budget` the search minutes per case (default 5, the bar); the device
machine allows 10 minutes a command, so run a few cases per command and `--table` at the end.
Per case: `run_tune` (search and its own final check; the profile goes to OUT_DIR/<model>-<mode>.profile.json),
then one side-by-side trial (trial.side_by_side): every side built and compiled once, then COMPARE_ROUNDS
rounds, each side once per round with the first side rotating, samples pooled. Sides (sides_for): `default`
(PyTorch's defaults), `fp32` (TF32 off), the hand configurations HAND_SIDES (tf32; AMP bf16 + channels_last
eager; `ro`: reduce-overhead on the defaults, the tuner's choice for mobilenet_v2 infer before issue 14; bf16
+ channels_last + reduce-overhead; fp16 + channels_last + reduce-overhead; channels_last only on CNNs) and
`fade` (the profile's knobs). Each side's numerics are judged as the tuner judges (step.numerics): a hand side
that fails them does not count as the best hand configuration. Writes OUT_DIR/<model>-<mode>.json.
Bars (table): fade >= FADE_VS_HAND_BAR x the best sound hand side; mobilenet_v2 infer fade >=
MOBILENET_INFER_BAR x `ro`; the tune's wall time (set-up, search, final check) <= its budget.
`--smoke` runs the CPU path (resnet18 infer, 32 px, batch 2, 1 min, quick timing, compiled sides left out:
Inductor on a small CPU takes minutes per side).

`--hand` (issue 26): an independent check, none of FADE's measurement code on the hand side.

    python benchmarks/tune_matrix.py OUT_DIR --hand --cases resnet50/train --gpu 0 --deadline-s 560
    python benchmarks/tune_matrix.py OUT_DIR --hand --table                  # OUT_DIR/hand-table.md
    bash benchmarks/tune_table.sh OUT_DIR resnet50/train mobilenet_v2/infer  # one case per GPU, then the table

Cases: HAND_CASES (resnet50/train b64, mobilenet_v2/infer b64, gpt2-small/train b64, and from
benchmarks/outside_zoo.py convnext_tiny/train b32, vit_b_16/infer b64, llama_lm/train b8,
efficientnet_b0/train b64, bert_base/train b32, swin_t/train b32), or any zoo-model/mode or module:function/mode.
Per case, each step a child process with a timeout (run_child; its whole process group is killed at the
timeout), CUDA_VISIBLE_DEVICES=--gpu for every child:
(a) `python -m fade tune CASE --mode M --batch B --fresh -o OUT_DIR/<stem>.tuning.json` with fade tune's
    default budget (--budget overrides), its wall clock from start to exit (OUT_DIR/<stem>.tune-run.json);
(b) the six HAND_CONFIGS ({fp32 = PyTorch's defaults, amp-bf16, amp-fp16} x {eager, compile
    reduce-overhead}, channels_last on convolutional networks), each `benchmarks/hand_config.py` in its own
    process (HAND_TIMEOUT_S), results in OUT_DIR/<stem>/<name>.json;
(c) FADE's choice in the same hand loop: hand_config.py with the tuning file's knobs (fade_flags: precision,
    channels_last, compile mode, cudnn.benchmark, optimizer foreach/fused, SDPA backend; each one line of
    user code) and the tuning file's env in its environment (env knobs, and the cache paths fade tune
    compiled into: that changes compile time, not the step). Not expressed, listed in `not_expressed`:
    miopen_immediate (ROCm). When the choice is exactly one of the six and has no env, that measurement is
    the choice's (`same_as`).
Judged (judge_hand): FADE's choice >= HAND_LOOP_BAR x the fastest hand configuration that ran (a crashed,
timed-out, failed or diverged side does not count); the tune's wall time <= its budget + TUNE_WALL_SLACK_S.
What `fade tune` reported (verdict, knobs, its own final-check figures) is kept beside. Writes
OUT_DIR/<stem>.hand.json per case and OUT_DIR/hand-table.md. Resumes: a tune with its run record and tuning
file, and a side whose result says ok (a diverged one too: it would diverge again), are kept; a crashed or
timed-out side runs again; --deadline-s starts no child that could not finish in time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import NamedTuple, Optional

COMPARE_ROUNDS = 3
MODELS = ("alexnet", "resnet18", "resnet50", "vgg16", "mobilenet_v2", "gpt2-small")
CASES = tuple(f"{model}/{mode}" for model in MODELS for mode in ("train", "infer"))
HAND_SIDES = ("tf32", "bf16+cl", "ro", "bf16+cl+ro", "fp16+cl+ro")
FADE_VS_HAND_BAR = 0.97  # FADE's choice >= 0.97 x the best hand configuration
MOBILENET_INFER_BAR = 1.3  # over fp32 + reduce-overhead, the choice before issue 14
BUDGET_SLACK_S = 5.0  # process start and the profile write, outside run_tune's clock


def sides_for(default: dict, image: bool, *, compiled: bool = True) -> dict:
    """name -> knobs of every compared side but `fade` (module docstring)."""
    layout = {"channels_last": "on"} if image else {}
    ro = {"compile": "reduce-overhead"}
    sides = {
        "default": dict(default),
        "fp32": {**default, "precision": "fp32"},
        "tf32": {**default, "precision": "tf32"},
        "bf16+cl": {**default, "precision": "amp-bf16", **layout},
        "ro": {**default, **ro},
        "bf16+cl+ro": {**default, "precision": "amp-bf16", **layout, **ro},
        "fp16+cl+ro": {**default, "precision": "amp-fp16", **layout, **ro},
    }
    if not compiled:
        sides = {name: config for name, config in sides.items() if config.get("compile", "off") == "off"}
    return sides


def parse_cases(text: str) -> list:
    cases = [case.strip() for case in text.split(",") if case.strip()]
    unknown = [case for case in cases if case not in CASES]
    if unknown:
        raise SystemExit(f"tune_matrix: unknown case {unknown[0]!r}: use model/mode from {', '.join(CASES)}")
    return cases


def tune_case(out_dir: Path, model: str, mode: str, *, batch: int, budget_min: float, device: str = "cuda", size=None,
              quick: bool = False, compiled: bool = True, tune=None, measure_factory=None) -> dict:  # fmt: skip
    """Tune one case and compare its sides; writes and returns OUT_DIR/<model>-<mode>.json's content.
    `tune` (run_tune's signature) and `measure_factory` (WorkerMeasure's) are injectable for tests."""
    from fade.act.tune import run_tune
    from fade.act.tune.cache import open_cache
    from fade.analyze.knobs import baseline_config, load_knobs, searched_knobs
    from fade.act.tune.numerics import check
    from fade.act.tune.tuner import WorkerMeasure, target_for, worker_fingerprint
    from fade.files import atomic_write_text
    from fade.measure.timing import quantile
    from fade.measure.zoo import ZOO

    tune = tune or run_tune
    started = time.monotonic()
    profile_path = out_dir / f"{model}-{mode}.profile.json"
    profile = tune(model, mode=mode, batch=batch, budget_min=budget_min, device=device, size=size, resume=False, quick=quick,
                   output=profile_path, progress=lambda m: print(f"[{model} {mode} {time.monotonic() - started:5.0f}s] {m}",
                                                                 file=sys.stderr, flush=True))  # fmt: skip
    profile = profile.to_dict() if hasattr(profile, "to_dict") else profile  # run_tune returns a TuneResult
    tune_s = time.monotonic() - started

    fingerprint = profile["device"]
    searched, _ = searched_knobs(load_knobs(), target_for(model, mode, fingerprint))
    sides = {**sides_for(baseline_config(searched), ZOO[model].kind == "image", compiled=compiled), "fade": dict(profile["knobs"])}
    factory = measure_factory or WorkerMeasure
    measure = factory(searched, model=model, mode=mode, batch=batch, size=size, device=device,
                      cache_env=open_cache(fingerprint).env(), quick=quick)  # fmt: skip
    compare_started = time.monotonic()
    try:
        reference = measure.reference() if mode == "train" else None
        trials = measure.side_by_side(sides, rounds=COMPARE_ROUNDS)
        how = "side by side in one worker"
        if trials is None:
            how = f"separate trials ({measure.side_by_side_failure})"
            trials = {name: measure(config) for name, config in sides.items()}
    finally:
        measure.close()
    figures, failures = {}, {}
    for name, trial in trials.items():
        values = trial.samples_s
        if trial.status != "ok" or not values:
            failures[name] = trial.reason
            continue
        median = quantile(values, 0.5)
        figures[name] = {"samples_per_s": trial.samples_per_step / median,
                         "relative_iqr": (quantile(values, 0.75) - quantile(values, 0.25)) / median, "n": len(values),
                         "numerics": check(trial.numerics, reference),  # None: sound
                         "round_samples_per_s": [trial.samples_per_step / m for m in trial.extra.get("round_medians_s", [])]}  # fmt: skip
    result = {"model": model, "mode": mode, "batch": batch, "device": fingerprint, "budget_s": 60.0 * budget_min,
              "tune_s": tune_s, "compare_s": time.monotonic() - compare_started, "compared": how, "sides": sides,
              "figures": figures, "failures": failures, "profile_verdict": profile["verdict"],
              "verdict_reason": profile.get("verdict_reason"), "changed": profile["changed"],
              "host_load": profile.get("host_load"), "candidates": profile.get("candidates")}  # fmt: skip
    atomic_write_text(out_dir / f"{model}-{mode}.json", json.dumps(result, indent=2, default=str) + "\n")
    return result


def judge(result: dict) -> dict:
    """The bars of one case: {"best_hand", "fade_vs_hand", "bars": [text], "ok": bool}."""
    rate = {name: figures["samples_per_s"] for name, figures in result["figures"].items()}
    sound = [name for name in HAND_SIDES if name in rate and not result["figures"][name]["numerics"]]
    bars, ok = [], True
    if "fade" not in rate or not sound:
        return {"best_hand": None, "fade_vs_hand": None, "bars": [f"failed: {result['failures']}"], "ok": False}
    best_hand = max(sound, key=rate.get)
    versus_hand = rate["fade"] / rate[best_hand]
    passed = versus_hand >= FADE_VS_HAND_BAR
    ok &= passed
    bars.append(f"{versus_hand:.2f}x best hand ({best_hand}) " + ("ok" if passed else f"below {FADE_VS_HAND_BAR}"))
    if result["model"] == "mobilenet_v2" and result["mode"] == "infer" and "ro" in rate:
        over = rate["fade"] / rate["ro"]
        passed = over >= MOBILENET_INFER_BAR
        ok &= passed
        bars.append(f"{over:.2f}x fp32+RO " + ("ok" if passed else f"below {MOBILENET_INFER_BAR}x"))
    passed = result["tune_s"] <= result["budget_s"] + BUDGET_SLACK_S
    ok &= passed
    bars.append(f"tune {result['tune_s']:.0f}/{result['budget_s']:.0f} s " + ("ok" if passed else "OVER BUDGET"))
    return {"best_hand": best_hand, "fade_vs_hand": versus_hand, "bars": bars, "ok": ok}


def table(out_dir: Path) -> str:
    names = ("default", "fp32") + HAND_SIDES + ("fade",)
    rows = ["| case | " + " | ".join(names) + " | FADE chose | verdict | bars |",
            "| --- | " + " | ".join("---:" for _ in names) + " | --- | --- | --- |"]  # fmt: skip
    for path in sorted(out_dir.glob("*-*.json")):
        if len(path.suffixes) > 1:  # .profile.json, and --hand's .tuning/.tune-run/.hand.json
            continue
        result = json.loads(path.read_text())
        figures = result["figures"]

        def cell(name):
            if name not in figures:
                return "fail" if name in result["failures"] else "-"
            return f"{figures[name]['samples_per_s']:.4g}" + ("*" if figures[name]["numerics"] else "")

        verdict = judge(result)
        chosen = ", ".join(f"{k}={v}" for k, v in result["changed"].items()) or "defaults"
        rows.append(f"| {result['model']}/{result['mode']} | " + " | ".join(cell(name) for name in names) +
                    f" | {chosen} | {result['profile_verdict']} | {'; '.join(verdict['bars'])} |")  # fmt: skip
    rows.append("")
    rows.append(f"samples/s (batch as run): pooled medians of {COMPARE_ROUNDS} rotating rounds per side, all sides in one worker; "
                "* = fails the tuner's numerics check (not counted as a hand configuration). RO = torch.compile "
                "mode reduce-overhead, cl = channels_last.")  # fmt: skip
    text = "\n".join(rows) + "\n"
    from fade.files import atomic_write_text

    atomic_write_text(out_dir / "tune-table.md", text)
    return text


# --- issue 26 (--hand): FADE's choice against the best of six hand configurations, each in its own process ---

ROOT = Path(__file__).resolve().parents[1]
HAND_SCRIPT = ROOT / "benchmarks" / "hand_config.py"
HAND_LOOP_BAR = 0.95  # issue 26: FADE's choice >= 0.95x the best hand configuration, both in the plain loop
TUNE_WALL_SLACK_S = 60.0  # issue 26: `fade tune`'s wall time (process start to exit) <= its budget + 60 s
TUNE_TIMEOUT_EXTRA_S = 120.0  # the tune child is stopped at budget + slack + this: past the bar, it only has to finish
HAND_TIMEOUT_S = 150.0  # one hand configuration: start, build, compile (reduce-overhead on a 16-core host), timing
MIN_CHILD_S = 30.0  # with less left before --deadline-s, a child is not started (it could not finish)
DEFAULT_HAND_BATCH = 64


class HandCase(NamedTuple):  # a NamedTuple: tests load this file without registering it, which dataclasses need
    name: str  # model/mode as given
    model: str  # a zoo name or module:function
    mode: str
    batch: int
    convolutional: bool  # the hand configurations run channels_last

    @property
    def stem(self) -> str:
        """The case's file names: resnet50-train, convnext_tiny-train."""
        return self.name.replace("/", "-").replace(":", "_")


# issue 26's cases; the last three are outside the zoo (benchmarks/outside_zoo.py)
HAND_CASES = {case.name: case for case in (
    HandCase("resnet50/train", "resnet50", "train", 64, True),
    HandCase("mobilenet_v2/infer", "mobilenet_v2", "infer", 64, True),
    HandCase("gpt2-small/train", "gpt2-small", "train", 64, False),  # tune_matrix's batch for every zoo case
    HandCase("convnext_tiny/train", "benchmarks.outside_zoo:convnext_tiny", "train", 32, True),
    HandCase("vit_b_16/infer", "benchmarks.outside_zoo:vit_b_16", "infer", 64, False),
    HandCase("llama_lm/train", "benchmarks.outside_zoo:llama_lm", "train", 8, False),
    HandCase("efficientnet_b0/train", "benchmarks.outside_zoo:efficientnet_b0", "train", 64, True),
    HandCase("bert_base/train", "benchmarks.outside_zoo:bert_base", "train", 32, False),
    HandCase("swin_t/train", "benchmarks.outside_zoo:swin_t", "train", 32, True),
)}  # fmt: skip
# name -> (precision, compile): {fp32, amp-bf16, amp-fp16} x {eager, reduce-overhead}; fp32 = PyTorch's defaults
HAND_CONFIGS = {
    "fp32": ("fp32", "off"),
    "amp-bf16": ("amp-bf16", "off"),
    "amp-fp16": ("amp-fp16", "off"),
    "fp32+ro": ("fp32", "reduce-overhead"),
    "amp-bf16+ro": ("amp-bf16", "reduce-overhead"),
    "amp-fp16+ro": ("amp-fp16", "reduce-overhead"),
}
# tuning-file precision -> hand_config.py --precision ("default" is PyTorch's defaults, hand_config's fp32)
HAND_PRECISION = {"default": "fp32", "tf32": "tf32", "amp-bf16": "amp-bf16", "amp-fp16": "amp-fp16"}


class ChildRun(NamedTuple):
    exit_code: int  # 124: stopped at its timeout
    wall_s: float
    timed_out: bool = False


def parse_hand_cases(text: str, batch: Optional[int] = None) -> list:
    """HAND_CASES by name, or any zoo-name/mode or module:function/mode (batch: --batch or 64; channels_last
    for zoo image networks). --batch overrides every case's batch."""
    from fade.measure.zoo import ZOO

    cases = []
    for name in (part.strip() for part in text.split(",") if part.strip()):
        if name in HAND_CASES:
            case = HAND_CASES[name]
            cases.append(case if batch is None else HandCase(case.name, case.model, case.mode, batch, case.convolutional))
            continue
        model, _, mode = name.rpartition("/")
        if mode not in ("train", "infer") or not (model in ZOO or ":" in model):
            raise SystemExit(f"tune_matrix --hand: unknown case {name!r}: use {', '.join(HAND_CASES)}, "
                             "or zoo-model/mode or module:function/mode")  # fmt: skip
        convolutional = model in ZOO and ZOO[model].kind == "image"
        cases.append(HandCase(name, model, mode, batch or DEFAULT_HAND_BATCH, convolutional))
    return cases


def hand_flags(precision: str, compile_mode: str, channels_last: bool) -> list:
    return ["--precision", precision, "--compile", compile_mode] + (["--channels-last"] if channels_last else [])


def fade_flags(knobs: dict) -> tuple:
    """(hand_config.py flags, {knob: value} it cannot express) for a tuning file's knobs. Expressed: precision,
    channels_last, compile, cudnn_benchmark, optimizer_impl, sdpa_backend (each a line of user code). Env knobs
    (TunableOp, MIOpen find mode, NHWC suggestion) reach the child as the tuning file's env instead; anything
    else at a non-baseline value (miopen_immediate) is listed, not applied."""
    flags = hand_flags(HAND_PRECISION.get(knobs.get("precision", "default"), "fp32"), knobs.get("compile", "off"),
                       knobs.get("channels_last", "off") == "on")  # fmt: skip
    if knobs.get("cudnn_benchmark", "off") == "on":
        flags.append("--cudnn-benchmark")
    for knob, flag in (("optimizer_impl", "--optimizer-impl"), ("sdpa_backend", "--sdpa-backend")):
        if knobs.get(knob, "default") != "default":
            flags += [flag, knobs[knob]]
    expressed = {"precision", "channels_last", "compile", "cudnn_benchmark", "optimizer_impl", "sdpa_backend"}
    baselines = {"miopen_immediate": "off"}
    unexpressed = {knob: value for knob, value in knobs.items() if knob not in expressed and knob in baselines and value != baselines[knob]}
    return flags, unexpressed


def child_env(gpu: Optional[str], extra: Optional[dict] = None) -> dict:
    """This process's environment, the repository root and src/ first on PYTHONPATH (benchmarks.outside_zoo
    and fade import from the checkout), CUDA_VISIBLE_DEVICES=gpu when given, then `extra` (a tuning file's env)."""
    import os

    env = dict(os.environ)
    paths = [str(ROOT), str(ROOT / "src")] + [path for path in env.get("PYTHONPATH", "").split(os.pathsep) if path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["PYTHONUNBUFFERED"] = "1"
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    env.update({name: str(value) for name, value in (extra or {}).items()})
    return env


def run_child(command: list, *, env: dict, log: Path, timeout_s: float) -> ChildRun:
    """`command` in its own session (its compile workers die with it), output into `log`; the whole group is
    killed at `timeout_s` (exit code 124)."""
    import os
    import signal
    import subprocess

    started = time.monotonic()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8") as output:
        output.write(f"$ {' '.join(command)}   # timeout {timeout_s:.0f} s\n")
        output.flush()
        child = subprocess.Popen(command, env=env, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            return ChildRun(124, time.monotonic() - started, timed_out=True)
    return ChildRun(code, time.monotonic() - started)


def read_hand_record(path: Path) -> Optional[dict]:
    """hand_config.py's JSON, or None when missing, torn or not one (a crashed child)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("kind") != "fade-hand-config" or record.get("status") not in ("ok", "failed"):
        return None
    if record["status"] == "ok" and not (isinstance(record.get("samples_per_s"), (int, float)) and record["samples_per_s"] > 0):
        return None
    return record


def side_from(record: Optional[dict], run: Optional[ChildRun], flags: list, log: Path) -> dict:
    """One side's row: status ok / failed / diverged (non-finite loss) / crashed / timeout, its figures and flags."""
    side = {"flags": flags, "log": log.name, "exit_code": run.exit_code if run else None, "wall_s": run.wall_s if run else None}
    if run is not None and run.timed_out:
        return {**side, "status": "timeout", "reason": f"stopped after {run.wall_s:.0f} s"}
    if record is None:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] if log.exists() else []
        return {**side, "status": "crashed", "reason": f"exit {side['exit_code']}, no result" + (f": {tail[0][:300]}" if tail else "")}
    if record["status"] != "ok":
        return {**side, "status": "failed", "reason": record.get("reason")}
    status = "diverged" if record.get("loss_finite") is False else "ok"
    keys = ("samples_per_s", "median_ms", "relative_iqr", "n", "timed_steps", "compile_s", "warmup", "load_average", "device_name")
    return {**side, "status": status, **{key: record.get(key) for key in keys}}


def run_hand_case(out_dir: Path, case: HandCase, *, gpu=None, budget_min: Optional[float] = None, size=None, device=None,
                  deadline: Optional[float] = None, runner=run_child, clock=time.monotonic) -> dict:  # fmt: skip
    """`fade tune` on `case` (its wall time), the six hand configurations and FADE's choice through
    hand_config.py, one process each; writes and returns OUT_DIR/<stem>.hand.json. Resumes: a tune whose run
    record and tuning file are there, and a side whose result says ok, are not run again. `runner`
    (run_child's signature) and `clock` are injectable for tests; `deadline` is on `clock`."""
    from fade.act.tune.tuning_file import read_tuning
    from fade.files import atomic_write_text

    side_dir = out_dir / case.stem
    common = ["--model", case.model, "--mode", case.mode, "--batch", str(case.batch)]
    common += (["--size", str(size)] if size else []) + (["--device", device] if device else [])

    def time_left():
        return float("inf") if deadline is None else deadline - clock()

    # (a) fade tune with its default budget, wall clock from process start to exit
    tuning_path = out_dir / f"{case.stem}.tuning.json"
    tune_run_path = out_dir / f"{case.stem}.tune-run.json"
    command = [sys.executable, "-m", "fade", "tune", case.model, "--mode", case.mode, "--batch", str(case.batch), "--fresh",
               "-o", str(tuning_path)] + (["--budget", str(budget_min)] if budget_min else [])  # fmt: skip
    command += (["--size", str(size)] if size else []) + (["--device", device] if device else [])
    expected_budget_s = 60.0 * (budget_min or default_tune_budget_min())
    tune_run = _read_json(tune_run_path) if tuning_path.exists() else None
    if tune_run is None:
        timeout = min(expected_budget_s + TUNE_WALL_SLACK_S + TUNE_TIMEOUT_EXTRA_S, time_left())
        if timeout < expected_budget_s + TUNE_WALL_SLACK_S:
            tune_run = {"status": "not run", "reason": f"{time_left():.0f} s left before --deadline-s", "command": command}
        else:
            run = runner(command, env=child_env(gpu), log=out_dir / f"{case.stem}.tune.log", timeout_s=timeout)
            tune_run = {"status": "timeout" if run.timed_out else "ran", "exit_code": run.exit_code, "wall_s": run.wall_s, "command": command}
            atomic_write_text(tune_run_path, json.dumps(tune_run, indent=2) + "\n")
    profile, tuning_error = None, None
    if tuning_path.exists():
        try:
            profile = read_tuning(tuning_path)
        except Exception as error:  # noqa: BLE001 - a torn or invalid tuning file is a failed tune, recorded
            tuning_error = str(error)
    else:
        tuning_error = f"no tuning file ({tune_run.get('status')}, exit {tune_run.get('exit_code')})"

    def measure(name: str, flags: list, env_extra: Optional[dict] = None) -> dict:
        path, log = side_dir / f"{name}.json", side_dir / f"{name}.log"
        record = read_hand_record(path)
        if record is not None and record["status"] == "ok":
            return {**side_from(record, None, flags, log), "resumed": True}
        if time_left() < MIN_CHILD_S:
            return {"flags": flags, "status": "not run", "reason": f"{time_left():.0f} s left before --deadline-s"}
        path.unlink(missing_ok=True)
        run = runner([sys.executable, str(HAND_SCRIPT), *common, *flags, "--json", str(path)], env=child_env(gpu, env_extra),
                     log=log, timeout_s=min(HAND_TIMEOUT_S, time_left()))  # fmt: skip
        return side_from(read_hand_record(path), run, flags, log)

    # (b) the six hand configurations, channels_last on convolutional networks
    hand = {name: measure(name, hand_flags(precision, compile_mode, case.convolutional))
            for name, (precision, compile_mode) in HAND_CONFIGS.items()}  # fmt: skip
    # (c) FADE's choice in the same loop, with the tuning file's env (as fade.apply_fade_patches would set it)
    fade_side, unexpressed = {"status": "not run", "reason": tuning_error}, {}
    if profile is not None:
        flags, unexpressed = fade_flags(profile["knobs"])
        same = next((name for name in HAND_CONFIGS if hand[name]["flags"] == flags and hand[name]["status"] == "ok"), None)
        if same is not None and not profile["env"]:
            fade_side = {**hand[same], "same_as": same}  # one configuration, measured once
        else:
            fade_side = measure("fade", flags, profile["env"])
    result = {
        "schema_version": 1, "kind": "fade-tune-vs-hand", "case": case.name, "model": case.model, "mode": case.mode,
        "batch": case.batch, "size": size, "gpu": gpu, "convolutional": case.convolutional,
        "budget_s": (profile or {}).get("search", {}).get("budget_s") or expected_budget_s, "tune": tune_run,
        "tuning_error": tuning_error, "fade_tune_reported": _reported(profile), "hand": hand, "fade": fade_side,
        "not_expressed": unexpressed,
    }  # fmt: skip
    result["judged"] = judge_hand(result)
    atomic_write_text(out_dir / f"{case.stem}.hand.json", json.dumps(result, indent=2, default=str) + "\n")
    return result


def default_tune_budget_min() -> float:
    from fade.act.tune.tuner import DEFAULT_BUDGET_MIN

    return DEFAULT_BUDGET_MIN


def _read_json(path: Path) -> Optional[dict]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _reported(profile: Optional[dict]) -> Optional[dict]:
    """What `fade tune` itself said: verdict, chosen knobs and its final check's figures."""
    if profile is None:
        return None
    before, after = profile.get("before") or {}, profile.get("after") or {}
    return {"verdict": profile.get("verdict"), "verdict_reason": profile.get("verdict_reason"), "changed": profile.get("changed"),
            "knobs": profile.get("knobs"), "env": profile.get("env"), "baseline_samples_per_s": before.get("samples_per_s"),
            "chosen_samples_per_s": after.get("samples_per_s"), "speedup": (profile.get("final_check") or {}).get("speedup"),
            "search_elapsed_s": (profile.get("search") or {}).get("elapsed_s"), "host_load": profile.get("host_load")}  # fmt: skip


def counts(side: dict) -> bool:
    """A side counts when it ran and its loss stayed finite: a crash, timeout or divergence is no configuration."""
    return side.get("status") == "ok" and isinstance(side.get("samples_per_s"), (int, float))


def judge_hand(result: dict) -> dict:
    """Issue 26's bars for one case: {"best_hand", "ratio", "bars": [text], "ok"}. Ratio = FADE's choice over
    the fastest hand configuration that counts (counts()), both measured by hand_config.py."""
    rates = {name: side["samples_per_s"] for name, side in result["hand"].items() if counts(side)}
    bars, ok, best, ratio = [], True, None, None
    fade_side = result["fade"]
    if not rates:
        bars.append("no hand configuration ran")
        ok = False
    elif not counts(fade_side):
        bars.append(f"FADE's choice {fade_side.get('status')}: {fade_side.get('reason')}")
        ok = False
    else:
        best = max(rates, key=rates.get)
        ratio = fade_side["samples_per_s"] / rates[best]
        passed = ratio >= HAND_LOOP_BAR
        ok &= passed
        bars.append(f"{ratio:.2f}x best hand ({best}) " + ("ok" if passed else f"below {HAND_LOOP_BAR}"))
    tune = result["tune"]
    if tune.get("wall_s") is None or tune.get("exit_code") not in (0, 1):
        bars.append(f"tune {tune.get('status')} (exit {tune.get('exit_code')})")
        ok = False
    else:
        limit = result["budget_s"] + TUNE_WALL_SLACK_S
        passed = tune["wall_s"] <= limit
        ok &= passed
        bars.append(f"tune {tune['wall_s']:.0f}/{limit:.0f} s " + ("ok" if passed else "OVER"))
    return {"best_hand": best, "ratio": ratio, "bars": bars, "ok": ok}


def hand_table(out_dir: Path) -> str:
    """OUT_DIR/hand-table.md from every OUT_DIR/*.hand.json."""
    from fade.files import atomic_write_text

    names = tuple(HAND_CONFIGS)
    rows = ["| case | batch | " + " | ".join(names) + " | FADE's choice | FADE chose | fade tune said | best hand | ratio | tune wall | bars |",
            "| --- | ---: | " + " | ".join("---:" for _ in names) + " | ---: | --- | --- | --- | ---: | ---: | --- |"]  # fmt: skip

    def cell(side: dict) -> str:
        if counts(side):
            return f"{side['samples_per_s']:.4g} ±{100 * (side.get('relative_iqr') or 0):.0f}%"
        return side.get("status", "-")

    for path in sorted(out_dir.glob("*.hand.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        judged = judge_hand(result)
        reported = result.get("fade_tune_reported") or {}
        chosen = ", ".join(f"{k}={v}" for k, v in (reported.get("changed") or {}).items()) or ("defaults" if reported else "-")
        said = "-"
        if reported:
            said = f"{reported.get('verdict')}" + (f" x{reported['speedup']:.2f}" if reported.get("speedup") else "")
        wall = result["tune"].get("wall_s")
        wall_text = "-" if wall is None else f"{wall:.0f} s (budget {result['budget_s']:.0f})"
        ratio = f"{judged['ratio']:.3f}" if judged["ratio"] is not None else "-"
        rows.append(f"| {result['case']} | {result['batch']} | " + " | ".join(cell(result['hand'][name]) for name in names) +
                    f" | {cell(result['fade'])} | {chosen} | {said} | {judged['best_hand'] or '-'} | {ratio} | "
                    f"{wall_text} | {'; '.join(judged['bars'])} |")  # fmt: skip
    rows.append("")
    rows.append(f"samples/s (batch as run) ± relative IQR: median per-step time over the timed blocks of "
                "benchmarks/hand_config.py, each configuration in its own process (a plain loop, none of FADE's timing); "
                "fp32 = PyTorch's defaults, ro = torch.compile mode reduce-overhead, channels_last on for convolutional "
                f"networks. FADE's choice = the tuning file's knobs in the same loop. Bars: ratio >= {HAND_LOOP_BAR}; tune "
                f"wall time (process start to exit) <= budget + {TUNE_WALL_SLACK_S:.0f} s. crashed/timeout/diverged/failed "
                "sides do not count as the best hand configuration.")  # fmt: skip
    text = "\n".join(rows) + "\n"
    atomic_write_text(out_dir / "hand-table.md", text)
    return text


def hand_main(args, *, runner=run_child, clock=time.monotonic) -> int:
    """--hand: every case of --cases (default HAND_CASES) in turn, then the table."""
    out_dir = Path(args.out_dir)
    if args.table:
        print(hand_table(out_dir))
        return 0
    deadline = None if args.deadline_s is None else clock() + args.deadline_s
    failed = False
    cases = parse_hand_cases(args.cases or ",".join(HAND_CASES), args.batch)
    for case in cases:
        result = run_hand_case(out_dir, case, gpu=args.gpu, budget_min=args.budget, size=args.size, device=args.device,
                               deadline=deadline, runner=runner, clock=clock)  # fmt: skip
        failed |= not result["judged"]["ok"]
        print(json.dumps({"case": case.name, "bars": result["judged"]["bars"],
                          "rates": {name: side.get("samples_per_s") for name, side in {**result["hand"], "fade": result["fade"]}.items()},
                          "reported": (result["fade_tune_reported"] or {}).get("verdict")}), flush=True)  # fmt: skip
    print(hand_table(out_dir))
    return 1 if failed else 0


def main(argv=None, *, tune=None, measure_factory=None, runner=run_child, clock=time.monotonic) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--cases", default=None, help="comma-separated model/mode (default: all 12; --hand: HAND_CASES)")
    parser.add_argument("--batch", type=int, default=None, help="default 64 (--hand: each case's own)")
    parser.add_argument("--budget", type=float, default=None, help="tune minutes per case (default 5; --hand: fade tune's default)")
    parser.add_argument("--device", default=None, help="default cuda (--hand: what fade tune and hand_config.py pick)")
    parser.add_argument("--size", type=int, default=None, help="image side or sequence length (default: the zoo's)")
    parser.add_argument("--table", action="store_true", help="only write OUT_DIR/tune-table.md (--hand: hand-table.md) from the cases there")
    parser.add_argument("--smoke", action="store_true", help="the CPU path: resnet18/infer, 32 px, batch 2, 1 min, no compiled sides")
    parser.add_argument("--hand", action="store_true", help="issue 26: fade tune, then six hand configurations and FADE's choice, "
                        "each in its own hand_config.py process")
    parser.add_argument("--gpu", default=None, help="--hand: CUDA_VISIBLE_DEVICES for every child")
    parser.add_argument("--deadline-s", type=float, default=None, help="--hand: start no child that could not end within this many "
                        "seconds of now (the device machine's 10-minute command limit)")
    args = parser.parse_args(argv)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.hand:
        return hand_main(args, runner=runner, clock=clock)
    if args.table:
        print(table(out_dir))
        return 0
    args.cases = args.cases or ",".join(CASES)
    args.batch, args.device = args.batch or 64, args.device or "cuda"
    args.budget = 5.0 if args.budget is None else args.budget
    compiled, quick = True, False
    if args.smoke:
        args.cases, args.device, args.size, args.batch, args.budget = "resnet18/infer", "cpu", 32, 2, min(args.budget, 1.0)
        compiled, quick = False, True
    failed = False
    for case in parse_cases(args.cases):
        model, mode = case.split("/")
        result = tune_case(out_dir, model, mode, batch=args.batch, budget_min=args.budget, device=args.device, size=args.size,
                           quick=quick, compiled=compiled, tune=tune, measure_factory=measure_factory)  # fmt: skip
        verdict = judge(result)
        failed |= not verdict["ok"]
        print(json.dumps({"case": case, "tune_s": round(result["tune_s"]), "compare_s": round(result["compare_s"]),
                          "changed": result["changed"], "verdict": result["profile_verdict"], "bars": verdict["bars"],
                          "rates": {k: round(v["samples_per_s"]) for k, v in result["figures"].items()},
                          "failures": result["failures"]}), flush=True)  # fmt: skip
    print(table(out_dir))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
