"""The tuning file `fade tune` writes (versioned JSON) and `load_tuning`, which applies one in the user's program.

A tuning file records the chosen knobs, the env lines and a Python snippet that reproduce them, before/after
throughput with spreads, every candidate with its status and reason, and the device fingerprint it was
tuned on. Applying it sets its environment variables (a value the user set wins, as in
apply_fade_patches), and the torch flags it can set process-wide (TF32 math, cudnn.benchmark, MIOpen
immediate mode). Model-level knobs (autocast dtype, channels_last, compile mode, SDPA backend, optimizer
implementation) are returned for the user's code, or applied by `tuned(model)` for the module-level ones.
A tuning file from another device applies nothing and warns. The JSON keeps its "kind", KIND, from the days
the file was called a profile: saved files keep loading.

A tuning file may come from someone else, and what it sets runs in the user's processes (issue 30: BASH_ENV made
a later `bash -c true` run the file's script). So read_tuning parses it once, through fade.reading's limits, into
the checked form that `fade tune --show` and load_tuning both use: only the knob table's variables with the
table's values and the tune cache's paths may be set, the export lines are regenerated and shell-quoted.
"""

from __future__ import annotations

import datetime
import difflib
import json
import os
import re
import shlex
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional

from fade.version import __version__
from fade.act.tune import device as device_facts
from fade.errors import FadeUsageError
from fade.reading import NUMBER, MapOf, Maybe, UnreadableFile, parse_json, read_text, schema_problem
from fade.report.text import printable

SCHEMA_VERSION = 1
KIND = "fade-tuning-profile"
REQUIRED_FIELDS = ("schema_version", "kind", "device", "model", "mode", "batch", "knobs", "env")
APPLIED_MARKER = "FADE_APPLIED"  # the same marker apply_fade_patches keeps
MAX_TUNING_BYTES = 16 * 2**20  # a search's tuning file is ~20 KiB, an exhaustive one's well under 1 MiB
MAX_PATH_CHARS = 4096  # PATH_MAX on Linux: the longest cache path a tuning file may point a library at
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # what a POSIX shell accepts after `export`
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1: never in a value FADE writes
# (matmul, convolution) fp32 math per precision, as the model bench pins them (models_variants.FP32_MATH)
PRECISION_FP32_MATH = {"default": None, "tf32": ("tf32", "tf32"), "amp-bf16": None, "amp-fp16": None}
AUTOCAST = {"amp-bf16": "bfloat16", "amp-fp16": "float16"}

