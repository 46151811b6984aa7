"""The order of `fade tune`'s search, decided from a profile of the baseline step: the knobs that need no compile
first, then the compile modes, and within each of the two tiers the values that answer the step's verdicts
(fade.analyze.profile.decide) ahead of the others; verdicts that no knob answers are said as such (a host sync in
the user's loop is not a knob).

Why (issue 26): on an H200 a torchvision CNN trained at 0.20x of its best hand configuration because the tuner
measured compile modes first and max-autotune ate the budget, while `fade profile` of the same step said "GEMM/conv
kernels take 78% of device time at 23% of peak; fix: bf16/fp16 autocast, TF32, channels_last". The knob table's
`answers` column (data/knobs.toml) maps each verdict to the values that are its fix, so the profile's fix line and
the tuner's first trials are the same knowledge, read from one place.

Why a verdict never moves a compile mode ahead of the knobs that need no compile: once a compile mode is in the
best configuration, every later trial compiles again. EfficientNet-B0 training on an H200 (results/tune-h200-s11/):
its profile said memory-bound elementwise, the plan put compile=default first (56 s, accepted), and then each
precision, layout and backend value was expected at 56 s a trial: the search ended at 101 s of its 300 with
reduce-overhead (2.3x, then 1.3x more with bf16 under it) untried, at 0.32x of the best hand configuration. The
knobs that need no compile take seconds each (3-5 s on the H200), so they all run first, whatever the verdict; the
verdict decides which of them go first, and which compile mode is the first to compile.

Order
    1. The values of knobs that need no compile that answer a verdict, largest share of the step first, a visit
       per knob in the table's order.
    2. The other values of those knobs: seconds per trial.
    3. The compile modes a verdict names (launch-bound: reduce-overhead), then the others by the table's cost
       factor (max-autotune last), ties in the table's `order` (reduce-overhead before default: one compile
       measures fusion and CUDA graph replay together).
    A knob can so have two visits (its named values first, the rest after them).
Decode (mode "generate", `fade tune --generate`)
    Where the baseline decode's profile names a compile mode (launch-bound: reduce-overhead, with the static cache
    it needs), that mode is the first trial, then the knobs that need no compile, then the other modes. A decode
    trial times whole greedy runs and builds the model, so an eager trial is not seconds: the eager batch-1 decode
    of an 8B shape runs at ~38 tokens/s on an H200 (issue 28's table), ~2 s a run before the gate's forced run,
    while CUDA graphs take it 4.8x higher (183.6 tokens/s). The knobs that need no compile then run under the
    compile mode that won, where their effect is the one a user gets (weight-only int8 saves bytes only once the
    step is not launch-bound).
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
    mode: Optional[str] = None  # "train" or "infer": picks a knob's compiled_order in later passes

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


def answers(knob: Knob, value: str, key: str) -> bool:
    """Whether `knob`=`value` answers the verdict `key` (its row's `answers`; "rule:class" matches "rule" too)."""
    keys = knob.answers.get(value, ())
    return key in keys or key.split(":", 1)[0] in keys


def answering_values(knobs: list, key: str) -> list:
    """'knob=value' of every value of `knobs` that answers the verdict `key`, in the table's order: what `fade
    profile` says the tuner tries first for that verdict (fade.analyze.profile.decide adds it to the fix line)."""
    return [f"{knob.id}={value}" for knob in knobs for value in tried_order(knob) if answers(knob, value, key)]


def tried_order(knob: Knob) -> list:
    """`knob`'s alternatives in the order the plan tries them before any verdict: the table's `order` (else its
    values), compile modes sorted by cost factor (max-autotune last), ties kept."""
    alternatives = list(knob.alternatives)
    if knob.group == "compile":
        alternatives.sort(key=lambda value: knob.cost.get(value, 1.0))
    return alternatives


def plan_search(knobs: list, verdicts: Optional[list] = None, *, note: str = "", mode: Optional[str] = None) -> Plan:
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
                if answers(knob, value, key):
                    answered = True
                    named.setdefault(f"{knob.id}={value}", key)
                    first_named.setdefault(knob.id, (index, key))
        if not answered:
            unanswered.append({"rule": key, "title": verdict.get("title", ""), "fix": verdict.get("fix", "")})
    order_of_key = {verdict_key(verdict): position for position, verdict in enumerate(verdicts)}

    def ordered_values(knob: Knob) -> tuple:
        alternatives = tried_order(knob)
        rank = {value: position for position, value in enumerate(alternatives)}
        return tuple(sorted(alternatives, key=lambda value: (
            order_of_key.get(named.get(f"{knob.id}={value}"), len(verdicts)), rank[value])))

    def named_visits(tier: list, compiled: bool) -> list:
        where = ("the first mode to compile: it answers" if compiled
                 else "first of the knobs that need no compile: it answers")  # fmt: skip
        if compiled and mode == "generate":
            where = "first of all, a decode's compile mode: it answers"
        return [Visit(knob.id, tuple(value for value in ordered_values(knob) if f"{knob.id}={value}" in named),
                      f"{where} the profile's verdict {first_named[knob.id][1]}")
                for knob in sorted((knob for knob in tier if knob.id in first_named), key=lambda knob: first_named[knob.id][0])]

    def rest_visits(tier: list, compiled: bool, *, after_compile: bool = False) -> list:
        """The values no verdict named, each knob in its usual place."""
        visits = []
        for knob in tier:
            rest = tuple(value for value in ordered_values(knob) if f"{knob.id}={value}" not in named)
            if rest and not compiled and after_compile:
                visits.append(Visit(knob.id, rest, "needs no compile; a decode's knobs are judged under the compile "
                                                   "mode the verdict named, where a user's decode runs"))  # fmt: skip
            elif rest and not compiled:
                visits.append(Visit(knob.id, rest, "needs no compile: measured in seconds, before the compile modes"))
            elif rest:
                visits.append(Visit(knob.id, rest, "after the knobs that need no compile: each trial compiles, the "
                                                   "cheapest mode first"))  # fmt: skip
        return visits

    eager = [knob for knob in knobs if knob.group != "compile"]
    compiling = [knob for knob in knobs if knob.group == "compile"]
    if mode == "generate" and any(knob.id in first_named for knob in compiling):
        # a launch-bound decode (module docstring, Decode): the named compile mode first, then the rest
        visits = named_visits(compiling, True) + named_visits(eager, False) + \
            rest_visits(eager, False, after_compile=True) + rest_visits(compiling, True)
    else:  # the knobs that need no compile, whatever the verdicts; then the compile modes
        visits = named_visits(eager, False) + rest_visits(eager, False) + named_visits(compiling, True) + \
            rest_visits(compiling, True)
    return Plan(visits=visits, diagnosis=[dict(verdict) for verdict in verdicts], named=named, unanswered=unanswered,
                note=note, mode=mode)
