"""The TorchDispatchMode a guard pushes: every ATen op on this thread (and on autograd's workers) passes here."""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode


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
        return self.guard._dispatch(func, args, kwargs or {})


def top_mode():
    """The innermost torch dispatch mode on this thread, or None."""
    return _get_current_dispatch_mode()
