#!/usr/bin/env python3
"""A plain, hand-written decode benchmark to hold `fade bench llm`'s figures against (issue 28: within 5% of
FADE's figure for the same variant).

Only torch and transformers: nothing from fade is imported. The model's shape is read from FADE's data file
(src/fade/data/llm.toml, with tomllib) or given as a Hugging Face config.json; the weights are random (a fixed
seed), built straight in the run's dtype on the device: speed only, nothing is downloaded.

Variants, each a function generate(ids, n) -> the n new tokens (batch x n), greedy:

  hf-generate  model.generate(ids, max_new_tokens=n, do_sample=False)                   (DynamicCache)
  hf-static    the same with cache_implementation="static" (transformers compiles the forward by itself on
               CUDA, not on the CPU)
  fade-loop    gpt-fast's recipe by hand: a StaticCache allocated once, an eager prefill of the prompt, then
               a single-token step (forward + argmax) compiled with torch.compile(mode="reduce-overhead",
               fullgraph=True), called n - 1 times from a Python loop (--compile off: eager)

Timing, the same definition as `fade bench llm` (fade.measure.suites.llm.case): decode time per step =
(median time of generate(ids, N) - median time of generate(ids, 1)) / (N - 1); tokens/s = batch / that. Each
call is timed with time.perf_counter between two torch.cuda.synchronize() calls; one untimed generate(N) and
generate(1) first (compiles and warms up), then --repeats rounds alternating generate(1) and generate(N), so a
burst of other work cannot land on one side only; Python's garbage collector is off during the rounds (as in
timeit). The time to first token is the median of generate(1).

Each (model, batch, variant) is one JSON line appended to --out (`--resume` skips those already there), and a
table is printed at the end. The greedy tokens of each variant are compared with hf-generate's from the same
weights (`tokens_match_hf_generate`): in fp32 they must agree; in bf16 a near-tie may round the other way.

  python3 benchmarks/llm_reference.py --config llama-3.1-8b --batch 1,8,32 --out out/reference.jsonl
  python3 benchmarks/llm_reference.py --config tiny-llama --device cpu --dtype fp32 --batch 1,2 \
      --prompt-tokens 16 --new-tokens 16 --out /tmp/ref.jsonl                # a CPU smoke run, seconds
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
import tomllib
from pathlib import Path

LLM_TOML = Path(__file__).resolve().parents[1] / "src" / "fade" / "data" / "llm.toml"
VARIANTS = ("hf-generate", "hf-static", "fade-loop")
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
WEIGHT_SEED = 0
PROMPT_SEED = 1


# -- the model -------------------------------------------------------------------------------------------------
def config_fields(name: str) -> tuple:
    """(model_type, AutoConfig keyword arguments) of a bundled config (llm.toml) or a config.json path."""
    if name.endswith(".json"):
        fields = json.loads(Path(name).read_text())
        model_type = fields.pop("model_type")
        fields.pop("architectures", None)
        fields.pop("torch_dtype", None)
    else:
        table = tomllib.loads(LLM_TOML.read_text())
        rows = {row["name"]: row for row in table["config"]}
        if name not in rows:
            raise SystemExit(f"llm_reference: unknown config {name!r} (in {LLM_TOML}: {', '.join(rows)})")
        row = dict(rows[name])
        model_type = row.pop("model_type")
        for key in ("name", "source"):
            row.pop(key)
        architecture = next(arch for arch in table["architecture"] if arch["model_type"] == model_type)
        renames = architecture.get("config_names", {})
        fields = {renames.get(key, key): value for key, value in row.items()}
    # random weights decode no text: no eos (a greedy run never stops early), no bos, no pad
    fields.update(bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return model_type, fields


def build_model(name: str, device: str, dtype):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type, fields = config_fields(name)
    config = AutoConfig.for_model(model_type, **fields)
    torch.manual_seed(WEIGHT_SEED)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    model.eval()
    model.generation_config.pad_token_id = 0  # silences a warning; nothing is padded
    return model


def prompt(vocab_size: int, batch: int, tokens: int, device: str):
    import torch

    generator = torch.Generator().manual_seed(PROMPT_SEED)
    return torch.randint(0, vocab_size, (batch, tokens), generator=generator).to(device)


# -- the three ways to generate --------------------------------------------------------------------------------
def hf_generate(model, static: bool):
    import torch

    extra = {"cache_implementation": "static"} if static else {}

    def generate(ids, n):
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False, **extra)
        return out[:, ids.shape[1]:]

    return generate


def hand_loop(model, prompt_tokens: int, new_tokens: int, device: str, compile_step: bool, fullgraph: bool):
    """gpt-fast's decode loop (github.com/pytorch-labs/gpt-fast generate.py), written out."""
    import torch
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=prompt_tokens + new_tokens)
    prefill_positions = torch.arange(prompt_tokens, device=device)
    step_positions = [torch.tensor([prompt_tokens + i], device=device) for i in range(new_tokens - 1)]

    def step(token, position):
        logits = model(token, past_key_values=cache, cache_position=position, use_cache=True).logits
        return torch.argmax(logits[:, -1], dim=-1, keepdim=True)

    if compile_step:
        step = torch.compile(step, mode="reduce-overhead", fullgraph=fullgraph)

    def generate(ids, n):
        with torch.inference_mode():
            cache.reset()
            logits = model(ids, past_key_values=cache, cache_position=prefill_positions, use_cache=True,
                           logits_to_keep=1).logits
            token = torch.argmax(logits[:, -1], dim=-1, keepdim=True)
            out = [token]
            for position in step_positions[: n - 1]:
                token = step(token, position).clone()  # a CUDA-graph replay overwrites its output
                out.append(token)
            return torch.cat(out, dim=1)

    return generate


