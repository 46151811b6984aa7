"""CLBlast tuning for fade.ocl without a device: the constraint checks, the search's decisions (fake
measurements), the persisted parameters' staling and application, the pre-tune's processes (fake runner) and
the CLI's bad input."""

import json
from types import SimpleNamespace

import pytest

from fade.act.tune import cache as tune_cache
from fade.act.tune.oclgemm import DEFAULTS_ENV, run_ocl_pretune
from fade.ocl import tuning

LIMITS = {"local_memory_bytes": 48 * 1024, "max_work_group_size": 1024}  # an NVIDIA GPU's
GOOD_XGEMM = {"GEMMK": 0, "KREG": 1, "KWG": 32, "KWI": 2, "MDIMA": 16, "MDIMC": 16, "MWG": 64, "NDIMB": 16,
              "NDIMC": 16, "NWG": 64, "SA": 1, "SB": 1, "STRM": 0, "STRN": 0, "VWM": 4, "VWN": 4}  # NVIDIA default
FINGERPRINT = {"backend": "ocl", "name": "NVIDIA H100 80GB HBM3", "arch": "NVIDIA CUDA", "torch": None, "cuda": None,
               "hip": None, "cudnn": None, "miopen": None,
               "driver": "570.1 | OpenCL 3.0 CUDA | libclblast.so.1.5.3 sha256:1"}


def test_clblasts_nvidia_default_is_legal():
    assert tuning.violations("Xgemm", GOOD_XGEMM, **LIMITS) == []


@pytest.mark.parametrize("change, reason", [
    ({"MDIMC": 32, "MDIMA": 32, "MWG": 64}, "integer MWI"),  # 64 is not a multiple of 32 * VWM 4
    ({"KWG": 16, "KWI": 32}, "KWI unrolls"),
    ({"MWG": 128, "NWG": 128, "KWG": 64, "MDIMC": 32, "NDIMC": 32, "MDIMA": 32, "NDIMB": 32, "VWM": 4, "VWN": 4},
     "local memory"),  # 4 * (64*128 + 64*128) bytes = 64 KiB > 48 KiB
    ({"MDIMC": 64, "NDIMC": 32, "MDIMA": 64, "NDIMB": 32, "MWG": 256, "NWG": 128, "VWM": 4, "VWN": 4, "KWG": 64},
     "work-group of 2048"),
    ({"GEMMK": 1, "KWG": 1, "KWI": 1, "KREG": 2, "VWN": 4, "SA": 0, "SB": 0}, "KREG=2 is not a multiple of 4"),
])
def test_illegal_xgemm_configurations_are_rejected(change, reason):
    found = tuning.violations("Xgemm", {**GOOD_XGEMM, **change}, **LIMITS)
    assert any(reason in line for line in found), found


def test_a_configuration_missing_a_parameter_is_rejected():
    assert tuning.violations("XgemmDirect", {"WGD": 32}, **LIMITS)[0].startswith("missing KWID")


def test_every_candidate_offered_is_legal_and_the_devices_vendor_comes_first():
    offered = tuning.candidates("Xgemm", vendor="NVIDIA Corporation", limits=LIMITS, count=120, seed=1)
    assert len(offered) == 120 and len({json.dumps(p, sort_keys=True) for _, p in offered}) == 120
    assert all(tuning.violations("Xgemm", parameters, **LIMITS) == [] for _, parameters in offered)
    assert offered[0][0].startswith("CLBlast database: NVIDIA")
    assert any(label.startswith("random") for label, _ in offered)
    direct = tuning.candidates("XgemmDirect", vendor="AMD", limits=LIMITS, count=30)
    assert all(tuning.violations("XgemmDirect", parameters, **LIMITS) == [] for _, parameters in direct)


def test_the_data_table_has_a_source_on_every_row():
    table = tuning.load_table()
    assert all(row["source"].startswith("https://github.com/CNugteren/CLBlast/") for row in table["candidate"])
    assert {row["kernel"] for row in table["candidate"]} == set(tuning.KERNEL_PARAMETERS)


def test_thresholds_offered_split_the_shapes_differently():
    shapes = [tuning.GemmShape(64, 64, 64), tuning.GemmShape(512, 512, 512), tuning.GemmShape(4096, 4096, 4096)]
    offered = [parameters["XGEMM_MIN_INDIRECT_SIZE"] for _, parameters in tuning.threshold_candidates(shapes)]
    partitions = {tuple(s.m * s.n * s.k < value ** 3 for s in shapes) for value in offered}
    assert len(partitions) == len(offered) >= 2


