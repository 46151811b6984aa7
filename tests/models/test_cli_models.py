"""The CLI verbs `fade bench models`, `fade compare` and `fade report`: exit codes, one-line errors, key JSON
fields; never the table layout."""

import json

import pytest

from tests.cliutil import one_line

from fade.errors import ExitCode

from .records import model_record, record, write_jsonl




@pytest.mark.parametrize(
    "argv, message",
    [
        (["--models", "resnet51"], "did you mean 'resnet50'"),
        (["--batch", "0"], "--batch 0: must be a positive integer"),
        (["--batch", "-3"], "must be a positive integer"),
        (["--batch", "many"], "not an integer"),
        (["--models", "fade_no_such_module:make"], "no module named 'fade_no_such_module'"),
        (["--models", "json:no_such_function"], "has no attribute 'no_such_function'"),
        (["--models", "json:__doc__"], "not a function"),
        (["--variants", "bf16"], "did you mean 'amp-bf16'"),
        (["--models", "alexnet", "--image-size", "32"], "at least 63 px"),
        (["--models", "bert-base", "--seq-len", "1024"], "512 tokens at most"),
    ],
)
def test_bad_bench_input_is_one_line_and_exit_2(fade, tmp_path, argv, message):
    code, _, err = fade("bench", "models", "-o", tmp_path / "out.jsonl", *argv)
    assert code == ExitCode.USAGE
    assert message in one_line(err)


@pytest.mark.parametrize("devices, message", [
    ("cpu,cpu", "'cpu' is the same device as 'cpu'"),
    ("cpu,,cpu", "an empty entry"),
])
def test_a_bad_device_list_is_one_line_and_exit_2_before_any_worker(fade, tmp_path, devices, message):
    code, _, err = fade("bench", "models", "--quick", "--models", "alexnet", "--device", devices, "-o", tmp_path / "out.jsonl")
    assert code == ExitCode.USAGE
    assert message in one_line(err)


def test_a_device_list_is_for_the_model_bench_only(fade, tmp_path):
    code, _, err = fade("bench", "micro", "--quick", "--device", "cpu,ocl:0", "-o", tmp_path / "out.jsonl")
    assert code == ExitCode.USAGE
    assert "several devices are for `fade bench models`" in one_line(err)


def test_an_absent_device_in_a_list_stops_the_run_before_the_first_device_runs_a_case(fade, tmp_path):
    """cpu is present, no_such_device is not: exit 2 with one line, and no record of the cpu's cases."""
    out = tmp_path / "out.jsonl"
    code, _, err = fade("bench", "models", "--quick", "--models", "alexnet", "--mode", "infer", "--variants", "fp32",
                        "--device", "cpu,no_such_device:0", "-o", out)
    assert code == ExitCode.USAGE
    assert "unknown device 'no_such_device:0'" in one_line(err)
    assert not out.exists() or out.read_text() == ""


def test_bench_models_quick_runs_and_writes_records(fade, tmp_path):
    out = tmp_path / "models.jsonl"
    code, _, _ = fade("bench", "models", "--quick", "--models", "mobilenet_v2", "--mode", "infer", "--image-size", "32",
                      "--variants", "fp32,amp-fp16", "-o", out, "--json", tmp_path / "summary.json")  # fmt: skip
    assert code == ExitCode.OK
    statuses = {json.loads(line)["case_id"]: json.loads(line)["status"] for line in out.read_text().splitlines()}
    assert statuses == {"models/mobilenet_v2/infer/fp32/b2-32px": "ok", "models/mobilenet_v2/infer/amp-fp16/b2-32px": "skipped"}
    assert json.loads((tmp_path / "summary.json").read_text())["statuses"] == {"ok": 1, "skipped": 1}


def test_compare_reads_past_a_corrupt_line_reports_its_number_and_exits_2(fade, tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [record("x/1", 100), record("x/2", 100)], corrupt_line_at=1)
    code, out, err = fade("compare", a, "--json")
    assert code == ExitCode.USAGE
    assert one_line(err).startswith(f"fade: error: {a}:2: not valid JSON")
    assert [row["row"] for row in json.loads(out)["rows"]] == ["x/1", "x/2"]


