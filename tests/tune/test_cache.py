"""The per-device tuning cache: atomic writes, two concurrent writers, stack invalidation, read-only fallback."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from fade.act.tune.cache import ENV_PATHS, open_cache

FINGERPRINT = {"backend": "rocm", "name": "AMD Instinct MI300X", "arch": "gfx942", "torch": "2.11.0", "hip": "6.4", "miopen": 30400, "driver": "6.10"}

WRITER = textwrap.dedent(
    """
    import sys
    from fade.act.tune.cache import open_cache
    base, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fingerprint = {"backend": "rocm", "name": "AMD Instinct MI300X", "arch": "gfx942", "torch": "2.11.0", "hip": "6.4", "miopen": 30400, "driver": "6.10"}
    cache = open_cache(fingerprint, base=base)
    journal = cache.journal("shared")
    for index in range(count):
        journal.append({"config": {"writer": name, "index": index}, "samples_s": [0.001]})
        cache.update_json("index.json", lambda data: {**data, f"{name}-{index}": index})
    """
)


def test_two_processes_writing_one_cache_lose_nothing(tmp_path):
    count = 40
    processes = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), name, str(count)])
        for name in ("a", "b")
    ]
    assert [process.wait(timeout=120) for process in processes] == [0, 0]
    cache = open_cache(FINGERPRINT, base=tmp_path)
    assert len(cache.journal("shared").load()) == 2 * count
    assert cache.journal("shared").torn_lines == 0
    index = json.loads((cache.root / "index.json").read_text())
    assert len(index) == 2 * count  # every read-modify-write kept the other writer's entries
    assert not [path for path in cache.root.iterdir() if path.name.endswith(".tmp")]


def test_a_stack_change_moves_stale_entries_aside_with_a_message(tmp_path):
    cache = open_cache(FINGERPRINT, base=tmp_path)
    env = cache.env()
    (cache.root / "miopen" / "db" / "gfx942.ufdb.txt").write_text("stale find results")
    cache.journal("resnet50-train-b64").append({"config": {"precision": "default"}})
    upgraded = {**FINGERPRINT, "torch": "2.13.0", "hip": "7.0"}
    again = open_cache(upgraded, base=tmp_path)
    assert again.root == cache.root  # same device, same directory
    assert len(again.messages) == 1
    assert "torch 2.11.0 -> 2.13.0" in again.messages[0] and "hip 6.4 -> 7.0" in again.messages[0]
    stale = [path for path in again.root.iterdir() if path.name.startswith("stale-")]
    assert len(stale) == 1
    assert (stale[0] / "miopen" / "db" / "gfx942.ufdb.txt").exists()
    assert again.journal("resnet50-train-b64").load() == {}
    assert json.loads((again.root / "stack.json").read_text())["torch"] == "2.13.0"
    assert set(env) == set(ENV_PATHS)


def test_the_same_stack_keeps_its_entries_silently(tmp_path):
    cache = open_cache(FINGERPRINT, base=tmp_path)
    cache.journal("x").append({"config": {"a": 1}})
    again = open_cache(dict(FINGERPRINT), base=tmp_path)
    assert again.messages == []
    assert len(again.journal("x").load()) == 1


def test_another_device_gets_another_directory(tmp_path):
    first = open_cache(FINGERPRINT, base=tmp_path)
    second = open_cache({**FINGERPRINT, "name": "AMD Radeon RX 7900 XTX", "arch": "gfx1100"}, base=tmp_path)
    assert first.root != second.root


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write a read-only directory")
def test_a_read_only_cache_falls_back_to_a_temporary_directory(tmp_path):
    base = tmp_path / "readonly"
    base.mkdir()
    base.chmod(0o500)
    try:
        cache = open_cache(FINGERPRINT, base=base)
    finally:
        base.chmod(0o700)
    assert cache.temporary
    assert not str(cache.root).startswith(str(base))
    assert "not writable" in cache.messages[0] and "will not persist" in cache.messages[0]
    cache.journal("x").append({"config": {"a": 1}})  # still usable


def test_default_base_honours_xdg_cache_home(tmp_path):
    cache = open_cache(FINGERPRINT, environ={"XDG_CACHE_HOME": str(tmp_path)})
    assert cache.root.parent == tmp_path / "fade" / "tune"


def test_a_cache_path_that_cannot_be_a_directory_falls_back(tmp_path):
    """A file where the cache directory should be: mkdir fails even for root."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    cache = open_cache(FINGERPRINT, base=blocker)
    assert cache.temporary and "not writable" in cache.messages[0]


def test_a_trial_with_a_diverged_loss_is_journaled_and_resumed(tmp_path):
    """A diverged candidate's loss is NaN; the journal writes strict JSON (null) so its own reader takes the line."""
    from fade.act.tune.search import Trial

    journal = open_cache(FINGERPRINT, base=tmp_path).journal("nan")
    trial = Trial({"precision": "amp-fp16"}, (0.01, 0.011), "ok", None,
                  {"mode": "train", "losses": [7.0, float("nan")], "grads_finite": False}, 64, 3.0)  # fmt: skip
    journal.append(trial.to_dict())
    loaded = journal.load()
    assert journal.torn_lines == 0 and len(loaded) == 1
    assert next(iter(loaded.values()))["numerics"]["losses"] == [7.0, None]
