"""One hand configuration of one case, timed with a plain loop as a user would write it: the independent
side of issue 26's check of `fade tune` (benchmarks/tune_matrix.py --hand starts one process per configuration).

    python benchmarks/hand_config.py --model resnet50 --mode train --batch 64 --precision amp-bf16 \\
        --compile reduce-overhead --channels-last --json out/resnet50-train/amp-bf16+ro.json
    python benchmarks/hand_config.py --model benchmarks.outside_zoo:convnext_tiny --mode train --batch 32 ...

Nothing of FADE's measurement machinery runs here (no StepRunner, no fade.measure.timing, no pinned flags):
only the workload is FADE's, so both sides step the same network, batch, loss and optimizer.

Build
    torch.manual_seed(WEIGHT_SEED), then fade.measure.zoo.workload.build_workload(model, batch, size, device),
    exactly as `fade tune` builds it (a zoo name, or `module:function` for a model outside the zoo). Then by
    hand: inference first gives BatchNorm the batch's running statistics (one train-mode forward without
    gradients, as FADE's inference trials calibrate): a random network in eval mode with fresh statistics
    shrinks its activations toward denormals, which a CPU computes far slower (resnet18 at 32 px, batch 2,
    NCHW: 553 ms a step uncalibrated, 8.5 ms calibrated, measured on the 2-core dev machine). Then
    model.train() or model.eval(); --channels-last: model.to(memory_format=torch.channels_last) and the
    4-D float inputs likewise; --compile MODE: torch.compile(model, mode=MODE) ("default": torch.compile(model)).
Precision
    fp32 is PyTorch's defaults: no TF32 switch touched (cuBLAS fp32 matmuls, cuDNN convolutions may use TF32,
    as torch ships). tf32: torch.set_float32_matmul_precision("high"). amp-bf16 / amp-fp16: the forward and the
    loss under torch.autocast(device, dtype); amp-fp16 training through torch.amp.GradScaler.
Other torch-level knobs of a tuning file, each one flag: --cudnn-benchmark (torch.backends.cudnn.benchmark =
    True), --optimizer-impl foreach|fused (the workload's optimizer rebuilt with foreach=True or fused=True),
    --sdpa-backend (every step inside torch.nn.attention.sdpa_kernel). Env knobs are the caller's: it starts
    this process with the tuning file's env (tune_matrix.py does).
Step
    Training: optimizer.zero_grad(set_to_none=True), forward, loss, backward (scaled for amp-fp16),
    optimizer.step(). Inference: a forward under torch.inference_mode(). The learning rate is the workload's,
    as a user runs it. FADE's timed steps instead run at learning rate 0 (step.runner.TIMED_LEARNING_RATE: the
    weights stay put so hundreds of steps on one fixed batch cannot diverge); the speed is the same, because
    every kernel of the update still runs (SGD's and AdamW's foreach/fused updates have no zero-rate shortcut)
    and the values of the weights do not change which kernels run. A run that diverges here is caught by the
    finiteness check below instead.
Warm-up
    At least MIN_WARMUP_STEPS steps (MIN_WARMUP_STEPS_COMPILED compiled: the first call compiles, the next
    ones record CUDA graphs under reduce-overhead), each synchronized and timed, until a step takes under
    SETTLED_RATIO x the median of the SETTLED_WINDOW steps before it; capped at MAX_WARMUP_STEPS steps or
    MAX_WARMUP_S seconds after the first step (then `warmup.settled` is false). compile_s is the first
    step's wall time when compiled (Dynamo + Inductor + one run).
Timing
    TIMED_BLOCKS blocks of equal step count, each block bracketed by torch.cuda.synchronize() (the device
    under test; nothing to sync on the CPU) and time.perf_counter(). Steps per block: enough for MIN_BLOCK_S
    at the warm-up's last step time, at least ceil(MIN_TIMED_STEPS / TIMED_BLOCKS), at most
    MAX_STEPS_PER_BLOCK. Per-step time of a block = block time / steps; reported: median and IQR over the
    blocks (linear-interpolated quartiles), samples/s = samples per step / median. No block is discarded.
Check
    After timing, the last loss (training) or output (inference) is read once: `loss_finite` false marks a
    run that diverged (tune_matrix does not count it).
Output
    JSON (schema_version, config, figures, environment: torch, device name, host load average) written
    atomically with fade.files.atomic_write_text; a run that raised writes status "failed" with the reason
    and exits 1.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

SCHEMA_VERSION = 1
KIND = "fade-hand-config"
PRECISIONS = ("fp32", "tf32", "amp-bf16", "amp-fp16")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")
OPTIMIZER_IMPLS = ("default", "foreach", "fused")
SDPA_BACKENDS = {"default": None, "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION",
                 "math": "MATH"}  # fmt: skip
AUTOCAST_DTYPES = {"amp-bf16": "bfloat16", "amp-fp16": "float16"}

MIN_WARMUP_STEPS = 3  # eager: the first step pays cuDNN/cuBLAS plan selection and allocator growth
MIN_WARMUP_STEPS_COMPILED = 6  # step 1 compiles; under reduce-overhead the next calls warm up and record the CUDA graphs
SETTLED_RATIO = 1.2  # a step under 1.2x its predecessors' median: the compile/record transients are over
SETTLED_WINDOW = 3  # steps whose median the newest step is compared with
MAX_WARMUP_STEPS = 60  # cap: a step that never settles (a noisy host) is timed anyway, flagged unsettled
MAX_WARMUP_S = 30.0  # cap after the first step, so a slow case cannot eat the caller's child timeout
TIMED_BLOCKS = 7  # >= 5 blocks: the IQR needs a few; one sync per block
MIN_TIMED_STEPS = 21  # >= 20 timed steps in all
MIN_BLOCK_S = 0.1  # a block this long makes one synchronize's ~10 us cost < 0.01% of it
MAX_STEPS_PER_BLOCK = 500  # tiny CPU workloads: bounded run time


def quantile(values: list, q: float) -> float:
    """Linear-interpolated quantile of `values` (numpy's default method), written out so this file needs no
    timing code of FADE's."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a zoo name (resnet50) or module:function")
    parser.add_argument("--mode", required=True, choices=("train", "infer"))
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--size", type=int, default=None, help="image side or sequence length (default: the zoo's)")
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS, help="fp32 = PyTorch's defaults")
    parser.add_argument("--compile", default="off", choices=COMPILE_MODES)
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--cudnn-benchmark", action="store_true")
    parser.add_argument("--optimizer-impl", default="default", choices=OPTIMIZER_IMPLS)
    parser.add_argument("--sdpa-backend", default="default", choices=tuple(SDPA_BACKENDS))
    parser.add_argument("--device", default=None, help="cuda (when available) or cpu")
    parser.add_argument("--json", required=True, help="where to write the result")
    args = parser.parse_args(argv)
    if args.batch <= 0:
        parser.error(f"--batch {args.batch}: must be > 0")
    return args


def config_of(args, device: str) -> dict:
    """What was asked, echoed in the result."""
    return {"model": args.model, "mode": args.mode, "batch": args.batch, "size": args.size, "precision": args.precision,
            "compile": args.compile, "channels_last": args.channels_last, "cudnn_benchmark": args.cudnn_benchmark,
            "optimizer_impl": args.optimizer_impl, "sdpa_backend": args.sdpa_backend, "device": device}  # fmt: skip


def with_implementation(optimizer, implementation: str):
    """`optimizer` rebuilt with foreach=True or fused=True, its hyperparameters kept (as a user writes
    torch.optim.AdamW(params, lr=..., fused=True))."""
    if implementation == "default":
        return optimizer
    import inspect

    accepted = set(inspect.signature(type(optimizer).__init__).parameters) - {"self", "params", "foreach", "fused"}
    hyper = {key: value for key, value in optimizer.defaults.items() if key in accepted}
    parameters = [parameter for group in optimizer.param_groups for parameter in group["params"]]
    return type(optimizer)(parameters, **hyper, **{implementation: True})


def calibrate_batchnorm(model, inputs) -> None:
    """BatchNorm running statistics of the batch, as a trained network has them: one train-mode forward
    without gradients at momentum None, momentum restored after (a batch of one value per channel is left as
    it is). Inference only (module docstring, "Build")."""
    import torch

    norms = [module for module in model.modules()
             if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.track_running_stats]  # fmt: skip
    momenta = [module.momentum for module in norms]
    for module in norms:
        module.reset_running_stats()
        module.momentum = None  # cumulative average
    try:
        with torch.no_grad():
            model.train()(*inputs)
    except ValueError:  # "Expected more than 1 value per channel when training"
        for module in norms:
            module.reset_running_stats()
    finally:
        for module, momentum in zip(norms, momenta):
            module.momentum = momentum


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def first_float_tensor(value):
    """The loss, or the first floating tensor of a model output (a tensor, tuple or ModelOutput)."""
    import torch
    from torch.utils._pytree import tree_leaves

    if torch.is_tensor(value):
        return value
    if isinstance(value, dict):  # transformers' ModelOutput is a dict; its leaves in field order
        value = list(value.values())
    return next((leaf for leaf in tree_leaves(value) if torch.is_tensor(leaf) and leaf.is_floating_point()), None)


def run(args) -> dict:
    """Build, warm up and time one configuration; the result's figures (module docstring)."""
    import contextlib

    import torch

    from fade.measure.step.runner import WEIGHT_SEED
    from fade.measure.zoo.workload import build_workload

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    device_type = device.split(":", 1)[0]
    training = args.mode == "train"
    started = time.perf_counter()
    if args.precision == "tf32":
        torch.set_float32_matmul_precision("high")
    if args.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True

    torch.manual_seed(WEIGHT_SEED)
    workload = build_workload(args.model, args.batch, args.size, device)
    model = workload.model
    inputs = workload.inputs
    if not training:
        calibrate_batchnorm(model, inputs)
    model.train(training)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
        inputs = tuple(value.contiguous(memory_format=torch.channels_last)
                       if torch.is_tensor(value) and value.dim() == 4 and value.is_floating_point() else value
                       for value in inputs)  # fmt: skip
    optimizer = with_implementation(workload.optimizer(), args.optimizer_impl) if training else None
    if args.compile == "default":
        model = torch.compile(model)
    elif args.compile != "off":
        model = torch.compile(model, mode=args.compile)
    dtype = getattr(torch, AUTOCAST_DTYPES[args.precision]) if args.precision in AUTOCAST_DTYPES else None
    scaler = torch.amp.GradScaler(device_type) if training and args.precision == "amp-fp16" else None
    backend = SDPA_BACKENDS[args.sdpa_backend]
    build_s = time.perf_counter() - started

    def contexts():
        stack = contextlib.ExitStack()
        if dtype is not None:
            stack.enter_context(torch.autocast(device_type, dtype=dtype))
        if backend is not None:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            stack.enter_context(sdpa_kernel(getattr(SDPBackend, backend)))
        return stack

    def step():
        if not training:
            with torch.inference_mode(), contexts():
                return model(*inputs)
        optimizer.zero_grad(set_to_none=True)
        with contexts():
            loss = workload.loss(model(*inputs))
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss

    # warm-up: every step synchronized and timed
    warmup_s = []
    minimum = MIN_WARMUP_STEPS if args.compile == "off" else MIN_WARMUP_STEPS_COMPILED
    settled = False
    while True:
        tick = time.perf_counter()
        step()
        synchronize(device)
        warmup_s.append(time.perf_counter() - tick)
        if len(warmup_s) >= max(minimum, SETTLED_WINDOW + 1):
            previous = quantile(warmup_s[-SETTLED_WINDOW - 1 : -1], 0.5)
            if warmup_s[-1] < SETTLED_RATIO * previous:
                settled = True
                break
        if len(warmup_s) >= MAX_WARMUP_STEPS or sum(warmup_s[1:]) >= MAX_WARMUP_S:
            break

    steps_per_block = max(math.ceil(MIN_TIMED_STEPS / TIMED_BLOCKS), math.ceil(MIN_BLOCK_S / max(warmup_s[-1], 1e-9)))
    steps_per_block = min(steps_per_block, MAX_STEPS_PER_BLOCK)
    block_step_s = []
    result = None
    for _ in range(TIMED_BLOCKS):
        synchronize(device)
        tick = time.perf_counter()
        for _ in range(steps_per_block):
            result = step()
        synchronize(device)
        block_step_s.append((time.perf_counter() - tick) / steps_per_block)

    last = first_float_tensor(result)
    last = last.detach() if last is not None else None
    loss_finite = bool(torch.isfinite(last.float()).all()) if last is not None else None  # a sync, after timing
    last_loss = float(last.float().mean()) if last is not None else None
    median_s = quantile(block_step_s, 0.5)
    iqr_s = quantile(block_step_s, 0.75) - quantile(block_step_s, 0.25)
    return {
        "status": "ok",
        "samples_per_step": workload.samples,
        "samples_per_s": workload.samples / median_s,
        "median_ms": 1e3 * median_s,
        "iqr_ms": 1e3 * iqr_s,
        "relative_iqr": iqr_s / median_s,
        "n": len(block_step_s),
        "steps_per_block": steps_per_block,
        "timed_steps": steps_per_block * len(block_step_s),
        "block_step_ms": [1e3 * value for value in block_step_s],
        "warmup": {"steps": len(warmup_s), "settled": settled, "seconds": sum(warmup_s), "last_step_ms": 1e3 * warmup_s[-1]},
        "first_step_s": warmup_s[0],
        "compile_s": warmup_s[0] if args.compile != "off" else None,
        "build_s": build_s,
        "loss_finite": loss_finite,
        "last_loss": last_loss,
        "learning_rate": optimizer.param_groups[0]["lr"] if optimizer is not None else None,
        "workload": {"description": workload.description, **workload.facts},
        "device_name": torch.cuda.get_device_name() if device_type == "cuda" else "cpu",
    }


def environment() -> dict:
    import torch

    try:
        load = list(os.getloadavg())
    except OSError:  # no load average on this platform
        load = None
    return {"torch": torch.__version__, "load_average": load, "cpu_count": os.cpu_count(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "python": sys.version.split()[0]}  # fmt: skip


def main(argv=None) -> int:
    from fade import __version__
    from fade.files import atomic_write_text

    args = parse_args(argv)
    wall_started = time.perf_counter()
    device = args.device
    code = 0
    try:
        import torch

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        args.device = device
        figures = run(args)
    except Exception as error:  # noqa: BLE001 - recorded: the caller counts a failed side, it does not crash
        figures = {"status": "failed", "reason": f"{type(error).__name__}: {error}".splitlines()[0][:500],
                   "traceback": traceback.format_exc()[-4000:]}  # fmt: skip
        code = 1
    record = {"schema_version": SCHEMA_VERSION, "kind": KIND, "fade_version": __version__, "config": config_of(args, device),
              **figures, **environment(), "wall_s": time.perf_counter() - wall_started}  # fmt: skip
    atomic_write_text(Path(args.json), json.dumps(record, indent=2) + "\n")
    line = (f"{record['status']}: {record['samples_per_s']:.4g} samples/s, median {record['median_ms']:.3f} ms "
            f"(IQR {100 * record['relative_iqr']:.1f}%)" if code == 0 else f"failed: {record['reason']}")  # fmt: skip
    print(f"hand_config {args.model} {args.mode} b{args.batch} {args.precision} compile={args.compile}"
          f"{' channels_last' if args.channels_last else ''}: {line}", file=sys.stderr)  # fmt: skip
    return code


if __name__ == "__main__":
    sys.exit(main())
