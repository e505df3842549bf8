"""What a wrapped transformers sequence classifier needs to find the token it pools, when no head of ours is active.
A decoder's (LlamaForSequenceClassification, GPT2ForSequenceClassification, ...) pools each row's last token that is
not its config's pad_token_id, so without one it refuses a batch of several rows; an encoder-decoder's
(BartForSequenceClassification, T5ForSequenceClassification) pools each row's last end-of-sequence token, found in
input_ids, and needs as many in every row. transformers refuses both with a ValueError from inside its forward.

The end tokens are counted on every device: transformers counts them itself on every forward (a host sync), so this
check adds none worth the name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from adapterfusion.errors import ConfigError
from adapterfusion.forward_inputs.encoder_decoder import is_seq2seq

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


def check_task_pooling(model: AdaptedModel, given: Mapping[str, Any], rows: int) -> None:
    """Refuse a call of `rows` rows that the wrapped sequence classifier cannot pool (see the module docstring)."""
    wrapped: Any = model.model
    name = type(wrapped).__name__
    if not name.endswith("ForSequenceClassification"):
        return
    if is_seq2seq(wrapped):
        _check_end_tokens(name, wrapped.config, given)
    elif model.architecture.causal and rows > 1 and wrapped.config.get_text_config().pad_token_id is None:
        raise ConfigError(
            f"{name} pools each row's last token that is not its pad token, and its config has no pad_token_id, so "
            f"it cannot tell padding in a batch of {rows} rows; set model.model.config.pad_token_id = "
            "tokenizer.pad_token_id (tokenizer.eos_token_id where the tokenizer has no pad token) and pad with it, "
            "or pass one example at a time"
        )


def _check_end_tokens(name: str, config: Any, given: Mapping[str, Any]) -> None:
    """An encoder-decoder classifier's rows each hold its end token (eos_token_id), as many times in every row."""
    eos = getattr(config, "eos_token_id", None)
    if not isinstance(eos, int):
        return
    ids = given.get("input_ids")
    if not isinstance(ids, torch.Tensor):
        raise ConfigError(
            f"{name} pools each row's last end-of-sequence token (eos_token_id={eos}), which it finds in input_ids; "
            "pass input_ids (it takes no inputs_embeds)"
        )
    counts = (ids == eos).sum(-1)
    if bool((counts > 0).all()) and bool((counts == counts[0]).all()):
        return
    if not bool((counts > 0).all()):
        rows = (counts == 0).nonzero().flatten().tolist()
        problem = f"rows {rows[:10]} hold none"
        fix = "tokenize with add_special_tokens=True (the default), which ends each text with it"
    else:
        problem = f"the rows hold {counts.tolist()[:10]} of them, where it needs as many in every row"
        fix = "drop the end tokens inside the texts (the tokenizer ends each text with one), or pass such rows alone"
    raise ConfigError(f"{name} pools each row's last end-of-sequence token (eos_token_id={eos}), and {problem}; {fix}")
