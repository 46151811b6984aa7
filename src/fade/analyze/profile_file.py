"""Read a `fade profile` summary file (ProfileSummary.to_dict() plus capture facts, as JSON): the one reader that
`fade profile compare` and `fade report` use, so the comparison and the renderers see only checked fields.

The file goes through fade.reading (a regular file within SUMMARY_MAX_BYTES, JSON within its depth and number
limits); then every field that compare_profiles, report.profile and the HTML report read is checked against
SUMMARY below (fade.reading.schema_problem): its JSON type, and for floats the range FLOAT_MIN..FLOAT_MAX (the
time-split plot adds and scales them). Fields not listed are passed through unread. Every refusal is one FadeUsageError line
naming the file and the field.
"""

from __future__ import annotations

import os
from typing import Optional

from fade.analyze.profile import IDLE_CAUSES, SCHEMA_VERSION
from fade.errors import FadeUsageError
from fade.reading import NUMBER, MapOf, Maybe, UnreadableFile, parse_json, read_text, schema_problem

KIND = "profile-summary"
SUFFIX = ".summary.json"
SUMMARY_MAX_BYTES = 64 * 2**20  # a summary is tens of KB; a bigger file is a results file, read line by line


_VERDICT = {"title": str, "fix": str}
_KERNEL = {"name": str, "class": str, "direction": Maybe(str), "library": Maybe(str), "total_us": NUMBER,
           "count": int, "mean_us": NUMBER}  # fmt: skip
_HOST_OP = {"name": str, "self_us": NUMBER, "count": int, "mean_us": NUMBER}
_OPENCL_ROW = {"kernel": str, "device_ms": NUMBER, "share": NUMBER, "calls": NUMBER, "mean_us": NUMBER}
_FLOPS = {name: Maybe(NUMBER) for name in ("tflops_step", "mfu_step", "tflops_attention", "mfu_attention",
                                                 "tflops_gemm_conv", "mfu_gemm_conv")}  # fmt: skip
_STEP = {
    "steps": int, "window_us": NUMBER, "host_us": NUMBER, "busy_us": Maybe(NUMBER),
    "idle_us": Maybe(MapOf(NUMBER, IDLE_CAUSES)), "class_us": MapOf(NUMBER), "top_kernels": [_KERNEL],
    "top_host_ops": [_HOST_OP],
    "launches": {"kernels": int, "shorter_than_overhead": int, "threshold_us": NUMBER,
                 "median_launch_call_us": Maybe(NUMBER)},
    "flops": _FLOPS, "copies": MapOf({"count": int, "bytes": NUMBER, "pct_of_bandwidth": Maybe(NUMBER)}),
    "syncs": {"count": int, "host_reads": Maybe(int)},
}  # fmt: skip
# Every field a reader of a summary uses, with its JSON type: the file's schema.
SUMMARY = {
    "schema_version": int, "kind": str, "device_timeline": Maybe(bool), "platform": Maybe(str),
    "device_index": Maybe(int), "peak": Maybe(dict), "verdict": Maybe(_VERDICT), "verdicts": [_VERDICT],
    "total": _STEP, "steps": [dict], "notes": Maybe([str]),
    "host_lines": Maybe([{"file": str, "line": int, "kind": str, "count": int, "code": Maybe(str)}]),
    "opencl": Maybe({"by_kernel": [_OPENCL_ROW], "by_label": [_OPENCL_ROW]}),
    "step_time": Maybe({"unprofiled_s": Maybe(NUMBER), "profiled_window_s": Maybe(NUMBER),
                            "overhead_window_pct": Maybe(NUMBER)}),
    "capture": Maybe({"overhead_fraction": Maybe(NUMBER)}),
}  # fmt: skip


def read_summary(path) -> dict:
    """The profile summary at `path`, or the only *.summary.json in directory `path`; FadeUsageError (one line)
    for anything else: not a regular file, too large, not JSON, not a summary, a field of the wrong type."""
    path = str(path)
    if os.path.isdir(path):
        found = sorted(name for name in os.listdir(path) if name.endswith(SUFFIX))
        if len(found) != 1:
            raise FadeUsageError(f"{path}: {len(found)} *{SUFFIX} files in the directory, need exactly one; "
                                 "name the file")  # fmt: skip
        path = os.path.join(path, found[0])
    text = read_text(path, what="profile summary", max_bytes=SUMMARY_MAX_BYTES)
    try:
        data = parse_json(text, what=path)
    except UnreadableFile as error:
        reason = str(error).removeprefix(f"{path}: ")
        raise UnreadableFile(f"{path}: not a profile summary (not JSON within FADE's limits: {reason})") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise FadeUsageError(f'{path}: not a profile summary (no "kind": "{KIND}"); '
                             "give a *.summary.json that fade profile wrote")  # fmt: skip
    return validate_summary(data, where=path)


def sniff_summary(path) -> Optional[dict]:
    """For `fade report`, which takes results files and summaries alike: the checked summary when `path` holds
    one (a JSON object of kind "profile-summary"), None when it holds something else (then it is read as a
    results file). A file that is no regular file is refused here (UnreadableFile), and a summary with a bad
    field too; a file over SUMMARY_MAX_BYTES is not a summary."""
    try:
        if os.stat(path).st_size > SUMMARY_MAX_BYTES:
            return None
    except OSError:
        return None  # the results reader says what is wrong with it
    text = read_text(path, what="file", max_bytes=SUMMARY_MAX_BYTES)
    if f'"{KIND}"' not in text:
        return None
    try:
        data = parse_json(text, what=str(path))
    except UnreadableFile:
        return None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        return None
    return validate_summary(data, where=str(path))


def validate_summary(data: dict, *, where: str) -> dict:
    """`data` itself when it is a summary of SCHEMA_VERSION whose every SUMMARY field has its type."""
    if data.get("schema_version") != SCHEMA_VERSION:
        raise FadeUsageError(f"{where}: profile summary schema_version {_short(data.get('schema_version'))}, this fade "
                             f"reads {SCHEMA_VERSION}")  # fmt: skip
    problem = schema_problem(data, SUMMARY)
    if problem:
        raise FadeUsageError(f"{where}: not a usable profile summary: {problem}")
    return data


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
