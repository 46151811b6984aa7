"""The attention truth, pure: which SDPA backend a profiled call took and which kernels ran (data/kernels.toml),
why a fused backend was refused (data/attention.toml [[cause]]), the finding when the default choice ran math
or a slower backend than one that could run, and what AOTriton (ROCm) was built for (data/attention.toml
[[aotriton]]), the doctor's attention facts. No torch: fade.measure.attention collects, this module decides.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

from fade.analyze.kernels import classify_kernel
from fade.errors import FadeUsageError

BACKENDS = ("flash", "efficient", "cudnn", "math", "overrideable")
FUSED = ("flash", "efficient", "cudnn")
# a fused backend counts as faster than the default's choice only past this ratio AND outside both IQRs
SLOWER_RATIO = 1.10
EXPERIMENTAL_ENV = "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"
# c10/util/env.cpp check_env: these spellings are true, these false; anything else is neither (a warning)
ENV_TRUE = ("1", "ON", "YES", "TRUE", "Y")
ENV_FALSE = ("0", "OFF", "NO", "FALSE", "N")
ATTENTION_FACTS = ("aotriton_version", "aotriton_known", "aotriton_label", "sdpa_aotriton", "sdpa_aotriton_varies",
                   "aotriton_experimental_enabled", "aotriton_max_head_dim")


class AttentionTableError(FadeUsageError, ValueError):
    """A malformed attention.toml or [[sdpa_op]] row; the message names the file and the row."""


@dataclass(frozen=True)
class Cause:
    cause: str
    patterns: tuple
    fix: str
    source: str


@dataclass(frozen=True)
class AOTriton:
    version: str
    targets: frozenset
    experimental: frozenset
    max_head_dim: int
    max_head_dim_gfx11: Optional[int]
    source: str

    def head_dim_limit(self, arch: str) -> int:
        if arch.startswith("gfx11") and self.max_head_dim_gfx11:
            return self.max_head_dim_gfx11
        return self.max_head_dim


def _read(name: str) -> dict:
    text = importlib.resources.files("fade.data").joinpath(name).read_text(encoding="utf-8")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AttentionTableError(f"fade/data/{name}: not valid TOML: {exc}") from exc


def _need(row: dict, key: str, kind, where: str):
    value = row.get(key)
    if not isinstance(value, kind) or (hasattr(value, "__len__") and not value):
        raise AttentionTableError(f"{where}: needs a non-empty '{key}'")
    return value


@functools.lru_cache(maxsize=1)
def sdpa_ops() -> dict:
    """{aten op name: backend} from data/kernels.toml's [[sdpa_op]] rows."""
    table = {}
    for index, row in enumerate(_read("kernels.toml").get("sdpa_op") or [], 1):
        where = f"fade/data/kernels.toml: [[sdpa_op]] row {index}"
        backend = _need(row, "backend", str, where)
        if backend not in BACKENDS:
            raise AttentionTableError(f"{where}: backend {backend!r} is not one of {', '.join(BACKENDS)}")
        _need(row, "source", str, where)
        for op in _need(row, "ops", list, where):
            table[op] = backend
    return table


@functools.lru_cache(maxsize=1)
def causes() -> tuple:
    rows = []
    for index, row in enumerate(_read("attention.toml").get("cause") or [], 1):
        where = f"fade/data/attention.toml: [[cause]] row {index}"
        patterns = tuple(re.compile(p) for p in _need(row, "patterns", list, where))
        rows.append(Cause(_need(row, "cause", str, where), patterns, _need(row, "fix", str, where),
                          _need(row, "source", str, where)))  # fmt: skip
    return tuple(rows)


@functools.lru_cache(maxsize=1)
def aotriton_releases() -> tuple:
    rows = []
    for index, row in enumerate(_read("attention.toml").get("aotriton") or [], 1):
        where = f"fade/data/attention.toml: [[aotriton]] row {index}"
        rows.append(AOTriton(_need(row, "version", str, where), frozenset(_need(row, "targets", list, where)),
                             frozenset(row.get("experimental") or ()), _need(row, "max_head_dim", int, where),
                             row.get("max_head_dim_gfx11"), _need(row, "source", str, where)))  # fmt: skip
    return tuple(rows)