# The JSON shape of a tuning file (fade.reading.schema_problem specs).
SCALAR = (str, int, float, bool, type(None))
MEASUREMENT = {"samples_per_s": NUMBER, "relative_iqr": Maybe(NUMBER)}  # other keys pass unread
OPTIONAL_STRING = (str, type(None))  # a key that is there, null or a string
CANDIDATE = {  # one row of search.Candidate
    "knob": OPTIONAL_STRING, "value": OPTIONAL_STRING, "config": MapOf(SCALAR), "status": str, "reason": str,
    "why": Maybe(str),
    **{name: Maybe(NUMBER) for name in ("samples_per_s", "relative_iqr", "speedup_vs_best", "noise_bar", "cost_s", "expected_s")},
}  # fmt: skip
PLAN = {  # analyze.tuneplan.Plan.to_dict(); diagnosis rows carry more of the profile's verdict, unread
    "visits": Maybe([{"knob": str, "values": [str], "why": str}]),
    "diagnosis": Maybe([{"rule": str, "share": Maybe(NUMBER), "title": Maybe(str)}]),
    "named": Maybe(MapOf(str)),
    "unanswered": Maybe([{"rule": str, "fix": str, "title": Maybe(str)}]),
    "note": Maybe(str),
}
# Every field of a tuning file, in build_tuning's order. "knobs", "changed" and "env" are then checked against the
# knob table; "env_lines" and "python_snippet" are checked, then regenerated (parse_tuning).
TUNING = {
    "schema_version": int, "fade_version": Maybe(str), "kind": str, "created": Maybe(str), "device": MapOf(SCALAR),
    "model": str, "mode": str, "batch": int, "size": Maybe(int), "knobs": dict, "changed": Maybe(dict), "env": dict,
    "env_lines": Maybe([str]), "python_snippet": Maybe(str), "before": Maybe(MEASUREMENT), "after": Maybe(MEASUREMENT),
    "speedup": Maybe(NUMBER), "verdict": Maybe(str), "verdict_reason": Maybe(str), "recommends": Maybe(bool),
    "final_check": Maybe({"candidate": Maybe(MapOf(SCALAR)), "speedup": Maybe(NUMBER), "rule": Maybe(str)}),
    "host_load": Maybe({"other_cores": NUMBER, "cores": NUMBER, "run_queue": NUMBER}),  # hostload.HostLoadProbe's
    "diagnosis": Maybe(dict), "plan": Maybe(PLAN), "untried_named": Maybe([MapOf(SCALAR)]),
    "budget_needed_s": Maybe(NUMBER), "candidates": Maybe([CANDIDATE]), "left_out": Maybe(MapOf(str)),
    "search": Maybe(MapOf(SCALAR)), "cache_dir": Maybe(str), "cache_messages": Maybe([str]),
}  # fmt: skip
DEFAULTS = {"changed": dict, "candidates": list, "left_out": dict, "untried_named": list, "cache_messages": list,
            "recommends": bool}  # a missing or null field -> this (called); others -> None


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
        # a step's samples are its batch; a decode run's are batch x new tokens (its rates are tokens/s)
        "batch": int(chosen.get("decode_batch", batch)) if mode == "generate" else (result.samples_per_step or batch),
        "size": size,
        "knobs": chosen,
        "changed": {name: value for name, value in chosen.items() if baseline.get(name) != value},
        "env": env,
        "env_lines": [export_line(name, value) for name, value in sorted(env.items())],
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
            "rule": "the knobs that need no compile first, then the compile modes (in each, the values the baseline's "
                    "profile names first; compile modes then by cost), then the knobs again under the best compile "
                    "mode (once a compile mode wins, the other modes wait for the next pass); a trial starts only when "
                    "its expected cost fits the search budget left with the final check it would need (a compile of "
                    "unproven cost: half of it); a value is accepted when "
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
    """Code that applies the model-level knobs in a training or inference loop (or, for "generate", to a
    transformers model's generate())."""
    if mode == "generate":
        return _generate_snippet(chosen)
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
        from fade.measure.step.runner import SDPA_BACKENDS

        backend = SDPA_BACKENDS[sdpa]
        lines.insert(1, "from torch.nn.attention import SDPBackend, sdpa_kernel")
        contexts.append(f"sdpa_kernel(SDPBackend.{backend})")
    if contexts:
        lines.append(f"with {', '.join(contexts)}:")
        lines.append("    loss = loss_fn(model(x), y)" if mode == "train" else "    y = model(x)")
        if precision == "amp-fp16" and mode == "train":
            lines += ["scaler.scale(loss).backward()", "scaler.step(optimizer)", "scaler.update()"]
    return "\n".join(lines) + "\n"


def _generate_snippet(chosen: dict) -> str:
    """The generate knobs on a transformers causal LM's generate() (what fade's decode loop does, in HF's terms)."""
    lines = ["import torch", ""]
    if chosen.get("kv_cache") == "static":
        lines.append("model.generation_config.cache_implementation = 'static'  # a StaticCache of fixed shapes")
    compile_mode = chosen.get("decode_compile", "off")
    if compile_mode != "off":
        from fade.measure.suites.llm.generation import compile_call_text

        lines.append(f"model.forward = {compile_call_text('model.forward', compile_mode)}  # the decode step")
    quant = chosen.get("weight_quant", "none")
    if quant != "none":
        config = "Int8WeightOnlyConfig" if quant == "int8" else "Int4WeightOnlyConfig"
        lines.insert(1, f"from torchao.quantization import {config}, quantize_")
        lines.append(f"quantize_(model, {config}())  # {quant} weight-only")
    sdpa = chosen.get("sdpa_backend", "default")
    call = "out = model.generate(ids, max_new_tokens=n, do_sample=False)"
    if sdpa != "default":
        from fade.measure.step.runner import SDPA_BACKENDS

        backend = SDPA_BACKENDS[sdpa]
        lines.insert(1, "from torch.nn.attention import SDPBackend, sdpa_kernel")
        lines += [f"with sdpa_kernel(SDPBackend.{backend}):", f"    {call}"]
    else:
        lines.append(call)
    return "\n".join(lines) + "\n"


