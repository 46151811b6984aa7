"""The training loop of examples/guard_planted_problems.py with its three problems fixed; `fade watch` reports
nothing for it.

    fade watch -- python examples/guard_clean.py
    fade watch --device standin -- python examples/guard_clean.py --device standin   # no GPU

The fixes: the loss and the accuracy are summed on the device, and the mask is drawn on the device. The script
prints no metric: reading one back to the host is a sync, which the guard would rightly report (a real script
does it every few hundred steps, and `fade watch` shows it with the number of steps it happened in).
"""

import argparse

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
    running_loss = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    for _ in range(args.steps):
        inputs = torch.randn(args.batch, args.width, device=device)
        labels = torch.randint(0, classes, (args.batch,), device=device)
        keep = (torch.rand(args.batch, args.width, device=device) > drop).float()
        logits = model(inputs * keep / (1 - drop))
        loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        running_loss += loss.detach()
        correct += (logits.argmax(1) == labels).sum()
    print(f"trained {args.steps} steps")


if __name__ == "__main__":
    main()
