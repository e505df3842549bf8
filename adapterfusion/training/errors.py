"""The training recipes' own exception types (TrainingError and RunFileError live in adapterfusion/errors.py, since
layers below training raise RunFileError too; they are re-exported here)."""

from __future__ import annotations

from adapterfusion.errors import RunFileError, TrainingError

__all__ = ["RunFileError", "RunQualityWarning", "SlowPrecisionWarning", "StartOverWarning", "TrainingError"]


class RunQualityWarning(UserWarning):
    """A run finished but its result is suspect (e.g. it predicts one class for every dev example)."""


class SlowPrecisionWarning(UserWarning):
    """A mixed-precision switch the hardware runs on a slow, emulated path (bf16 on a CPU without native bf16)."""


class StartOverWarning(UserWarning):
    """resume=True found checkpoints, but none to continue from (each incomplete or damaged): the run starts over."""
