"""Side-by-side comparison of result sets (the computation; fade.report.compare renders it), matched by case, as % of a baseline (dlprimitives' layout:
rows = networks or cases, columns = train/infer per result set), with noise and regression flags.

Reads result records only. A result set is one results file (or, with `by="variant"`, one model-bench
variant of a file; with `by="device"`, one torch device over all the files, a later file's record of a case
replacing an earlier one's). Each set keeps the latest record per case. Cells are matched on the row and
column keys below, never on position.

Devices (issue 19's "ocl as % of the vendor stack"): `fade bench models --device ocl:0,cuda:0` runs both in
turn into one file and lays them side by side with compare_devices, whose baseline is the LAST device listed
(the vendor stack: list the device under test first); `fade compare FILE --by device --baseline cuda:0` gives
the same numbers. A case whose variant turns a knob the device ignores (cudnn_benchmark on fade.ocl) keeps
its row, and its note says what ran instead (extra.variant.not_applicable).

Rows and columns: a model-bench record (suite "models") is row "<network> <variant> b<batch>" and column
"<set> <mode>"; with by="variant" the variant moves from the row to the set. Any other record is row
`case_id`, one column per set.

LLM records (suite "llm", `fade bench llm`) also get a roofline view (llm_roofline_views, Comparison.roofline):
per result set, model, dtype, device and prompt/new-token sizes, one row per (variant, batch) with the decode
tokens/s, the bandwidth roofline's tokens/s and the % reached (the record's extra.roofline, computed by
fade.analyze.llm when the case ran), the time to first token and the token check (the teacher-forced numerics
verdict, fade.analyze.llm_numerics); the prefill cases of the same model beside them as TFLOP/s and % of the
dtype's peak.

% of baseline is the speed ratio, so > 100 is faster whatever the unit: value / baseline for rates
(TFLOP/s, GB/s, samples/s, x), baseline / value for latencies (us). A difference is "within noise" when
|% - 100| <= the noise band: half the relative IQR of each side added, at least NOISE_FLOOR_PCT. A cell
whose record or baseline ran on a busy host (telemetry.contended) is flagged `contended`. A cell
outside the band below the baseline is "slower"; with `fail_under`, a cell below that % and outside the
band, or a case that ran in the baseline and failed here, is a regression (`fade compare` exits 1).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from fade.analyze.llm_numerics import verdict_text
from fade.errors import FadeUsageError
from fade.results import FAILED_STATUSES, latest_records, read_records

BY = ("file", "variant", "device")  # what one result set is
NOISE_FLOOR_PCT = 3.0  # FADE's run-to-run agreement bar (benchmarks/validate_timing.py AGREEMENT_PCT)
LOWER_IS_BETTER_UNITS = frozenset({"us", "ms", "s"})
VERDICTS = {
    "baseline": "the baseline itself",
    "same": "within the noise band of the baseline",
    "faster": "faster than the baseline, outside the noise band",
    "slower": "slower than the baseline, outside the noise band",
    "regression": "slower than --fail-under and outside the noise band, or failed where the baseline ran",
    "failed": "this case did not produce a figure (status shown)",
    "no-baseline": "the baseline has no figure for this case",
    "missing": "this set has no record of the case",
}


@dataclass
class ResultSet:
    label: str
    source: str
    records: dict = field(default_factory=dict)  # (row, column) -> record


@dataclass
class Cell:
    status: str  # the record's status, or "missing"
    value: Optional[float] = None
    unit: Optional[str] = None
    pct_of_baseline: Optional[float] = None
    noise_band_pct: Optional[float] = None
    verdict: str = "missing"
    noisy: bool = False  # the record's own CoV is above its noisy threshold
    contended: bool = False  # other work used the host or device while this case or its baseline ran
    note: Optional[str] = None  # error, skip reason or the FADE-vs-plain-loop difference


@dataclass
class Comparison:
    """One report model: rendered to a terminal, Markdown, JSON and HTML."""

    sets: list  # labels, baseline first
    baseline: str
    columns: list  # [set, sub] pairs; sub is "train"/"infer" for models, "" otherwise
    rows: list  # {"row": label, "cells": [Cell per column]}
    units: list  # distinct units seen
    noise_floor_pct: float = NOISE_FLOOR_PCT
    fail_under: Optional[float] = None
    regressions: list = field(default_factory=list)  # "row / set column: why"
    problems: list = field(default_factory=list)  # unreadable lines: "file:LINE: reason"
    by: str = "file"
    contended: int = 0  # cells whose record or baseline ran on a busy host or device
    notes: list = field(default_factory=list)  # what the reader must know: "the result sets share no case"
    roofline: list = field(default_factory=list)  # RooflineView per LLM model in a set (llm_roofline_views)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["verdicts"] = dict(VERDICTS)
        return data


def load_result_sets(paths: Sequence, *, by: str = "file", suite: Optional[str] = None) -> tuple:
    """(result sets, problems): read `paths` and group them with `result_sets`. FadeUsageError for an
    unreadable file, or one in which nothing is a record (a snapshot, a tuning profile, a README): checked for
    every file before anything is compared, so the CLI prints no table before the error (issue 30)."""
    if not paths:
        raise FadeUsageError("compare needs at least one results file")
    files: list = []
    problems: list = []
    for path in paths:
        found = read_records(path)
        if found.problems and not found.records:
            reason = found.problems[0] if len(found.problems) == 1 else \
                f"{path}: no line is a results record ({len(found.problems)} unreadable; first {found.problems[0]})"
            raise FadeUsageError(f"{reason}; give the JSONL files that fade bench wrote")
        problems.extend(found.problems)
        files.append((path, found.records))
    return result_sets(files, by=by, suite=suite), problems


def result_sets(files: Sequence, *, by: str = "file", suite: Optional[str] = None) -> list:
    """Result sets from (path, records) pairs. `by` is "file" (one set per file and device), "variant" (one
    per model-bench variant per file) or "device" (one per torch device over all files); `suite` keeps only
    that suite's records. A set holds the latest record per case. FadeUsageError for an unknown `by`."""
    if by not in BY:
        raise FadeUsageError(f"--by {by!r}: use {', '.join(BY)}")
    sets: dict = {}
    labels = _file_labels([path for path, _ in files])
    for (path, file_records), file_label in zip(files, labels):
        records = [record for record in latest_records(file_records) if suite is None or record.get("suite") == suite]
        devices = sorted({str(record.get("torch_device")) for record in records})
        for record in records:
            if by == "device":
                label = str(record.get("torch_device"))
                result_set = sets.setdefault(label, ResultSet(label, str(path)))
                result_set.records[row_and_column(record, by)] = record  # a later file's record replaces
                continue
            label = file_label
            if len(devices) > 1:
                label += f" [{record.get('torch_device')}]"
            if by == "variant":
                variant = _models_params(record).get("variant")
                if variant is None:
                    continue
                # one file of one device: the variant alone; else the file (and device) too, so two devices'
                # records of a case never land in one set
                label = variant if len(files) == 1 and len(devices) == 1 else f"{label} {variant}"
            result_set = sets.setdefault(label, ResultSet(label, str(path)))
            result_set.records[row_and_column(record, by)] = record
    return list(sets.values())


