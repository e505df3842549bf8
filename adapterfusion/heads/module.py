"""PredictionHead: the trainable layers on top of the encoder for one task."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from adapterfusion.errors import ConfigError
from adapterfusion.heads.config import HeadConfig
from adapterfusion.heads.question_answering import qa_loss
from adapterfusion.heads.token_classification import tagging_loss

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU, "swish": nn.SiLU}


def last_token(hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Each row's last non-padding position, with left or right padding: the highest index the mask keeps (read
    on the device, no sync)."""
    if attention_mask is None:
        return hidden_states[:, -1]
    positions = torch.arange(attention_mask.shape[-1], device=attention_mask.device)
    last = (attention_mask.to(torch.long) * positions).argmax(dim=-1)
    return hidden_states[torch.arange(hidden_states.shape[0], device=hidden_states.device), last]


class PredictionHead(nn.Module):
    """[dropout -> linear -> activation] x (layers - 1) -> dropout -> linear, on the pooled encoder output (on every
    token's output for a per-token head: question answering, tagging)."""

    def __init__(self, config: HeadConfig, hidden_size: int) -> None:
        super().__init__()
        if config.pooling is None and not config.per_token:  # add_head sets the model's own first
            raise ConfigError(
                "a head's pooling must be set before its module is built: pass pooling='cls', 'mean' or 'last'"
            )
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
        if self.config.pooling == "last":
            return last_token(hidden_states, attention_mask)
        if attention_mask is None:  # every position is a real token
            return hidden_states.mean(dim=1)
        mask = attention_mask.unsqueeze(-1).to(hidden_states.dtype)
        return (hidden_states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, num_choices: int | None = None
    ) -> torch.Tensor:
        if self.config.per_token:  # question answering, tagging: the same layers on every token, no pooling
            return self.layers(hidden_states)
        return self.from_pooled(self.pool(hidden_states, attention_mask), num_choices)

    def from_pooled(self, pooled: torch.Tensor, num_choices: int | None = None) -> torch.Tensor:
        """The head's output from already pooled features ([n, hidden]; multiple choice: n = batch x choices)."""
        logits = self.layers(pooled)
        if self.config.kind == "multiple_choice":
            return logits.view(-1, num_choices)
        if self.config.kind == "regression":
            return logits.squeeze(-1)
        return logits

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.config.kind == "regression":
            return F.mse_loss(logits, labels.to(logits.dtype))
        if self.config.kind == "question_answering":
            return qa_loss(logits, labels)
        if self.config.kind == "token_classification":
            return tagging_loss(logits, labels)
        return F.cross_entropy(logits, labels.long())