def test_compare_fail_under_exits_1_on_a_regression_and_0_otherwise(fade, tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [model_record("resnet50", "train", "fp32", 882)])
    slow = write_jsonl(tmp_path / "slow.jsonl", [model_record("resnet50", "train", "fp32", 700)])
    same = write_jsonl(tmp_path / "same.jsonl", [model_record("resnet50", "train", "fp32", 875)])
    assert fade("compare", a, slow, "--fail-under", "95")[0] == ExitCode.FINDINGS
    assert fade("compare", a, same, "--fail-under", "95")[0] == ExitCode.OK
    code, out, _ = fade("compare", a, slow, "--json")
    assert code == ExitCode.OK  # no --fail-under: slower is reported, not failed
    assert json.loads(out)["rows"][0]["cells"][1]["verdict"] == "slower"


def test_compare_writes_markdown(fade, tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [model_record("vgg16", "train", "fp32", 608)])
    b = write_jsonl(tmp_path / "b.jsonl", [model_record("vgg16", "train", "fp32", 640)])
    code, _, _ = fade("compare", a, b, "--markdown", tmp_path / "table.md")
    assert code == ExitCode.OK
    assert "| vgg16 fp32 b64 | 608 | 640 (105% ▲) |" in (tmp_path / "table.md").read_text()


def test_compare_and_report_of_a_missing_file_are_one_line_errors(fade, tmp_path):
    for verb in ("compare", "report"):
        code, _, err = fade(verb, tmp_path / "nope.jsonl")
        assert code == ExitCode.USAGE
        assert "cannot read results file" in one_line(err)


def test_report_is_written_despite_a_corrupt_line_which_it_lists(fade, tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [model_record("resnet18", "infer", "fp32", 5000)], corrupt_line_at=0)
    out = tmp_path / "report.html"
    code, _, err = fade("report", a, "-o", out)
    assert code == ExitCode.USAGE
    assert f"{a}:1: not valid JSON" in err
    text = out.read_text()
    assert "resnet18" in text and f"{a}:1: not valid JSON" in text


def test_a_resumed_run_keeps_the_original_runs_baseline_variant(fade, tmp_path):
    """Issue 30: the variant table after a --resume run was built from the new records alone, so its baseline
    silently became the first variant measured after the interruption. fp32 ran before; the resumed run measures
    amp-fp16 (skipped on the CPU) and still compares with fp32."""
    out = write_jsonl(tmp_path / "models.jsonl", [
        {**model_record("mobilenet_v2", "infer", "fp32", 500.0, batch=2, torch_device="cpu"),
         "case_id": "models/mobilenet_v2/infer/fp32/b2-32px"}])
    code, stdout, _ = fade("bench", "models", "--quick", "--models", "mobilenet_v2", "--mode", "infer",
                           "--image-size", "32", "--variants", "fp32,amp-fp16", "--resume", "-o", out)
    assert code == ExitCode.OK
    assert [json.loads(line)["case_id"] for line in out.read_text().splitlines()][1:] == \
        ["models/mobilenet_v2/infer/amp-fp16/b2-32px"]  # fp32 was not measured again
    assert "Compared with fp32" in " ".join(stdout.split())


def test_compare_of_a_snapshot_says_so_before_printing_any_table(fade, tmp_path):
    """Issue 30: `fade compare results.jsonl snapshot.json` printed the table, then the error. Every file is read
    and checked first: one line, exit 2, nothing on stdout."""
    results = write_jsonl(tmp_path / "a.jsonl", [record("x/1", 100)])
    snapshot = tmp_path / "snap.json"
    snapshot.write_text(json.dumps({"schema_version": 1, "kfd_nodes": [], "pci": []}, indent=1))
    code, out, err = fade("compare", results, snapshot)
    assert code == ExitCode.USAGE and out == ""
    assert "this is a snapshot" in one_line(err)


def test_compare_prints_no_terminal_control_character_from_a_results_file(fade, tmp_path):
    hostile = "x/\x1b]0;owned\x07\x1b[2J"
    results = write_jsonl(tmp_path / "a.jsonl", [record(hostile, 100)])
    again = write_jsonl(tmp_path / "b.jsonl", [record(hostile, 90)])
    code, out, _ = fade("compare", results, again)
    assert code == ExitCode.OK and "\x1b" not in out and "\x07" not in out and "\\x1b" in out
