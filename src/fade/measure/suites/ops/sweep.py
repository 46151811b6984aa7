"""`run_ops_sweep`: validates a request, asks a worker for the op catalog, and runs every op × dtype through
the measure runner (isolated worker, per-op timeout, JSONL appended as it goes, resume).

One worker serves many ops, so torch and op_db are imported once per worker, not per op. An op that kills
its worker is recorded as `crash` and one that exceeds the timeout as `hang`; the runner then starts a
fresh worker, which this module warms (imports op_db, under WARMUP_TIMEOUT_S) before the next op, so
that import never counts against an op's timeout. This process itself never imports torch.
"""

from __future__ import annotations

import difflib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from fade.errors import FadeUsageError
from fade.measure.case import Case, CaseContext
from fade.measure.suites.micro.suite import split_patterns
from fade.measure.suites.micro.suite import matches as matches_glob_or_substring
from fade.analyze.ops.curated import is_always_swept
from fade.analyze.ops.gap import sweep_summary
from fade.analyze.ops.rows import SUITE, case_id, load_ops_file
from fade.measure.runner import (
    RunProgress,
    RunSummary,
    WorkerStartError,
    check_output_path,
    make_executor,
    new_run_id,
    run_cases,
)

PROBE_MODULE = "fade.measure.suites.ops.probe"
DEFAULT_DTYPES = ("float32", "float16", "bfloat16", "int64")  # the sweep: 3 floats and the index int
DEFAULT_SAMPLES = 3  # per op × dtype: the whole op_db in 4 dtypes fits 10 minutes on one H100
KNOWN_DTYPES = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "complex128",
    "complex64",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
)
DTYPE_ALIASES = {
    "fp64": "float64",
    "double": "float64",
    "f64": "float64",
    "fp32": "float32",
    "float": "float32",
    "f32": "float32",
    "fp16": "float16",
    "half": "float16",
    "f16": "float16",
    "bf16": "bfloat16",
    "cfloat": "complex64",
    "cdouble": "complex128",
    "long": "int64",
    "i64": "int64",
    "int": "int32",
    "i32": "int32",
    "short": "int16",
    "i16": "int16",
    "i8": "int8",
    "u8": "uint8",
}
OP_TIMEOUT_S = 60.0  # an op × dtype runs 3 small samples in well under a second; a minute is a hang
WARMUP_TIMEOUT_S = 300.0  # a fresh worker: torch import, GPU init and the op_db import (6-10 s warm, more cold)


class OpsCannotRun(RuntimeError):
    """The request is valid but this machine cannot sweep (op_db not importable, the worker will not start)."""


@dataclass
class OpsSweep:
    """What a sweep did (`run`: the runner's summary of this invocation) and what the file now holds for
    this device (`rows`: one per op × dtype, the latest record; `summary`: gap.sweep_summary of them)."""

    run: RunSummary
    device: str
    dtypes: list
    ops_selected: int
    rows: list = field(default_factory=list)
    summary: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "out": self.run.out,
            "run_id": self.run.run_id,
            "device": self.device,
            "dtypes": list(self.dtypes),
            "ops_selected": self.ops_selected,
            "tasks_selected": self.run.selected,
            "tasks_resumed": self.run.resumed,
            "interrupted": self.run.interrupted,
            "wall_s": self.run.wall_s,
            "problems": list(self.run.problems),
            "summary": self.summary,
        }


