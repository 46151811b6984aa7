"""A deterministic fake timer for the knob search: step times and numerics per configuration, no torch."""

from __future__ import annotations

from fade.analyze.knobs import Knob
from fade.act.tune.search import Trial

SOURCE = "test fixture"


def knob(id, group, values, **fields):
    return Knob(id=id, group=group, values=tuple(values), where="any", modes=("train", "infer"), kind="model", source=SOURCE, **fields)


KNOBS = [
    knob("precision", "precision", ["default", "tf32", "amp-bf16", "amp-fp16"]),
    knob("channels_last", "layout", ["off", "on"]),
    knob("compile", "compile", ["off", "default"]),
    knob("optimizer_impl", "optimizer", ["default", "fused"]),
]
REFERENCE = {"losses": [7.0, 6.5, 6.0], "rounded_losses": [7.0, 6.5, 6.01]}


class FakeTimer:
    """step_ms(config) -> milliseconds; spread is the relative half-width of the samples; a clock that
    advances by cost_s per measurement; `losses` maps a (knob, value) to a final loss (default: fp32's)."""

    def __init__(self, speedups, *, spread=0.005, cost_s=10.0, losses=None, failures=None, interrupt_after=None,
                 step_ms=None):  # fmt: skip
        self.speedups = speedups  # (knob, value) -> factor on step time (0.5: twice as fast)
        self.step_ms = step_ms  # config -> milliseconds, for knobs that interact (replaces speedups)
        self.spread = spread
        self.cost_s = cost_s
        self.losses = losses or {}
        self.failures = failures or {}
        self.interrupt_after = interrupt_after
        self.now = 0.0
        self.calls = []

    def clock(self):
        return self.now

    def __call__(self, config):
        if self.interrupt_after is not None and len(self.calls) >= self.interrupt_after:
            raise KeyboardInterrupt
        self.calls.append(dict(config))
        self.now += self.cost_s
        for key, reason in self.failures.items():
            if config.get(key[0]) == key[1]:
                return Trial(config, (), "failed", reason)
        step_ms = 100.0 if self.step_ms is None else self.step_ms(config)
        for (name, value), factor in self.speedups.items():
            if config.get(name) == value:
                step_ms *= factor
        offsets = (-1.0, -0.5, 0.0, 0.5, 1.0)
        samples = tuple(step_ms * (1 + self.spread * offset) / 1e3 for offset in offsets)
        last = REFERENCE["losses"][-1]
        for (name, value), loss in self.losses.items():
            if config.get(name) == value:
                last = loss
        numerics = {"mode": "train", "losses": [7.0, 6.5, last], "grads_finite": True}
        return Trial(config, samples, "ok", None, numerics, samples_per_step=64, cost_s=self.cost_s)


# mobilenet_v2 inference, batch 64, H100 (issue 14): samples/s by (precision, channels_last, compile)
MOBILENET_V2_INFER_H100 = {
    ("default", "off", "off"): 11470,
    ("amp-bf16", "off", "off"): 9480,  # 21% slower in eager mode: launch-bound
    ("amp-fp16", "off", "off"): 9500,
    ("tf32", "off", "off"): 11470,
    ("default", "on", "off"): 10900,
    ("default", "off", "reduce-overhead"): 22870,
    ("amp-bf16", "off", "reduce-overhead"): 33000,
    ("amp-bf16", "on", "reduce-overhead"): 33700,
    ("amp-fp16", "off", "reduce-overhead"): 32500,
    ("default", "on", "reduce-overhead"): 21000,
}


def mobilenet_v2_step_ms(config: dict) -> float:
    """Milliseconds per batch-64 step from MOBILENET_V2_INFER_H100; unlisted combinations at the eager fp32 rate."""
    key = (config.get("precision", "default"), config.get("channels_last", "off"), config.get("compile", "off"))
    return 64e3 / MOBILENET_V2_INFER_H100.get(key, 11470)


class FixedHost:
    """A host-load probe (hostload.HostLoadProbe's start/stop) reporting `other_cores` of 16 busy over 60 s."""

    def __init__(self, other_cores=0.0):
        self.other_cores = other_cores

    def start(self):
        pass

    def stop(self):
        return {"other_cores": self.other_cores, "other_cpu_s": 60.0 * self.other_cores, "own_cpu_s": 60.0, "wall_s": 60.0,
                "cores": 16, "run_queue": 1, "source": "test"}  # fmt: skip
