"""Decide a GPU's dense peak TFLOP/s and memory bandwidth from the sourced tables data/archs.toml and data/gpus.toml.

A device is looked up by runtime name, PCI device id and physical CU/SM count. A table row wins; a device
whose SKU is not in the table gets a computed peak: units x FLOP/clk/unit (its arch row) x clock. Every
number carries the citation it came from. Pure Python: no torch, no `fade.collect`.
"""

from __future__ import annotations

import difflib
import functools
import importlib.resources
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

from fade.errors import FadeUsageError

DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8")
VENDORS = ("amd", "nvidia")
FORMULA_TOLERANCE = 0.03  # vendor figures carry ~3 significant digits; a larger gap means another clock or rate
# A laptop part shares its desktop sibling's name but has fewer SMs and lower clocks: a row only matches
# a name with one of these words when the row's own match string contains it too.
VARIANT_WORDS = ("laptop", "mobile", "max-q")


class SpecError(FadeUsageError, ValueError):
    """A spec table row is malformed. The message names the file, the row and the fix."""


# Rows are shared by every caller (the tables are parsed once): treat their dicts as read-only.
# Peaks are built fresh per call. Plain dicts keep all three copyable and JSON-ready.


@dataclass(frozen=True)
class ArchSpec:
    arch: str  # "gfx1030", "sm_90"
    vendor: str  # "amd" | "nvidia"
    family: str  # "RDNA2", "CDNA3", "Hopper", ...
    wave_size: int  # 64 on GCN/CDNA, 32 on RDNA and NVIDIA
    cus_per_runtime_unit: int  # physical CUs per multi_processor_count unit: 2 on RDNA in WGP mode
    flops_per_clock_per_unit: Mapping[str, float]  # dtype -> dense FLOP/clk per physical CU or SM
    hsa_override: str | None  # HSA_OVERRIDE_GFX_VERSION commonly used for this arch, "10.3.0"
    override_danger: str | None  # why that override can hurt on this arch
    igpu: bool  # arch exists only as an integrated GPU
    notes: str
    source: str


@dataclass(frozen=True)
class GpuSpec:
    name: str  # marketing name
    match: tuple[str, ...]  # substrings of runtime names (torch, rocminfo, nvidia-smi) that identify this SKU
    pci_device_ids: tuple[str, ...]  # "0x73bf"; several SKUs may share one
    arch: str
    compute_units: int  # physical CUs / SMs per torch device
    boost_mhz: float
    memory_gb: float | None  # None for integrated GPUs (shared system RAM)
    memory_bandwidth_gbs: float | None
    peak_tflops: Mapping[str, float]  # dtype -> dense TFLOP/s per torch device
    sources: Mapping[str, str]  # field name -> citation
    notes: str


@dataclass(frozen=True)
class Peaks:
    tflops: Mapping[str, float]  # dtype -> dense TFLOP/s
    bandwidth_gbs: float | None  # None when computed: bandwidth has no per-arch formula
    basis: str  # "table" or "computed"
    explanation: str  # "table row 'AMD Radeon RX 6800 XT'" or "computed: 72 CUs x ..."
    source: str  # citation(s) behind the numbers


# ---------------------------------------------------------------- loading

_ARCH_KEYS = {
    "arch": str, "vendor": str, "family": str, "wave_size": int, "cus_per_runtime_unit": int,
    "flops_per_clock_per_unit": dict, "hsa_override": str, "override_danger": str, "igpu": bool,
    "notes": str, "source": str,
}
_ARCH_REQUIRED = ("arch", "vendor", "family", "wave_size", "cus_per_runtime_unit", "flops_per_clock_per_unit", "source")
_GPU_KEYS = {
    "name": str, "match": list, "pci_device_ids": list, "arch": str, "compute_units": int, "boost_mhz": (int, float),
    "memory_gb": (int, float), "memory_bandwidth_gbs": (int, float), "peak_tflops": dict, "sources": dict, "notes": str,
}
_GPU_REQUIRED = ("name", "match", "arch", "compute_units", "boost_mhz", "peak_tflops", "sources")
_GPU_NUMERIC = ("compute_units", "boost_mhz", "memory_gb", "memory_bandwidth_gbs", "peak_tflops")
_PCI_ID = re.compile(r"^0x[0-9a-f]{4}$")
_OVERRIDE = re.compile(r"^\d+\.\d+\.\d+$")


def _default_path(filename: str):
    return importlib.resources.files("fade").joinpath("data").joinpath(filename)  # one arg per call on 3.9


def _read_rows(path, table: str) -> tuple[str, list[dict]]:
    where = str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{where}: not valid TOML: {exc}") from exc
    rows = data.get(table)
    if not isinstance(rows, list):
        raise SpecError(f"{where}: no [[{table}]] rows; each row starts with a [[{table}]] header")
    return where, rows


