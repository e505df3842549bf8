"""The library's own exception types: every error a user can cause is one of these, with a message
that names the bad value and the fix, instead of a traceback from deep inside torch."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


class AdapterFusionError(Exception):
    """Base class of every error raised on purpose by adapterfusion."""


class ConfigError(AdapterFusionError, ValueError):
    """A configuration value is missing, unknown or out of range."""


class PieceExistsError(ConfigError):
    """A piece of that kind and name is loaded already (add_*, load_* without overwrite=True); `name` is the name."""

    def __init__(self, message: str, name: str) -> None:
        super().__init__(message)
        self.name = name


class SavedSettingError(ConfigError):
    """A value read from a saved file (a piece's adapter_config.json, an AdapterHub adapter_fusion_config.json, a
    setup's index) that this version refuses; the fix is in that file. Structured, so a caller that must not show the
    server's paths (serving/app.py) need not parse the message: `path` is the file as given, `file` its name
    without its folder, `key` the entry of the file whose value was refused ('config', 'name') or None where the
    reader does not say, and `reason` what is wrong with it, the refusal of the check that read it. The message is
    `<path>: <reason>`."""

    def __init__(self, path: str | os.PathLike[str], reason: str, key: str | None = None) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.key, self.reason = os.fspath(path), key, reason
        self.file = Path(self.path).name

    def __reduce__(self) -> tuple[Any, ...]:  # pickled across processes (a Ray replica) with its fields
        return type(self), (self.path, self.reason, self.key)


class UnsupportedArchitectureError(AdapterFusionError, ValueError):
    """The encoder's architecture has no row in the injection table."""


class IncompatibleModelError(AdapterFusionError, ValueError):
    """A saved adapter, head or fusion was made for a different encoder."""


class SerializationError(AdapterFusionError, ValueError):
    """A saved file is missing, corrupt, truncated or of an unknown format."""


class NameNotFoundError(AdapterFusionError, LookupError):
    """An adapter, fusion or head name that is not loaded in the model."""

    def __str__(self) -> str:  # LookupError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""


class ModelUnloadedError(AdapterFusionError, RuntimeError):
    """A model was used after unload() gave its plain HuggingFace model back."""


class DefaultModelMissingError(AdapterFusionError, RuntimeError):
    """The embedded default encoder package is not installed."""


class UnknownFormatVersionWarning(UserWarning):
    """A file was written by a version of another library whose format this one was not checked against; it is read
    as the known format, which may misread it."""


class BaseModelMismatchWarning(UserWarning):
    """A piece or setup is loaded into an encoder of the architecture and sizes it was saved for, but other weights
    (another checkpoint of that architecture, or the same one in another precision)."""


class HubError(AdapterFusionError, OSError):
    """The Hugging Face Hub could not be reached, or has no repository, revision or file asked for."""


class StorageFullError(AdapterFusionError, OSError):
    """A write ran out of room (a full disk, a quota, a file-size limit) before anything was renamed into place, so
    what was saved there before is as it was. `errno`, `strerror` and `filename` (the path being written) are the
    OS's, so `except OSError` still catches it."""

    def __str__(self) -> str:  # OSError's own would be "[Errno N] strerror: filename" once those are set
        return str(self.args[0]) if self.args else ""


class TrainingError(AdapterFusionError, RuntimeError):
    """A run cannot start or had to stop: unknown setup or option, a missing stage-1 adapter, a NaN/inf loss."""


class RunFileError(TrainingError, SerializationError):
    """A JSON file a run or the store wrote (config.json, metrics.json, entry.json, mt_a.json, fusion_attention.json)
    is missing, unreadable or damaged. Both a TrainingError (the run cannot go on) and a SerializationError (a saved
    file is bad), so either `except` catches it. Here, not in training/errors.py, because the zoo manifest and
    fusion_attention.json, read below the training package, raise it too."""


class ZooError(AdapterFusionError, LookupError):
    """A zoo lacks the adapter asked for, or a zoo path is not an AdapterStore."""
