"""The dist suite's pure parts: nccl-tests' bus factors, buffer sizing, the size flag, the case plan, the
launcher's variables, the env FADE sets, and the process-tree walk; no process group needed."""

import pytest

from fade.errors import FadeUsageError
from fade.measure.suites.dist.collectives import bus_bandwidth, element_count
from fade.measure.suites.dist.launch import CUDA_ENV, descendants, dist_environment, rank_environment
from fade.measure.suites.dist.suite import build_request, parse_size, plan_cases, size_label, world_sizes


@pytest.mark.parametrize("collective, world, factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75), ("all_gather", 4, 0.75),
    ("reduce_scatter", 8, 0.875), ("all_to_all", 2, 0.5), ("broadcast", 8, 1.0), ("send_recv", 4, 1.0),
])  # fmt: skip
def test_busbw_uses_nccl_tests_factors(collective, world, factor):
    assert bus_bandwidth(collective, 100.0, world) == pytest.approx(100.0 * factor)


def test_chunked_collectives_round_the_buffer_to_whole_chunks_per_rank():
    assert element_count("all_reduce", 8, 4, 4) == 2  # no chunks: 8 B of fp32 is 2 elements
    assert element_count("all_gather", 8, 4, 4) == 4  # at least one element per rank
    assert element_count("reduce_scatter", 4096, 2, 3) == 2046  # 2048 rounded down to a multiple of 3


def test_sizes_parse_in_binary_units_and_label_back():
    assert [parse_size(text) for text in ("8", "4K", "64MiB", "1G")] == [8, 4096, 64 * 2**20, 2**30]
    assert [size_label(size) for size in (8, 4096, 2**29, 2**30, 1000)] == ["8B", "4KiB", "512MiB", "1GiB", "1000B"]
    with pytest.raises(FadeUsageError, match="between 1 B and 16GiB"):
        parse_size("64G")


def test_scaling_compares_powers_of_two_and_the_full_count():
    assert world_sizes(1) == [1] and world_sizes(4) == [1, 2, 4] and world_sizes(6) == [1, 2, 4, 6]


def test_the_full_plan_spans_8_bytes_to_1_gib_with_the_anchor_sizes():
    request = build_request("cpu", out="x.jsonl", run_id="r")
    ids = [case.case_id for case in plan_cases(request, 2)]
    assert ids[0] == "dist/all_reduce/fp32/8B/x2"
    assert {"dist/all_reduce/fp32/8MiB/x2", "dist/all_reduce/fp32/64MiB/x2", "dist/all_reduce/fp32/512MiB/x2",
            "dist/all_reduce/fp32/1GiB/x2"} <= set(ids)  # fmt: skip
    assert len(ids) == len(set(ids))


def test_torchrun_variables_make_this_process_a_rank():
    env = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}
    assert rank_environment(env) == env
    assert rank_environment({}) is None
    assert rank_environment({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}) is None  # one task: FADE launches itself


def test_slurm_tasks_are_ranks_and_need_a_rendezvous_address():
    slurm = {"SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1"}
    with pytest.raises(FadeUsageError, match="MASTER_ADDR and MASTER_PORT are not"):
        rank_environment(slurm)
    found = rank_environment({**slurm, "MASTER_ADDR": "node1", "MASTER_PORT": "29500"})
    assert (found["RANK"], found["WORLD_SIZE"], found["LOCAL_RANK"]) == ("3", "8", "1")


def test_multicast_is_switched_off_for_cuda_and_the_users_value_wins():
    environ = {"NCCL_NVLS_ENABLE": "1"}
    changes = {change.name: change for change in dist_environment(environ, "cuda")}
    assert set(changes) == {name for name, _, _ in CUDA_ENV}
    assert changes["NCCL_NVLS_ENABLE"].status == "kept-user-value" and environ["NCCL_NVLS_ENABLE"] == "1"
    assert environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and environ["NVSHMEM_DISABLE_NVLS"] == "1"
    assert dist_environment({}, "cpu") == []


def test_the_process_tree_walk_finds_grandchildren(tmp_path):
    """torchrun puts each rank in a session of its own: the kill finds them through /proc's parent field."""
    for pid, parent in ((10, 1), (11, 10), (12, 11), (13, 11), (20, 1)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (py thon) S {parent} 0 0\n")
    assert sorted(descendants(10, proc=str(tmp_path))) == [11, 12, 13]


def test_the_fixed_timing_settings_make_every_rank_call_the_same_number_of_times():
    """Every rank must issue the same collectives: with the dist settings, timing.measure calls the block
    exactly warm-up + one sizing + samples times, whatever the clock says (an adaptive count would deadlock)."""
    import itertools

    from fade.measure.suites.dist.collectives import BLOCK_PROBE, fixed_timing
    from fade.measure.timing import measure

    for settings, expected in ((BLOCK_PROBE, 2 + 1 + 3), (fixed_timing(5, 20), 5 + 1 + 20)):
        for step in (1e-7, 0.3):  # a fast and a slow "collective" on an injected clock
            ticks = itertools.count()
            calls = []
            measure(lambda: calls.append(1), device="cpu", clock=lambda: next(ticks) * step, **settings)
            assert len(calls) == expected


def test_a_collective_s_peak_is_its_slowest_link_not_the_memory_bandwidth():
    from fade.measure.case import CaseResult
    from fade.results import peak_for

    link = {"kind": "nvlink", "detail": "NV18", "peak_gbs": 450.0, "spec": "nvlink4", "source": "NVIDIA H100 whitepaper"}
    result = CaseResult(314.0, "GB/s", "busbw = ...", peak_kind="link", extra={"link": link})
    peak = peak_for(result, {"bandwidth_gbs": 4800.0, "tflops": {}})  # the GPU's HBM peak must not be used
    assert (peak["value"], round(peak["pct_of_peak"], 1), peak["source"]) == (450.0, 69.8, "NVIDIA H100 whitepaper")
    assert peak_for(CaseResult(1.0, "GB/s", "x"), None) is None  # no link known: no peak