def _suggest(word: str, allowed) -> str:
    close = difflib.get_close_matches(word, list(allowed), n=1)
    return f"; did you mean {close[0]!r}?" if close else f"; allowed: {', '.join(allowed)}"


def _check_keys(row: dict, allowed: dict, required: Sequence[str], fail) -> None:
    for key in row:
        if key not in allowed:
            fail(f"unknown key {key!r}" + _suggest(key, allowed))
    for key in required:
        if key not in row or row[key] in ("", [], {}):
            fail(f"missing {key!r}" + ("; add source = \"<URL or repo path>, read <date>\"" if key == "source" else ""))
    for key, value in row.items():
        if isinstance(value, bool) and allowed[key] is not bool or not isinstance(value, allowed[key]):
            fail(f"{key!r} has the wrong type ({type(value).__name__})")


def _check_dtype_table(table: dict, key: str, fail) -> None:
    for dtype, value in table.items():
        if dtype not in DTYPES:
            fail(f"{key}: unknown dtype {dtype!r}" + _suggest(dtype, DTYPES))
        _check_positive(value, f"{key}.{dtype}", fail)


def _check_positive(value, label: str, fail) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        fail(f"{label} must be a positive number, got {value!r}")


def _failer(where: str, table: str, index: int, row: dict, key: str):
    label = row.get(key) if isinstance(row, dict) else None

    def fail(message: str):
        raise SpecError(f"{where}: [[{table}]] row {index}" + (f" ({label!r})" if label else "") + f": {message}")

    return fail


def _arch_from_row(row: dict, fail) -> ArchSpec:
    _check_keys(row, _ARCH_KEYS, _ARCH_REQUIRED, fail)
    if row["vendor"] not in VENDORS:
        fail(f"vendor must be one of {', '.join(VENDORS)}, got {row['vendor']!r}")
    if row["wave_size"] not in (32, 64):
        fail(f"wave_size must be 32 or 64, got {row['wave_size']!r}")
    _check_positive(row["cus_per_runtime_unit"], "cus_per_runtime_unit", fail)
    _check_dtype_table(row["flops_per_clock_per_unit"], "flops_per_clock_per_unit", fail)
    if "hsa_override" in row and not _OVERRIDE.match(row["hsa_override"]):
        fail(f"hsa_override must look like '10.3.0', got {row['hsa_override']!r}")
    return ArchSpec(
        arch=row["arch"], vendor=row["vendor"], family=row["family"], wave_size=row["wave_size"],
        cus_per_runtime_unit=row["cus_per_runtime_unit"],
        flops_per_clock_per_unit=dict(row["flops_per_clock_per_unit"]),
        hsa_override=row.get("hsa_override"), override_danger=row.get("override_danger"),
        igpu=row.get("igpu", False), notes=row.get("notes", ""), source=row["source"],
    )


def _gpu_from_row(row: dict, fail) -> GpuSpec:
    _check_keys(row, _GPU_KEYS, _GPU_REQUIRED, fail)
    if not all(isinstance(m, str) and m.strip() for m in row["match"]):
        fail("match must be a list of non-empty strings")
    for pci in row.get("pci_device_ids", []):
        if not isinstance(pci, str) or not _PCI_ID.match(pci):
            fail(f"pci_device_ids entries must look like '0x73bf' (lower-case hex), got {pci!r}")
    for key in ("compute_units", "boost_mhz", "memory_gb", "memory_bandwidth_gbs"):
        if key in row:
            _check_positive(row[key], key, fail)
    _check_dtype_table(row["peak_tflops"], "peak_tflops", fail)
    sources = row["sources"]
    for key in _GPU_NUMERIC:
        if key in row and not (isinstance(sources.get(key), str) and sources[key].strip()):
            fail(f"no citation for {key!r}; add it under [gpu.sources] as {key} = \"<source>, read <date>\"")
    return GpuSpec(
        name=row["name"], match=tuple(row["match"]), pci_device_ids=tuple(row.get("pci_device_ids", ())),
        arch=row["arch"], compute_units=row["compute_units"], boost_mhz=row["boost_mhz"],
        memory_gb=row.get("memory_gb"), memory_bandwidth_gbs=row.get("memory_bandwidth_gbs"),
        peak_tflops=dict(row["peak_tflops"]), sources=dict(sources),
        notes=row.get("notes", ""),
    )


def _load_table(path, table: str, key: str, parse) -> list:
    where, rows = _read_rows(path, table)
    specs, seen = [], {}
    for index, row in enumerate(rows, start=1):
        fail = _failer(where, table, index, row, key)
        spec = parse(row, fail)
        identity = getattr(spec, key)
        if identity in seen:
            fail(f"duplicate {key} {identity!r} (first defined in row {seen[identity]})")
        seen[identity] = index
        specs.append(spec)
    return specs


