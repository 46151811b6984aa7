"""Process-wide hooks that guards share: captured warnings, explicit synchronize calls and optimizer steps.

Each hook is installed when the first guard becomes active and removed when the last one leaves, and every
event is routed only to the guards of the thread it happened on (see `guards_here`). Warnings are the
channel for two things a dispatch mode cannot see: an out-of-tree backend running an op on the CPU (MPS,
DirectML and similar say "... will fall back to run on the CPU") and syncs inside C++ kernels reported by
`torch.cuda.set_sync_debug_mode("warn")`. A backend that counts every fallback itself (fade.ocl, which warns
only at an op's first) reports them through a listener instead (install_fallback_listener).
"""

from __future__ import annotations

import functools
import re
import threading
import time
import warnings

FALLBACK_WARNING = re.compile(r"fall(?:s|ing)?\s*back to (?:run on )?(?:the )?CPU", re.IGNORECASE)
SYNC_DEBUG_WARNING = re.compile(r"called a synchronizing \w+ operation")
SYNC_DEBUG_NOTICE = re.compile(r"Synchronization debug mode is a prototype feature")
OP_IN_WARNING = re.compile(r"'((?:aten|[A-Za-z_]\w*)::[\w.]+)'")

_lock = threading.RLock()
_local = threading.local()


class ThreadState:
    """Per thread: guards entered here (outermost first) and the ops being dispatched right now."""

    def __init__(self):
        self.entered: list = []  # Guard objects
        self.handling: list = []  # [guard, captured warnings] for each op inside a guard's dispatch, innermost last
        self.in_explicit_sync = 0  # inside a watched synchronize(): its sync-debug warning is the same event


def thread_state() -> ThreadState:
    state = getattr(_local, "state", None)
    if state is None:
        state = _local.state = ThreadState()
    return state


def guards_here() -> list:
    """Guards that should hear about an event on this thread: the guards dispatching an op right now, else the
    guards entered on this thread that are inspecting, else the guards whose mode is on this thread's mode
    stack without having been entered here (autograd's worker threads inherit the stack: a Python backward's
    `.item()` warns there, after its op's dispatch has ended)."""
    state = thread_state()
    if state.handling:
        return [guard for guard, _ in state.handling]
    if state.entered:
        return [guard for guard in state.entered if guard.inspecting]
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    from fade.hostwork.mode import GuardMode

    return [mode.guard for mode in _get_current_dispatch_mode_stack()
            if isinstance(mode, GuardMode) and mode.guard.inspecting]


# ---- warnings -------------------------------------------------------------------------------------------

_warning_users = 0
_original_showwarning = None
_always_filters: list = []
_sync_debug_armed = 0
_sync_debug_before = None


def _classify_warning(text: str) -> str | None:
    if text.startswith(LISTENED_WARNING_PREFIXES):
        return None  # that backend tells guards of every fallback through its listener (install_fallback_listener)
    if FALLBACK_WARNING.search(text):
        return "backend_fallback"
    if SYNC_DEBUG_WARNING.search(text):
        return "sync_debug"
    if SYNC_DEBUG_NOTICE.search(text):
        return "notice"
    return None


def _showwarning(message, category, filename, lineno, file=None, line=None):
    text = str(message)
    kind = _classify_warning(text)
    if kind == "notice" and _sync_debug_armed:
        return  # our own set_sync_debug_mode call prints it; the user did not ask for it
    if kind == "sync_debug" and thread_state().in_explicit_sync:
        return
    if kind in ("backend_fallback", "sync_debug"):
        if _route(kind, text):
            return
        if kind == "sync_debug" and _sync_debug_armed:
            return  # a sync on a thread no guard watches, reported only because we armed the debug mode
    original = _original_showwarning or warnings._showwarning_orig
    original(message, category, filename, lineno, file, line)


def _route(kind: str, text: str) -> bool:
    """Hand an event to the guards of this thread: to the op being dispatched, else to the guards themselves.
    False when no guard is listening here."""
    state = thread_state()
    if state.handling:
        for entry in state.handling:
            entry[1].append((kind, text))
        return True
    guards = guards_here()
    for guard in guards:
        guard._on_warning(kind, text)
    return bool(guards)


# ---- backends that report their CPU fallbacks through a listener --------------------------------------------