# -- timing ----------------------------------------------------------------------------------------------------
def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def timed(call, device: str) -> float:
    sync(device)
    start = time.perf_counter()
    call()
    sync(device)
    return time.perf_counter() - start


def measure(generate, ids, new_tokens: int, device: str, repeats: int) -> dict:
    """Warm-up, then `repeats` alternating rounds of generate(1) and generate(new_tokens)."""
    started = time.perf_counter()
    tokens = generate(ids, new_tokens)  # the first call compiles what the variant compiles
    generate(ids, 1)
    warmup_s = time.perf_counter() - started
    firsts, fulls = [], []
    gc.collect()
    gc.disable()  # as timeit does: no collection lands inside one timed call
    try:
        for _ in range(repeats):
            firsts.append(timed(lambda: generate(ids, 1), device))
            fulls.append(timed(lambda: generate(ids, new_tokens), device))
    finally:
        gc.enable()
    first, full = statistics.median(firsts), statistics.median(fulls)
    decode_s = (full - first) / (new_tokens - 1)
    return {"tokens": tokens, "first_s": first, "full_s": full, "decode_s": decode_s, "warmup_s": warmup_s,
            "samples_first_s": firsts, "samples_full_s": fulls}


# -- the run ---------------------------------------------------------------------------------------------------
def done_keys(path: Path) -> set:
    keys = set()
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a kill
            if row.get("tokens_per_s"):
                keys.add((row["model"], row["dtype"], row["batch"], row["variant"], row["prompt_tokens"], row["new_tokens"]))
    return keys


