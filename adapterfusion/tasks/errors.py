"""The task layer's exception type: bad task descriptions and bad data files raise it, never a KeyError
from deep inside `datasets`."""

from __future__ import annotations

from adapterfusion.errors import AdapterFusionError


class TaskError(AdapterFusionError, ValueError):
    """A task description or a task's data is invalid; the message names the task, file, field or row and the fix."""


class TaskDataWarning(UserWarning):
    """Data that loads but will train a poor model (a class with no training example); also kept in the run's notes."""