def _cache_key(path: str | Path | None) -> tuple | None:
    """None for the bundled file; else (path, mtime, size), so an edited user file is parsed again."""
    if path is None:
        return None
    stat = Path(path).stat()
    return (str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _load_archs_cached(key: tuple | None) -> MappingProxyType:
    path = Path(key[0]) if key else _default_path("archs.toml")
    specs = _load_table(path, "arch", "arch", _arch_from_row)
    return MappingProxyType({spec.arch: spec for spec in specs})


@functools.lru_cache(maxsize=8)
def _load_gpus_cached(key: tuple | None) -> tuple[GpuSpec, ...]:
    path = Path(key[0]) if key else _default_path("gpus.toml")
    return tuple(_load_table(path, "gpu", "name", _gpu_from_row))


def load_archs(path: str | Path | None = None) -> dict[str, ArchSpec]:
    """Arch rows keyed by arch name, from `path` or the bundled archs.toml. Parsed once per path and version."""
    return dict(_load_archs_cached(_cache_key(path)))


def load_gpus(path: str | Path | None = None) -> list[GpuSpec]:
    """GPU rows in file order, from `path` or the bundled gpus.toml. Parsed once per path and version."""
    return list(_load_gpus_cached(_cache_key(path)))


# ---------------------------------------------------------------- lookup

def normalize_arch(arch: str) -> str:
    """'gfx90a:sramecc+:xnack-' -> 'gfx90a'; 'sm90' / 'SM_90' -> 'sm_90'."""
    base = arch.strip().lower().split(":")[0]
    nvidia = re.fullmatch(r"sm_?(\d+)", base)
    return f"sm_{nvidia.group(1)}" if nvidia else base


def normalize_pci_id(pci_device_id: str | int) -> str:
    """'73BF', '0x73BF' or 0x73bf -> '0x73bf'."""
    if isinstance(pci_device_id, int):
        return f"0x{pci_device_id:04x}"
    text = pci_device_id.strip().lower()
    return text if text.startswith("0x") else f"0x{text}"


def arch_spec(arch: str, *, archs: Mapping[str, ArchSpec] | None = None) -> ArchSpec | None:
    """The arch row for 'gfx1030', 'gfx90a:sramecc+:xnack-', 'sm_90' or 'sm90'; None if unknown."""
    return (archs if archs is not None else _load_archs_cached(None)).get(normalize_arch(arch))


def _match_length(pattern: str, name: str) -> int:
    """Length of `pattern` if it occurs in `name` at word boundaries (case-insensitive), else 0.

    Boundaries keep 'NVIDIA A10' out of 'NVIDIA A100' and 'Radeon RX 7600' out of 'Radeon RX 7600M'.
    """
    pattern_lower, name_lower = pattern.lower(), name.lower()
    if any(word in name_lower and word not in pattern_lower for word in VARIANT_WORDS):
        return 0
    left = r"(?<![0-9a-z])" if pattern_lower[0].isalnum() else ""
    right = r"(?![0-9a-z])" if pattern_lower[-1].isalnum() else ""
    return len(pattern) if re.search(left + re.escape(pattern_lower) + right, name_lower) else 0


def _score(gpu: GpuSpec, name: str | None, pci: str | None) -> tuple[int, int]:
    name_length = max((_match_length(m, name) for m in gpu.match), default=0) if name else 0
    return (1 if pci and pci in gpu.pci_device_ids else 0, name_length)


def find_gpu(
    name: str | None,
    *,
    arch: str | None = None,
    pci_device_id: str | None = None,
    compute_units: int | None = None,
    gpus: Sequence[GpuSpec] | None = None,
) -> GpuSpec | None:
    """The table row for a device, or None when no row fits or two rows fit equally well.

    A PCI id match outranks any name match; among name matches the longest `match` string wins, so
    'Radeon RX 6800' does not take an 'RX 6800 XT'. `arch` (the real chip, not an overridden one) and
    `compute_units` (physical CUs/SMs: multi_processor_count x cus_per_runtime_unit on RDNA) must
    agree with the row, so a cut-down part sharing a name, or an MI300X partition, gets no row.
    """
    pci = normalize_pci_id(pci_device_id) if pci_device_id else None
    wanted_arch = normalize_arch(arch) if arch else None
    scored = []
    for gpu in gpus if gpus is not None else _load_gpus_cached(None):
        score = _score(gpu, name, pci)
        if score == (0, 0):
            continue
        if wanted_arch and gpu.arch != wanted_arch:
            continue
        if compute_units is not None and gpu.compute_units != compute_units:
            continue
        scored.append((score, gpu))
    if not scored:
        return None
    best = max(score for score, _ in scored)
    winners = [gpu for score, gpu in scored if score == best]
    return winners[0] if len(winners) == 1 else None


def computed_tflops(spec: ArchSpec, units: int, clock_mhz: float) -> dict[str, float]:
    """units x FLOP/clk/unit x MHz, in TFLOP/s, for every dtype the arch has."""
    return {dtype: units * fpc * clock_mhz / 1e6 for dtype, fpc in spec.flops_per_clock_per_unit.items()}


def _table_peaks(gpu: GpuSpec) -> Peaks:
    source = gpu.sources["peak_tflops"]
    if gpu.memory_bandwidth_gbs is not None:
        source += f" | bandwidth: {gpu.sources['memory_bandwidth_gbs']}"
    return Peaks(
        tflops=dict(gpu.peak_tflops), bandwidth_gbs=gpu.memory_bandwidth_gbs,
        basis="table", explanation=f"table row {gpu.name!r}", source=source,
    )


def _computed_peaks(spec: ArchSpec, units: int, clock_mhz: float) -> Peaks:
    unit_word = "SMs" if spec.vendor == "nvidia" else "CUs"
    rates = ", ".join(f"{dtype} {fpc:g}" for dtype, fpc in spec.flops_per_clock_per_unit.items())
    return Peaks(
        tflops=computed_tflops(spec, units, clock_mhz), bandwidth_gbs=None, basis="computed",
        explanation=(f"computed: {units} {unit_word} x FLOP/clk/unit x {clock_mhz:g} MHz "
                     f"(arch {spec.arch}; SKU not in table; FLOP/clk: {rates})"),
        source=f"archs.toml {spec.arch}: {spec.source}",
    )


def peaks_for(
    name: str | None,
    *,
    arch: str | None = None,
    pci_device_id: str | None = None,
    compute_units: int | None = None,
    clock_mhz: float | None = None,
    gpus: Sequence[GpuSpec] | None = None,
    archs: Mapping[str, ArchSpec] | None = None,
) -> Peaks | None:
    """Peaks from the table row for this device, else computed from its arch row.

    Computing needs the arch, the physical `compute_units` and `clock_mhz` (on AMD, KFD sysfs
    max_engine_clk_fcompute); without them, or for an unknown arch, the answer is None.
    """
    gpu = find_gpu(name, arch=arch, pci_device_id=pci_device_id, compute_units=compute_units, gpus=gpus)
    if gpu is not None:
        return _table_peaks(gpu)
    spec = arch_spec(arch, archs=archs) if arch else None
    if spec is None or not compute_units or not clock_mhz:
        return None
    return _computed_peaks(spec, compute_units, clock_mhz)


# ---------------------------------------------------------------- whole-table checks

def formula_mismatches(
    gpu: GpuSpec, spec: ArchSpec, tolerance: float = FORMULA_TOLERANCE
) -> dict[str, tuple[float, float]]:
    """dtype -> (table TFLOP/s, formula TFLOP/s) where they differ by more than `tolerance`."""
    formula = computed_tflops(spec, gpu.compute_units, gpu.boost_mhz)
    return {
        dtype: (table, formula[dtype])
        for dtype, table in gpu.peak_tflops.items()
        if dtype in formula and abs(table - formula[dtype]) > tolerance * formula[dtype]
    }


def validate_tables(archs_path: str | Path | None = None, gpus_path: str | Path | None = None) -> list[str]:
    """Cross-check the two tables; return one line per problem (empty when clean).

    Row-level errors raise SpecError while loading. Beyond those: every GPU's arch exists, claims no
    dtype its arch lacks, and either agrees with units x FLOP/clk x boost MHz within FORMULA_TOLERANCE
    or names each disagreeing dtype in its notes (with the reason).
    """
    archs = load_archs(archs_path)
    problems = []
    for gpu in load_gpus(gpus_path):
        spec = archs.get(gpu.arch)
        if spec is None:
            problems.append(f"{gpu.name!r}: arch {gpu.arch!r} is not in archs.toml")
            continue
        extra = set(gpu.peak_tflops) - set(spec.flops_per_clock_per_unit)
        if extra:
            problems.append(f"{gpu.name!r}: peak_tflops has {sorted(extra)} but arch {gpu.arch} has no such path")
        for dtype, (table, formula) in formula_mismatches(gpu, spec).items():
            if dtype not in gpu.notes:
                problems.append(
                    f"{gpu.name!r}: {dtype} {table:g} TF disagrees with the formula ({formula:.1f} TF) "
                    f"by more than {FORMULA_TOLERANCE:.0%}; say why in notes, naming {dtype}"
                )
    return problems
