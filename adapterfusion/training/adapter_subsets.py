"""Fusion training on a random subset of the fused adapters per optimizer step (the paper's §8.2 outlook).

Each step fuses the target task's own adapter plus `size - 1` adapters drawn at random from the others; the rest get
softmax weight exactly 0 (`AdaptedModel.set_fusion_mask`), and the fast fusion path runs only the drawn adapters, so
a step costs what a fusion over `size` adapters costs. Evaluation and the saved fusion use all the adapters: Q, K and
V are shared by every adapter of a site, so nothing is retrained to fuse them all (or, after `prune`, fewer).

The draw is a pure function of (seed, global step): a resumed run draws what the uninterrupted one drew.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from transformers import TrainerCallback

from adapterfusion._validation import plain_scalar
from adapterfusion.training.errors import TrainingError

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


def check_subset_size(size: object, adapters: Sequence[str]) -> int | None:
    """The subset size to train with (None: all adapters every step), or a TrainingError saying what is allowed."""
    if size is None:
        return None
    size = plain_scalar(size)  # a numpy integer is a whole number too: it was refused as not one
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= len(adapters):
        raise TrainingError(
            f"fusion-st-a: adapter_subset={size!r} must be a whole number from 1 to the "
            f"{len(adapters)} fused adapters {list(adapters)} (the target's own always included), "
            "or null to fuse all of them in every step"
        )
    return None if size == len(adapters) else size


def draw_subset(adapters: Sequence[str], size: int, always: Sequence[str], seed: int, step: int) -> list[str]:
    """`always` plus `size - len(always)` others drawn without replacement, in the fusion's order."""
    check_always(adapters, size, always)
    others = [name for name in adapters if name not in always]
    drawn = set(always) | set(random.Random(f"adapter-subset:{seed}:{step}").sample(others, size - len(always)))
    return [name for name in adapters if name in drawn]


def check_always(adapters: Sequence[str], size: int, always: Sequence[str]) -> None:
    """`size` fits the fusion, and every adapter of `always` is one it fuses and fits in a subset of `size`: one that
    is not was dropped from every draw without a word (each step fused fewer adapters than `size`), and a size or
    `always` larger than that failed deep in random.sample."""
    check_subset_size(size, adapters)
    unknown = [name for name in always if name not in adapters]
    if unknown or len(always) != len(set(always)) or len(always) > size:
        problem = f"names {unknown}, not fused by it" if unknown else f"is not {size} or fewer distinct names"
        raise TrainingError(
            f"adapter subsets always include {list(always)}, which {problem}; give at most {size} distinct adapters of "
            f"the fusion's {list(adapters)} (the target task's own)"
        )


class AdapterSubsetCallback(TrainerCallback):
    """Masks the fusion to a fresh random subset before each optimizer step and unmasks it after, so evaluation
    (which runs between steps) always sees every adapter."""

    def __init__(self, model: AdaptedModel, fusion: str, size: int, always: Sequence[str], seed: int) -> None:
        self.model, self.fusion, self.size, self.always, self.seed = model, fusion, size, tuple(always), seed
        self.adapters = model.fusion_setup(fusion).adapters
        check_always(self.adapters, size, self.always)  # before training, not at its first step

    def on_step_begin(self, args, state, control, **kwargs):
        keep = draw_subset(self.adapters, self.size, self.always, self.seed, state.global_step)
        self.model.set_fusion_mask(self.fusion, keep)

    def on_step_end(self, args, state, control, **kwargs):
        self.model.set_fusion_mask(self.fusion, None)

    def on_train_end(self, args, state, control, **kwargs):
        self.model.set_fusion_mask(self.fusion, None)
