"""What Triton's compiler needs at compile time, checked in the lane kernels' source on any machine.

Triton's interpreter (how test_lane_kernels.py runs on a CPU) runs a kernel as Python: a runtime int passed where the
compiler needs a constexpr (a static_range bound, an arange end, a block shape) works there and fails only on a GPU,
as the flat fusion tail's `tl.static_range(0, total, BLOCK_R)` did on the H100 (`total = COUNT * SIZE` assigned: an
assigned value is a runtime int to the compiler). So each such argument must be built from literals and the
kernel's `tl.constexpr` parameters alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import adapterfusion.injection

SOURCE = Path(adapterfusion.injection.__file__).parent / "_lane_triton.py"
# tl.<function>: which of its positional arguments the compiler needs as constexprs (None: all of them)
COMPILE_TIME = {"static_range": None, "arange": None, "zeros": (0,), "full": (0,)}


def _constexpr_names(function: ast.FunctionDef) -> set[str]:
    """Parameters annotated tl.constexpr, and locals assigned with that annotation."""
    annotated = [(a.arg, a.annotation) for a in function.args.args]
    annotated += [
        (node.target.id, node.annotation)
        for node in ast.walk(function)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    ]
    return {name for name, note in annotated if note is not None and ast.unparse(note) == "tl.constexpr"}


def _is_compile_time(node: ast.expr, constexprs: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int)
    if isinstance(node, ast.Name):
        return node.id in constexprs
    if isinstance(node, ast.BinOp):
        return _is_compile_time(node.left, constexprs) and _is_compile_time(node.right, constexprs)
    if isinstance(node, ast.List | ast.Tuple):
        return all(_is_compile_time(item, constexprs) for item in node.elts)
    # a tensor's .shape is known when the kernel is compiled (its blocks are constexpr-sized)
    return isinstance(node, ast.Attribute) and node.attr == "shape"


def compile_time_violations(source: str) -> list[str]:
    """`tl.<call>(...)` arguments in `source` that are not built from literals and constexpr parameters."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef):
            continue
        constexprs = _constexpr_names(function)
        for node in ast.walk(function):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "tl"
                and node.func.attr in COMPILE_TIME
            ):
                continue
            positions = COMPILE_TIME[node.func.attr] or range(len(node.args))
            for position in positions:
                if position < len(node.args) and not _is_compile_time(node.args[position], constexprs):
                    found.append(f"{function.name}, line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_kernels_pass_constexprs_where_the_compiler_needs_them() -> None:
    assert compile_time_violations(SOURCE.read_text()) == []


@pytest.mark.parametrize(
    ("body", "flagged"),
    [
        ("    total = COUNT * SIZE\n    for s in tl.static_range(0, total, BLOCK):\n        pass\n", True),
        ("    for s in tl.static_range(0, COUNT * SIZE, BLOCK):\n        pass\n", False),
        ("    total: tl.constexpr = COUNT * SIZE\n    x = tl.arange(0, total)\n", False),
        ("    x = tl.arange(0, n)\n", True),
        ("    x = tl.zeros([BLOCK], dtype=tl.float32)\n", False),
        ("    x = tl.zeros([n], dtype=tl.float32)\n", True),
    ],
)
def test_the_check_tells_runtime_values_from_constexprs(body: str, flagged: bool) -> None:
    source = f"def kernel(n, COUNT: tl.constexpr, SIZE: tl.constexpr, BLOCK: tl.constexpr):\n{body}"
    assert bool(compile_time_violations(source)) is flagged