# device type -> the module whose add_fallback_listener/remove_fallback_listener report every CPU fallback by
# op name. fade.ocl warns only at an op's first fallback, so guards count its fallbacks through the listener.
FALLBACK_LISTENER_MODULES = {"ocl": "fade.ocl"}
LISTENED_WARNING_PREFIXES = ("fade.ocl:",)  # those backends' own warnings, which the listener already covers
_listener_users: dict = {}


def _on_listened_fallback(op_name: str) -> None:
    _route("backend_fallback", f"'{op_name}' ran on the CPU: the backend has no kernel for it")


def install_fallback_listener(device_type: str | None) -> None:
    """Subscribe guards to `device_type`'s fallback listener (FALLBACK_LISTENER_MODULES), once per process."""
    module_name = FALLBACK_LISTENER_MODULES.get(device_type or "")
    if module_name is None:
        return
    import importlib

    with _lock:
        _listener_users[module_name] = _listener_users.get(module_name, 0) + 1
        if _listener_users[module_name] == 1:
            importlib.import_module(module_name).add_fallback_listener(_on_listened_fallback)


def remove_fallback_listener(device_type: str | None) -> None:
    module_name = FALLBACK_LISTENER_MODULES.get(device_type or "")
    if module_name is None or not _listener_users.get(module_name):
        return
    import importlib

    with _lock:
        _listener_users[module_name] -= 1
        if _listener_users[module_name] == 0:
            importlib.import_module(module_name).remove_fallback_listener(_on_listened_fallback)


def install_warning_capture() -> None:
    """Route fallback and sync-debug warnings to guards. The 'always' filters make every occurrence reach the
    hook: torch's warnings would otherwise show once per location and the counts would be wrong."""
    global _warning_users, _original_showwarning
    with _lock:
        _warning_users += 1
        if _warning_users > 1:
            return
        _original_showwarning = warnings.showwarning
        warnings.showwarning = _showwarning
        for pattern in (FALLBACK_WARNING, SYNC_DEBUG_WARNING):
            warnings.filterwarnings("always", message=f"(?i).*{pattern.pattern}")
            _always_filters.append(warnings.filters[0])


def remove_warning_capture() -> None:
    global _warning_users, _original_showwarning
    with _lock:
        _warning_users -= 1
        if _warning_users > 0:
            return
        if warnings.showwarning is _showwarning:
            warnings.showwarning = _original_showwarning
        _original_showwarning = None
        for entry in _always_filters:
            if entry in warnings.filters:
                warnings.filters.remove(entry)
        _always_filters.clear()
        # Drop the per-module "already shown" caches built under our filters (3.14 renamed the private hook).
        mutated = getattr(warnings, "_filters_mutated", None) or getattr(warnings, "_filters_mutated_lock_held", None)
        if mutated is not None:
            mutated()


def arm_cuda_sync_debug() -> None:
    """`torch.cuda.set_sync_debug_mode("warn")` while guards run, so syncs inside CUDA kernels (indexing with a
    CPU index, pageable H2D, stream syncs) are reported too. Global torch state: restored by the last disarm.
    Only called once CUDA is in use, so it never initializes CUDA itself."""
    global _sync_debug_armed, _sync_debug_before
    import torch

    with _lock:
        _sync_debug_armed += 1
        if _sync_debug_armed == 1:
            _sync_debug_before = torch.cuda.get_sync_debug_mode()
            if _sync_debug_before == 0:
                torch.cuda.set_sync_debug_mode("warn")


def disarm_cuda_sync_debug() -> None:
    global _sync_debug_armed
    import torch

    with _lock:
        _sync_debug_armed -= 1
        if _sync_debug_armed == 0 and _sync_debug_before == 0:
            torch.cuda.set_sync_debug_mode(_sync_debug_before)


# ---- explicit synchronize calls ---------------------------------------------------------------------------

_sync_patches: dict = {}  # device type -> (users, [(owner, name, original, wrapper)])