def _file_labels(paths: Sequence) -> list:
    """File names, or paths where two files share a name."""
    names = [Path(path).name for path in paths]
    if len(set(names)) == len(names):
        return names
    return [str(path) for path in paths]


def _models_params(record: dict) -> dict:
    return (record.get("params") or {}) if record.get("suite") == "models" else {}


def row_and_column(record: dict, by: str = "file") -> tuple:
    """(row label, column sub-label) of a record; see the module docstring."""
    params = _models_params(record)
    if not params:
        return str(record.get("case_id")), ""
    case_id = str(record.get("case_id"))
    size_suffix = case_id.rsplit("/", 1)[-1]  # "b64" or "b2-64px"
    variant = "" if by == "variant" else f" {params.get('variant')}"
    return f"{params.get('model')}{variant} {size_suffix}", str(params.get("mode"))


def compare_sets(
    sets: Sequence[ResultSet],
    *,
    baseline: Optional[str] = None,
    fail_under: Optional[float] = None,
    problems: Sequence[str] = (),
    by: str = "file",
) -> Comparison:
    """Lay `sets` side by side against `baseline` (a set label, or a file path/name; default: the first)."""
    if not sets:
        raise FadeUsageError("no records to compare: the files hold no readable record")
    if fail_under is not None and not 0 < fail_under <= 1000:
        raise FadeUsageError(f"--fail-under {fail_under}: give a percentage of the baseline, such as 95")
    ordered = list(sets)
    if baseline is not None:
        chosen = _find_set(ordered, baseline)
        ordered.remove(chosen)
        ordered.insert(0, chosen)
    base = ordered[0]
    row_order: dict = {}
    subs: dict = {}
    for result_set in ordered:
        for row, sub in result_set.records:
            row_order.setdefault(row, None)
            subs.setdefault(sub, None)
    sub_order = [sub for sub in ("train", "infer", "") if sub in subs] + [sub for sub in subs if sub not in ("train", "infer", "")]
    columns = [[result_set.label, sub] for result_set in ordered for sub in sub_order]
    comparison = Comparison(
        sets=[result_set.label for result_set in ordered], baseline=base.label, columns=columns, rows=[],
        units=[], fail_under=fail_under, problems=list(problems), by=by,
    )  # fmt: skip
    units: dict = {}
    for row in row_order:
        cells = []
        for result_set in ordered:
            for sub in sub_order:
                record = result_set.records.get((row, sub))
                base_record = base.records.get((row, sub))
                cell = _cell(record, base_record, is_baseline=result_set is base, fail_under=fail_under)
                if cell.unit:
                    units.setdefault(cell.unit, None)
                if cell.verdict == "regression":
                    column = f"{result_set.label} {sub}".strip()
                    why = f"{cell.pct_of_baseline:.1f}% of baseline" if cell.pct_of_baseline is not None else f"status {cell.status}"
                    comparison.regressions.append(f"{row} / {column}: {why}")
                cells.append(cell)
        if any(cell.status != "missing" for cell in cells):
            comparison.rows.append({"row": row, "cells": cells})
    comparison.units = list(units)
    comparison.notes += _ran_as_notes(ordered)
    comparison.roofline = llm_roofline_views(ordered)
    comparison.contended = sum(1 for row in comparison.rows for cell in row["cells"] if cell.contended)
    if len(ordered) > 1 and not any(_shared(row, columns, base.label) for row in comparison.rows):
        comparison.notes.append(f"the result sets share no case with the baseline {base.label!r}: "
                                "nothing is compared (different suites?)")
    return comparison


