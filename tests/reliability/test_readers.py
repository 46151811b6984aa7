"""Every reader of a file FADE did not just write (issue 30): results, snapshot, profile summary, rules file, tune
journal and probe cache. For each, hypothesis checks that
1. documents generated from the reader's schema parse, and the fields the renderers use come back unchanged;
2. any field replaced by any JSON type it should not have is either used (and then compare, report and the
   plots draw it) or refused with one line: never another exception;
3. a FIFO, /dev/zero, a directory and a file over the reader's cap are refused at once with one line (a hang
   fails the test through SAFETY_TIMEOUT_S instead of hanging CI);
4. nesting 100,000 deep, a 5,000-digit integer, 1e400 and NaN are refused.
FADE's own caches (tune journal, probe cache) are set aside with one warning instead, and the run goes on.
docs/reliability.md lists these cases under "Reading untrusted files".
"""

from __future__ import annotations

import copy
import json
import os
import re
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fade.errors import FadeUsageError
from fade.reading import MAX_BYTES

from tests.cliutil import one_line
from tests.reliability.mutations import replaced

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "snapshots"
SAFETY_TIMEOUT_S = 5.0  # only against a hang: a refusal takes milliseconds
PROPERTY = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
DRAWING = settings(PROPERTY, max_examples=30)  # properties that draw plots: a PNG costs ~0.1 s
WRONG = [None, True, 7, 2.5, "x", [1], {"k": 1}]  # every JSON type
HOSTILE = {  # JSON that the json module accepts and Python then chokes on
    "deep": "[" * 100_000 + "]" * 100_000,
    "huge integer": "1" * 5000,
    "overflowing float": "1e400",
    "NaN": "NaN",
}


# -- generic helpers --------------------------------------------------------------------------------------
def paths(document, prefix=()) -> list:
    """Every path into `document`: each key of each object and each item of each array."""
    found = []
    if isinstance(document, dict):
        for key, value in document.items():
            found.append(prefix + (key,))
            found += paths(value, prefix + (key,))
    elif isinstance(document, list):
        for index, value in enumerate(document[:3]):
            found.append(prefix + (index,))
            found += paths(value, prefix + (index,))
    return found


def wrong_types(bases: list, wrong: list = WRONG):
    """(document, path, wrong value): one field of one base document replaced by a value of any JSON type."""
    pairs = [(base, path) for base in bases for path in paths(base)]
    return st.tuples(st.sampled_from(pairs), st.sampled_from(wrong)).map(
        lambda chosen: (chosen[0][0], chosen[0][1], replaced(chosen[0][0], chosen[0][1], chosen[1])))


def varied(document, keep: frozenset):
    """A strategy of documents shaped like `document`: every number, bool and string whose key is not in `keep`
    drawn afresh with its type (positive numbers, printable text), the rest kept."""
    if isinstance(document, dict):
        return st.fixed_dictionaries({key: (st.just(value) if key in keep else varied(value, keep))
                                      for key, value in document.items()})  # fmt: skip
    if isinstance(document, list):
        return st.tuples(*(varied(item, keep) for item in document)).map(list)
    if isinstance(document, bool):
        return st.booleans()
    if isinstance(document, int):
        return st.integers(1, 10**6)
    if isinstance(document, float):
        return st.floats(1e-6, 1e6)
    if isinstance(document, str):
        return st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF, exclude_characters="{}\\"), max_size=16)
    return st.just(document)


def finishes(call):
    """(result, error) of `call()` run in a thread; fails the test if it has not finished in SAFETY_TIMEOUT_S."""
    outcome = {}

    def run():
        try:
            outcome["result"] = call()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(SAFETY_TIMEOUT_S)
    assert not thread.is_alive(), f"still reading after {SAFETY_TIMEOUT_S} s: a hang"
    return outcome.get("result"), outcome.get("error")


def refused_in_one_line(call) -> str:
    result, error = finishes(call)
    assert isinstance(error, FadeUsageError) or type(error).__name__ == "RuleError", (result, error)
    message = str(error)
    assert message and "\n" not in message
    return message


