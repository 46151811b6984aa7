"""Runs one OpInfo op × dtype on the device and on the CPU reference, and classifies it (outcome.py).

These are case functions for the measure runner (`function(ctx, **params) -> CaseResult`), so they run in
its worker process, one worker serving many ops, with the runner's per-case timeout and crash isolation.

Method, per op × dtype: take the first `samples` of the OpInfo's sample inputs for (device, dtype), seeded
as OpInfo seeds them and made on the device (as test_ops.py::test_compare_cpu does). Samples of empty
tensors are passed over, a sample that runs but is not really in the dtype (inputs of another dtype)
does not count, and at most SAMPLE_SCAN_FACTOR x `samples` are run. Each sample is copied to the CPU *before* the device call (an
in-place op must not change the reference's input; the copy keeps storage, offset and strides), the op
is called on the device and the device synchronized (so an asynchronous kernel error surfaces here),
then the op is called on the CPU copy. Both outputs pass
through the sample's `output_process_fn_grad` (sign-ambiguous linalg results) and are compared by
closeness.py. A mismatch is re-checked with a second CPU call: if the CPU disagrees with itself the op is
nondeterministic and is not counted. Random and uninitialized-output ops are run but not compared
(opdb.compare_policy). fp32 matmul and convolution run IEEE (TF32 off) so fp32 can be compared.

Timing, for `slow`: on the largest sample that matched (by input bytes), the correctness call is the
warm-up (on fade.ocl, one more untimed call: it builds a shape's own kernels at its second call); then
TIMING_REPS calls (fewer if the first call was long: TIMING_BUDGET_S), each followed by a
device synchronize and timed on the host clock; the statistic is the median. The CPU copy is timed the
same way, on OPINFO_CPU_THREADS thread(s) for OpInfo ops (torch's default for sized probes; the record
keeps `cpu_threads`). Host timing includes launch and sync latency, which is the point on inputs this
small.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Optional

from fade.measure import ocldevice
from fade.measure.case import CaseResult, synchronize
from fade.measure.step.conditions import pinned_flags
from fade.measure.suites.ops import opdb
from fade.measure.suites.ops.closeness import compare_outputs
from fade.analyze.ops.curated import curated_rows_for
from fade.analyze.ops.families import family_of
from fade.analyze.ops.outcome import class_of_exception, slow_reason, worst_sample_class
from fade.measure.suites.ops.sized import SizedProbe

SEED = 0  # torch.manual_seed before a sized probe's inputs are made (OpInfo samples use OpInfo's own SEED)
DEFAULT_SAMPLES = 3  # samples per op × dtype; the first ones are the plainest (OpInfo lists them first)
SAMPLE_SCAN_FACTOR = 4  # samples that ran but are not in the dtype (inputs of another dtype) do not count
#                         towards `samples`; at most samples x this many are run
SAMPLE_GENERATION_LIMIT = 256  # samples made per op x dtype, at most, when looking past empty ones
# CPU threads while an OpInfo op runs (reference and timing): its samples are a few hundred elements, where
# one thread is the fastest CPU path, and a parallel region on a busy machine waits for a descheduled
# thread (measured: pad.reflect 2 us on 1 thread, 8-12 ms on 2 threads with the 2-core machine at load
# 3.5). Sized probes keep torch's default: their inputs are large enough for threads to pay.
OPINFO_CPU_THREADS = 1
TIMING_REPS = 5  # timed calls per side after the warm-up call
TIMING_BUDGET_S = 0.05  # fewer reps when the warm-up call was long: about this much timed work per side
MESSAGE_CHARS = 300  # an exception message kept in the record is cut to this length
INJECT_MODULE = "fade_ops_injected_faults"  # sys.modules name of the --inject file (tests only)


def list_ops(ctx, *, dtypes: list, inject: Optional[str] = None) -> CaseResult:
    """The catalog of ops this worker can run on ctx.device, with each op's family and dtype claims.

    Also the warm-up of a fresh worker: it imports op_db (seconds) outside any op's timeout.
    """
    ops = opdb.load_ops()
    if inject:
        _load_injection(inject)
    device_type = opdb.device_type_of(ctx.device)
    catalog = []
    for op_id, op in ops.items():
        claimed = opdb.claimed_dtypes(op, device_type)
        applicable = op.dtypes if isinstance(op, SizedProbe) else None
        catalog.append(
            {
                "op": op_id,
                "family": family_of(op_id, type(op).__name__),
                "claimed": None if claimed is None else sorted(claimed & set(dtypes)),
                "dtypes": None if applicable is None else [dtype for dtype in dtypes if dtype in applicable],
            }
        )
    return CaseResult(
        value=float(len(catalog)),
        unit="ops",
        formula="OpInfo entries in op_db plus FADE's sized probes",
        extra={"ops": catalog, "rocm_claims": bool(os.environ.get(opdb.ROCM_TEST_FLAG))},
    )


def run_op(
    ctx,
    *,
    op: str,
    dtype: str,
    samples: int = DEFAULT_SAMPLES,
    inject: Optional[str] = None,
    family: Optional[str] = None,
    claimed: Optional[bool] = None,
) -> CaseResult:
    """Run `op` in `dtype` on ctx.device against the CPU and return its classification in `extra`.

    `family` and `claimed` are the parent's catalog view, kept in the record's params so that an op
    whose worker dies still has them; this function re-derives both.
    """
    import torch

    info = opdb.load_ops()[op]
    device = ctx.device
    device_type = opdb.device_type_of(device)
    torch_dtype = getattr(torch, dtype)
    claimed_set = opdb.claimed_dtypes(info, device_type)
    claimed = None if claimed_set is None else dtype in claimed_set  # the worker's view wins
    policy = opdb.compare_policy(info, op, device_type, torch_dtype)
    override = getattr(info, "tolerances", {}).get(dtype) or policy.tolerance_override
    device_call = _injected(inject, op, info) or info
    reference_call = getattr(info, "cpu_reference", None) or info
    extra = {
        "op": op,
        "dtype": dtype,
        "family": family_of(op, type(info).__name__),
        "curated": curated_rows_for(op, dtype),
        "claimed": claimed,
        "compared": policy.compare,
        "not_compared_reason": policy.reason,
        "known_mismatch": policy.known_mismatch,
        "fp32_math": "ieee",
    }
    threads = None if isinstance(info, SizedProbe) else OPINFO_CPU_THREADS
    outcomes: list = []
    timed = None
    counted = 0  # samples that count towards `samples`: failed, or ran in this dtype
    with pinned_flags("ieee", "ieee"), _torch_threads(threads):
        extra["cpu_threads"] = torch.get_num_threads()
        sample_iterator = _sample_inputs(info, device, torch_dtype, samples * SAMPLE_SCAN_FACTOR)
        for index in itertools.count():
            try:
                sample = next(sample_iterator)
            except StopIteration:
                break
            except Exception as error:  # the OpInfo's sample function failed for this device or dtype
                outcomes.append(_failed(index, error, claimed, stage="making sample inputs"))
                break
            outcome, state = _run_sample(index, sample, device_call, reference_call, device, policy, override, claimed, torch_dtype)
            outcomes.append(outcome)
            if state.get("broken"):
                extra["device_broken"] = True  # a sticky device error: the rest cannot run in this process
                break
            ran_right = outcome["class"] in ("ok", "fallback")
            if ran_right and (timed is None or _timing_rank(outcome) > _timing_rank(timed[0])):
                timed = (outcome, state)
            counted += outcome["class"] != "ok" or bool(outcome.get("exercised"))
            if counted >= samples:
                break
        if timed is not None and not extra.get("device_broken"):
            try:
                extra["timing"] = _time_sample(timed[1], device_call, reference_call, device)
            except Exception as error:  # a second call failed where the first ran (stateful ops)
                extra["timing_error"] = _message(error)
    op_class = worst_sample_class(outcome["class"] for outcome in outcomes) or "untested"
    if op_class in ("ok", "fallback") and not any(outcome.get("exercised") for outcome in outcomes):
        op_class = "untested"  # it ran, but no sample was really in this dtype: no claim can be checked
        extra["untested_reason"] = f"no sample input is a non-empty {dtype} tensor (the sample function ignores the dtype)"
    timing = extra.get("timing") or {}
    if op_class == "ok" and timing:
        reason = slow_reason(device_type, timing["device_median_s"], timing["cpu_median_s"], timing["input_bytes"])
        if reason:
            op_class, extra["slow_reason"] = "slow", reason
    extra["class"] = op_class
    fallback_ops: dict = {}
    for outcome in outcomes:
        for name, count in (outcome.get("fallback_ops") or {}).items():
            fallback_ops[name] = fallback_ops.get(name, 0) + count
    if fallback_ops:
        extra["fallback_ops"] = fallback_ops  # every sample's device calls, mismatching ones included
    extra["samples"] = outcomes
    extra["message"] = next((outcome.get("error") for outcome in outcomes if outcome.get("error")), None)
    device_median_s = timing.get("device_median_s")
    return CaseResult(
        value=None if device_median_s is None else device_median_s * 1e6,
        unit="us",
        formula="median host time of one synchronized device call on the largest matching sample",
        extra=extra,
    )


def _sample_inputs(info, device: str, dtype, limit: int):
    """Up to `limit` sample inputs, made lazily and seeded the way OpInfo.sample_inputs seeds them
    (set_rng_seed(SEED) before each one, as its TrackedInputIter does outside a test) but without that
    iterator's call-stack inspection, which costs ~5 ms per op with op_db loaded (inspect.stack reads every
    frame's source).

    Samples whose tensors are all empty are passed over (svd's first dozen are 0 x n); of the first
    SAMPLE_GENERATION_LIMIT made, only if every one is empty is the first of them yielded, so the op runs.
    """
    import torch

    function = getattr(info, "sample_inputs_func", None)
    if function is None:  # a sized probe
        torch.manual_seed(SEED)
        yield from itertools.islice(info.sample_inputs(device, dtype, requires_grad=False), limit)
        return
    from torch.testing._internal.common_utils import SEED as OPINFO_SEED
    from torch.testing._internal.common_utils import set_rng_seed

    set_rng_seed(OPINFO_SEED)
    iterator = iter(function(info, device, dtype, False))
    yielded = 0
    first_empty = None
    for _ in range(SAMPLE_GENERATION_LIMIT):
        set_rng_seed(OPINFO_SEED)
        try:
            sample = next(iterator)
        except StopIteration:
            break
        tensors = _tensors(sample)
        if tensors and all(tensor.numel() == 0 for tensor in tensors):
            first_empty = first_empty or sample
            continue
        yield sample
        yielded += 1
        if yielded >= limit:
            return
    if not yielded and first_empty is not None:
        yield first_empty


def _exercises_dtype(sample, output, dtype) -> bool:
    """Whether the sample really ran `dtype`: a tensor of it among the inputs (the main input, or another
    with more than one element), or, for a sample with no tensor input (factories), among the outputs.
    Some sample functions ignore the dtype (torch._scaled_mm makes fp8 inputs) or make only empty tensors
    for it (svd in float16): "it ran" then says nothing about the dtype."""
    import torch
    from torch.utils._pytree import tree_leaves

    inputs = _tensors(sample)
    if any(t.dtype == dtype and (t.numel() > 1 or (t is sample.input and t.numel() == 1)) for t in inputs):
        return True
    if inputs:
        return False
    return any(isinstance(t, torch.Tensor) and t.dtype == dtype and t.numel() > 0 for t in tree_leaves(output))


def _run_sample(index, sample, device_call, reference_call, device, policy, override, claimed, dtype) -> tuple:
    """(the sample's outcome dict, state kept for timing: the sample and a pristine CPU copy)."""
    outcome = {"index": index, "class": "ok", "input_bytes": _input_bytes(sample), "shapes": _describe(sample)}
    try:
        pristine = _to_cpu_copy(sample)  # before the device call: in-place ops change their inputs
    except Exception as error:  # a tensor kind FADE cannot copy: run on the device only
        pristine, copy_error = None, _message(error)
    state = {"index": index, "sample": sample, "pristine": pristine}
    fallbacks_before = ocldevice.fallback_counts() if ocldevice.is_ocl(device) else None
    try:
        started = time.perf_counter()
        actual = device_call(sample.input, *sample.args, **sample.kwargs)
        synchronize(device)
        state["first_device_s"] = time.perf_counter() - started
        raw_output = actual
        actual = sample.output_process_fn_grad(actual)
    except Exception as error:
        outcome.update(_failed(index, error, claimed))
        state["broken"] = not _device_healthy(device)
        return outcome, state
    if fallbacks_before is not None:  # the device call ran ops through fade.ocl's CPU fallback
        fell_back = ocldevice.fallback_delta(fallbacks_before, ocldevice.fallback_counts())["ops"]
        if fell_back:
            outcome["class"], outcome["fallback_ops"] = "fallback", fell_back
    outcome["exercised"] = _exercises_dtype(sample, raw_output, dtype)
    if not policy.compare:
        outcome["note"] = f"not compared: {policy.reason}"
        return outcome, state
    if pristine is None:
        outcome["note"] = f"not compared: FADE could not copy the inputs to the CPU ({copy_error})"
        return outcome, state
    try:
        started = time.perf_counter()
        expected = _call_on_copy(reference_call, pristine)
        state["first_cpu_s"] = time.perf_counter() - started
    except Exception as error:
        outcome["note"] = f"not compared: the CPU reference raised {_message(error)}"
        return outcome, state
    try:
        closeness = compare_outputs(actual, expected, override=override)
    except Exception as error:  # an output kind FADE cannot compare (nested, quantized, ...)
        outcome["note"] = f"not compared: FADE could not compare the outputs ({_message(error)})"
        return outcome, state
    outcome["closeness"] = closeness.to_dict()
    if closeness.matches:
        return outcome, state
    try:
        again = _call_on_copy(reference_call, pristine)
        cpu_self = compare_outputs(again, expected, override=override)
    except Exception:
        cpu_self = None
    if cpu_self is not None and not cpu_self.matches:
        outcome["note"] = "not compared: the CPU reference disagrees with itself (nondeterministic output)"
        return outcome, state
    outcome["class"] = "mismatch"
    if policy.known_mismatch:
        outcome["note"] = f"known: {policy.known_mismatch}"
    return outcome, state


def _time_sample(state: dict, device_call, reference_call, device: str) -> dict:
    sample, pristine = state["sample"], state["pristine"]
    device_s, device_reps = _median_call_s(
        lambda: device_call(sample.input, *sample.args, **sample.kwargs), device, state.get("first_device_s", 0.0)
    )
    cpu_s = cpu_reps = None
    if pristine is not None:
        cpu_copy = _clone(pristine)
        try:
            cpu_s, cpu_reps = _median_call_s(
                lambda: reference_call(cpu_copy.input, *cpu_copy.args, **cpu_copy.kwargs), "cpu", state.get("first_cpu_s", 0.0)
            )
        except Exception:  # the CPU cannot run it (a dtype it lacks): no ratio
            cpu_s = cpu_reps = None
    return {
        "sample": state.get("index"),
        "input_bytes": _input_bytes(sample),
        "shapes": _describe(sample),
        "device_median_s": device_s,
        "device_reps": device_reps,
        "cpu_median_s": cpu_s,
        "cpu_reps": cpu_reps,
        "device_over_cpu": device_s / cpu_s if cpu_s else None,
    }


@contextlib.contextmanager
def _torch_threads(count: Optional[int]):
    """Run with torch's intra-op thread count set to `count` (None: unchanged), restored after."""
    import torch

    previous = torch.get_num_threads()
    if count is None or count == previous:
        yield
        return
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _timing_rank(outcome: dict) -> tuple:
    """The timed sample is the largest one that ran in the dtype (by input bytes)."""
    return (bool(outcome.get("exercised")), outcome["input_bytes"])


def _median_call_s(call, device: str, first_call_s: float) -> tuple:
    if ocldevice.is_ocl(device):
        # fade.ocl builds kernels at a shape's first and at its second call (a geometry's own program once it is
        # met again): one more untimed call, or its build is the timed call (PoCL: add of (5, 1) and (5) took
        # 45 and 55 ms, then 0.2-0.5)
        started = time.perf_counter()
        call()
        synchronize(device)
        first_call_s = time.perf_counter() - started
    reps = max(1, min(TIMING_REPS, int(TIMING_BUDGET_S / max(first_call_s, 1e-9))))
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        call()
        synchronize(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times), reps


def _failed(index, error: BaseException, claimed, *, stage: str = "") -> dict:
    op_class = class_of_exception(type(error).__name__, str(error), claimed=claimed)
    outcome = {"index": index, "class": op_class, "error": _message(error)}
    if stage:
        outcome["note"] = f"failed while {stage}"
    return outcome


def _message(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:MESSAGE_CHARS]


def _device_healthy(device: str) -> bool:
    try:
        synchronize(device)
        return True
    except Exception:
        return False


def _to_cpu_copy(sample):
    """A CPU copy of the sample that no device call can change; factory kwargs point at the CPU."""
    cpu = _clone(sample)
    if "device" in cpu.kwargs:  # factory ops: the reference must make its tensor on the CPU
        cpu.kwargs = dict(cpu.kwargs, device="cpu")
    return cpu


def _clone(sample):
    return sample.transform(_cpu_copy_of_tensor)


def _cpu_copy_of_tensor(value):
    """A CPU copy with the same storage, offset, sizes and strides, so a view of part of a storage
    (as_strided) or an overlapping layout reads the same memory on the CPU as on the device. Tensors this
    cannot rebuild (sparse, conjugate or negative views, subclasses) are copied plainly."""
    import torch

    if not isinstance(value, torch.Tensor):
        return value
    plain = type(value) is torch.Tensor and value.layout == torch.strided and not (value.is_conj() or value.is_neg())
    if plain:
        try:
            storage = value.untyped_storage()
            storage = storage.cpu() if storage.device.type != "cpu" else storage.clone()
            copy = torch.empty((0,), dtype=value.dtype)
            copy.set_(storage, value.storage_offset(), value.shape, value.stride())
            return copy
        except (RuntimeError, TypeError, NotImplementedError):
            pass
    return value.detach().to("cpu", copy=True)


def _call_on_copy(call, pristine):
    copy = _clone(pristine)
    return copy.output_process_fn_grad(call(copy.input, *copy.args, **copy.kwargs))


def _tensors(sample):
    import torch
    from torch.utils._pytree import tree_leaves

    return [leaf for leaf in tree_leaves([sample.input, list(sample.args), dict(sample.kwargs)]) if isinstance(leaf, torch.Tensor)]


def _input_bytes(sample) -> int:
    """Bytes of the sample's tensors (stored values only for sparse ones)."""
    import torch

    total = 0
    for tensor in _tensors(sample):
        stored = tensor.numel() if tensor.layout == torch.strided else tensor._nnz()
        total += stored * tensor.element_size()
    return total


def _describe(sample) -> str:
    """"float32[5, 5], float32[5]": the sample's tensors, for reproducing a finding."""
    parts = [f"{str(tensor.dtype).removeprefix('torch.')}{list(tensor.shape)}" for tensor in _tensors(sample)]
    text = ", ".join(parts) or "no tensors"
    return text if len(text) <= 160 else text[:157] + "..."


def _load_injection(path: str):
    """The test-only fault module given by --inject: `wrap_op(op_id, call) -> call or None`."""
    module = sys.modules.get(INJECT_MODULE)
    if module is None or getattr(module, "__file__", None) != str(Path(path).resolve()):
        spec = importlib.util.spec_from_file_location(INJECT_MODULE, str(Path(path).resolve()))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[INJECT_MODULE] = module
    return module


def _injected(inject: Optional[str], op_id: str, info):
    if not inject:
        return None
    return _load_injection(inject).wrap_op(op_id, info)
