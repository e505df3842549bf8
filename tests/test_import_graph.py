"""The package's import graph: no circles, and the file-format modules never reach for the model.

Edges are read from the source with `ast`: every `import` / `from ... import` of an adapterfusion module, at module
level or inside a function (a lazy import is still a dependency), to the most specific module it names
(`from adapterfusion.tasks import fields` is an edge to adapterfusion.tasks.fields). Not edges:
- imports under `if TYPE_CHECKING:`. They never run; they name the type of an argument that a caller passes in
  (io/setup.py's `model: AdaptedModel`, analysis/ and training/ taking a model). Counting them would make every module
  that receives the model describe it with a Protocol of its whole API, with no change in what loads what. The format
  modules are held to more: they must not name the model at all, not even for types (second test).
- a submodule's implicit import of its parent package's __init__: the root __init__ imports the model, so counting
  it would make every module part of one circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "adapterfusion"

# Layers held to more: among their own modules not even a TYPE_CHECKING import may close a circle (the runner
# imports executors, executors jobs, jobs training; report_files imports report and figures, never back).
STRICT_LAYERS = ("adapterfusion.training", "adapterfusion.experiments")

# Translators between files and Pieces, and what they build on: they see the encoder only through an EncoderLayout.
MODEL_FREE = (
    "adapterfusion.piece",
    "adapterfusion.io.pieces",
    "adapterfusion.io.formats",
    "adapterfusion.interop",
    "adapterfusion.parameters",
)


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    return {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }


def _imports(name: str, path: Path, modules: dict[str, Path], with_type_checking: bool = False) -> set[str]:
    """The adapterfusion modules that module `name` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set() if with_type_checking else _type_checking_nodes(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            targets |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names}
    resolved = set()
    for target in targets:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target.startswith("adapterfusion") and target != name:
            resolved.add(target)
    return resolved


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_circles():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    circles = [sorted(c) for c in _circles(graph)]
    assert not circles, f"import circles (break them, do not hide them behind a lazy import): {circles}"


def test_training_and_experiments_import_no_circle_even_for_types():
    modules = {name: path for name, path in _modules().items() if name.startswith(STRICT_LAYERS)}
    graph = {
        name: _imports(name, path, modules, with_type_checking=True) & modules.keys() for name, path in modules.items()
    }
    assert not [sorted(c) for c in _circles(graph)]


def test_format_modules_never_import_the_model():
    modules = _modules()
    offenders = {
        name: sorted(
            target
            for target in _imports(name, path, modules, with_type_checking=True)
            if target == "adapterfusion.model"
        )
        for name, path in modules.items()
        if name.startswith(MODEL_FREE)
    }
    assert not {name: found for name, found in offenders.items() if found}


def test_the_graph_reader_sees_lazy_and_relative_imports(tmp_path):
    """The reader itself: a function-level import is an edge, a TYPE_CHECKING one only when asked for."""
    source = tmp_path / "adapterfusion" / "io" / "sample.py"
    source.parent.mkdir(parents=True)
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from adapterfusion.model import M\n"
        "def f():\n    from .pieces import read_json\n    from adapterfusion import errors\n"
    )
    modules = {
        "adapterfusion.io.sample": source,
        "adapterfusion.io.pieces": source,
        "adapterfusion.model": source,
        "adapterfusion.errors": source,
        "adapterfusion": source,
    }
    assert _imports("adapterfusion.io.sample", source, modules) == {"adapterfusion.io.pieces", "adapterfusion.errors"}
    assert "adapterfusion.model" in _imports("adapterfusion.io.sample", source, modules, with_type_checking=True)
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]


# ---- package level --------------------------------------------------------------------------------------------
# A package is adapterfusion.<x>: a sub-package or a top-level module (model.py, encoders.py, ...); the root package
# is its own node. Layers, lowest first, as far as they are untangled (issue #22 item 3):
#   errors, _version, _validation, defaults, parameters, encoder_limits, demo
#   adapters -> heads -> fusion -> injection -> piece -> forward_inputs, composition, trainable
# Still one circle (UNTANGLED_NOT_YET, to shrink to nothing): io holds both the file primitives every layer uses
# (paths, atomic, documents, hub) and what builds on the model's pieces and runs (setup, formats, provenance), so
# io <-> encoders, interop, training; training <-> zoo (the zoo is an AdapterStore; setups resolve zoo sources),
# evaluation (evaluate_run rebuilds runs; MT-A scores with predict/score) and analysis (pruning rebuilds runs;
# training writes fusion_attention.json).
UNTANGLED_NOT_YET = frozenset(
    f"adapterfusion{suffix}"
    for suffix in (
        "",
        ".analysis",
        ".encoders",
        ".evaluation",
        ".interop",
        ".io",
        ".model",
        ".tasks",
        ".training",
        ".zoo",
    )
)
# Function-level imports of our own modules still standing (module -> count); the list may only shrink.
LAZY_NOT_YET = {
    "adapterfusion.cli": 16,
    "adapterfusion.evaluation": 1,
    "adapterfusion.training.setups": 1,
    "adapterfusion.training.rebuild": 1,
    "adapterfusion.training.api": 1,
    "adapterfusion.training.run": 4,
    "adapterfusion.experiments.executors": 1,
    "adapterfusion.experiments.jobs": 2,
    "adapterfusion.experiments.spec": 1,
    "adapterfusion.experiments.report_files": 1,
    "adapterfusion.experiments.plan": 2,
    "adapterfusion.experiments.store": 1,
    "adapterfusion.io.provenance": 3,
    "adapterfusion.analysis.fusion_attention": 1,
    "adapterfusion.analysis.pruning": 1,
}


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _package_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        for target in _imports(name, path, modules):
            if _package(target) != _package(name):
                graph.setdefault(_package(name), set()).add(_package(target))
    return graph


def _function_level_imports() -> dict[str, int]:
    """Per module, its imports of adapterfusion modules inside a function (TYPE_CHECKING blocks left out)."""
    counts: dict[str, int] = {}
    for name, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_nodes(tree)
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if id(node) in skip or not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                named = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                if (isinstance(node, ast.ImportFrom) and node.level) or any(
                    n == "adapterfusion" or n.startswith("adapterfusion.") for n in named
                ):
                    counts[name] = counts.get(name, 0) + 1
    return counts


def test_packages_form_layers_outside_the_one_circle_left():
    circles = _circles(_package_graph())
    assert all(circle <= UNTANGLED_NOT_YET for circle in circles), [sorted(c) for c in circles]
    assert len(circles) <= 1


def test_no_new_function_level_imports_of_our_own_modules():
    found = _function_level_imports()
    grown = {name: n for name, n in found.items() if n > LAZY_NOT_YET.get(name, 0)}
    assert not grown, f"import these at module level, or move the code so that the import has no circle: {grown}"
