"""One environment variable FADE set for a process, or left as the user set it, and why: what
`apply_fade_patches` and the dist launcher return and report."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EnvChange:
    name: str
    value: str
    status: str  # "set" | "kept-user-value" | "already-set-by-fade"
    rule: str  # the finding id that asked for it
    reason: str  # the finding's title

    def __str__(self) -> str:
        verb = {"set": "set", "kept-user-value": "kept your", "already-set-by-fade": "already set"}[self.status]
        return f"fade: {verb} {self.name}={self.value}  ({self.rule}: {self.reason})"
