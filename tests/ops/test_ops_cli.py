"""`fade ops` and `fade ops compare` from the command line: bad input is one stderr line and exit 2; a
comparison reports the gap as JSON. Sweeps here run in this process (hidden --in-process) to share op_db."""

import json

import pytest


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["ops", "--dtypes", "flaot16"], "unknown dtype 'flaot16'; did you mean 'float16'"),
        (["ops", "--samples", "0"], "--samples 0"),
        (["ops", "--timeout", "-1"], "--timeout -1"),
        (["ops", "--inject", "/no/such/file.py"], "--inject"),
        (["ops", "compare", "only-one.jsonl"], "the following arguments are required"),
        (["ops", "comprae", "a", "b"], "invalid choice"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(argv, message, fade_main, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert fade_main(argv) == 2
    assert message in one_line_error(capsys)


def test_a_pattern_matching_no_op_is_one_line_and_exit_2(fade_main, capsys, tmp_path):
    code = fade_main(["ops", "--device", "cpu", "--in-process", "--only", "no_such_op_xyz", "-o", str(tmp_path / "o.jsonl")])
    assert code == 2
    assert "--only 'no_such_op_xyz' matches no OpInfo op" in one_line_error(capsys)


def test_an_unknown_device_is_one_line_and_exit_2(fade_main, capsys, tmp_path):
    assert fade_main(["ops", "--device", "tpu", "--in-process", "-o", str(tmp_path / "o.jsonl")]) == 2
    assert "tpu" in one_line_error(capsys)


@pytest.fixture(scope="module")
def cpu_file(tmp_path_factory):
    """A small CPU sweep written through the CLI, shared by the compare tests."""
    from fade import cli

    out = tmp_path_factory.mktemp("cli") / "cpu.jsonl"
    parser = cli.build_parser()
    args = parser.parse_args(["ops", "--device", "cpu", "--in-process", "--only", "sum,mean", "--no-curated",
                              "--dtypes", "fp32", "bf16", "-o", str(out), "--quiet", "--json", str(out) + ".summary"])
    assert args.func(args) == 0
    return out


def test_compare_lists_what_runs_on_one_side_only_and_mismatches(cpu_file, tmp_path, fade_main, capsys):
    records = [json.loads(line) for line in cpu_file.read_text().splitlines()]
    other = []
    for record in records:
        record = dict(record, torch_device="cuda:0", extra=dict(record["extra"]))
        if record["case_id"] == "opinfo/sum/bfloat16":
            record["extra"].update({"class": "unsupported", "message": "RuntimeError: \"sum_cuda\" not implemented for 'BFloat16'"})
        if record["case_id"] == "opinfo/mean/float32":
            record["extra"]["class"] = "mismatch"
        other.append(record)
    device_file = tmp_path / "device.jsonl"
    device_file.write_text("".join(json.dumps(record) + "\n" for record in other))
    assert fade_main(["ops", "compare", str(device_file), str(cpu_file), "--json"]) == 0
    gap = json.loads(capsys.readouterr().out)
    assert gap["common"] == 4
    assert [(p["op"], p["dtype"]) for p in gap["works_b_not_a"]] == [("sum", "bfloat16")]
    assert "not implemented" in gap["works_b_not_a"][0]["a_message"]
    assert [(p["op"], p["dtype"]) for p in gap["mismatch_a_only"]] == [("mean", "float32")]
    assert gap["families"]["reductions"]["a"]["tried"] == 4 and gap["families"]["reductions"]["b"]["pct_ok"] == 100.0
    assert gap["a"]["device"] == "cuda:0" and gap["b"]["device"] == "cpu"
    # The terminal table renders from the same data.
    assert fade_main(["ops", "compare", str(device_file), str(cpu_file)]) == 0
    assert "Runs on B, not on A" in capsys.readouterr().out


def test_compare_rejects_corrupt_foreign_empty_and_missing_files(cpu_file, tmp_path, fade_main, capsys):
    torn = tmp_path / "torn.jsonl"
    torn.write_text(cpu_file.read_text() + '{"schema_version": 1, "case_id": "opinfo/x/float32", "sta\n')
    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"schema_version": 1, "case_id": "gemm/bf16/8192", "suite": "micro", "status": "ok"}) + "\n")
    future = tmp_path / "future.jsonl"
    future.write_text(json.dumps({"schema_version": 99, "case_id": "opinfo/x/float32", "status": "ok"}) + "\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    two_devices = tmp_path / "two.jsonl"
    lines = cpu_file.read_text().splitlines()
    two_devices.write_text(lines[0] + "\n" + json.dumps(dict(json.loads(lines[1]), torch_device="cuda:0")) + "\n")
    cases = [
        (torn, f"{torn}:5: not valid JSON"),
        (bench, "is suite 'micro', not an ops result"),
        (future, "schema_version 99"),
        (empty, "no ops results in it"),
        (two_devices, "holds results of 2 devices"),
        (tmp_path / "missing.jsonl", "no such results file"),
    ]
    for bad, message in cases:
        assert fade_main(["ops", "compare", str(cpu_file), str(bad)]) == 2, bad
        assert message in one_line_error(capsys), bad


def test_without_expecttest_the_sweep_cannot_run_here_exit_3(fade_main, capsys, tmp_path, monkeypatch):
    """torch's OpInfo database imports expecttest, which torch does not depend on: say what to install."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "expecttest.py").write_text("raise ModuleNotFoundError(\"No module named 'expecttest'\", name='expecttest')\n")
    monkeypatch.setenv("PYTHONPATH", str(shim))
    code = fade_main(["ops", "--device", "cpu", "--only", "sum", "-o", str(tmp_path / "o.jsonl"), "--quiet"])
    assert code == 3
    err = one_line_error(capsys)
    assert "expecttest" in err and "pip install expecttest" in err