# -- one profiled call -------------------------------------------------------------------------------------

def backend_of_ops(op_names: Iterable[str]) -> Optional[str]:
    """The SDPA backend a call dispatched to, from the aten op names the profiler recorded (None: no SDPA op)."""
    table = sdpa_ops()
    found = [table[name] for name in op_names if name in table]
    for backend in ("cudnn", "flash", "efficient", "overrideable", "math"):  # an inner op names the fused one
        if backend in found:
            return backend
    return None


def classify_kernels(kernel_names: Sequence[str]) -> dict:
    """Device kernels of one SDPA call → {kernels: [{name, class, library}], attention_libraries, kernel_path}.

    kernel_path: "fused" when an attention-class kernel ran, "math" when only GEMM/softmax-like kernels ran
    (bmm + softmax is how the math backend runs), None when no kernel was recorded (the CPU)."""
    kernels, libraries = [], []
    classes = set()
    for name in kernel_names:
        kind = classify_kernel(name)
        kernels.append({"name": name, "class": kind.kernel_class, "library": kind.library})
        classes.add(kind.kernel_class)
        if kind.kernel_class == "attention" and kind.library not in libraries:
            libraries.append(kind.library)
    path = None
    if libraries:
        path = "fused"
    elif "gemm" in classes:
        path = "math"
    return {"kernels": kernels, "attention_libraries": libraries, "kernel_path": path}


def classify_run(op_names: Sequence[str], kernel_names: Sequence[str]) -> dict:
    """What ran: the backend by its aten op, by its kernels, and whether the two agree."""
    by_ops = backend_of_ops(op_names)
    kernels = classify_kernels(kernel_names)
    ran = by_ops
    if ran is None and kernels["kernel_path"] == "math":
        ran = "math"
    agree = None
    if by_ops is not None and kernels["kernel_path"] is not None:
        agree = (by_ops == "math") == (kernels["kernel_path"] == "math")
    return {"backend": ran, "backend_by_op": by_ops, **kernels, "op_and_kernels_agree": agree,
            "sdpa_ops": [name for name in op_names if name in sdpa_ops()]}  # fmt: skip


def causes_of(lines: Iterable[str]) -> list:
    """[{cause, fix, source, text}] for torch's warning/error lines, first matching [[cause]] row per line,
    one entry per cause (the first line that showed it)."""
    found, seen = [], set()
    for line in lines:
        for row in causes():
            if any(p.search(line) for p in row.patterns):
                if row.cause not in seen:
                    seen.add(row.cause)
                    found.append({"cause": row.cause, "fix": row.fix, "source": row.source, "text": line.strip()})
                break
    return found


# select_sdp_backend's debug pass prints one header per backend and then that backend's reasons
REASON_HEADERS = (("efficient", re.compile(r"(?i)memory efficient kernel not used because")),
                  ("flash", re.compile(r"(?i)flash attention kernel not used because")),
                  ("cudnn", re.compile(r"(?i)cudnn attention kernel not used because")))  # fmt: skip
GENERIC_LINES = re.compile(r"(?i)^(no available kernel|.*not used because:?$)")


def reasons_for(lines: Sequence[str], backend: str) -> list:
    """The lines about `backend` among torch's warnings: the segment under its header when torch printed
    headers (a forced backend's refusal lists every backend, the switched-off ones as 'runtime disabled'),
    else every line; the headers and 'No available kernel' themselves left out."""
    segments, current, headed = {}, None, False
    for line in lines:
        header = next((name for name, pattern in REASON_HEADERS if pattern.search(line)), None)
        if header:
            current, headed = header, True
            continue
        segments.setdefault(current, []).append(line)
    chosen = segments.get(backend, []) + segments.get(None, []) if headed else list(lines)
    return [line for line in chosen if not GENERIC_LINES.search(line.strip())]


# -- the finding over one probe (all backends for one shape) -----------------------------------------------

def why_not_run(row: dict, width: int = 80) -> str:
    """Why a probe row's backend could not run, in one line: its causes (data/attention.toml), else the first line
    of torch's error cut to `width`, else "refused"."""
    causes = "; ".join(cause["cause"] for cause in row.get("causes") or [] if cause.get("cause"))
    lines = str(row.get("error") or "").splitlines()
    return causes or (lines[0][:width] if lines else "refused")


