"""The four files a user feeds FADE (results JSONL, snapshot, tuning profile, rules file), mutated, and the
whole path each takes: the reader and what consumes it (analysis, compare, report, apply). Shared by
test_fuzz.py (hypothesis) and benchmarks/corrupt_inputs.py (the counted battery).

`feed_*` return "accepted" or the one-line rejection; anything else raised is a traceback, the bug."""

from __future__ import annotations

import copy
import json
import random
import warnings
from pathlib import Path

from fade.errors import FadeUsageError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "snapshots"
SNAPSHOT_FIXTURE = FIXTURES / "rdna2_rx6800xt_rocm62_healthy.json"

# Values a mutation puts in place of a field: every JSON type, edge numbers and hostile strings.
ODD_VALUES = [None, True, False, 0, -1, 2**64, 2**70, -(2**70), 1e308, -0.0, 0.5, "", "x", "0", "NaN", "\x00",
              "ünï", "<script>", [], [1], ["x"], [[[]]], {}, {"a": 1}, {"": None}]  # fmt: skip


def results_seed() -> list:
    """Two records as FADE writes them: a micro case and a models case with every nested field readers use."""
    telemetry = {"available": False, "source": "none", "throttled": False, "throttle_reasons": [],
                 "contended": True, "contention_reasons": ["busy"], "contention": {"other_cpu_share": 0.5}}
    micro = {"schema_version": 1, "fade_version": "0.1", "run_id": "r", "case_id": "micro/gemm/fp32/1024",
             "suite": "micro", "status": "ok", "torch_device": "cpu", "params": {"n": 1024, "dtype": "fp32"},
             "value": 0.065, "unit": "TFLOP/s", "formula": "2n^3/t", "work": {"flops": 2e9},
             "stats": {"median_s": 0.03, "iqr_s": 0.001, "q1_s": 0.029, "q3_s": 0.031, "cov": 0.02, "n": 10,
                       "noisy": False},
             "timing": {"samples_s": [0.03]}, "peak": {"value": 1.0, "unit": "TFLOP/s", "pct_of_peak": 6.5},
             "extra": {"backend_ran": "mkl"}, "device": {"type": "cpu", "name": "EPYC"},
             "stack": {"torch": {"version": "2.13"}}, "telemetry": telemetry, "started": "2026-11-25T00:00:00Z",
             "finished": "2026-11-25T00:00:01Z", "duration_s": 1.0, "error": None, "error_detail": None,
             "warnings": []}  # fmt: skip
    models = copy.deepcopy(micro)
    models.update({"case_id": "models/resnet18/train/fp32/b2-64px", "suite": "models", "unit": "samples/s", "value": 12.5,
                   "params": {"model": "resnet18", "mode": "train", "variant": "fp32", "batch": 2},
                   "extra": {"flops": {"achieved_tflops": 0.004, "pct_of_peak": 0.4, "peak_dtype": "fp32"},
                             "memory": {"peak_allocated_bytes": 2**30},
                             "plain_loop": {"samples_per_s": 12.0, "fade_vs_plain_pct": 4.0},
                             "loss": {"loss": 2.3, "fp32_loss": 2.3}}})  # fmt: skip
    return [micro, models]


def profile_seed() -> dict:
    from fade.act.tune.tuning_file import KIND, SCHEMA_VERSION

    return {"schema_version": SCHEMA_VERSION, "kind": KIND, "device": {"name": "cpu", "arch": None},
            "model": "resnet18", "mode": "train", "batch": 2,
            "knobs": {"precision": "default", "channels_last": "on", "compile": "off", "cudnn_benchmark": "on",
                      "tunableop": "on"},
            "env": {"PYTORCH_TUNABLEOP_ENABLED": "1", "PYTORCH_TUNABLEOP_TUNING": "1"}}  # fmt: skip


RULES_SEED = [
    {"id": "FUZZ001", "severity": "warn", "scope": "system", "title": "t {torch_version}", "explain": "e",
     "fix": "f", "source": "s", "when": {"torch_version": {"version": ">=2.0"}}, "fix_env": {"A": "1"}},
    {"id": "FUZZ002", "severity": "info", "scope": "device", "title": "t", "explain": "e", "fix": "f",
     "source": "s", "when": {"any": [{"arch": ["gfx1030"]}, {"compute_units": {"gt": 10}}]}},
]  # fmt: skip


