"""What CUDA's sync debug mode reports, and when, relative to the ops a dispatch mode sees: the facts
fade.guard's handling of sync-debug warnings rests on. Needs a CUDA/ROCm GPU.

For each snippet it logs, in order: each op the (bare, recording) dispatch mode sees, with the devices of its
tensors, and each Python warning, with whether it arrived while an op was still being dispatched (inside
`__torch_dispatch__`) or after. The question it answers: does a kernel's TORCH_WARN reach Python inside the
op's dispatch, or only when the outermost Python binding returns?

A second part calls a torch.compile'd function (forward, then a training step) a few times and logs, for each
sync-debug warning and each torch.cuda.synchronize() call, the chain of torch modules on the stack: which of
torch.compile's own syncs (compiling, autotuning) reach a guard, and from where.

    python benchmarks/guard_sync_debug_probe.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

events: list[str] = []
depth = [0]  # ops being dispatched right now


class Recording(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        devices = sorted({str(a.device) for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)})
        events.append(f"op {func} {devices} {({k: v for k, v in kwargs.items() if k == 'non_blocking'})}")
        depth[0] += 1
        try:
            return func(*args, **kwargs)
        finally:
            depth[0] -= 1


def show(message, category, filename, lineno, file=None, line=None):
    where = "inside op" if depth[0] else "after op"
    events.append(f"warning ({where}): {str(message)[:90]}")


def snippets(device):
    values = torch.randn(1024, device=device)
    loss = values.sum()
    host = torch.randn(1 << 20)
    pinned = torch.randn(1 << 10).pin_memory()
    index = torch.tensor([1, 5, 7])
    empty = torch.empty(0, device=device)
    stream_event = torch.cuda.Event()
    stream_event.record()
    return {
        "item": lambda: loss.item(),
        "cpu_index": lambda: values[index],
        "pageable_h2d": lambda: host.to(device),
        "pageable_h2d_non_blocking": lambda: host.to(device, non_blocking=True),
        "pinned_h2d_blocking": lambda: pinned.to(device),
        "d2h_cpu": lambda: values.cpu(),
        "d2h_cpu_empty": lambda: empty.cpu(),
        "d2h_non_blocking": lambda: values.to("cpu", non_blocking=True),
        "copy_into_cpu": lambda: torch.empty(1024).copy_(values),
        "tensor_from_data": lambda: torch.tensor([1.0, 2.0], device=device),
        "nonzero": lambda: values.nonzero(),
        "bool_mask": lambda: values[values > 0],
        "unique": lambda: torch.unique(values),
        "equal": lambda: torch.equal(values, values),
        "print_small": lambda: print(values[:8], file=open(os.devnull, "w")),
        "tolist": lambda: values[:4].tolist(),
        "device_synchronize": lambda: torch.cuda.synchronize(),
        "stream_synchronize": lambda: torch.cuda.current_stream().synchronize(),
        "event_synchronize": lambda: stream_event.synchronize(),
        "aten_op_called_directly": lambda: torch.ops.aten._local_scalar_dense(loss),
    }


def _module_chain() -> str:
    """The modules on the stack from the innermost frame out, consecutive repeats merged, up to this file."""
    chain, frame = [], sys._getframe(2)
    while frame is not None and frame.f_code.co_filename != __file__:
        module = frame.f_globals.get("__name__", "?")
        if not chain or chain[-1] != module:
            chain.append(module)
        frame = frame.f_back
    return " < ".join(chain)


def compiled_calls(device) -> dict:
    results = {}
    original_synchronize = torch.cuda.synchronize

    def logged_synchronize(*args, **kwargs):
        events.append("torch.cuda.synchronize from " + _module_chain())
        return original_synchronize(*args, **kwargs)

    def show_chain(message, category, filename, lineno, file=None, line=None):
        events.append(f"warning {str(message)[:40]!r} from " + _module_chain())

    torch._dynamo.reset()

    @torch.compile
    def fused(values):
        return torch.nn.functional.gelu(values * 2 + 1).sum(dim=0)

    layers = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    model = torch.compile(layers.to(device))
    values, inputs = torch.randn(256, 256, device=device), torch.randn(32, 64, device=device)
    torch.cuda.synchronize = logged_synchronize
    warnings.showwarning = show_chain
    try:
        for call in range(3):
            events.clear()
            fused(values)
            results[f"compiled_forward_call_{call}"] = list(events)
        for call in range(2):
            events.clear()
            model(inputs).sum().backward()
            results[f"compiled_training_step_{call}"] = list(events)
    finally:
        torch.cuda.synchronize = original_synchronize
        warnings.showwarning = show
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("guard_sync_debug_probe: no CUDA/ROCm device here", file=sys.stderr)
        return 3
    device = torch.device("cuda", 0)
    warnings.showwarning = show
    warnings.simplefilter("always")
    results = {}
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("warn")
    results["set_sync_debug_mode"] = list(events)
    events.clear()
    for name, run in snippets(device).items():
        torch.cuda.synchronize()
        events.clear()
        with Recording():
            run()
        results[name] = list(events)
    results.update(compiled_calls(device))
    torch.cuda.set_sync_debug_mode(before)
    for name, logged in results.items():
        print(f"== {name}: {len(logged)} events")
        for event in sorted(set(logged), key=logged.index):
            print(f"   {logged.count(event)}x {event}")
    if args.json:
        Path(args.json).write_text(json.dumps({"torch": torch.__version__, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
