"""Times one callable on one torch device and returns raw samples with their median, IQR and CoV.

The method, step by step (every threshold is a named constant below, and the docstrings cite it):

Warm-up
    `fn` runs, synchronized and host-timed, until both `min_warmup_calls` (MIN_WARMUP_CALLS) calls and
    `warmup_s` (WARMUP_S) seconds have passed. First-call costs land here and never in a sample: module
    load, kernel JIT, cuBLAS/hipBLASLt heuristics, cuDNN/MIOpen find, the caching allocator growing. The
    block-sizing trials and a CUDA-graph capture also count as warm-up calls (`Timing.warmup_calls`).

Sync method
    CUDA and ROCm (both `torch.cuda`): a `torch.cuda.Event` pair brackets each block on the current stream.
    Blocks of one round are enqueued back to back and the host synchronizes once per round, so the device
    never waits on the host between blocks. CPU: `time.perf_counter` around each block (CPU ops run
    synchronously). Any other torch device (xpu, mps, ...): `torch.<type>.synchronize()` at both ends of a
    block, timed with `time.perf_counter`.

Block sizing
    A sample is one block of k back-to-back calls, stored as seconds per call (block time / k). k starts
    from the warm-up estimate and grows until a block lasts MIN_BLOCK_S, capped at MAX_BLOCK_CALLS, so
    event resolution and timer cost stay small against an op of a few microseconds. The gaps between the
    k launches are inside the block: a launch-bound op reports its launch rate, as it would in a model.
    `cuda_graph=True` captures k calls in one CUDA graph and times graph replays instead, which removes the
    host's launch cost and leaves device time (up to MAX_GRAPH_CALLS calls per graph).

Settle
    After block sizing, blocks are timed in windows of SETTLE_WINDOW_S until two consecutive windows'
    median block times agree within SETTLE_TOL, or `max_settle_s` (MAX_SETTLE_S) has passed. Under a power
    or thermal cap the GPU walks its clock for a few hundred ms after the load changes (seen on an H100 at
    its 700 W cap: one 8192^3 fp16 GEMM case slid from 1.64 to 1.79 ms per call within 0.2 s), so samples
    taken right after warm-up measure the previous case's clock. Settle windows count as warm-up.

Cold cache (optional)
    `flush_bytes=N` zeroes an N-byte device buffer before every timed call, outside the events (k is then
    1, as in triton's do_bench). `rotate=[args0, args1, ...]` calls `fn(*args_i)` in turn, so consecutive
    calls touch different memory; `rotation_count` gives how many argument sets exceed a cache.

Replicates and stop rule
    Blocks are timed in rounds of about ROUND_S. After each round the measurement stops:
    "converged" when there are at least `min_samples` samples (MIN_SAMPLES), at least `min_run_s`
    (MIN_RUN_S) of timed work and CoV <= `target_cov` (TARGET_COV); "max_samples" at `max_samples`
    (MAX_SAMPLES); "budget" when sampling has used `budget_s` (BUDGET_S). `min_samples` are always taken,
    so an op slower than the budget still gets `min_samples` samples (the caller's timeout bounds it).

Statistic
    median and IQR (quartiles by linear interpolation, as numpy's default), min, max, mean, and
    CoV = sample standard deviation / mean. `noisy` is CoV > `noisy_cov` (NOISY_COV).

Exclusions
    Warm-up, block-sizing and capture calls (counted, never sampled), the cache flush, and the host's wait
    at the end of a round. No sample is dropped after warm-up: outliers stay, and show in max and CoV.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

WARMUP_S = 0.1  # 100 ms lets GPU clocks leave idle and autotuners settle; do_bench warms up 25 ms
MIN_WARMUP_CALLS = 3  # the first call pays load/JIT/find; two more show the steady state has begun
MIN_BLOCK_S = 1e-3  # an event pair resolves ~0.5 us and a host sync costs ~10-50 us: both < 5% of 1 ms
MAX_BLOCK_CALLS = 10_000  # bounds a block of a sub-microsecond op to ~10 ms and the events queued for it
MAX_GRAPH_CALLS = 1_000  # calls captured per CUDA graph; more only costs capture time and graph memory
ROUND_S = 0.05  # blocks enqueued between host syncs; the stop rule is checked at this granularity
MIN_SAMPLES = 5  # fewer replicates give no meaningful quartiles
MIN_SPLIT_SAMPLES = 2  # one of several pooled rounds (split_settings): its median needs two
MAX_SAMPLES = 100  # beyond this the median no longer moves; it also bounds a record's size
MIN_RUN_S = 0.1  # timed work before "converged": a shorter burst can end before clocks and power settle
SETTLE_WINDOW_S = 0.05  # one power-management step on an H100 is ~30-50 ms of work at a time
SETTLE_TOL = 0.02  # consecutive windows within 2%: a capped clock still dithers ~1-2% between steps
MAX_SETTLE_S = 0.5  # give up settling after this; the spread then shows in IQR and CoV
MAX_SETTLE_WINDOWS = 40  # the same cap in windows, for a clock that does not advance (tests, broken timers)
BUDGET_S = 1.0  # sampling time after which the measurement stops even if the spread is still wide
TARGET_COV = 0.01  # stop once the samples agree to 1%: tighter than the 3% that runs must agree to
NOISY_COV = 0.05  # above 5% a figure cannot support the 3% run-to-run agreement FADE promises
TIMER_FLOOR_S = 1e-9  # an empty block can read 0 s; the floor keeps rates finite (torch's _timeit does too)
COLD_CACHE_FACTOR = 2  # rotate through >= 2x the cache: an LRU-like cache has then evicted a set before reuse
DEFAULT_FLUSH_BYTES = 512 * 2**20  # 2x MI300X's 256 MB Infinity Cache, the largest last-level cache known here


@dataclass(frozen=True)
class Timing:
    """Raw samples of one measurement; every statistic is derived from `samples_s`."""

    samples_s: tuple  # seconds per call, one per timed block, in the order they ran
    calls_per_sample: int  # k: calls per block (per graph replay with cuda_graph=True, graph calls x replays)
    warmup_calls: int  # calls before the first sample (warm-up, block sizing, graph capture): never sampled
    warmup_s: float  # host seconds spent on those calls
    method: str  # "cuda-events", "host-clock" or "host-clock+sync"
    stop_reason: str  # "converged", "max_samples" or "budget"
    cuda_graph: bool = False
    cold_cache: Optional[str] = None  # None, "flush:<bytes>" or "rotate:<sets>"
    noisy_cov: float = NOISY_COV
    settings: dict = field(default_factory=dict)  # the measure() arguments that shaped this run

    @property
    def n(self) -> int:
        return len(self.samples_s)

    @property
    def median_s(self) -> float:
        return quantile(self.samples_s, 0.5)

    @property
    def q1_s(self) -> float:
        return quantile(self.samples_s, 0.25)

    @property
    def q3_s(self) -> float:
        return quantile(self.samples_s, 0.75)

    @property
    def iqr_s(self) -> float:
        return self.q3_s - self.q1_s

    @property
    def relative_iqr(self) -> float:
        """IQR / median: the spread the tuner's noise bar and retiming read (0 for a zero median)."""
        median = self.median_s
        return self.iqr_s / median if median else 0.0

    @property
    def min_s(self) -> float:
        return min(self.samples_s)

    @property
    def max_s(self) -> float:
        return max(self.samples_s)

    @property
    def mean_s(self) -> float:
        return statistics.fmean(self.samples_s)

    @property
    def cov(self) -> float:
        """Sample standard deviation / mean; 0 for a single sample."""
        if self.n < 2:
            return 0.0
        return statistics.stdev(self.samples_s) / self.mean_s

    @property
    def noisy(self) -> bool:
        return self.cov > self.noisy_cov

    def stats(self) -> dict:
        """The record's `stats` object: seconds per call, plus CoV, n and the noisy flag."""
        return {
            "median_s": self.median_s,
            "q1_s": self.q1_s,
            "q3_s": self.q3_s,
            "iqr_s": self.iqr_s,
            "min_s": self.min_s,
            "max_s": self.max_s,
            "mean_s": self.mean_s,
            "cov": self.cov,
            "n": self.n,
            "noisy": self.noisy,
            "noisy_cov_threshold": self.noisy_cov,
        }

    def to_dict(self) -> dict:
        """The record's `timing` object: how the samples were taken, and the samples themselves."""
        return {
            "method": self.method,
            "calls_per_sample": self.calls_per_sample,
            "warmup_calls": self.warmup_calls,
            "warmup_s": self.warmup_s,
            "stop_reason": self.stop_reason,
            "cuda_graph": self.cuda_graph,
            "cold_cache": self.cold_cache,
            "settings": dict(self.settings),
            "samples_s": list(self.samples_s),
        }


