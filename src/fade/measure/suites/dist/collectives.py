"""One collective case: a torch.distributed collective at one size and dtype, checked, then timed on every
rank, reported as nccl-tests' algorithm and bus bandwidth (nccl-tests doc/PERFORMANCE.md).

Method, in the order a case runs (constants below, cited by name):

Data
    Every buffer holds small integers, never zeros: element i of rank r is (i mod PATTERN_PERIOD) +
    (r mod RANK_PERIOD) + 1 (all_to_all adds twice the destination's index, so a chunk sent to the wrong
    rank shows). Small integers add exactly in fp32, fp16 and bf16 (bf16 holds every integer up to 256:
    all_reduce over up to 73 ranks), so the check below is exact equality, whatever order the library sums in.
Arrival and check
    Each rank marks its arrival in the launcher's TCP store, then runs the collective once (async_op) and
    waits at most the run's timeout for it: the gloo work's wait(timeout); on a GPU an event after the
    work, polled every ARRIVAL_POLL_S. A wait past the timeout raises CollectiveTimeout naming the ranks
    whose mark is missing: the ones that never reached this collective. Every rank then compares its
    output with the exact expected values, and one all_reduce of a per-rank flag vector tells rank 0
    which ranks saw a wrong result (status "error", no bandwidth reported).
Block size
    fade.measure.timing.measure times single calls (BLOCK_PROBE settings) on every rank; the slowest
    rank's median (all_reduce MAX) sets k = calls per block, so a block lasts about `min_block_s` (the
    run's timing, timing.MIN_BLOCK_S by default), at most MAX_BLOCK_CALLS. All ranks then agree on k.
Timing
    fade.measure.timing.measure on blocks of k calls with settings that fix the number of calls (no
    time-driven warm-up, no settle, a zero budget: `min_warmup_calls` warm-up blocks, one sizing block,
    then exactly `min_samples` blocks), because every rank must issue the same collectives: an adaptive
    stop rule on rank-local clocks would leave one rank waiting for a call the others never make. On
    CUDA/ROCm each block sits between device events and the host syncs once per round (the engine's
    "cuda-events"); on the CPU (gloo) a barrier aligns the ranks first and each block is host-timed
    ("host-clock"): a gloo call returns only when its data has arrived, so a block includes waiting for
    the slowest peer. Samples are seconds per call; each rank's samples are gathered to rank 0 and the
    figure uses, per block, the slowest rank's time (the collective is done when its last rank is).
Figures
    size = the bytes of the whole buffer as nccl-tests counts it (all_gather: the gathered output;
    reduce_scatter: the input; all_to_all: one rank's send buffer). algbw = size / median_s / 1e9 (GB/s),
    busbw = algbw x the collective's factor (BUS_FACTORS: 2(n-1)/n all_reduce, (n-1)/n all_gather,
    reduce_scatter and all_to_all, 1 broadcast and send/recv), comparable to the link's bandwidth
    whatever n is. latency = median_s in microseconds, the figure that matters up to LATENCY_MAX_BYTES.
    % of peak: busbw against the slowest link between the ranks' GPUs when the topology says it
    (collect.topology), else none.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import time
from dataclasses import dataclass
from typing import Callable

from fade.measure.case import CaseResult, CaseSkipped, torch_dtype

PATTERN_PERIOD = 3  # values 0..2 per element position
RANK_PERIOD = 4  # rank offsets 0..3: all_reduce over n ranks reaches 2n + 1.5n, exact in bf16 up to n = 73
ARRIVAL_POLL_S = 0.001  # how often rank 0 asks the device whether the checked call has finished
MAX_BLOCK_CALLS = 1000  # bounds a block of an 8-byte all_reduce (a few us) to a few ms
LATENCY_MAX_BYTES = 64 * 2**10  # up to here a collective is latency-bound: latency is its figure
DEFAULT_SAMPLES = 10  # timed blocks per case unless the run's timing says min_samples
DEFAULT_WARMUP_BLOCKS = 2


def fixed_timing(warmup_calls: int, samples: int) -> dict:
    """timing.measure settings under which it calls its function exactly warmup_calls + 1 + samples times,
    whatever the clocks say: no time-driven warm-up, no settle, a zero budget (module docstring, "Timing")."""
    return {"warmup_s": 0.0, "min_warmup_calls": warmup_calls, "min_block_s": 0.0, "max_settle_s": 0.0,
            "budget_s": 0.0, "min_samples": samples, "max_samples": samples}  # fmt: skip


def run_timing(ctx) -> dict:
    """fixed_timing with the run's `min_warmup_calls` and `min_samples` (CaseContext.timing)."""
    return fixed_timing(int(ctx.timing.get("min_warmup_calls", DEFAULT_WARMUP_BLOCKS)),
                        int(ctx.timing.get("min_samples", DEFAULT_SAMPLES)))  # fmt: skip


