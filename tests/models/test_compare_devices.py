"""One file holding a run on several devices (`fade bench models --device ocl:0,cuda:0`): a result set per device,
the last device listed as the baseline, the same numbers from `fade compare --by device`, and the device list's
checks; synthetic records, no torch."""

import json

import pytest

from fade.analyze.compare import compare_devices, compare_files
from fade.errors import FadeUsageError
from fade.measure.runner import RunSummary, combine_runs, device_list, start_devices

from .records import model_record, write_jsonl

NOT_APPLICABLE = {"cudnn_benchmark=on": "a gpu knob (data/knobs.toml) that ocl ignores: ran at cudnn_benchmark=off"}
VENDOR_VARIANT = "fp32+cudnn_benchmark=on"


def ocl_and_cuda_records():
    """resnet50 and alexnet, train and infer, on ocl:0 (ran as fp32) and cuda:0, one run."""
    ocl_variant = {"name": VENDOR_VARIANT, "not_applicable": NOT_APPLICABLE, "ran_as": "fp32"}
    figures = {("resnet50", "train"): (33.0, 880.0), ("resnet50", "infer"): (206.0, 3050.0),
               ("alexnet", "train"): (580.0, 4600.0), ("alexnet", "infer"): (3400.0, 32000.0)}  # fmt: skip
    records = []
    for device, position in (("ocl:0", 0), ("cuda:0", 1)):
        for (model, mode), values in figures.items():
            extra = {"variant": ocl_variant} if device == "ocl:0" else {"variant": {"name": VENDOR_VARIANT}}
            records.append(model_record(model, mode, VENDOR_VARIANT, values[position], torch_device=device, extra=extra))
    return records


def cells(comparison, row):
    found = next(item for item in comparison.rows if item["row"] == row)
    return {f"{label} {sub}": cell for (label, sub), cell in zip(comparison.columns, found["cells"])}


def test_each_device_is_a_set_and_the_last_device_listed_is_the_baseline(tmp_path):
    path = write_jsonl(tmp_path / "models.jsonl", ocl_and_cuda_records())
    records = [json.loads(line) for line in path.read_text().splitlines()]
    comparison = compare_devices(path, records, ["ocl:0", "cuda:0"])
    assert comparison.by == "device" and comparison.baseline == "cuda:0"
    assert comparison.sets == ["cuda:0", "ocl:0"]
    row = cells(comparison, "resnet50 fp32+cudnn_benchmark=on b64")
    assert row["cuda:0 train"].verdict == "baseline"
    assert row["ocl:0 train"].pct_of_baseline == pytest.approx(100 * 33.0 / 880.0)
    assert row["ocl:0 infer"].pct_of_baseline == pytest.approx(100 * 206.0 / 3050.0)
    assert row["ocl:0 train"].verdict == "slower"
    assert {item["row"] for item in comparison.rows} == {"resnet50 fp32+cudnn_benchmark=on b64", "alexnet fp32+cudnn_benchmark=on b64"}


def test_fade_compare_by_device_gives_the_same_numbers_as_the_bench(tmp_path):
    path = write_jsonl(tmp_path / "models.jsonl", ocl_and_cuda_records())
    records = [json.loads(line) for line in path.read_text().splitlines()]
    from_bench = compare_devices(path, records, ["ocl:0", "cuda:0"]).to_dict()
    from_compare = compare_files([path], by="device", baseline="cuda:0").to_dict()
    assert from_bench["rows"] == from_compare["rows"]
    assert from_bench["columns"] == from_compare["columns"]


def test_fade_compare_by_device_on_the_command_line(tmp_path, fade):
    path = write_jsonl(tmp_path / "models.jsonl", ocl_and_cuda_records())
    code, out, _ = fade("compare", path, "--by", "device", "--baseline", "cuda:0", "--json")
    assert code == 0
    comparison = json.loads(out)
    assert comparison["baseline"] == "cuda:0" and comparison["by"] == "device"
    ocl_cells = [cell for row in comparison["rows"] for cell, (label, _) in zip(row["cells"], comparison["columns"]) if label == "ocl:0"]
    assert len(ocl_cells) == 4 and all(cell["pct_of_baseline"] is not None for cell in ocl_cells)


def test_a_variant_the_device_ignores_part_of_keeps_its_row_and_says_what_ran(tmp_path):
    path = write_jsonl(tmp_path / "models.jsonl", ocl_and_cuda_records())
    comparison = compare_files([path], by="device", baseline="cuda:0")
    assert "ocl:0: fp32+cudnn_benchmark=on ran as fp32 (cudnn_benchmark=on is not applicable there)" in comparison.notes
    assert not any(note.startswith("cuda:0:") for note in comparison.notes)
    assert "ran as fp32" in cells(comparison, "alexnet fp32+cudnn_benchmark=on b64")["ocl:0 infer"].note


def test_only_the_runs_devices_and_cases_are_compared(tmp_path):
    records = ocl_and_cuda_records() + [model_record("vgg16", "train", "fp32", 100, torch_device="cpu")]
    comparison = compare_devices("models.jsonl", records, ["ocl:0", "cuda:0"],
                                 case_ids=[f"models/alexnet/{mode}/{VENDOR_VARIANT}/b64" for mode in ("train", "infer")])
    assert [row["row"] for row in comparison.rows] == ["alexnet fp32+cudnn_benchmark=on b64"]
    assert comparison.sets == ["cuda:0", "ocl:0"]