def split_settings(settings: dict, rounds: int, *, budgets: bool = True, warmup_calls: Optional[int] = None) -> dict:
    """measure()'s keyword arguments `settings` for one of `rounds` interleaved rounds whose samples are pooled:
    min_samples split between them (at least MIN_SPLIT_SAMPLES, for each round's median) and max_samples with it; with
    `budgets`, the time budgets (budget_s, min_run_s, warmup_s) split too; `warmup_calls` replaces
    min_warmup_calls (a side already built and warmed needs only one call to re-warm between rounds)."""
    share = dict(settings)
    if budgets:
        for name in ("budget_s", "min_run_s", "warmup_s"):
            if name in share:
                share[name] = share[name] / rounds
    share["min_samples"] = max(MIN_SPLIT_SAMPLES, math.ceil(settings.get("min_samples", MIN_SAMPLES) / rounds))
    maximum = settings.get("max_samples", MAX_SAMPLES)
    share["max_samples"] = max(share["min_samples"], maximum // rounds if budgets else maximum)
    if warmup_calls is not None:
        share["min_warmup_calls"] = warmup_calls
    return share


def quantile(values: Sequence[float], q: float) -> float:
    """Quantile by linear interpolation between closest ranks (numpy's default, R type 7)."""
    if not values:
        raise ValueError("quantile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def rotation_count(bytes_per_set: int, cache_bytes: int) -> int:
    """Argument sets to rotate through so that each set is evicted before its reuse (COLD_CACHE_FACTOR)."""
    if bytes_per_set <= 0:
        raise ValueError("bytes_per_set must be positive")
    return max(2, math.ceil(COLD_CACHE_FACTOR * cache_bytes / bytes_per_set) + 1)


def measure(
    fn: Callable[..., Any],
    *,
    device: str = "cpu",
    rotate: Optional[Sequence[tuple]] = None,
    flush_bytes: Optional[int] = None,
    cuda_graph: bool = False,
    warmup_s: float = WARMUP_S,
    min_warmup_calls: int = MIN_WARMUP_CALLS,
    min_run_s: float = MIN_RUN_S,
    budget_s: float = BUDGET_S,
    min_samples: int = MIN_SAMPLES,
    max_samples: int = MAX_SAMPLES,
    target_cov: float = TARGET_COV,
    noisy_cov: float = NOISY_COV,
    min_block_s: float = MIN_BLOCK_S,
    max_settle_s: float = MAX_SETTLE_S,
    clock: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Time `fn` on `device` as the module docstring describes, and return its samples.

    `fn` takes no arguments, or one argument tuple from `rotate` per call. `device` is a torch device
    string ("cpu", "cuda:0", "xpu"); it picks the sync method. `clock` is injectable for tests; it drives
    the host timer, the warm-up and the budget (device events keep their own clock).
    """
    if min_warmup_calls < 1:
        raise ValueError("min_warmup_calls must be >= 1: the first call is never a sample")
    if min_samples < 2:
        raise ValueError("min_samples must be >= 2: one sample has no spread")
    if max_samples < min_samples:
        raise ValueError("max_samples must be >= min_samples")
    if flush_bytes is not None and cuda_graph:
        raise ValueError("flush_bytes cannot be combined with cuda_graph: a graph replay has no place for the flush")
    stopwatch = _stopwatch_for(device, clock)
    if cuda_graph and stopwatch.method != "cuda-events":
        raise ValueError(f"cuda_graph=True needs a CUDA/ROCm device, not {device!r}")
    call, cold_cache = _rotating_call(fn, rotate)
    flush = None
    if flush_bytes is not None:
        flush = _flusher(device, flush_bytes)
        cold_cache = f"flush:{flush_bytes}"
    settings = {
        "warmup_s": warmup_s,
        "min_warmup_calls": min_warmup_calls,
        "min_run_s": min_run_s,
        "budget_s": budget_s,
        "min_samples": min_samples,
        "max_samples": max_samples,
        "target_cov": target_cov,
        "min_block_s": min_block_s,
        "max_settle_s": max_settle_s,
    }

    # Warm-up: synchronized, host-timed calls. Their durations seed the block size.
    warmup_start = clock()
    warmup_calls = 0
    call_times = []
    while warmup_calls < min_warmup_calls or clock() - warmup_start < warmup_s:
        if flush is not None:
            flush()
        stopwatch.sync()
        started = clock()
        call()
        stopwatch.sync()
        call_times.append(clock() - started)
        warmup_calls += 1
    # The last calls show the steady state; the first ones may still carry load or tuning costs.
    per_call_estimate_s = max(statistics.median(call_times[-min_warmup_calls:]), TIMER_FLOOR_S)

    unit = call
    calls_per_unit = 1
    if cuda_graph:
        graph_calls = max(1, min(MAX_GRAPH_CALLS, math.ceil(min_block_s / per_call_estimate_s)))
        unit = _capture_graph(call, graph_calls, device)
        calls_per_unit = graph_calls
        warmup_calls += graph_calls
        per_call_estimate_s = min(per_call_estimate_s, min_block_s / graph_calls)

    # Block sizing: grow the number of units per block until one block lasts min_block_s.
    units_per_block = 1
    if flush is None:
        unit_estimate_s = per_call_estimate_s * calls_per_unit
        max_units = max(1, MAX_BLOCK_CALLS // calls_per_unit)
        units_per_block = max(1, min(max_units, math.floor(min_block_s / unit_estimate_s)))
        while units_per_block < max_units:
            block_s = stopwatch.time_blocks(_repeat(unit, units_per_block), 1, None)[0]
            warmup_calls += units_per_block * calls_per_unit
            if block_s >= min_block_s:
                break
            grown = math.ceil(units_per_block * 1.2 * min_block_s / max(block_s, TIMER_FLOOR_S))
            units_per_block = min(max_units, max(2 * units_per_block, grown))
    block = _repeat(unit, units_per_block)
    calls_per_sample = units_per_block * calls_per_unit
    block_estimate_s = max(per_call_estimate_s * calls_per_sample, TIMER_FLOOR_S)

    # Settle: time windows of blocks until two in a row agree, so sampling starts at this load's clock.
    settle_start, previous = clock(), None
    for _ in range(MAX_SETTLE_WINDOWS if max_settle_s > 0 else 0):
        count = max(1, math.ceil(SETTLE_WINDOW_S / block_estimate_s))
        window = statistics.median(stopwatch.time_blocks(block, count, flush))
        warmup_calls += count * calls_per_sample
        if previous is not None and abs(window - previous) <= SETTLE_TOL * previous:
            break
        if clock() - settle_start >= max_settle_s:
            break
        previous = window
    warmup_total_s = clock() - warmup_start

    # Replicates, in rounds; the stop rule is checked after each round.
    samples = []
    timed_s = 0.0
    sampling_start = clock()
    while True:
        remaining_budget_s = budget_s - (clock() - sampling_start)
        count = math.ceil(max(min(ROUND_S, remaining_budget_s), 0.0) / block_estimate_s)
        if len(samples) < min_samples:
            count = max(count, min_samples - len(samples))
        count = max(1, min(count, max_samples - len(samples)))
        block_times = stopwatch.time_blocks(block, count, flush)
        for block_s in block_times:
            samples.append(max(block_s, TIMER_FLOOR_S) / calls_per_sample)
        timed_s += sum(block_times)
        block_estimate_s = max(statistics.median(block_times), TIMER_FLOOR_S)
        enough = len(samples) >= min_samples
        if enough and timed_s >= min_run_s and _cov(samples) <= target_cov:
            stop_reason = "converged"
            break
        if len(samples) >= max_samples:
            stop_reason = "max_samples"
            break
        if enough and clock() - sampling_start >= budget_s:
            stop_reason = "budget"
            break

    return Timing(
        samples_s=tuple(samples),
        calls_per_sample=calls_per_sample,
        warmup_calls=warmup_calls,
        warmup_s=warmup_total_s,
        method=stopwatch.method,
        stop_reason=stop_reason,
        cuda_graph=cuda_graph,
        cold_cache=cold_cache,
        noisy_cov=noisy_cov,
        settings=settings,
    )


def _cov(samples: Sequence[float]) -> float:
    if len(samples) < 2:
        return math.inf
    return statistics.stdev(samples) / statistics.fmean(samples)


def _repeat(unit: Callable[[], Any], times: int) -> Callable[[], None]:
    def block() -> None:
        for _ in range(times):
            unit()

    return block


def _rotating_call(fn: Callable[..., Any], rotate: Optional[Sequence[tuple]]):
    if not rotate:
        return fn, None
    argument_sets = list(rotate)
    position = [0]

    def call() -> Any:
        arguments = argument_sets[position[0] % len(argument_sets)]
        position[0] += 1
        return fn(*arguments)

    return call, f"rotate:{len(argument_sets)}"


class _HostStopwatch:
    """time.perf_counter (or an injected clock) around each block, with the device's own sync if it has one."""

    def __init__(self, clock: Callable[[], float], synchronize: Optional[Callable[[], None]]):
        self.clock = clock
        self.synchronize = synchronize
        self.method = "host-clock" if synchronize is None else "host-clock+sync"

    def sync(self) -> None:
        if self.synchronize is not None:
            self.synchronize()

    def time_blocks(self, block: Callable[[], None], count: int, before: Optional[Callable[[], None]]) -> list:
        times = []
        for _ in range(count):
            if before is not None:
                before()
            self.sync()
            started = self.clock()
            block()
            self.sync()
            times.append(self.clock() - started)
        return times


class _EventStopwatch:
    """torch.cuda.Event pairs on the current stream; one host sync per round of blocks."""

    method = "cuda-events"

    def __init__(self, device: str):
        import torch

        self.torch = torch
        self.device = torch.device(device)

    def sync(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def time_blocks(self, block: Callable[[], None], count: int, before: Optional[Callable[[], None]]) -> list:
        cuda = self.torch.cuda
        with cuda.device(self.device):
            pairs = [(cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)) for _ in range(count)]
            for start, end in pairs:
                if before is not None:
                    before()  # enqueued before the start event: outside the timed region
                start.record()
                block()
                end.record()
            cuda.synchronize(self.device)  # sync point: one per round
            return [start.elapsed_time(end) / 1e3 for start, end in pairs]


def _stopwatch_for(device: str, clock: Callable[[], float]):
    device_type = device.split(":", 1)[0]
    if device_type == "cpu":
        return _HostStopwatch(clock, None)
    import torch

    if device_type == "cuda":  # ROCm builds expose HIP as torch.cuda as well
        return _EventStopwatch(device)
    # xpu, mps, ocl (torch.ocl is fade.ocl's device module, there once the session registered it): the host
    # clock around each block, with the module's synchronize (clFinish on every queue for ocl)
    module = getattr(torch, device_type, None)
    synchronize = getattr(module, "synchronize", None)
    if synchronize is None:
        raise ValueError(f"torch.{device_type} has no synchronize(); cannot time work on {device!r}")
    return _HostStopwatch(clock, synchronize)


def _flusher(device: str, flush_bytes: int) -> Callable[[], None]:
    import torch

    buffer = torch.empty(max(1, flush_bytes // 4), dtype=torch.int32, device=device)
    return buffer.zero_


def _capture_graph(call: Callable[[], Any], calls: int, device: str) -> Callable[[], None]:
    """Capture `calls` unrolled calls in one CUDA graph; returns its replay. Warm-up has run already."""
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.device(torch.device(device)):
        side_stream = torch.cuda.Stream()
        side_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side_stream):
            call()  # one eager call on the capture stream, as torch's graph docs require
        torch.cuda.current_stream().wait_stream(side_stream)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                call()
        graph.replay()  # the first replay uploads the graph; keep it out of the samples
        torch.cuda.synchronize()
    return graph.replay
