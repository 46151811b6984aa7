"""Run the vendor tools (rocminfo, amd-smi, nvidia-smi, lspci) and keep their stdout verbatim.

A tool that is missing, fails or hangs yields None plus a one-line reason: collection must never block
on a wedged driver, so every command has a timeout and its whole process group is killed after it.
"""

from __future__ import annotations

import shutil
import subprocess

TOOL_COMMANDS = {
    "rocminfo": ["rocminfo"],
    "amd-smi": ["amd-smi", "static"],
    "nvidia-smi": ["nvidia-smi", "-q"],
    "lspci": ["lspci", "-nn"],
}
TOOL_TIMEOUT_S = 10.0  # rocminfo on a healthy 8-GPU node takes ~1 s; a wedged KFD blocks forever


def run_tool(argv: list[str], timeout_s: float = TOOL_TIMEOUT_S) -> tuple[str | None, str | None]:
    """→ (stdout, None) on success, (None, reason) otherwise."""
    if shutil.which(argv[0]) is None:
        return None, "not installed"
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL, start_new_session=True, errors="replace")
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout_s:g} s"
    except OSError as exc:
        return None, f"could not run: {exc}"
    if proc.returncode != 0:
        first = (proc.stderr or proc.stdout).strip().splitlines()[:1]
        return None, f"exit {proc.returncode}: {first[0] if first else 'no output'}"
    return proc.stdout, None


def collect_tools(timeout_s: float = TOOL_TIMEOUT_S) -> tuple[dict, dict]:
    """→ ({tool: stdout or None}, {"tools.<tool>": reason})."""
    outputs, errors = {}, {}
    for name, argv in TOOL_COMMANDS.items():
        outputs[name], reason = run_tool(argv, timeout_s)
        if reason:
            errors[f"tools.{name}"] = reason
    return outputs, errors
