"""The tuning file `fade tune` writes (versioned JSON) and `load_tuning`, which applies one in the user's program.

A tuning file records the chosen knobs, the env lines and a Python snippet that reproduce them, before/after
throughput with spreads, every candidate with its status and reason, and the device fingerprint it was
tuned on. Applying it sets its environment variables (a value the user set wins, as in
apply_fade_patches), and the torch flags it can set process-wide (TF32 math, cudnn.benchmark, MIOpen
immediate mode). Model-level knobs (autocast dtype, channels_last, compile mode, SDPA backend, optimizer
implementation) are returned for the user's code, or applied by `tuned(model)` for the module-level ones.
A tuning file from another device applies nothing and warns. The JSON keeps its "kind", KIND, from the days
the file was called a profile: saved files keep loading.
"""

from __future__ import annotations

import datetime
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional

from fade.version import __version__
from fade.act.tune import device as device_facts
from fade.errors import FadeUsageError

SCHEMA_VERSION = 1
KIND = "fade-tuning-profile"
REQUIRED_FIELDS = ("schema_version", "kind", "device", "model", "mode", "batch", "knobs", "env")
APPLIED_MARKER = "FADE_APPLIED"  # the same marker apply_fade_patches keeps
# (matmul, convolution) fp32 math per precision, as the model bench pins them (models_variants.FP32_MATH)
PRECISION_FP32_MATH = {"default": None, "tf32": ("tf32", "tf32"), "amp-bf16": None, "amp-fp16": None}
AUTOCAST = {"amp-bf16": "bfloat16", "amp-fp16": "float16"}


class TuningFileError(FadeUsageError):
    """A tuning file that cannot be used: unreadable, not a tuning file, another schema, another device."""


def build_tuning(
    result,
    knobs: list,
    *,
    fingerprint: dict,
    model: str,
    mode: str,
    batch: int,
    size: Optional[int] = None,
    budget_s: Optional[float] = None,
    exhaustive: bool = False,
    cache_dir: Optional[str] = None,
    cache_messages: Optional[list] = None,
    host_load: Optional[dict] = None,
    diagnosis: Optional[dict] = None,
) -> dict:
    """The tuning file of one search.SearchResult: its knobs are what the final check proved ("recommends" is
    False and the knobs are the baseline's otherwise); `host_load` is hostload.HostLoadProbe's reading."""
    from fade.analyze.knobs import config_env
    from fade.act.tune.search import NOISE_FLOOR

    chosen = dict(result.chosen)
    baseline = dict(result.baseline)
    env = config_env(knobs, chosen)
    if cache_dir:
        from fade.act.tune.cache import ENV_PATHS

        env.update({name: str(Path(cache_dir) / relative) for name, relative in ENV_PATHS.items() if _uses(name, chosen)})
    final_speedup = None
    if result.before and result.after:
        final_speedup = result.after["samples_per_s"] / result.before["samples_per_s"]
    recommends = result.verdict == "faster"
    profile = {
        "schema_version": SCHEMA_VERSION,
        "fade_version": __version__,
        "kind": KIND,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": dict(fingerprint),
        "model": model,
        "mode": mode,
        "batch": result.samples_per_step or batch,
        "size": size,
        "knobs": chosen,
        "changed": {name: value for name, value in chosen.items() if baseline.get(name) != value},
        "env": env,
        "env_lines": [f"export {name}={value}" for name, value in sorted(env.items())],
        "python_snippet": python_snippet(chosen, mode),
        "before": result.before,
        "after": result.after,
        "speedup": final_speedup if recommends else None,
        "verdict": result.verdict,
        "verdict_reason": result.verdict_reason,
        "recommends": recommends,
        "final_check": {"candidate": result.candidate, "speedup": final_speedup,
                        "rule": "the knobs are the candidate's only when this check measured it faster than the "
                                "baseline beyond the noise bar, and the baseline agreed with the search's"},  # fmt: skip
        "host_load": host_load,
        "diagnosis": diagnosis,
        "plan": dict(result.plan),
        "untried_named": list(result.untried_named),
        "budget_needed_s": result.budget_needed_s,
        "candidates": [_candidate_dict(candidate) for candidate in result.candidates],
        "left_out": dict(result.left_out),
        "search": {
            "budget_s": budget_s,
            "elapsed_s": result.elapsed_s,
            "exhaustive": exhaustive,
            "trials_measured": result.trials_measured,
            "trials_resumed": result.trials_resumed,
            "noise_floor": NOISE_FLOOR,
            "rule": "the values the baseline's profile names first, then the knobs that need no compile, then the "
                    "compile modes cheapest first, then the knobs again under the best compile mode; a trial starts "
                    "only when its expected cost fits half of the search budget left; a value is accepted when "
                    "start_median / candidate_median > 1 + max(noise_floor, IQR/median of either side) and it is the "
                    "fastest such value of its knob (start: the configuration before that knob)",
        },
        "cache_dir": cache_dir,
        "cache_messages": list(cache_messages or []),
    }
    return profile