def special_files(tmp_path: Path, cap_bytes: int) -> dict:
    """name -> path of each kind of file no reader may hang on or swallow."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    directory = tmp_path / "a-directory"
    directory.mkdir()
    oversized = tmp_path / "oversized"
    with open(oversized, "wb") as handle:  # sparse: no disk is used
        handle.truncate(cap_bytes + 1)
    return {"FIFO": fifo, "/dev/zero": Path("/dev/zero"), "directory": directory, "oversized": oversized}


# -- results (fade.results.read_records) --------------------------------------------------------------------
def results_record(case_id: str, suite: str, params: dict, extra: dict, **fields) -> dict:
    record = {"schema_version": 1, "fade_version": "0", "run_id": "r", "case_id": case_id, "suite": suite,
              "status": "ok", "torch_device": "cuda:0", "params": params, "value": 512.0, "unit": "TFLOP/s",
              "formula": "2*m*n*k / median_s / 1e12", "work": {"flops": 2.0 * 1024**3},
              "stats": {"median_s": 0.0014, "q1_s": 0.0013, "q3_s": 0.0015, "iqr_s": 0.0002, "cov": 0.01, "n": 9,
                        "noisy": False},
              "peak": {"value": 989.4, "unit": "TFLOP/s", "dtype": "bf16", "pct_of_peak": 51.7, "basis": "table"},
              "extra": extra, "device": {"name": "GPU"}, "stack": {"torch": {"version": "2.13"}},
              "telemetry": {"throttled": False, "throttle_reasons": [], "contended": False, "contention_reasons": []},
              "started": "2026-11-22T00:00:00.000Z", "finished": "2026-11-22T00:00:01.000Z", "duration_s": 1.0,
              "error": None, "error_detail": None, "warnings": []}  # fmt: skip
    record.update(fields)
    return record


RESULTS = [
    results_record("gemm/bf16/1024", "micro", {"m": 1024, "n": 1024, "k": 1024, "dtype": "bf16", "shape": "square1024"}, {}),
    results_record("resnet50/train/amp-bf16/b64", "models", {"model": "resnet50", "mode": "train", "variant": "amp-bf16",
                                                             "batch": 64},
                   {"variant": {"name": "amp-bf16", "ran_as": "amp-bf16", "not_applicable": []},
                    "flops": {"pct_of_peak": 40.0, "achieved_tflops": 300.0, "peak_dtype": "bf16"},
                    "memory": {"peak_allocated_bytes": 2**30}, "loss_check": {"loss": 2.5, "fp32_loss": 2.5},
                    "plain_loop": {"fade_vs_plain_pct": 1.0, "samples_per_s": 900.0}}, unit="samples/s", peak=None),
    results_record("all_reduce/bf16/1MiB/x2", "dist", {"dtype": "bf16"},
                   {"collective": "all_reduce", "world": 2, "size_bytes": 2**20, "busbw_gbs": 100.0, "algbw_gbs": 100.0,
                    "latency_us": 10.0, "bus_factor": "2(n-1)/n"}, unit="GB/s", peak=None),
]  # fmt: skip
RESULTS_KEEP = frozenset({"schema_version", "case_id", "suite", "status", "unit", "dtype", "shape", "collective",
                          "variant", "model", "mode"})  # fmt: skip


def draw_everything(records: list, tmp_path: Path) -> None:
    """What compare and report do with records: summarize, compare, render the HTML report's parts and plots."""
    from fade.analyze.compare import compare_sets, result_sets
    from fade.report.html import _dist, _micro, _models
    from fade.results import summarize

    summarize(records)
    for by in ("file", "variant"):
        sets = result_sets([("a.jsonl", records), ("b.jsonl", records)], by=by)
        if sets:  # by variant: models records only
            compare_sets(sets, by=by)
    _micro(records), _models([("a.jsonl", records)]), _dist(records)


