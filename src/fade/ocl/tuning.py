"""Tunes CLBlast's GEMM parameters (Xgemm, XgemmDirect, the GemmRoutine direct/indirect threshold) for one OpenCL
device on the GEMM shapes a workload needs, and applies the parameters `fade tune --device ocl --pretune`
persisted when fade.ocl opens the device.

Candidates: CLBlast's own database entries for NVIDIA and AMD GPUs (data/clblast_gemm.toml; the device's vendor
first), then configurations drawn at random from CLBlast's tuner spaces (the same file), each checked against
the tuner's constraints and the device's local memory and work-group size (`violations`) before it is built.
Method (`measure_shapes`): per shape, one warm-up call (it builds CLBlast's program for the parameters), one
sizing call, then REPEATS blocks of calls sized to BLOCK_S each, synchronized with the queue's finish() and
timed with the host clock (injectable); the statistic is the median seconds per call and the IQR of the blocks.
Data: uniform in [-1, 1), hashed on the device from a per-shape seed (uniform_host makes the same on the host),
alpha 1, beta 0, tight row-major layouts.
Numerics: a candidate's C is compared with the default parameters' C on CHECK_ELEMENTS sampled elements; a
relative difference above GEMM_RTOL rejects it. Decision: the time-weighted total (calls per step x seconds per
call, summed over the heaviest shapes, SEARCH_WEIGHT_SHARE of the defaults' time) must beat the best so far by
more than the noise (`noise_floor`), per stage: Xgemm, then the threshold, then XgemmDirect; the choice must
then still win on every shape. CLBlast keeps one parameter set per device and precision, so one
configuration serves every shape. Only float32 shapes are tuned (the candidates are single-precision entries).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import random
import time
import tomllib
import zlib
from importlib import resources
from pathlib import Path
from typing import Callable, Optional

from fade import device_cache
from fade.ocl import runtime
from fade.ocl.settings import setting

KERNEL_PARAMETERS = {  # every parameter CLBlastOverrideParameters needs per kernel (CLBlast 1.5-1.7)
    "Xgemm": ("GEMMK", "KREG", "KWG", "KWI", "MDIMA", "MDIMC", "MWG", "NDIMB", "NDIMC", "NWG", "SA", "SB", "STRM",
              "STRN", "VWM", "VWN"),
    "XgemmDirect": ("KWID", "MDIMAD", "MDIMCD", "NDIMBD", "NDIMCD", "PADA", "PADB", "VWMD", "VWND", "WGD"),
    "GemmRoutine": ("XGEMM_MIN_INDIRECT_SIZE",),
}
STAGES = ("Xgemm", "GemmRoutine", "XgemmDirect")  # tuned in this order, each on top of the previous choice
STAGE_BUDGET_SHARE = {"Xgemm": 0.6, "GemmRoutine": 0.15, "XgemmDirect": 1.0}  # of the budget left at the stage
TUNED_DTYPE = "float32"
DTYPE_BYTES = 4
BLOCK_S = 0.02  # a timed block: long enough that the host clock and one finish() are < 1% of it on a GPU
MAX_CALLS_PER_BLOCK = 64  # tiny GEMMs: a block of 64 launches measures the launch-bound rate well enough
REPEATS = 5  # blocks per shape; the median of 5 ignores one disturbed block
SEARCH_REPEATS = 3  # blocks per shape while searching (a winner is measured again with REPEATS, and confirmed)
SEARCH_WEIGHT_SHARE = 0.9  # the search times the heaviest shapes that make up 90% of the defaults' GEMM time; the
# chosen parameters are then measured on every shape (and confirmed on every shape in fresh processes)
MIN_GAIN = 0.02  # the noise's floor: a change must win by 2% at least, because the search's blocks and the
# fresh processes' are minutes apart (clock and thermal drift); an assumption until the H100 run measures the spread
GEMM_RTOL = 1e-3  # fp32 GEMMs blocked differently: ~sqrt(k)*eps relative (5e-6 at k=8192); a wrong tile: O(1)
C_RESET = 1.0e4  # C's value before a sampled call (see ShapeBench.measure)
CHECK_ELEMENTS = 1 << 16  # C elements compared per shape (evenly strided, plus the last): all of C when smaller
DEVICE_BUFFER_FRACTION = 0.5  # of the device's memory, for the shapes' A, B and C kept between candidates
DISABLE_ENV = "FADE_OCL_CLBLAST_TUNED"  # "0": fade.ocl opens devices with CLBlast's own parameters (settings.py)
CACHE_FILE = "clblast.json"  # in the device's tuning-cache directory (fade.device_cache; the tuner writes it: persist)
SCHEMA_VERSION = 1

applied: dict = {}  # device index -> what apply_persisted did when fade.ocl opened it (see clblast_tuning)


@dataclasses.dataclass(frozen=True)
class GemmShape:
    """One GEMM a workload runs: C[m, n] = op(A) @ op(B), `batch` of them per call, `calls` calls per step."""

    m: int
    n: int
    k: int
    trans_a: bool = False
    trans_b: bool = False
    batch: int = 1
    dtype: str = TUNED_DTYPE
    calls: int = 1

    def __post_init__(self):
        for name in ("m", "n", "k", "batch", "calls"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"GEMM shape {name}={value!r}: must be an integer >= 1")

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k * self.batch  # multiply-adds x 2, per call

    def label(self) -> str:
        ops = ("T" if self.trans_a else "N") + ("T" if self.trans_b else "N")
        batch = f" x{self.batch}" if self.batch > 1 else ""
        return f"{self.m}x{self.n}x{self.k} {ops}{batch} {self.dtype}"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def shapes_from_calls(calls) -> list:
    """runtime.record_gemms() tuples -> GemmShapes, one per distinct GEMM, `calls` counting its repeats."""
    counts: dict = {}
    for _index, dtype, trans_a, trans_b, m, n, k, batch in calls:
        key = (m, n, k, bool(trans_a), bool(trans_b), batch, dtype)
        counts[key] = counts.get(key, 0) + 1
    return [GemmShape(*key, calls=count) for key, count in counts.items()]


def shape_from_dict(row: dict) -> GemmShape:
    """A GemmShape from its as_dict(); ValueError (one line) naming a missing or bad field."""
    fields = {field.name for field in dataclasses.fields(GemmShape)}
    unknown = set(row) - fields
    if unknown or not {"m", "n", "k"} <= set(row):
        raise ValueError(f"GEMM shape {row!r}: needs m, n, k (optional {', '.join(sorted(fields - {'m', 'n', 'k'}))})")
    return GemmShape(**row)


# the candidates
@functools.lru_cache(maxsize=1)
def load_table() -> dict:
    """data/clblast_gemm.toml, checked: {"space": {name: row}, "candidate": [rows]}. ValueError on a bad row."""
    with resources.files("fade.data").joinpath("clblast_gemm.toml").open("rb") as handle:
        table = tomllib.load(handle)
    rows = [(f"space.{name}", row, row.get("values", {})) for name, row in table.get("space", {}).items()]
    rows += [(f"candidate {row.get('entry')}", row, row.get("parameters", {})) for row in table.get("candidate", [])]
    for where, row, parameters in rows:
        expected = KERNEL_PARAMETERS.get(row.get("kernel"))
        if not row.get("source"):
            raise ValueError(f"clblast_gemm.toml {where}: no source")
        if expected is None or set(parameters) != set(expected):
            raise ValueError(f"clblast_gemm.toml {where}: kernel {row.get('kernel')!r} needs exactly {expected}")
    return table


def violations(kernel: str, parameters: dict, *, local_memory_bytes: int, max_work_group_size: int,
               dtype_bytes: int = DTYPE_BYTES) -> list:
    """Why CLBlast's tuner would not build `parameters` for `kernel` on this device ([] when legal): the
    constraints of src/tuning/kernels/xgemm.hpp and xgemm_direct.hpp (CLBlast 1.5.3), its local-memory formula,
    and the device's work-group size."""
    missing = [name for name in KERNEL_PARAMETERS[kernel] if name not in parameters]
    if missing:
        return [f"missing {', '.join(missing)}"]
    p = {name: int(value) for name, value in parameters.items()}
    found = []

    def multiple(name: str, value: int, of: int, why: str) -> None:
        if of <= 0 or value % of:
            found.append(f"{name}={value} is not a multiple of {of} ({why})")

    if kernel == "GemmRoutine":
        if p["XGEMM_MIN_INDIRECT_SIZE"] < 1:
            found.append("XGEMM_MIN_INDIRECT_SIZE must be >= 1")
        return found
    if kernel == "Xgemm":
        if p["GEMMK"] not in (0, 1):
            return [f"GEMMK={p['GEMMK']} is not 0 or 1"]
        multiple("KWG", p["KWG"], p["KWI"], "KWI unrolls the KWG loop")
        multiple("MWG", p["MWG"], p["MDIMC"] * p["VWM"], "integer MWI: MDIMC*VWM")
        multiple("NWG", p["NWG"], p["NDIMC"] * p["VWN"], "integer NWI: NDIMC*VWN")
        multiple("MWG", p["MWG"], p["MDIMA"] * p["VWM"], "integer MWIA: MDIMA*VWM")
        multiple("NWG", p["NWG"], p["NDIMB"] * p["VWN"], "integer NWIB: NDIMB*VWN")
        if p["GEMMK"] == 0:
            multiple("KWG", p["KWG"], p["MDIMC"] * p["NDIMC"] // max(p["MDIMA"], 1), "KDIMA: MDIMC*NDIMC/MDIMA")
            multiple("KWG", p["KWG"], p["MDIMC"] * p["NDIMC"] // max(p["NDIMB"], 1), "KDIMB: MDIMC*NDIMC/NDIMB")
        else:
            multiple("KREG", p["KREG"], p["VWN"], "kernel 1 loads KREG in VWN vectors")
            if p["MDIMC"] != p["MDIMA"] or p["NDIMC"] != p["NDIMB"]:
                found.append("GEMMK=1 needs MDIMC == MDIMA and NDIMC == NDIMB")
        local = dtype_bytes * (p["SA"] * p["KWG"] * p["MWG"] + p["SB"] * p["KWG"] * p["NWG"])
        threads = p["MDIMC"] * p["NDIMC"]
    else:  # XgemmDirect
        multiple("WGD", p["WGD"], p["KWID"], "KWID unrolls the WGD loop")
        multiple("WGD", p["WGD"], p["MDIMCD"] * p["VWMD"], "integer MWID: MDIMCD*VWMD")
        multiple("WGD", p["WGD"], p["NDIMCD"] * p["VWND"], "integer NWID: NDIMCD*VWND")
        multiple("WGD", p["WGD"], p["MDIMAD"] * p["VWMD"], "integer MWIAD: MDIMAD*VWMD")
        multiple("WGD", p["WGD"], p["NDIMBD"] * p["VWND"], "integer NWIBD: NDIMBD*VWND")
        multiple("WGD", p["WGD"], p["MDIMCD"] * p["NDIMCD"] // max(p["MDIMAD"], 1), "KDIMAD: MDIMCD*NDIMCD/MDIMAD")
        multiple("WGD", p["WGD"], p["MDIMCD"] * p["NDIMCD"] // max(p["NDIMBD"], 1), "KDIMBD: MDIMCD*NDIMCD/NDIMBD")
        local = dtype_bytes * (p["WGD"] * (p["WGD"] + p["PADA"]) + p["WGD"] * (p["WGD"] + p["PADB"]))
        threads = p["MDIMCD"] * p["NDIMCD"]
    if local > local_memory_bytes:
        found.append(f"needs {local} bytes of local memory; the device has {local_memory_bytes}")
    if threads > max_work_group_size:
        found.append(f"work-group of {threads} threads; the device allows {max_work_group_size}")
    return found


def candidates(kernel: str, *, vendor: str, limits: dict, count: int, seed: int = 0) -> list:
    """Up to `count` legal (label, parameters) for `kernel`: the database entries (the device's vendor first),
    then random draws from the tuner spaces, without repeats; illegal ones are never returned."""
    table = load_table()
    rows = [row for row in table["candidate"] if row["kernel"] == kernel]
    rows.sort(key=lambda row: not row["entry"].lower().startswith(vendor.lower().split()[0] if vendor else "?"))
    found, seen = [], set()

    def offer(label: str, parameters: dict) -> None:
        key = tuple(sorted(parameters.items()))
        if key not in seen and not violations(kernel, parameters, **limits):
            seen.add(key)
            found.append((label, dict(parameters)))

    for row in rows:
        if len(found) >= count:
            return found
        offer(f"CLBlast database: {row['entry']}", row["parameters"])
    spaces = [row["values"] for row in table["space"].values() if row["kernel"] == kernel]
    rng = random.Random(seed)
    database = len(found)
    for _attempt in range(200 * count):
        if len(found) >= count or not spaces:
            break
        space = spaces[rng.randrange(len(spaces))]
        # numbered: a label names one candidate (a search restarted without a faulting one skips only it)
        offer(f"random #{len(found) - database + 1} from CLBlast's tuner space",
              {name: rng.choice(values) for name, values in space.items()})
    return found


def threshold_candidates(shapes: list) -> list:
    """XGEMM_MIN_INDIRECT_SIZE values from the space that split `shapes` differently (direct when m*n*k < T^3)."""
    values = load_table()["space"]["GemmRoutine"]["values"]["XGEMM_MIN_INDIRECT_SIZE"]
    found, partitions = [], set()
    for value in values:
        partition = tuple(shape.m * shape.n * shape.k < value ** 3 for shape in shapes)
        if partition not in partitions:
            partitions.add(partition)
            found.append((f"direct below {value}^3", {"XGEMM_MIN_INDIRECT_SIZE": value}))
    return found


# measuring
FILL_SOURCE = """
__kernel void fade_fill_uniform(__global float *out, const uint seed, const uint count) {
    uint i = get_global_id(0);
    if (i >= count) return;
    uint x = i * 0x9E3779B9u + seed;  /* lowbias32 (C. Wellons): one hash per element, the same on the host */
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    out[i] = (float)(x >> 8) * (1.0f / 8388608.0f) - 1.0f;
}
__kernel void fade_gather_strided(__global const float *c, __global float *out, const ulong stride,
                                  const uint strided, const ulong last) {
    uint i = get_global_id(0);
    if (i < strided) out[i] = c[i * stride];
    else if (i == strided) out[i] = c[last];
}
"""
B_SEED_SALT = 0x5BD1E995  # B's stream differs from A's


def operand_seeds(shape: GemmShape) -> tuple:
    """The seeds of A's and B's data: the same in every process (CRC-32 of the shape's label)."""
    seed = zlib.crc32(shape.label().encode())
    return seed, seed ^ B_SEED_SALT


def uniform_host(numpy, seed: int, count: int):
    """fade_fill_uniform on the host: float32 uniform in [-1, 1) in steps of 2^-23 (zero with probability 2^-24)."""
    x = numpy.arange(count, dtype=numpy.uint32) * numpy.uint32(0x9E3779B9) + numpy.uint32(seed)
    x ^= x >> numpy.uint32(16)
    x *= numpy.uint32(0x7FEB352D)
    x ^= x >> numpy.uint32(15)
    x *= numpy.uint32(0x846CA68B)
    x ^= x >> numpy.uint32(16)
    return (x >> numpy.uint32(8)).astype(numpy.float32) * numpy.float32(1.0 / 8388608.0) - numpy.float32(1.0)


def sample_positions(size: int) -> tuple:
    """(stride, strided count) of C's checked elements: every stride-th element, then the last one."""
    stride = max(1, size // CHECK_ELEMENTS)
    return stride, -(-size // stride)


class ShapeBench:
    """A, B and C buffers for the shapes on one device, kept while they fit DEVICE_BUFFER_FRACTION; A and B are
    filled on the device (fade_fill_uniform), C zeroed (beta 0 still reads C: garbage NaN would survive)."""

    def __init__(self, dev, clock: Callable[[], float] = time.perf_counter):
        import numpy

        self.numpy = numpy
        self.dev = dev
        self.clock = clock
        self.buffers: dict = {}
        self.held_bytes = 0

    def _buffers(self, shape: GemmShape):
        if shape in self.buffers:
            return self.buffers[shape]
        sizes = (shape.m * shape.k * shape.batch, shape.k * shape.n * shape.batch, shape.m * shape.n * shape.batch)
        nbytes = DTYPE_BYTES * sum(sizes)
        if self.held_bytes + nbytes > self.dev.info.global_memory_bytes * DEVICE_BUFFER_FRACTION:
            self.buffers.clear()  # released with their last reference; the shapes are filled again when next used
            self.held_bytes = 0
        cl, numpy, queue = self.dev.cl, self.numpy, self.dev.queue
        fill = self.dev.kernel("fade_fill_uniform", FILL_SOURCE)
        made = [cl.Buffer(self.dev.context, cl.mem_flags.READ_WRITE, DTYPE_BYTES * size) for size in sizes]
        for buffer, size, seed in zip(made, sizes, operand_seeds(shape)):
            fill(queue, (-(-size // 256) * 256,), (256,), buffer, numpy.uint32(seed), numpy.uint32(size))
        cl.enqueue_fill_buffer(queue, made[2], numpy.float32(0), 0, DTYPE_BYTES * sizes[2])
        queue.finish()
        self.buffers[shape] = made
        self.held_bytes += nbytes
        return made

    def call(self, shape: GemmShape, buffers) -> None:
        import torch

        a, b, c = buffers
        lda = shape.m if shape.trans_a else shape.k  # row-major op(A) is m x k: A is k x m when transposed
        ldb = shape.k if shape.trans_b else shape.n
        strides = (shape.m * shape.k, shape.k * shape.n, shape.m * shape.n)
        runtime.gemm(self.dev, torch.float32, shape.trans_a, shape.trans_b, shape.m, shape.n, shape.k, 1.0, a, 0,
                     lda, b, 0, ldb, 0.0, c, 0, shape.n, batch=shape.batch, strides=strides)

    def measure(self, shape: GemmShape, repeats: int = REPEATS) -> dict:
        """{median_s, relative_iqr, calls_per_block, sample}: seconds per call, and C's checked elements."""
        buffers = self._buffers(shape)
        queue = self.dev.queue
        per_call, calls = time_blocks(lambda: self.call(shape, buffers), queue.finish, self.clock, repeats)
        # C is reset before the sampled call: a configuration whose kernel writes nothing would otherwise show
        # the previous configuration's correct C (CLBlast writes C in place: fade.ocl calls it column-major).
        # The reset value is finite, so a kernel that reads C with beta 0 still gives the product.
        size = shape.m * shape.n * shape.batch
        self.dev.cl.enqueue_fill_buffer(queue, buffers[2], self.numpy.float32(C_RESET), 0, DTYPE_BYTES * size)
        self.call(shape, buffers)
        return {**spread(per_call), "calls_per_block": calls, "sample": self.sample(shape, buffers[2])}

    def sample(self, shape: GemmShape, buffer):
        """C's checked elements (sample_positions), gathered on the device: one small read, not all of C."""
        cl, numpy = self.dev.cl, self.numpy
        size = shape.m * shape.n * shape.batch
        stride, strided = sample_positions(size)
        out = cl.Buffer(self.dev.context, cl.mem_flags.READ_WRITE, DTYPE_BYTES * (strided + 1))
        gather = self.dev.kernel("fade_gather_strided", FILL_SOURCE)
        gather(self.dev.queue, (-(-(strided + 1) // 256) * 256,), (256,), buffer, out, numpy.uint64(stride),
               numpy.uint32(strided), numpy.uint64(size - 1))
        result = numpy.empty(strided + 1, numpy.float32)
        cl.enqueue_copy(self.dev.queue, result, out)
        return result


def time_blocks(call: Callable[[], None], sync: Callable[[], None], clock: Callable[[], float] = time.perf_counter,
                repeats: int = REPEATS) -> tuple:
    """(seconds per call of each of `repeats` timed blocks, calls per block): one call untimed (it builds what it
    needs), one timed to size the blocks at BLOCK_S (at most MAX_CALLS_PER_BLOCK calls), then the blocks, each
    ended by `sync` (the device's queue drained)."""
    call()
    sync()
    started = clock()
    call()
    sync()
    one_call_s = max(clock() - started, 1e-9)  # the 1e-9 floor: a coarse clock may read 0
    calls = max(1, min(MAX_CALLS_PER_BLOCK, math.ceil(BLOCK_S / one_call_s)))
    per_call = []
    for _ in range(repeats):
        started = clock()
        for _ in range(calls):
            call()
        sync()  # sync point: the block's calls have run
        per_call.append((clock() - started) / calls)
    return per_call, calls


def spread(samples: list) -> dict:
    """{median_s, relative_iqr} of per-call seconds (IQR by the nearest-rank quartiles of the blocks)."""
    ordered = sorted(samples)
    median = ordered[len(ordered) // 2] if len(ordered) % 2 else sum(ordered[len(ordered) // 2 - 1:][:2]) / 2
    quartile = lambda q: ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]  # noqa: E731
    return {"median_s": median, "relative_iqr": (quartile(0.75) - quartile(0.25)) / median if median > 0 else 0.0}


def relative_difference(numpy, sample, reference) -> float:
    """max |sample - reference| / max |reference|; inf when the sample has a NaN or an infinity."""
    if not numpy.all(numpy.isfinite(sample)):
        return math.inf
    scale = float(numpy.max(numpy.abs(reference))) or 1.0
    return float(numpy.max(numpy.abs(sample - reference))) / scale


def noise_floor(rows: list) -> float:
    """The relative change a decision must beat: the time-weighted relative IQR of the shapes, at least MIN_GAIN."""
    total = sum(row["weight_s"] for row in rows) or 1.0
    return max(MIN_GAIN, sum(row["weight_s"] * row["relative_iqr"] for row in rows) / total)


def measure_shapes(dev, shapes: list, bench: Optional[ShapeBench] = None, reference: Optional[dict] = None, *,
                   repeats: int = REPEATS, give_up_above_s: Optional[float] = None) -> dict:
    """{rows: per shape {shape, median_s, gflops, relative_iqr, weight_s, rel_diff}, total_s, worst_rel_diff,
    samples, abandoned}: the current parameters on `shapes` (weight_s = calls per step x seconds per call).
    With `give_up_above_s`, measuring stops (abandoned: True) once the shapes so far already sum to more."""
    bench = bench or ShapeBench(dev)
    rows, samples, worst = [], {}, 0.0
    for shape in shapes:
        if give_up_above_s is not None and sum(row["weight_s"] for row in rows) > give_up_above_s:
            return {"rows": rows, "total_s": math.inf, "worst_rel_diff": worst, "samples": samples,
                    "abandoned": True}
        timing = bench.measure(shape, repeats=repeats)
        row = {"shape": shape.as_dict(), "label": shape.label(), "median_s": timing["median_s"],
               "relative_iqr": timing["relative_iqr"], "gflops": shape.flops / timing["median_s"] / 1e9,
               "weight_s": shape.calls * timing["median_s"]}
        samples[shape] = timing["sample"]
        if reference is not None:
            row["rel_diff"] = relative_difference(bench.numpy, timing["sample"], reference[shape])
            worst = max(worst, row["rel_diff"])
        rows.append(row)
    return {"rows": rows, "total_s": sum(row["weight_s"] for row in rows), "worst_rel_diff": worst,
            "samples": samples, "abandoned": False}


def device_limits(dev) -> dict:
    return {"local_memory_bytes": dev.info.local_memory_bytes,
            "max_work_group_size": int(dev.cl_device.max_work_group_size)}


def apply(dev, parameters: dict) -> None:
    """Override CLBlast's float32 parameters for each kernel in `parameters` ({kernel: {name: value}})."""
    import torch

    for kernel, values in parameters.items():
        runtime.override_parameters(dev, kernel, torch.float32, values)


class DeviceLost(RuntimeError):
    """A candidate's kernel broke the device's queue (a fault: on NVIDIA's OpenCL every later command fails with
    INVALID_COMMAND_QUEUE), so this process cannot go on; `candidate` ("Xgemm:label") names it."""

    def __init__(self, candidate: str, error: Exception):
        super().__init__(f"{candidate} broke the device's queue: {str(error).splitlines()[0] if str(error) else error}")
        self.candidate = candidate


def queue_alive(dev) -> bool:
    """Whether the device's queue still runs commands (finish() fails on a queue a faulted kernel broke)."""
    try:
        dev.queue.finish()
        return True
    except Exception:  # noqa: BLE001 - any failure here means the queue is gone
        return False


def tune(dev, shapes: list, budget_s: float, *, progress: Optional[Callable[[str], None]] = None,
         clock: Callable[[], float] = time.perf_counter, seed: int = 0, max_candidates: int = 400,
         exclude: frozenset = frozenset()) -> dict:
    """Search CLBlast parameters for `shapes` on `dev` (a runtime.Device opened with CLBlast's own parameters)
    within `budget_s`; returns {chosen, default, tuned, noise, stages, rejected, elapsed_s}. `chosen` holds only
    the kernels whose change won by more than the noise; {} keeps CLBlast's defaults.

    Candidates are measured with SEARCH_REPEATS blocks on the heaviest shapes (SEARCH_WEIGHT_SHARE of the
    defaults' time), heaviest first, and abandoned as soon as their partial total passes the best so far; a
    candidate is not started when the last one's cost would overrun its stage's share of the budget
    (STAGE_BUDGET_SHARE). The choice is then measured on every shape and dropped unless it still wins there.
    `exclude`: candidates ("Xgemm:label") not to try (one broke the queue of an earlier search: DeviceLost)."""
    started = clock()
    progress = progress or (lambda message: None)
    shapes = [shape for shape in shapes if shape.dtype == TUNED_DTYPE]
    if not shapes:
        return {"chosen": {}, "note": f"no {TUNED_DTYPE} GEMMs to tune", "elapsed_s": 0.0, "stages": []}
    bench = ShapeBench(dev, clock)
    default = measure_shapes(dev, shapes, bench)
    reference = default.pop("samples")
    noise = noise_floor(default["rows"])
    weights = {shape: row["weight_s"] for shape, row in zip(shapes, default["rows"])}
    searched, covered = [], 0.0
    for shape in sorted(shapes, key=lambda shape: -weights[shape]):  # the heaviest first
        if covered >= SEARCH_WEIGHT_SHARE * default["total_s"]:
            break
        searched.append(shape)
        covered += weights[shape]
    progress(f"CLBlast defaults: {default['total_s'] * 1e3:.3f} ms of GEMM per step over {len(shapes)} shapes "
             f"(noise {100 * noise:.1f}%); searching on the {len(searched)} heaviest")
    limits = device_limits(dev)
    chosen, best_total, stages, rejected = {}, covered, [], []
    cost_s = clock() - started  # what the last measurement of every shape took (builds included)
    for stage in STAGES:
        stage_deadline = clock() + (budget_s - (clock() - started)) * STAGE_BUDGET_SHARE[stage]
        if stage == "GemmRoutine":
            offered = threshold_candidates(searched)
        else:
            offered = candidates(stage, vendor=dev.info.vendor, limits=limits, count=max_candidates, seed=seed)
        tried, abandoned, winner = 0, 0, None
        for label, parameters in offered:
            if f"{stage}:{label}" in exclude:
                continue
            if clock() + cost_s > stage_deadline:
                break
            tried += 1
            trial_started = clock()
            try:
                apply(dev, {**chosen, stage: parameters})
                result = measure_shapes(dev, searched, bench, reference, repeats=SEARCH_REPEATS,
                                        give_up_above_s=best_total)
            except Exception as error:  # noqa: BLE001 - a build or launch failure rejects the candidate only
                if not queue_alive(dev):
                    raise DeviceLost(f"{stage}:{label}", error) from error
                rejected.append({"kernel": stage, "parameters": parameters, "reason": str(error).splitlines()[0]})
                continue
            finally:
                cost_s = clock() - trial_started
            if result["worst_rel_diff"] > GEMM_RTOL:
                rejected.append({"kernel": stage, "parameters": parameters,
                                 "reason": f"result differs from the default by {result['worst_rel_diff']:.2e} "
                                           f"relative (> {GEMM_RTOL:g})"})
                continue
            abandoned += result["abandoned"]
            if result["total_s"] < best_total * (1 - noise):
                best_total, winner = result["total_s"], (label, parameters)
                progress(f"{stage}: {label}: {result['total_s'] * 1e3:.3f} ms on the searched shapes "
                         f"({covered / result['total_s']:.2f}x the defaults)")
        if winner is not None:
            chosen[stage] = winner[1]
        stages.append({"kernel": stage, "offered": len(offered), "tried": tried, "abandoned_slower": abandoned,
                       "chosen": None if winner is None else {"label": winner[0], "parameters": winner[1]}})
    tuned, note = None, None
    if chosen:
        apply(dev, chosen)
        tuned = measure_shapes(dev, shapes, bench, reference)
        tuned.pop("samples")
        if not tuned["total_s"] < default["total_s"] * (1 - noise) or tuned["worst_rel_diff"] > GEMM_RTOL:
            note = (f"dropped: on every shape the choice took {tuned['total_s'] * 1e3:.3f} ms against the defaults' "
                    f"{default['total_s'] * 1e3:.3f} ms (noise {100 * noise:.1f}%)")
            chosen = {}
    return {"note": note, "chosen": chosen, "default": default, "tuned": tuned, "noise": noise, "stages": stages,
            "searched_shapes": [shape.label() for shape in searched],
            "rejected": rejected, "elapsed_s": clock() - started, "budget_s": budget_s,
            "method": {"block_s": BLOCK_S, "repeats": REPEATS, "search_repeats": SEARCH_REPEATS,
                       "min_gain": MIN_GAIN, "search_weight_share": SEARCH_WEIGHT_SHARE, "gemm_rtol": GEMM_RTOL,
                       "check_elements": CHECK_ELEMENTS,
                       "statistic": "median seconds per call"}}


# the fingerprint and the persisted parameters
def clblast_identity() -> str:
    """The loaded libclblast: its real file name and the first 12 hex digits of its SHA-256."""
    runtime.clblast()
    path = next((line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
                 if "libclblast" in line), None) if Path("/proc/self/maps").exists() else None
    if path is None:
        return "libclblast (path unknown)"
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]
    return f"{Path(path).name} sha256:{digest}"


def fingerprint(dev) -> dict:
    """The tuning cache's fingerprint for an OpenCL device: identity (backend "ocl", device name, platform) and a
    stack whose `driver` names the OpenCL driver and platform versions and the CLBlast library, so a driver or
    CLBlast change stales the persisted parameters."""
    info = dev.info
    platform_version = dev.cl_device.platform.version.strip()
    return {"backend": "ocl", "name": info.name, "arch": info.platform, "torch": None, "cuda": None, "hip": None,
            "cudnn": None, "miopen": None,
            "driver": f"{info.driver_version} | {platform_version} | {clblast_identity()}"}


def persist(cache, fingerprint_: dict, chosen: dict, evidence: dict) -> Path:
    """Write the chosen parameters into the tuning cache (atomic, under its lock)."""
    from fade.version import __version__

    record = {"schema_version": SCHEMA_VERSION, "fade_version": __version__, "fingerprint": fingerprint_,
              "precision": TUNED_DTYPE, "parameters": chosen, "evidence": evidence}
    return cache.write_text(CACHE_FILE, json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")


def read_persisted(cache) -> Optional[dict]:
    """The cache's CLBlast record, or None (absent, unreadable or another schema)."""
    try:
        record = json.loads((cache.root / CACHE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("schema_version") == SCHEMA_VERSION else None


def apply_persisted(dev, *, environ=None, cache_base=None) -> dict:
    """Apply the parameters the tuning cache holds for `dev` (runtime.device calls it when it opens a device);
    returns and records in `applied` {applied, reason, kernels, cache}. Never raises: a failure is the reason."""
    environ = os.environ if environ is None else environ
    report: dict = {"applied": False, "kernels": [], "cache": None}
    try:
        if setting(DISABLE_ENV, environ) == "0":  # any other value: on (one not "0" or "1" warns)
            report["reason"] = f"{DISABLE_ENV}=0: CLBlast's own parameters"
        else:
            report.update(_apply_from_cache(dev, environ, cache_base))
    except Exception as error:  # noqa: BLE001 - opening the device must not fail for a cache problem
        report["reason"] = f"not applied: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    applied[dev.index] = report
    return report


def _apply_from_cache(dev, environ, cache_base) -> dict:
    identity = {"backend": "ocl", "name": dev.info.name, "arch": dev.info.platform}  # fingerprint()'s identity
    root = device_cache.device_root(identity, cache_base, environ)
    if not (root / CACHE_FILE).exists():  # nothing tuned: no directory made, CLBlast not loaded on a plain open
        return {"reason": "no tuned CLBlast parameters for this device (fade tune MODEL --device ocl --pretune)"}
    current = fingerprint(dev)
    cache = device_cache.open_device_cache(current, base=root.parent)  # a stack change moves the file aside
    record = read_persisted(cache)
    if record is None:
        return {"reason": "; ".join(cache.messages) or f"{root / CACHE_FILE} is unreadable", "cache": str(root)}
    if record.get("fingerprint") != current:
        changed = device_cache.differences(record.get("fingerprint") or {}, current)
        return {"reason": f"tuned for another stack ({', '.join(changed)})", "cache": str(root)}
    apply(dev, record["parameters"])
    return {"applied": bool(record["parameters"]), "kernels": sorted(record["parameters"]), "cache": str(root),
            "reason": "tuned parameters from the cache" if record["parameters"] else "the tuning kept CLBlast's own"}


runtime.DEVICE_OPENED.append(apply_persisted)
