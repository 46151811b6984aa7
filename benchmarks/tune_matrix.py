"""`fade tune` validated on one device: each model and mode tuned with the default budget, then the tuned
configuration, true fp32, PyTorch's defaults and the issue's hand configurations re-measured side by side in
one worker.

    python benchmarks/tune_matrix.py OUT_DIR MODEL[,MODEL...] [--device cuda] [--mode train,infer] [--batch 64] [--budget 5]
    python benchmarks/tune_matrix.py OUT_DIR --table      # after all calls: OUT_DIR/tune-table.md
    python benchmarks/tune_matrix.py /tmp/t resnet18 --device cpu --size 32 --batch 2   # smoke test (the help text of --device)

Per model and mode: `run_tune` (the search, with its own final check), then one side-by-side trial
(trial.side_by_side): every side built and compiled once, then COMPARE_ROUNDS rounds, each side timed once
per round with the first side rotating, samples pooled per side. Sides: fp32 (TF32 off), default
(PyTorch's defaults: the search baseline), the hand configurations of the issue (tf32, AMP bf16 +
channels_last for CNNs or AMP bf16 for transformers, torch.compile on the defaults) and tuned. Writes
OUT_DIR/<model>-<mode>.json (comparison) and .profile.json. Bars in the table: tuned >= default and >= the
best hand side (never slower beyond noise), resnet50 train tuned >= 1.15 x AMP bf16 + channels_last, and
search wall time <= 5 min.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

COMPARE_ROUNDS = 3
HAND_SIDES = ("tf32", "amp-bf16+cl", "compile")
RESNET50_TRAIN_BAR = 1.15  # the bar over AMP-bf16 + channels_last
SEARCH_BAR_S = 300.0  # <= 5 min per model
MODELS = ("alexnet", "resnet18", "resnet50", "vgg16", "mobilenet_v2", "gpt2-small")


def sides_for(default: dict, image: bool) -> dict:
    amp = {"precision": "amp-bf16", **({"channels_last": "on"} if image else {})}
    return {"fp32": {**default, "precision": "fp32"}, "default": dict(default), "tf32": {**default, "precision": "tf32"},
            "amp-bf16+cl": {**default, **amp}, "compile": {**default, "compile": "default"}}  # fmt: skip


def tune_one(out_dir: Path, model: str, mode: str, batch: int, budget_min: float, *, device: str = "cuda", size=None) -> dict:
    from fade.act.tune import run_tune
    from fade.act.tune.cache import open_cache
    from fade.act.tune.knobs import baseline_config, load_knobs, searched_knobs
    from fade.act.tune.profile import save_profile
    from fade.act.tune.tuner import WorkerMeasure, target_for, worker_fingerprint
    from fade.measure.timing import quantile
    from fade.measure.zoo import ZOO

    started = time.monotonic()
    profile = run_tune(model, mode=mode, batch=batch, budget_min=budget_min, device=device, size=size, resume=False,
                       progress=lambda m: print(f"[{model} {mode} {time.monotonic() - started:5.0f}s] {m}", file=sys.stderr, flush=True))  # fmt: skip
    search_s = time.monotonic() - started
    save_profile(profile, out_dir / f"{model}-{mode}.profile.json")

    fingerprint = worker_fingerprint(device)
    searched, _ = searched_knobs(load_knobs(), target_for(model, mode, fingerprint))
    sides = {**sides_for(baseline_config(searched), ZOO[model].kind == "image"), "tuned": dict(profile["knobs"])}
    measure = WorkerMeasure(searched, model=model, mode=mode, batch=batch, size=size, device=device, cache_env=open_cache(fingerprint).env())
    compare_started = time.monotonic()
    try:
        trials = measure.side_by_side(sides, rounds=COMPARE_ROUNDS)
        how = "side by side in one worker"
        if trials is None:  # fall back: each side in its own trial, rounds rotating
            how = f"separate trials ({measure.side_by_side_failure})"
            trials, pooled = {}, {name: [] for name in sides}
            names = list(sides)
            for index in range(COMPARE_ROUNDS):
                for name in names[index % len(names):] + names[: index % len(names)]:
                    trial = measure(sides[name])
                    trials.setdefault(name, trial)
                    pooled[name].extend(trial.samples_s)
            trials = {name: type(trial)(trial.config, tuple(pooled[name]), trial.status, trial.reason, trial.numerics, batch)
                      for name, trial in trials.items()}  # fmt: skip
    finally:
        measure.close()
    figures, failures = {}, {}
    for name, trial in trials.items():
        values = trial.samples_s
        if trial.status != "ok" or not values:
            failures[name] = trial.reason
            continue
        median = quantile(values, 0.5)
        figures[name] = {"samples_per_s": batch / median, "relative_iqr": (quantile(values, 0.75) - quantile(values, 0.25)) / median,
                         "n": len(values), "round_samples_per_s": [batch / m for m in trial.extra.get("round_medians_s", [])]}  # fmt: skip
    result = {"model": model, "mode": mode, "batch": batch, "search_s": search_s, "compare_s": time.monotonic() - compare_started,
              "compared": how, "sides": sides, "figures": figures, "failures": failures, "profile_verdict": profile["verdict"],
              "changed": profile["changed"], "candidates": profile.get("candidates")}  # fmt: skip
    (out_dir / f"{model}-{mode}.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def table(out_dir: Path) -> str:
    rows = ["| model | mode | fp32 | default | tf32 | bf16+CL | compile | tuned | tuned/default | tuned/best hand | search s | chosen | bars |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]  # fmt: skip
    for path in sorted(out_dir.glob("*-*.json")):
        if path.name.endswith(".profile.json"):
            continue
        result = json.loads(path.read_text())
        figures = result["figures"]
        if not all(name in figures for name in ("default", "tuned")):
            rows.append(f"| {result['model']} | {result['mode']} | failed: {result['failures']} |")
            continue
        rate = {name: figures[name]["samples_per_s"] for name in figures}
        noise = {name: max(0.02, figures[name]["relative_iqr"]) for name in figures}
        hands = [name for name in HAND_SIDES if name in rate]
        best_hand = max(hands, key=rate.get)
        versus_default, versus_hand = rate["tuned"] / rate["default"], rate["tuned"] / rate[best_hand]
        bars = []
        bars.append("ok" if versus_default >= 1 - max(noise["tuned"], noise["default"]) else "SLOWER than default")
        bars.append("ok" if versus_hand >= 1 - max(noise["tuned"], noise[best_hand]) else f"SLOWER than {best_hand}")
        if result["model"] == "resnet50" and result["mode"] == "train" and "amp-bf16+cl" in rate:
            over = rate["tuned"] / rate["amp-bf16+cl"]
            bars.append(f"{over:.2f}x bf16+CL " + ("ok" if over >= RESNET50_TRAIN_BAR else f"below {RESNET50_TRAIN_BAR}x"))
        bars.append("ok" if result["search_s"] <= SEARCH_BAR_S else "over 5 min")
        chosen = ", ".join(f"{k}={v}" for k, v in result["changed"].items()) or "defaults"
        cell = lambda name: f"{rate[name]:.4g}" if name in rate else "failed"  # noqa: E731
        rows.append(f"| {result['model']} | {result['mode']} | {cell('fp32')} | {cell('default')} | {cell('tf32')} | {cell('amp-bf16+cl')} | "
                    f"{cell('compile')} | {cell('tuned')} | {versus_default:.2f}x | {versus_hand:.2f}x ({best_hand}) | "
                    f"{result['search_s']:.0f} | {chosen} | {'; '.join(bars)} |")  # fmt: skip
    rows.append("")
    rows.append(f"samples/s: pooled medians of {COMPARE_ROUNDS} rotating rounds per side, all sides in one worker; a bar counts "
                "'not slower' within max(2%, IQR/median) of either side.")  # fmt: skip
    text = "\n".join(rows) + "\n"
    (out_dir / "tune-table.md").write_text(text)
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("models", nargs="?", help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument("--mode", default="train,infer")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--budget", type=float, default=5.0, help="search minutes (the default budget; the issue's bar is <= 5)")
    parser.add_argument("--table", action="store_true")
    parser.add_argument("--device", default="cuda", help="smoke tests elsewhere: --device cpu --size 32 --batch 2")
    parser.add_argument("--size", type=int, default=None, help="image side or sequence length (default: the zoo's)")
    args = parser.parse_args(argv)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.table:
        print(table(out_dir))
        return 0
    if not args.models:
        parser.error("give MODEL[,MODEL...] or --table")
    for model in args.models.split(","):
        if model not in MODELS:
            parser.error(f"unknown model {model!r}")
        for mode in args.mode.split(","):
            result = tune_one(out_dir, model, mode, args.batch, args.budget, device=args.device, size=args.size)
            print(json.dumps({"model": model, "mode": mode, "search_s": round(result["search_s"]), "compare_s": round(result["compare_s"]),
                              "changed": result["changed"], "rates": {k: round(v["samples_per_s"]) for k, v in result["figures"].items()},
                              "failures": result["failures"]}), flush=True)  # fmt: skip
    print(table(out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