@DRAWING
@given(st.one_of(*(varied(base, RESULTS_KEEP) for base in RESULTS)))
def test_results_records_from_the_schema_are_read_back_whole_and_drawn(tmp_path_factory, record):
    from fade.results import read_records

    path = tmp_path_factory.mktemp("results") / "r.jsonl"
    path.write_text(json.dumps(record) + "\n")
    found = read_records(path)
    assert found.problems == [] and found.records == [record]
    draw_everything(found.records, path.parent)


@DRAWING
@given(wrong_types(RESULTS))
def test_a_results_field_of_any_wrong_type_is_drawn_or_one_problem_line(tmp_path_factory, mutation):
    from fade.results import read_records

    _, _, record = mutation
    path = tmp_path_factory.mktemp("results") / "r.jsonl"
    path.write_text(json.dumps(record) + "\n")
    found = read_records(path)
    assert len(found.records) + len(found.problems) == 1
    assert all("\n" not in problem and problem.startswith(f"{path}:1: ") for problem in found.problems)
    draw_everything(found.records, path.parent)


def test_the_gemm_dtypes_the_reader_accepts_are_the_ones_the_suite_measures():
    from fade.measure.case import GEMM_DTYPES
    from fade.results import GEMM_DTYPES as READ

    assert READ == GEMM_DTYPES


@pytest.mark.parametrize("record, reason", [
    (replaced(RESULTS[0], ("params", "dtype"), "fp64"), "params.dtype is 'fp64'"),
    (replaced(RESULTS[0], ("work",), {}), "work.flops is missing"),
    (replaced(RESULTS[1], ("extra", "variant"), "amp-bf16"), "extra.variant is a string"),
    (replaced(RESULTS[0], ("value",), 1e-300), "outside the"),
])  # fmt: skip
def test_records_the_renderers_could_not_draw_are_one_problem_line(tmp_path, record, reason):
    """Issue 30's examples: a GEMM of an unknown dtype or without work.flops, a models record whose
    extra.variant is a string, a value the plots would overflow."""
    from fade.results import read_records

    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(RESULTS[2]) + "\n" + json.dumps(record) + "\n")
    found = read_records(path)
    assert [r["case_id"] for r in found.records] == [RESULTS[2]["case_id"]]
    (problem,) = found.problems
    assert problem.startswith(f"{path}:2: ") and reason in problem


@pytest.mark.parametrize("hostile", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_results_line_is_a_problem_line(tmp_path, hostile):
    from fade.results import read_records

    path = tmp_path / "r.jsonl"
    line = json.dumps(RESULTS[0]).replace('"value": 512.0', f'"value": {hostile}')
    path.write_text(json.dumps(RESULTS[0]) + "\n" + line + "\n")
    found = finishes(lambda: read_records(path))[0]
    assert len(found.records) == 1 and len(found.problems) == 1 and found.problems[0].startswith(f"{path}:2: ")


def test_results_special_files_are_refused_in_one_line(tmp_path):
    from fade.results import read_records

    for name, path in special_files(tmp_path, MAX_BYTES).items():
        assert str(path) in refused_in_one_line(lambda: read_records(path)), name


def test_a_gzip_bomb_is_refused_in_one_line(tmp_path, monkeypatch):
    import gzip

    from fade.results import read_records

    path = tmp_path / "r.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n" * 4096))
    monkeypatch.setattr("fade.results.RESULTS_MAX_BYTES", 1024)
    assert "decompressed" in refused_in_one_line(lambda: read_records(path))


# -- snapshot (fade.collect.snapshot.load_snapshot) ---------------------------------------------------------
SNAPSHOTS = [json.loads((FIXTURES / name).read_text()) for name in
             ("cdna3_mi300x_rocm630_bwd_weight_conv.json", "cpu_only_pocl_opencl.json")]  # fmt: skip
SNAPSHOT_KEEP = frozenset({"schema_version", "node", "index", "kfd_nodes", "env", "device_files"})


def load_snapshot_text(tmp_path: Path, document) -> dict:
    from fade.collect.snapshot import load_snapshot

    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(document))
    return load_snapshot(path)


