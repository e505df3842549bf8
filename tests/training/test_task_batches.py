"""MT-A's micro-batches (training/task_batches.py) against a plain reference: every micro-batch of every task, in
order and out of order, and a gradient accumulation so large that holding a row order per micro-batch (as the class
once did) would take gigabytes."""

import math
import random

import torch
from torch.utils.data import DataLoader

from adapterfusion.training.sampling import StepTasks, TaskSampler
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


def test_step_tasks_are_drawn_as_reached_and_as_drawing_them_all_up_front_would():
    """A plan of 10**12 steps costs only the steps asked for (all of them were once drawn before training), and
    step i's task and rank are those of drawing every step in order from the same seeded sampler."""
    sizes, steps_per_epoch, epochs = [5, 9, 2], 3, 4
    eager_sampler = TaskSampler(sizes, steps_per_epoch, epochs, seed=7)
    eager = [eager_sampler.draw(step) for step in range(12)]
    lazy = StepTasks.sampled(TaskSampler(sizes, steps_per_epoch, epochs, seed=7), 10**12)
    assert len(lazy) == 10**12
    assert lazy[5] == eager[5] and len(lazy.tasks) == 6
    assert lazy[:12] == eager and len(lazy.tasks) == 12
    assert [lazy.rank(step) for step in range(12)] == [eager[:step].count(eager[step]) for step in range(12)]
    listed = StepTasks.listed(eager)
    assert list(listed) == eager and len(listed) == 12


def test_micro_batches_of_drawn_steps_are_those_of_the_listed_steps():
    sizes, accumulation = [7, 4, 10], 2
    sampler = TaskSampler(sizes, 4, 3, seed=3)
    drawn = StepTasks.sampled(sampler, 12)
    datasets = [[(task, row) for row in range(size)] for task, size in enumerate(sizes)]
    lazy = TaskBatches(datasets, drawn, 3, accumulation, list, seed=11)
    listed = TaskBatches(
        datasets, list(StepTasks.sampled(TaskSampler(sizes, 4, 3, seed=3), 12)), 3, accumulation, list, 11
    )
    assert [lazy[i] for i in range(len(lazy))] == [listed[i] for i in range(len(listed))]
