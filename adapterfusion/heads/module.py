"""PredictionHead: the trainable layers on top of the encoder for one task."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from adapterfusion.errors import ConfigError
from adapterfusion.heads.config import HeadConfig

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU, "swish": nn.SiLU}


class PredictionHead(nn.Module):
    """[dropout -> linear -> activation] x (layers - 1) -> dropout -> linear, on the pooled encoder output."""

    def __init__(self, config: HeadConfig, hidden_size: int) -> None:
        super().__init__()
        self.config = config
        self.hidden_size = hidden_size
        blocks: list[nn.Module] = []
        for _ in range(config.layers - 1):
            blocks += [
                nn.Dropout(config.dropout),
                nn.Linear(hidden_size, hidden_size),
                _ACTIVATIONS[config.activation](),
            ]
        blocks += [nn.Dropout(config.dropout), nn.Linear(hidden_size, config.output_size)]
        self.layers = nn.Sequential(*blocks)

    def pool(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        if self.config.pooling == "cls":
            return hidden_states[:, 0]
        if attention_mask is None:  # every position is a real token
            return hidden_states.mean(dim=1)
        mask = attention_mask.unsqueeze(-1).to(hidden_states.dtype)
        return (hidden_states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, num_choices: int | None = None
    ) -> torch.Tensor:
        return self.from_pooled(self.pool(hidden_states, attention_mask), num_choices)

    def from_pooled(self, pooled: torch.Tensor, num_choices: int | None = None) -> torch.Tensor:
        """The head's output from already pooled features ([n, hidden]; multiple choice: n = batch x choices)."""
        logits = self.layers(pooled)
        if self.config.kind == "multiple_choice":
            return logits.view(-1, num_choices)
        if self.config.kind == "regression":
            return logits.squeeze(-1)
        return logits

    def check_labels(self, labels: torch.Tensor, logits: torch.Tensor, name: str) -> None:
        """Class ids must index this head's outputs. Otherwise cross_entropy fails deep in torch (an IndexError on
        CPU, a device-side assert on CUDA) or, for a float label like 1.5, truncates it silently."""
        if self.config.kind == "regression":
            return
        if labels.shape[:1] != logits.shape[:1]:
            raise ConfigError(
                f"head {name!r}: {labels.shape[0] if labels.dim() else 1} labels for a batch of "
                f"{logits.shape[0]} examples; pass one class id per example"
            )
        count = logits.shape[-1]
        what = (
            f"{count} choices per example"
            if self.config.kind == "multiple_choice"
            else f"num_labels={self.config.num_labels}"
        )
        wrong = (labels < 0) | (labels >= count)
        if labels.is_floating_point():
            wrong |= labels != labels.round()
        bad = labels[wrong]
        if bad.numel():
            values = sorted(set(bad.tolist()))
            raise ConfigError(
                f"labels {values[:5]} are not class ids of head {name!r} ({what}): labels must be "
                f"integers in 0..{count - 1}; check the task's label ids or the head's num_labels"
            )

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.config.kind == "regression":
            return F.mse_loss(logits, labels.to(logits.dtype))
        return F.cross_entropy(logits, labels.long())


def flatten_choices(inputs: dict[str, torch.Tensor]) -> int:
    """[batch, choices, seq] -> [batch * choices, seq] for every per-token input, in place, for a MultipleChoiceHead;
    returns the choice count."""
    input_ids = inputs.get("input_ids")
    if input_ids is None or input_ids.dim() != 3:
        raise ConfigError(
            "the active head is a MultipleChoiceHead: pass input_ids of shape [batch, num_choices, seq], "
            f"got {None if input_ids is None else tuple(input_ids.shape)}"
        )
    for key in ("input_ids", "attention_mask", "token_type_ids", "position_ids"):
        if key in inputs and inputs[key].dim() == 3:
            inputs[key] = inputs[key].flatten(0, 1)
    return input_ids.shape[1]
