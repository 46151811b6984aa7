"""Apply the environment fixes the doctor marks safe, before the GPU runtime starts, and nothing else.

Why env only: the original FADE monkey-patched `torch.cuda.get_device_properties` to report more CUs
and a wider wave. ATen, rocBLAS, hipBLASLt and MIOpen read HIP's C++ property cache, not that Python
attribute, so no kernel changed; only Python callers (and Inductor's heuristics) saw fake numbers
(amd-pitfalls §1.5). What does change behaviour is environment read by the HSA/HIP/MIOpen runtimes at
start-up: HSA_OVERRIDE_GFX_VERSION for an arch the wheel lacks, MIOPEN_FIND_* for known slow solvers.

Rules: a value the user set always wins; every variable set is returned and reported on stderr;
`FADE_APPLIED` lists what FADE set, so a second call (or a child process) sees it and does nothing.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Callable

from fade.analyze.doctor import evaluate
from fade.collect.snapshot import collect_snapshot
from fade.env_change import EnvChange

APPLIED_MARKER = "FADE_APPLIED"


def _gpu_runtime_started() -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001
        return False


def planned_env(snapshot: dict) -> list[tuple[str, str, str, str]]:
    """(name, value, rule id, title) for every safe env fix that applies to this snapshot.

    On a machine whose GPUs need different overrides, HSA_OVERRIDE_GFX_VERSION becomes per KFD node
    (HSA_OVERRIDE_GFX_VERSION_<node>, read before the global one by ROCR's topology.c).
    """
    truths, findings = evaluate(snapshot)
    node_of = {t.index if t.index is not None else f"os{i}": t.kfd_node for i, t in enumerate(truths)}
    safe = [f for f in findings if f["fix_safety"] == "safe" and f["fix_env"]]
    amd_gpus = [t for t in truths if t.vendor == "amd"]
    overrides = {f["fix_env"].get("HSA_OVERRIDE_GFX_VERSION") for f in safe} - {None}
    need_per_node = len(amd_gpus) > sum(1 for f in safe if "HSA_OVERRIDE_GFX_VERSION" in f["fix_env"]) or len(overrides) > 1
    plan, seen = [], set()
    for finding in safe:
        for name, value in finding["fix_env"].items():
            node = node_of.get(finding["device"])
            if name == "HSA_OVERRIDE_GFX_VERSION" and need_per_node and node is not None:
                name = f"HSA_OVERRIDE_GFX_VERSION_{node}"
            if name not in seen:
                seen.add(name)
                plan.append((name, value, finding["id"], finding["title"]))
    return plan


def apply_fade_patches(*, environ: dict | None = None, snapshot: dict | None = None,
                       verbose: bool = True, guard: bool | str = False,
                       profile: str | os.PathLike | None = None,
                       on_message: Callable[[str], None] | None = None,
                       guard_at_exit: Callable | None = None) -> list[EnvChange]:
    """Set the safe env fixes for this machine's GPUs. Call it before the first torch.cuda call.

    Returns every change considered, including the ones skipped because you set the variable.
    profile: a `fade tune` profile; its env lines follow the doctor's fixes (a profile from another
    device warns and applies nothing). Model-level knobs come back from fade.load_tuning(profile).
    guard: True (or "warn"/"strict"/"sampled") also turns fade.guard on for this thread until exit, when
    `guard_at_exit(report)` receives its report; it never starts the GPU runtime, so the env fixes still
    take effect. on_message: receives one line per change and per profile warning when `verbose` (fade.api
    writes them to stderr); this function itself prints nothing.
    """
    environ = os.environ if environ is None else environ
    if _gpu_runtime_started():
        warnings.warn("fade.apply_fade_patches() was called after torch initialized the GPU: HSA/HIP "
                      "variables are read at runtime start-up and will not affect this process. "
                      "Call it before the first torch.cuda call.", RuntimeWarning, stacklevel=2)
    if snapshot is None:
        snapshot = collect_snapshot(torch="static", environ=dict(environ), run_tools=False)
    applied_before = set(filter(None, environ.get(APPLIED_MARKER, "").split(",")))
    changes = []
    for name, value, rule, title in planned_env(snapshot):
        if name in applied_before:
            status = "already-set-by-fade"
            value = environ.get(name, value)
        elif name in environ:
            status, value = "kept-user-value", environ[name]
        else:
            environ[name] = value
            applied_before.add(name)
            status = "set"
        changes.append(EnvChange(name, value, status, rule, title))
    if applied_before:
        environ[APPLIED_MARKER] = ",".join(sorted(applied_before))
    if profile is not None:
        from fade.act.tune.tuning_file import load_tuning

        tuning = load_tuning(profile, environ=environ, verbose=False)
        for name, value, status in tuning.env:
            status = {"already-set": "already-set-by-fade"}.get(status, status)
            changes.append(EnvChange(name, value, status, "TUNE", "tuning profile"))
        if verbose and on_message is not None:
            for message in tuning.warnings:
                on_message(message)
    if verbose and on_message is not None:
        for change in changes:
            on_message(str(change))
    if guard:
        from fade.hostwork import enable_process_guard

        enable_process_guard(mode=guard if isinstance(guard, str) else "warn", at_exit=guard_at_exit)
    return changes
