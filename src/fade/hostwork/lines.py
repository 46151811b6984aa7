"""Which lines of the user's code read tensor values back to the host, copy between host and device, or sync,
during the steps a `LineRecorder` is on: the guard's classifier (classify.py) and call sites (callsite.py)
behind a light dispatch mode that only counts, for fade.profile's verdicts.

Unlike a Guard, it warns about nothing and keeps no timings: fade.measure.profile turns it on for one step after
the profiled window (so its per-op cost never shows in the trace) and hands the lines to the summary.
On an accelerator, what classify() calls a sync or a copy is recorded; on a CPU-only run (accelerator None),
every host read (`.item()` and the ops classify.SYNC_OPS names), so the line that would sync on a GPU is still
named. Lines inside FADE itself (its zoo models, its step runner, `python -m fade`'s __main__, which the
call-site walk sees as a user module) are left out: they are not the user's to change.
"""

from __future__ import annotations

import os
import threading
from collections import Counter

from torch.utils._python_dispatch import TorchDispatchMode

from fade.hostwork.callsite import current_call_site, display_path
from fade.hostwork.classify import classify, is_host_read, op_name

FADE_DIRECTORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # src/fade/


class LineRecorder(TorchDispatchMode):
    """`with LineRecorder(accelerator):` counts (kind, file, line) of host reads, syncs and copies; `lines()`
    lists them, most first. `accelerator`: the device type ("cuda", ...) or None on a CPU-only run."""

    def __init__(self, accelerator=None):
        super().__init__()
        self.accelerator = accelerator
        self._owner_thread = threading.get_ident()
        self._counts: Counter = Counter()
        self._ops: dict = {}

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True  # as GuardMode: compiled regions stay compiled, their caller's line is charged

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        outputs = func(*args, **kwargs)
        kinds = []
        if self.accelerator and self.accelerator != "cpu":
            findings, _ = classify(func, args, kwargs, outputs, self.accelerator, True)
            kinds = [finding.kind for finding in findings if finding.kind in ("sync", "copy")]
        elif is_host_read(func):
            kinds = ["host_read"]
        if kinds:
            site = current_call_site(self._owner_thread)
            if site is not None and not os.path.abspath(site.file).startswith(FADE_DIRECTORY):
                for kind in kinds:
                    key = (kind, site.file, site.line)
                    self._counts[key] += 1
                    self._ops.setdefault(key, Counter())[op_name(func)] += 1
        return outputs

    def lines(self) -> list:
        """[{kind, file, line, code, count, ops}], the most frequent first; `file` relative to the working
        directory when below it."""
        import linecache

        return [{"kind": kind, "file": display_path(file), "line": line,
                 "code": linecache.getline(file, line).strip(), "count": count, "ops": dict(self._ops[(kind, file, line)])}
                for (kind, file, line), count in self._counts.most_common()]