def test_recorded_calls_become_shapes_with_counts():
    calls = [(0, "float32", False, True, 5, 16, 8, 1)] * 3 + [(0, "float32", False, False, 5, 8, 16, 1)]
    shapes = tuning.shapes_from_calls(calls)
    assert shapes == [tuning.GemmShape(5, 16, 8, trans_b=True, calls=3), tuning.GemmShape(5, 8, 16)]
    with pytest.raises(ValueError, match="m=0"):
        tuning.GemmShape(0, 1, 1)


def _fake_search(monkeypatch, totals: dict, wrong: set = frozenset()):
    """tune() against fake measurements: the total per step depends on the last Xgemm label applied."""
    state = {"label": "default"}
    labels = {json.dumps(GOOD_XGEMM, sort_keys=True): "default"}
    offered = [(name, {**GOOD_XGEMM, "KWG": 16 * (index + 3)}) for index, name in enumerate(totals)
               if name != "default"]
    labels.update({json.dumps(parameters, sort_keys=True): name for name, parameters in offered})

    def apply(dev, parameters):
        if "Xgemm" in parameters:
            state["label"] = labels[json.dumps(parameters["Xgemm"], sort_keys=True)]

    def measure(dev, shapes, bench=None, reference=None, *, repeats=5, give_up_above_s=None):
        total = totals[state["label"]]
        rows = [{"label": s.label(), "shape": s.as_dict(), "median_s": total, "relative_iqr": 0.01, "gflops": 1.0,
                 "weight_s": total} for s in shapes]
        return {"rows": rows, "total_s": total, "samples": {s: None for s in shapes}, "abandoned": False,
                "worst_rel_diff": 1.0 if state["label"] in wrong else 0.0}

    monkeypatch.setattr(tuning, "apply", apply)
    monkeypatch.setattr(tuning, "measure_shapes", measure)
    monkeypatch.setattr(tuning, "candidates", lambda kernel, **_: offered if kernel == "Xgemm" else [])
    monkeypatch.setattr(tuning, "threshold_candidates", lambda shapes: [])
    return SimpleNamespace(index=0, info=SimpleNamespace(vendor="NVIDIA", local_memory_bytes=49152),
                           cl_device=SimpleNamespace(max_work_group_size=1024))


def test_the_search_keeps_the_fastest_correct_configuration(monkeypatch):
    dev = _fake_search(monkeypatch, {"default": 1.0, "slower": 1.2, "wrong": 0.3, "faster": 0.5, "within noise": 0.99},
                       wrong={"wrong"})
    result = tuning.tune(dev, [tuning.GemmShape(64, 64, 64)], budget_s=60.0, clock=iter(range(0, 1000)).__next__)
    assert result["chosen"]["Xgemm"]["KWG"] == 16 * (3 + 3)  # "faster" (the fourth name)
    assert [row["reason"].split(" by ")[0] for row in result["rejected"]] == ["result differs from the default"]


def test_the_search_keeps_the_defaults_when_nothing_beats_the_noise(monkeypatch):
    dev = _fake_search(monkeypatch, {"default": 1.0, "within noise": 0.99, "slower": 1.5})
    result = tuning.tune(dev, [tuning.GemmShape(64, 64, 64)], budget_s=60.0, clock=iter(range(0, 1000)).__next__)
    assert result["chosen"] == {} and result["tuned"] is None


def test_the_search_starts_no_candidate_past_its_budget(monkeypatch):
    dev = _fake_search(monkeypatch, {"default": 1.0, "a": 0.9, "b": 0.8, "c": 0.7})
    ticks = iter(range(0, 100000, 10))  # every clock read advances 10 s: the budget allows one candidate or none
    result = tuning.tune(dev, [tuning.GemmShape(64, 64, 64)], budget_s=40.0, clock=ticks.__next__)
    assert result["stages"][0]["tried"] <= 1


