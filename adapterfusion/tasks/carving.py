"""Seeded, reproducible carve-outs (train/validation from one split) and per-split subsampling.

Index selection is a pure function of (size, fraction, seed), so the same seed gives the same split on any
machine and the carve-out recorded in a result file can be rebuilt exactly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from adapterfusion.tasks.errors import TaskError


@dataclass(frozen=True)
class CarveOut:
    """How a missing split was made: which split was cut, at what fraction and seed, and the resulting sizes."""

    source_split: str
    source_size: int
    fraction: float
    seed: int
    train_size: int
    validation_size: int
    carved_roles: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "carved_roles": list(self.carved_roles)}

    def describe(self) -> str:
        made = " and ".join(self.carved_roles)
        return (
            f"{made} carved from {self.source_split!r} ({self.source_size} rows): "
            f"{self.train_size} train / {self.validation_size} validation, "
            f"validation fraction {self.fraction}, seed {self.seed}"
        )


def carve_indices(size: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted (train, validation) row indices covering range(size); validation gets round(size*fraction)."""
    if not 0.0 < fraction < 1.0:
        raise TaskError(f"carve fraction {fraction!r} must lie strictly between 0 and 1 (e.g. 0.2 for 80/20).")
    if size < 2:
        raise TaskError(f"cannot carve train and validation out of {size} row(s); at least 2 are needed.")
    n_validation = min(max(1, round(size * fraction)), size - 1)
    order = np.random.default_rng(seed).permutation(size)
    return np.sort(order[n_validation:]), np.sort(order[:n_validation])


def subsample_indices(size: int, max_examples: int, seed: int, stream: int = 0) -> np.ndarray:
    """Sorted indices of a seeded random subset of at most `max_examples` rows (all rows if fewer)."""
    if max_examples < 1:
        raise TaskError(f"max_examples={max_examples} must be a positive number of rows per split.")
    if size <= max_examples:
        return np.arange(size)
    return np.sort(np.random.default_rng([seed, stream]).choice(size, size=max_examples, replace=False))
