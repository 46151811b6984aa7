"""What a guard saw, one record per (kind, user line, copy direction): the result data of fade.guard.

Plain dataclasses and JSON, no torch. The JSON starts with `schema_version`; readers check it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from fade.hostwork.callsite import display_path
from fade.version import __version__

SCHEMA_VERSION = 1

# Stable kind ids. Each is something that makes an accelerator wait for the host or do the host's work.
KINDS = {
    "cpu_compute": "an op computed on the CPU while accelerator tensors were in use",
    "copy": "a copy between the host and the accelerator (or between two accelerators); a blocking one also "
            "made the host wait, counted in the copy's `syncs`, not as a separate sync",
    "sync": "the host waited for the accelerator: .item(), a data-dependent shape, an explicit synchronize, "
            "or a wait CUDA's sync debug mode reported inside a kernel",
    "device_mix": "an op mixed accelerator tensors with non-scalar CPU tensors",
    "backend_fallback": "the backend ran an op on the CPU because it has no kernel for it (it said so in a warning, or "
                        "through its fallback listener: fade.ocl)",
}
COPY_DIRECTIONS = ("h2d", "d2h", "d2d")

# What user code usually lowers to each op: shown beside the op name so the line is easy to fix.
OP_HINTS = {
    "aten::_local_scalar_dense": ".item(), float(t), int(t), bool(t), `if t:`",
    "aten::nonzero": "nonzero(), torch.where(cond)",
    "aten::index.Tensor": "t[bool_mask]",
    "aten::index_put_": "t[bool_mask] = v",
    "aten::_index_put_impl_": "t[bool_mask] = v",
    "aten::masked_select": "t.masked_select(mask)",
    "aten::_to_copy": ".to(device), .cpu(), .cuda()",
    "aten::copy_": "t.copy_(other), t[...] = other",
    "aten::lift_fresh": "torch.tensor(data, device=...)",
    "aten::equal": "torch.equal(a, b)",
}


@dataclass
class SiteRecord:
    kind: str  # a key of KINDS
    file: str  # the user's file, absolute
    line: int
    function: str
    code: str  # the source line, stripped
    direction: str = ""  # copies only: one of COPY_DIRECTIONS
    count: int = 0
    total_ms: float = 0.0  # wall time of the ops themselves, host clock; a sync's time is its wait
    total_bytes: int = 0  # copies: bytes moved; device_mix: bytes of the CPU operands
    syncs: int = 0  # copies: how many were blocking host<->device copies, so the host also waited for them
    ops: dict[str, int] = field(default_factory=dict)  # op name -> count
    first_stack: list[str] = field(default_factory=list)  # user frames "file:line in function", outermost first
    in_backward: bool = False  # first seen on an autograd worker thread, charged to the backward() line
    steps: int = 0  # distinct training steps it happened in (the part before the first step counts as one)
    last_step: int = -1  # index of the last step it happened in; steps are counted from 0

    @property
    def site(self) -> str:
        return f"{display_path(self.file)}:{self.line}"

    @property
    def what(self) -> str:
        """Kind plus direction, e.g. 'copy h2d'."""
        return f"{self.kind} {self.direction}" if self.direction else self.kind


@dataclass
class GuardReport:
    mode: str  # "warn" | "strict" | "sampled"
    device: str | None  # the accelerator's device type; None when none was found
    sample_every: int  # 1 unless mode is "sampled"
    steps_seen: int = 0
    steps_inspected: int = 0
    records: list[SiteRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def offence_count(self) -> int:
        return sum(record.count for record in self.records)

    def by_kind(self, kind: str) -> list[SiteRecord]:
        return [record for record in self.records if record.kind == kind]

    def to_dict(self) -> dict:
        data = {"schema_version": SCHEMA_VERSION, "fade_version": __version__}
        data.update(asdict(self))
        for record, raw in zip(self.records, data["records"]):
            raw["site"] = record.site
        data["offence_count"] = self.offence_count
        return data

    def write_json(self, path: str) -> None:
        """Write `to_dict()` to `path` as indented JSON."""
        import json

        from fade.files import atomic_write_text

        atomic_write_text(path, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def from_dict(cls, data: dict) -> GuardReport:
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(f"guard report schema_version {version} is not supported (this FADE reads "
                             f"{SCHEMA_VERSION})")
        fields = {key: data[key] for key in ("mode", "device", "sample_every", "steps_seen", "steps_inspected",
                                             "notes")}
        records = []
        for raw in data["records"]:
            raw = {key: value for key, value in raw.items() if key != "site"}
            records.append(SiteRecord(**raw))
        return cls(records=records, **fields)
