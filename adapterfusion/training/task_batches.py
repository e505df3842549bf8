"""MT-A's training data as the loop takes it: which task each optimizer step trains, and that step's batches.

The task sampler (training/sampling.py) draws each step's task in step order from its own seeded generator
(StepTasks, as far as the run reaches), and each task's training set is walked in seeded shuffled passes (a new
permutation per pass, as a shuffling DataLoader with its own generator walks it), so micro-batch i of a run is a pure
function of i. The HF Trainer can then feed MT-A like any dataset, in order and one ready batch per item, and resume
it: a resumed run skips the batches already trained and sees the same ones after, with no sampler or stream state to
save. `TaskStepCallback` activates the step's task before its forward passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from adapterfusion.training.sampling import StepTasks

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


class _ShuffledPasses:
    """The seeded permutations of `size` examples that a DataLoader(shuffle=True) with a generator seeded `seed` walks,
    pass after pass, drawn when first asked for: only the latest pass is kept, so memory does not grow with the run's
    length or its gradient accumulation. The Trainer reads items in order (a resume skips indices without reading
    them), so an earlier pass is drawn again from the seed only when asked for out of order."""

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed = size, seed
        self.generator = torch.Generator().manual_seed(seed)
        self.drawn = -1  # the index of the pass `latest` holds
        self.latest = np.empty(0, dtype=np.int64)

    def __getitem__(self, index: int) -> np.ndarray:
        if index < self.drawn:
            self.generator.manual_seed(self.seed)
            self.drawn = -1
        while self.drawn < index:
            loader = DataLoader(
                cast(Dataset, range(self.size)), batch_size=self.size, shuffle=True, generator=self.generator
            )
            self.latest = torch.cat(list(loader)).numpy()
            self.drawn += 1
        return self.latest


class TaskBatches(Dataset):
    """Micro-batch i of an MT-A run, collated: optimizer step i // accumulation trains task `step_tasks[step]`, and
    each task's batches follow one another in that task's shuffled passes (seed `seed + task index`). What is held
    is per step reached, not per micro-batch nor per planned step: a large `accumulation` or a plan of 10**12 steps
    costs no memory (`step_tasks`: a StepTasks drawn as the steps come, or a list)."""

    def __init__(
        self,
        datasets: Sequence[Any],
        step_tasks: Sequence[int],
        batch_size: int,
        accumulation: int,
        collator: Callable[[list[Any]], dict[str, torch.Tensor]],
        seed: int,
    ) -> None:
        self.datasets, self.batch_size, self.collator = list(datasets), batch_size, collator
        self.accumulation = accumulation
        self.step_tasks = step_tasks if isinstance(step_tasks, StepTasks) else StepTasks.listed(step_tasks)
        self.passes = [_ShuffledPasses(len(dataset), seed + task) for task, dataset in enumerate(self.datasets)]

    def __len__(self) -> int:
        return len(self.step_tasks) * self.accumulation

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        step, within = divmod(index, self.accumulation)
        task = self.step_tasks[step]
        rank = self.step_tasks.rank(step) * self.accumulation + within  # which batch of its task this item is
        per_pass = math.ceil(len(self.datasets[task]) / self.batch_size)
        start = (rank % per_pass) * self.batch_size
        rows = self.passes[task][rank // per_pass][start : start + self.batch_size]
        return self.collator([self.datasets[task][int(row)] for row in rows])


def ready_batch(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The Trainer's collator for TaskBatches: it asks for batches of one item, which is already a batch."""
    (batch,) = items
    return batch


class TaskStepCallback(TrainerCallback):
    """Activates the adapter and head of the task each optimizer step trains (`names[step_tasks[step]]`)."""

    def __init__(self, model: AdaptedModel, names: Sequence[str], step_tasks: Sequence[int]) -> None:
        self.model, self.names, self.step_tasks = model, list(names), step_tasks

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        name = self.names[self.step_tasks[state.global_step]]
        self.model.activate(adapter=name, head=name)