def _ran_as_notes(sets: list) -> list:
    """One note per set and variant that ran as another configuration because the device ignores some of its
    knobs (extra.variant.not_applicable): the row stays, and the reader learns what ran."""
    notes: dict = {}
    for result_set in sets:
        for record in result_set.records.values():
            variant = (record.get("extra") or {}).get("variant") or {}
            if variant.get("not_applicable"):
                knobs = ", ".join(variant["not_applicable"])
                notes.setdefault(f"{result_set.label}: {variant.get('name')} ran as {variant.get('ran_as')} ({knobs} "
                                 "is not applicable there)", None)
    return list(notes)


def _shared(row: dict, columns: list, base_label: str) -> bool:
    """Whether the baseline and another set both hold a record of this row."""
    present = {column[0] for cell, column in zip(row["cells"], columns) if cell.status != "missing"}
    return base_label in present and len(present) > 1


def _find_set(sets: list, wanted: str) -> ResultSet:
    for result_set in sets:
        if wanted in (result_set.label, result_set.source, Path(result_set.source).name):
            return result_set
    labels = ", ".join(result_set.label for result_set in sets)
    raise FadeUsageError(f"--baseline {wanted!r} is none of the result sets ({labels})")


def _cell(record: Optional[dict], base: Optional[dict], *, is_baseline: bool, fail_under: Optional[float]) -> Cell:
    if record is None:
        return Cell(status="missing")
    status = str(record.get("status"))
    stats = record.get("stats") or {}
    cell = Cell(status=status, value=record.get("value"), unit=record.get("unit"), noisy=bool(stats.get("noisy")),
                contended=_contended(record))
    cell.note = _note(record)
    if status != "ok" or cell.value is None:
        base_ran = base is not None and base.get("status") == "ok"
        failed_here = status in FAILED_STATUSES
        cell.verdict = "regression" if (fail_under is not None and base_ran and failed_here and not is_baseline) else "failed"
        return cell
    if is_baseline:
        cell.verdict = "baseline"
        cell.pct_of_baseline = 100.0
        return cell
    if base is None or base.get("status") != "ok" or not base.get("value") or base.get("unit") != cell.unit:
        cell.verdict = "no-baseline"
        return cell
    if cell.unit in LOWER_IS_BETTER_UNITS:
        cell.pct_of_baseline = 100.0 * base["value"] / cell.value
    else:
        cell.pct_of_baseline = 100.0 * cell.value / base["value"]
    cell.noise_band_pct = max(NOISE_FLOOR_PCT, 50.0 * (_relative_iqr(record) + _relative_iqr(base)))
    cell.noisy = cell.noisy or bool((base.get("stats") or {}).get("noisy"))
    cell.contended = cell.contended or _contended(base)
    difference = cell.pct_of_baseline - 100.0
    if abs(difference) <= cell.noise_band_pct:
        cell.verdict = "same"
    elif difference > 0:
        cell.verdict = "faster"
    elif fail_under is not None and cell.pct_of_baseline < fail_under:
        cell.verdict = "regression"
    else:
        cell.verdict = "slower"
    return cell