def parse_dtypes(names: Optional[Sequence[str]]) -> list:
    """Canonical torch dtype names ("float32", ...) from names or aliases ("fp32", "bf16", "long"),
    comma-separated or not. FadeUsageError for an unknown one, with the closest known name."""
    if not names:
        return list(DEFAULT_DTYPES)
    parsed = []
    for chunk in names:
        for name in (part.strip() for part in chunk.split(",")):
            if not name:
                continue
            canonical = DTYPE_ALIASES.get(name.lower(), name.lower())
            if canonical not in KNOWN_DTYPES:
                close = difflib.get_close_matches(name.lower(), list(KNOWN_DTYPES) + list(DTYPE_ALIASES), n=1, cutoff=0.5)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise FadeUsageError(f"--dtypes: unknown dtype {name!r}{hint}; known: {', '.join(KNOWN_DTYPES)}")
            if canonical not in parsed:
                parsed.append(canonical)
    if not parsed:
        raise FadeUsageError("--dtypes: no dtype given; e.g. --dtypes float32,bfloat16")
    return parsed


def matches(pattern: str, op_id: str, op_ids: frozenset) -> bool:
    """A pattern that is an op id matches that op only ("sum", not "nansum"); a glob matches whole ids;
    other text is a substring ("linalg", "conv")."""
    if pattern in op_ids:
        return pattern == op_id
    return matches_glob_or_substring(pattern, op_id)


