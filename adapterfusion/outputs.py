"""What a forward of an AdaptedModel returns: `AdaptedModelOutput`, filled from the wrapped model's output, and its
loss (the task loss, plus the fusion regularisation while a fusion's V trains). The model's forward and a routed
forward (routed_forward.py) both build their output here, so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from transformers.utils import ModelOutput

from adapterfusion.injection import controls as fusion_controls

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


@dataclass
class AdaptedModelOutput(ModelOutput):
    """loss = task_loss + fusion_regularization while a fusion with a trainable V is trained.
    fusion_attentions[layer]: [batch, seq, N] softmax weights of the 'output' site (else the 'attention' site, else
    an encoder-decoder's 'cross' site), None for layers without fusion; every site's weights are in
    fusion_attentions_by_site[(layer, position)]. A call that runs no fusion refuses output_fusion_attentions=True.
    The wrapped model's other outputs pass through under their transformers names (a decoder's past_key_values, an
    encoder-decoder's encoder_* and decoder_* states)."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    past_key_values: Any = None
    encoder_last_hidden_state: torch.Tensor | None = None
    encoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    encoder_attentions: tuple[torch.Tensor, ...] | None = None
    decoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    decoder_attentions: tuple[torch.Tensor, ...] | None = None
    cross_attentions: tuple[torch.Tensor, ...] | None = None
    task_loss: torch.Tensor | None = None
    fusion_regularization: torch.Tensor | None = None
    fusion_attentions: tuple[torch.Tensor | None, ...] | None = None
    fusion_attentions_by_site: dict[tuple[int, str], torch.Tensor] | None = None
    # A routed call whose heads give logits of different shapes: each example's logits (then `logits` is None).
    row_logits: tuple[torch.Tensor, ...] | None = None


# The wrapped model's outputs a forward hands on as they are (its loss and logits are decided per head).
_PASSED_THROUGH = frozenset(AdaptedModelOutput.__dataclass_fields__) - {"loss", "logits", "row_logits"}


def passed_through(encoded: Mapping[str, Any]) -> AdaptedModelOutput:
    """An output holding what the wrapped model's `encoded` output gives that a head does not decide."""
    return AdaptedModelOutput(**{key: value for key, value in encoded.items() if key in _PASSED_THROUGH})


def take_own_head_output(output: AdaptedModelOutput, encoded: Mapping[str, Any]) -> None:
    """The wrapped task model's own logits and loss into `output`, and the outputs our fields do not name under their
    transformers names (a QA model's start_logits / end_logits, GPT2DoubleHeadsModel's mc_logits and mc_loss):
    `output.start_logits` and `output["start_logits"]` work as on the wrapped model."""
    output.logits, output.task_loss = encoded.get("logits"), encoded.get("loss")
    for key, value in encoded.items():
        if key not in AdaptedModelOutput.__dataclass_fields__ and value is not None:
            output[key] = value


def add_loss(model: AdaptedModel, output: AdaptedModelOutput, fusions: Sequence[str]) -> None:
    """output.loss from its task loss, plus, in training mode, the regularisation of those of `fusions` (the ones
    the call ran) whose V trains."""
    if output.task_loss is None:
        return
    output.loss = output.task_loss
    trained = [name for name in fusions if fusion_controls.value_trains(model.fusion_layers(name))]
    if model.training and trained:
        terms = [model.fusion_regularization(name) for name in trained]
        output.fusion_regularization = terms[0] if len(terms) == 1 else torch.stack(terms).sum()
        output.loss = output.loss + output.fusion_regularization