def _contended(record: dict) -> bool:
    return bool((record.get("telemetry") or {}).get("contended"))


def _relative_iqr(record: dict) -> float:
    stats = record.get("stats") or {}
    median, iqr = stats.get("median_s"), stats.get("iqr_s")
    return iqr / median if median and iqr is not None else 0.0


def _note(record: dict) -> Optional[str]:
    if record.get("error"):
        return str(record["error"])
    variant = (record.get("extra") or {}).get("variant") or {}
    if variant.get("not_applicable"):
        return f"ran as {variant.get('ran_as')}: {', '.join(variant['not_applicable'])} not applicable on {record.get('torch_device')}"
    plain = (record.get("extra") or {}).get("plain_loop")
    if plain and plain.get("fade_vs_plain_pct") is not None:
        return f"plain loop {plain['fade_vs_plain_pct']:+.1f}%"
    return None


def compare_files(
    paths: Sequence,
    *,
    baseline: Optional[str] = None,
    fail_under: Optional[float] = None,
    by: str = "file",
    suite: Optional[str] = None,
) -> Comparison:
    """The common case in one call: read `paths`, compare. Unreadable lines end up in `.problems`."""
    sets, problems = load_result_sets(paths, by=by, suite=suite)
    return compare_sets(sets, baseline=baseline, fail_under=fail_under, problems=problems, by=by)


def compare_variants(path, records: Sequence[dict], device: str, *, case_ids: Sequence[str],
                     fail_under: Optional[float] = None) -> Comparison:
    """One file's records of one run (`device`, `case_ids`) side by side by model-bench variant, as % of the
    variant of the run's first case (the first variant asked for): what `fade bench models` prints after its
    summary. Pass the whole file's records: a --resume run measures only the cases left, and its new records
    alone could start with another variant, which silently became the baseline (issue 30)."""
    position = {case_id: index for index, case_id in enumerate(case_ids)}
    kept = [record for record in records if str(record.get("torch_device")) == device
            and record.get("case_id") in position]  # fmt: skip
    sets = result_sets([(path, kept)], by="variant")
    if not sets:
        raise FadeUsageError(f"no records to compare: the run wrote no model record of {device}")
    sets.sort(key=lambda result_set: min(position[record["case_id"]] for record in result_set.records.values()))
    return compare_sets(sets, fail_under=fail_under, by="variant")


def compare_devices(path, records: Sequence[dict], devices: Sequence[str], *, case_ids: Optional[Sequence[str]] = None,
                    fail_under: Optional[float] = None) -> Comparison:
    """One file's records of `devices` (and of `case_ids`, when given) side by side, one set per device, as % of
    the LAST device listed: what `fade bench models --device ocl:0,cuda:0` prints, and `fade compare path --by
    device --baseline <last device>` gives the same numbers for those cases."""
    wanted = set(case_ids) if case_ids is not None else None
    kept = [record for record in records if str(record.get("torch_device")) in devices
            and (wanted is None or record.get("case_id") in wanted)]  # fmt: skip
    sets = result_sets([(path, kept)], by="device")
    order = {device: position for position, device in enumerate(devices)}
    sets.sort(key=lambda result_set: order.get(result_set.label, len(order)))
    if not sets:
        raise FadeUsageError("no records to compare: the run wrote no record of " + ", ".join(devices))
    baseline = devices[-1] if any(result_set.label == devices[-1] for result_set in sets) else None
    comparison = compare_sets(sets, baseline=baseline, fail_under=fail_under, by="device")
    if baseline is None:
        comparison.notes.append(f"the baseline device {devices[-1]} has no record: the first set stands in")
    return comparison


