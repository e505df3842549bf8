"""`predict`: a model's head logits, gold labels and mean task loss over a list of batches, as it is activated;
`score`: the task's metrics of them. Below the training recipes (MT-A scores every task's dev set with them) and
knowing nothing of run folders; evaluation.py applies them to a rebuilt run."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from adapterfusion.errors import ConfigError
from adapterfusion.tasks.metrics import dev_metrics
from adapterfusion.tasks.spec import TaskSpec

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


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
