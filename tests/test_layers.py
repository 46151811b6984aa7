"""The layer contract (tests/layers.py) holds for src/fade, and the checker catches each kind of violation."""

from pathlib import Path

import pytest

from tests.layers import check_tree

SRC = Path(__file__).resolve().parents[1] / "src"


def test_the_package_keeps_its_layers():
    violations = check_tree(SRC)
    assert not violations, "layer contract broken:\n" + "\n".join(map(str, violations))


def _plant(tmp_path, files: dict) -> Path:
    for name, text in {"fade/__init__.py": "__version__ = '0'\n", **files}.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    "files, expected",
    [
        ({"fade/analyze/x.py": "def f():\n    import torch\n"}, "fade.analyze imports torch"),
        ({"fade/report/x.py": "from fade.measure.timing import measure\n", "fade/measure/timing.py": ""},
         "fade.report imports fade.measure.timing"),
        ({"fade/measure/x.py": "from fade.report import console\n", "fade/report/console.py": ""},
         "fade.measure imports fade.report"),
        ({"fade/hostwork/x.py": "import fade.cli\n", "fade/cli/__init__.py": ""}, "fade.hostwork imports fade.cli"),
        ({"fade/collect/x.py": "from fade import device_truth\n"}, "imports the facade: fade.device_truth"),
        ({"fade/collect/x.py": "import fade\nfade.tune()\n"}, "uses the facade: fade.tune"),
        ({"fade/act/x.py": "from fade.measure.y import _helper\n", "fade/measure/y.py": ""},
         "imports fade.measure.y._helper, a private name"),
        ({"fade/act/x.py": "from fade.measure import y\ny._helper()\n", "fade/measure/y.py": ""},
         "uses fade.measure.y._helper, a private name"),
        ({"fade/measure/x.py": "def f():\n    print('hi')\n"}, "calls print()"),
        # the back-edges issue 26 removed: each fails again if planted
        ({"fade/measure/step/config.py": "def f():\n    from fade.act.tune import knobs\n",
          "fade/act/tune/__init__.py": ""}, "fade.measure imports fade.act.tune"),
        ({"fade/measure/session.py": "def f():\n    from fade.act.patches import device_truth\n",
          "fade/act/patches.py": ""}, "fade.measure imports fade.act.patches"),
        ({"fade/measure/suites/dist/launch.py": "def f():\n    from fade.act.patches import EnvChange\n",
          "fade/act/patches.py": ""}, "fade.measure imports fade.act.patches"),
        ({"fade/collect/snapshot.py": "from fade.analyze.devices import KFD_PROPERTY_MAX\n",
          "fade/analyze/devices.py": ""}, "fade.collect imports fade.analyze.devices"),
        ({"fade/results.py": "from fade import __version__\n"}, "imports the facade: fade.__version__"),
        ({"fade/report/html.py": "import fade\nv = fade.__version__\n"}, "uses the facade: fade.__version__"),
        ({"fade/version.py": "from fade.analyze import specs\n", "fade/analyze/specs.py": ""},
         "fade.version imports fade.analyze"),
        # the OpenCL device sits below the tuner, the measurements, the renderers and the CLI
        ({"fade/ocl/convolution.py": "def f():\n    from fade.act.tune import cache\n",
          "fade/act/tune/cache.py": ""}, "fade.ocl imports fade.act.tune"),
        ({"fade/ocl/tuning.py": "from fade.act.patches import x\n", "fade/act/patches.py": ""},
         "fade.ocl imports fade.act.patches"),
        # the exception fade.device_cache replaced: ocl reads the tuner's cache without importing the tuner
        ({"fade/ocl/tuning.py": "def f():\n    from fade.act.tune import cache as tune_cache\n",
          "fade/act/tune/cache.py": ""}, "fade.ocl imports fade.act.tune"),
        ({"fade/device_cache.py": "from fade.act.tune import device\n", "fade/act/tune/device.py": ""},
         "fade.device_cache imports fade.act.tune"),
        ({"fade/device_cache.py": "import torch\n"}, "fade.device_cache imports torch"),
        ({"fade/ocl/dispatch.py": "from fade.report import console\n", "fade/report/console.py": ""},
         "fade.ocl imports fade.report"),
        ({"fade/ocl/runtime.py": "import fade.cli\n", "fade/cli/__init__.py": ""}, "fade.ocl imports fade.cli"),
        ({"fade/ocl/memory.py": "from fade.measure import timing\n", "fade/measure/timing.py": ""},
         "fade.ocl imports fade.measure"),
        ({"fade/ocl/pointwise.py": "import fade\nfade.tune()\n"}, "uses the facade: fade.tune"),
        ({"fade/ocl/gemm.py": "from fade.ocl.memory import _private\n", "fade/ocl/memory.py": ""},
         "imports fade.ocl.memory._private, a private name"),
    ],
)
def test_a_planted_violation_is_reported(tmp_path, files, expected):
    violations = [str(v) for v in check_tree(_plant(tmp_path, files))]
    assert any(expected in v for v in violations), violations


def test_the_version_is_read_from_fade_version_and_the_cli_may_use_the_facade(tmp_path):
    files = {
        "fade/version.py": "__version__ = '0'\n",
        "fade/results.py": "from fade.version import __version__\n",
        "fade/report/html.py": "import fade.version\nv = fade.version.__version__\n",
        "fade/cli/__init__.py": "import fade\nfrom fade import __version__\nprint(fade.tune, fade.__version__)\n",
    }
    assert check_tree(_plant(tmp_path, files)) == []
