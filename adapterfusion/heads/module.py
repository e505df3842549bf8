"""PredictionHead: the trainable layers on top of the encoder for one task."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from adapterfusion._validation import check_int
from adapterfusion.errors import ConfigError
from adapterfusion.heads.config import HeadConfig
from adapterfusion.heads.question_answering import qa_loss
from adapterfusion.heads.token_classification import tagging_loss

MAX_OUTPUT_WEIGHTS = 2**34  # 64 GiB in float32: beyond any head's task (1M labels on a 4096-wide decoder is 2**32)
_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU, "swish": nn.SiLU}


def first_token(hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Each row's first non-padding position ([CLS]): position 0 on right padding, but on a left-padded row
    position 0 is padding, whose output the head read without a word. argmax gives the first highest mask value."""
    if attention_mask is None:
        return hidden_states[:, 0]
    first = attention_mask.to(torch.long).argmax(dim=-1)
    return hidden_states[torch.arange(hidden_states.shape[0], device=hidden_states.device), first]


def last_token(hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Each row's last non-padding position, with left or right padding: the highest index the mask keeps (read
    on the device, no sync)."""
    if attention_mask is None:
        return hidden_states[:, -1]
    positions = torch.arange(attention_mask.shape[-1], device=attention_mask.device)
    last = (attention_mask.to(torch.long) * positions).argmax(dim=-1)
    return hidden_states[torch.arange(hidden_states.shape[0], device=hidden_states.device), last]


def _check_output_layer(config: HeadConfig, hidden_size: int) -> None:
    """Refuse an output layer of more weights than any memory holds (a typo in num_labels, a hand-edited head
    config): torch's allocator failed with a RuntimeError naming bytes, or, where memory is overcommitted, the
    process was killed while the weights were initialised."""
    weights = hidden_size * config.output_size
    if weights > MAX_OUTPUT_WEIGHTS:
        raise ConfigError(
            f"num_labels={config.num_labels}: the head's output layer would hold {hidden_size} x "
            f"{config.output_size} = {weights:,} weights ({weights * 4 / 2**30:,.0f} GiB in float32), more than the "
            f"{MAX_OUTPUT_WEIGHTS:,} a head may have; check num_labels"
        )


class PredictionHead(nn.Module):
    """[dropout -> linear -> activation] x (layers - 1) -> dropout -> linear, on the pooled encoder output (on every
    token's output for a per-token head: question answering, tagging)."""

    def __init__(self, config: HeadConfig, hidden_size: int) -> None:
        super().__init__()
        if not isinstance(config, HeadConfig):
            raise ConfigError(
                f"PredictionHead: config is a {type(config).__name__}; pass a head config such as "
                "af.ClassificationHead(num_labels=2) (a saved one's dict through heads.head_config_from_dict)"
            )
        check_int(hidden_size, "PredictionHead hidden_size", minimum=1)
        if config.pooling is None and not config.per_token:  # add_head sets the model's own first
            raise ConfigError(
                "a head's pooling must be set before its module is built: pass pooling='cls', 'mean' or 'last'"
            )
        self.config = config
        self.hidden_size = hidden_size
        _check_output_layer(config, hidden_size)
        blocks: list[nn.Module] = []
        for _ in range(config.layers - 1):
            blocks += [
                nn.Dropout(config.dropout),
                nn.Linear(hidden_size, hidden_size),
                _ACTIVATIONS[config.activation](),
            ]
        try:
            blocks += [nn.Dropout(config.dropout), nn.Linear(hidden_size, config.output_size)]
        except (RuntimeError, MemoryError) as error:  # torch's allocator (torch.OutOfMemoryError is a RuntimeError)
            if isinstance(error, RuntimeError) and "alloc" not in str(error).lower():
                raise
            raise ConfigError(
                f"num_labels={config.num_labels}: the head's output layer ({hidden_size} x {config.output_size} "
                f"weights) does not fit in memory ({type(error).__name__}); check num_labels"
            ) from None
        self.layers = nn.Sequential(*blocks)

    def pool(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        if self.config.pooling == "cls":
            return first_token(hidden_states, attention_mask)
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
        if self.config.kind == "multiple_choice" and logits.shape[-1] < 2:
            raise ConfigError(
                f"a multiple-choice batch of {logits.shape[-1]} choice per example: a cross-entropy over one choice "
                "is always 0, so nothing is learned; give each example at least 2 choices ([batch, choices, seq] "
                "input_ids)"
            )
        if self.config.kind == "regression":
            # at least float32: a squared error of 300 is inf in float16 (at most 65504), and so were the loss and
            # then every weight; a float64 head keeps its precision
            dtype = torch.promote_types(logits.dtype, torch.float32)
            return F.mse_loss(logits.to(dtype), _regression_targets(labels, dtype))
        if self.config.kind == "question_answering":
            return qa_loss(logits, labels)
        if self.config.kind == "token_classification":
            return tagging_loss(logits, labels)
        return F.cross_entropy(logits, labels.long())


def _regression_targets(labels: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`labels` in `dtype` (float32 or float64), refused where they do not fit it (float64 targets beyond 3.4e38 for
    float32): they became inf, and so did the loss, without a word."""
    targets = labels.to(dtype)
    if not bool(torch.isfinite(targets).all()) and bool(torch.isfinite(labels).all()):
        raise ConfigError(
            f"regression labels up to {float(labels.abs().max()):g} do not fit {dtype}, where the loss is computed "
            "(they become inf there, and so would the loss); scale the targets down, e.g. standardise them"
        )
    return targets
