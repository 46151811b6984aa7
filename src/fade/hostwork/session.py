"""`fade.guard`: a context manager and decorator that reports host work, copies and syncs inside a GPU region.

How it works: entering pushes a TorchDispatchMode (fade.hostwork.mode) on the thread; every ATen op then passes
through it: it runs the op, times it on the host clock and asks fade.hostwork.classify whether it was an
offence, which `Guard._record` files per (kind, the user's file:line, copy direction). fade.hostwork.hooks adds
what a mode cannot see: backends' CPU-fallback warnings, explicit synchronize calls, optimizer steps.

Syncs are counted once per host wait. On CUDA, warn and strict also switch on the sync debug mode, which
warns at every wait, including those an op the mode already counted makes (`.item()`, a blocking copy). Its
warnings reach Python only when the outermost Python binding returns, after the op's dispatch has ended
(torch's PyWarningHandler buffers a kernel's TORCH_WARN until then; benchmarks/guard_sync_debug_probe.py
shows the order on a GPU), so they cannot be matched to the op that caused them. Instead each host wait
an op was counted for leaves one warning "due" at its line; a warning at that line settles a due one, and
only a warning with none due (a wait inside a kernel: CPU-index indexing, printing a tensor) becomes a
sync record. Approximation: a counted wait that never warns (a copy of zero elements) leaves its warning
due, and the next hidden wait at that same line is taken for it.

Modes:
- "warn": every op is inspected; the first offence at each line raises a FadeGuardWarning located at that
  line (so Python prints it as coming from the user's code).
- "strict": every op is inspected; the first offence raises GuardViolation naming the line.
- "sampled": like warn, but only every `sample_every`-th step is inspected and the mode is popped in
  between, so uninspected steps pay nothing. Steps end at `Guard.step()` or, if that is never called, at
  every `optimizer.step()`.

Scope: the thread that entered the guard, plus autograd's worker threads (torch copies the mode stack into
them). Other threads are not watched; give them their own guard.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import threading
import warnings
import weakref
from dataclasses import dataclass, field

from fade.errors import FadeUsageError
from fade.hostwork import hooks
from fade.hostwork.callsite import current_call_site, display_path
from fade.hostwork.report import GuardReport, SiteRecord

MODES = ("warn", "strict", "sampled")
# Sampled mode inspects one step in this many, so its overhead is about the full mode's divided by it
# (benchmarks/guard_overhead.py measures both on resnet50).
DEFAULT_SAMPLE_EVERY = 20
KIND_ORDER = ("sync", "copy", "cpu_compute", "device_mix", "backend_fallback")


class GuardViolation(RuntimeError):
    """Raised by a strict guard at an offence. `record` is the SiteRecord it was counted in."""

    def __init__(self, message: str, record: SiteRecord):
        super().__init__(message)
        self.record = record


class FadeGuardWarning(UserWarning):
    """Issued once per new (kind, line) by warn and sampled guards, located at the user's line."""


def guard(mode: str = "warn", device=None, *, sample_every: int = DEFAULT_SAMPLE_EVERY,
          sync_debug: bool | None = None, quiet: bool = False) -> Guard:
    """A guard over a GPU region: `with fade.guard(): ...` or `@fade.guard(mode="strict")`.

    device: the accelerator's device type ("cuda" on NVIDIA and ROCm, "xpu", "mps", a PrivateUse1 name);
        None picks the accelerator torch was built for (without starting its runtime). With none, the guard
        has nothing to watch.
    sample_every: sampled mode only; inspect one step in this many.
    sync_debug: on CUDA, also switch on torch.cuda.set_sync_debug_mode("warn") while the guard is active,
        to catch syncs inside kernels. None means on for warn and strict, off for sampled.
    quiet: record only; no FadeGuardWarning per new offence (read `.report` instead).
    """
    return Guard(mode, device, sample_every=sample_every, sync_debug=sync_debug, quiet=quiet)


