"""The training recipes' own exception type."""
from __future__ import annotations

from adapterfusion.errors import AdapterFusionError


class TrainingError(AdapterFusionError, RuntimeError):
    """A run cannot start or had to stop: unknown setup or option, a missing stage-1 adapter, a NaN/inf loss."""


class RunQualityWarning(UserWarning):
    """A run finished but its result is suspect (e.g. it predicts one class for every dev example)."""
