"""The peak bandwidth of the links between GPUs (data/links.toml, a source on every row) and the slowest link
among a set of GPUs: what a collective's bus bandwidth is measured against.

A pair's peak is per direction: an NVLink pair (nvidia-smi's NV#) is # x the row's per-link figure, an xGMI
pair one link, a PCIe path the slot's figure when the generation is known. PCIe paths from nvidia-smi
carry no generation, so they have no peak here and a dist record then reports no % of peak.
"""

from __future__ import annotations

import functools
import importlib.resources
from dataclasses import dataclass

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

LINK_KINDS = ("nvlink", "xgmi", "pcie")


@dataclass(frozen=True)
class LinkSpec:
    id: str
    kind: str
    match: tuple  # compute capabilities ("9.0"), gfx archs ("gfx942") or PCIe generations ("pcie5")
    per_link_gbs: float  # per direction, GB/s
    note: str
    source: str


@functools.lru_cache(maxsize=1)
def load_links() -> tuple:
    """Every row of data/links.toml; ValueError naming the row for a missing field or an unknown kind."""
    text = importlib.resources.files("fade").joinpath("data").joinpath("links.toml").read_text(encoding="utf-8")
    rows = []
    for index, row in enumerate(tomllib.loads(text).get("link", [])):
        missing = [name for name in ("id", "kind", "match", "per_link_gbs", "source") if not row.get(name)]
        if missing or row["kind"] not in LINK_KINDS:
            raise ValueError(f"data/links.toml link #{index + 1} ({row.get('id')}): missing {missing} or kind not in {LINK_KINDS}")
        rows.append(LinkSpec(row["id"], row["kind"], tuple(row["match"]), float(row["per_link_gbs"]), row.get("note", ""),
                             row["source"]))  # fmt: skip
    return tuple(rows)


def pair_peak(link: dict, gpu_key: str | None) -> dict | None:
    """{"peak_gbs", "spec", "source"} for one topology link of GPUs named by `gpu_key` (compute capability,
    gfx arch, or PCIe generation), or None when no row applies."""
    for spec in load_links():
        if spec.kind == link.get("kind") and gpu_key in spec.match:
            links = link.get("count") or 1
            return {"peak_gbs": spec.per_link_gbs * links, "spec": spec.id, "source": spec.source}
    return None


def slowest_link(links: list, gpus: list, gpu_key: str | None) -> dict | None:
    """The link with the lowest peak among every pair of `gpus` (indices), as the dist record's `extra.link`:
    {"gpus", "kind", "detail", "peak_gbs", "spec", "source"}; None when a pair is missing or has no peak."""
    wanted = {(a, b) for a in gpus for b in gpus if a < b}
    found = []
    for link in links:
        pair = tuple(sorted(link.get("gpus") or ()))
        if pair in wanted:
            peak = pair_peak(link, gpu_key)
            if peak is None:
                return None  # one pair without a known peak: the slowest cannot be named
            found.append({"gpus": list(pair), "kind": link["kind"], "detail": link.get("detail"), **peak})
    if not wanted or len(found) < len(wanted):
        return None
    return min(found, key=lambda entry: entry["peak_gbs"])