_active_guards: weakref.WeakSet = weakref.WeakSet()  # guards with an open entry, for the fork handler


def _quiet_after_fork() -> None:
    """In a forked child (DataLoader workers under Linux's default start method) the parent's guards are
    copies whose records nobody will read: stop inspecting, so the workers' CPU work runs at full speed."""
    for forked in list(_active_guards):
        forked._disabled = True
        forked.inspecting = False
        try:
            forked._toggle_here(False)
        except Exception:  # noqa: BLE001 - best effort in a fresh child; the mode then passes ops through
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_quiet_after_fork)


@dataclass
class _Entry:
    mode: object  # the GuardMode pushed for this `with`
    below: object  # the dispatch mode under ours when we entered (None for none)
    pushed: bool = False
    hooked: list = field(default_factory=list)


def _device_type(device) -> str | None:
    """The accelerator's device type from what the user gave, or torch's current accelerator."""
    import torch

    if device is None:
        # The accelerator torch was built for, without asking the runtime whether a device is present: asking
        # would initialize CUDA/HIP before the user's script runs and freeze CUDA_VISIBLE_DEVICES and friends.
        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None and hasattr(accelerator, "current_accelerator"):
            found = accelerator.current_accelerator()
            return found.type if found is not None else None
        return "cuda" if torch.backends.cuda.is_built() else None
    try:
        device_type = torch.device(device).type
    except (RuntimeError, TypeError) as exc:
        hint = "; call fade.ocl.register() first" if str(device).split(":", 1)[0] == "ocl" else ""
        raise FadeUsageError(f"fade.guard: device {device!r} is not a torch device ({str(exc).splitlines()[0]})"
                             f"{hint}") from None
    if device_type == "cpu":
        raise FadeUsageError("fade.guard: device='cpu' is the host; give the accelerator's device type "
                             "(cuda, xpu, mps, ...) or leave device=None")
    return device_type


def _accelerator_memory_in_use(device_type: str) -> bool:
    """Whether the device's allocator holds memory now. Never starts a runtime: torch.cuda returns 0 before
    CUDA is initialized."""
    import torch

    module = getattr(torch, device_type, None)
    for name in ("memory_allocated", "current_allocated_memory"):
        function = getattr(module, name, None)
        if function is not None:
            try:
                return function() > 0
            except Exception:  # noqa: BLE001 - a backend without allocator stats: unknown, so not in use
                return False
    return False


