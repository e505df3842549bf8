"""Which task a multi-task (MT-A) training step trains: annealed size-proportional sampling.

Stickland & Murray (2019, §4 "annealed sampling") draw task i with probability

    p_i(alpha) = N_i^alpha / sum_j N_j^alpha            (N_i = the task's number of training examples)

so alpha = 1 samples in proportion to size, alpha = 0 uniformly. They lower alpha once per epoch,
alpha = 1 - 0.8 * (e - 1) / (E - 1) for epoch e of E. We lower it once per optimizer step instead:

    alpha(step) = start - (start - end) * step / (total_steps - 1)    (step = 0 .. total_steps - 1)

with start = 1.0 and end = 0.2 by default: 1.0 at the first step, 0.2 at the last planned step (a run that
stops early never reaches 0.2). Large tasks dominate early; small tasks get more of the late steps, so the
shared encoder does not forget them at the end of training.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from adapterfusion.training.errors import TrainingError


def sampling_probabilities(sizes: Sequence[int], alpha: float) -> np.ndarray:
    """p_i = N_i^alpha / sum_j N_j^alpha over the task sizes N_i (positive integers)."""
    sizes_array = np.asarray(list(sizes), dtype=np.float64)
    if sizes_array.ndim != 1 or sizes_array.size == 0 or not np.all(sizes_array > 0):
        raise TrainingError(f"task sizes {list(sizes)} must be a non-empty list of positive example counts")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not np.isfinite(alpha):
        raise TrainingError(f"alpha={alpha!r} must be a finite number (1 = size-proportional, 0 = uniform)")
    # Relative to the largest task, so N^alpha cannot overflow for large alpha.
    weights = (sizes_array / sizes_array.max()) ** float(alpha)
    return weights / weights.sum()


def annealed_alpha(step: int, total_steps: int, start: float = 1.0, end: float = 0.2) -> float:
    """alpha(step) = start - (start - end) * step / (total_steps - 1): `start` at step 0, `end` at the last
    step (total_steps - 1); a one-step run stays at `start`; steps past the end stay at `end`."""
    if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 1:
        raise TrainingError(f"total_steps={total_steps!r} must be an integer >= 1")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise TrainingError(f"step={step!r} must be an integer >= 0")
    if total_steps == 1:
        return float(start)
    progress = min(step / (total_steps - 1), 1.0)
    return float(start - (start - end) * progress)


@dataclass(frozen=True)
class AnnealedSchedule:
    """The annealing knobs, recorded in an MT-A run's config.json."""

    start: float = 1.0
    end: float = 0.2

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
                raise TrainingError(f"annealed sampling: {name}={value!r} must be a finite number")

    def alpha(self, step: int, total_steps: int) -> float:
        return annealed_alpha(step, total_steps, self.start, self.end)

    def to_dict(self) -> dict[str, object]:
        return {"kind": "annealed", "start": self.start, "end": self.end,
                "formula": "p_i ∝ N_i^alpha, alpha = start - (start - end) * step / (total_steps - 1)"}


class TaskSampler:
    """Draws one task index per step from p(alpha(step)), with its own seeded generator (so the task order does
    not depend on how much randomness the model or the data loaders use) and counts what it drew."""

    def __init__(self, sizes: Sequence[int], total_steps: int, seed: int,
                 schedule: AnnealedSchedule | None = None) -> None:
        self.sizes = [int(n) for n in sizes]
        sampling_probabilities(self.sizes, 1.0)  # validates the sizes
        self.total_steps = int(total_steps)
        self.schedule = schedule or AnnealedSchedule()
        self.generator = np.random.default_rng(seed)
        self.counts = [0] * len(self.sizes)

    def probabilities(self, step: int) -> np.ndarray:
        return sampling_probabilities(self.sizes, self.schedule.alpha(step, self.total_steps))

    def draw(self, step: int) -> int:
        index = int(self.generator.choice(len(self.sizes), p=self.probabilities(step)))
        self.counts[index] += 1
        return index
