"""Left padding made harmless for a head of ours: a padded row must pool what the row gives alone.

A decoder with learned absolute positions (GPT-2) numbers every column from 0, padding included, so a left-padded
row's tokens would sit at shifted positions: a head call without position_ids gets them from the attention mask, each
row's tokens from 0, as generate() gives them. An encoder-decoder's head reads its decoder run on the input shifted
right, the start token first: with left padding the start token would sit far from the row's first token (BART's
learned positions, T5's relative buckets), so each row's tokens are moved to the front, its padding to the end, before
the shift. Rows already padded on the right (or not at all) are unchanged. Not a check: what check_call hands the
call (call.py)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from adapterfusion.forward_inputs.keywords import accepted_keywords

# The per-token inputs of an encoder-decoder head call moved with their row's tokens (inputs_embeds: [rows, seq, d]).
_MOVED = ("input_ids", "attention_mask", "inputs_embeds")


def positions_from_mask(decoder: nn.Module, given: dict[str, Any]) -> dict[str, Any]:
    """`given` with position_ids counted over each row's unmasked tokens, where a decoder's head call passes an
    attention mask, no position_ids and no cache, and the decoder takes position_ids."""
    mask = given.get("attention_mask")
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2 or "position_ids" in given:
        return given
    takes = accepted_keywords(decoder)  # read once per class, as check_keywords reads it
    if given.get("past_key_values") is not None or takes is None or "position_ids" not in takes:
        return given
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
    return dict(given, position_ids=positions)


def padding_to_the_right(given: dict[str, Any]) -> dict[str, Any]:
    """`given` with each row's unmasked tokens first, in order, and its masked ones after them (a stable sort of the
    columns by the attention mask): right padding for a row padded on the left."""
    mask = given.get("attention_mask")
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2:
        return given
    order = torch.sort((mask == 0).to(torch.uint8), dim=-1, stable=True).indices
    moved = dict(given)
    for key in _MOVED:
        value = given.get(key)
        if isinstance(value, torch.Tensor) and value.shape[:2] == mask.shape:
            index = order if value.dim() == 2 else order.unsqueeze(-1).expand(*order.shape, value.shape[-1])
            moved[key] = value.gather(1, index)
    return moved