def save_tuning(profile: dict, path) -> Path:
    from fade.files import atomic_write_text

    return atomic_write_text(Path(path), json.dumps(profile, indent=2, sort_keys=False, default=str) + "\n")


def read_tuning(path) -> dict:
    """The tuning file at `path`, read through fade.reading (a regular file, at most MAX_TUNING_BYTES, JSON within
    its limits) and parsed by parse_tuning; TuningFileError (one line, naming the file and the fix) otherwise."""
    try:
        text = read_text(path, what="profile", max_bytes=MAX_TUNING_BYTES)
    except UnreadableFile as error:
        raise TuningFileError(f"cannot read {error}") from None
    where = f"profile {path}"
    try:
        document = parse_json(text, what=where)
    except UnreadableFile as error:
        detail = str(error).removeprefix(f"{where}: ")
        raise TuningFileError(f"{where}: not JSON FADE reads ({detail}); re-run `fade tune`") from None
    return parse_tuning(document, path=path)


def parse_tuning(document, *, path="profile") -> dict:
    """The tuning file `document` (parsed JSON) checked field by field: the one validated form that rendering
    (`fade tune --show`) and applying (load_tuning) use. TuningFileError (one line) for anything else.

    Every field has its JSON type checked against TUNING (fade.reading.schema_problem); a missing or null
    optional field becomes its default (DEFAULTS, else None), and top-level fields this FADE does not know are
    dropped. Knobs must be ids of data/knobs.toml with one of their values. The env is what the file may set
    in the user's process, so it is checked hardest (check_env). `env_lines` and `python_snippet` are
    regenerated from the checked knobs and env: a file's own text for them is never printed, since a user
    pastes or evals it.
    """
    from fade.analyze.knobs import load_knobs

    if not isinstance(document, dict) or document.get("kind") != KIND:
        raise TuningFileError(f"profile {path}: not a FADE tuning profile (no \"kind\": \"{KIND}\")")
    version = document.get("schema_version")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise TuningFileError(f"profile {path}: schema_version {repr(version)[:40]}, this FADE reads {SCHEMA_VERSION}; "
                              "re-run `fade tune`")  # fmt: skip
    missing = [name for name in REQUIRED_FIELDS if name not in document]
    if missing:
        raise TuningFileError(f"profile {path}: missing field(s) {', '.join(missing)}; re-run `fade tune`")
    table = load_knobs()
    problem = (
        schema_problem(document, TUNING)
        or _knobs_problem(document["knobs"], "knobs", table)
        or _knobs_problem(document.get("changed") or {}, "changed", table)
        or _shape_problem(document)
        or check_env(document["env"], document["knobs"], table)
    )
    if problem:
        raise TuningFileError(f"profile {path}: {printable(problem)}; re-run `fade tune`")
    profile = {name: document.get(name) for name in TUNING}
    for name, default in DEFAULTS.items():
        if profile[name] is None:
            profile[name] = default()
    profile.update(schema_version=SCHEMA_VERSION, kind=KIND, knobs=dict(profile["knobs"]), env=dict(profile["env"]))
    profile["env_lines"] = [export_line(name, value) for name, value in sorted(profile["env"].items())]
    profile["python_snippet"] = python_snippet(profile["knobs"], profile["mode"])
    return profile


