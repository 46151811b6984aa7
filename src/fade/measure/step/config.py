"""What a step runs under: one knob configuration, in the knob names and values of data/knobs.toml.

A StepConfig holds every knob the step itself applies, the "model" and "torch" kinds of the table (env knobs
act at runtime start-up and are the runner's business, not the step's): precision, channels_last, compile,
sdpa_backend, optimizer_impl, cudnn_benchmark, miopen_immediate. A knob left out is at its baseline, the
table's first value (PyTorch's default behaviour). Values are checked against the table when a config is
made, so a typo is an error, never a silently ignored knob. precision also takes "fp32", the numerics
reference (fp32 storage, TF32 off), which the table never offers as a candidate.

The model bench's variant names are aliases of configurations (fade.measure.suites.models.variants parses
them; the canonical name is StepConfig.name):

    variant part          knob
    fp32                  precision=fp32         (the reference: matmul ieee, cuDNN convolutions ieee)
    default               precision=default      (PyTorch's defaults, pinned: matmul ieee, convolutions tf32)
    tf32                  precision=tf32         (matmul tf32, convolutions tf32)
    amp-fp16              precision=amp-fp16     (autocast float16, a GradScaler when training)
    amp-bf16              precision=amp-bf16     (autocast bfloat16, no scaler)
    channels-last         channels_last=on
    compile               compile=default        (torch.compile with its default mode)
    <knob>=<value>        that knob, e.g. compile=max-autotune, sdpa_backend=flash, cudnn_benchmark=on

so `amp-bf16+channels-last+compile` is precision=amp-bf16, channels_last=on, compile=default. AMP's fp32
leftovers run with `default`'s fp32 math (FP32_MATH).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Optional

REFERENCE_PRECISION = "fp32"  # not a knob value: the reference every candidate's numerics are judged against
# (matmul, convolution) fp32 math per precision; AMP's fp32 leftovers run as PyTorch's defaults do
FP32_MATH = {
    "fp32": ("ieee", "ieee"),
    "default": ("ieee", "tf32"),  # torch lets cuDNN use TF32 for fp32 convolutions since 1.7, cuBLAS not since 1.12
    "tf32": ("tf32", "tf32"),
    "amp-fp16": ("ieee", "tf32"),
    "amp-bf16": ("ieee", "tf32"),
}
AUTOCAST_DTYPE = {"amp-fp16": "fp16", "amp-bf16": "bf16"}
STEP_KNOB_KINDS = ("model", "torch")  # the kinds a step applies in-process; "env" knobs need a fresh process
VARIANT_MODIFIERS = {"channels-last": ("channels_last", "on"), "compile": ("compile", "default")}  # bench aliases


class ConfigError(ValueError):
    """A knob or value the table does not have; the message names it and what the table offers."""


@functools.lru_cache(maxsize=1)
def table_knobs() -> dict:
    """knob id -> Knob, every row of data/knobs.toml (read once)."""
    from fade.analyze.knobs import load_knobs

    return {knob.id: knob for knob in load_knobs()}


STEP_MODES = ("train", "infer")  # a training or inference step; the generate rows are a decode loop's (llm.generation)


def step_knobs() -> dict:
    """knob id -> Knob, for the knobs a step applies."""
    return {knob_id: knob for knob_id, knob in table_knobs().items()
            if knob.kind in STEP_KNOB_KINDS and set(knob.modes) & set(STEP_MODES)}


@dataclass(frozen=True)
class StepConfig:
    """One configuration in knob names; the defaults are the table's baselines (a test holds them equal)."""

    precision: str = "default"
    channels_last: str = "off"
    compile: str = "off"  # off or a torch.compile mode
    sdpa_backend: str = "default"
    optimizer_impl: str = "default"
    cudnn_benchmark: str = "off"
    miopen_immediate: str = "off"

    def __post_init__(self):
        knobs = step_knobs()
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            allowed = tuple(knobs[field.name].values) if field.name in knobs else ()
            if field.name == "precision":
                allowed = (REFERENCE_PRECISION,) + allowed
            if value not in allowed:
                raise ConfigError(f"{field.name}={value!r} is not a value of that knob (data/knobs.toml: {', '.join(allowed)})")

    @classmethod
    def from_knobs(cls, knobs: Optional[dict] = None) -> "StepConfig":
        """The step's part of a knob configuration (knob id -> value); env knobs are left to the caller. A
        knob id the table does not have is a ConfigError, not a knob silently left at its baseline."""
        knobs = dict(knobs or {})
        unknown = sorted(set(knobs) - set(table_knobs()))
        if unknown:
            raise ConfigError(f"{', '.join(unknown)}: not a knob of data/knobs.toml")
        names = {field.name for field in dataclasses.fields(cls)}
        return cls(**{name: value for name, value in knobs.items() if name in names})

    @property
    def knobs(self) -> dict:
        """Every knob of this configuration, id -> value (baselines included)."""
        return dataclasses.asdict(self)

    @property
    def changed(self) -> dict:
        """The knobs away from their baseline, id -> value, in field order."""
        baseline = StepConfig()
        return {name: value for name, value in self.knobs.items() if value != getattr(baseline, name)}

    @property
    def name(self) -> str:
        """The canonical variant name: precision first (left out when `default` has company), then
        channels-last and compile as the bench spells them, then any other knob as id=value."""
        parts = []
        for knob, value in self.changed.items():
            alias = next((part for part, pair in VARIANT_MODIFIERS.items() if pair == (knob, value)), None)
            if knob != "precision":
                parts.append(alias or f"{knob}={value}")
        if not parts or self.precision != "default":
            parts.insert(0, self.precision)
        return "+".join(parts)

    @property
    def autocast_dtype(self) -> Optional[str]:
        return AUTOCAST_DTYPE.get(self.precision)

    @property
    def matmul_math(self) -> str:
        return FP32_MATH[self.precision][0]

    @property
    def conv_math(self) -> str:
        return FP32_MATH[self.precision][1]

    @property
    def uses_channels_last(self) -> bool:
        return self.channels_last == "on"

    @property
    def compile_mode(self) -> Optional[str]:
        """The torch.compile mode, or None when not compiled."""
        return None if self.compile == "off" else self.compile

    def record(self) -> dict:
        """What this configuration asks for: the bench record's `extra.variant` (fields as before the knob
        vocabulary, so results files stay comparable, plus `knobs`)."""
        return {
            "name": self.name,
            "precision": self.precision,
            "autocast": self.autocast_dtype,
            "matmul_fp32_math": self.matmul_math,
            "conv_fp32_math": self.conv_math,
            "channels_last": self.uses_channels_last,
            "compile": self.compile_mode is not None,
            "knobs": self.changed,
        }


@functools.lru_cache(maxsize=1)
def reference_config() -> StepConfig:
    """fp32 with TF32 off and every other knob at its baseline: what every configuration is judged against.
    (A function, not a constant: making a config reads the knob table, which imports fade.act.tune.)"""
    return StepConfig(precision=REFERENCE_PRECISION)


def pinned(config: StepConfig):
    """The torch-flag part of `config` pinned and restored (conditions.pinned_flags): fp32 math by precision,
    cudnn.benchmark (off unless the knob says on), MIOpen immediate mode when on. Yields the flags in effect.

    cudnn.benchmark is pinned even at its baseline: torch caches cuDNN's chosen plan per convolution shape, so
    a case's checked steps, timed steps and plain loop run the same kernels, and a workload that turns
    benchmark mode on cannot make one case's sides differ in what they ran."""
    from fade.measure.step.conditions import pinned_flags

    return pinned_flags(config.matmul_math, config.conv_math, cudnn_benchmark=config.cudnn_benchmark == "on",
                        miopen_immediate=config.miopen_immediate == "on")  # fmt: skip
