"""The dist suite: which cases a request means (collectives x dtypes x sizes, and scaling runs), how it is
checked, and `run_dist`, which runs them on this process's ranks (under the user's launcher) or on ranks it
starts with torchrun (launch.py).

Sizes run from 8 B to 1 GiB in steps of 8x, plus the 8 / 64 / 512 MiB points that nccl-tests users quote;
`quick` keeps three small sizes, enough to run every collective in seconds on a 2-core CPU. Timing settings
fix the number of calls (collectives.py, "Timing"): FULL_TIMING's 20 blocks give a median and quartiles;
QUICK_TIMING's 5 are the least that give quartiles. A full block lasts about 5 ms (min_block_s), so that even
a 512 MiB all_reduce on NVLink (about 2 ms per call) runs several calls per block, as nccl-tests' 20-call
loop does, and a rank's late start weighs on one call in several, not on each sample.
"""

from __future__ import annotations

import difflib
import re
from typing import Optional, Sequence

from fade.errors import FadeUsageError
from fade.measure.case import Case
from fade.measure.zoo import ZOO

SUITE = "dist"
DEVICE_TYPES = ("cuda", "cpu", "xpu")  # rank.BACKENDS: nccl (RCCL on ROCm), gloo, xccl
DTYPES = ("fp32", "fp16", "bf16")  # what collectives carry in training; fp8 has no reduction in NCCL before 2.24
DEFAULT_DTYPES = ("fp32",)  # nccl-tests' default (-d float), so figures compare with its tables
SIZES = tuple(sorted({8 * 8**step for step in range(10)} | {2**23, 2**26, 2**29, 2**30}))  # 8 B .. 1 GiB
QUICK_SIZES = (8, 4096, 262144)
MAX_SIZE = 2**34  # 16 GiB per buffer: beyond any GPU's sensible collective, so a typo
FULL_TIMING = {"min_warmup_calls": 5, "min_samples": 20, "min_block_s": 0.005}
QUICK_TIMING = {"min_warmup_calls": 1, "min_samples": 5, "min_block_s": 2e-4}
DEFAULT_TIMEOUT_S = 60.0  # a collective waits this long for its peers; NCCL's own default is 10 min
STRATEGIES = ("ddp", "fsdp2")
DEFAULT_SCALING_BATCH = 32  # per process
QUICK_SCALING_BATCH = 2
QUICK_IMAGE_SIZE = 32  # px
QUICK_SEQUENCE = 16  # tokens
SIZE_UNITS = {"": 1, "b": 1, "k": 2**10, "kib": 2**10, "m": 2**20, "mib": 2**20, "g": 2**30, "gib": 2**30}


def size_label(size_bytes: int) -> str:
    """8 -> "8B", 4096 -> "4KiB", 2**29 -> "512MiB"."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size_bytes >= scale and size_bytes % scale == 0:
            return f"{size_bytes // scale}{unit}"
    return f"{size_bytes}B"


def parse_size(text: str) -> int:
    """"8", "4K", "64MiB", "1G" -> bytes (binary units); FadeUsageError naming --sizes otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in SIZE_UNITS:
        raise FadeUsageError(f"--sizes {text!r}: not a size; write bytes with an optional K, M or G (e.g. 8,64M,1G)")
    size = int(match.group(1)) * SIZE_UNITS[unit]
    if not 1 <= size <= MAX_SIZE:
        raise FadeUsageError(f"--sizes {text!r}: must be between 1 B and {size_label(MAX_SIZE)}")
    return size


def world_sizes(world: int) -> list:
    """1, 2, 4, ... up to `world`, and `world` itself: the process counts a scaling case compares."""
    sizes, count = [], 1
    while count < world:
        sizes.append(count)
        count *= 2
    return sizes + [world]


def plan_cases(request: dict, world: int) -> list:
    """Every case of `request` for `world` ranks, in run order: collectives by collective, dtype, size; then
    the scaling cases. The same on every rank and in the launching parent."""
    cases = []
    for collective in request.get("collectives") or ():
        for dtype in request.get("dtypes") or DEFAULT_DTYPES:
            for size in request.get("sizes") or ():
                params = {"collective": collective, "dtype": dtype, "size_bytes": size, "world": world}
                case_id = f"{SUITE}/{collective}/{dtype}/{size_label(size)}/x{world}"
                cases.append(Case(case_id, SUITE, "fade.measure.suites.dist.collectives", "collective_case", params, dtype=dtype))
    scaling = request.get("scaling") or {}
    for model in scaling.get("models") or ():
        entry = ZOO.get(model)
        size = None if entry is None else scaling.get("image_size" if entry.kind == "image" else "sequence_length")
        for strategy in scaling.get("strategies") or ("ddp",):
            params = {"model": model, "strategy": strategy, "batch": scaling["batch"], "size": size,
                      "worlds": world_sizes(world)}  # fmt: skip
            case_id = f"{SUITE}/scaling/{model}/{strategy}/x{world}/b{scaling['batch']}"
            cases.append(Case(case_id, SUITE, "fade.measure.suites.dist.scaling", "scaling_case", params))
    return cases