# -- mutations ---------------------------------------------------------------------------------------------
def paths_of(value, prefix=()) -> list:
    """Every path (tuple of keys/indices) inside a JSON value, the root included."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths_of(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths_of(item, prefix + (index,))
    return found


def replaced(document, path: tuple, value):
    """A copy of `document` with the value at `path` (keys/indices) replaced; the root itself when `path` is ()."""
    if not path:
        return value
    copied = list(document) if isinstance(document, list) else dict(document)
    copied[path[0]] = replaced(document[path[0]], path[1:], value)
    return copied


def mutate(document, rng: random.Random):
    """A copy of `document` with one structural change: a value replaced, a key deleted, or a container
    emptied/nested; the root may be replaced too."""
    document = copy.deepcopy(document)
    path = rng.choice(paths_of(document))
    if not path:
        return rng.choice(ODD_VALUES)
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    action = rng.random()
    if action < 0.2 and isinstance(parent, dict):
        del parent[path[-1]]
    elif action < 0.3:
        parent[path[-1]] = [parent[path[-1]]] if rng.random() < 0.5 else {"x": parent[path[-1]]}
    else:
        parent[path[-1]] = rng.choice(ODD_VALUES)
    return document


def corrupt_text(text: str, rng: random.Random) -> str:
    """Byte-level damage: truncate, cut out, insert junk, or duplicate a piece."""
    if not text:
        return rng.choice(["{", "\x00", "[" * 5000])
    cut = rng.randrange(len(text))
    choice = rng.random()
    if choice < 0.3:
        return text[:cut]
    if choice < 0.5:
        return text[:cut] + text[cut + rng.randrange(1, 20):]
    if choice < 0.8:
        return text[:cut] + rng.choice(["\x00", "\ufffd", "{", "]", '"', "\n", "NaN", "[" * 3000, "\\u0000"]) + text[cut:]
    return text[:cut] + text[max(0, cut - 30):cut] + text[cut:]


def mutated_text(kind: str, rng: random.Random) -> str:
    """One mutated file of `kind`: mostly a structural mutation of the seed, sometimes text damage on top."""
    if kind == "results":
        records = results_seed()
        index = rng.randrange(len(records))
        records[index] = mutate(records[index], rng)
        text = "".join(json.dumps(record) + "\n" for record in records)
    elif kind == "snapshot":
        text = json.dumps(mutate(json.loads(SNAPSHOT_FIXTURE.read_text(encoding="utf-8")), rng), indent=1)
    elif kind == "profile":
        text = json.dumps(mutate(profile_seed(), rng), indent=1)
    else:
        text = rules_toml(mutate({"rule": RULES_SEED}, rng))
    return corrupt_text(text, rng) if rng.random() < 0.25 else text


def rules_toml(document) -> str:
    """TOML for a mutated rules document; values TOML cannot hold (null, nested odd types) are written as
    TOML would reject them, which is the point."""
    if not isinstance(document, dict) or not isinstance(document.get("rule"), list):
        return "rule = " + _toml_value(document.get("rule") if isinstance(document, dict) else document) + "\n"
    lines = []
    for row in document["rule"]:
        lines.append("[[rule]]")
        if isinstance(row, dict):
            lines += [f"{_toml_key(key)} = {_toml_value(value)}" for key, value in row.items()]
        else:
            lines.append(f"bad = {_toml_value(row)}")
    return "\n".join(lines) + "\n"


def _toml_key(key) -> str:
    return json.dumps(str(key))


def _toml_value(value) -> str:
    if value is None:
        return "nothing"  # invalid TOML on purpose
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if value == value and abs(value) != float("inf") else "nan"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"


# -- the paths each file takes ---------------------------------------------------------------------------
def feed(kind: str, path: Path) -> str:
    """Run `path` through the reader and its consumers; "accepted" or the rejection's one line."""
    try:
        return {"results": feed_results, "snapshot": feed_snapshot, "profile": feed_profile, "rules": feed_rules}[kind](path)
    except FadeUsageError as error:
        return str(error)


def feed_results(path: Path) -> str:
    from fade.analyze.compare import compare_files
    from fade.report.compare import render_markdown, render_terminal
    from fade.report.console import make_console, model_rows, render_bench_summary
    from fade.report.html import render_report
    from fade.results import read_records, summarize

    found = read_records(path)
    console = make_console(file=open(path.parent / "console.txt", "w", encoding="utf-8"), width=120)
    try:
        render_bench_summary(summarize(found.records), {"device": "cpu", "out": str(path)}, console)
        render_bench_summary(model_rows(found.records), {"device": "cpu", "out": str(path)}, console)
        copy_path = path.parent / "copy.jsonl"
        copy_path.write_text(path.read_text(encoding="utf-8", errors="replace"), encoding="utf-8")
        comparison = compare_files([path, copy_path])
        render_terminal(comparison, console)
        render_markdown(comparison)
        json.dumps(comparison.to_dict(), default=str)
        render_report([path, copy_path])
    finally:
        console.file.close()
    problems = found.problems
    assert all("\n" not in problem for problem in problems), problems
    return problems[0] if problems else "accepted"


def feed_snapshot(path: Path) -> str:
    from fade.analyze.doctor import diagnose
    from fade.collect.snapshot import load_snapshot
    from fade.report.console import make_console, render_doctor

    report = diagnose(load_snapshot(path))
    console = make_console(file=open(path.parent / "console.txt", "w", encoding="utf-8"), width=120)
    try:
        render_doctor(report, console)
    finally:
        console.file.close()
    json.dumps(report, default=str)
    return "accepted"


def feed_profile(path: Path) -> str:
    from fade.act.tune.tuning_file import env_lines, read_tuning, load_tuning

    environ: dict = {}
    try:
        with warnings.catch_warnings():  # another device's profile warns and applies nothing: an outcome, not noise
            warnings.simplefilter("ignore", RuntimeWarning)
            tuning = load_tuning(path, environ=environ, fingerprint={"name": "cpu", "arch": None}, set_torch_flags=False)
    except FadeUsageError:
        assert environ == {}, "a rejected profile set variables"  # validated whole before anything applies
        raise
    env_lines(read_tuning(path), environ={})
    assert all(value == environ.get(name) for name, value, status in tuning.env if status == "set")
    return "accepted"


def feed_rules(path: Path) -> str:
    from fade.analyze.doctor import diagnose
    from fade.analyze.rules import RuleError, load_rules

    load_rules.cache_clear()
    try:
        load_rules(path)
    except RuleError as error:
        raise FadeUsageError(f"rules file {error}") from None
    diagnose(json.loads(SNAPSHOT_FIXTURE.read_text(encoding="utf-8")), rules_path=path)
    return "accepted"
