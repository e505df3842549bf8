"""Head-only training on cached encoder features.

When nothing below the head trains (the "head" setup: a frozen encoder without adapters), every epoch would run the
same encoder forward pass over the same examples. We run it once, in eval mode, keep each example's pooled vector
(the head's own pooling), and train the head on those vectors: the same model and loss, at the cost of one forward
pass instead of one per epoch. The one difference is that the encoder's dropout is off (eval mode) while the head
trains; the head's own dropout still applies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from adapterfusion.forward_inputs import check_call
from adapterfusion.heads.module import PredictionHead
from adapterfusion.tasks.collator import TaskCollator

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


@torch.no_grad()
def pooled_features(
    model: AdaptedModel, head: str, batches: Iterable[Mapping[str, torch.Tensor]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each example's pooled encoder output as head `head` pools it ([n, hidden], or [n, choices, hidden] for
    multiple choice) and its label, from the model run in eval mode with its current activation."""
    module = model.get_head(head)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    features, labels = [], []
    try:
        for batch in batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            # the head's own forward path: an encoder-decoder's decoder inputs, a decoder's positions, the choices
            call = check_call(model, {k: v for k, v in batch.items() if k != "labels"}, head)
            hidden = call.encoder(**call.inputs).last_hidden_state
            pooled = module.pool(hidden, call.head_mask)
            choices = call.num_choices
            features.append((pooled.view(-1, choices, pooled.shape[-1]) if choices else pooled).cpu())
            labels.append(batch["labels"].cpu())
    finally:
        model.train(was_training)
    return torch.cat(features), torch.cat(labels)


class FeatureDataset(Dataset):
    """Cached features and labels, served as {"features", "labels"} examples."""

    def __init__(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        self.features, self.labels = features, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"features": self.features[index], "labels": self.labels[index]}


def stack_features(examples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {key: torch.stack([e[key] for e in examples]) for key in examples[0]}


@dataclass
class HeadOutput:
    """What AdaptedTrainer reads of a model's output."""

    logits: torch.Tensor
    loss: torch.Tensor | None = None
    task_loss: torch.Tensor | None = None


class HeadOnFeatures(nn.Module):
    """One head trained on cached features; shares its parameters with the AdaptedModel's head, so training this
    trains that. Offers the two AdaptedModel hooks AdaptedTrainer uses (`sites`, `set_fusion_step`)."""

    sites: tuple[()] = ()

    def __init__(self, head: PredictionHead) -> None:
        super().__init__()
        self.head = head

    def set_fusion_step(self, step: int) -> None:  # no fusion here
        pass

    def forward(self, features: torch.Tensor, labels: torch.Tensor | None = None) -> HeadOutput:
        choices = features.shape[1] if features.dim() == 3 else None
        pooled = features.flatten(0, 1) if choices else features
        logits = self.head.from_pooled(pooled, choices)
        output = HeadOutput(logits=logits)
        if labels is not None:
            output.task_loss = output.loss = self.head.loss(logits, labels)
        return output


def cached_head_training_set(
    model: AdaptedModel, head: str, encoded_splits: Mapping[str, Any], tokenizer, batch_size: int
) -> dict[str, FeatureDataset]:
    """FeatureDatasets of the given encoded splits (e.g. train and validation), pooled as `head` pools."""
    collator = TaskCollator(tokenizer)
    return {
        role: FeatureDataset(
            *pooled_features(model, head, DataLoader(split, batch_size=batch_size, collate_fn=collator))
        )
        for role, split in encoded_splits.items()
    }
