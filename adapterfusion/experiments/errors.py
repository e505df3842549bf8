"""The experiment runner's own exception types."""

from __future__ import annotations

from adapterfusion.errors import AdapterFusionError, ConfigError


class ExperimentSpecError(ConfigError):
    """The experiment file has a mistake; the message names its key path (e.g. `setups[2].learning_rate`)."""


class ExperimentError(AdapterFusionError, RuntimeError):
    """An experiment cannot run: its output dir is in use or belongs to another experiment."""


class OutputDirLockedError(ExperimentError):
    """Another runner holds the output dir's lock."""


class SpecMismatchError(ExperimentError):
    """The output dir holds results of a different experiment spec (pass force=True / --force to reuse it)."""


class ResultsStoreError(ExperimentError):
    """An output dir's experiment.db cannot be used: damaged, not a results store, or unreadable where it is."""