BLOCK_PROBE = fixed_timing(2, 3)  # single calls timed to size the block

# nccl-tests doc/PERFORMANCE.md ("Bus bandwidth"), read 2026-11: busbw = algbw x factor(n)
BUS_FACTORS = {
    "all_reduce": ("2(n-1)/n", lambda n: 2 * (n - 1) / n),
    "all_gather": ("(n-1)/n", lambda n: (n - 1) / n),
    "reduce_scatter": ("(n-1)/n", lambda n: (n - 1) / n),
    "all_to_all": ("(n-1)/n", lambda n: (n - 1) / n),
    "broadcast": ("1", lambda n: 1.0),
    "send_recv": ("1", lambda n: 1.0),
}
COLLECTIVES = tuple(BUS_FACTORS)
PATTERN_SOURCE = "nccl-tests doc/PERFORMANCE.md, https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"


class CollectiveTimeout(RuntimeError):
    """A collective did not finish within the run's timeout; the message names the ranks that never arrived."""

    def __init__(self, message: str, missing_ranks: list):
        super().__init__(message)
        self.missing_ranks = missing_ranks


def element_count(collective: str, size_bytes: int, element_bytes: int, world: int) -> int:
    """Elements of the whole buffer: size_bytes / element size, rounded down to a multiple of `world` for the
    collectives that split it in chunks (at least one element per rank)."""
    count = max(1, size_bytes // element_bytes)
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        count = max(world, count - count % world)
    return count


def bus_bandwidth(collective: str, algbw_gbs: float, world: int) -> float:
    return algbw_gbs * BUS_FACTORS[collective][1](world)


@dataclass
class Buffers:
    """The tensors of one collective on one rank, the call that runs it, and the values it must produce."""

    run: Callable  # run(async_op) -> Work or None
    output: object  # the tensor the check reads
    expected: object  # what it must hold after one call on fresh inputs
    reset: Callable  # restores the inputs the check's call consumed (all_reduce works in place)


def make_buffers(dist, torch, collective: str, count: int, dtype, device: str, rank: int, world: int,
                 group=None) -> Buffers:  # fmt: skip
    """The buffers of `collective` over `count` elements (module docstring, "Data")."""
    pattern = torch.arange(count, device=device, dtype=torch.float32).remainder_(PATTERN_PERIOD)
    chunk = count // world

    def offset(of_rank: int) -> float:
        return float(of_rank % RANK_PERIOD + 1)

    offsets_sum = sum(offset(other) for other in range(world))
    if collective == "all_reduce":
        data = (pattern + offset(rank)).to(dtype)
        original = data.clone()
        expected = (pattern * world + offsets_sum).to(dtype)
        return Buffers(lambda async_op: dist.all_reduce(data, group=group, async_op=async_op), data, expected,
                       lambda: data.copy_(original))  # fmt: skip
    if collective == "broadcast":
        data = (pattern + offset(rank)).to(dtype)
        original = data.clone()
        expected = (pattern + offset(0)).to(dtype)
        return Buffers(lambda async_op: dist.broadcast(data, src=0, group=group, async_op=async_op), data, expected,
                       lambda: data.copy_(original))  # fmt: skip
    if collective == "all_gather":
        piece = pattern[:chunk]
        source = (piece + offset(rank)).to(dtype)
        output = torch.empty(chunk * world, device=device, dtype=dtype)
        expected = torch.cat([piece + offset(other) for other in range(world)]).to(dtype)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.12
        return Buffers(lambda async_op: gather(output, source, group=group, async_op=async_op), output, expected, _nothing)
    if collective == "reduce_scatter":
        source = (pattern[: chunk * world] + offset(rank)).to(dtype)
        output = torch.empty(chunk, device=device, dtype=dtype)
        expected = (pattern[rank * chunk:(rank + 1) * chunk] * world + offsets_sum).to(dtype)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor  # renamed in torch 2.12
        return Buffers(lambda async_op: scatter(output, source, group=group, async_op=async_op), output, expected, _nothing)
    if collective == "all_to_all":
        piece = pattern[:chunk]
        # chunk j goes to rank j: rank r sends piece + offset(r) + 2j; rank r receives from rank j piece + offset(j) + 2r
        source = torch.cat([piece + offset(rank) + 2 * (target % RANK_PERIOD) for target in range(world)]).to(dtype)
        output = torch.empty(chunk * world, device=device, dtype=dtype)
        expected = torch.cat([piece + offset(other) + 2 * (rank % RANK_PERIOD) for other in range(world)]).to(dtype)
        return Buffers(lambda async_op: dist.all_to_all_single(output, source, group=group, async_op=async_op),
                       output, expected, _nothing)  # fmt: skip
    if collective == "send_recv":
        source = (pattern + offset(rank)).to(dtype)
        output = torch.empty(count, device=device, dtype=dtype)
        previous, following = (rank - 1) % world, (rank + 1) % world
        expected = (pattern + offset(previous)).to(dtype)

        def ring(async_op: bool):
            operations = [dist.P2POp(dist.isend, source, following, group=group),
                          dist.P2POp(dist.irecv, output, previous, group=group)]  # fmt: skip
            works = dist.batch_isend_irecv(operations)
            if async_op:
                return _AllWorks(works)
            for work in works:
                work.wait()
            return None

        return Buffers(ring, output, expected, _nothing)
    raise ValueError(f"unknown collective {collective!r}")


def _nothing() -> None:
    return None


class _AllWorks:
    """The works of one batch_isend_irecv as one: wait() waits for each, with the same timeout."""

    def __init__(self, works):
        self.works = list(works)

    def wait(self, timeout=None):
        for work in self.works:
            work.wait() if timeout is None else work.wait(timeout=timeout)
        return True


def wait_or_timeout(work, *, device: str, timeout_s: float, clock=time.monotonic, sleep=time.sleep) -> bool:
    """Wait for `work` at most `timeout_s`; False when it did not finish (module docstring, "Arrival")."""
    import torch

    if work is None:
        return True
    if device.startswith("cuda"):
        work.wait()  # on NCCL/RCCL this makes the current stream wait; the host does not block
        finished = torch.cuda.Event()
        finished.record()
        deadline = clock() + timeout_s
        while not finished.query():
            if clock() >= deadline:
                return False
            sleep(ARRIVAL_POLL_S)
        return True
    try:
        work.wait(timeout=datetime.timedelta(seconds=timeout_s))
    except RuntimeError as error:
        if "timed out" in str(error).lower():
            return False
        raise
    return True


def slowest(timing, device: str, world: int, *, calls: int = 1, group=None) -> tuple:
    """(`timing` with each sample the slowest rank's, in seconds per call of `calls` per block; each rank's
    median). Runs one all_gather on `group`: every rank of it calls this."""
    import torch
    import torch.distributed as dist

    from fade.measure.timing import quantile

    mine = torch.tensor([sample / calls for sample in timing.samples_s], dtype=torch.float64, device=device)
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine, group=group)
    per_rank = [values.tolist() for values in every]
    worst = tuple(max(column) for column in zip(*per_rank))
    return dataclasses.replace(timing, samples_s=worst, calls_per_sample=timing.calls_per_sample * calls), \
        [quantile(values, 0.5) for values in per_rank]


