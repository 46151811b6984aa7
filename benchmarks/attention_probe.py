#!/usr/bin/env python3
"""The attention truth on this machine's GPU (issue 28 point 2): for each attention shape, run
scaled_dot_product_attention under torch's default choice and under each backend forced (flash, efficient,
cudnn, math), and record which kernel actually ran (profiler kernel names classified by data/kernels.toml),
its time (device events, median + IQR), whether each backend could run at all and torch's reason when not.
fade.measure.attention does the work (its docstring states the method); this script picks the shapes and
writes the files.

Default shapes: head_dim 64, 128, 256 x bf16, fp16; batch 1, GQA 32 query heads / 8 KV heads (Llama-3-8B's
layout); causal prefill of 2048 tokens (is_causal=True), the same prefill with an explicit boolean causal mask
(what transformers passes when it builds the mask itself; flash takes no mask), and decode (1 query against
4096 cached keys, no mask: the one query sees every key).

Output, in OUT:
  attention.jsonl  one line per (shape, backend) as it finishes ("kind": "row"), one per shape with the verdict
                   ("kind": "finding": ok / math_fallback with its cause / slower_than_available), and a line
                   for every failure ("kind": "failure": a shape whose worker crashed or timed out). Nothing is
                   raised: a backend that cannot run is a row with its error and torch's reasons.
  attention.md     the table: shape, backend asked for, what ran (by aten op), the kernels (class + library),
                   median ms, TFLOP/s, peak memory, and why a backend was refused.

Each shape runs in its own child process (a CUDA error or an out-of-memory in one cannot poison the next),
with --shape-timeout seconds; --in-process runs them in this process instead.

  python3 benchmarks/attention_probe.py OUT                       # the default 18 shapes on cuda:0
  python3 benchmarks/attention_probe.py OUT --head-dims 128 --dtypes bf16 --phases prefill
  python3 benchmarks/attention_probe.py /tmp/attn --device cpu --quick --in-process   # CPU smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
try:
    import fade  # noqa: F401  (installed)
except ImportError:
    sys.path.insert(0, str(ROOT / "src"))

PHASES = ("prefill", "prefill-mask", "decode")


def shapes(args) -> list:
    from fade.measure.attention import AttentionShape

    out = []
    for head_dim in args.head_dims:
        for dtype in args.dtypes:
            for phase in args.phases:
                if phase == "prefill":
                    q_len, kv_len, mask = args.prefill, args.prefill, "causal"
                elif phase == "prefill-mask":
                    q_len, kv_len, mask = args.prefill, args.prefill, "explicit"
                else:
                    q_len, kv_len, mask = 1, args.kv_len, "none"
                out.append((phase, AttentionShape(batch=args.batch, q_heads=args.q_heads, kv_heads=args.kv_heads,
                                                  head_dim=head_dim, q_len=q_len, kv_len=kv_len, mask=mask,
                                                  dtype=dtype)))  # fmt: skip
    return out


def append(path: Path, line: dict) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line, default=str) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def run_shape(phase: str, shape, args, jsonl: Path) -> None:
    """Every row of one shape appended to `jsonl` as it finishes, then the finding line."""
    from fade.measure.attention import PROBE_TIMING, QUICK_PROBE_TIMING, probe_attention

    base = {"phase": phase, "label": shape.label(), "shape": shape.__dict__, "device": args.device}

    def on_row(row):
        append(jsonl, {"kind": "row", **base, **row})

    try:
        result = probe_attention(shape, device=args.device, requests=args.backends,
                                 timing=QUICK_PROBE_TIMING if args.quick else PROBE_TIMING, on_row=on_row)  # fmt: skip
        append(jsonl, {"kind": "finding", **base, "finding": result["finding"], "torch": result["torch"],
                       "elapsed_s": result["elapsed_s"]})  # fmt: skip
    except Exception as exc:  # recorded, never raised: the next shape runs
        append(jsonl, {"kind": "failure", **base, "error": f"{type(exc).__name__}: {exc}"})


def child_command(phase: str, shape, args, jsonl: Path) -> list:
    return [sys.executable, str(Path(__file__).resolve()), str(args.out), "--child", json.dumps([phase, shape.__dict__]),
            "--device", args.device, "--backends", ",".join(args.backends)] + (["--quick"] if args.quick else [])


def render_markdown(jsonl: Path) -> str:
    lines = [json.loads(text) for text in jsonl.read_text(encoding="utf-8").splitlines() if text.strip()]
    torch_info = next((line["torch"] for line in lines if line.get("kind") == "finding"), {})
    out = ["# SDPA: which kernel ran", "",
           f"torch {torch_info.get('version')}, device {torch_info.get('device_name', '?')} "
           f"({torch_info.get('arch', '?')}); switches {torch_info.get('switches')}", "",
           "| shape | phase | asked | ran | kernels (class: library) | median ms | TFLOP/s | peak MiB | why not |",
           "|---|---|---|---|---|---:|---:|---:|---|"]  # fmt: skip
    for line in lines:
        if line.get("kind") == "row":
            kernels = [k for k in line.get("kernels") or [] if k["class"] in ("attention", "gemm", "normalization")]
            shown = "; ".join(f"{k['name'][:60]} ({k['class']}: {k['library']})" for k in kernels[:3]) or "-"
            ran = line.get("backend") or "-"
            if ran == "math":
                ran = "**MATH**"
            if line.get("ran") and line.get("gqa_path") == "repeat_kv" and line.get("gqa_refused"):
                ran += " (repeat_kv: enable_gqa refused)"
            why = "; ".join(f"{c['cause']}: {c['text'][:80]}" for c in line.get("causes") or []) or (
                (line.get("error") or "")[:100] if not line.get("ran") else "")
            median = f"{line['median_ms']:.4g}" if line.get("median_ms") is not None else "-"
            tflops = f"{line['tflops']:.3g}" if line.get("tflops") is not None else "-"
            peak = f"{line['peak_memory_bytes'] / 2**20:.1f}" if line.get("peak_memory_bytes") is not None else "-"
            out.append(f"| {line['label']} | {line['phase']} | {line['requested']} | {ran} | {shown} | {median} | "
                       f"{tflops} | {peak} | {why.replace('|', '/')} |")  # fmt: skip
    out += ["", "## Findings", ""]
    for line in lines:
        if line.get("kind") == "finding":
            finding = line["finding"]
            out.append(f"- {line['label']} ({line['phase']}): **{finding['status']}**: {finding['message']}")
        elif line.get("kind") == "failure":
            out.append(f"- {line['label']} ({line['phase']}): **failure**: {line['error']}")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="output folder (attention.jsonl is appended to, attention.md rewritten)")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--head-dims", type=lambda t: [int(x) for x in t.split(",")], default=[64, 128, 256])
    parser.add_argument("--dtypes", type=lambda t: t.split(","), default=["bf16", "fp16"])
    parser.add_argument("--phases", type=lambda t: t.split(","), default=list(PHASES), help=",".join(PHASES))
    parser.add_argument("--backends", type=lambda t: t.split(","), default=None,
                        help="default,flash,efficient,cudnn,math (all by default)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--q-heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--prefill", type=int, default=2048)
    parser.add_argument("--kv-len", type=int, default=4096)
    parser.add_argument("--quick", action="store_true", help="short timings (a smoke run)")
    parser.add_argument("--in-process", action="store_true", help="run every shape in this process")
    parser.add_argument("--shape-timeout", type=float, default=300.0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from fade.measure.attention import REQUESTS, AttentionShape

    args.backends = args.backends or list(REQUESTS)
    args.out.mkdir(parents=True, exist_ok=True)
    jsonl = args.out / "attention.jsonl"
    if args.child:
        phase, fields = json.loads(args.child)
        run_shape(phase, AttentionShape(**fields), args, jsonl)
        return 0
    for phase in args.phases:
        if phase not in PHASES:
            parser.error(f"--phases: {phase!r} is not one of {', '.join(PHASES)}")
    started = time.time()
    for phase, shape in shapes(args):
        print(f"[{time.time() - started:7.1f} s] {shape.label()} ({phase})", file=sys.stderr, flush=True)
        if args.in_process:
            run_shape(phase, shape, args, jsonl)
            continue
        base = {"kind": "failure", "phase": phase, "label": shape.label(), "shape": shape.__dict__, "device": args.device}
        try:
            done = subprocess.run(child_command(phase, shape, args, jsonl), timeout=args.shape_timeout,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
            if done.returncode != 0:
                append(jsonl, {**base, "error": f"worker exit {done.returncode}: {done.stderr[-2000:]}"})
        except subprocess.TimeoutExpired:
            append(jsonl, {**base, "error": f"timed out after {args.shape_timeout:g} s"})
        except OSError as exc:
            append(jsonl, {**base, "error": f"worker did not start: {exc}"})
    if jsonl.exists():
        (args.out / "attention.md").write_text(render_markdown(jsonl), encoding="utf-8")
    print(f"wrote {jsonl} and {args.out / 'attention.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
