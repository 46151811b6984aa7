"""A small training loop with three planted host-device problems, for `fade watch` to find by line.

    fade watch -- python examples/guard_planted_problems.py                    # on a GPU
    fade watch --device standin -- python examples/guard_planted_problems.py --device standin   # no GPU

The three problems, each marked `# PLANTED: <name>` (the tests find the lines by these comments):
- item:  `loss.item()` every step: a sync per step.
- mask:  a dropout mask built with torch.rand on the CPU, then copied to the device every step.
- numpy: a metric computed with numpy, so both tensors go through `.cpu()` every step: blocking copies, each
  also a host wait (one copy record, its `syncs` counting the waits).

examples/guard_clean.py is the same loop without them; `fade watch` reports nothing for it.
"""

import argparse

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def default_device() -> str:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.current_accelerator(check_available=True) is not None:
        return accelerator.current_accelerator().type
    return "cuda" if torch.cuda.is_available() else "cpu"


def build_model(width: int, classes: int) -> nn.Module:
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, classes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=default_device(),
                        help="torch device type; 'standin' is FADE's host-backed stand-in for machines without a GPU")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=256)
    args = parser.parse_args()
    if args.device == "standin":
        from fade.hostwork import standin

        standin.register()
    device, classes, drop = torch.device(args.device), 10, 0.1
    torch.manual_seed(0)
    with device:  # parameters are made on the device: no host->device copies at start-up
        model = build_model(args.width, classes)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    running_loss = 0.0
    for step in range(args.steps):
        inputs = torch.randn(args.batch, args.width, device=device)
        labels = torch.randint(0, classes, (args.batch,), device=device)
        keep = (torch.rand(args.batch, args.width) > drop).float().to(device)  # PLANTED: mask
        logits = model(inputs * keep / (1 - drop))
        loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()  # PLANTED: item
        accuracy = np.mean(logits.argmax(1).cpu().numpy() == labels.cpu().numpy())  # PLANTED: numpy
        if (step + 1) % 10 == 0:
            print(f"step {step + 1}: loss {running_loss / (step + 1):.4f}, accuracy {accuracy:.3f}")


if __name__ == "__main__":
    main()
