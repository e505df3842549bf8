"""The library's own exception types: every error a user can cause is one of these, with a message
that names the bad value and the fix, instead of a traceback from deep inside torch."""

from __future__ import annotations


class AdapterFusionError(Exception):
    """Base class of every error raised on purpose by adapterfusion."""


class ConfigError(AdapterFusionError, ValueError):
    """A configuration value is missing, unknown or out of range."""


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


class HubError(AdapterFusionError, OSError):
    """The Hugging Face Hub could not be reached, or has no repository, revision or file asked for."""
