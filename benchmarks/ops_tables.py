"""Markdown tables for docs/performance.md from two `fade ops` result files (plain or .gz): counts per class
and per family for each, the gap lists, the speed ratios and the curated rows.

Usage: python3 benchmarks/ops_tables.py results/ops/ops-cuda.jsonl results/ops/ops-cpu.jsonl [--rows N]
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
from pathlib import Path

from fade.analyze.ops.families import FAMILIES
from fade.analyze.ops.gap import compare_sweeps, sweep_summary
from fade.analyze.ops.outcome import CLASSES
from fade.analyze.ops.rows import load_ops_file


def readable(path: str) -> str:
    """A plain-text copy of a gzipped file, or the path itself."""
    if not path.endswith(".gz"):
        return path
    target = Path(tempfile.mkdtemp()) / Path(path).name.removesuffix(".gz")
    with gzip.open(path, "rb") as source, open(target, "wb") as plain:
        shutil.copyfileobj(source, plain)
    return str(target)


def family_rows(label: str, summary: dict) -> list:
    lines = [f"**{label}**: {summary['ops']} ops × {len(summary['dtypes'])} dtypes = {summary['op_dtypes']} op × dtypes; "
             + ", ".join(f"{name} {count}" for name, count in summary["classes"].items()), ""]
    shown = [name for name in CLASSES if summary["families"]["all"]["classes"].get(name)]
    lines.append("| family | tried | % ok | " + " | ".join(shown) + " |")
    lines.append("| --- | ---: | ---: | " + " | ".join("---:" for _ in shown) + " |")
    for family in FAMILIES + ("all",):
        data = summary["families"][family]
        if not data["tried"] and family != "all":
            continue
        pct = "" if data["pct_ok"] is None else f"{data['pct_ok']:.0f}"
        cells = [str(data["classes"].get(name, "")) for name in shown]
        lines.append(f"| {family} | {data['tried']} | {pct} | " + " | ".join(cells) + " |")
    claims = summary["claims"]
    lines += ["", f"dtype claims: {claims.get('claimed_fails', 0)} claimed but failed, "
              f"{claims.get('works_unclaimed', 0)} unclaimed but ran", ""]
    return lines


def pair_rows(title: str, pairs: list, side: str, limit: int) -> list:
    if not pairs:
        return [f"{title}: none", ""]
    lines = [f"{title} ({len(pairs)}):", "", "| family | op | dtype | A | B | why |", "| --- | --- | --- | --- | --- | --- |"]
    for pair in pairs[:limit]:
        why = pair[f"{side}_message"] or ""
        ratio = pair[f"{side}_tolerance_ratio"]
        if not why and ratio is not None:
            why = f"{ratio:.3g}x tolerance"
        why = " ".join(why.split()).replace("|", "\\|")[:110]
        lines.append(f"| {pair['family']} | `{pair['op']}` | {pair['dtype']} | {pair['a_class']} | {pair['b_class']} | {why} |")
    if len(pairs) > limit:
        lines.append(f"| ... | {len(pairs) - limit} more | | | | |")
    return lines + [""]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--rows", type=int, default=25, help="rows per gap list")
    args = parser.parse_args(argv)
    side_a, side_b = load_ops_file(readable(args.a)), load_ops_file(readable(args.b))
    lines = family_rows(f"A: {side_a['label']}", sweep_summary(side_a["rows"]))
    lines += family_rows(f"B: {side_b['label']}", sweep_summary(side_b["rows"]))
    gap = compare_sweeps(side_a, side_b)
    lines += [f"Gap, over the {gap['common']} op × dtypes in both files:", "",
              "| family | % ok A | % ok B | runs A not B | runs B not A | mismatch A only | mismatch B only | speed ≥5x |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for family in FAMILIES + ("all",):
        data = gap["families"][family]
        if not data["a"]["tried"] and family != "all":
            continue
        pct_a = "" if data["a"]["pct_ok"] is None else f"{data['a']['pct_ok']:.0f}"
        pct_b = "" if data["b"]["pct_ok"] is None else f"{data['b']['pct_ok']:.0f}"
        lines.append(f"| {family} | {pct_a} | {pct_b} | {data['works_a_not_b']} | {data['works_b_not_a']} | "
                     f"{data['mismatch_a_only']} | {data['mismatch_b_only']} | {data['speed']} |")
    lines.append("")
    lines += pair_rows("Runs on A, not on B", gap["works_a_not_b"], "b", args.rows)
    lines += pair_rows("Runs on B, not on A", gap["works_b_not_a"], "a", args.rows)
    lines += pair_rows("Mismatch on A only", gap["mismatch_a_only"], "a", args.rows)
    lines += pair_rows("Mismatch on B only", gap["mismatch_b_only"], "b", args.rows)
    if gap["speed"]:
        lines += [f"Speed ratios ({len(gap['speed'])}):", "", "| op | dtype | A (us) | B (us) | B/A |", "| --- | --- | ---: | ---: | ---: |"]
        for pair in gap["speed"][: args.rows]:
            lines.append(f"| `{pair['op']}` | {pair['dtype']} | {pair['a_median_s'] * 1e6:.4g} | {pair['b_median_s'] * 1e6:.4g} | {pair['b_over_a']:.3g} |")
        lines.append("")
    lines += ["Curated rows:", ""]
    for entry in gap["curated_rows"]:
        lines.append(f"- {entry['name']}: ran correctly on A {entry['a_ok']}/{entry['a_tried']}, on B {entry['b_ok']}/{entry['b_tried']}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