def test_a_candidate_that_breaks_the_queue_ends_the_search_naming_it_and_is_skipped_after(monkeypatch):
    dev = _fake_search(monkeypatch, {"default": 1.0, "faulting": 0.5, "faster": 0.7})
    alive = {"queue": True}
    measure = tuning.measure_shapes

    def faulting(dev, shapes, bench=None, reference=None, **options):
        if options.get("repeats") == tuning.SEARCH_REPEATS and tuning_state["applied"] == "faulting":
            alive["queue"] = False
            raise RuntimeError("clFinish failed: INVALID_COMMAND_QUEUE")
        return measure(dev, shapes, bench, reference, **options)

    tuning_state = {"applied": None}
    apply = tuning.apply

    def tracking_apply(dev, parameters):
        tuning_state["applied"] = "faulting" if parameters.get("Xgemm", {}).get("KWG") == 16 * 4 else "other"
        apply(dev, parameters)

    monkeypatch.setattr(tuning, "measure_shapes", faulting)
    monkeypatch.setattr(tuning, "apply", tracking_apply)
    monkeypatch.setattr(tuning, "queue_alive", lambda dev: alive["queue"])
    shapes = [tuning.GemmShape(64, 64, 64)]
    with pytest.raises(tuning.DeviceLost) as lost:
        tuning.tune(dev, shapes, budget_s=60.0, clock=iter(range(0, 1000)).__next__)
    assert lost.value.candidate.startswith("Xgemm:faulting")
    alive["queue"] = True
    tuning.apply(dev, {"Xgemm": GOOD_XGEMM})  # a fresh process starts from CLBlast's own parameters
    result = tuning.tune(dev, shapes, budget_s=60.0, clock=iter(range(0, 1000)).__next__,
                         exclude=frozenset([lost.value.candidate]))
    assert result["chosen"]["Xgemm"]["KWG"] == 16 * 5  # "faster"; the faulting one was not tried again


# the persisted parameters
def _fake_device(name="NVIDIA H100 80GB HBM3", driver="570.1"):
    info = SimpleNamespace(name=name, platform="NVIDIA CUDA", driver_version=driver)
    platform = SimpleNamespace(version="OpenCL 3.0 CUDA")
    return SimpleNamespace(index=0, info=info, cl_device=SimpleNamespace(platform=platform))


@pytest.fixture
def applied_calls(monkeypatch):
    calls = []
    monkeypatch.setattr(tuning, "clblast_identity", lambda: "libclblast.so.1.5.3 sha256:1")
    monkeypatch.setattr(tuning, "apply", lambda dev, parameters: calls.append(parameters))
    return calls


def test_persisted_parameters_are_applied_when_the_device_opens(tmp_path, applied_calls):
    dev = _fake_device()
    cache = tune_cache.open_cache(tuning.fingerprint(dev), base=tmp_path)
    tuning.persist(cache, tuning.fingerprint(dev), {"Xgemm": GOOD_XGEMM}, {"verdict": "tuned"})
    report = tuning.apply_persisted(dev, environ={}, cache_base=tmp_path)
    assert report["applied"] and report["kernels"] == ["Xgemm"] and applied_calls == [{"Xgemm": GOOD_XGEMM}]
    assert tuning.applied[0] == report
    off = tuning.apply_persisted(dev, environ={tuning.DISABLE_ENV: "0"}, cache_base=tmp_path)
    assert not off["applied"] and tuning.DISABLE_ENV in off["reason"] and len(applied_calls) == 1


def test_a_driver_change_stales_the_persisted_parameters(tmp_path, applied_calls):
    old = _fake_device(driver="550.0")
    cache = tune_cache.open_cache(tuning.fingerprint(old), base=tmp_path)
    tuning.persist(cache, tuning.fingerprint(old), {"Xgemm": GOOD_XGEMM}, {})
    report = tuning.apply_persisted(_fake_device(driver="570.1"), environ={}, cache_base=tmp_path)
    assert not report["applied"] and applied_calls == []
    assert "550.0" in report["reason"] and "570.1" in report["reason"]  # the staling message names the change
    assert list(tmp_path.glob(f"*/stale-*/{tuning.CACHE_FILE}"))


def test_no_cache_directory_is_made_when_nothing_was_tuned(tmp_path, applied_calls):
    report = tuning.apply_persisted(_fake_device(), environ={}, cache_base=tmp_path)
    assert not report["applied"] and "--pretune" in report["reason"] and list(tmp_path.iterdir()) == []


