"""Evaluation of trained runs: `evaluate_run(run_dir, split)` rebuilds a run's model (training/rebuild.py),
reloads the split exactly as the run saw its data (same source, seed, carve-out and subsample), and scores it
with the task's metrics. On the validation split it gives the numbers of the run's own metrics.json.

`predict` and `score` are the parts other analyses reuse (pruning evaluates two fusions on one batch list).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from adapterfusion.errors import ConfigError
from adapterfusion.tasks.collator import TaskCollator
from adapterfusion.tasks.encoding import encode_task
from adapterfusion.tasks.loading import load_task_data
from adapterfusion.tasks.metrics import dev_metrics
from adapterfusion.tasks.spec import ROLES, TaskSpec

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel
    from adapterfusion.training.rebuild import RebuiltRun


@dataclass(frozen=True)
class Predictions:
    """Head logits and gold labels of a whole split; `loss` is the mean task loss per example (the HF
    Trainer's eval_loss), None when the batches have no labels."""

    logits: np.ndarray
    labels: np.ndarray
    loss: float | None


@torch.no_grad()
def predict(model: AdaptedModel, batches: Iterable[Mapping[str, torch.Tensor]], bf16: bool = False) -> Predictions:
    """Run `batches` through the model as it is activated, in eval mode and inside `inference_cache()`; with `bf16`
    under bfloat16 autocast, as a run trained with TrainingConfig.bf16 evaluates."""
    device = next(model.parameters()).device
    was_training = model.training
    logits, labels, loss_sum, count = [], [], 0.0, 0
    model.eval()
    try:
        with model.inference_cache(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            for batch in batches:
                batch = {k: v.to(device) for k, v in batch.items() if isinstance(v, torch.Tensor)}
                output = model(**batch)
                logits.append(output.logits.float().cpu().numpy())
                if "labels" in batch:
                    labels.append(batch["labels"].cpu().numpy())
                    loss_sum += float(output.task_loss) * len(batch["labels"])
                    count += len(batch["labels"])
    finally:
        model.train(was_training)
    if not logits:
        raise ConfigError("predict: no batches to evaluate (the split is empty)")
    return Predictions(
        np.concatenate(logits),
        np.concatenate(labels) if labels else np.empty(0, dtype=np.int64),
        loss_sum / count if count else None,
    )


def score(task: TaskSpec, predictions: Predictions) -> dict[str, float]:
    """The task's metrics of `predictions`, plus "loss"."""
    metrics = dev_metrics(task, predictions.logits, predictions.labels)
    return {**metrics, "loss": predictions.loss} if predictions.loss is not None else metrics


def recorded_limits(data_info: Mapping[str, Any]) -> dict[str, int] | None:
    """The per-split max_examples a run used, read back from its config.json "data" record."""
    limits = {
        role: int(s["num_rows"])
        for role, s in data_info.get("splits", {}).items()
        if int(s["num_rows"]) < int(s["rows_available"])
    }
    return limits or None


def load_run_split(
    run: RebuiltRun,
    split: str = "validation",
    data_dir: str | os.PathLike | None = None,
    max_examples: int | None = None,
):
    """`split` of the run's task, tokenised for its model: by default the run's own data source and subsample
    (seeded with the run's seed), else `data_dir` and/or a seeded subset of `max_examples` rows."""
    if split not in ROLES:
        raise ConfigError(f"split={split!r} is not a split role; use one of {list(ROLES)}")
    data_info = run.config["data"]
    if data_dir is None and data_info["source"] == "local":
        data_dir = data_info["location"]
    limits = max_examples if max_examples is not None else recorded_limits(data_info)
    data, _ = load_task_data(run.task, data_dir, run.seed, max_examples=limits)
    if split not in data:
        raise ConfigError(
            f"task {run.task.name!r} has no labelled {split!r} split at "
            f"{data_dir or data_info['location']} "
            f"(it has {list(data)}); choose another --split or pass --data-dir"
        )
    encoded, _ = encode_task(
        run.task, type(data)({split: data[split]}), run.tokenizer, run.config["training"].get("max_length")
    )
    return encoded[split]


def eval_batch_size(run: RebuiltRun, batch_size: int | None = None) -> int:
    """`batch_size`, else the run's eval batch size (TrainingConfig.eval_batch_size, else batch_size)."""
    training = run.config["training"]
    size = batch_size if batch_size is not None else training.get("eval_batch_size") or training["batch_size"]
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(f"batch_size={size!r} must be a positive integer")
    return size


def run_batches(run: RebuiltRun, dataset, batch_size: int | None = None) -> list[dict[str, torch.Tensor]]:
    """The dataset in order, padded per batch; default batch size the run's eval batch size (the same batches,
    hence the same padding and numbers, as the Trainer's evaluation)."""
    size = eval_batch_size(run, batch_size)
    collate = TaskCollator(run.tokenizer)
    return [
        collate([dataset[i] for i in range(start, min(start + size, len(dataset)))])
        for start in range(0, len(dataset), size)
    ]


def evaluate_run(
    run_dir: str | os.PathLike,
    split: str = "validation",
    data_dir: str | os.PathLike | None = None,
    max_examples: int | None = None,
    batch_size: int | None = None,
    store: str | os.PathLike | None = None,
    device: str | None = None,
) -> dict[str, Any]:
    """Score the trained model of `run_dir` on `split`. Returns a JSON-ready dict: the run's task, setup and
    seed, the split and its size, `metrics` (the task's metrics and loss) and, for the validation split,
    `recorded` (the same keys from the run's metrics.json)."""
    from adapterfusion.training.rebuild import rebuild_run

    run = rebuild_run(run_dir, store=store, device=device)
    dataset = load_run_split(run, split, data_dir, max_examples)
    batches = run_batches(run, dataset, batch_size)
    metrics = score(run.task, predict(run.model, batches))
    result = {
        "run_dir": str(run.run_dir),
        "task": run.task.name,
        "setup": run.setup,
        "seed": run.seed,
        "split": split,
        "examples": len(dataset),
        "batch_size": eval_batch_size(run, batch_size),
        "metrics": metrics,
    }
    if split == "validation":
        recorded = run.recorded_metrics()
        result["recorded"] = {k: recorded[k] for k in metrics if k in recorded}
    return result
