"""Session 22, GPU 1: one int8 weight-only decode trial of the 8B shape on the H200 as `fade tune --generate`
builds it (generate_trial.prepare_decode's steps, in order), each phase timed: what makes the trial cost more
than 12x a plain reduce-overhead one (results/s22-h200/A), and issue 29's int8 row (tokens/s, bytes read, the
gate's KL and top-1 agreement). Usage: python int8.py CONFIG OUT.json [compile mode]."""
import json
import sys
import time

import torch

from fade.act.tune import generate_trial as gt
from fade.act.tune.tuner import TUNE_TIMING
from fade.analyze import llm
from fade.analyze.llm_table import resolve_config
from fade.measure.suites.llm import gate, generation
from fade.measure.timing import measure

config, out = sys.argv[1], sys.argv[2]
mode = sys.argv[3] if len(sys.argv) > 3 else "reduce-overhead"
knobs = {"weight_quant": "int8", "kv_cache": "static", "decode_compile": mode}
import os

prompt, new, batch, device = 128, 64, 1, os.environ.get("DEVICE", "cuda:0")
phases = {}
record = {"config": config, "knobs": knobs, "prompt_tokens": prompt, "new_tokens": new, "phases_s": phases}
started = last = time.monotonic()


def mark(name):
    global last
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    now = time.monotonic()
    phases[name] = round(now - last, 2)
    last = now
    print(f"[{now - started:.0f}s] {name}: {phases[name]} s", flush=True)
    with open(out, "w") as handle:
        json.dump(record, handle, indent=1)


shape = resolve_config(config)
model, floor = gt._model(shape, "bf16", device)
mark("build model, fp32 floor, cast")
quantized = gt.candidate_model(model, knobs)
mark("quantize a copy (torchao)")
options = gt.decode_options(knobs)
loop = generation.FadeLoop(quantized, prompt_tokens=prompt, new_tokens=new, device=device, **options)
ids = generation.prompt_ids(shape.vocab_size, batch, prompt, device)
loop.generate(ids, new)
mark("first generate (compile of the step)")
loop.generate(ids, new)
mark("second generate (warm)")
tokens, source = gate.gate_tokens(shape)
checked = generation.FadeLoop(quantized, prompt_tokens=gate.GATE_PROMPT, new_tokens=len(tokens) - gate.GATE_PROMPT,
                              device=device, **options)
gated = gate.gate(model, checked.forced, torch.tensor([tokens], device=device), dtype="bf16", floor=floor)
mark("gate (its loop compiles the logits step)")
timing = measure(lambda: loop.generate(ids, new), device=device, **TUNE_TIMING)
mark("timing")
tokens_s = batch * new / timing.median_s
q_bytes, ref_bytes = generation.weight_bytes(quantized), generation.weight_bytes(model)
bf16_step = llm.mean_decode_bytes_per_step(shape, "bf16", batch, prompt, new)
step_bytes = bf16_step - (ref_bytes - q_bytes)  # the linear layers' weights read as int8 + scales
record.update({"tokens_per_s": tokens_s, "relative_iqr": timing.relative_iqr, "n": len(timing.samples_s),
               "weight_bytes": q_bytes, "reference_weight_bytes": ref_bytes, "bytes_per_step": step_bytes,
               "bf16_bytes_per_step": bf16_step, "effective_gbs_whole_run": tokens_s * step_bytes / 1e9,
               "gate": gated, "gate_tokens": source})
mark("done")
print(json.dumps({k: v for k, v in record.items() if k != "gate"}, indent=1))
print(json.dumps({k: gated.get(k) for k in ("verdict", "top1_agreement", "top1_agreement_with_near_ties", "kl_mean", "kl_max", "kl_bound")}, default=str))
