"""The `batches` that functions running a model over a dataset take (predict, mean_fusion_attention, span ablation,
pruning): an iterable of mappings of model inputs. One batch passed in their place is iterated as its keys, and a
tensor as a batch has no `.items()`: both were AttributeErrors from deep inside."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapterfusion.errors import ConfigError


def check_batches(batches: Any, caller: str) -> None:
    """ConfigError, naming `caller`, when `batches` is one batch (a mapping) rather than an iterable of them."""
    if isinstance(batches, Mapping):
        raise ConfigError(
            f"{caller} takes an iterable of batches (mappings of model inputs), got one batch; pass [batch], or a "
            "DataLoader"
        )


def check_batch(batch: Any, caller: str) -> None:
    """ConfigError, naming `caller`, when one of the batches is not a mapping of model inputs."""
    if not isinstance(batch, Mapping):
        raise ConfigError(
            f"{caller}: a batch must be a mapping of model inputs (input_ids, attention_mask, ...), got "
            f"{type(batch).__name__}; pass tokenizer(texts, return_tensors='pt', padding=True) per batch"
        )