def append(path: Path, row: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(json.dumps(row) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def run(args) -> list:
    import torch
    import transformers

    device = args.device
    compile_step = args.compile == "on" or (args.compile == "auto" and device.startswith("cuda"))
    out = Path(args.out) if args.out else None
    skip = done_keys(out) if (out and args.resume) else set()
    model = build_model(args.config, device, getattr(torch, DTYPES[args.dtype]))
    rows = []
    for batch in args.batch:
        ids = prompt(model.config.vocab_size, batch, args.prompt_tokens, device)
        reference_tokens = None
        for variant in args.variants:
            key = (args.config, args.dtype, batch, variant, args.prompt_tokens, args.new_tokens)
            if key in skip:
                log(f"{args.config} b{batch} {variant}: already in {out}, skipped")
                continue
            if variant == "fade-loop":
                generate = hand_loop(model, args.prompt_tokens, args.new_tokens, device, compile_step, args.fullgraph)
            else:
                generate = hf_generate(model, static=variant == "hf-static")
            if reference_tokens is None and variant != "hf-generate":
                reference_tokens = hf_generate(model, static=False)(ids, args.new_tokens)
            started = time.perf_counter()
            timing = measure(generate, ids, args.new_tokens, device, args.repeats)
            tokens = timing.pop("tokens")
            if variant == "hf-generate":
                reference_tokens = tokens
            row = {
                "model": args.config, "dtype": args.dtype, "device": device, "batch": batch, "variant": variant,
                "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
                "tokens_per_s": batch / timing["decode_s"] if timing["decode_s"] > 0 else None,
                "decode_ms_per_step": timing["decode_s"] * 1e3, "ttft_ms": timing["first_s"] * 1e3,
                "generate_n_ms": timing["full_s"] * 1e3, "warmup_s": timing["warmup_s"], "repeats": args.repeats,
                "samples_first_s": timing["samples_first_s"], "samples_full_s": timing["samples_full_s"],
                "tokens_match_hf_generate": bool(torch.equal(tokens.cpu(), reference_tokens.cpu())),
                "tokens": tokens.tolist() if args.keep_tokens else None,
                "compiled": compile_step if variant == "fade-loop" else (
                    getattr(model, "_compiled_call", None) is not None if variant == "hf-static" else False),
                "fullgraph": args.fullgraph if variant == "fade-loop" and compile_step else None,
                "wall_s": time.perf_counter() - started,
                "torch": torch.__version__, "transformers": transformers.__version__,
                "gpu": torch.cuda.get_device_name(device) if device.startswith("cuda") else None,
                "script": "benchmarks/llm_reference.py",
            }
            rows.append(row)
            if out:
                append(out, row)
            tps = row["tokens_per_s"]
            log(f"{args.config} b{batch} {variant}: {tps:.1f} tokens/s, ttft {row['ttft_ms']:.1f} ms, "
                f"{row['wall_s']:.0f} s" if tps else f"{args.config} b{batch} {variant}: decode time not resolved")
            del generate
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
    return rows


def table(rows: list) -> str:
    lines = ["| model | dtype | batch | variant | tokens/s | decode ms/step | TTFT ms | tokens = hf-generate |",
             "|---|---|---:|---|---:|---:|---:|---|"]
    for row in rows:
        tps = f"{row['tokens_per_s']:.1f}" if row["tokens_per_s"] else "n/a"
        lines.append(f"| {row['model']} | {row['dtype']} | {row['batch']} | {row['variant']} | {tps} | "
                     f"{row['decode_ms_per_step']:.3f} | {row['ttft_ms']:.1f} | {row['tokens_match_hf_generate']} |")
    return "\n".join(lines)


def read_jsonl(path: Path) -> list:
    rows = []
    for line in Path(path).read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
    return rows


def against(fade_path: str, reference_path: str, bar_pct: float) -> tuple:
    """(Markdown table, all within the bar): FADE's decode records (`fade bench llm` JSONL, read as plain JSON)
    beside this script's rows for the same (model, dtype, batch, variant, prompt, new tokens); the latest row of
    each side counts."""
    fade_rows = {}
    for record in read_jsonl(fade_path):
        params = record.get("params") or {}
        if record.get("suite") != "llm" or record.get("unit") != "tokens/s" or record.get("status") != "ok":
            continue
        model = record["case_id"].split("/")[1]
        key = (model, params["dtype"], params["batch"], params["variant"], params["prompt_tokens"], params["new_tokens"])
        fade_rows[key] = record
    mine = {}
    for row in read_jsonl(reference_path):
        if row.get("tokens_per_s"):
            mine[(row["model"], row["dtype"], row["batch"], row["variant"], row["prompt_tokens"], row["new_tokens"])] = row
    lines = [f"| model | dtype | batch | variant | FADE tokens/s | reference tokens/s | FADE / reference | within {bar_pct:g}% "
             "| roofline tokens/s | FADE % of roofline | reference % of roofline |",
             "|---|---|---:|---|---:|---:|---:|---|---:|---:|---:|"]
    ok = True
    for key in sorted(set(fade_rows) | set(mine), key=lambda k: (k[0], k[1], k[2], VARIANTS.index(k[3]) if k[3] in VARIANTS else 9)):
        record, row = fade_rows.get(key), mine.get(key)
        fade_tps = record["value"] if record else None
        ref_tps = row["tokens_per_s"] if row else None
        roofline = ((record or {}).get("extra") or {}).get("roofline") or {}
        line_tps = roofline.get("roofline_tokens_per_s")
        ratio = 100 * fade_tps / ref_tps if fade_tps and ref_tps else None
        within = None if ratio is None else abs(ratio - 100) <= bar_pct
        ok = ok and bool(within)

        def num(value, suffix=""):
            return "n/a" if value is None else f"{value:.1f}{suffix}"

        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {num(fade_tps)} | {num(ref_tps)} | {num(ratio, '%')} | "
                     f"{'n/a' if within is None else ('yes' if within else 'NO')} | {num(line_tps)} | "
                     f"{num(100 * fade_tps / line_tps if fade_tps and line_tps else None, '%')} | "
                     f"{num(100 * ref_tps / line_tps if ref_tps and line_tps else None, '%')} |")
    return "\n".join(lines), ok


def log(message: str) -> None:
    print(f"llm_reference: {message}", file=sys.stderr, flush=True)


def int_list(text: str) -> list:
    return [int(part) for part in text.split(",") if part.strip()]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="llama-3.1-8b", help="a name in src/fade/data/llm.toml or a config.json")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--dtype", default="bf16", choices=DTYPES)
    parser.add_argument("--batch", type=int_list, default=[1, 8, 32], help="comma-separated (default 1,8,32)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated of {', '.join(VARIANTS)}")
    parser.add_argument("--prompt-tokens", type=int, default=512, help="as fade bench llm (default 512)")
    parser.add_argument("--new-tokens", type=int, default=128, help="as fade bench llm (default 128)")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds of generate(1) + generate(N) (default 5)")
    parser.add_argument("--compile", default="auto", choices=("auto", "on", "off"),
                        help="fade-loop's step: auto compiles on CUDA only")
    parser.add_argument("--no-fullgraph", dest="fullgraph", action="store_false", help="compile the step with fullgraph=False")
    parser.add_argument("--out", help="JSONL file the rows are appended to")
    parser.add_argument("--resume", action="store_true", help="skip (model, dtype, batch, variant, sizes) already in --out")
    parser.add_argument("--keep-tokens", action="store_true", help="store each variant's greedy tokens in its row")
    parser.add_argument("--against", metavar="FADE.jsonl",
                        help="measure nothing: print FADE's decode records beside --out's rows (exit 1 if any pair "
                             "is missing or differs by more than --bar)")
    parser.add_argument("--bar", type=float, default=5.0, help="the agreement bar of --against, in %% (default 5)")
    args = parser.parse_args(argv)
    if args.against:
        if not args.out:
            parser.error("--against needs --out (this script's rows)")
        for path in (args.against, args.out):  # --against measures nothing: both files must be there already
            if not Path(path).is_file():
                parser.error(f"--against compares two files and measures nothing; {path} does not exist (run the "
                             "reference without --against first)")
        text, ok = against(args.against, args.out, args.bar)
        print(text)
        return 0 if ok else 1
    args.variants = [v for v in args.variants.split(",") if v]
    for variant in args.variants:
        if variant not in VARIANTS:
            parser.error(f"--variants: unknown {variant!r} (known: {', '.join(VARIANTS)})")
    if args.new_tokens < 2 or args.repeats < 1 or not args.batch or min(args.batch) < 1:
        parser.error("--new-tokens >= 2, --repeats >= 1 and positive batch sizes")
    rows = run(args)
    print(table(rows))
    return 0 if all(row["tokens_per_s"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