def check_cache_paths(env: dict, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """Why the tune-cache variables of a checked `env` may not be applied here, or None: Inductor, Triton and MIOpen
    load compiled kernels from those directories, so a file from elsewhere must not choose them. Only paths inside
    this user's FADE tune cache (cache.default_base) are applied. Reading and showing such a file is harmless;
    load_tuning and `fade tune --show --env` call this first."""
    from fade.act.tune.cache import ENV_PATHS, default_base

    base = os.path.abspath(str(default_base(environ)))  # a relative XDG_CACHE_HOME still names one directory
    for name, value in sorted(env.items()):
        if name in ENV_PATHS and os.path.commonpath([os.path.abspath(value), base]) != base:
            return (f"env.{name} points outside this user's FADE tune cache ({base}): compiled kernels are loaded "
                    "from there, so a tuning file from elsewhere may not choose it; nothing is applied (tune again "
                    "here, or remove the cache variables from the file)")  # fmt: skip
    return None


def check_env(env, knobs: dict, table: list) -> Optional[str]:
    """Why `env` may not be set from a tuning file with `knobs`, or None. A tuning file may come from anyone, and
    a variable such as BASH_ENV, LD_PRELOAD or PYTHONPATH runs their code in every later process (issue 30), so
    a name must be an identifier and either a variable of the knob table's env columns, with the value the
    table gives for the file's value of that knob, or one of the tune cache's paths (cache.ENV_PATHS), an
    absolute path (applying one also needs check_cache_paths). Checked for the whole file before anything is
    applied."""
    from fade.act.tune.cache import ENV_PATHS
    from fade.analyze.knobs import config_env

    if not isinstance(env, dict):
        return "env must be an object"
    for name in env:
        if not ENV_NAME.fullmatch(name):
            return f"env name {name[:40]!r} is not a valid environment variable name ({ENV_NAME.pattern})"
    for name, value in env.items():
        if not isinstance(value, str) or CONTROL_CHARACTERS.search(value):
            return f"env.{name} must be a string without NUL bytes or other control characters"
    expected = config_env(table, knobs)
    for name, value in sorted(env.items()):
        owners = [knob for knob in table if any(name in variables for variables in knob.env.values())]
        if name in ENV_PATHS:
            if not os.path.isabs(value) or ".." in Path(value).parts or len(value) > MAX_PATH_CHARS:
                return f"env.{name} must be an absolute path (the tune cache's), got {value[:60]!r}"
        elif owners:
            if expected.get(name) != value:
                knob_values = ", ".join(f"{knob.id}={knobs.get(knob.id, knob.baseline)}" for knob in owners)
                wanted = repr(expected[name]) if name in expected else "nothing"
                return (f"env.{name}={value[:40]!r} is not what data/knobs.toml sets for {knob_values} ({wanted}); "
                        "refusing the whole file")
        else:
            return (f"env.{name} is not a variable FADE sets: a tuning file may set only the env columns of "
                    "data/knobs.toml and the tune cache's paths; refusing the whole file")
    return None


def _knobs_problem(knobs: dict, where: str, table: list) -> Optional[str]:
    """Why `knobs` ({knob id: value}) is not rows of data/knobs.toml with one of their values, or None."""
    rows = {knob.id: knob for knob in table}
    for name, chosen in knobs.items():
        knob = rows.get(name)
        if knob is None:
            close = difflib.get_close_matches(name, rows, n=1)
            hint = f"; did you mean {close[0]!r}" if close else f" (known: {', '.join(rows)})"
            return f"{where}: {name[:40]!r} is not a knob of data/knobs.toml{hint}"
        if not isinstance(chosen, str):
            return f"{where}.{name} must be a string, one of {'/'.join(knob.values)}"
        if chosen not in knob.values:
            return f"{where}.{name}: {chosen[:40]!r} is not one of its values ({'/'.join(knob.values)})"
    return None


def _shape_problem(document: dict) -> Optional[str]:
    """What the JSON types allow and a tuning file never holds: a mode or a batch FADE does not run."""
    if document["mode"] not in ("train", "infer", "generate"):
        return f"mode must be \"train\", \"infer\" or \"generate\", got {document['mode'][:40]!r}"
    for name in ("batch", "size"):
        if document.get(name) is not None and document[name] < 1:
            return f"{name} must be >= 1, got {document[name]}"
    return None


def check_device(profile: dict, current: dict, *, path="profile") -> list:
    """[] when `profile` was tuned on this device; TuningFileError when it was another's. Returns the stack
    differences (tuned on this device with other versions: still applicable, worth re-tuning)."""
    mismatch = device_facts.device_mismatch(profile["device"], current)
    if mismatch:
        recorded = printable(str(profile["device"].get("name") or profile["device"].get("arch")))
        raise TuningFileError(
            f"profile {path} was tuned on another device ({recorded}; {', '.join(mismatch)}): "
            "run `fade tune` on this machine"
        )
    return [
        printable(difference)  # the file's device strings reach the terminal in load_tuning's warning
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
    mode: str = "train"  # the profile's: train, infer or generate
    model_changes: list = field(default_factory=list)  # what apply(model) did, one line each

    def apply(self, model):
        """`model` with this profile's model-level knobs applied, and `model_changes` saying what was done.
        train/infer: channels_last, then torch.compile (`tuned`; the result may be a new module). generate (a
        transformers causal LM, changed in place and returned): the static KV cache for generate(), its forward
        compiled with the profile's mode, generate() run under the profile's SDPA backend. A profile that
        applied nothing (another device) changes nothing."""
        if not self.applied:
            self.model_changes.append("nothing applied: the profile is another device's")
            return model
        if self.mode != "generate":
            changed = tuned(model, self)
            knobs = self.model_knobs
            if knobs.get("channels_last"):
                self.model_changes.append("model.to(memory_format=torch.channels_last)")
            if knobs.get("compile"):
                self.model_changes.append(f"torch.compile(model, mode={knobs['compile']!r})")
            return changed
        return _apply_generate(model, self.knobs, self.model_changes)


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
    # this process's cache home (the user's), whatever mapping `environ` is: tests and callers pass partial ones
    problem = check_cache_paths(profile["env"])
    if problem:
        raise TuningFileError(f"profile {path}: {problem}")
    knobs = dict(profile["knobs"])
    tuning = Tuning(knobs=knobs, model_knobs=model_knobs(knobs), mode=profile["mode"])
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


def _apply_generate(model, knobs: dict, changes: list):
    """The generate knobs on a transformers causal LM (Tuning.apply), each change said in `changes`."""
    import functools

    import torch

    if knobs.get("kv_cache") == "static":
        model.generation_config.cache_implementation = "static"
        changes.append("model.generation_config.cache_implementation = 'static'")
    compile_mode = knobs.get("decode_compile", "off")
    if compile_mode != "off":
        from fade.measure.suites.llm.generation import compile_arguments, compile_call_text

        model.forward = torch.compile(model.forward, **compile_arguments(compile_mode))
        changes.append(f"model.forward = {compile_call_text('model.forward', compile_mode)}")
    backend = knobs.get("sdpa_backend", "default")
    if backend != "default":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        from fade.measure.step.runner import SDPA_BACKENDS

        choice = getattr(SDPBackend, SDPA_BACKENDS[backend])
        generate = model.generate

        @functools.wraps(generate)
        def generate_with_backend(*args, **kwargs):
            with sdpa_kernel(choice):
                return generate(*args, **kwargs)

        model.generate = generate_with_backend
        changes.append(f"model.generate runs under sdpa_kernel(SDPBackend.{SDPA_BACKENDS[backend]})")
    quant = knobs.get("weight_quant", "none")
    if quant != "none":
        from fade.measure.suites.llm.generation import quantize_weights

        quantize_weights(model, quant)
        changes.append(f"linear weights quantized by torchao ({quant} weight-only)")
    if not changes:
        changes.append("nothing to change: the profile keeps PyTorch's defaults")
    return model


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
    """`export` lines for a shell, from the checked env of `profile` (read_tuning's), never from the file's own
    text; variables already set in `environ` are left out (user values win)."""
    environ = os.environ if environ is None else environ
    return [export_line(name, value) for name, value in sorted(profile["env"].items()) if name not in environ]


def export_line(name: str, value) -> str:
    """`export NAME=VALUE` that a shell's eval runs as exactly that assignment: the value quoted with shlex.quote
    (so `$(...)`, backticks and `;` stay text), the name refused unless it is an identifier."""
    if not ENV_NAME.fullmatch(name):
        raise TuningFileError(f"env name {name[:40]!r} is not a valid environment variable name ({ENV_NAME.pattern})")
    return f"export {name}={shlex.quote(str(value))}"
