"""Where does a model case's FADE figure part from its plain loop? One case, four timings taken in turns.

    python benchmarks/step_overhead.py mobilenet_v2 infer compile [--batch 64] [--rounds 12] [--device cuda]

The model bench checks FADE's figure against a plain event-timed loop (models_case.py, "Plain loop"). The
two differ in two things at once: the step (FADE's hands its loss or output to the finiteness check)
and the timing machinery (FADE's measure() segments against plain blocks). This script separates them on
one built, warmed case: each round times, in rotating order, a plain segment of the plain step (P), a plain
segment of FADE's step (P+sum), a FADE segment of FADE's step (F, what the bench reports) and a FADE segment
of the plain step (F-sum). Segments are the bench's own (_plain_segment, _fade_segment) at its block size.
Prints one JSON object: each side's median over rounds of its segment median (samples/s), every round's
figures, and the differences from P. P+sum vs P is the finiteness sum's cost; F-sum vs P the machinery's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("mode", choices=("train", "infer"))
    parser.add_argument("variant")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)

    import torch

    from fade.measure.step.conditions import gc_frozen
    from fade.measure.step.config import pinned
    from fade.measure.step.runner import LOSS_CHECK_STEPS, WEIGHT_SEED, StepRunner, apply_config
    from fade.measure.suites.models import case as mc
    from fade.measure.suites.models.variants import parse_variant
    from fade.measure.zoo.workload import build_workload

    device, training = args.device, args.mode == "train"
    variant = parse_variant(args.variant)
    torch.manual_seed(WEIGHT_SEED)
    workload = build_workload(args.model, args.batch, args.size, device)
    runnable = apply_config(workload, variant)
    settings = {"budget_s": 2.0}
    # The model case's segment helpers are its internals: this diagnostic reaches into them on purpose.
    with pinned(variant):
        runner = StepRunner(workload, runnable, variant, training, device)
        runner.checked_steps(LOSS_CHECK_STEPS if training else 1)
        runner.freeze_weights()
        plain_step = mc._plain_step(runner)
        with gc_frozen():
            first = mc._fade_segment(runner.step, device, settings, None)  # sizes the block, warms up
            calls = first.calls_per_sample

            def plain(step):
                return statistics.median(mc._plain_segment_after(step, device, first, calls, 0))

            def fade(step):
                return mc._fade_segment(step, device, settings, first).median_s

            sides = {"P": lambda: plain(plain_step), "P+sum": lambda: plain(runner.step),
                     "F": lambda: fade(runner.step), "F-sum": lambda: fade(plain_step)}  # fmt: skip
            names = list(sides)
            rounds = {name: [] for name in names}
            for index in range(args.rounds):
                for name in names[index % len(names):] + names[: index % len(names)]:
                    rounds[name].append(workload.samples / sides[name]())
        runner.tracker.check()
    medians = {name: statistics.median(values) for name, values in rounds.items()}
    result = {
        "case": f"{args.model}/{args.mode}/{args.variant}/b{args.batch}",
        "device": torch.cuda.get_device_name(device) if device.startswith("cuda") else device,
        "calls_per_block": calls,
        "samples_per_s": medians,
        "vs_plain_pct": {name: 100.0 * (value / medians["P"] - 1) for name, value in medians.items()},
        "paired_vs_plain_pct": {name: statistics.median(100.0 * (a / b - 1) for a, b in zip(values, rounds["P"]))
                                for name, values in rounds.items()},  # fmt: skip
        "rounds": rounds,
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
