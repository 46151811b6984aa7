"""Whether every timed step stayed finite: its loss (training) or output (inference) joins a device-side sum
that is read once, after the timing, so no step waits on the host for it."""

from __future__ import annotations

import math

CHECK_SAMPLE_ELEMENTS = 2**20  # inference: outputs larger than KEEP_BYTES are checked on an evenly strided sample of this many


class InvalidRun(Exception):
    """The numbers are not trustworthy (a non-finite loss, a loss far from fp32's); the record is "error"."""


class FiniteTracker:
    """Every step's loss (or output), kept on the device and summed once in a while: NaN or inf in any step
    makes the sum non-finite. No step launches a kernel of its own. A training step's 0-dim loss is kept as
    it is. An inference step's output is kept by reference, without a copy, until KEEP_BYTES of outputs are
    held; then one concatenation and one sum fold them (two kernels per 16 steps of a 256 KB output). An
    output larger than KEEP_BYTES belongs to a step heavy enough that one sum of a sample of it
    (CHECK_SAMPLE_ELEMENTS) costs nothing visible, and gets one. The 0-dim sums are folded into the total
    every FOLD_STEPS of them.

    Why no kernel per step: on a launch-bound step every host microsecond counts, and more than its share.
    H100, mobilenet_v2 compiled inference, batch 64 (benchmarks/step_overhead.py and the bench's own segments,
    repeated): the step's host time wanders between 2.5 and 4.5 ms against a device floor of 2.85 ms, so its
    block times are bimodal and their median sits on the edge between the modes. With one sum per step (13 us
    of host time, 0.5% of the step), 18 repeats put FADE a median 1.9% below the plain loop, 5 of them past
    -2.8%; FADE's timing of the same step without the sum landed within 0.8% in five of six. With outputs
    kept instead, six of eight repeats landed within 0.6%, one at -2.4% and one at -14.3%: a 9 s slow spell
    of the host that FADE's median fell inside and the plain loop's only touched
    (results/models-h100/diagnostics).
    The kept outputs are in the peak memory figure (at most 2 x KEEP_BYTES: the kept outputs and their
    concatenation); `extra.memory.finite_check_bytes` says how much."""

    FOLD_STEPS = 1024  # pending 0-dim tensors (512 bytes each in the caching allocator) before a fold
    KEEP_BYTES = 4 * 2**20  # outputs held by reference before they are folded: 0.1-1% of a zoo model's peak memory

    def __init__(self, device: str):
        import torch

        self.total = torch.zeros((), dtype=torch.float32, device=device)
        self.pending: list = []
        self.kept: list = []
        self.kept_bytes = 0
        self.kept_bytes_max = 0
        self.steps = 0

    def reset(self) -> None:
        self.total.zero_()
        self.pending.clear()
        self.kept.clear()
        self.kept_bytes = self.kept_bytes_max = 0
        self.steps = 0

    def add_loss(self, loss) -> None:
        self.pending.append(loss.detach())
        self._stepped()

    def add_output(self, output) -> None:
        """An inference output (a tensor or a pytree of them), made under inference_mode: no autograd graph
        hangs off it, so keeping it holds its memory and nothing else."""
        import torch

        if torch.is_tensor(output):
            leaves = (output,)
        else:
            from torch.utils._pytree import tree_leaves

            leaves = tree_leaves(output)
        for leaf in leaves:
            if not (torch.is_tensor(leaf) and leaf.is_floating_point()):
                continue
            size = leaf.nbytes
            if size > self.KEEP_BYTES:
                sample = leaf.detach()
                if sample.numel() > CHECK_SAMPLE_ELEMENTS and sample.is_contiguous():
                    sample = sample.view(-1)[:: sample.numel() // CHECK_SAMPLE_ELEMENTS]
                self.pending.append(sample.sum(dtype=torch.float32))  # one kernel: no cast of a bf16 output first
                continue
            if self.kept_bytes + size > self.KEEP_BYTES:
                self._fold_kept()
            self.kept.append(leaf)
            self.kept_bytes += size
        self._stepped()

    def _stepped(self) -> None:
        self.steps += 1
        if len(self.pending) >= self.FOLD_STEPS:
            self._fold()

    def _fold_kept(self) -> None:
        import torch

        if self.kept:
            # one concatenation (it promotes mixed dtypes) and one sum, not a kernel per kept output
            self.pending.append(torch.cat([leaf.reshape(-1) for leaf in self.kept]).sum(dtype=torch.float32))
            self.kept_bytes_max = max(self.kept_bytes_max, self.kept_bytes)  # held is largest just before a fold
            self.kept.clear()
            self.kept_bytes = 0

    def _fold(self) -> None:
        import torch

        if self.pending:
            # one stack (it promotes mixed dtypes), not a cast per value: a fold runs inside a timed block
            self.total.add_(torch.stack(self.pending).sum(dtype=torch.float32))
            self.pending.clear()

    def check(self) -> int:
        """Steps checked; InvalidRun if any of them was not finite. A sync point."""
        self._fold_kept()
        self._fold()
        total = float(self.total)
        if not math.isfinite(total):
            raise InvalidRun(
                f"a loss or output was {total} in one of {self.steps} timed steps: the run is invalid and its speed is not reported"
            )
        return self.steps