def test_by_device_pools_files_and_a_later_file_replaces_a_case(tmp_path):
    first = write_jsonl(tmp_path / "a.jsonl", [model_record("resnet18", "train", "fp32", 10, torch_device="ocl:0"),
                                               model_record("resnet18", "train", "fp32", 100, torch_device="cuda:0")])
    second = write_jsonl(tmp_path / "b.jsonl", [model_record("resnet18", "train", "fp32", 20, torch_device="ocl:0")])
    comparison = compare_files([first, second], by="device", baseline="cuda:0")
    assert cells(comparison, "resnet18 fp32 b64")["ocl:0 train"].pct_of_baseline == pytest.approx(20.0)


def test_a_missing_baseline_device_is_said_not_hidden():
    records = [model_record("resnet18", "infer", "fp32", 10, torch_device="ocl:0")]
    comparison = compare_devices("m.jsonl", records, ["ocl:0", "cuda:0"])
    assert comparison.baseline == "ocl:0"
    assert any("cuda:0 has no record" in note for note in comparison.notes)


def test_an_unknown_by_is_one_usage_error(tmp_path):
    path = write_jsonl(tmp_path / "m.jsonl", ocl_and_cuda_records())
    with pytest.raises(FadeUsageError, match="use file, variant, device"):
        compare_files([path], by="gpu")


@pytest.mark.parametrize("request_text, expected", [
    ("ocl:0,cuda:0", ["ocl:0", "cuda:0"]),
    (" ocl:0 , cpu ", ["ocl:0", "cpu"]),
    (["ocl", "cuda:1"], ["ocl", "cuda:1"]),
    ("cpu", ["cpu"]),
    (None, [None]),
])
def test_a_device_list_is_split_in_order(request_text, expected):
    assert device_list(request_text) == expected


@pytest.mark.parametrize("request_text, message", [
    ("ocl:0,ocl:0", "'ocl:0' is the same device as 'ocl:0'"),
    ("cuda,cuda:0", "'cuda:0' is the same device as 'cuda'"),
    ("ocl:0,,cuda:0", "an empty entry"),
])
def test_a_bad_device_list_is_one_usage_error(request_text, message):
    with pytest.raises(FadeUsageError, match=message) as caught:
        device_list(request_text)
    assert "\n" not in str(caught.value)


class FakeExecutor:
    """An executor whose worker 'resolves' the request to `device`, or fails as a worker would."""

    def __init__(self, request, device=None, error=None):
        self.device_request, self.device, self.error = request, device, error
        self.started = self.closed = False

    def start(self):
        self.started = True
        if self.error:
            raise self.error
        return {"device": self.device}

    def close(self):
        self.closed = True


def test_every_device_starts_before_any_case_and_only_the_first_stays_open():
    executors = [FakeExecutor("ocl", "ocl:0"), FakeExecutor("cuda", "cuda:0")]
    assert start_devices(executors) == ["ocl:0", "cuda:0"]
    assert all(executor.started for executor in executors)
    assert not executors[0].closed and executors[1].closed


def test_an_absent_later_device_stops_the_run_before_the_first_device_runs_a_case():
    executors = [FakeExecutor("ocl:0", "ocl:0"), FakeExecutor("cuda:0", error=FadeUsageError("device 'cuda:0' is not available here"))]
    with pytest.raises(FadeUsageError, match="not available here"):
        start_devices(executors)
    assert all(executor.closed for executor in executors)


def test_two_names_for_one_device_are_caught_once_resolved():
    with pytest.raises(FadeUsageError, match="listed twice"):
        start_devices([FakeExecutor("cuda", "cuda:0"), FakeExecutor("cuda:0", "cuda:0")])


def test_runs_on_several_devices_combine_into_one_summary():
    first = RunSummary(out="m.jsonl", run_id="r", device="ocl:0", selected=2, resumed=0, statuses={"ok": 2},
                       records=[{"case_id": "a"}], case_ids=["a", "b"], wall_s=3.0)
    second = RunSummary(out="m.jsonl", run_id="r", device="cuda:0", selected=2, resumed=1, statuses={"ok": 1, "oom": 1},
                        failures=[{"case_id": "b", "status": "oom", "error": None}], records=[{"case_id": "b"}],
                        case_ids=["a", "b"], wall_s=1.0)
    combined = combine_runs([first, second])
    assert combined.devices == ["ocl:0", "cuda:0"] and combined.device == "ocl:0,cuda:0"
    assert combined.statuses == {"ok": 3, "oom": 1} and combined.failed == 1
    assert combined.selected == 4 and combined.resumed == 1 and combined.wall_s == pytest.approx(4.0)
    assert [record["case_id"] for record in combined.records] == ["a", "b"]
    assert combined.to_dict()["devices"] == ["ocl:0", "cuda:0"]


def test_by_variant_keeps_two_devices_of_one_file_apart(tmp_path):
    path = write_jsonl(tmp_path / "models.jsonl", ocl_and_cuda_records())
    comparison = compare_files([path], by="variant")
    assert sorted(comparison.sets) == ["models.jsonl [cuda:0] fp32+cudnn_benchmark=on",
                                       "models.jsonl [ocl:0] fp32+cudnn_benchmark=on"]