# -- the LLM roofline view ---------------------------------------------------------------------------------
LLM_VARIANT_ORDER = ("hf-generate", "hf-static", "fade-loop", "fade-loop+compile", "fade-loop+eager",
                     "fade-loop+coordinate-descent", "fade-loop+max-autotune")  # the bench's
DECODE_CASE = re.compile(r"^llm/(?P<model>[^/]+)/(?P<dtype>[^/]+)/(?P<variant>[^/]+)/b(?P<batch>\d+)/p(?P<prompt>\d+)\+n(?P<new>\d+)$")
PREFILL_CASE = re.compile(r"^llm/(?P<model>[^/]+)/(?P<dtype>[^/]+)/prefill/s(?P<tokens>\d+)/b(?P<batch>\d+)$")


@dataclass
class DecodePoint:
    """One decode case of the roofline view: tokens/s over the batch against the bandwidth roofline."""

    variant: str
    batch: int
    status: str
    tokens_per_s: Optional[float] = None
    roofline_tokens_per_s: Optional[float] = None
    pct_of_roofline: Optional[float] = None
    ttft_ms: Optional[float] = None
    tokens_match: Optional[bool] = None  # free-running greedy tokens equal the reference's (extra.tokens.match)
    tokens_check: Optional[str] = None  # the table's "tokens" cell: "ok 100%" / "differ 93%" (extra.numerics), or
    # "match" / "differ" from extra.tokens for a record from before the numerics check; None: neither
    compiled: Optional[bool] = None  # extra.variant_ran.compiled
    note: Optional[str] = None  # the error of a case that did not run


@dataclass
class PrefillPoint:
    tokens: int
    batch: int
    status: str
    tflops: Optional[float] = None
    pct_of_peak: Optional[float] = None
    peak_tflops: Optional[float] = None
    note: Optional[str] = None


@dataclass
class RooflineView:
    """`fade bench llm`'s records of one model in one result set, dtype, device and prompt/new-token sizes: decode
    per variant and batch against the bandwidth roofline, and the model's prefill cases."""

    set: str
    model: str
    dtype: str
    torch_device: str
    device_name: Optional[str]
    prompt_tokens: Optional[int]  # None: a view of prefill cases only
    new_tokens: Optional[int]
    decode: list = field(default_factory=list)  # DecodePoint, variant order, then batch
    roofline: list = field(default_factory=list)  # [batch, roofline tokens/s] per batch, ascending
    prefill: list = field(default_factory=list)  # PrefillPoint, ascending tokens
    bandwidth_gbs: Optional[float] = None
    bandwidth_source: Optional[str] = None
    reason: Optional[str] = None  # why there is no % of roofline (no bandwidth known for the device)

    @property
    def title(self) -> str:
        device = f"{self.device_name} ({self.torch_device})" if self.device_name else self.torch_device
        sizes = f", prompt {self.prompt_tokens} + {self.new_tokens} new tokens" if self.prompt_tokens is not None else ""
        return f"{self.model} {self.dtype} on {device}{sizes} [{self.set}]"

    @property
    def batches(self) -> list:
        return sorted({point.batch for point in self.decode})

    @property
    def variants(self) -> list:
        return list(dict.fromkeys(point.variant for point in self.decode))