@PROPERTY
@given(st.one_of(*(varied(base, SNAPSHOT_KEEP) for base in SNAPSHOTS)))
def test_snapshots_from_the_schema_load_and_are_diagnosed(tmp_path_factory, document):
    from fade.analyze.doctor import diagnose

    loaded = load_snapshot_text(tmp_path_factory.mktemp("snapshot"), document)
    assert loaded["os"] == document["os"] and loaded["pci"] == document["pci"]
    diagnose(loaded)


@PROPERTY
@given(wrong_types(SNAPSHOTS))
def test_a_snapshot_field_of_any_wrong_type_is_diagnosed_or_one_line(tmp_path_factory, mutation):
    from fade.analyze.doctor import diagnose

    _, _, document = mutation
    result, error = finishes(lambda: diagnose(load_snapshot_text(tmp_path_factory.mktemp("snapshot"), document)))
    assert error is None or (isinstance(error, FadeUsageError) and "\n" not in str(error)), repr(error)


@pytest.mark.parametrize("hostile", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_snapshot_is_one_line(tmp_path, hostile):
    from fade.collect.snapshot import load_snapshot

    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(SNAPSHOTS[0]).replace('"schema_version": 1', f'"x": {hostile}, "schema_version": 1', 1))
    refused_in_one_line(lambda: load_snapshot(path))


def test_snapshot_special_files_are_refused_in_one_line(tmp_path):
    from fade.collect.snapshot import SNAPSHOT_MAX_BYTES, load_snapshot

    for name, path in special_files(tmp_path, SNAPSHOT_MAX_BYTES).items():
        assert str(path) in refused_in_one_line(lambda: load_snapshot(path)), name


# -- profile summary (fade.analyze.profile_file) ------------------------------------------------------------
def profile_summary() -> dict:
    from fade.analyze.profile import summarize_trace
    from tests.profile.synthetic import TraceBuilder

    builder = TraceBuilder().step(1, 0.0, 400.0).step(2, 400.0, 800.0)
    for step in range(2):
        builder.kernel("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", launch=step * 400 + 1.0,
                       start=step * 400 + 5.0, end=step * 400 + 200.0)  # fmt: skip
        builder.kernel("Memcpy HtoD (Pageable -> Device)", launch=step * 400 + 2.0, start=step * 400 + 210.0,
                       end=step * 400 + 300.0, category="gpu_memcpy", nbytes=2**20)  # fmt: skip
    summary = summarize_trace(builder.trace(), peak_tflops=989.0, peak_dtype="bf16", peak_bandwidth_gbs=3350.0).to_dict()
    summary["host_lines"] = [{"kind": "sync", "file": "train.py", "line": 12, "code": "loss.item()", "count": 2}]
    summary["step_time"] = {"unprofiled_s": 0.0004, "profiled_window_s": 0.00042, "overhead_window_pct": 5.0}
    summary["capture"] = {"overhead_fraction": 0.05}
    summary["opencl"] = {"by_kernel": [{"kernel": "gemm", "device_ms": 0.2, "share": 0.5, "calls": 2, "mean_us": 100.0}],
                         "by_label": []}  # fmt: skip
    return json.loads(json.dumps(summary))


PROFILES = [profile_summary()]
PROFILE_KEEP = frozenset({"schema_version", "kind", "class", "rule", "platform"})


def use_summary(summary: dict) -> None:
    """What `fade profile compare` and `fade report` do with a summary."""
    from fade.analyze.profile import compare_profiles
    from fade.report.profile import profile_html_section, render_comparison, render_profile

    render_comparison(compare_profiles(summary, summary))
    render_profile(summary)
    profile_html_section(summary)


def summary_file(tmp_path: Path, document) -> Path:
    path = tmp_path / "p.summary.json"
    path.write_text(json.dumps(document))
    return path


@DRAWING
@given(st.one_of(*(varied(base, PROFILE_KEEP) for base in PROFILES)))
def test_profile_summaries_from_the_schema_are_read_and_rendered(tmp_path_factory, document):
    from fade.analyze.profile_file import read_summary, sniff_summary

    path = summary_file(tmp_path_factory.mktemp("profile"), document)
    assert read_summary(path) == document == sniff_summary(path)
    use_summary(read_summary(path))


