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
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

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
    from fade.act.tune.knobs import baseline_config, load_knobs, searched_knobs
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
        if path.name.endswith(".profile.json"):
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


def main(argv=None, *, tune=None, measure_factory=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated model/mode (default: all 12)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--budget", type=float, default=5.0, help="tune minutes per case (the bar holds it)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size", type=int, default=None, help="image side or sequence length (default: the zoo's)")
    parser.add_argument("--table", action="store_true", help="only write OUT_DIR/tune-table.md from the cases there")
    parser.add_argument("--smoke", action="store_true", help="the CPU path: resnet18/infer, 32 px, batch 2, 1 min, no compiled sides")
    args = parser.parse_args(argv)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.table:
        print(table(out_dir))
        return 0
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
