"""MT-A's micro-batches (training/task_batches.py) against a plain reference: every micro-batch of every task, in
order and out of order, and a gradient accumulation so large that holding a row order per micro-batch (as the class
once did) would take gigabytes."""

import math
import random

import torch
from torch.utils.data import DataLoader

from adapterfusion.training.task_batches import TaskBatches


def _reference_batches(sizes, step_tasks, batch_size, accumulation, seed):
    """Each micro-batch's (task, rows), listed in full: a task's batches are those of its own DataLoader(shuffle=True)
    with a generator seeded `seed + task`, epoch after epoch, one per micro-batch of a step that trains that task."""
    walkers = {}
    for task, size in enumerate(sizes):
        generator = torch.Generator().manual_seed(seed + task)

        def walk(size=size, generator=generator):
            while True:  # each pass a new epoch of a shuffling DataLoader (its last batch may be short)
                for batch in DataLoader(range(size), batch_size=batch_size, shuffle=True, generator=generator):
                    yield batch.tolist()

        walkers[task] = walk()
    return [(task, next(walkers[task])) for task in step_tasks for _ in range(accumulation)]


def test_micro_batches_follow_each_tasks_shuffled_passes():
    rng = random.Random(0)
    for _ in range(20):
        sizes = [rng.randint(1, 30) for _ in range(rng.randint(1, 4))]
        step_tasks = [rng.randrange(len(sizes)) for _ in range(rng.randint(1, 40))]
        batch_size, accumulation, seed = rng.randint(1, 8), rng.randint(1, 4), rng.randint(0, 99)
        datasets = [[(task, row) for row in range(size)] for task, size in enumerate(sizes)]
        batches = TaskBatches(datasets, step_tasks, batch_size, accumulation, list, seed)
        expected = _reference_batches(sizes, step_tasks, batch_size, accumulation, seed)
        assert len(batches) == len(expected)
        order = list(range(len(batches)))
        rng.shuffle(order)  # read out of order too: an earlier pass is drawn again
        for index in [*range(len(batches)), *order]:
            task, rows = expected[index]
            assert batches[index] == [(task, row) for row in rows]


def test_a_huge_gradient_accumulation_holds_nothing_per_micro_batch():
    """10,000 steps × 10**6 micro-batches each: built at once, and a micro-batch of its fourth step (task 0's
    10**6 + 5th batch, in its fifth pass) is the reference's."""
    step_tasks = [step % 3 for step in range(10_000)]
    sizes, batch_size, accumulation = [10**6, 11, 13], 4, 10**6
    batches = TaskBatches([range(n) for n in sizes], step_tasks, batch_size, accumulation, list, seed=5)
    assert len(batches) == 10**10
    rank = accumulation + 5
    per_pass = math.ceil(sizes[0] / batch_size)
    generator = torch.Generator().manual_seed(5)
    for _ in range(rank // per_pass + 1):  # the permutation of the pass it falls in
        order = torch.cat(list(DataLoader(range(sizes[0]), batch_size=sizes[0], shuffle=True, generator=generator)))
    start = (rank % per_pass) * batch_size
    assert batches[3 * accumulation + 5] == order[start : start + batch_size].tolist()