@DRAWING
@given(wrong_types(PROFILES))
def test_a_profile_summary_field_of_any_wrong_type_is_rendered_or_one_line(tmp_path_factory, mutation):
    from fade.analyze.profile_file import read_summary

    _, path_in_document, document = mutation
    path = summary_file(tmp_path_factory.mktemp("profile"), document)
    result, error = finishes(lambda: use_summary(read_summary(path)))
    assert error is None or (isinstance(error, FadeUsageError) and "\n" not in str(error)), (path_in_document, repr(error))


@pytest.mark.parametrize("field", ["total", "verdict"])
@pytest.mark.parametrize("wrong", WRONG[1:], ids=[type(value).__name__ for value in WRONG[1:]])
def test_profile_compare_of_a_wrong_typed_total_or_verdict_is_one_line(tmp_path, fade, field, wrong):
    path = summary_file(tmp_path, replaced(PROFILES[0], (field,), wrong))
    code, _, err = fade("profile", "compare", path, path)
    assert code == 2 and field in one_line(err)


@pytest.mark.parametrize("hostile", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_profile_summary_is_one_line(tmp_path, hostile):
    from fade.analyze.profile_file import read_summary

    path = tmp_path / "p.summary.json"
    path.write_text(json.dumps(PROFILES[0]).replace('"kind": "profile-summary"', f'"x": {hostile}, "kind": "profile-summary"'))
    refused_in_one_line(lambda: read_summary(path))


def test_profile_summary_special_files_are_refused_in_one_line(tmp_path):
    from fade.analyze.profile_file import SUMMARY_MAX_BYTES, read_summary

    for name, path in special_files(tmp_path, SUMMARY_MAX_BYTES).items():
        if name != "directory":  # a directory is where `profile compare` looks for the one *.summary.json
            assert str(path) in refused_in_one_line(lambda: read_summary(path)), name


# -- rules file (fade.analyze.rules.load_rules) -------------------------------------------------------------
def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return "{" + ", ".join(f"{json.dumps(key)} = {toml_value(item)}" for key, item in value.items()) + "}"


def rules_text(rows: list) -> str:
    """A rules file of `rows` (TOML has no null: a None field is left out)."""
    blocks = []
    for row in rows:
        lines = ["[[rule]]"] if isinstance(row, dict) else []
        for key, value in (row.items() if isinstance(row, dict) else []):
            if value is not None:
                lines.append(f"{json.dumps(key)} = {toml_value(value)}")
        blocks.append("\n".join(lines) if lines else f"rule = {toml_value(row)}")
    return "\n\n".join(blocks) + "\n"


RULE = {"id": "TEST001", "severity": "warn", "scope": "device", "title": "a title for {arch}",
        "when": {"arch": ["gfx942"], "rocm": {"version": ">=6.3,<6.4"}, "cu_count": {"gt": 100}},
        "explain": "why", "fix": "what to do", "source": "https://example.org, read 2026-11-01",
        "fix_env": {"MIOPEN_FIND_MODE": "3"}, "fix_safety": "safe", "suppressed_by": ["TEST002"]}  # fmt: skip
TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF, exclude_categories=("Cc", "Cs"), exclude_characters="{}"),
               min_size=1, max_size=16)  # TOML refuses control characters in strings


@st.composite
def rule_rows(draw) -> dict:
    from fade.analyze.facts import FACT_NAMES
    from fade.analyze.rules import SCOPES, SEVERITIES

    fact = draw(st.sampled_from(sorted(FACT_NAMES)))
    condition = draw(st.one_of(TEXT, st.lists(TEXT, min_size=1, max_size=3), st.integers(0, 10**6),
                               st.builds(lambda n: {"gt": n}, st.floats(-1e6, 1e6)), st.just({"present": True})))  # fmt: skip
    return {"id": draw(st.from_regex(r"[A-Z]{2,8}[0-9]{3}", fullmatch=True)), "severity": draw(st.sampled_from(SEVERITIES)),
            "scope": draw(st.sampled_from(SCOPES)), "title": draw(TEXT), "when": {fact: condition},
            "explain": draw(TEXT), "fix": draw(TEXT), "source": draw(TEXT),
            "fix_safety": draw(st.sampled_from(["safe", "review"]))}  # fmt: skip


