"""Which task a multi-task (MT-A) training step trains: annealed size-proportional sampling.

Stickland & Murray (2019, §4 "annealed sampling") draw task i with probability

    p_i(alpha) = N_i^alpha / sum_j N_j^alpha            (N_i = the task's number of training examples)

so alpha = 1 samples in proportion to size, alpha = 0 uniformly, and lower alpha once per epoch:

    alpha(e) = start - (start - end) * (e - 1) / (E - 1)      (epoch e = 1 .. E, E = the planned epochs)

with start = 1.0 and end = 0.2 as in the paper (alpha = 1 - 0.8 (e - 1) / (E - 1)). A step's epoch is
step // steps_per_epoch + 1, so alpha is constant within an epoch. As in the paper the schedule runs over the
*planned* epochs: a run that early stopping ends at epoch e < E stops at alpha(e), above 0.2, and a run of a
single planned epoch samples in proportion to size throughout. Large tasks dominate early; small tasks get more
of the late epochs, so the shared encoder does not forget them at the end of training.
"""

from __future__ import annotations

import functools
import math
import numbers
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from adapterfusion._validation import is_finite_number, short_repr
from adapterfusion.training.config import MAX_SEED
from adapterfusion.training.errors import TrainingError


def task_sizes(sizes: Sequence[int]) -> list[int]:
    """`sizes` as a list of positive integers (example counts), else a TrainingError."""
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Iterable):
        raise TrainingError(f"task sizes {short_repr(sizes)} must be a non-empty list of positive example counts")
    counts = list(sizes)
    wrong = [n for n in counts if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1]
    if not counts or wrong:
        found = f": {short_repr(wrong[0])} is none" if wrong else ""
        raise TrainingError(
            f"task sizes {short_repr(counts)} must be a non-empty list of positive example counts{found}"
        )
    return [int(n) for n in counts]


def sampling_probabilities(sizes: Sequence[int], alpha: float) -> np.ndarray:
    """p_i = N_i^alpha / sum_j N_j^alpha over the task sizes N_i (positive integers)."""
    counts = task_sizes(sizes)
    if not is_finite_number(alpha):
        raise TrainingError(f"alpha={short_repr(alpha)} must be a finite number (1 = size-proportional, 0 = uniform)")
    # In logs, relative to the task with the largest weight (the largest N for alpha > 0, the smallest below), so
    # every exponent is <= 0: N^alpha can neither overflow nor leave 0 / 0 (alpha = -1e308 made every p NaN), and a
    # count past any float (10**400) is still a count.
    logs = np.array([math.log(n) for n in counts])
    reference = logs.max() if alpha >= 0 else logs.min()
    with np.errstate(over="ignore"):
        weights = np.exp(float(alpha) * (logs - reference))
    return weights / weights.sum()


def annealed_alpha(epoch: int, epochs: int, start: float = 1.0, end: float = 0.2) -> float:
    """alpha(e) = start - (start - end) * (e - 1) / (E - 1) for epoch e of E (1-based): `start` in the first
    epoch, `end` in the last; a one-epoch plan stays at `start`; epochs past the plan stay at `end`."""
    epochs = _whole(epochs, "epochs", 1, " (the planned number of epochs)")
    epoch = _whole(epoch, "epoch", 1, " (epochs count from 1)")
    if epochs == 1:
        return float(start)
    progress = min((epoch - 1) / (epochs - 1), 1.0)
    return float(start - (start - end) * progress)


def epoch_of(step: int, steps_per_epoch: int) -> int:
    """The 1-based epoch that 0-based optimizer step `step` belongs to."""
    steps_per_epoch = _whole(steps_per_epoch, "steps_per_epoch", 1)
    return _whole(step, "step", 0) // steps_per_epoch + 1


