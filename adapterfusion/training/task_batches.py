"""MT-A's training data as the loop takes it: which task each optimizer step trains, and that step's batches.

The task sampler (training/sampling.py) draws every step's task before training starts, and each task's training set
is walked in seeded shuffled passes (a new permutation per pass, as a shuffling DataLoader with its own generator
walks it), so micro-batch i of a run is a pure function of i. The HF Trainer can then feed MT-A like any dataset, in
order and one ready batch per item, and resume it: a resumed run skips the batches already trained and sees the same
ones after, with no sampler or stream state to save. `TaskStepCallback` activates the step's task before its
forward passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


def _shuffled_passes(size: int, batches: int, batch_size: int, seed: int) -> list[np.ndarray]:
    """Enough seeded permutations of `size` examples for `batches` batches of `batch_size` (the last batch of each
    pass may be short): the orders a DataLoader(shuffle=True) with a generator seeded `seed` walks, pass by pass."""
    generator = torch.Generator().manual_seed(seed)
    passes = math.ceil(batches / math.ceil(size / batch_size))
    return [
        torch.cat(
            list(DataLoader(cast(Dataset, range(size)), batch_size=size, shuffle=True, generator=generator))
        ).numpy()
        for _ in range(passes)
    ]


class TaskBatches(Dataset):
    """Micro-batch i of an MT-A run, collated: optimizer step i // accumulation trains task `step_tasks[step]`, and
    each task's batches follow one another in that task's shuffled passes (seed `seed + task index`)."""

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
        self.item_tasks = np.repeat(np.asarray(step_tasks, dtype=np.int64), accumulation)
        self.item_ranks = np.zeros(len(self.item_tasks), dtype=np.int64)  # which batch of its task an item is
        self.orders = []
        for task, dataset in enumerate(self.datasets):
            mine = self.item_tasks == task
            self.item_ranks[mine] = np.arange(int(mine.sum()))
            self.orders.append(_shuffled_passes(len(dataset), int(mine.sum()), batch_size, seed + task))

    def __len__(self) -> int:
        return len(self.item_tasks)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        task, rank = int(self.item_tasks[index]), int(self.item_ranks[index])
        per_pass = math.ceil(len(self.datasets[task]) / self.batch_size)
        start = (rank % per_pass) * self.batch_size
        rows = self.orders[task][rank // per_pass][start : start + self.batch_size]
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
