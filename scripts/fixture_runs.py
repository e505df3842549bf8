"""What every AdapterHub fixture script does around its own build and verify: check that it runs beside the pinned
`adapters`, rebuild each fixture folder from scratch (or only verify it), and report the size. Run offline: the
fixtures come from tiny random models, never from the Hub."""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType

ADAPTERS_VERSION = "1.3.0"


def require_adapters(hint: str = "run with benchmarks/.venv-adapters/bin/python") -> ModuleType:
    """The installed `adapters` package, if it is the pinned version; else exit with `hint`."""
    try:
        adapters = importlib.import_module("adapters")
    except ImportError:
        sys.exit(f"adapters is not installed here; {hint}")
    if adapters.__version__ != ADAPTERS_VERSION:
        sys.exit(f"need adapters=={ADAPTERS_VERSION}, found {adapters.__version__}")
    return adapters


def rebuild(
    names: Iterable[str],
    out: Path,
    build: Callable[[str, Path], None],
    verify: Callable[[str, Path], None],
    verify_only: bool = False,
) -> None:
    """For each name: remove and build out/name (unless verify_only), then verify it; print the fixtures' size."""
    for name in names:
        target = out / name
        if not verify_only:
            if target.exists():
                shutil.rmtree(target)
            build(name, target)
        verify(name, target)
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"total fixture size under {out}: {total / 1024:.1f} KiB")


def run_offline(main: Callable[[], int]) -> None:
    """Run a fixture script's main with the Hub switched off."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    sys.exit(main())
