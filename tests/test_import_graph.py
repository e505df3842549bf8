"""The package's import graph: no circles between modules or between packages, packages in layers, no imports of
our own modules inside functions, and the file-format modules never reach for the model.

Edges are read from the source with `ast`: every `import` / `from ... import` of an adapterfusion module, at module
level or inside a function (a lazy import is still a dependency), to the most specific module it names
(`from adapterfusion.tasks import fields` is an edge to adapterfusion.tasks.fields). Not edges:
- imports under `if TYPE_CHECKING:`. They never run; they name the type of an argument that a caller passes in
  (serialization/setup_*.py's `model: AdaptedModel`, analysis/ and training/ taking a model). Counting them would make
  every module that receives the model describe it with a Protocol of its whole API, with no change in what loads
  what. The format modules are held to more: they must not name the model at all, not even for types.
- a submodule's implicit import of its parent package's __init__: the root __init__ imports the model, so counting
  it would make every module part of one circle.

Package level: a package is adapterfusion.<x>, a sub-package or a top-level module (model.py, encoders.py, ...); the
root package is its own node. The layers, lowest first (a package imports only its own layer's packages, without a
circle, and the layers below; within a layer the order is the one given):
  1. foundations: _startup, errors, _version, run_layout, parameters, file_digests -> _validation, encoder_limits,
     io -> defaults, devices
  2. components: adapters -> blocks -> heads -> fusion -> injection -> piece, encoder_folders -> encoder_loading ->
     encoders, encoder_identity, forward_inputs, forward_runtime, outputs, composition, routing, routed_forward,
     pipeline_arguments, pipeline_tasks, pipelines, trainable, dtype_errors, generation; tasks -> scoring; analysis
     (the read-only fusion attention that training records)
  3. formats: interop -> serialization (pieces as files, whole setups, provenance, model card)
  4. the model: model -> the root package (the public API)
  5. recipes: training
  6. what works on run folders: zoo, evaluation -> pruning; experiments; serving (the inference server)
  7. cli_outputs (which files the command line may write) -> cli
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
    "adapterfusion.serialization.pieces",
    "adapterfusion.serialization.formats",
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


# ---- package level ------------------------------------------------------------------------------------------
# The layers of the module docstring, lowest first; a new package takes its place here.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset("adapterfusion" if name == "<root>" else f"adapterfusion.{name}" for name in layer.split())
    for layer in (
        "_startup errors _version run_layout parameters file_digests _validation encoder_limits io defaults devices",
        "adapters blocks heads fusion injection piece encoder_folders encoder_loading encoders encoder_identity "
        "forward_inputs forward_runtime outputs composition routing routed_forward pipeline_arguments pipeline_tasks "
        "pipelines trainable dtype_errors generation tasks scoring answer_scoring analysis",
        "interop serialization",
        "model <root>",  # <root>: adapterfusion/__init__.py, the public API
        "training",
        "zoo evaluation pruning experiments serving",
        "cli_outputs cli",
    )
)


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


def test_packages_import_no_circle():
    circles = [sorted(c) for c in _circles(_package_graph())]
    assert not circles, f"package circles (move the code so that packages form layers): {circles}"


def test_packages_import_only_their_own_layer_and_the_layers_below():
    layer_of = {package: i for i, layer in enumerate(LAYERS) for package in layer}
    graph = _package_graph()
    unplaced = sorted(({*graph, *(t for targets in graph.values() for t in targets)}) - layer_of.keys())
    assert not unplaced, f"give these packages a layer in LAYERS (and in the docstring): {unplaced}"
    upward = sorted(
        f"{package} -> {target}"
        for package, targets in graph.items()
        for target in targets
        if layer_of[target] > layer_of[package]
    )
    assert not upward, f"imports of a higher layer (move the code down, or the importer up): {upward}"


def test_no_function_level_imports_of_our_own_modules():
    found = _function_level_imports()
    assert not found, (
        f"import these at module level, or move the code so that the import has no circle: {found}; only optional "
        "third-party extras (ray, matplotlib) may be imported inside a function"
    )
