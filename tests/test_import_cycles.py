"""No import cycles among the modules of the training recipes and the experiment runner (issue 12): read from the
source with `ast`, so nothing is imported and lazy imports are seen as well.

What counts as an import of module A by module B: every `import` / `from ... import` statement in B, wherever it
stands: at module level, inside a function (a lazy import hides a cycle from the interpreter, not from a reader),
and under `if TYPE_CHECKING:` (a type-only import ties the two modules together as much: the fix, moving the shared
type or function to its own module, is the same). `from package import name` is an import of `package.name` when
that is a module, else of the package's `__init__`. Not counted: the parent packages Python runs first when it
imports a submodule (`import adapterfusion.training.run` runs `adapterfusion/training/__init__.py`); counting them
would make every package whose `__init__` re-exports its submodules a cycle.
"""
from __future__ import annotations

import ast
from pathlib import Path

import adapterfusion

PACKAGE_ROOT = Path(adapterfusion.__file__).resolve().parent
CHECKED = ("adapterfusion.training", "adapterfusion.experiments")


def module_files(package_root: Path) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the package at `package_root`."""
    modules = {}
    for path in sorted(package_root.rglob("*.py")):
        parts = path.relative_to(package_root.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that module `name` imports anywhere in its source (see the module docstring)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, one level up per extra dot
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[:len(package) - node.level + 1]
                base = ".".join([*package, *([node.module] if node.module else [])])
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
    return {target for target in found if target in modules and target != name}


def import_graph(package_root: Path, prefixes: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the modules it imports, both restricted to the modules under `prefixes`."""
    modules = module_files(package_root)
    inside = {m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)}
    return {m: imported_modules(m, modules[m], modules) & inside for m in sorted(inside)}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path [a, b, ..., a], or None when the graph has none (depth-first search)."""
    state: dict[str, str] = {}  # "open" while on the search path, "done" once fully explored
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return [*path[path.index(target):], target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_training_and_experiments_modules_import_no_cycle():
    graph = import_graph(PACKAGE_ROOT, CHECKED)
    assert "adapterfusion.experiments.jobs" in graph and "adapterfusion.training.run" in graph  # the scan found them
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_scan_sees_lazy_type_checking_and_package_imports(tmp_path):
    """The detector on a package written here: a cycle closed by a function-level import and one closed by a
    TYPE_CHECKING import are both found; `from pkg import name` reaches the submodule or the __init__."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from pkg.a import A\n")
    (package / "a.py").write_text("from pkg import b\nA = 1\n")
    (package / "b.py").write_text("def f():\n    from pkg.a import A\n    return A\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.d import D\n")
    (package / "d.py").write_text("from .c import *\nimport pkg\nD = 2\n")
    graph = import_graph(package, ("pkg",))
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.d"},
                     "pkg.d": {"pkg", "pkg.c"}}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]
    assert find_cycle({m: t - {"pkg.a"} for m, t in graph.items()}) == ["pkg.c", "pkg.d", "pkg.c"]
    assert find_cycle({"x": {"y"}, "y": set()}) is None