def forced_prospect(rows: Sequence[dict], requested: str) -> Optional[str]:
    """Why forcing the backend `requested` cannot speed up the attention of one probe (`rows`: probe_attention's
    `backends`), or None when it could (or the probe did not try it): it did not run (why_not_run); it ran the very backend torch picks by
    default (the same kernels: a trial of it measures the default again); or it ran slower than the default's,
    outside both IQRs (its first quartile above the default's third). On an H200 the 8B decode's static-cache
    attention ran cudnn by default at 0.076 ms, forced efficient 0.066, math 0.41 (results/s22-h200/A): only
    efficient is worth a compiled trial."""
    by_request = {row.get("requested"): row for row in rows}
    row = by_request.get(requested)
    if row is None:
        return None
    if not row.get("ran"):
        return why_not_run(row)
    default = by_request.get("default") or {}
    if not default.get("ran"):
        return None
    if default.get("backend") and default.get("backend") == row.get("backend"):
        return f"torch already picks {row.get('backend')} for it by default"
    mine, theirs = row.get("timing") or {}, default.get("timing") or {}
    if mine.get("q1_s") and theirs.get("q3_s") and mine["q1_s"] > theirs["q3_s"]:
        return (f"{1e3 * mine['median_s']:.3f} ms against the default {default.get('backend')}'s "
                f"{1e3 * theirs['median_s']:.3f} ms")
    return None


def _median(row: dict) -> Optional[float]:
    return ((row.get("timing") or {}).get("median_s")) if row.get("ran") else None


def attention_finding(rows: Sequence[dict]) -> dict:
    """The verdict over one shape's rows (fade.measure.attention.probe_attention's `backends`).

    Each row: requested ("default" or a backend), ran (bool), backend (what ran), timing ({median_s, q1_s,
    q3_s}), reasons (torch's lines), error. Returns {status, default_backend, message, causes, fastest} with
    status "ok", "math_fallback" (the default ran math while the shape is attention a fused kernel could
    take), "slower_than_available" (a fused backend that could run beat the default's choice by SLOWER_RATIO
    outside both IQRs) or "unknown" (the default did not run)."""
    by_request = {row.get("requested"): row for row in rows}
    default = by_request.get("default")
    fastest = None
    for row in rows:
        median = _median(row)
        if median is not None and row.get("requested") != "default" and (fastest is None or median < fastest[1]):
            fastest = (row["requested"], median)
    if not default or not default.get("ran"):
        return {"status": "unknown", "default_backend": None, "causes": [], "fastest": fastest and fastest[0],
                "message": "the default SDPA choice did not run: " + ((default or {}).get("error") or "no row")}
    chosen = default.get("backend")
    refused = {row["requested"]: row for row in rows if row.get("requested") in FUSED and not row.get("ran")}
    lines = list(default.get("reasons") or [])
    for backend, row in refused.items():
        lines += reasons_for((row.get("reasons") or []) + [row.get("error") or ""], backend)
    found = causes_of(line for line in lines if line)
    if chosen == "math":
        why = "; ".join(f"{c['cause']} ({c['text'][:120]})" for c in found) or "no reason given by torch"
        return {"status": "math_fallback", "default_backend": "math", "causes": found, "fastest": fastest and fastest[0],
                "refused": sorted(refused),
                "message": f"attention ran the math kernel (bmm + softmax, all scores in memory); fused backends "
                           f"refused: {', '.join(sorted(refused)) or 'none tried'}; cause: {why}"}  # fmt: skip
    default_median = _median(default)
    if fastest and default_median and fastest[0] in FUSED and fastest[0] != chosen:
        faster = by_request[fastest[0]]
        ratio = default_median / fastest[1]
        apart = (faster["timing"].get("q3_s") or fastest[1]) < (default["timing"].get("q1_s") or default_median)
        if ratio >= SLOWER_RATIO and apart:
            return {"status": "slower_than_available", "default_backend": chosen, "causes": [], "fastest": fastest[0],
                    "ratio": ratio,
                    "message": f"the default choice ran {chosen}, {ratio:.2f}x slower than {fastest[0]}, which "
                               f"also runs this shape: force it with sdpa_kernel([SDPBackend.{_enum(fastest[0])}])"}  # fmt: skip
    return {"status": "ok", "default_backend": chosen, "causes": [], "fastest": fastest and fastest[0],
            "message": f"the default choice ran {chosen}"}


