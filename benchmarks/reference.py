"""Load benchmarks/reference.toml: independent figures a harness shows beside its own, for the device it ran on.

    from reference import figures_for
    figures_for("models_matrix", "NVIDIA H100 80GB HBM3")  # -> {"resnet50 train fp32": Figure(...), ...}
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

REFERENCE_FILE = Path(__file__).resolve().parent / "reference.toml"
RUN_FIELDS = ("machine", "date", "command", "source")
FIGURE_FIELDS = ("harness", "run", "device_contains", "case", "low", "high", "unit")


@dataclass(frozen=True)
class Figure:
    case: str
    low: float
    high: float
    unit: str
    run: str
    machine: str
    date: str
    command: str
    source: str


def load_reference(path: Path = REFERENCE_FILE) -> list[tuple[str, str, Figure]]:
    """-> [(harness, device_contains, Figure)]; raises ValueError naming the row that lacks a field or run."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    runs = data.get("run", {})
    for name, run in runs.items():
        missing = [key for key in RUN_FIELDS if not run.get(key)]
        if missing:
            raise ValueError(f"{path.name}: run {name} lacks {missing}")
    rows = []
    for index, row in enumerate(data.get("figure", [])):
        missing = [key for key in FIGURE_FIELDS if row.get(key) in (None, "")]
        if missing:
            raise ValueError(f"{path.name}: figure #{index + 1} lacks {missing}")
        if row["run"] not in runs:
            raise ValueError(f"{path.name}: figure #{index + 1} names unknown run {row['run']!r}")
        if row["low"] > row["high"]:
            raise ValueError(f"{path.name}: figure #{index + 1} has low > high")
        run = runs[row["run"]]
        rows.append((row["harness"], row["device_contains"],
                     Figure(row["case"], row["low"], row["high"], row["unit"], row["run"],
                            **{key: run[key] for key in RUN_FIELDS})))
    return rows


def figures_for(harness: str, device_name: str | None, path: Path = REFERENCE_FILE) -> dict[str, Figure]:
    """The figures of `harness` that apply to a device of this name (none when the name is unknown)."""
    if not device_name:
        return {}
    return {figure.case: figure for name, contains, figure in load_reference(path)
            if name == harness and contains.lower() in device_name.lower()}
