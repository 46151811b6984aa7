"""Which line of the user's code caused an op: the innermost Python frame outside torch, FADE and their helpers.

Frames are judged by the module they run in (`f_globals["__name__"]`), not by path, so an editable install
of torch or a vendored copy is still recognised. Generated code (FX graph modules, Inductor output) counts as
library code too: an op issued by a compiled region is charged to the line that called the compiled function.
"""

from __future__ import annotations

import dataclasses
import linecache
import os
import sys
from dataclasses import dataclass

# Top-level modules whose frames are never "the user's line". torch-related libraries are here because their
# caller, not their internals, is what the user can change; numpy because `np.asarray(t)` calls back into
# torch/_tensor.py. runpy and importlib wrap a script run by `fade watch`; _pytest and pluggy wrap tests.
LIBRARY_MODULES = frozenset({
    "torch", "fade", "torchvision", "torchaudio", "torchtext", "torchdata", "functorch", "triton", "numpy",
    "contextlib", "importlib", "runpy", "threading", "functools", "warnings", "typing", "_pytest", "pluggy",
})
GENERATED_FILE_MARKERS = ("<eval_with_key", "torchinductor_", "<frozen ")
MAX_STACK_FRAMES = 16  # user frames kept for the first stack, innermost last

DATA_LOADING_MODULE = "torch.utils.data"  # CPU work there is data loading: by design, not a GPU-region leak
# torch.compile's own work: Dynamo and Inductor compiling (with dispatch modes off, so only syncs and sync-debug
# warnings get through) and Inductor autotuning its kernels at their first launch, which times them with
# device syncs (an H100 run charged 24 syncs to the line calling a freshly compiled function). Once per
# compile, and nothing the user's line can change, so none of it is reported.
COMPILER_MODULES = ("torch._dynamo.convert_frame", "torch._inductor.compile_fx", "torch._inductor.runtime.benchmarking",
                    "torch._inductor.runtime.triton_heuristics", "torch._inductor.select_algorithm",
                    "torch._inductor.autotune_process", "triton.testing")

USER, LIBRARY, DATA_LOADING, COMPILER = 0, 1, 2, 3
_code_category: dict = {}  # code object -> USER | LIBRARY | DATA_LOADING | COMPILER; a code's module never changes


@dataclass(frozen=True)
class CallSite:
    file: str  # absolute path as Python reports it
    line: int
    function: str
    stack: tuple[tuple[str, int, str], ...]  # user frames (file, line, function), outermost first
    in_data_loading: bool = False  # a torch.utils.data frame sits between the op and the user's line
    in_compiler: bool = False  # a COMPILER_MODULES frame sits between the event and the user's line

    @property
    def code(self) -> str:
        """The source text of the line, stripped ('' if the file is not readable)."""
        return linecache.getline(self.file, self.line).strip()


def _category(frame) -> int:
    code = frame.f_code
    category = _code_category.get(code)
    if category is None:
        module = frame.f_globals.get("__name__") or ""
        if module.startswith(DATA_LOADING_MODULE):
            category = DATA_LOADING
        elif module.startswith(COMPILER_MODULES):
            category = COMPILER
        elif (module.partition(".")[0] in LIBRARY_MODULES
              or any(marker in code.co_filename for marker in GENERATED_FILE_MARKERS)):
            category = LIBRARY
        else:
            category = USER
        _code_category[code] = category
    return category


def user_call_site(frame) -> CallSite | None:
    """The innermost user frame at or above `frame`, with the user frames above it; None if there is none.

    Only the stack is walked: no source is read and no path is formatted until the report asks.
    """
    site = None
    in_data_loading = in_compiler = False
    stack: list[tuple[str, int, str]] = []
    while frame is not None:
        category = _category(frame)
        if category == DATA_LOADING and site is None:
            in_data_loading = True
        elif category == COMPILER and site is None:
            in_compiler = True
        elif category == USER:
            code = frame.f_code
            if site is None:
                site = (code.co_filename, frame.f_lineno, code.co_name)
            if len(stack) < MAX_STACK_FRAMES:
                stack.append((code.co_filename, frame.f_lineno, code.co_name))
        frame = frame.f_back
    if site is None:
        return None
    return CallSite(site[0], site[1], site[2], tuple(reversed(stack)), in_data_loading, in_compiler)


def current_call_site(fallback_thread_id: int | None = None) -> CallSite | None:
    """The user's line for the running op. On a thread with no user frames (the autograd engine's worker
    threads run backward ops there), look at `fallback_thread_id`'s stack instead: that thread is blocked in
    `loss.backward()`, so its innermost user frame is the backward call.
    """
    here = sys._getframe(1)
    site = user_call_site(here)
    if site is None and fallback_thread_id is not None:
        frame = sys._current_frames().get(fallback_thread_id)
        if frame is not None:
            site = user_call_site(frame)
        if site is not None and _in_compiler(here):  # Inductor autotuning a backward kernel on autograd's thread
            site = dataclasses.replace(site, in_compiler=True)
    return site


def _in_compiler(frame) -> bool:
    while frame is not None:
        if _category(frame) == COMPILER:
            return True
        frame = frame.f_back
    return False


def display_path(path: str) -> str:
    """`path` relative to the working directory when it lies below it, else unchanged."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return path if relative.startswith("..") else relative