def _uses(variable: str, chosen: dict) -> bool:
    """Whether the chosen knobs make the library behind `variable` write tuned results worth keeping."""
    if variable == "PYTORCH_TUNABLEOP_FILENAME":
        return chosen.get("tunableop") == "on"
    if variable.startswith("MIOPEN_"):
        return any(chosen.get(name, "default") != "default" for name in ("miopen_find_mode", "miopen_find_enforce")) or (
            chosen.get("cudnn_benchmark") == "on" and "miopen_find_mode" in chosen
        )
    return chosen.get("compile", "off") != "off"  # Inductor and Triton caches


def _candidate_dict(candidate) -> dict:
    from dataclasses import asdict

    return asdict(candidate) if not isinstance(candidate, dict) else dict(candidate)


def python_snippet(chosen: dict, mode: str) -> str:
    """Code that applies the model-level knobs in a training or inference loop."""
    lines = ["import torch", ""]
    precision = chosen.get("precision", "default")
    if precision == "tf32":
        lines += ["torch.backends.cuda.matmul.fp32_precision = 'tf32'", "torch.backends.cudnn.conv.fp32_precision = 'tf32'"]
    if chosen.get("cudnn_benchmark") == "on":
        lines.append("torch.backends.cudnn.benchmark = True")
    if chosen.get("miopen_immediate") == "on":
        lines.append("torch.backends.miopen.immediate = True")
    if chosen.get("channels_last") == "on":
        lines.append("model = model.to(memory_format=torch.channels_last)  # and inputs: x.to(memory_format=torch.channels_last)")
    optimizer_impl = chosen.get("optimizer_impl", "default")
    if mode == "train" and optimizer_impl != "default":
        lines.append(f"optimizer = torch.optim.SGD(model.parameters(), lr=..., {optimizer_impl}=True)  # or your optimizer, {optimizer_impl}=True")
    compile_mode = chosen.get("compile", "off")
    if compile_mode != "off":
        argument = "" if compile_mode == "default" else f", mode={compile_mode!r}"
        lines.append(f"model = torch.compile(model{argument})")
    if precision == "amp-fp16" and mode == "train":
        lines.append("scaler = torch.amp.GradScaler('cuda')")
    contexts = []
    if precision in AUTOCAST:
        contexts.append(f"torch.autocast('cuda', dtype=torch.{AUTOCAST[precision]})")
    sdpa = chosen.get("sdpa_backend", "default")
    if sdpa != "default":
        backend = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}[sdpa]
        lines.insert(1, "from torch.nn.attention import SDPBackend, sdpa_kernel")
        contexts.append(f"sdpa_kernel(SDPBackend.{backend})")
    if contexts:
        lines.append(f"with {', '.join(contexts)}:")
        lines.append("    loss = loss_fn(model(x), y)" if mode == "train" else "    y = model(x)")
        if precision == "amp-fp16" and mode == "train":
            lines += ["scaler.scale(loss).backward()", "scaler.step(optimizer)", "scaler.update()"]
    return "\n".join(lines) + "\n"


def save_tuning(profile: dict, path) -> Path:
    from fade.files import atomic_write_text

    return atomic_write_text(Path(path), json.dumps(profile, indent=2, sort_keys=False, default=str) + "\n")