def load_rules_text(tmp_path: Path, text: str):
    from fade.analyze.rules import load_rules

    path = tmp_path / f"rules-{time.monotonic_ns()}.toml"  # load_rules caches by path
    path.write_text(text)
    return load_rules(path)


@PROPERTY
@given(rule_rows())
def test_rules_from_the_schema_load_with_every_field(tmp_path_factory, row):
    from fade.analyze.doctor import diagnose

    (rule,) = load_rules_text(tmp_path_factory.mktemp("rules"), rules_text([row]))
    assert (rule.id, rule.severity, rule.scope, rule.title, rule.when, rule.fix) == (
        row["id"], row["severity"], row["scope"], row["title"], row["when"], row["fix"])
    diagnose(copy.deepcopy(SNAPSHOTS[0]), rules_path=rule_path_of(tmp_path_factory, row))


def rule_path_of(tmp_path_factory, row) -> Path:
    path = tmp_path_factory.mktemp("rules") / "rules.toml"
    path.write_text(rules_text([row]))
    return path


@PROPERTY
@given(wrong_types([RULE], WRONG[1:]))  # TOML has no null
def test_a_rule_field_of_any_wrong_type_is_used_or_one_line(tmp_path_factory, mutation):
    from fade.analyze.doctor import diagnose

    _, _, row = mutation
    directory = tmp_path_factory.mktemp("rules")
    result, error = finishes(lambda: load_rules_text(directory, rules_text([row])))
    if error is None:
        diagnose(copy.deepcopy(SNAPSHOTS[0]), rules_path=rule_path_of(tmp_path_factory, row))
    else:
        assert type(error).__name__ == "RuleError" and "\n" not in str(error), repr(error)


@pytest.mark.parametrize("hostile", [
    "a = " + "[" * 100_000 + "]" * 100_000, "a = " + "1" * 5000, "a = 1e400", "a = nan", "a = inf",
], ids=["deep", "huge integer", "overflowing float", "nan", "inf"])  # fmt: skip
def test_a_hostile_rules_file_is_one_line(tmp_path, hostile):
    message = refused_in_one_line(lambda: load_rules_text(tmp_path, hostile + "\n" + rules_text([RULE])))
    assert "rules-" in message


def test_rules_special_files_are_refused_in_one_line(tmp_path):
    from fade.analyze.rules import RULES_MAX_BYTES, load_rules

    for name, path in special_files(tmp_path, RULES_MAX_BYTES).items():
        assert str(path) in refused_in_one_line(lambda: load_rules(path)), name


# -- tune journal (fade.act.tune.cache.Journal) -------------------------------------------------------------
FINGERPRINT = {"backend": "cpu", "name": "test", "arch": "x86_64", "torch": "2.13.0"}
TRIALS = [{"config": {"precision": "amp-bf16", "compile": "off"}, "samples_s": [0.01, 0.011, 0.012], "status": "ok",
           "reason": None, "samples_per_step": 64, "cost_s": 3.5, "extra": {},
           "numerics": {"mode": "train", "losses": [2.5, 2.4], "grads_finite": True, "updates_before_last": 1}}]  # fmt: skip
REFERENCE = {"losses": [2.5, 2.4], "rounded_losses": None}


def journal_with(tmp_path: Path, text: str | bytes):
    from fade.act.tune.cache import open_cache

    cache = open_cache(FINGERPRINT, base=tmp_path)
    journal = cache.journal("x")
    journal.path.parent.mkdir(parents=True, exist_ok=True)
    journal.path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return journal


def use_trials(trials: dict) -> None:
    """What a resumed search does with a journal's trials."""
    from fade.act.tune import numerics
    from fade.act.tune.search import Trial

    for data in trials.values():
        trial = Trial.from_dict(data)
        if trial.samples_s:
            trial.median_s, trial.relative_iqr
        numerics.check(trial.numerics, REFERENCE)


