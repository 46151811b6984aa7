"""A snapshot file is user input: anything malformed is one line on stderr and exit 2, never a traceback."""

import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fade.analyze.doctor import diagnose
from fade.cli import main
from fade.collect.snapshot import collect_snapshot, load_snapshot, validate_snapshot
from fade.errors import FadeUsageError


@pytest.fixture(scope="module")
def valid_snapshot():
    return collect_snapshot(torch="inprocess", run_tools=False)


def _doctor(path, capsys):
    code = main(["doctor", "--snapshot", str(path), "--json"])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("content, reason", [
    ("", "file is empty"),
    ("   \n", "file is empty"),
    ('{"schema_version": 1, "os": {', "not valid JSON"),
    ("[1, 2, 3]", "top level must be a JSON object"),
    ('{"schema_version": 99}', "schema_version 99 is not supported"),
    ('{"schema_version": "1"}', "schema_version must be int"),
])
def test_malformed_snapshot_exits_2_with_one_line(tmp_path, capsys, content, reason):
    path = tmp_path / "snap.json"
    path.write_text(content)
    code, out, err = _doctor(path, capsys)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and reason in err


def test_wrong_types_name_the_offending_key(tmp_path, capsys, valid_snapshot):
    snap = json.loads(json.dumps(valid_snapshot))
    snap["torch"] = {**(snap["torch"] or {}), "devices": [{"index": 0, "name": "GPU", "major": "9"}]}
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(snap))
    code, _, err = _doctor(path, capsys)
    assert code == 2 and "torch.devices[0]" in err and len(err.strip().splitlines()) == 1


def test_missing_file_exits_2(tmp_path, capsys):
    code, _, err = _doctor(tmp_path / "nope.json", capsys)
    assert code == 2 and "no such file" in err


def test_truncated_snapshot_through_the_real_cli_has_no_traceback(tmp_path, valid_snapshot):
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(valid_snapshot)[:200])
    proc = subprocess.run([sys.executable, "-m", "fade", "doctor", "--snapshot", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_saved_live_snapshot_round_trips(tmp_path, valid_snapshot):
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(valid_snapshot))
    assert load_snapshot(path) == valid_snapshot


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None, derandomize=True)  # the same cases every run: no luck in CI
@given(value=json_values)
def test_loader_fuzz_random_json_is_accepted_or_rejected_cleanly(value):
    try:
        validate_snapshot(value)
    except FadeUsageError as exc:
        assert "\n" not in str(exc)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from _paths(value, prefix + (i,))


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_loader_fuzz_mutated_snapshots_either_fail_cleanly_or_diagnose(data, fixture_snapshot):
    import glob
    import os

    files = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "fixtures", "snapshots", "*.json")))
    base = fixture_snapshot(os.path.basename(data.draw(st.sampled_from(files)))) if files else {}
    snap = json.loads(json.dumps(base))
    for _ in range(data.draw(st.integers(1, 3))):
        paths = [p for p in _paths(snap) if p]
        if not paths:
            break
        path = data.draw(st.sampled_from(paths))
        parent = snap
        for key in path[:-1]:
            parent = parent[key]
        if data.draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(json_values)
    try:
        validate_snapshot(snap)
    except FadeUsageError as exc:
        assert "\n" not in str(exc)
        return
    report = diagnose(snap)  # whatever validation accepts, the analysis must handle
    assert isinstance(report["findings"], list)


@pytest.mark.parametrize("argv", [["--help"], ["doctor", "--help"], ["bench", "--help"], ["bench", "micro", "--help"],
                                  ["bench", "models", "--help"], ["compare", "--help"], ["report", "--help"],
                                  ["watch", "--help"], ["ops", "--help"], ["snapshot", "--help"]])
def test_every_help_text_renders(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0 and "usage: fade" in capsys.readouterr().out
