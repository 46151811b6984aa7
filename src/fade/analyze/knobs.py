"""The knobs `fade tune` may turn, loaded from `data/knobs.toml`, and which of them apply to one target.

Knowledge stays in the table (where a knob helps, its env, its source); this module only validates rows
and filters them by the target's backend, torch version, mode and workload. A knob left out is returned
with the reason, so the tuning file can say why it was not searched ("TunableOp on CUDA with torch 2.13 has
only the 'Default' solution").
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

KNOBS_FILE = Path(__file__).resolve().parents[1] / "data" / "knobs.toml"
GROUP_ORDER = ("precision", "layout", "backend", "optimizer", "compile")  # the table's order; fade.analyze.tuneplan orders the search
WHERE = ("any", "gpu", "cuda", "rocm")
KINDS = ("torch", "env", "model")
MODES = ("train", "infer", "generate")  # generate: a causal LM's decode (fade tune --generate)
BACKENDS = ("cpu", "cuda", "rocm")
# the verdict rules of fade.analyze.profile.decide that a knob value can answer ("one_kernel_dominates:gemm" names
# the top kernel's class too); tests/tune/test_plan.py checks that decide emits each of them
PROFILE_RULES = ("launch_bound", "gemm_low_peak", "gemm_bandwidth_bound", "memory_bound_elementwise",
                 "one_kernel_dominates")


class KnobTableError(ValueError):
    """A row of the knob table is invalid; the message names file:row and the field."""


@dataclass(frozen=True)
class Knob:
    id: str
    group: str
    values: tuple  # the first is the baseline
    where: str
    modes: tuple
    kind: str
    source: str
    env: dict = field(default_factory=dict)  # value -> {VARIABLE: value}
    needs: dict = field(default_factory=dict)  # knob id -> value
    image_only: bool = False
    attention_only: bool = False
    cuda_torch: Optional[str] = None
    cost: dict = field(default_factory=dict)  # value -> cost factor (act.tune.search.expected_cost_s; knobs.toml says more)
    compiled_cost: dict = field(default_factory=dict)  # value -> cost factor when judged under a compile mode (the same)
    ignored_elsewhere: bool = False  # outside `where` torch accepts the flag and it changes nothing (knobs.toml says more)
    answers: dict = field(default_factory=dict)  # value -> profile verdict keys it answers (PROFILE_RULES; knobs.toml says more)
    order: tuple = ()  # the alternatives in the order they are tried, when not the order of `values` (knobs.toml)
    compiled_order: dict = field(default_factory=dict)  # mode -> alternatives' order under a compile mode (knobs.toml)
    note: str = ""

    @property
    def baseline(self) -> str:
        return self.values[0]

    @property
    def alternatives(self) -> tuple:
        """The values other than the baseline, in the order they are tried (`order`, else the table's)."""
        return self.order or self.values[1:]

    def env_for(self, value: str) -> dict:
        return dict(self.env.get(value, {}))


@dataclass(frozen=True)
class Target:
    """What the knobs are filtered against."""

    backend: str  # "cpu", "cuda" or "rocm"
    torch_version: str  # "2.13.0+cpu"
    mode: str  # "train" or "infer"
    image: bool = False  # the workload has 4-D image inputs or weights
    attention: bool = False  # the workload calls scaled_dot_product_attention


def load_knobs(path=None) -> list:
    """Every row of the knob table as a Knob, in file order. KnobTableError for a bad row."""
    path = Path(path or KNOBS_FILE)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise KnobTableError(f"{path}: {error}") from None
    knobs, seen = [], set()
    for index, row in enumerate(data.get("knob", []), start=1):
        where = f"{path.name}: knob {index} ({row.get('id', '?')})"
        knob = _knob_from_row(row, where)
        if knob.id in seen:
            raise KnobTableError(f"{where}: id {knob.id!r} is used twice")
        seen.add(knob.id)
        knobs.append(knob)
    for knob in knobs:
        for other, value in knob.needs.items():
            match = next((candidate for candidate in knobs if candidate.id == other), None)
            if match is None or value not in match.values:
                raise KnobTableError(f"{path.name}: knob {knob.id}: needs {other}={value!r}, which no row offers")
    return knobs


def _knob_from_row(row: dict, where: str) -> Knob:
    known = set(Knob.__dataclass_fields__)
    unknown = set(row) - known
    if unknown:
        raise KnobTableError(f"{where}: unknown field(s) {sorted(unknown)} (known: {sorted(known)})")
    for name in ("id", "group", "values", "where", "modes", "kind", "source"):
        if not row.get(name):
            raise KnobTableError(f"{where}: field {name!r} is missing or empty")
    if row["group"] not in GROUP_ORDER:
        raise KnobTableError(f"{where}: group {row['group']!r} is not one of {GROUP_ORDER}")
    if row["where"] not in WHERE:
        raise KnobTableError(f"{where}: where {row['where']!r} is not one of {WHERE}")
    if row["kind"] not in KINDS:
        raise KnobTableError(f"{where}: kind {row['kind']!r} is not one of {KINDS}")
    if not set(row["modes"]) <= set(MODES):
        raise KnobTableError(f"{where}: modes {row['modes']} must be among {MODES}")
    values = tuple(str(value) for value in row["values"])
    if len(values) < 2 or len(set(values)) != len(values):
        raise KnobTableError(f"{where}: values need a baseline and at least one alternative, each once")
    env = {str(value): {str(k): str(v) for k, v in variables.items()} for value, variables in row.get("env", {}).items()}
    if row["kind"] == "env" and not env:
        raise KnobTableError(f"{where}: kind 'env' needs an env table")
    for value in env:
        if value not in values:
            raise KnobTableError(f"{where}: env names value {value!r}, which is not in values {list(values)}")
    if values[0] in env:
        raise KnobTableError(f"{where}: the baseline value {values[0]!r} must set no env")
    cost = {str(value): factor for value, factor in row.get("cost", {}).items()}
    compiled_cost = {str(value): factor for value, factor in row.get("compiled_cost", {}).items()}
    for column, factors in (("cost", cost), ("compiled_cost", compiled_cost)):
        for value, factor in factors.items():
            if value not in values or isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor <= 0:
                raise KnobTableError(f"{where}: {column} names {value!r} with {factor!r}; it needs a value of the row "
                                     "and a factor > 0")
    answers = {str(value): tuple(str(key) for key in keys) for value, keys in row.get("answers", {}).items()}
    for value, keys in answers.items():
        if value not in values or value == values[0]:
            raise KnobTableError(f"{where}: answers names {value!r}; it needs a value of the row other than the baseline")
        for key in keys:
            if key.split(":", 1)[0] not in PROFILE_RULES:
                raise KnobTableError(f"{where}: answers {value!r} -> {key!r}: not a profile verdict ({', '.join(PROFILE_RULES)})")
    alternatives = set(values[1:])
    order = tuple(str(value) for value in row.get("order", ()))
    if order and (set(order) != alternatives or len(order) != len(alternatives)):
        raise KnobTableError(f"{where}: order {list(order)} must list each value but the baseline once")
    compiled_order = {str(mode): tuple(str(value) for value in listed) for mode, listed in row.get("compiled_order", {}).items()}
    for mode, listed in compiled_order.items():
        if mode not in MODES or not set(listed) <= alternatives or len(set(listed)) != len(listed):
            raise KnobTableError(f"{where}: compiled_order {mode!r}: a mode of {MODES} with values of the row "
                                 "other than the baseline, each once")  # fmt: skip
    if row.get("cuda_torch"):
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            SpecifierSet(row["cuda_torch"])
        except InvalidSpecifier:
            raise KnobTableError(f"{where}: cuda_torch {row['cuda_torch']!r} is not a version specifier") from None
    return Knob(
        id=row["id"],
        group=row["group"],
        values=values,
        where=row["where"],
        modes=tuple(row["modes"]),
        kind=row["kind"],
        source=row["source"],
        env=env,
        needs=dict(row.get("needs", {})),
        image_only=bool(row.get("image_only", False)),
        attention_only=bool(row.get("attention_only", False)),
        cuda_torch=row.get("cuda_torch"),
        cost=cost,
        compiled_cost=compiled_cost,
        ignored_elsewhere=bool(row.get("ignored_elsewhere", False)),
        answers=answers,
        order=order,
        compiled_order=compiled_order,
        note=row.get("note", ""),
    )


def skip_reason(knob: Knob, target: Target) -> Optional[str]:
    """Why `knob` is not searched for `target`, or None when it is."""
    if target.mode not in knob.modes:
        return f"only for {'/'.join(knob.modes)}"
    on_gpu = target.backend in ("cuda", "rocm")
    if knob.where == "gpu" and not on_gpu:
        return f"changes nothing on {target.backend}"
    if knob.where in ("cuda", "rocm") and target.backend != knob.where:
        return f"{knob.where} only"
    if knob.image_only and not target.image:
        return "the workload has no 4-D image input or weight"
    if knob.attention_only and not target.attention:
        return "the workload does not call scaled_dot_product_attention"
    if knob.cuda_torch and target.backend == "cuda":
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        release = Version(target.torch_version.split("+", 1)[0]).base_version
        if not SpecifierSet(knob.cuda_torch).contains(release, prereleases=True):
            return f"no real candidates on CUDA with torch {target.torch_version} (needs torch {knob.cuda_torch})"
    return None


def searched_knobs(knobs: list, target: Target) -> tuple:
    """(knobs to search in GROUP_ORDER, {knob id: reason} for those left out)."""
    searched, left_out = [], {}
    for knob in knobs:
        reason = skip_reason(knob, target)
        if reason:
            left_out[knob.id] = reason
        else:
            searched.append(knob)
    searched.sort(key=lambda knob: GROUP_ORDER.index(knob.group))  # stable: file order within a group
    return searched, left_out


def baseline_config(knobs: list) -> dict:
    """Every knob at its baseline value."""
    return {knob.id: knob.baseline for knob in knobs}


def config_env(knobs: list, config: dict) -> dict:
    """The environment variables `config` sets, from the table's env columns."""
    env: dict = {}
    for knob in knobs:
        env.update(knob.env_for(config.get(knob.id, knob.baseline)))
    return env


def with_needs(knobs: list, config: dict, *, keep: Optional[str] = None) -> dict:
    """`config` with what its values need set, where the needed knob is one of `knobs` (decode_compile=
    reduce-overhead brings kv_cache=static: a trial of a value is a trial of it with its needs). The knob `keep`
    (the one being judged) is never changed, nor a value another one needs; such a need stays unmet
    (unmet_needs says which)."""
    searched = {knob.id for knob in knobs} - {keep}
    filled = dict(config)
    for knob in knobs:
        if filled.get(knob.id, knob.baseline) == knob.baseline:
            continue
        for other, wanted in knob.needs.items():
            if other in searched and filled.get(other) != wanted and not _needed_elsewhere(knobs, filled, other, knob.id):
                filled[other] = wanted
    return filled


def _needed_elsewhere(knobs: list, config: dict, knob_id: str, besides: str) -> bool:
    """Whether a value in `config` other than `besides`' needs `knob_id` at its current value."""
    return any(other.id != besides and knob_id in other.needs and config.get(other.id, other.baseline) != other.baseline
               and other.needs[knob_id] == config.get(knob_id) for other in knobs)  # fmt: skip


def unmet_needs(knobs: list, config: dict) -> Optional[str]:
    """'miopen_suggest_nhwc=on needs channels_last=on' when `config` turns a knob on without its partner."""
    for knob in knobs:
        value = config.get(knob.id, knob.baseline)
        if value == knob.baseline:
            continue
        for other, wanted in knob.needs.items():
            if config.get(other) != wanted:
                return f"{knob.id}={value} needs {other}={wanted}"
    return None
