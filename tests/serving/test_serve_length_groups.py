"""The predictor's length groups: an exact cheapest partition of a batch's sorted input lengths into forwards."""

from __future__ import annotations

import itertools

import pytest
import torch

from adapterfusion.serving.predictor import forward_cost, length_groups


def _cost(lengths: list[int], groups: list[list[int]], forward_cost: int) -> int:
    return sum(len(group) * max(lengths[i] for i in group) + forward_cost for group in groups)


def _slow_best(lengths: list[int], forward_cost: int) -> int:
    """Every way to cut the sorted inputs into runs, tried one by one."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    best = None
    for cuts in itertools.product([False, True], repeat=len(order) - 1):
        groups, current = [], [order[0]]
        for index, cut in zip(order[1:], cuts, strict=True):
            if cut:
                groups.append(current)
                current = []
            current.append(index)
        groups.append(current)
        cost = _cost(lengths, groups, forward_cost)
        best = cost if best is None else min(best, cost)
    assert best is not None
    return best


@pytest.mark.parametrize("seed", range(12))
def test_the_groups_cover_every_input_once_and_cost_the_least(seed: int) -> None:
    import random

    generator = random.Random(seed)
    lengths = [generator.choice([8, 12, 30, 41, 90, 160]) for _ in range(generator.randint(1, 11))]
    forward_cost = generator.choice([0, 16, 64, 1000])
    groups = length_groups(lengths, forward_cost)
    assert sorted(i for group in groups for i in group) == list(range(len(lengths)))
    assert _cost(lengths, groups, forward_cost) == _slow_best(lengths, forward_cost)


def test_a_long_input_among_short_ones_gets_its_own_forward_and_similar_ones_share_one() -> None:
    assert length_groups([40, 160, 38, 42], forward_cost=64) == [[2, 0, 3], [1]]
    assert length_groups([40, 41, 39], forward_cost=64) == [[2, 0, 1]]
    assert length_groups([], forward_cost=64) == []


def test_on_an_accelerator_a_batch_is_split_only_for_extreme_padding() -> None:
    """One more forward costs launches worth thousands of tokens on a GPU, tens on a CPU."""
    cpu, gpu = forward_cost(torch.device("cpu")), forward_cost(torch.device("meta"))
    assert length_groups([40, 160, 38, 42], forward_cost=cpu) == [[2, 0, 3], [1]]
    assert length_groups([40, 160, 38, 42], forward_cost=gpu) == [[2, 0, 3, 1]]
    assert len(length_groups([8] * 31 + [4096], forward_cost=gpu)) == 2
