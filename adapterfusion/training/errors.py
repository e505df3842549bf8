"""The training recipes' own exception types."""

from __future__ import annotations

from adapterfusion.errors import AdapterFusionError, SerializationError


class TrainingError(AdapterFusionError, RuntimeError):
    """A run cannot start or had to stop: unknown setup or option, a missing stage-1 adapter, a NaN/inf loss."""


class RunFileError(TrainingError, SerializationError):
    """A JSON file a run or the store wrote (config.json, metrics.json, entry.json, mt_a.json, fusion_attention.json)
    is missing, unreadable or damaged. Both a TrainingError (the run cannot go on) and a SerializationError (a saved
    file is bad), so either `except` catches it."""


class RunQualityWarning(UserWarning):
    """A run finished but its result is suspect (e.g. it predicts one class for every dev example)."""


class SlowPrecisionWarning(UserWarning):
    """A mixed-precision switch the hardware runs on a slow, emulated path (bf16 on a CPU without native bf16)."""
