"""The TorchDispatchMode a guard pushes: every ATen op on this thread (and on autograd's workers) passes here.

This is the guard's hot path (once per op while inspecting): run the op, time it on the host clock, classify
it; only an offence goes on to the slower bookkeeping in `Guard._record`.
"""

from __future__ import annotations

import time

from torch.utils._python_dispatch import (
    TorchDispatchMode,
    _get_current_dispatch_mode,
    _get_current_dispatch_mode_stack,
    _pop_mode,
    _push_mode,
)

from fade.hostwork import hooks
from fade.hostwork.classify import classify, op_name


class GuardMode(TorchDispatchMode):
    """Hands each op to its guard. One instance per `with guard:` entry, so nesting and threads stay apart."""

    def __init__(self, guard):
        super().__init__()
        self.guard = guard

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # torch >= 2.9 (PR #161648): the mode is off while Dynamo/Inductor compile and on when the compiled
        # code runs, so compiled regions stay compiled and are opaque to the guard. Older torch never calls
        # this: Dynamo then skips frames under a mode and the region runs eagerly, fully visible.
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        guard = self.guard
        if kwargs is None:
            kwargs = {}
        if not guard.inspecting:  # a sampled guard whose mode could not be popped at the step boundary
            return func(*args, **kwargs)
        handling = hooks.thread_state().handling
        call = [guard, []]  # [guard, warnings captured while the op runs]
        handling.append(call)
        start = time.perf_counter_ns()
        try:
            outputs = func(*args, **kwargs)
        except BaseException:
            handling.pop()
            findings, _ = classify(func, args, kwargs, None, guard.device_type, guard._accelerator_in_use)
            if findings:  # e.g. a device mix torch refused: counted, but torch's own error is what the user sees
                guard._record(findings, op_name(func), 0, may_raise=False)
            raise
        elapsed_ns = time.perf_counter_ns() - start
        handling.pop()
        findings, touched = classify(func, args, kwargs, outputs, guard.device_type, guard._accelerator_in_use)
        if touched and not guard._accelerator_in_use:
            guard._first_accelerator_use()
        sync_warned = False
        if call[1]:
            findings, sync_warned = guard._add_captured(findings, call[1])
        if findings:
            # Not gated on the guard arming the sync debug mode: a user may have armed it.
            guard._record(findings, op_name(func), elapsed_ns, sync_warnings_due=not sync_warned)
        return outputs


def top_mode():
    """The innermost torch dispatch mode on this thread, or None."""
    return _get_current_dispatch_mode()


def remove_buried_mode(mode) -> None:
    """Take `mode` out of this thread's mode stack when other modes sit above it (a mode the user entered
    inside the guard and never left): lift those off, leave ours properly, put them back as they were."""
    if not any(stacked is mode for stacked in _get_current_dispatch_mode_stack()):
        return
    above = []
    while _get_current_dispatch_mode() is not mode:
        above.append(_pop_mode())
    mode.__exit__(None, None, None)
    for stacked in reversed(above):
        _push_mode(stacked)