def missing_ranks(store, key_prefix: str, world: int) -> list:
    """The ranks whose arrival key under `key_prefix` is not in `store`."""
    return [rank for rank in range(world) if not store.check([f"{key_prefix}/{rank}"])]


def collective_case(ctx, *, collective: str, dtype: str, size_bytes: int, world: int):
    """The case function (fade.measure.case): runs on every rank at once, under fade.measure.suites.dist.rank."""
    import torch
    import torch.distributed as dist

    from fade.measure.suites.dist.rank import current
    from fade.measure.timing import measure

    state = current()
    if state.world != world:
        raise CaseSkipped(f"the case is for {world} ranks; this run has {state.world}")
    if dtype not in state.dtypes:
        raise CaseSkipped(f"{dtype} collectives are not measured on {state.backend}")
    element_bytes = torch.empty((), dtype=torch_dtype(dtype)).element_size()
    count = element_count(collective, size_bytes, element_bytes, world)
    buffers = make_buffers(dist, torch, collective, count, torch_dtype(dtype), ctx.device, state.rank, world)
    arrival = state.arrival_key
    state.store.set(f"{arrival}/{state.rank}", "1")
    if not wait_or_timeout(buffers.run(True), device=ctx.device, timeout_s=state.timeout_s):
        missing = missing_ranks(state.store, arrival, world) if state.rank == 0 else []
        names = ", ".join(map(str, missing)) or "none missing at rank 0's check; a peer is stuck inside it"
        raise CollectiveTimeout(
            f"{collective} ({dtype}, {count * element_bytes} B) did not finish within {state.timeout_s:g} s "
            f"(--timeout); rank(s) that did not arrive: {names}", missing)  # fmt: skip
    wrong = torch.zeros(world, device=ctx.device, dtype=torch.float32)
    if not torch.equal(buffers.output, buffers.expected):
        wrong[state.rank] = 1.0
    dist.all_reduce(wrong)
    bad_ranks = [index for index, flag in enumerate(wrong.tolist()) if flag]
    if bad_ranks:
        raise RuntimeError(f"{collective} ({dtype}) gave a wrong result on rank(s) {', '.join(map(str, bad_ranks))}")
    buffers.reset()

    def one_call():
        buffers.run(False)

    probe = measure(one_call, device=ctx.device, **BLOCK_PROBE)
    probe_max = torch.tensor([probe.median_s], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(probe_max, op=dist.ReduceOp.MAX)
    min_block_s = ctx.timing.get("min_block_s", state.min_block_s)
    calls = max(1, min(MAX_BLOCK_CALLS, math.ceil(min_block_s / max(float(probe_max.item()), 1e-9))))

    def block():
        for _ in range(calls):
            buffers.run(False)

    if not ctx.device.startswith("cuda"):
        dist.barrier()
    timing, rank_medians = slowest(measure(block, device=ctx.device, **run_timing(ctx)), ctx.device, world, calls=calls)
    used_bytes = count * element_bytes
    algbw = used_bytes / timing.median_s / 1e9
    factor_text = BUS_FACTORS[collective][0]
    busbw = bus_bandwidth(collective, algbw, world)
    formula = f"busbw = algbw * {factor_text} (n={world}); algbw = size_bytes / median_s / 1e9"
    extra = {
        "collective": collective,
        "world": world,
        "backend": state.backend,
        "size_bytes": used_bytes,
        "algbw_gbs": algbw,
        "busbw_gbs": busbw,
        "bus_factor": factor_text,
        "bus_factor_value": BUS_FACTORS[collective][1](world),
        "latency_us": timing.median_s * 1e6,
        "latency_bound": used_bytes <= LATENCY_MAX_BYTES,
        "checked": "exact match on every rank",
        "per_rank_median_s": rank_medians,
        "formula_source": PATTERN_SOURCE,
        "link": state.link,
    }
    return CaseResult(busbw, "GB/s", formula, timing, {"bytes": used_bytes, "ranks": world},
                      peak_kind="link" if state.link else None, extra=extra)  # fmt: skip
