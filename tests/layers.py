"""The layer contract of src/fade, checked by walking every module's AST (imports anywhere in a file count,
function-local ones too, since a lazy import still couples the layers).

The pipeline is collect -> analyze -> act -> measure -> report, with the CLI on top (docs/layout.md):

- LAYER_FORBIDS: `analyze` and `report` are pure over plain data: no torch, no collect, measure or act.
  `measure`, `collect` and `hostwork` never import a renderer (`report`) or the CLI. `measure` never imports
  `act` (the tuner drives measurement, not the other way round), and `collect` never imports `analyze` (a
  probe records what it saw; deciding what it means comes after). The leaf modules (fade.version, fade.kfd,
  fade.env_change, fade.errors, fade.files, fade.reading, fade.results, fade.device_cache) import no layer, so
  every layer may read them.
- `fade.ocl`, the OpenCL device, imports no `act`, `measure`, `report` or CLI: `measure` uses the device and the
  tuner tunes it, never the other way round. The CLBlast parameters the tuner persists are read in fade.ocl
  through fade.device_cache, the cache directory both share. LAYER_EXCEPTIONS would name an import that still
  breaks a rule, with its reason; it names none.
- No library module imports the `fade` facade (fade/__init__.py), not even for `__version__`: that is read
  from fade.version. Only the CLI, the facade and its API module (TOP_MODULES, TOP_PREFIXES) sit above it.
- No module imports another module's `_private` name, by `from m import _x` or by `m._x` on an imported module.
- Library modules never print or exit: they return data, and progress reaches them as a callback.
  PRINTS_ALLOWED lists the few entry points that own a process's stdout (a worker's protocol, a
  `python -m` probe), each with its reason.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

# what a leaf module must not import: any layer, so that every layer may import it
LEAF_FORBIDS = ("torch", "fade.collect", "fade.analyze", "fade.act", "fade.measure", "fade.hostwork", "fade.ocl",
                "fade.report", "fade.cli")
# layer -> module prefixes it must not import
LAYER_FORBIDS = {
    "fade.analyze": ("torch", "fade.collect", "fade.measure", "fade.act"),
    "fade.report": ("torch", "fade.collect", "fade.measure", "fade.act"),
    "fade.measure": ("fade.act", "fade.report", "fade.cli"),
    "fade.collect": ("fade.analyze", "fade.report", "fade.cli"),
    "fade.hostwork": ("fade.report", "fade.cli"),
    "fade.act": ("fade.cli",),
    # an OpenCL device that `measure` (and the tuner) use, never the other way round (docs/layout.md)
    "fade.ocl": ("fade.act", "fade.measure", "fade.report", "fade.cli"),
    "fade.version": LEAF_FORBIDS,
    "fade.kfd": LEAF_FORBIDS,
    "fade.env_change": LEAF_FORBIDS,
    "fade.errors": LEAF_FORBIDS,
    "fade.files": LEAF_FORBIDS,
    "fade.reading": LEAF_FORBIDS,
    "fade.results": LEAF_FORBIDS,
    "fade.device_cache": LEAF_FORBIDS,
}
# (module, imported prefix) -> why this one import may break its layer's rule; every other import still may not.
# Empty: the last one (fade.ocl.tuning reading the tuner's cache through fade.act.tune) became fade.device_cache.
LAYER_EXCEPTIONS: dict = {}
# modules above the library: they may import the facade and print
TOP_MODULES = ("fade", "fade.__main__", "fade.api")
TOP_PREFIXES = ("fade.cli",)
# module -> why it may write to stdout/stderr or exit
PRINTS_ALLOWED = {
    "fade.measure.worker": "the worker's protocol is JSON lines on stdout (runner.IsolatedExecutor reads them)",
    "fade.collect.torch_probe": "`python -m fade.collect.torch_probe` prints its JSON for the parent",
    "fade.measure.suites.quick": "`python -m fade.measure.suites.quick` prints its JSON for the parent",
    "fade.act.tune.pretune": "`python -m fade.act.tune.pretune` is the child the parent reads",
    "fade.act.tune.oclgemm": "`python -m fade.act.tune.oclgemm` is the child the parent reads (JSON on stdout, the "
                             "tuner's progress on stderr)",
    "fade.measure.suites.dist.rank": "one torchrun rank's entry (main): its exit status is the rank's result, and "
                                     "after a collective timed out os._exit skips a teardown a hung peer would block",
}


@dataclass(frozen=True)
class Violation:
    module: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.what}"


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_top(module: str) -> bool:
    return module in TOP_MODULES or any(module == p or module.startswith(p + ".") for p in TOP_PREFIXES)


def _layer_of(module: str):
    for layer in LAYER_FORBIDS:
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _matches(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def check_tree(src: Path, known_modules: set | None = None) -> list:
    """Every violation of the contract under `src` (the directory holding the `fade` package)."""
    files = sorted((src / "fade").rglob("*.py"))
    modules = {module_name(f, src): f for f in files}
    known = known_modules if known_modules is not None else set(modules)
    violations = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        layer = _layer_of(module)
        top = _is_top(module)
        aliases = {}  # local name -> fade module it names
        for node in ast.walk(tree):
            imported = []  # (module imported, names taken from it)
            if isinstance(node, ast.Import):
                for alias in node.names:
                    imported.append((alias.name, None))  # `import m`: attribute uses are checked
                    if alias.name.startswith("fade"):
                        aliases[alias.asname or alias.name] = alias.name
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(module, is_package, node.level, node.module)
                names = [alias.name for alias in node.names]
                imported.append((source, names))
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    if full in known:
                        imported.append((full, []))
                        aliases[alias.asname or alias.name] = full
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                target = aliases.get(node.value.id)
                if target == "fade" and not top and f"fade.{node.attr}" not in known:
                    violations.append(Violation(module, node.lineno, f"uses the facade: fade.{node.attr}"))
                if target and target != module and node.attr.startswith("_") and not node.attr.startswith("__"):
                    violations.append(Violation(module, node.lineno, f"uses {target}.{node.attr}, a private name"))
                continue
            elif isinstance(node, ast.Call) and not top and module not in PRINTS_ALLOWED:
                name = _call_name(node.func)
                if name in ("print", "sys.exit", "exit", "quit", "os._exit"):
                    violations.append(Violation(module, node.lineno, f"calls {name}(): library code returns data"))
                continue
            else:
                continue
            for source, names in imported:
                if layer:
                    for forbidden in LAYER_FORBIDS[layer]:
                        excused = any(module == where and _matches(source, prefix)
                                      for where, prefix in LAYER_EXCEPTIONS)
                        if _matches(source, forbidden) and not excused:
                            violations.append(Violation(module, node.lineno, f"{layer} imports {source}"))
                if source == "fade" and names is not None and not top:
                    for name in names:
                        if f"fade.{name}" not in known:
                            violations.append(Violation(module, node.lineno, f"imports the facade: fade.{name}"))
                if source != module and source.startswith("fade"):
                    for name in names or []:
                        if name.startswith("_") and not name.startswith("__"):
                            violations.append(Violation(module, node.lineno, f"imports {source}.{name}, a private name"))
    return sorted(set(violations), key=lambda v: (v.module, v.line, v.what))


def _call_name(func) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return f"{func.value.id}.{func.attr}"
    return ""
