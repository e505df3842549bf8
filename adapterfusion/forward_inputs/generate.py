"""`check_generate_inputs`: generate()'s model inputs held to check_call's rules before any step runs (transformers'
generate would broadcast a one-row mask, embed a bad id deep in its loop, or run out of positions mid-generation),
and the longest sequence generation may reach against the model's positions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from adapterfusion.encoder_limits import limit_reason
from adapterfusion.errors import ConfigError
from adapterfusion.forward_inputs.cache import past_length
from adapterfusion.forward_inputs.encoder_decoder import (
    check_decoder_inputs,
    check_encoded_tokens,
    encoder_outputs_shape,
    is_seq2seq,
)
from adapterfusion.forward_inputs.keywords import check_flags
from adapterfusion.forward_inputs.limits import Limits, check_length, model_limits
from adapterfusion.forward_inputs.tokens import (
    check_devices,
    check_logits_to_keep,
    check_per_token,
    check_values,
    input_embeddings,
    token_shape,
)

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

# generate()'s flags, which transformers reads by truth value: use_cache='no' would cache, return_dict_in_generate='no'
# return a dict, renormalize_logits='no' renormalize.
_GENERATE_FLAGS = (
    "use_cache",
    "do_sample",
    "output_attentions",
    "output_hidden_states",
    "output_scores",
    "output_logits",
    "return_dict_in_generate",
    "renormalize_logits",
    "remove_invalid_values",
    "use_mtp",
    "disable_compile",
)
# What check_generate_inputs reads of generate()'s keywords: the model inputs and the flags.
GENERATE_INPUTS = (
    "input_ids",
    "inputs_embeds",
    "attention_mask",
    "position_ids",
    "token_type_ids",
    "decoder_input_ids",
    "decoder_attention_mask",
    "decoder_inputs_embeds",
    "encoder_outputs",
    "logits_to_keep",
    "past_key_values",
    *_GENERATE_FLAGS,
)


def check_generate_inputs(
    model: AdaptedModel,
    inputs: Mapping[str, Any],
    max_new_tokens: int | None,
    max_length: int | None,
    copies: int = 1,
    least: tuple[int | None, int | None] = (None, None),
) -> None:
    """generate()'s model inputs, checked by the rules of check_call (transformers' generate would broadcast a
    one-row mask, embed a bad id deep in its loop, or run out of positions mid-generation), and the longest
    sequence it may reach (`max_new_tokens` after the prompt, else `max_length`) against the model's positions and
    the shortest it is asked for (`least`: min_new_tokens and min_length), before any step runs. `copies`: the rows
    generate makes of each prompt (beams times sequences returned), which a given past_key_values, made for the
    prompts' rows, cannot follow."""
    wrapped = model.model
    given = {key: value for key, value in inputs.items() if value is not None}
    check_flags(given, _GENERATE_FLAGS)
    check_logits_to_keep(given.get("logits_to_keep"), None)
    seq2seq = is_seq2seq(wrapped)  # an encoder-decoder's generate takes input_ids or inputs_embeds, not both
    beside = given.pop("input_ids") if "input_ids" in given and "inputs_embeds" in given and not seq2seq else None
    weight = input_embeddings(wrapped).weight
    limits = model_limits(wrapped)
    encoded = encoder_outputs_shape(given.get("encoder_outputs"), weight, generating=True) if seq2seq else None
    prompt, padding = 1, 0  # with no prompt, generation starts from the start (or bos) token alone
    shape = encoded  # an encoder-decoder's prompts given encoded, or None
    if "input_ids" in given or "inputs_embeds" in given:
        shape = token_shape(given, False, None, weight.shape[1], weight.dtype)
        check_encoded_tokens(encoded, shape)
        if beside is not None:
            _check_ids_beside_embeds(beside, shape, weight, limits)
    if shape is not None:
        check_per_token(given, shape)
        _check_past(model, given, shape, copies, seq2seq)
    check_devices(wrapped, given, weight.device)
    check_values(given, weight.shape[0], limits)
    if shape is not None and seq2seq:
        check_length(shape[-1], limits, "the prompts")
        decoder = check_decoder_inputs(given, shape, weight, limits, 0, None)
        prompt = decoder[-1] if decoder is not None else 1
    elif shape is not None:
        _check_left_padded(given.get("attention_mask"))
        prompt = _longest_row(given.get("attention_mask"), shape[-1])
        padding = shape[-1] - prompt
        check_length(prompt, limits, "the prompts")
    new = max_new_tokens if max_new_tokens is not None and max_new_tokens > 0 else None
    width = prompt + padding  # what transformers counts against max_length: a decoder's padding, not embeddings
    if new is None and max_length is not None and max_length <= width:
        whose = "the decoder's prompts (decoder_input_ids, else its start token)" if seq2seq else "the prompts"
        raise ConfigError(
            f"generate() stops at max_length={max_length} tokens per sequence, prompt included, but {whose} already "
            f"have {width}{' with their padding' if padding else ''}, so it would generate nothing; pass "
            f"max_new_tokens=<the tokens to add> instead, or a max_length above {width}"
        )
    _check_least(least, new, max_length, width)
    total = prompt + new if new is not None else (max_length - padding if max_length is not None else None)
    limit = limits.max_length
    if limit is not None and total is not None and total > limit:
        fix = (
            f"lower max_new_tokens to at most {max(limit - prompt, 0)}"
            if new is not None
            else f"lower max_length to at most {limit + padding}"
        )
        asked = f"{prompt} prompt tokens + max_new_tokens={new}" if new is not None else f"max_length={max_length}"
        raise ConfigError(
            f"generate() could reach {total} tokens per sequence ({asked}), more than this {limits.config.model_type} "
            f"model has positions for: {limit} ({limit_reason(limits.config)}); {fix}, or truncate the prompts"
        )