def _sync_targets(device_type: str):
    """(owner object, attribute name, label) for each synchronize function of this device type."""
    import torch

    module = getattr(torch, device_type, None)
    targets = []
    if module is not None and callable(getattr(module, "synchronize", None)):
        targets.append((module, "synchronize", f"torch.{device_type}.synchronize()"))
    for class_name in ("Stream", "Event"):
        cls = getattr(module, class_name, None)
        if isinstance(cls, type) and "synchronize" in cls.__dict__:
            targets.append((cls, "synchronize", f"torch.{device_type}.{class_name}.synchronize()"))
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and callable(getattr(accelerator, "synchronize", None)):
        targets.append((accelerator, "synchronize", "torch.accelerator.synchronize()"))
    return targets


def _make_sync_wrapper(original, label: str):
    import torch

    @functools.wraps(original)
    def synchronize_watched(*args, **kwargs):
        state = thread_state()
        outermost = state.in_explicit_sync == 0  # one synchronize calling another is one sync
        state.in_explicit_sync += 1
        start = time.perf_counter_ns()
        try:
            result = original(*args, **kwargs)
        finally:
            state.in_explicit_sync -= 1
        elapsed_ns = time.perf_counter_ns() - start
        if outermost:
            for guard in guards_here():
                guard._on_explicit_sync(label, elapsed_ns)
        return result

    # Dynamo must not trace into the wrapper: a synchronize inside a compiled region becomes a graph break,
    # which it is in effect anyway (the host waits).
    return torch._disable_dynamo(synchronize_watched) if hasattr(torch, "_disable_dynamo") else synchronize_watched


def patch_explicit_syncs(device_type: str) -> None:
    """Wrap `torch.<device>.synchronize`, its Stream/Event `.synchronize` and `torch.accelerator.synchronize`.
    Code that bound the function before (`from torch.cuda import synchronize`) is not seen."""
    with _lock:
        users, patches = _sync_patches.get(device_type, (0, []))
        if users == 0:
            patches = []
            for owner, name, label in _sync_targets(device_type):
                original = getattr(owner, name)
                wrapper = _make_sync_wrapper(original, label)
                setattr(owner, name, wrapper)
                patches.append((owner, name, original, wrapper))
        _sync_patches[device_type] = (users + 1, patches)


def unpatch_explicit_syncs(device_type: str) -> None:
    with _lock:
        users, patches = _sync_patches.get(device_type, (0, []))
        if users <= 1:
            for owner, name, original, wrapper in reversed(patches):
                if getattr(owner, name, None) is wrapper:  # someone patched over us: leave theirs alone
                    setattr(owner, name, original)
            _sync_patches.pop(device_type, None)
        else:
            _sync_patches[device_type] = (users - 1, patches)


# ---- optimizer steps --------------------------------------------------------------------------------------

_step_hook = None
_step_hook_users = 0
_step_listeners: list = []  # callables(explicit: bool) that hear every step end, any thread (fade.profile)


def _on_optimizer_step(optimizer, args, kwargs) -> None:
    for guard in list(thread_state().entered):
        guard._on_optimizer_step()
    for listener in list(_step_listeners):
        listener(False)


def explicit_step() -> None:
    """`fade.step()`: the end of a training step, said by the user. The guards entered on this thread take it
    as Guard.step() does (from then on optimizer steps no longer count), and so do the step listeners."""
    for guard in list(thread_state().entered):
        guard.step()
    for listener in list(_step_listeners):
        listener(True)


def add_step_listener(listener) -> None:
    """`listener(explicit)` hears every optimizer step (explicit=False) and every fade.step() (True)."""
    install_step_hook()
    with _lock:
        _step_listeners.append(listener)


def remove_step_listener(listener) -> None:
    with _lock:
        if listener in _step_listeners:
            _step_listeners.remove(listener)
    remove_step_hook()


def install_step_hook() -> None:
    """A global `Optimizer.step` post-hook: every optimizer step ends a training step for the guards of the
    thread that called it."""
    global _step_hook, _step_hook_users
    from torch.optim.optimizer import register_optimizer_step_post_hook

    with _lock:
        _step_hook_users += 1
        if _step_hook_users == 1:
            _step_hook = register_optimizer_step_post_hook(_on_optimizer_step)


def remove_step_hook() -> None:
    global _step_hook, _step_hook_users
    with _lock:
        _step_hook_users -= 1
        if _step_hook_users == 0 and _step_hook is not None:
            _step_hook.remove()
            _step_hook = None
