"""The torch probe is reused only while everything it depends on is unchanged."""

import fade.collect.snapshot as snapshot_mod
from fade.collect import probe_cache
from fade.collect.snapshot import collect_snapshot


def _counting_probe(monkeypatch):
    calls = []

    def probe():
        calls.append(1)
        return {"version": "2.x", "hip": None, "cuda": None, "available": False, "device_count": 0,
                "arch_list": [], "devices": []}, None

    monkeypatch.setattr(snapshot_mod, "_torch_subprocess", probe)
    return calls


def test_second_collection_reuses_the_probe_and_says_so(tmp_path, monkeypatch):
    calls = _counting_probe(monkeypatch)
    environ = {"XDG_CACHE_HOME": str(tmp_path), "HOME": str(tmp_path)}
    first = collect_snapshot(environ=environ, run_tools=False, probe_cache=True)
    second = collect_snapshot(environ=environ, run_tools=False, probe_cache=True)
    assert len(calls) == 1
    assert first["probe"] == {"torch": "live"} and second["probe"]["torch"] == "cached"
    assert second["torch"] == first["torch"]


def test_a_changed_gpu_variable_invalidates_the_probe(tmp_path, monkeypatch):
    calls = _counting_probe(monkeypatch)
    collect_snapshot(environ={"XDG_CACHE_HOME": str(tmp_path)}, run_tools=False, probe_cache=True)
    collect_snapshot(environ={"XDG_CACHE_HOME": str(tmp_path), "HIP_VISIBLE_DEVICES": "1"},
                     run_tools=False, probe_cache=True)
    assert len(calls) == 2


def test_an_expired_entry_is_not_used(tmp_path, monkeypatch):
    calls = _counting_probe(monkeypatch)
    environ = {"XDG_CACHE_HOME": str(tmp_path)}
    collect_snapshot(environ=environ, run_tools=False, probe_cache=True)
    monkeypatch.setattr(probe_cache, "MAX_AGE_S", -1)
    collect_snapshot(environ=environ, run_tools=False, probe_cache=True)
    assert len(calls) == 2


def test_without_the_cache_every_collection_probes(tmp_path, monkeypatch):
    calls = _counting_probe(monkeypatch)
    for _ in range(2):
        collect_snapshot(environ={"XDG_CACHE_HOME": str(tmp_path)}, run_tools=False)
    assert len(calls) == 2


def test_an_unwritable_cache_dir_is_silently_skipped(tmp_path, monkeypatch):
    calls = _counting_probe(monkeypatch)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    snap = collect_snapshot(environ={"XDG_CACHE_HOME": str(blocker)}, run_tools=False, probe_cache=True)
    assert snap["torch"]["version"] == "2.x" and len(calls) == 1
