"""Every tune test gets its own XDG cache home: tuning files may point the compilers' caches only inside this user's
FADE tune cache (tuning_file.check_env), and no test reads or writes the real one."""

import pytest


@pytest.fixture(autouse=True)
def own_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