def _check_least(least: tuple[int | None, int | None], new: int | None, max_length: int | None, width: int) -> None:
    """min_new_tokens and min_length (`least`) within what max_new_tokens (else max_length) lets generate reach,
    counted as transformers counts them, from the `width` of the ids it starts from (a decoder's prompts with their
    padding, an encoder-decoder's decoder prompts): beyond it, transformers only warns and stops at the maximum,
    the sequences ending short of the minimum asked for (an end token kept out only until the maximum)."""
    most = width + new if new is not None else max_length
    if most is None:
        return
    cap = f"max_new_tokens={new}" if new is not None else f"max_length={max_length}"
    min_new, min_length = least
    if min_new is not None and width + min_new > most:
        raise ConfigError(
            f"generate(): min_new_tokens={min_new} asks for at least {min_new} new tokens, but {cap} stops it after "
            f"{most - width}; lower min_new_tokens to at most {most - width}, or raise {cap.split('=')[0]}"
        )
    if min_length is not None and min_length > most:
        raise ConfigError(
            f"generate(): min_length={min_length} asks for at least {min_length} tokens per sequence, prompt "
            f"included, but {cap} stops it at {most}; lower min_length to at most {most}, or raise "
            f"{cap.split('=')[0]}"
        )


def _check_left_padded(mask: Any) -> None:
    """A decoder's generate appends each new token after the last column, so a prompt padded on the right would
    continue from its padding: a silently different answer from the same prompt alone (transformers only logs a
    warning, and only where the last id is the pad id)."""
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2 or mask.shape[-1] == 0:
        return
    ends_padded = (mask[:, -1] == 0) & (mask != 0).any(dim=-1)
    if bool(ends_padded.any()):
        rows = ends_padded.nonzero().flatten().tolist()
        raise ConfigError(
            f"generate() on a decoder: the attention_mask of row(s) {rows[:5]} ends in padding, so the new tokens "
            "would follow the padding and the answer differ from that prompt's alone; pad the prompts on the left "
            "(tokenizer.padding_side = 'left' before tokenizing), as generation with a decoder needs"
        )


def _check_ids_beside_embeds(ids: Any, shape: torch.Size, weight: torch.Tensor, limits: Limits) -> None:
    """input_ids given beside inputs_embeds: transformers runs the embeddings, but returns the ids ahead of the new
    tokens and its logits processors read them (a repetition penalty indexes the scores with them), so they must be
    the embedded tokens' ids, of their [batch, seq] (else a RuntimeError from a concatenation or the attention)."""
    only = {"input_ids": ids}
    held = token_shape(only, False, None, weight.shape[1], weight.dtype)
    if held != shape:
        raise ConfigError(
            f"generate() given input_ids of shape {tuple(held)} beside inputs_embeds of shape {tuple(shape)} (batch, "
            "seq): it runs the embeddings, but returns the ids ahead of the new tokens and its logits processors "
            "read them; pass the ids of the embedded tokens, of the same [batch, seq], or leave input_ids out"
        )
    check_values(only, int(weight.shape[0]), limits)


def _check_past(model: AdaptedModel, given: Mapping[str, Any], shape: torch.Size, copies: int, seq2seq: bool) -> None:
    """A past_key_values handed to generate: a Cache of the prompts' rows (past_length), which beams or several
    sequences per prompt would need repeated, holding fewer tokens than a decoder's prompts (generate runs the
    prompt's tokens after the cached ones)."""
    held = past_length(model, given, shape[0], None)
    if "past_key_values" not in given or held == 0:
        return
    if copies > 1:
        raise ConfigError(
            f"generate() with past_key_values and {copies} rows per prompt (num_beams x num_return_sequences): the "
            "cache holds one row per prompt; generate without past_key_values, or with num_beams=1 and "
            "num_return_sequences=1"
        )
    if not seq2seq and held >= shape[-1]:
        raise ConfigError(
            f"past_key_values hold {held} tokens, but the prompts have {shape[-1]}; generate() reads the whole "
            "sequence in input_ids (the cached tokens, then at least one new one) and runs only the uncached ones"
        )


def _longest_row(mask: torch.Tensor | None, width: int) -> int:
    """The most real tokens in a prompt row: generate numbers a decoder's positions by its attention mask, so the
    left padding of a batch takes none."""
    return int(mask.sum(-1).max()) if isinstance(mask, torch.Tensor) else width
