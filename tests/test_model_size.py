"""AdaptedModel stays a thin class (issue #22): forward, what runs and what is loaded live in it; everything else
(pieces in and out, parameters, routing, caching, outputs) in modules it delegates to. A feature that grows the class
past the bound belongs in a module of its own, bound as a method in one line."""

from __future__ import annotations

import ast
import inspect

import adapterfusion.model

MAX_CLASS_LINES = 350


def test_adapted_model_class_stays_thin():
    tree = ast.parse(inspect.getsource(adapterfusion.model))
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "AdaptedModel"]
    assert node.end_lineno is not None
    lines = node.end_lineno - node.lineno + 1
    assert lines <= MAX_CLASS_LINES, (
        f"AdaptedModel is {lines} lines (bound {MAX_CLASS_LINES}); move the new concern into its own module and bind "
        "it as a method (as trainable.py, routed_forward.py and forward_runtime.py are)"
    )