def select_ops(catalog: list, patterns: Sequence[str], *, curated: bool = True) -> list:
    """The catalog entries to sweep: all when `patterns` is empty, else those matching a pattern (see
    `matches`), plus the curated ops unless `curated` is False. FadeUsageError for a pattern that matches
    no op."""
    op_ids = [entry["op"] for entry in catalog]
    known = frozenset(op_ids)
    for pattern in patterns:
        if not any(matches(pattern, op_id, known) for op_id in op_ids):
            close = difflib.get_close_matches(pattern, op_ids, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise FadeUsageError(f"--only {pattern!r} matches no OpInfo op{hint} (ids look like 'add', 'nn.functional.conv2d')")
    return [
        entry
        for entry in catalog
        if not patterns
        or any(matches(pattern, entry["op"], known) for pattern in patterns)
        or (curated and is_always_swept(entry["op"]))
    ]


def build_cases(selected: list, dtypes: Sequence[str], *, samples: int, inject: Optional[str]) -> list:
    """One runner Case per op × dtype: every requested dtype of an OpInfo (claimed or not: both are
    findings), the applicable ones of a sized probe."""
    cases = []
    for entry in selected:
        for dtype in dtypes:
            if entry["dtypes"] is not None and dtype not in entry["dtypes"]:
                continue
            claimed = None if entry["claimed"] is None else dtype in entry["claimed"]
            params = {"op": entry["op"], "dtype": dtype, "samples": samples, "family": entry["family"], "claimed": claimed}
            if inject:
                params["inject"] = inject
            cases.append(Case(case_id=case_id(entry["op"], dtype), suite=SUITE, module=PROBE_MODULE, function="run_op", params=params))
    return cases


def catalog_case(dtypes: Sequence[str], inject: Optional[str]) -> Case:
    params = {"dtypes": list(dtypes)}
    if inject:
        params["inject"] = inject
    return Case(case_id="opinfo/catalog", suite=SUITE, module=PROBE_MODULE, function="list_ops", params=params)


class WarmingExecutor:
    """A runner executor that warms each fresh worker with `warmup` (the catalog case, which imports op_db)
    under WARMUP_TIMEOUT_S before its first op.

    A worker is fresh at the start, after an op crashed or hung (the runner replaced it) and after an op
    left the device broken (extra.device_broken: the worker exits after that op).
    """

    def __init__(self, inner, warmup: Case):
        self.inner = inner
        self.warmup = warmup
        self.needs_warmup = True
        self.warmups = 0  # workers warmed, the first included

    def start(self) -> dict:
        return self.inner.start()

    def warm(self, ctx: CaseContext) -> dict:
        saved = getattr(self.inner, "timeout_s", None)
        if saved is not None:
            self.inner.timeout_s = max(saved, WARMUP_TIMEOUT_S)
        try:
            record = self.inner.run(self.warmup, ctx)
        finally:
            if saved is not None:
                self.inner.timeout_s = saved
        self.needs_warmup = record.get("status") != "ok"
        self.warmups += 1
        return record

    def run(self, case: Case, ctx: CaseContext) -> dict:
        if self.needs_warmup:
            self.warm(ctx)
        record = self.inner.run(case, ctx)
        broken = bool((record.get("extra") or {}).get("device_broken"))
        self.needs_warmup = record.get("status") in ("crashed", "timeout") or broken
        return record

    def close(self) -> None:
        self.inner.close()


def run_ops_sweep(
    device: Optional[str] = None,
    *,
    dtypes: Optional[Sequence[str]] = None,
    only: Optional[str] = None,
    samples: int = DEFAULT_SAMPLES,
    out="ops.jsonl",
    resume: bool = False,
    timeout_s: Optional[float] = None,
    curated: bool = True,
    isolate: bool = True,
    inject: Optional[str] = None,
    progress: Optional[RunProgress] = None,
    run_id: Optional[str] = None,
) -> OpsSweep:
    """Sweep every OpInfo op × dtype on `device` (None: the first GPU, else the CPU) against the CPU,
    appending one record per op × dtype to `out`.

    `only`: comma-separated globs or substrings of op ids; the curated ops (curated.py) are swept too
    unless `curated` is False. `samples`: sample inputs per op × dtype. `timeout_s`: per op × dtype, in
    the isolated worker (`isolate`). `inject`: a Python file with `wrap_op(op_id, call) -> call | None`
    that replaces device calls (fault-injection tests). `progress` hears of each op × dtype
    (fade.measure.runner.RunProgress). Usage errors raise FadeUsageError before any op runs; OpsCannotRun
    when op_db cannot be loaded here.
    """
    dtype_names = parse_dtypes(dtypes)
    patterns = split_patterns(only)
    if samples < 1:
        raise FadeUsageError(f"--samples {samples}: give at least 1")
    if timeout_s is not None and timeout_s <= 0:
        raise FadeUsageError(f"--timeout {timeout_s:g}: give a positive number of seconds")
    if inject is not None:
        if not Path(inject).is_file():
            raise FadeUsageError(f"--inject {inject}: no such file")
        inject = str(Path(inject).resolve())
    out_path = check_output_path(out)
    run_id = run_id or new_run_id()
    started = time.monotonic()  # the run's wall time includes the catalog warm-up
    warming = WarmingExecutor(make_executor(device, isolate=isolate, timeout_s=timeout_s, default_timeout_s=OP_TIMEOUT_S),
                              catalog_case(dtype_names, inject))
    plan_found: dict = {}

    def plan(session: dict) -> list:
        catalog_record = warming.warm(CaseContext(device=session["device"], run_id=run_id))
        if catalog_record.get("status") != "ok":
            reason = catalog_record.get("error") or catalog_record.get("status")
            raise OpsCannotRun(f"cannot load torch's OpInfo database on {session['device']}: {reason}")
        plan_found["selected"] = select_ops(catalog_record["extra"]["ops"], patterns, curated=curated)
        plan_found["cases"] = build_cases(plan_found["selected"], dtype_names, samples=samples, inject=inject)
        return plan_found["cases"]

    try:
        run = run_cases(plan, executor=warming, out=out_path, run_id=run_id, resume=resume, progress=progress,
                        started=started)
    except WorkerStartError as error:  # the worker would not start (FadeUsageError for a bad device passes)
        raise OpsCannotRun(str(error)) from None
    loaded = load_ops_file(out_path, strict=False, device=run.device, allow_empty=True)
    run.problems = sorted(set(run.problems) | set(loaded["problems"]))
    wanted = {case.case_id for case in plan_found["cases"]}
    rows = [row for row in loaded["rows"] if case_id(row["op"], row["dtype"]) in wanted]
    sweep = OpsSweep(run=run, device=run.device, dtypes=dtype_names, ops_selected=len(plan_found["selected"]), rows=rows)
    sweep.summary = sweep_summary(rows)
    return sweep