def read_tuning(path) -> dict:
    """The tuning file at `path`, checked; TuningFileError (one line, naming the file and the fix) otherwise."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise TuningFileError(f"profile {path}: cannot read it ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise TuningFileError(f"profile {path}: not UTF-8 text (a binary file?); re-run `fade tune`") from None
    try:
        profile = json.loads(text)
    except ValueError as error:
        reason = str(error).splitlines()[0][:120]
        raise TuningFileError(f"profile {path}: not JSON ({reason}); is it truncated? re-run `fade tune`") from None
    except RecursionError:
        raise TuningFileError(f"profile {path}: JSON nested too deeply; re-run `fade tune`") from None
    if not isinstance(profile, dict) or profile.get("kind") != KIND:
        raise TuningFileError(f"profile {path}: not a FADE tuning profile (no \"kind\": \"{KIND}\")")
    if profile.get("schema_version") != SCHEMA_VERSION:
        raise TuningFileError(
            f"profile {path}: schema_version {profile.get('schema_version')!r}, this FADE reads {SCHEMA_VERSION}; re-run `fade tune`"
        )
    missing = [name for name in REQUIRED_FIELDS if name not in profile]
    if missing:
        raise TuningFileError(f"profile {path}: missing field(s) {', '.join(missing)}; re-run `fade tune`")
    if not isinstance(profile["knobs"], dict) or not isinstance(profile["env"], dict) or not isinstance(profile["device"], dict):
        raise TuningFileError(f"profile {path}: knobs, env and device must be JSON objects")
    problem = tuning_problem(profile)
    if problem:
        raise TuningFileError(f"profile {path}: {problem}; re-run `fade tune`")
    return profile


def tuning_problem(profile: dict) -> Optional[str]:
    """The first reason `profile` cannot be applied as a whole, or None: checked before anything is applied,
    so a bad entry never leaves the environment half set."""
    for name, value in profile["knobs"].items():
        if not isinstance(value, (str, int, float, bool)) and value is not None:
            return f"knobs.{name} must be a string or a number, got {type(value).__name__}"
    for name, value in profile["env"].items():
        if not name or "=" in name or "\0" in name:
            return f"env name {name[:40]!r} is not a valid environment variable name"
        if not isinstance(value, (str, int, float, bool)) or "\0" in str(value):
            return f"env.{name} must be a string without NUL bytes"
    for name, value in profile["device"].items():
        if isinstance(value, (dict, list)):
            return f"device.{name} must be a string or a number, got {type(value).__name__}"
    for name in ("model", "mode"):
        if not isinstance(profile[name], str):
            return f"{name} must be a string"
    if not isinstance(profile["batch"], int) or isinstance(profile["batch"], bool):
        return "batch must be an integer"
    return None


def check_device(profile: dict, current: dict, *, path="profile") -> list:
    """[] when `profile` was tuned on this device; TuningFileError when it was another's. Returns the stack
    differences (tuned on this device with other versions: still applicable, worth re-tuning)."""
    mismatch = device_facts.device_mismatch(profile["device"], current)
    if mismatch:
        recorded = profile["device"].get("name") or profile["device"].get("arch")
        raise TuningFileError(
            f"profile {path} was tuned on another device ({recorded}; {', '.join(mismatch)}): "
            "run `fade tune` on this machine"
        )
    return [
        difference
        for difference in device_facts.differences(profile["device"], current, ("torch", "cuda", "hip", "driver"))
        if "-> None" not in difference  # a static read that knows less is not a change
    ]


@dataclass
class Tuning:
    """What load_tuning did and what the user's code still applies."""

    knobs: dict  # every chosen knob
    model_knobs: dict  # autocast, grad_scaler, channels_last, compile, sdpa_backend, optimizer_impl
    env: list = field(default_factory=list)  # (name, value, status): "set", "kept-user-value", "already-set"
    torch_flags: dict = field(default_factory=dict)  # flag -> value set
    applied: bool = True  # False when the profile belongs to another device
    warnings: list = field(default_factory=list)


def model_knobs(knobs: dict) -> dict:
    precision = knobs.get("precision", "default")
    compile_mode = knobs.get("compile", "off")
    return {
        "autocast": AUTOCAST.get(precision),
        "grad_scaler": precision == "amp-fp16",
        "channels_last": knobs.get("channels_last") == "on",
        "compile": None if compile_mode == "off" else compile_mode,
        "sdpa_backend": None if knobs.get("sdpa_backend", "default") == "default" else knobs["sdpa_backend"],
        "optimizer_impl": None if knobs.get("optimizer_impl", "default") == "default" else knobs["optimizer_impl"],
    }


