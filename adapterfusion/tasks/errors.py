"""The task layer's exception type: bad task descriptions and bad data files raise it, never a KeyError
from deep inside `datasets`."""

from __future__ import annotations

from typing import Any

import numpy as np

from adapterfusion.errors import AdapterFusionError


class TaskError(AdapterFusionError, ValueError):
    """A task description or a task's data is invalid; the message names the task, file, field or row and the fix."""


class TaskDataWarning(UserWarning):
    """Data that loads but will train a poor model (a class with no training example); also kept in the run's notes."""


def refuse_nan_outputs(outputs: Any, what: str) -> None:
    """A TaskError when a model's `outputs` (logits) hold NaN: argmax reads NaN as the largest value, so every such
    example would be scored as a prediction of the first class (or span, or tag) without a word."""
    values = np.asarray(outputs)
    if np.issubdtype(values.dtype, np.floating) and bool(np.isnan(values).any()):
        rows = np.isnan(values.reshape(len(values), -1)).any(axis=1) if values.ndim else np.array([True])
        raise TaskError(
            f"{what}: the model's outputs hold NaN ({int(rows.sum())} of {rows.size} examples), so no prediction "
            "can be read from them; its weights or inputs hold NaN or inf (check the checkpoint with "
            "torch.isfinite), or bf16 overflowed (evaluate in float32)."
        )
