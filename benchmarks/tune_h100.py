"""`fade tune` on the H100: one model and mode per call (sized for a 10-minute device call), then the tuned
configuration, PyTorch's defaults and the best hand configuration re-measured side by side.

    python benchmarks/tune_h100.py OUT_DIR MODEL [--mode train|infer] [--batch 64] [--budget 5]
    python benchmarks/tune_h100.py OUT_DIR --table      # after all calls: OUT_DIR/tune-h100.md

Per call: `run_tune` (budget minutes of search, its own final interleaved check), then COMPARE_ROUNDS
rounds of (default, hand, tuned) in rotating order through the same isolated workers; pooled medians and
IQRs per side. HAND is the issue's best hand configuration (AMP bf16 + channels_last for CNNs, AMP bf16
for transformers). Writes OUT_DIR/<model>-<mode>.json (profile + comparison). The bars checked in the
table: tuned >= default and >= hand beyond noise or within it (never slower beyond noise), resnet50 train
tuned >= 1.15 x hand, and search wall time <= 5 min.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

COMPARE_ROUNDS = 3
HAND_CNN = {"precision": "amp-bf16", "channels_last": "on"}
HAND_TRANSFORMER = {"precision": "amp-bf16"}
RESNET50_TRAIN_BAR = 1.15  # the bar over AMP-bf16 + channels_last
SEARCH_BAR_S = 300.0  # <= 5 min per model
MODELS = ("alexnet", "resnet18", "resnet50", "vgg16", "mobilenet_v2", "gpt2-small")


def tune_one(out_dir: Path, model: str, mode: str, batch: int, budget_min: float) -> dict:
    from fade.act.tune import run_tune
    from fade.act.tune.cache import open_cache
    from fade.act.tune.knobs import baseline_config, load_knobs, searched_knobs
    from fade.act.tune.profile import save_profile
    from fade.act.tune.tuner import WorkerMeasure, target_for, worker_fingerprint
    from fade.measure.timing import quantile
    from fade.measure.zoo import ZOO

    started = time.monotonic()
    profile = run_tune(model, mode=mode, batch=batch, budget_min=budget_min, device="cuda", progress=lambda m: print(m, file=sys.stderr))
    search_s = time.monotonic() - started
    save_profile(profile, out_dir / f"{model}-{mode}.profile.json")

    fingerprint = worker_fingerprint("cuda")
    searched, _ = searched_knobs(load_knobs(), target_for(model, mode, fingerprint))
    default = baseline_config(searched)
    hand = {**default, **(HAND_CNN if ZOO[model].kind == "image" else HAND_TRANSFORMER)}
    sides = {"default": default, "hand": hand, "tuned": dict(profile["knobs"])}
    cache = open_cache(fingerprint)
    measure = WorkerMeasure(searched, model=model, mode=mode, batch=batch, size=None, device="cuda", cache_env=cache.env())
    samples = {name: [] for name in sides}
    failures = {}
    names = list(sides)
    try:
        for round_index in range(COMPARE_ROUNDS):
            order = names[round_index % 3:] + names[: round_index % 3]  # rotate who goes first
            for name in order:
                trial = measure(sides[name])
                if trial.status == "ok":
                    samples[name].extend(trial.samples_s)
                else:
                    failures[name] = trial.reason
    finally:
        measure.close()
    figures = {}
    for name, values in samples.items():
        if values:
            median = quantile(values, 0.5)
            figures[name] = {"samples_per_s": batch / median, "relative_iqr": (quantile(values, 0.75) - quantile(values, 0.25)) / median, "n": len(values)}
    result = {"model": model, "mode": mode, "batch": batch, "search_s": search_s, "sides": sides, "figures": figures,
              "failures": failures, "profile_verdict": profile["verdict"], "changed": profile["changed"]}  # fmt: skip
    (out_dir / f"{model}-{mode}.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def table(out_dir: Path) -> str:
    rows = ["| model | mode | default | hand | tuned | tuned/default | tuned/hand | search s | chosen | bars |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]  # fmt: skip
    for path in sorted(out_dir.glob("*-*.json")):
        if path.name.endswith(".profile.json"):
            continue
        result = json.loads(path.read_text())
        figures = result["figures"]
        if not all(name in figures for name in ("default", "hand", "tuned")):
            rows.append(f"| {result['model']} | {result['mode']} | failed: {result['failures']} |")
            continue
        rate = {name: figures[name]["samples_per_s"] for name in figures}
        noise = {name: max(0.02, figures[name]["relative_iqr"]) for name in figures}
        versus_default, versus_hand = rate["tuned"] / rate["default"], rate["tuned"] / rate["hand"]
        bars = []
        bars.append("ok" if versus_default >= 1 - max(noise["tuned"], noise["default"]) else "SLOWER than default")
        bars.append("ok" if versus_hand >= 1 - max(noise["tuned"], noise["hand"]) else "SLOWER than hand")
        if result["model"] == "resnet50" and result["mode"] == "train":
            bars.append("ok" if versus_hand >= RESNET50_TRAIN_BAR else f"below {RESNET50_TRAIN_BAR}x hand")
        bars.append("ok" if result["search_s"] <= SEARCH_BAR_S else "over 5 min")
        chosen = ", ".join(f"{k}={v}" for k, v in result["changed"].items()) or "defaults"
        rows.append(f"| {result['model']} | {result['mode']} | {rate['default']:.4g} | {rate['hand']:.4g} | {rate['tuned']:.4g} | "
                    f"{versus_default:.2f}x | {versus_hand:.2f}x | {result['search_s']:.0f} | {chosen} | {'; '.join(bars)} |")  # fmt: skip
    rows.append("")
    rows.append(f"samples/s, medians of {COMPARE_ROUNDS} interleaved rounds per side; a bar counts 'not slower' within "
                "max(2%, IQR/median) of either side.")  # fmt: skip
    text = "\n".join(rows) + "\n"
    (out_dir / "tune-h100.md").write_text(text)
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("model", nargs="?", choices=MODELS)
    parser.add_argument("--mode", default="train", choices=("train", "infer"))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--budget", type=float, default=5.0, help="search minutes (the issue's bar is <= 5)")
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args(argv)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.table:
        print(table(out_dir))
        return 0
    if not args.model:
        parser.error("give MODEL or --table")
    result = tune_one(out_dir, args.model, args.mode, args.batch, args.budget)
    print(json.dumps(result["figures"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