@PROPERTY
@given(varied(TRIALS[0], frozenset({"mode", "status", "config"})))
def test_journal_trials_from_the_schema_are_resumed_whole(tmp_path_factory, trial):
    journal = journal_with(tmp_path_factory.mktemp("journal"), json.dumps(trial) + "\n")
    assert list(journal.load().values()) == [trial] and journal.messages == []
    use_trials(journal.load())


@PROPERTY
@given(wrong_types(TRIALS))
def test_a_journal_field_of_any_wrong_type_is_resumed_or_skipped_with_one_line(tmp_path_factory, mutation):
    _, _, trial = mutation
    journal = journal_with(tmp_path_factory.mktemp("journal"), json.dumps(TRIALS[0]) + "\n" + json.dumps(trial) + "\n")
    trials, error = finishes(journal.load)
    assert error is None, repr(error)
    assert len(journal.messages) <= 1 and all("\n" not in message for message in journal.messages)
    use_trials(trials)


@pytest.mark.parametrize("hostile", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_journal_line_is_skipped_with_one_warning(tmp_path, hostile):
    line = json.dumps(TRIALS[0]).replace('"cost_s": 3.5', f'"cost_s": {hostile}')
    journal = journal_with(tmp_path, json.dumps(TRIALS[0]) + "\n" + line + "\n")
    assert len(finishes(journal.load)[0]) == 1 and journal.torn_lines == 1 and len(journal.messages) == 1


@pytest.mark.parametrize("kind", ["FIFO", "directory", "oversized"])
def test_a_corrupt_journal_is_set_aside_and_the_search_goes_on(tmp_path, kind, monkeypatch):
    """A journal FADE cannot read is renamed *.corrupt-<time>; the search says so once and measures afresh."""
    from fade.act.tune import cache as cache_module
    from fade.act.tune.cache import open_cache
    from fade.act.tune.search import search
    from tests.tune.fakes import KNOBS, REFERENCE as FAKE_REFERENCE, FakeTimer

    cache = open_cache(FINGERPRINT, base=tmp_path)
    journal = cache.journal("x")
    journal.path.parent.mkdir(parents=True)
    monkeypatch.setattr(cache_module, "JOURNAL_MAX_BYTES", 1024)
    (tmp_path / "special").mkdir()
    os.replace(special_files(tmp_path / "special", 1024)[kind], journal.path)
    said = []
    timer = FakeTimer({})
    result, error = finishes(lambda: search(KNOBS, timer, reference=FAKE_REFERENCE, budget_s=1000, journal=journal,
                                            clock=timer.clock, progress=said.append))  # fmt: skip
    assert error is None, repr(error)
    warnings = [line for line in said if "tune journal" in line]
    assert len(warnings) == 1 and "corrupt-" in warnings[0] and "\n" not in warnings[0]
    assert [path.name for path in journal.path.parent.iterdir() if ".corrupt-" in path.name]
    monkeypatch.undo()  # the new journal is larger than the 1 KB cap that made "oversized" cheap
    assert result.trials_measured > 0 and len(journal.load()) == result.trials_measured  # the new journal is whole


def test_a_binary_journal_is_skipped_line_by_line_with_one_warning(tmp_path):
    journal = journal_with(tmp_path, os.urandom(4096) + b"\n" + json.dumps(TRIALS[0]).encode() + b"\n")
    assert len(journal.load()) == 1 and len(journal.messages) == 1


# -- probe cache (fade.collect.probe_cache) -----------------------------------------------------------------
PROBE_ENTRIES = [{"saved_at": 1_700_000_000.0, "torch": SNAPSHOTS[0]["torch"]}]
NOW = 1_700_000_100.0


def probe_entry_file(tmp_path: Path, content: str | bytes) -> tuple:
    from fade.collect.probe_cache import cache_dir

    environ = {"XDG_CACHE_HOME": str(tmp_path)}
    path = cache_dir(environ) / "k.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return environ, path


@PROPERTY
@given(varied(PROBE_ENTRIES[0], frozenset({"saved_at", "index", "version", "available", "devices"})))
def test_probe_cache_entries_from_the_schema_are_reused(tmp_path_factory, entry):
    from fade.collect import probe_cache

    environ, _ = probe_entry_file(tmp_path_factory.mktemp("probe"), json.dumps(entry))
    warnings: list = []
    assert probe_cache.load("k", environ, warnings=warnings, now=lambda: NOW) == entry and warnings == []


@PROPERTY
@given(wrong_types(PROBE_ENTRIES))
def test_a_probe_cache_field_of_any_wrong_type_is_reused_or_set_aside(tmp_path_factory, mutation):
    from fade.collect import probe_cache

    _, _, entry = mutation
    environ, path = probe_entry_file(tmp_path_factory.mktemp("probe"), json.dumps(entry))
    warnings: list = []
    loaded, error = finishes(lambda: probe_cache.load("k", environ, warnings=warnings, now=lambda: NOW))
    assert error is None, repr(error)
    if loaded is None and not warnings:  # a valid entry, only too old
        assert NOW - entry["saved_at"] > probe_cache.MAX_AGE_S
    elif loaded is None:
        assert len(warnings) == 1 and "\n" not in warnings[0] and not path.exists()
    else:
        assert warnings == []


@pytest.mark.parametrize("content", [*HOSTILE.values(), "{", b"\xff\xfe binary"], ids=[*HOSTILE, "torn", "binary"])
def test_a_corrupt_probe_cache_is_set_aside_and_the_doctor_probes_again(tmp_path, monkeypatch, content):
    from fade.collect import probe_cache, snapshot

    environ, path = probe_entry_file(tmp_path, content)
    monkeypatch.setattr(probe_cache, "probe_key", lambda snap: "k")
    monkeypatch.setattr(snapshot, "_torch_subprocess", lambda: (SNAPSHOTS[0]["torch"], None))
    snap: dict = {}
    section, reason = snapshot._torch_subprocess_cached(snap, environ)
    assert section == SNAPSHOTS[0]["torch"] and reason is None
    assert snap["probe"]["torch"] == "live" and "corrupt-" in snap["probe"]["warning"]
    assert [p.name for p in path.parent.iterdir() if ".corrupt-" in p.name]
    assert probe_cache.load("k", environ) is not None  # probed afresh and saved: the next run reuses it


def test_probe_cache_special_files_are_set_aside(tmp_path):
    from fade.collect import probe_cache

    for name, special in special_files(tmp_path, probe_cache.ENTRY_MAX_BYTES).items():
        if name == "/dev/zero":
            continue  # the cache path is FADE's own: it can hold a FIFO or a directory, not be /dev/zero
        environ = {"XDG_CACHE_HOME": str(tmp_path / f"home-{name.strip('/')}")}
        path = probe_cache.cache_dir(environ) / "k.json"
        path.parent.mkdir(parents=True)
        os.replace(special, path)
        warnings: list = []
        assert finishes(lambda: probe_cache.load("k", environ, warnings=warnings))[0] is None
        assert len(warnings) == 1 and ("not a regular file" in warnings[0] or "bytes" in warnings[0]), name


# -- the CLI: one line, exit 2, at once -----------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["compare", "{fifo}"], ["report", "{fifo}", "-o", "{out}"], ["doctor", "--snapshot", "{fifo}"],
    ["doctor", "--snapshot", "/dev/zero"], ["doctor", "--rules", "{fifo}"],
    ["profile", "compare", "{fifo}", "{fifo}"], ["report", "/dev/urandom", "-o", "{out}"],
], ids=lambda argv: " ".join(argv[:2]))  # fmt: skip
def test_a_fifo_or_device_given_to_a_verb_is_one_line_and_exit_2(tmp_path, fade, argv):
    fifo = tmp_path / "input.json"
    os.mkfifo(fifo)
    args = [arg.format(fifo=fifo, out=tmp_path / "r.html") for arg in argv]
    (code, _, err), error = finishes(lambda: fade(*args))
    assert error is None and code == 2
    assert re.search("not a regular file", one_line(err))
