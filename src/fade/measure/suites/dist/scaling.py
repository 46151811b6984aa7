"""One scaling case: a zoo network trained data-parallel (DDP, or FSDP2 through fully_shard) on 1, 2, 4, ...
N processes, reported as samples/s per process, scaling efficiency against 1 process, and the share of the
step that gradient communication adds beyond what compute hides.

Method, per process count k (suite.world_sizes), on ranks 0..k-1 of a torch.distributed.new_group; the other
ranks wait for the store key that ends k (no collective, so no group timeout while they wait):

Build
    torch.manual_seed(step.runner.WEIGHT_SEED) on every rank, so every replica starts equal; the network and
    its synthetic batch (zoo.workload, `batch` samples per process) are made on the rank's device, then
    wrapped: DDP(process_group=the k group; gradients all-reduced in buckets during backward, buffers
    broadcast at each forward, torch's defaults) or fully_shard on every child module with parameters and
    the root (FSDP2: parameters all-gathered per module in forward and backward, gradients reduce-scattered).
Step
    step.runner.StepRunner with the baseline StepConfig (fp32 storage, PyTorch's default math): zero_grad,
    forward, loss, backward, optimizer.step. CHECKED_STEPS checked steps first (warm-up, and the losses must
    be finite), then the learning rate goes to 0 (StepRunner.freeze_weights).
Timing
    fade.measure.timing.measure on one step per call with a fixed number of calls on every rank
    (collectives.py, "Timing": `min_warmup_calls` warm-up steps, one sizing step, `min_samples` samples),
    the slowest rank's time per sample kept. Then the same with gradient sync off: DDP's no_sync() (FSDP2:
    set_requires_gradient_sync(False), which skips the reduce-scatter only; its all-gathers still run).
Figures
    samples/s per process = batch / median step; total = that x k; efficiency_pct = 100 x samples/s per
    process at k / the same at 1 process; exposed_comm_pct = 100 x (median step - median step without
    gradient sync) / median step: the part of the step gradient communication adds, i.e. not hidden behind
    backward compute (0 when the difference is below the noise). The case's value is the efficiency at N.
"""

from __future__ import annotations

import datetime

from fade.measure.case import CaseResult, CaseSkipped

CHECKED_STEPS = 2  # warm-up steps whose losses must be finite; the model bench's quick check count
WAIT_FOR_OTHERS_S = 3600.0  # how long a rank outside group k waits for it to finish (a big model on a CPU)


def scaling_case(ctx, *, model: str, strategy: str, batch: int, size, worlds: list):
    """The case function (fade.measure.case); runs on every rank at once under fade.measure.suites.dist.rank."""
    import torch
    import torch.distributed as dist

    from fade.measure.suites.dist.rank import current

    state = current()
    per_world = []
    for world in worlds:
        group = dist.new_group(ranks=list(range(world)))  # every rank takes part in making every group
        done_key = f"{state.arrival_key}/scaling-done/{world}"
        if state.rank < world:
            try:
                per_world.append(_measure_world(ctx, torch, dist, state, group, model, strategy, batch, size, world))
            finally:
                if state.rank == 0:
                    state.store.set(done_key, "1")
        else:
            state.store.wait([done_key], datetime.timedelta(seconds=WAIT_FOR_OTHERS_S))
        dist.destroy_process_group(group)
    if state.rank != 0:
        return CaseResult(0.0, "%", "not rank 0")
    base = per_world[0]["samples_per_s_per_process"]
    for entry in per_world:
        entry["efficiency_pct"] = 100.0 * entry["samples_per_s_per_process"] / base
    last = per_world[-1]
    formula = ("efficiency_pct = 100 * samples_per_s_per_process(k=N) / samples_per_s_per_process(k=1); "
               "samples_per_s_per_process = batch / median step")  # fmt: skip
    timing = last.pop("timing")
    for entry in per_world:
        entry.pop("timing", None)
    extra = {"scaling": per_world, "strategy": strategy, "model": model, "batch_per_process": batch, "world": worlds[-1],
             "backend": state.backend,
             "exposed_comm_formula": "100 * (median_step_s - no_sync_median_step_s) / median_step_s"}  # fmt: skip
    return CaseResult(last["efficiency_pct"], "%", formula, timing, {"samples": batch, "ranks": worlds[-1]}, extra=extra)


def _measure_world(ctx, torch, dist, state, group, model, strategy, batch, size, world) -> dict:
    import contextlib

    from fade.measure.step.config import StepConfig
    from fade.measure.step.runner import WEIGHT_SEED, StepRunner
    from fade.measure.suites.dist.collectives import run_timing, slowest
    from fade.measure.timing import measure
    from fade.measure.zoo.workload import build_workload

    torch.manual_seed(WEIGHT_SEED)
    workload = build_workload(model, batch, size, ctx.device)
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [state.local_rank] if ctx.device.startswith("cuda") else None
        wrapped = DistributedDataParallel(workload.model, process_group=group, device_ids=device_ids)
        workload.model = wrapped

        def without_sync():
            return wrapped.no_sync()
    else:
        from torch.distributed.device_mesh import DeviceMesh

        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:
            raise CaseSkipped(f"torch {torch.__version__} has no torch.distributed.fsdp.fully_shard (FSDP2, torch >= 2.6)") from None

        mesh = DeviceMesh.from_group(group, ctx.device.split(":", 1)[0])
        for child in workload.model.children():
            if any(True for _ in child.parameters()):
                fully_shard(child, mesh=mesh)
        fully_shard(workload.model, mesh=mesh)
        sharded = workload.model

        @contextlib.contextmanager
        def without_sync():
            sharded.set_requires_gradient_sync(False)
            try:
                yield
            finally:
                sharded.set_requires_gradient_sync(True)
    runner = StepRunner(workload, workload.model, StepConfig(), True, ctx.device, track_finite=False)
    checked = runner.checked_steps(CHECKED_STEPS)
    if not all(torch.isfinite(torch.tensor(checked.losses))):
        raise RuntimeError(f"{model} {strategy} on {world} process(es): a non-finite loss in the checked steps {checked.losses}")
    runner.freeze_weights()
    fixed = run_timing(ctx)
    with_sync, _ = slowest(measure(runner.step, device=ctx.device, **fixed), ctx.device, world, group=group)
    with without_sync():
        alone, _ = slowest(measure(runner.step, device=ctx.device, **fixed), ctx.device, world, group=group)
    step_s, alone_s = with_sync.median_s, alone.median_s
    return {
        "world": world,
        "samples_per_s_per_process": batch / step_s,
        "samples_per_s_total": batch * world / step_s,
        "median_step_s": step_s,
        "iqr_step_s": with_sync.iqr_s,
        "no_sync_median_step_s": alone_s,
        "exposed_comm_pct": max(0.0, 100.0 * (step_s - alone_s) / step_s),
        "checked_losses": checked.losses,
        "timing": with_sync,
    }