def llm_roofline_views(sets: Sequence[ResultSet]) -> list:
    """A RooflineView per (set, model, dtype, device, sizes) holding `fade bench llm` decode records, and one per
    (set, model, dtype, device) holding only prefill records; prefill cases join every view of their model. Each
    set's latest record per case counts (ResultSet.records). A record whose case id or fields are not the
    bench's is left out (the compare table above still shows it)."""
    views: dict = {}
    prefills: dict = {}
    for result_set in sets:
        for record in result_set.records.values():
            if record.get("suite") != "llm":
                continue
            case_id = str(record.get("case_id"))
            device = str(record.get("torch_device"))
            decode, prefill = DECODE_CASE.match(case_id), PREFILL_CASE.match(case_id)
            if decode:
                key = (result_set.label, decode["model"], decode["dtype"], device, int(decode["prompt"]), int(decode["new"]))
                view = views.get(key)
                if view is None:
                    view = views[key] = RooflineView(result_set.label, decode["model"], decode["dtype"], device,
                                                     _device_name(record), key[4], key[5])  # fmt: skip
                _add_decode(view, record, decode["variant"], int(decode["batch"]))
            elif prefill:
                key = (result_set.label, prefill["model"], prefill["dtype"], device)
                prefills.setdefault(key, []).append(_prefill_point(record, int(prefill["tokens"]), int(prefill["batch"])))
    for key, points in prefills.items():
        owners = [view for view_key, view in views.items() if view_key[:4] == key]
        if not owners:
            set_label, model, dtype, device = key
            owners = [views.setdefault(key, RooflineView(set_label, model, dtype, device, None, None, None))]
        for view in owners:
            view.prefill = sorted(points, key=lambda point: (point.tokens, point.batch))
    for view in views.values():
        order = {variant: index for index, variant in enumerate(LLM_VARIANT_ORDER)}
        view.decode.sort(key=lambda point: (order.get(point.variant, len(order)), point.variant, point.batch))
        lines: dict = {}
        for point in view.decode:
            if point.roofline_tokens_per_s is not None:
                lines.setdefault(point.batch, point.roofline_tokens_per_s)
        view.roofline = [[batch, lines[batch]] for batch in sorted(lines)]
    return list(views.values())


def _add_decode(view: RooflineView, record: dict, variant: str, batch: int) -> None:
    extra = _mapping(record.get("extra"))
    roofline = _mapping(extra.get("roofline"))
    status = str(record.get("status"))
    ok = status == "ok"
    point = DecodePoint(variant=variant, batch=batch, status=status,
                        tokens_per_s=_number(record.get("value")) if ok else None,
                        roofline_tokens_per_s=_number(roofline.get("roofline_tokens_per_s")),
                        pct_of_roofline=_number(roofline.get("pct_of_roofline")) if ok else None,
                        ttft_ms=_number(extra.get("ttft_ms")) if ok else None,
                        tokens_match=_flag(_mapping(extra.get("tokens")).get("match")),
                        tokens_check=tokens_cell(extra),
                        compiled=_flag(_mapping(extra.get("variant_ran")).get("compiled")),
                        note=None if ok else str(record.get("error") or status))  # fmt: skip
    view.decode.append(point)
    if view.device_name is None:
        view.device_name = _device_name(record)
    bandwidth = _number(roofline.get("bandwidth_gbs"))
    if bandwidth is not None and view.bandwidth_gbs is None:
        view.bandwidth_gbs = bandwidth
        source = roofline.get("bandwidth_source")
        view.bandwidth_source = source if isinstance(source, str) else None
    reason = roofline.get("reason")
    if isinstance(reason, str) and view.reason is None and bandwidth is None:
        view.reason = reason


def tokens_cell(extra: dict) -> Optional[str]:
    """The roofline view's "tokens" cell of a decode record: the numerics check's verdict and top-1 agreement
    counting near-ties (fade.analyze.llm_numerics.verdict_text), else the free-running match of an older record."""
    text = verdict_text(_mapping(extra.get("numerics")))
    if text is not None:
        return text
    match = _flag(_mapping(extra.get("tokens")).get("match"))
    return None if match is None else ("match" if match else "differ")


def _prefill_point(record: dict, tokens: int, batch: int) -> PrefillPoint:
    status = str(record.get("status"))
    peak = _mapping(record.get("peak"))
    ok = status == "ok" and record.get("unit") == "TFLOP/s"
    return PrefillPoint(tokens=tokens, batch=batch, status=status, tflops=_number(record.get("value")) if ok else None,
                        pct_of_peak=_number(peak.get("pct_of_peak")) if ok else None,
                        peak_tflops=_number(peak.get("value")) if peak.get("unit") == "TFLOP/s" else None,
                        note=None if status == "ok" else str(record.get("error") or status))  # fmt: skip


def _device_name(record: dict) -> Optional[str]:
    device = _mapping(record.get("device"))
    name = device.get("name") or _mapping(device.get("torch")).get("name")
    return name if isinstance(name, str) and name else None


def _mapping(value) -> dict:
    """`value` when it is a dict, else {}: a record's nested fields are read, never trusted."""
    return value if isinstance(value, dict) else {}


def _number(value) -> Optional[float]:
    """A finite int or float (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _flag(value) -> Optional[bool]:
    return value if isinstance(value, bool) else None