def _choose(flag: str, values: Sequence[str], known: Sequence[str]) -> list:
    for value in values:
        if value not in known:
            close = difflib.get_close_matches(value, list(known), n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise FadeUsageError(f"{flag} {value!r}: unknown{hint} (known: {', '.join(known)})")
    return list(dict.fromkeys(values))


def build_request(device: Optional[str], *, collectives=None, dtypes=None, sizes=None, quick: bool = False,
                  scaling=None, strategies=None, batch: Optional[int] = None, image_size: Optional[int] = None,
                  sequence_length: Optional[int] = None, timeout_s: Optional[float] = None, out, resume: bool = False,
                  run_id: str) -> dict:  # fmt: skip
    """The request every rank reads (JSON); FadeUsageError for anything that cannot run anywhere."""
    from fade.measure.suites.dist.collectives import COLLECTIVES
    from fade.measure.suites.models.suite import check_request

    device_type = None
    if device:
        device_type = device.split(":", 1)[0]
        if device_type not in DEVICE_TYPES:
            raise FadeUsageError(f"--device {device!r}: dist runs on {', '.join(DEVICE_TYPES)} (each rank takes its own "
                                 "device: cuda:LOCAL_RANK)")  # fmt: skip
        if ":" in device:
            raise FadeUsageError(f"--device {device!r}: give the device type ({device_type}); rank r takes {device_type}:LOCAL_RANK")
    if collectives is None:
        collectives = [] if scaling else list(COLLECTIVES)
    collectives = _choose("--collectives", collectives, COLLECTIVES)
    dtypes = _choose("--dtypes", dtypes or DEFAULT_DTYPES, DTYPES)
    sizes = sorted(set(sizes)) if sizes else list(QUICK_SIZES if quick else SIZES)
    if timeout_s is not None and not timeout_s > 0:
        raise FadeUsageError(f"--timeout {timeout_s}: must be > 0 seconds")
    request = {
        "suite": SUITE, "device_type": device_type, "collectives": collectives, "dtypes": dtypes, "sizes": sizes,
        "quick": quick, "timing": dict(QUICK_TIMING if quick else FULL_TIMING),
        "timeout_s": float(timeout_s or DEFAULT_TIMEOUT_S), "out": str(out), "resume": resume, "run_id": run_id,
    }  # fmt: skip
    if scaling:
        batch = batch or (QUICK_SCALING_BATCH if quick else DEFAULT_SCALING_BATCH)
        if quick:
            image_size = image_size or QUICK_IMAGE_SIZE
            sequence_length = sequence_length or QUICK_SEQUENCE
        check_request(list(scaling), batch=batch, mode="train", image_size=image_size, sequence_length=sequence_length,
                      models_flag="--scaling")  # fmt: skip
        request["scaling"] = {"models": list(scaling), "strategies": _choose("--strategies", strategies or ["ddp"], STRATEGIES),
                              "batch": batch, "image_size": image_size, "sequence_length": sequence_length}  # fmt: skip
    if not collectives and not scaling:
        raise FadeUsageError("fade bench dist: nothing to run: give --collectives or --scaling")
    return request


def run_dist(device: Optional[str] = None, *, nproc: Optional[int] = None, collectives=None, dtypes=None, sizes=None,
             quick: bool = False, scaling=None, strategies=None, batch: Optional[int] = None,
             image_size: Optional[int] = None, sequence_length: Optional[int] = None, out="results/dist.jsonl",
             resume: bool = False, timeout_s: Optional[float] = None, progress=None, run_id: Optional[str] = None,
             environ: Optional[dict] = None):  # fmt: skip
    """Run the dist suite; returns (RunSummary, env changes). Under a launcher (launch.rank_environment finds
    its variables in `environ`) this process is one rank and runs in place; otherwise `nproc` local ranks
    start under torchrun. Only rank 0's summary holds records; `summary.stopped` says why a run ended early
    (a collective timed out). FadeUsageError for a bad request, before anything starts."""
    import os

    from fade.measure.runner import check_output_path, new_run_id
    from fade.measure.suites.dist.launch import dist_environment, launch, rank_environment

    environ = os.environ if environ is None else environ
    run_id = run_id or new_run_id()
    request = build_request(device, collectives=collectives, dtypes=dtypes, sizes=sizes, quick=quick, scaling=scaling,
                            strategies=strategies, batch=batch, image_size=image_size, sequence_length=sequence_length,
                            timeout_s=timeout_s, out=out, resume=resume, run_id=run_id)  # fmt: skip
    ranks = rank_environment(environ)
    world = int(ranks["WORLD_SIZE"]) if ranks else nproc
    if world is None:
        raise FadeUsageError("fade bench dist: give --nproc N (processes to start here), or start it under torchrun or srun")
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise FadeUsageError(f"--nproc {world}: must be a positive integer")
    if ranks and nproc is not None and nproc != world:
        raise FadeUsageError(f"--nproc {nproc}: the launcher started {world} ranks (WORLD_SIZE); drop --nproc under a launcher")
    if request["collectives"] and world < 2:
        raise FadeUsageError(f"--nproc {world}: collectives need at least 2 processes")
    check_output_path(out)
    if ranks:
        from fade.measure.suites.dist.rank import close_group, run_rank

        changes = dist_environment(environ, request["device_type"])  # read at communicator set-up, still ahead
        summary = run_rank(request, ranks, progress=progress)
        close_group(summary)
        return summary, changes
    from fade.measure.results_lock import holding_results

    child_environment = dict(environ)
    changes = dist_environment(child_environment, request["device_type"])
    with holding_results(out):  # from the resume check to the last record; launch() nests in it
        if resume and request["device_type"]:  # rank 0's device is known here: skip the launch when nothing is left
            from fade.measure.runner import RunSummary, finished_cases

            rank0_device = "cpu" if request["device_type"] == "cpu" else f"{request['device_type']}:0"
            planned = plan_cases(request, world)
            finished, problems = finished_cases(out, rank0_device)
            if all(case.case_id in finished for case in planned):
                return RunSummary(out=str(out), run_id=run_id, device=rank0_device, selected=len(planned),
                                  resumed=len(planned), problems=problems), changes  # fmt: skip
        return launch(request, world, child_environment, progress=progress), changes


__all__ = ["run_dist", "plan_cases", "build_request", "SUITE", "SIZES", "QUICK_SIZES"]