def _whole(value: object, name: str, minimum: int, why: str = "") -> int:
    """`value` as a Python int, any integer type (numpy's too: np.int64(2) was told it 'must be an integer >= 1')
    but a bool."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise TrainingError(f"{name}={short_repr(value)} must be an integer >= {minimum}{why}")
    return int(value)


@dataclass(frozen=True)
class AnnealedSchedule:
    """The annealing knobs, recorded in an MT-A run's config.json. alpha is a function of the optimizer step
    through its epoch (Stickland & Murray anneal per epoch)."""

    start: float = 1.0
    end: float = 0.2

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            value = getattr(self, name)
            if not is_finite_number(value):
                raise TrainingError(f"annealed sampling: {name}={short_repr(value)} must be a finite number")
            object.__setattr__(self, name, float(value))  # config.json records plain floats (np.float32 too)
        if not math.isfinite(self.start - self.end):  # alpha(e) would be -inf or NaN in the later epochs
            raise TrainingError(
                f"annealed sampling: start={self.start:g} and end={self.end:g} are too far apart to anneal between "
                "(their difference overflows); the paper anneals from 1.0 to 0.2"
            )

    def alpha(self, step: int, steps_per_epoch: int, epochs: int) -> float:
        """alpha at 0-based optimizer `step` of a run planned as `epochs` epochs of `steps_per_epoch` steps."""
        return annealed_alpha(epoch_of(step, steps_per_epoch), epochs, self.start, self.end)

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": "annealed",
            "per": "epoch",
            "start": self.start,
            "end": self.end,
            "formula": "p_i ∝ N_i^alpha, alpha = start - (start - end) * (e - 1) / (E - 1), e = the step's "
            "epoch (1..E), E = the planned epochs (Stickland & Murray 2019)",
        }


def check_schedule(schedule: AnnealedSchedule | None) -> AnnealedSchedule:
    """`schedule`, or the paper's (1.0 -> 0.2) for None; anything else is refused before any work (a dict or a name
    was an AttributeError once the tasks' data had loaded)."""
    if schedule is None:
        return AnnealedSchedule()
    if not isinstance(schedule, AnnealedSchedule):
        raise TrainingError(
            f"schedule={short_repr(schedule)} has type {type(schedule).__name__}; expected an AnnealedSchedule, e.g. "
            "schedule=AnnealedSchedule(start=1.0, end=0.2) (or None: the paper's annealing from 1.0 to 0.2)"
        )
    return schedule


def _is_seed(value: object) -> bool:
    """An integer numpy's generator takes as a seed (a negative one was numpy's ValueError at the first draw)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and 0 <= int(value) <= MAX_SEED


class TaskSampler:
    """Draws one task index per step from p(alpha(step)), with its own seeded generator (so the task order does
    not depend on how much randomness the model or the data loaders use) and counts what it drew."""

    def __init__(
        self,
        sizes: Sequence[int],
        steps_per_epoch: int,
        epochs: int,
        seed: int,
        schedule: AnnealedSchedule | None = None,
    ) -> None:
        self.sizes = task_sizes(sizes)
        if not _is_seed(seed):
            raise TrainingError(f"seed={short_repr(seed)} must be an integer in 0..{MAX_SEED}")
        self.steps_per_epoch, self.epochs = steps_per_epoch, epochs
        self.schedule = check_schedule(schedule)
        self.schedule.alpha(0, steps_per_epoch, epochs)  # validates the plan
        self.generator = np.random.default_rng(seed)
        self.counts = [0] * len(self.sizes)

    def probabilities(self, step: int) -> np.ndarray:
        return sampling_probabilities(self.sizes, self.alpha(step))

    def alpha(self, step: int) -> float:
        return self.schedule.alpha(step, self.steps_per_epoch, self.epochs)

    def draw(self, step: int) -> int:
        index = int(self.generator.choice(len(self.sizes), p=self.probabilities(step)))
        self.counts[index] += 1
        return index


def _listed_task(tasks: tuple[int, ...], step: int) -> int:
    return tasks[step]


class StepTasks(Sequence[int]):
    """The task of each of `total` optimizer steps, `draw(step)` called in step order as a step is first asked for, and
    each step's rank (how many earlier steps trained its task). A run planned far beyond where early stopping ends it
    (max_steps=10**12) draws only the steps it reaches: drawing every step before training hung and filled memory."""

    def __init__(self, draw: Callable[[int], int], total: int) -> None:
        self.draw, self.total = draw, total
        self.tasks, self.ranks = array("q"), array("q")
        self.counts: dict[int, int] = {}

    @classmethod
    def listed(cls, tasks: Sequence[int]) -> StepTasks:
        """The steps of a fixed list of task indices (a partial, not a lambda: DataLoader workers may pickle it)."""
        return cls(functools.partial(_listed_task, tuple(int(task) for task in tasks)), len(tasks))

    @classmethod
    def sampled(cls, sampler: TaskSampler, total: int) -> StepTasks:
        return cls(sampler.draw, total)

    def __len__(self) -> int:
        return self.total

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return [self[step] for step in range(self.total)[index]]
        step = range(self.total)[index]  # an IndexError past the plan, as a tuple's
        self._reach(step)
        return self.tasks[step]

    def rank(self, step: int) -> int:
        """How many steps before `step` trained its task."""
        self._reach(step)
        return self.ranks[step]

    def _reach(self, step: int) -> None:
        while len(self.tasks) <= step:
            task = self.draw(len(self.tasks))
            self.ranks.append(self.counts.get(task, 0))
            self.counts[task] = self.counts.get(task, 0) + 1
            self.tasks.append(task)
