"""Host work inside GPU regions, made visible per line of the user's code: CPU compute, host<->device copies,
syncs, device mixing and backends' CPU fallbacks. This package is the machinery behind the `fade.guard()`
function (named for what it finds, so that `fade.guard` is only ever the function, never this package).

    with fade.guard():                  # or @fade.guard(mode="strict"), or mode="sampled"
        train_one_epoch()
    fade.apply_fade_patches(guard=True) # the whole process; summary at exit
    fade watch -- python train.py       # an unmodified script

Layout: callsite (the user's line) -> classify (is this op an offence?) -> session (Guard, the dispatch path)
-> report (records, JSON); fade.report.guard renders the table; hooks (warnings, synchronize, optimizer steps), process
(process-wide guard and `fade watch`'s runner), standin (a host-backed device for tests), pytest_plugin;
storages and host_fallback (device storages over memory FADE owns, and the CPU fallback) are shared by standin
and fade.ocl.

Importing this package does not import torch. `import fade` does not import it either: fade.api imports it
when `fade.guard()` is first called.
"""

from fade.hostwork.process import enable_process_guard, run_watched
from fade.hostwork.report import KINDS, GuardReport, SiteRecord
from fade.hostwork.session import DEFAULT_SAMPLE_EVERY, MODES, FadeGuardWarning, Guard, GuardViolation, guard

__all__ = ["guard", "Guard", "GuardReport", "SiteRecord", "GuardViolation", "FadeGuardWarning",
           "enable_process_guard", "run_watched", "KINDS", "MODES", "DEFAULT_SAMPLE_EVERY"]
