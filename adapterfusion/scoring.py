"""`predict`: a model's head logits, gold labels and mean task loss over a list of batches, as it is activated;
`score`: the task's metrics of them (a generation task's answer tokens: answer_scoring.py). Below the training recipes
(MT-A scores every task's dev set with them) and knowing nothing of run folders; evaluation.py applies them to a
rebuilt run."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from adapterfusion.errors import ConfigError
from adapterfusion.forward_inputs.batches import check_batch, check_batches
from adapterfusion.tasks.instruction import IGNORE_INDEX
from adapterfusion.tasks.metrics import dev_metrics
from adapterfusion.tasks.spec import TaskSpec
from adapterfusion.tasks.squad import qa_needs_features, score_qa

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
    check_wrapped(model, "predict")
    check_batches(batches, "predict")
    device = next(model.parameters()).device
    was_training = model.training
    logits, labels, loss_sum, count = [], [], 0.0, 0
    model.eval()
    try:
        with model.inference_cache(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            for batch in batches:
                check_batch(batch, "predict")
                batch = model_inputs(batch, device, "predict")
                output = model(**batch)
                if output.logits is None:  # routed heads of different output sizes answer row_logits alone
                    raise ConfigError(
                        "predict: the batch's head_names route its rows to heads of different output sizes, whose "
                        "logits do not stack into one array (the output holds row_logits, one per row); predict the "
                        "rows of each head apart"
                    )
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
        padded_concat(logits, -100.0),
        padded_concat(labels, IGNORE_INDEX) if labels else np.empty(0, dtype=np.int64),
        loss_sum / count if count else None,
    )


def check_wrapped(model: Any, caller: str) -> None:
    """`model` must be an AdaptedModel (af.wrap's): a transformers model itself, or None, was an AttributeError
    ('... has no attribute inference_cache')."""
    if not callable(getattr(model, "inference_cache", None)):
        raise ConfigError(
            f"{caller}: the model is {'None' if model is None else 'a ' + type(model).__name__}, not a wrapped model; "
            "pass the AdaptedModel that af.wrap(<your transformers model>) returns (or a run's: "
            "training.rebuild.rebuild_run(run_dir).model), with its adapter or fusion activated"
        )


ROUTING_KEYS = ("adapter_names", "head_names")  # a batch's per-row choices (lists), as model(**batch) takes them


def model_inputs(
    batch: Mapping[str, Any], device: torch.device, caller: str, leave_out: str | None = None
) -> dict[str, Any]:
    """A batch's tensors on `device`, with its per-row routing (adapter_names, head_names), which were dropped as
    not tensors: every row was run with what the model had active, without a word. Other values (an id column)
    are left out, as before; token ids or masks as lists were too, and the model told it was given no input_ids."""
    for key in ("input_ids", "attention_mask", "inputs_embeds"):
        value = batch.get(key)
        if value is not None and not isinstance(value, torch.Tensor):
            raise ConfigError(
                f"{caller}: a batch's {key} is a {type(value).__name__}, not a tensor; collate the examples into "
                "tensors (TaskCollator, or the tokenizer with return_tensors='pt' and padding=True)"
            )
    return {
        key: value.to(device) if isinstance(value, torch.Tensor) else value
        for key, value in batch.items()
        if key != leave_out and (isinstance(value, torch.Tensor) or (key in ROUTING_KEYS and value is not None))
    }


def padded_concat(arrays: list[np.ndarray], value: float) -> np.ndarray:
    """Batches joined along the first axis; per-token outputs (QA, tagging) of batches padded to different lengths
    padded with `value` to the longest first, as the HF Trainer pads them (-100)."""
    if len({a.shape[1:] for a in arrays}) <= 1:
        return np.concatenate(arrays)
    length = max(a.shape[1] for a in arrays)
    return np.concatenate(
        [np.pad(a, [(0, 0), (0, length - a.shape[1])] + [(0, 0)] * (a.ndim - 2), constant_values=value) for a in arrays]
    )


def score(task: TaskSpec, predictions: Predictions, features: Any = None) -> dict[str, float]:
    """The task's metrics of `predictions`, plus "loss". An extractive QA task decodes its answers with the encoded
    `features` the predictions came from, in their order (tasks/squad.py)."""
    if task.is_extractive_qa:
        if features is None:
            raise qa_needs_features(task)
        metrics = score_qa(features, predictions.logits, task.metrics)
        return {**metrics, "loss": predictions.loss} if predictions.loss is not None else metrics
    if predictions.labels.size == 0 and predictions.logits.size:
        raise ConfigError(
            f"score: the predictions for task {task.name!r} have no gold labels (the batches held no 'labels'); "
            "predict on batches that carry them (load the split with its labels: load_task_data, encode_task)"
        )
    metrics = dev_metrics(task, predictions.logits, predictions.labels)
    return {**metrics, "loss": predictions.loss} if predictions.loss is not None else metrics