def _enum(backend: str) -> str:
    return {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION",
            "math": "MATH"}.get(backend, backend.upper())  # fmt: skip


# -- ROCm: what AOTriton was built for (the doctor's facts) ------------------------------------------------

def _version_key(text: str) -> tuple:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def aotriton_release(version: Optional[str]) -> Optional[AOTriton]:
    """The [[aotriton]] row for a library version ("0.10.0" from libaotriton_v2.so.0.10.0, or "0.10b"): the
    newest release whose major.minor(.patch) is at or below it within the same minor series."""
    if not version:
        return None
    key = _version_key(version)
    if len(key) < 2:
        return None
    best = None
    for release in aotriton_releases():
        rkey = _version_key(release.version)
        if rkey[:2] == key[:2] and rkey <= key + (0,) * (3 - len(key)):
            if best is None or _version_key(best.version) < rkey:
                best = release
    return best


def aotriton_status(arch: str, release: AOTriton) -> str:
    """"built", "experimental" (built but gated by TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL) or "not_built"."""
    if arch not in release.targets:
        return "not_built"
    return "experimental" if arch in release.experimental else "built"


def status_over_releases(arch: str, since: str = "0.10b") -> Optional[str]:
    """The arch's status when every release from `since` on agrees: "built", "not_built", or "experimental"
    (gated in every release that built it at all); None when it depends on the version."""
    floor = _version_key(since)
    states = {aotriton_status(arch, r) for r in aotriton_releases() if _version_key(r.version) >= floor}
    if len(states) == 1:
        return states.pop()
    if states == {"experimental", "not_built"}:
        return "experimental"
    return None


def env_flag(value: Optional[str]) -> Optional[bool]:
    """c10::utils::check_env's reading of a variable: True, False, or None (unset or not a boolean spelling)."""
    if value is None:
        return None
    text = value.strip().upper()
    return True if text in ENV_TRUE else False if text in ENV_FALSE else None


def attention_facts(*, vendor: Optional[str], arch: Optional[str], torch_build: Optional[str],
                    aotriton_version: Optional[str], env: dict) -> dict:
    """The doctor's SDPA facts for one device (None where not knowable; facts.py merges them):

    sdpa_aotriton: "built" | "experimental" | "not_built" for this arch under this torch's AOTriton; without a
      known AOTriton version, the status every release since 0.10b agrees on ("experimental" also covers an
      arch that some of those releases did not build at all), else None.
    sdpa_aotriton_varies: True when the version is unknown and the releases disagree on this arch.
    aotriton_label: "AOTriton 0.11.0" or, without a version, "every AOTriton release since 0.10b".
    aotriton_experimental_enabled: the variable as torch reads it (False when unset).
    aotriton_max_head_dim: the head_dim limit of this AOTriton on this arch (None when unknown)."""
    facts = dict.fromkeys(ATTENTION_FACTS)
    if vendor != "amd" or torch_build != "rocm" or not arch:
        return facts
    release = aotriton_release(aotriton_version)
    facts["aotriton_version"] = aotriton_version
    facts["aotriton_known"] = release is not None
    facts["aotriton_experimental_enabled"] = bool(env_flag(env.get(EXPERIMENTAL_ENV)))
    if release is not None:
        facts["sdpa_aotriton"] = aotriton_status(arch, release)
        facts["sdpa_aotriton_varies"] = False
        facts["aotriton_max_head_dim"] = release.head_dim_limit(arch)
        facts["aotriton_label"] = f"AOTriton {aotriton_version}"
    else:
        facts["sdpa_aotriton"] = status_over_releases(arch)
        facts["sdpa_aotriton_varies"] = facts["sdpa_aotriton"] is None
        facts["aotriton_label"] = "every AOTriton release since 0.10b"
    return facts
