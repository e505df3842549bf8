"""The training loop's data for an extractive QA task: a single-task run whose dev metrics are decoded answers.

The Trainer trains on the windows' start/end positions like any single-task run (loop.single_task_data); only its
evaluation differs: the dev logits [windows, seq, 2] become one answer per question with the dev features' offsets
and contexts, scored by SQuAD's exact match and F1 (tasks/squad.py). The features are the loop's own dev set, in the
order the Trainer evaluates it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from adapterfusion.tasks.spec import TaskSpec
from adapterfusion.tasks.squad import score_qa
from adapterfusion.training.config import TrainingConfig
from adapterfusion.training.loop import LoopData, single_task_data


def qa_task_data(task: TaskSpec, train: Any, dev: Any, tokenizer: Any, config: TrainingConfig) -> LoopData:
    """single_task_data with the dev features' decoded answers as its metrics."""
    data = single_task_data(task, train, dev, tokenizer, config)
    features = data.eval
    return dataclasses.replace(
        data, compute_metrics=lambda prediction: score_qa(features, prediction.predictions, task.metrics)
    )
