"""The order of `fade tune`'s search, decided from a profile of the baseline step: the knob values that answer the
step's verdicts (fade.analyze.profile.decide) go first, then the knobs that need no compile, then the compile modes
by expected cost; verdicts that no knob answers are said as such (a host sync in the user's loop is not a knob).

Why (issue 26): on an H200 a torchvision CNN trained at 0.20x of its best hand configuration because the tuner
measured compile modes first and max-autotune ate the budget, while `fade profile` of the same step said "GEMM/conv
kernels take 78% of device time at 23% of peak; fix: bf16/fp16 autocast, TF32, channels_last". The knob table's
`answers` column (data/knobs.toml) maps each verdict to the values that are its fix, so the profile's fix line and
the tuner's first trials are the same knowledge, read from one place.

Order
    1. For each verdict, largest share of the step first: the values that answer it (a verdict key is the rule, or
       "one_kernel_dominates:<class>" with the top kernel's class), a visit per knob in the table's order
       (launch-bound: compile=reduce-overhead alone, before anything else).
    2. The values no verdict named of the knobs that need no compile (precision, layout, backend, optimizer):
       seconds per trial.
    3. The compile modes no verdict named, by the table's cost factor (max-autotune last).
    A knob can so have two visits (its named values first, the rest in its usual place).
Pure: plain data in (the verdict dicts of a profile summary, fade.analyze.knobs.Knob rows), plain data out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from fade.analyze.knobs import Knob


@dataclass(frozen=True)
class Visit:
    """One knob in the search order: its values in the order they are tried, and why the knob is here."""

    knob: str
    values: tuple  # alternatives to the baseline, in trial order
    why: str


@dataclass
class Plan:
    visits: list  # Visit, in search order
    diagnosis: list = field(default_factory=list)  # the profile's verdicts ({rule, share, title, fix, ...}), largest first
    named: dict = field(default_factory=dict)  # "knob=value" -> the verdict key that names it
    unanswered: list = field(default_factory=list)  # verdicts no searched knob answers: {rule, title, fix}
    note: str = ""  # how the diagnosis was made, or why there is none

    def why(self, knob: str, value: str) -> str:
        """Why knob=value is tried where it is: the verdict that names it, else its visit's place."""
        key = self.named.get(f"{knob}={value}")
        if key:
            return f"the profile's verdict {key} names it"
        return next((visit.why for visit in self.visits if visit.knob == knob and value in visit.values),
                    next((visit.why for visit in self.visits if visit.knob == knob), ""))

    def to_dict(self) -> dict:
        return asdict(self)


def verdict_key(verdict: dict) -> str:
    """'gemm_low_peak', or 'one_kernel_dominates:convolution' with the top kernel's class."""
    rule = str(verdict.get("rule", ""))
    if rule == "one_kernel_dominates" and verdict.get("kernel_class"):
        return f"{rule}:{verdict['kernel_class']}"
    return rule


def _answers(knob: Knob, value: str, key: str) -> bool:
    keys = knob.answers.get(value, ())
    return key in keys or key.split(":", 1)[0] in keys


def answering_values(knobs: list, key: str) -> list:
    """'knob=value' of every value of `knobs` that answers the verdict `key`, in the table's order: what `fade
    profile` says the tuner tries first for that verdict (fade.analyze.profile.decide adds it to the fix line)."""
    return [f"{knob.id}={value}" for knob in knobs for value in knob.values[1:] if _answers(knob, value, key)]


def plan_search(knobs: list, verdicts: Optional[list] = None, *, note: str = "") -> Plan:
    """The search order for `knobs` (already filtered: fade.analyze.knobs.searched_knobs) given the baseline step's
    verdicts (None or []: no diagnosis, the default order), as the module docstring says."""
    verdicts = sorted(verdicts or [], key=lambda verdict: -(verdict.get("share") or 0.0))
    named: dict = {}  # "knob=value" -> key
    first_named: dict = {}  # knob id -> (verdict index, title) of its first naming
    unanswered = []
    for index, verdict in enumerate(verdicts):
        key = verdict_key(verdict)
        answered = False
        for knob in knobs:
            for value in knob.values[1:]:
                if _answers(knob, value, key):
                    answered = True
                    named.setdefault(f"{knob.id}={value}", key)
                    first_named.setdefault(knob.id, (index, key))
        if not answered:
            unanswered.append({"rule": key, "title": verdict.get("title", ""), "fix": verdict.get("fix", "")})

    def ordered_values(knob: Knob) -> tuple:
        alternatives = list(knob.values[1:])
        if knob.group == "compile":  # cheapest first: max-autotune's factor puts it last (knobs.toml `cost`)
            alternatives.sort(key=lambda value: knob.cost.get(value, 1.0))
        rank = {value: position for position, value in enumerate(alternatives)}
        order_of_key = {verdict_key(verdict): position for position, verdict in enumerate(verdicts)}
        return tuple(sorted(alternatives, key=lambda value: (
            order_of_key.get(named.get(f"{knob.id}={value}"), len(verdicts)), rank[value])))

    visits = []
    for knob in sorted((knob for knob in knobs if knob.id in first_named), key=lambda knob: first_named[knob.id][0]):
        values = tuple(value for value in ordered_values(knob) if f"{knob.id}={value}" in named)
        visits.append(Visit(knob.id, values, f"first: it answers the profile's verdict {first_named[knob.id][1]}"))
    for knob in knobs:  # the values no verdict named, each knob in its usual place
        rest = tuple(value for value in ordered_values(knob) if f"{knob.id}={value}" not in named)
        if rest and knob.group != "compile":
            visits.append(Visit(knob.id, rest, "needs no compile: measured in seconds, before the compile modes"))
    for knob in knobs:
        rest = tuple(value for value in ordered_values(knob) if f"{knob.id}={value}" not in named)
        if rest and knob.group == "compile":
            visits.append(Visit(knob.id, rest, "after the knobs that need no compile: each trial compiles, the cheapest "
                                               "mode first"))  # fmt: skip
    return Plan(visits=visits, diagnosis=[dict(verdict) for verdict in verdicts], named=named, unanswered=unanswered,
                note=note)