# the pre-tune's processes
def _fake_children(total_default=1.0, total_tuned=0.5):
    runs = []
    shape = {"m": 64, "n": 64, "k": 64, "trans_a": False, "trans_b": False, "batch": 1, "dtype": "float32", "calls": 2}

    def child(env, arguments, module=None, timeout_s=None):
        runs.append((env, arguments))
        verb = arguments[0]
        if verb == "step":
            after = not env
            return {"median_step_s": 0.5 if after else 1.0, "step_s": [3.0, 1.0], "shapes": [shape],
                    "clblast": {"applied": after}}
        if verb == "tune":
            return {"chosen": {"Xgemm": GOOD_XGEMM}, "noise": 0.02, "fingerprint": FINGERPRINT, "stages": [],
                    "method": {"gemm_rtol": 1e-3}}
        total = total_tuned if "--parameters" in arguments else total_default
        row = {"label": "64x64x64 NN float32", "shape": shape, "median_s": total / 2, "gflops": 1 / total,
               "relative_iqr": 0.01}
        return {"rows": [row], "total_s": total, "worst_rel_diff": 0.0}

    return runs, child


def test_pretune_records_tunes_confirms_persists_and_measures_the_step_again(tmp_path):
    runs, child = _fake_children()
    workloads = [{"model": "resnet18", "mode": "train", "batch": 2, "size": 32}]
    result = run_ocl_pretune(workloads, budget_s=30, cache_base=tmp_path, run_child=child,
                             extra_shapes=[{"m": 8192, "n": 8192, "k": 8192}, {"m": 64, "n": 64, "k": 64}])
    verbs = [arguments[0] for _, arguments in runs]
    assert verbs == ["step", "tune", "measure", "measure", "step"]
    assert all(env == DEFAULTS_ENV for env, _ in runs[:4]) and runs[4][0] == {}  # after: the cache applies
    assert "--record" in runs[0][1] and "--record" not in runs[4][1]
    assert result["verdict"] == "tuned" and result["workloads"][0]["step_speedup"] == 2.0
    assert result["gemm"][0]["speedup"] == 2.0 and len(result["shapes"]) == 2
    assert result["shapes"][0]["calls"] == 3  # the step's 2 calls of 64x64x64 and the extra one
    record = json.loads(open(result["persisted"]).read())
    assert record["parameters"] == {"Xgemm": GOOD_XGEMM} and record["fingerprint"] == FINGERPRINT


def test_every_candidate_has_a_label_of_its_own():
    limits = {"local_memory_bytes": 49152, "max_work_group_size": 1024}
    for kernel in ("Xgemm", "XgemmDirect"):
        labels = [label for label, _ in tuning.candidates(kernel, vendor="NVIDIA", limits=limits, count=400)]
        assert len(labels) == len(set(labels)) > 100


def test_pretune_restarts_a_search_whose_candidate_broke_the_queue_without_it(tmp_path):
    runs, child = _fake_children()

    def losing_once(env, arguments, module=None, timeout_s=None):
        if arguments[0] == "tune" and "--exclude" not in arguments:
            runs.append((env, arguments))
            return {"error": f"{lost} broke the device's queue", "lost_on": lost}
        return child(env, arguments, module, timeout_s)

    lost = "Xgemm:CLBlast database: AMD Radeon (radeonsi, polaris10, ACO, D"  # labels may hold commas
    result = run_ocl_pretune([{"model": "resnet18"}], budget_s=60, cache_base=tmp_path, run_child=losing_once)
    tunes = [arguments for _, arguments in runs if arguments[0] == "tune"]
    assert len(tunes) == 2 and json.loads(tunes[1][tunes[1].index("--exclude") + 1]) == [lost]
    assert result["verdict"] == "tuned" and any(f"{lost} broke" in note for note in result["notes"])


def test_pretune_persists_clblasts_own_when_fresh_processes_do_not_confirm(tmp_path):
    runs, child = _fake_children(total_default=1.0, total_tuned=0.99)
    result = run_ocl_pretune([{"model": "resnet18"}], cache_base=tmp_path, run_child=child)
    assert result["verdict"] == "not-confirmed"
    assert json.loads(open(result["persisted"]).read())["parameters"] == {}


@pytest.mark.parametrize("argv, message", [
    (["tune", "resnet18", "--pretune", "--device", "ocl:x"], "use ocl or ocl:N"),
    (["tune", "resnet18", "--pretune", "--device", "ocl:99"], "ocl:99"),
    (["tune", "resnet5O", "--pretune", "--device", "ocl"], "did you mean 'resnet50'"),
    (["tune", "resnet18", "--pretune", "--device", "ocl", "--budget", "0"], "must be > 0"),
])
def test_ocl_pretune_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    import fade.cli as cli

    assert cli.main(argv) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