class Guard(contextlib.ContextDecorator):
    """Full control over one guard; `fade.guard(...)` builds one. Re-entrant, usable from several threads
    (each `with` gets its own dispatch mode; the records are shared and locked)."""

    def __init__(self, mode: str = "warn", device=None, *, sample_every: int = DEFAULT_SAMPLE_EVERY,
                 sync_debug: bool | None = None, quiet: bool = False, memory_counts_as_use: bool = True):
        if mode not in MODES:
            close = difflib.get_close_matches(str(mode), MODES, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise FadeUsageError(f"fade.guard: mode {mode!r} is not one of {', '.join(MODES)}{hint}")
        if isinstance(sample_every, bool) or not isinstance(sample_every, int) or sample_every < 1:
            raise FadeUsageError(f"fade.guard: sample_every must be a positive integer, got {sample_every!r}")
        self.mode = mode
        self.quiet = quiet
        self._device_arg = device
        # The accelerator's device type, resolved at the first entry, so building a guard never imports torch
        # when the device is left to torch (the pytest plugin builds one per test).
        self.device_type: str | None = None
        self._resolved = False
        if device is not None:
            self._device_arg = _device_type(device)  # check it now: a bad device is the caller's error
        self.sample_every = sample_every if mode == "sampled" else 1
        self._sync_debug = (mode != "sampled") if sync_debug is None else sync_debug
        # memory_counts_as_use: accelerator memory held when the guard is entered makes it a GPU region from
        # the start (a model moved to the GPU before the loop). The pytest plugin turns it off, so a fixture's
        # GPU tensors do not make a CPU-only test a GPU region.
        self._memory_counts_as_use = memory_counts_as_use
        self._lock = threading.RLock()
        self._records: dict[tuple, SiteRecord] = {}
        self._notes: list[str] = []
        self._local = threading.local()
        self._active = 0  # entries open on all threads
        self._owner_thread: int | None = None  # whose stack backward ops are charged to
        self._accelerator_in_use = False
        self._sync_debug_armed = False
        # [(file, line), n]: n host waits counted from ops at that line whose sync-debug warnings have not
        # arrived yet (see the module docstring). One line at a time: the warnings follow within the call.
        self._sync_warnings_due: list = [None, 0]
        self._explicit_steps = False
        self._disabled = False  # set in a forked child: never inspect again
        self._steps_seen = 0
        self._steps_inspected = 0
        self.inspecting = True  # whether the current step is inspected (always, unless sampled)

    # ---- public -------------------------------------------------------------------------------------------

    @property
    def report(self) -> GuardReport:
        """A snapshot of what was seen so far."""
        with self._lock:
            records = sorted(self._records.values(),
                             key=lambda r: (KIND_ORDER.index(r.kind), -r.count, r.file, r.line))
            records = [SiteRecord(**{**vars(r), "ops": dict(r.ops), "first_stack": list(r.first_stack)})
                       for r in records]
            return GuardReport(self.mode, self.device_type, self.sample_every, self._steps_seen,
                               self._steps_inspected, records, list(self._notes))

    def step(self) -> None:
        """Mark the end of a training step. From the first call on, optimizer steps no longer count as step
        ends, and the steps they ended so far count as the first step."""
        if not self._explicit_steps:
            self._explicit_steps = True
            with self._lock:
                self._steps_seen = self._steps_inspected = 0
                inspecting_before, self.inspecting = self.inspecting, True
            if not inspecting_before:
                self._toggle_here(True)
        self._advance_step()

    def clear(self) -> None:
        """Forget every record (steps and settings stay)."""
        with self._lock:
            self._records.clear()

    # ---- entering and leaving -----------------------------------------------------------------------------

    def _entries(self) -> list[_Entry]:
        entries = getattr(self._local, "entries", None)
        if entries is None:
            entries = self._local.entries = []
        return entries

    def __enter__(self) -> Guard:
        import torch

        from fade.hostwork.mode import GuardMode, top_mode

        with self._lock:
            if not self._resolved:
                self.device_type = _device_type(self._device_arg)
                self._resolved = True
                if self.device_type is None:
                    self._notes.append("no accelerator found: the guard had nothing to watch (pass device=...)")
                elif not hasattr(torch.utils._python_dispatch.TorchDispatchMode, "ignore_compile_internals"):
                    self._notes.append(f"torch {torch.__version__} < 2.9: torch.compile regions under the "
                                       "guard ran eagerly (Dynamo skips frames while a dispatch mode is on)")
            if self._owner_thread is None:
                self._owner_thread = threading.get_ident()
            self._active += 1
            first = self._active == 1
        entry = _Entry(mode=GuardMode(self), below=top_mode())
        self._entries().append(entry)
        if self.device_type is None:
            return self
        if first and self._memory_counts_as_use and not self._accelerator_in_use:
            self._accelerator_in_use = _accelerator_memory_in_use(self.device_type)
        _active_guards.add(self)
        hooks.thread_state().entered.append(self)
        hooks.install_warning_capture()
        hooks.install_fallback_listener(self.device_type)
        hooks.patch_explicit_syncs(self.device_type)
        hooks.install_step_hook()
        entry.hooked = [hooks.remove_step_hook, lambda: hooks.unpatch_explicit_syncs(self.device_type),
                        lambda: hooks.remove_fallback_listener(self.device_type), hooks.remove_warning_capture]
        if first and self._accelerator_in_use:
            # A GPU region from the start (memory held, or an earlier entry used the device): arm the sync debug
            # mode now, after the warning capture is in place, since no op will be the "first use".
            self._first_accelerator_use()
        if self.inspecting:
            entry.mode.__enter__()
            entry.pushed = True
        return self

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        from fade.hostwork.mode import remove_buried_mode, top_mode

        entry = self._entries().pop()
        if entry.pushed:
            if top_mode() is entry.mode:
                entry.mode.__exit__(None, None, None)
            else:
                remove_buried_mode(entry.mode)
                warnings.warn("fade.guard: a dispatch mode entered inside the guard was still active when the "
                              "guard ended; it was left in place", RuntimeWarning, stacklevel=2)
        for undo in entry.hooked:
            undo()
        if entry.hooked:
            entered = hooks.thread_state().entered
            del entered[len(entered) - 1 - entered[::-1].index(self)]  # this guard's innermost entry here
        with self._lock:
            self._active -= 1
            last = self._active == 0
            if last:
                self._owner_thread = None
                _active_guards.discard(self)
                if self._sync_debug_armed:
                    self._sync_debug_armed = False
                    hooks.disarm_cuda_sync_debug()
        return None

    # ---- steps and sampling ---------------------------------------------------------------------------------

    def _on_optimizer_step(self) -> None:
        if not self._explicit_steps:
            self._advance_step()

    def _advance_step(self) -> None:
        if self._disabled:
            return
        with self._lock:
            if self.inspecting:
                self._steps_inspected += 1
            self._steps_seen += 1
            inspect_next = self._steps_seen % self.sample_every == 0
            changed = inspect_next != self.inspecting
            self.inspecting = inspect_next
        if changed:
            self._toggle_here(inspect_next)

    def _toggle_here(self, inspect: bool) -> None:
        """Push or pop this thread's modes at a step boundary, only where that keeps the mode stack in order;
        an entry that cannot be toggled stays as it is, and `inspecting` makes it pass ops straight through."""
        from fade.hostwork.mode import top_mode

        entries = self._entries()
        if inspect:
            for entry in entries:
                if not entry.pushed and top_mode() is entry.below:
                    entry.mode.__enter__()
                    entry.pushed = True
        else:
            for entry in reversed(entries):
                if entry.pushed and top_mode() is entry.mode:
                    entry.mode.__exit__(None, None, None)
                    entry.pushed = False

    # ---- per op -------------------------------------------------------------------------------------------

    def _first_accelerator_use(self) -> None:
        """The region uses the accelerator: CPU compute from now on is an offence; on CUDA, arm the sync debug
        mode (only now, so the guard never initializes CUDA itself). Idempotent."""
        self._accelerator_in_use = True
        if self._sync_debug and self.device_type == "cuda":
            with self._lock:
                if not self._sync_debug_armed:
                    self._sync_debug_armed = True
                    hooks.arm_cuda_sync_debug()

    def _add_captured(self, findings: list, captured: list) -> tuple[list, bool]:
        """Warnings raised while one op ran (a kernel that warns from Python, as the stand-in does): a backend
        fallback is its own finding; a sync-debug warning adds a sync only if the op is not already counted as
        a host wait (a sync, or a blocking copy: then it is the same event). Also returns whether a sync-debug
        warning came, so no warning is left due for this op."""
        from fade.hostwork.classify import Finding

        findings = list(findings)
        host_waits = any(finding.host_waits for finding in findings)
        sync_warned = False
        for kind, _text in captured:
            if kind == "backend_fallback":
                findings.append(Finding("backend_fallback", "", 0))
            elif kind == "sync_debug":
                sync_warned = True
                if not host_waits:
                    findings.append(Finding("sync", "", 0))
                    host_waits = True
        return findings, sync_warned

    def _on_warning(self, kind: str, text: str) -> None:
        """A captured warning outside any op's dispatch: a backend warning from Python code, or a CUDA sync-debug
        warning, which arrives when the Python call that caused it returns (see the module docstring)."""
        from fade.hostwork.classify import Finding

        match = hooks.OP_IN_WARNING.search(text)
        if kind == "backend_fallback":
            self._record([Finding("backend_fallback", "", 0)], match.group(1) if match else "backend warning", 0)
        elif kind == "sync_debug":
            site = current_call_site(self._owner_thread)
            if site is None:
                return
            with self._lock:
                due_at, due = self._sync_warnings_due
                if due and due_at == (site.file, site.line):
                    self._sync_warnings_due[1] -= 1  # the wait of an op already counted at this line
                    return
            self._record([Finding("sync", "", 0)], "sync inside a kernel (torch.cuda sync debug mode)", 0,
                         site=site)

    def _on_explicit_sync(self, label: str, elapsed_ns: int) -> None:
        from fade.hostwork.classify import Finding

        if self.inspecting:
            self._record([Finding("sync", "", 0)], label, elapsed_ns)

    def _record(self, findings: list, op: str, elapsed_ns: int, *, may_raise: bool = True, site=None,
                sync_warnings_due: bool = False) -> None:
        """File findings at the user's line (`site`, found here if not given). sync_warnings_due: CUDA's sync
        debug mode will warn once, later, for each host wait among these findings."""
        site = site or current_call_site(self._owner_thread)
        if site is None or site.in_compiler:
            return  # no user frame anywhere, or torch.compile at work: torch's own, nothing the user can change
        if site.in_data_loading:
            findings = [finding for finding in findings if finding.kind != "cpu_compute"]
        new_records = []
        with self._lock:
            for finding in findings:
                key = (finding.kind, finding.direction, site.file, site.line)
                record = self._records.get(key)
                if record is None:
                    record = SiteRecord(
                        kind=finding.kind, file=site.file, line=site.line, function=site.function, code=site.code,
                        direction=finding.direction,
                        first_stack=[f"{display_path(f)}:{n} in {name}" for f, n, name in site.stack],
                        in_backward=threading.get_ident() != self._owner_thread)
                    self._records[key] = record
                    new_records.append(record)
                if record.last_step != self._steps_seen:
                    record.last_step = self._steps_seen
                    record.steps += 1
                record.count += 1
                record.syncs += finding.syncs
                record.total_ms += elapsed_ns / 1e6
                record.total_bytes += finding.nbytes
                record.ops[op] = record.ops.get(op, 0) + 1
            waits = sum(finding.host_waits for finding in findings) if sync_warnings_due else 0
            if waits:  # before a strict raise: the warnings still arrive as the exception unwinds
                line = (site.file, site.line)
                due_at, due = self._sync_warnings_due
                self._sync_warnings_due = [line, waits + (due if due_at == line else 0)]
        if self.mode == "strict" and may_raise and findings:
            record = self._records[(findings[0].kind, findings[0].direction, site.file, site.line)]
            raise GuardViolation(_describe(record, op, strict=True), record)
        if not self.quiet:
            for record in new_records:
                warnings.warn_explicit(_describe(record, op), FadeGuardWarning, record.file, record.line)


def _describe(record: SiteRecord, op: str, strict: bool = False) -> str:
    from fade.hostwork.report import OP_HINTS

    hint = OP_HINTS.get(op) or OP_HINTS.get(op.split(".")[0])
    text = f"fade.guard: {record.what} at {record.site}: {op}"
    if hint:
        text += f" ({hint})"
    if record.direction:
        text += f", {record.total_bytes} bytes so far"
    if record.syncs:
        text += " (blocking: the host waits for it)"
    if record.in_backward:
        text += " [in backward]"
    if strict and record.code:
        text += f"\n    {record.code}"
    return text
