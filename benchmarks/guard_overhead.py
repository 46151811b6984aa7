"""What fade.guard costs on a resnet50 training step: no guard vs sampled mode vs full (warn) mode.

Workload: torchvision's resnet50 (weights=None; a compact copy of the same architecture below when torchvision
is missing), SGD with momentum, cross-entropy on fixed random images and labels already on the device, so no
data loading and no host work. Batch 64 at 224x224 by default. The step is clean: the full-mode guard must
report nothing (checked, and recorded as `offences_seen`).

Method:
- Warm-up: WARMUP_STEPS steps without a guard (cuDNN autotuning with cudnn.benchmark=True, allocator growth),
  then one step under each guard variant (first-call costs of the guard: imports, hooks).
- Sample: one block of BLOCK_STEPS consecutive steps under one variant. The guard is entered before the block
  and left after it (its enter/exit cost is inside the sample). BLOCK_STEPS is a multiple of the sampled
  guard's `sample_every`, so every sampled block holds exactly the same number of inspected steps.
- Sync method: on CUDA, a torch.cuda.Event pair brackets each block and the host synchronizes once, after the
  end event and outside the guard (so the guard never sees the benchmark's own sync). Elsewhere,
  time.perf_counter with torch.<device>.synchronize() at both ends. `host_ms_per_step` is also recorded: the
  time until the host has issued the block, before the final sync; it shows the guard's host cost even when
  the GPU hides it.
- Replicates: REPEATS rounds; each round runs every variant once, in an order rotated per round so drift
  (clocks, temperature) spreads over variants.
- Statistic: median and IQR of per-step milliseconds over the rounds; overhead = median(variant) /
  median(no guard) - 1. Sampled mode passes if its overhead is at most SAMPLED_OVERHEAD_BUDGET.
- Exclusions: none; every block is kept. Wall time on an H100 at the defaults: about one minute.

    python benchmarks/guard_overhead.py --json results/guard_overhead.json              # GPU
    python benchmarks/guard_overhead.py --device standin --batch 2 --image-size 32 \\
        --block 2 --sample-every 2 --repeats 2 --warmup 1 --json /tmp/guard_overhead.json   # CPU smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from fade import __version__
from fade.hostwork import Guard

SCHEMA_VERSION = 1
WARMUP_STEPS = 15  # cuDNN autotuning and allocator growth settle within a few steps of resnet50
BLOCK_STEPS = 20  # one sample; a multiple of SAMPLE_EVERY
REPEATS = 7  # rounds; the median of 7 is robust to one or two disturbed blocks
SAMPLE_EVERY = 20  # the sampled guard inspects one step in this many (fade.guard's default)
SAMPLED_OVERHEAD_BUDGET = 0.03  # the issue's target: sampled mode at most 3% slower than no guard
VARIANTS = ("none", "sampled", "full")


# ---- the model: torchvision's resnet50, or the same architecture written out ----------------------------------

class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        width, out = planes, planes * self.expansion
        self.conv1, self.bn1 = nn.Conv2d(inplanes, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or inplanes != out:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        return F.relu(self.bn3(self.conv3(x)) + identity)


class ResNet50(nn.Module):
    """He et al. 2015, 50 layers: stages of 3, 4, 6, 3 bottlenecks; the layout of torchvision's resnet50."""

    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, inplanes = [], 64
        for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for index in range(blocks):
                layers.append(Bottleneck(inplanes, planes, stride if index == 0 else 1))
                inplanes = planes * Bottleneck.expansion
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(inplanes, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def build_resnet50() -> tuple[nn.Module, str]:
    try:
        import torchvision

        return torchvision.models.resnet50(weights=None), f"torchvision {torchvision.__version__} resnet50"
    except ImportError:
        return ResNet50(), "benchmarks/guard_overhead.py ResNet50 (torchvision not installed)"


# ---- timing -------------------------------------------------------------------------------------------------

def make_step(model, optimizer, images, labels, amp: str):
    autocast_dtype = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}[amp]

    def step():
        autocast = (torch.autocast(images.device.type, dtype=autocast_dtype) if autocast_dtype is not None
                    else contextlib.nullcontext())
        with autocast:
            loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def synchronize(device: torch.device) -> None:
    module = getattr(torch, device.type, None)
    if device.type != "cpu" and module is not None and hasattr(module, "synchronize"):
        module.synchronize()


def time_block(step, steps: int, guard: Guard | None, device: torch.device) -> tuple[float, float]:
    """(device ms per step, host issue ms per step) for one block of `steps` steps."""
    synchronize(device)
    use_events = device.type == "cuda"
    if use_events:
        start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start_event.record()
    host_start = time.perf_counter()
    if guard is None:
        for _ in range(steps):
            step()
    else:
        with guard:
            for _ in range(steps):
                step()
    host_issue_s = time.perf_counter() - host_start
    if use_events:
        end_event.record()
        torch.cuda.synchronize()  # sync point, outside the guard
        elapsed_ms = start_event.elapsed_time(end_event)
    else:
        synchronize(device)
        elapsed_ms = (time.perf_counter() - host_start) * 1e3
    return elapsed_ms / steps, host_issue_s * 1e3 / steps


