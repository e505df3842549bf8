"""What a head of ours on an encoder-decoder reads: the decoder's last hidden states (`seq2seq_states`, the encoder
and then the decoder stack) on the input shifted right (`decoder_inputs_for_head`), as transformers'
BartForSequenceClassification and T5ForSequenceClassification do. Not a check: what check_call hands such a call."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn
from transformers.modeling_outputs import Seq2SeqModelOutput

from adapterfusion.errors import ConfigError

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

# What an encoder-decoder's head call hands its encoder and its decoder (seq2seq_states); anything else is refused.
_SEQ2SEQ_ENCODER_INPUTS = ("input_ids", "attention_mask", "inputs_embeds")
_SEQ2SEQ_DECODER_INPUTS = {
    "decoder_input_ids": "input_ids",
    "decoder_attention_mask": "attention_mask",
    "decoder_inputs_embeds": "inputs_embeds",
}


def seq2seq_states(seq2seq: nn.Module, **inputs: Any) -> Seq2SeqModelOutput:
    """The decoder's last hidden states of an encoder-decoder, as its bare model (T5Model, BartModel) computes them:
    the encoder, then the decoder reading it. Run through the stacks, because T5ForConditionalGeneration is its own
    base model and would add vocabulary logits a head discards."""
    flags = {key: inputs.pop(key) for key in ("output_attentions", "output_hidden_states") if key in inputs}
    inputs.pop("return_dict", None)
    unknown = sorted(set(inputs) - {*_SEQ2SEQ_ENCODER_INPUTS, *_SEQ2SEQ_DECODER_INPUTS})
    if unknown:
        raise ConfigError(
            f"{type(seq2seq).__name__} with a head active takes no {', '.join(map(repr, unknown))}; it takes "
            f"{', '.join((*_SEQ2SEQ_ENCODER_INPUTS, *_SEQ2SEQ_DECODER_INPUTS))} (and output_attentions, "
            "output_hidden_states)"
        )
    encoder, decoder = cast(Any, seq2seq).get_encoder(), cast(Any, seq2seq).get_decoder()
    encoded = encoder(**{k: inputs[k] for k in _SEQ2SEQ_ENCODER_INPUTS if k in inputs}, **flags, return_dict=True)
    decoded = decoder(
        **{name: inputs[key] for key, name in _SEQ2SEQ_DECODER_INPUTS.items() if key in inputs},
        encoder_hidden_states=encoded.last_hidden_state,
        encoder_attention_mask=inputs.get("attention_mask"),
        use_cache=False,
        **flags,
        return_dict=True,
    )
    return Seq2SeqModelOutput(
        last_hidden_state=decoded.last_hidden_state,
        decoder_hidden_states=decoded.hidden_states,
        decoder_attentions=decoded.attentions,
        cross_attentions=getattr(decoded, "cross_attentions", None),
        encoder_last_hidden_state=encoded.last_hidden_state,
        encoder_hidden_states=encoded.hidden_states,
        encoder_attentions=encoded.attentions,
    )


def decoder_inputs_for_head(model: AdaptedModel, given: dict[str, Any], head: str) -> dict[str, Any]:
    """An encoder-decoder's head reads its decoder run on the input shifted right by one, the decoder's start token
    first, as transformers' BartForSequenceClassification and T5ForSequenceClassification do; the decoder's mask is
    the input's, shifted alike (so left padding stays masked). Decoder inputs the caller gives are used as given; a
    decoder_attention_mask without them is refused: it has no tokens of the caller's to mask (the shifted ids are
    built here, after left padding is moved to the right)."""
    if "decoder_input_ids" in given or "decoder_inputs_embeds" in given:
        return given
    if given.get("decoder_attention_mask") is not None:
        raise ConfigError(
            f"head {head!r}: decoder_attention_mask without decoder_input_ids; the head runs the decoder on input_ids "
            "shifted right, under the input's attention_mask shifted alike, so a mask of its own has no tokens of the "
            "caller's to mask: leave it out, or pass the decoder_input_ids it masks with it"
        )
    ids = given.get("input_ids")
    if not isinstance(ids, torch.Tensor):
        raise ConfigError(
            f"head {head!r} reads an encoder-decoder's decoder, run on the input ids shifted right; pass input_ids "
            "(or decoder_input_ids / decoder_inputs_embeds yourself)"
        )
    start = getattr(model.model.config, "decoder_start_token_id", None)
    if not isinstance(start, int):
        raise ConfigError(
            f"head {head!r}: the model's config has no decoder_start_token_id to start its decoder with; set "
            "model.model.config.decoder_start_token_id, or pass decoder_input_ids"
        )
    decoder = dict(given, decoder_input_ids=shifted_right(ids, start))
    mask = given.get("attention_mask")
    if isinstance(mask, torch.Tensor):
        decoder["decoder_attention_mask"] = shifted_right(mask, 1)
    return decoder


def shifted_right(values: torch.Tensor, first: int) -> torch.Tensor:
    """`values` shifted one position right along the last dimension, `first` in front: the input a head's decoder
    reads, and its mask (fusion-attention records count the decoder's real positions by it)."""
    return torch.cat([values.new_full((*values.shape[:-1], 1), first), values[..., :-1]], dim=-1)
