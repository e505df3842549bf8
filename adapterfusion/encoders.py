"""What an encoder argument names: a local model folder or a HuggingFace Hub id (`org/name` or `name`).

transformers sends any string that is not an existing folder to the Hub, so a mistyped local path costs a round of
network retries (minutes per job when offline) and ends in a message about the Hub, and an empty or half-copied
folder ends in one about sentencepiece. `check_encoder` tells them apart up front: a string that can only be a
path and does not exist, or a folder that holds no model, is a clear error before any work.
"""

from __future__ import annotations

import os
from pathlib import Path, PureWindowsPath

from adapterfusion.errors import ConfigError

MODEL_CONFIG = "config.json"


def looks_like_path(value: str, base_dir: Path) -> bool:
    """True if `value` cannot be a Hub id: it starts with '.', '/' or '~', has a drive or a backslash, has more
    than one '/' (a Hub id is at most `org/name`), or its parent folder exists under `base_dir`."""
    if value.startswith((".", "/", "~")) or "\\" in value or PureWindowsPath(value).drive or value.count("/") > 1:
        return True
    parent = value.rpartition("/")[0]
    return bool(parent) and (base_dir / parent).is_dir()


def check_encoder(value: str | os.PathLike, base_dir: str | os.PathLike | None = None) -> Path | None:
    """The local folder `value` names (relative paths against `base_dir`, default the working dir), checked to hold
    a model, or None when `value` is a Hub id. ConfigError for a path that does not exist or is no model folder."""
    text = os.fspath(value)
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    local = Path(text).expanduser()
    local = local if local.is_absolute() else base / local
    if not local.exists():
        if isinstance(value, os.PathLike) or looks_like_path(text, base):
            raise ConfigError(
                f"encoder {text!r} looks like a local path, but {str(local)!r} does not exist; check "
                "the path (a Hub id has the form 'org/name')"
            )
        return None
    if not local.is_dir():
        raise ConfigError(f"encoder {text!r} is a file ({str(local)!r}); give the folder a model was saved in")
    if not (local / MODEL_CONFIG).is_file():
        present = sorted(p.name for p in local.iterdir())[:8]
        raise ConfigError(
            f"encoder folder {str(local)!r} holds no {MODEL_CONFIG} (it holds {present or 'nothing'}), so it is not "
            "a HuggingFace model folder; save one there with model.save_pretrained(folder) and "
            "tokenizer.save_pretrained(folder), or give a Hub id"
        )
    return local