def load_tuning(
    path,
    *,
    environ: Optional[dict] = None,
    fingerprint: Optional[dict] = None,
    set_torch_flags: bool = True,
    verbose: bool = True,
    on_message: Optional[Callable[[str], None]] = None,
) -> Tuning:
    """Apply the tuning file at `path` to this process: env (user values win) and process-wide torch flags.

    Call it before the first torch.cuda call: TunableOp and MIOpen read their variables once. TuningFileError
    for an unreadable or corrupt tuning file; one from another device warns and applies nothing.
    `fingerprint` defaults to device.static_fingerprint (no GPU runtime started). When `verbose`,
    `on_message` receives one line per env variable and per warning (fade.api writes them to stderr).
    """
    profile = read_tuning(path)
    environ = os.environ if environ is None else environ
    knobs = dict(profile["knobs"])
    tuning = Tuning(knobs=knobs, model_knobs=model_knobs(knobs))
    current = fingerprint if fingerprint is not None else device_facts.static_fingerprint(environ)
    try:
        stack_changes = check_device(profile, current, path=path)
    except TuningFileError as error:
        message = f"fade: {error}; nothing applied"
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        tuning.applied = False
        tuning.model_knobs = model_knobs({})
        tuning.warnings.append(message)
        return tuning
    if stack_changes:
        tuning.warnings.append(f"fade: profile {path} was tuned with another stack ({', '.join(stack_changes)}); re-run `fade tune`")
    applied_before = set(filter(None, environ.get(APPLIED_MARKER, "").split(",")))
    for name, value in sorted(profile["env"].items()):
        if name in applied_before:
            tuning.env.append((name, environ.get(name, value), "already-set"))
        elif name in environ:
            tuning.env.append((name, environ[name], "kept-user-value"))
        else:
            environ[name] = str(value)
            applied_before.add(name)
            tuning.env.append((name, str(value), "set"))
    if applied_before:
        environ[APPLIED_MARKER] = ",".join(sorted(applied_before))
    if set_torch_flags:
        tuning.torch_flags = _set_torch_flags(knobs)
    if verbose and on_message is not None:
        for name, value, status in tuning.env:
            on_message(f"fade: {'set' if status == 'set' else status.replace('-', ' ')} {name}={value}  (tuning profile)")
        for message in tuning.warnings:
            on_message(message)
    return tuning


def _set_torch_flags(knobs: dict) -> dict:
    """Set what a torch flag can: fp32 math for tf32, cudnn.benchmark, MIOpen immediate. Imports torch only
    when one of them is asked for (importing torch does not start the GPU runtime)."""
    wanted = {}
    math = PRECISION_FP32_MATH.get(knobs.get("precision", "default"))
    if math:
        wanted["fp32_math"] = math
    if knobs.get("cudnn_benchmark") == "on":
        wanted["cudnn_benchmark"] = True
    if knobs.get("miopen_immediate") == "on":
        wanted["miopen_immediate"] = True
    if not wanted:
        return {}
    import torch

    done = {}
    if "fp32_math" in wanted:
        matmul, conv = wanted["fp32_math"]
        # The legacy flags, as models_variants.fp32_math_flags: a matmul/conv mix set through the new
        # fp32_precision API makes Inductor's max-autotune fail in the user's program.
        torch.backends.cuda.matmul.allow_tf32 = matmul == "tf32"
        torch.backends.cudnn.allow_tf32 = conv == "tf32"
        done["matmul_fp32_precision"], done["cudnn_conv_fp32_precision"] = matmul, conv
    if "cudnn_benchmark" in wanted:
        torch.backends.cudnn.benchmark = True
        done["cudnn_benchmark"] = True
    if "miopen_immediate" in wanted and hasattr(torch.backends, "miopen") and hasattr(torch.backends.miopen, "immediate"):
        torch.backends.miopen.immediate = True
        done["miopen_immediate"] = True
    return done


def tuned(model, tuning: Tuning):
    """`model` with the module-level knobs of `tuning` applied: channels_last, then torch.compile."""
    import torch

    knobs = tuning.model_knobs
    if knobs.get("channels_last"):
        model = model.to(memory_format=torch.channels_last)
    if knobs.get("compile"):
        model = torch.compile(model) if knobs["compile"] == "default" else torch.compile(model, mode=knobs["compile"])
    return model


def env_lines(profile: dict, environ: Optional[Mapping[str, str]] = None) -> list:
    """`export` lines for a shell; variables already set in `environ` are left out (user values win)."""
    environ = os.environ if environ is None else environ
    return [f"export {name}={value}" for name, value in sorted(profile["env"].items()) if name not in environ]
