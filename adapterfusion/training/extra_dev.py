"""Score a trained run on its task's further dev sets (TaskSpec.extra_dev_splits, e.g. MNLI's mismatched one) with
the weights the main dev set selected: recorded in metrics.json under "extra_dev", never used to select. A generation
task's are scored as its main dev set is (answer loss, perplexity, token accuracy and, if asked for, exact match)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from torch.utils.data import DataLoader

from adapterfusion.answer_scoring import score_generation
from adapterfusion.scoring import predict, score
from adapterfusion.tasks.collator import TaskCollator
from adapterfusion.tasks.encoding import encode_task
from adapterfusion.tasks.extra_dev import load_extra_dev_splits
from adapterfusion.tasks.spec import TaskSpec
from adapterfusion.training.batching import sorted_by_length
from adapterfusion.training.config import TrainingConfig


def score_extra_dev(
    model: Any,
    spec: TaskSpec,
    tokenizer: Any,
    config: TrainingConfig,
    data_dir: str | os.PathLike | None,
    seed: int,
    max_examples: int | Mapping[str, int] | None,
) -> tuple[dict[str, dict[str, float]], list[str]]:
    """(split -> the task's metrics there, notes on extra dev splits that were not found); both empty for a task
    without extra dev splits."""
    if not spec.extra_dev_splits:
        return {}, []
    import datasets

    extra = load_extra_dev_splits(spec, data_dir, seed, max_examples=max_examples)
    if not extra.splits:
        return {}, list(extra.notes)
    encoded, _ = encode_task(spec, datasets.DatasetDict(extra.splits), tokenizer, config.max_length)
    size = config.eval_batch_size or config.batch_size
    if spec.is_generation:  # the LM's own head scores the answer tokens, right-padded as in training
        collate = TaskCollator(tokenizer, padding_side="right")
        return {
            split: score_generation(
                model,
                DataLoader(sorted_by_length(dataset), batch_size=size, collate_fn=collate),
                spec,
                tokenizer,
                bf16=config.bf16,
            )
            for split, dataset in encoded.items()
        }, list(extra.notes)
    scores = {
        split: score(
            spec,
            predict(
                model,
                DataLoader(sorted_by_length(dataset), batch_size=size, collate_fn=TaskCollator(tokenizer)),
                bf16=config.bf16,
            ),
        )
        for split, dataset in encoded.items()
    }
    return scores, list(extra.notes)
