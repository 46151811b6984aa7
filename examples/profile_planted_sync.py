"""A small training loop with one planted host sync per step, for `fade profile`:

    fade profile -- python examples/profile_planted_sync.py --steps 12

The `.item()` below reads the loss back to the host every step: on a GPU the host waits for the device there
(a sync), on the CPU it is a plain host read. The verdict names that line. Options: --steps N, --device D
(default: cuda if available, else cpu), --width N (hidden size).
"""

import argparse

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--width", type=int, default=64)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
                                torch.nn.Linear(args.width, 10)).to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(32, args.width, device=args.device)
    target = torch.randint(0, 10, (32,), device=args.device)
    losses = []
    for _ in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(inputs), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())  # PLANTED: sync
    print(f"trained {args.steps} steps, last loss {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