def ops_per_step(step) -> int:
    from torch.utils._python_dispatch import TorchDispatchMode

    class CountOps(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            CountOps.count += 1
            return func(*args, **(kwargs or {}))

    with CountOps():
        step()
    return CountOps.count


def summarize(samples: list[float]) -> dict:
    ordered = sorted(samples)
    quartiles = statistics.quantiles(ordered, n=4, method="inclusive") if len(ordered) > 1 else ordered * 3
    return {"median": statistics.median(ordered), "q1": quartiles[0], "q3": quartiles[2],
            "iqr": quartiles[2] - quartiles[0], "min": ordered[0], "max": ordered[-1]}


def run(args) -> dict:
    if args.device == "standin":
        from fade.hostwork import standin

        standin.register()
    device = torch.device(args.device)
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    model, model_source = build_resnet50()
    model = model.to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(args.batch, 3, args.image_size, args.image_size, device=device)
    labels = torch.randint(0, 1000, (args.batch,), device=device)
    step = make_step(model, optimizer, images, labels, args.amp)
    guard_device = None if device.type == "cpu" else device.type
    guards = {"none": None,
              "sampled": Guard("sampled", guard_device, sample_every=args.sample_every, quiet=True),
              "full": Guard("warn", guard_device, quiet=True)}
    started = time.perf_counter()
    for _ in range(args.warmup):
        step()
    for name in ("sampled", "full"):
        time_block(step, 1 if name == "full" else args.sample_every, guards[name], device)
    operations = ops_per_step(step)
    samples = {name: [] for name in VARIANTS}
    host_samples = {name: [] for name in VARIANTS}
    for round_index in range(args.repeats):
        order = VARIANTS[round_index % 3:] + VARIANTS[:round_index % 3]
        for name in order:
            device_ms, host_ms = time_block(step, args.block, guards[name], device)
            samples[name].append(device_ms)
            host_samples[name].append(host_ms)
    results = {name: {"ms_per_step": summarize(samples[name]), "host_ms_per_step": summarize(host_samples[name]),
                      "samples_ms": samples[name], "host_samples_ms": host_samples[name]} for name in VARIANTS}
    baseline = results["none"]["ms_per_step"]["median"]
    for name in ("sampled", "full"):
        results[name]["overhead"] = results[name]["ms_per_step"]["median"] / baseline - 1
        extra_host_ms = results[name]["host_ms_per_step"]["median"] - results["none"]["host_ms_per_step"]["median"]
        results[name]["host_us_per_op"] = extra_host_ms * 1e3 / operations  # extra host time per op, all steps
    offences = guards["full"].report.offence_count
    return {
        "schema_version": SCHEMA_VERSION, "fade_version": __version__, "benchmark": "guard_overhead",
        "spec": {"model": model_source, "batch": args.batch, "image_size": args.image_size, "amp": args.amp,
                 "block_steps": args.block, "repeats": args.repeats, "warmup_steps": args.warmup,
                 "sample_every": args.sample_every, "ops_per_step": operations},
        "environment": {"torch": torch.__version__, "python": platform.python_version(), "device": str(device),
                        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else device.type,
                        "cudnn_benchmark": torch.backends.cudnn.benchmark,
                        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                        "tf32_cudnn": torch.backends.cudnn.allow_tf32},
        "results": results,
        "offences_seen": offences,
        "sampled_within_budget": results["sampled"]["overhead"] <= SAMPLED_OVERHEAD_BUDGET,
        "sampled_budget": SAMPLED_OVERHEAD_BUDGET,
        "wall_s": round(time.perf_counter() - started, 1),
    }


def print_table(result: dict) -> None:
    spec, results = result["spec"], result["results"]
    print(f"fade.guard overhead: {spec['model']}, batch {spec['batch']}, {spec['image_size']}px, amp {spec['amp']}, "
          f"{spec['ops_per_step']} ops/step on {result['environment']['device_name']}")
    print(f"{'variant':8s} {'ms/step':>9s} {'IQR':>7s} {'overhead':>9s} {'host ms/step':>13s} {'host us/op':>11s}")
    for name in VARIANTS:
        stats, host = results[name]["ms_per_step"], results[name]["host_ms_per_step"]
        overhead = f"{results[name]['overhead'] * 100:+.1f}%" if "overhead" in results[name] else "-"
        per_op = f"{results[name]['host_us_per_op']:.1f}" if "host_us_per_op" in results[name] else "-"
        print(f"{name:8s} {stats['median']:9.2f} {stats['iqr']:7.2f} {overhead:>9s} {host['median']:13.2f} "
              f"{per_op:>11s}")
    verdict = "within" if result["sampled_within_budget"] else "OVER"
    print(f"sampled mode is {verdict} the {result['sampled_budget'] * 100:.0f}% budget; offences seen in the clean "
          f"step: {result['offences_seen']}; medians of {spec['repeats']} blocks of {spec['block_steps']} steps; "
          f"wall {result['wall_s']} s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="torch device; 'standin' is FADE's host-backed stand-in (smoke runs without a GPU)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--amp", choices=("none", "bf16", "fp16"), default="none")
    parser.add_argument("--block", type=int, default=BLOCK_STEPS, help="steps per timed block")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--warmup", type=int, default=WARMUP_STEPS)
    parser.add_argument("--sample-every", type=int, default=SAMPLE_EVERY)
    parser.add_argument("--json", metavar="FILE", help="write the result here")
    args = parser.parse_args(argv)
    if args.block % args.sample_every:
        parser.error(f"--block ({args.block}) must be a multiple of --sample-every ({args.sample_every})")
    result = run(args)
    print_table(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
