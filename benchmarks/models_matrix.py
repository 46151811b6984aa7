"""The model bench's must-show run: five CNNs x five variants x train/infer at batch 64, each case also
re-timed by a plain event-timed loop in the same run, and set beside independent runs on the same GPU type
where benchmarks/reference.toml has some (matched by device name; none are shown for another device).

    python benchmarks/models_matrix.py OUT --device cuda:0      # on a GPU machine, ~10 min on an H100
    python benchmarks/models_matrix.py /tmp/smoke --smoke        # CPU smoke test: tiny sizes, two variants
    python benchmarks/models_matrix.py out --only 'models/mobilenet_v2/*/compile/*'   # some cases (fnmatch)

Writes into the output directory:
    models.jsonl   one record per case (docs/results.md schema, suite "models"; extra.plain_loop holds the
                   plain loop's figure and FADE's difference from it)
    models.md      Markdown for docs/performance.md: the variants side by side (dlprimitives' layout, % of
                   fp32), FADE against the plain loop with each side's spread over its timing segments
                   (models_case.py: the two sides' segments alternate in time), and FADE against the
                   reference figures for this device
    summary.json   wall time, statuses, every FADE-vs-plain difference, anchor ratios

Eager variants run first and torch.compile last (one worker each), so a run cut short still holds every
eager case; `--skip-compile` then `--compile-only` into the same directory splits the run in two commands,
and the tables cover every case the directory's models.jsonl holds (the latest record of each). `--only`
runs the cases whose id matches one of its patterns, in both phases. Exit code 1 when a case failed or FADE
differs from its plain loop by more than AGREEMENT_PCT; 2 when `--only` matches no case.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

try:
    import fade
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import fade

from fade.measure.suites.models.suite import run_models
from fade.report.progress import ProgressBar
from fade.results import latest_records, read_records
from fade.measure.runner import new_run_id
from fade.analyze.compare import compare_sets, result_sets
from fade.report.compare import format_value, render_markdown

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import figures_for  # noqa: E402  (benchmarks/reference.py)

NETWORKS = ("alexnet", "resnet18", "resnet50", "vgg16", "mobilenet_v2")
EAGER_VARIANTS = ("fp32", "default", "tf32", "amp-bf16+channels-last")
COMPILE_VARIANTS = ("compile",)
BATCH = 64
AGREEMENT_PCT = 5.0  # the bar: FADE within 5% of a plain event-timed loop of the same run
COMPILE_TIMEOUT_S = 300.0  # Inductor builds resnet50's training step in about a minute; mobilenet_v2 is close
HARNESS = "models_matrix"  # this harness's rows in benchmarks/reference.toml


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="directory for models.jsonl, models.md and summary.json")
    parser.add_argument("--device", default=None, help="torch device (default: cuda:0 if available, else cpu)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and fp32 + amp-bf16+channels-last only (CPU check)")
    parser.add_argument("--skip-compile", action="store_true", help="leave out the torch.compile variant")
    parser.add_argument("--compile-only", action="store_true",
                        help="run only the torch.compile variant (after a --skip-compile run into the same directory)")  # fmt: skip
    parser.add_argument("--only", action="append", metavar="PATTERN",
                        help="run only cases whose id matches this fnmatch pattern (repeatable), e.g. 'models/alexnet/train/*'")  # fmt: skip
    args = parser.parse_args(argv)

    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / "models.jsonl"
    run_id = new_run_id()
    started = time.monotonic()
    common = {"models": NETWORKS, "batch": BATCH, "mode": "both", "validate": True, "out": out, "run_id": run_id,
              "only": args.only, "progress": ProgressBar()}  # fmt: skip
    if args.smoke:
        common.update(batch=2, image_size=64, quick=True)
    eager = ("fp32", "amp-bf16+channels-last") if args.smoke else EAGER_VARIANTS
    phases = {}
    selected = 0
    if not args.compile_only:
        selected += run_models(args.device, variants=eager, **common).selected
        phases["eager_s"] = time.monotonic() - started
    if not (args.skip_compile or args.smoke):
        compile_started = time.monotonic()
        selected += run_models(args.device, variants=COMPILE_VARIANTS, timeout_s=COMPILE_TIMEOUT_S, **common).selected
        phases["compile_s"] = time.monotonic() - compile_started
    if args.only and not selected:
        print(f"--only {' '.join(args.only)}: matches no case of this run (ids look like models/resnet50/train/fp32/b{BATCH})",
              file=sys.stderr)  # fmt: skip
        return 2
    wall_s = time.monotonic() - started
    # every case's latest record in the directory's file: a --compile-only run joins an earlier eager run
    records = [record for record in latest_records(read_records(out).records) if record.get("suite") == "models"]

    summary = summarize(records, wall_s, phases)
    (out_dir / "models.md").write_text(markdown(records, summary), encoding="utf-8")
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(markdown(records, summary))
    print(f"wrote {out}, {out_dir / 'models.md'}, {out_dir / 'summary.json'} in {wall_s:.0f} s", file=sys.stderr)
    return 1 if summary["failed"] or summary["disagreements"] else 0


def summarize(records: list, wall_s: float, phases: dict, reference: dict | None = None) -> dict:
    """reference: {"NETWORK MODE VARIANT": reference.Figure}; default: reference.toml's figures for the records' device."""
    device = next((record.get("device") or {} for record in records), {})
    device_name = device.get("name") or (device.get("torch") or {}).get("name")
    if reference is None:
        reference = figures_for(HARNESS, device_name)
    statuses: dict = {}
    agreement = []
    for record in records:
        statuses[record["status"]] = statuses.get(record["status"], 0) + 1
        plain = (record.get("extra") or {}).get("plain_loop")
        if record["status"] == "ok" and plain:
            agreement.append(
                {"case_id": record["case_id"], "fade": record["value"], "plain": plain["samples_per_s"],
                 "diff_pct": plain["fade_vs_plain_pct"], "ok": abs(plain["fade_vs_plain_pct"]) <= AGREEMENT_PCT,
                 "fade_spread_pct": plain.get("fade_spread_pct"), "plain_spread_pct": plain.get("spread_pct")}
            )  # fmt: skip
    anchors = []
    for record in records:
        params = record.get("params") or {}
        case = " ".join(str(params.get(key)) for key in ("model", "mode", "variant"))
        figure = reference.get(case)
        if figure and record["status"] == "ok" and params.get("batch") == BATCH:
            anchors.append({"case": case, "fade": record["value"], "anchor_low": figure.low, "anchor_high": figure.high,
                            "pct_of_anchor_mid": 100.0 * record["value"] / ((figure.low + figure.high) / 2),
                            "anchor_source": figure.source, "anchor_machine": figure.machine})  # fmt: skip
    return {
        "fade_version": fade.__version__,
        "device": device_name or device.get("type"),
        "torch": ((next((r.get("stack") for r in records), {}) or {}).get("torch") or {}).get("version"),
        "wall_s": wall_s,
        "phases": phases,
        "statuses": statuses,
        "failed": sum(count for status, count in statuses.items() if status not in ("ok", "skipped")),
        "agreement": agreement,
        "disagreements": [row["case_id"] for row in agreement if not row["ok"]],
        "anchors": anchors,
    }


def markdown(records: list, summary: dict) -> str:
    sets = result_sets([("models.jsonl", records)], by="variant")
    labels = [result_set.label for result_set in sets]
    comparison = compare_sets(sets, baseline="fp32" if "fp32" in labels else None, by="variant")
    batches = ", ".join(str(batch) for batch in sorted({(r.get("params") or {}).get("batch") for r in records}, key=str))
    lines = [
        f"Device: {summary['device']}, torch {summary['torch']}, FADE {summary['fade_version']}; "
        f"batch {batches}, synthetic data resident on the device (no input copy); {summary['wall_s']:.0f} s in all.",
        "",
        "### Variants side by side (samples/s, % of fp32)",
        "",
        render_markdown(comparison),
        f"### FADE against a plain event-timed loop of the same run (bar: {AGREEMENT_PCT:g}%)",
        "",
        "| case | FADE samples/s | plain loop samples/s | difference | FADE spread | plain spread |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in summary["agreement"]:
        mark = "" if row["ok"] else " **outside**"
        spreads = [f"{row[key]:.0f}%" if row.get(key) is not None else "-" for key in ("fade_spread_pct", "plain_spread_pct")]
        lines.append(f"| {row['case_id']} | {format_value(row['fade'])} | {format_value(row['plain'])} | "
                     f"{row['diff_pct']:+.1f}%{mark} | {spreads[0]} | {spreads[1]} |")  # fmt: skip
    lines += ["", "Spread: (max - min) / median of one side's per-segment samples/s; FADE's and the plain loop's "
              "segments alternate in time (F P P F F P P F ...), so drift reaches both sides alike."]  # fmt: skip
    sources = sorted({f"{row['anchor_machine']}; {row['anchor_source']}" for row in summary["anchors"]})
    lines += ["", "### FADE against earlier independent runs on the same GPU type", ""]
    if not summary["anchors"]:
        lines.append(f"benchmarks/reference.toml has no figures for {summary['device']}.")
    else:
        lines += [*(f"Reference (benchmarks/reference.toml): {source}." for source in sources), "",
                  "| case | FADE samples/s | earlier runs | FADE / middle of earlier |", "| --- | ---: | ---: | ---: |"]
    for row in summary["anchors"]:
        earlier = f"{row['anchor_low']}" if row["anchor_low"] == row["anchor_high"] else f"{row['anchor_low']}-{row['anchor_high']}"
        lines.append(f"| {row['case']} | {format_value(row['fade'])} | {earlier} | {row['pct_of_anchor_mid']:.0f}% |")
    failed = [f"{r['case_id']}: {r['status']} {r.get('error') or ''}" for r in records if r["status"] not in ("ok", "skipped")]
    if failed:
        lines += ["", "### Cases without a figure", ""] + [f"- {line}" for line in failed]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
