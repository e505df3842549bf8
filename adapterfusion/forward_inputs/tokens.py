"""The token inputs of a call: input_ids or inputs_embeds (tensors of the right dtype and rank, not empty), the
inputs with one value per token shaped like them, every tensor on the model's device, ids inside their tables, masks
of 0/1 with a real token in each row, and logits_to_keep inside the positions run.

Shapes, dtypes and devices are read on every call. Values (id ranges, mask rows, finite embeddings) are read on CPU
tensors only, where they cost microseconds: on an accelerator reading them would wait for the device (a sync per
step), so there they are skipped and the device reports a bad id itself."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import torch
from torch import nn

from adapterfusion._validation import check_has_values
from adapterfusion.devices import check_not_offloaded
from adapterfusion.errors import ConfigError
from adapterfusion.forward_inputs.limits import Limits

# Inputs with one value per token, shaped like input_ids (position_ids may also be [1, seq], shared by the batch).
PER_TOKEN = ("attention_mask", "token_type_ids", "position_ids", "task_type_ids")
TOKEN_INPUTS = ("input_ids", "inputs_embeds", *PER_TOKEN)
INTEGER_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
# The dtypes torch's embedding and gather take indices in: ids, token types and positions of any other integer dtype
# fail deep in torch ("Expected tensor for argument #1 'indices' ..."), and a uint8 index tensor is read as a mask.
INDEX_DTYPES = (torch.int64, torch.int32)


MASKS = ("attention_mask", "decoder_attention_mask")


def integer_masks(given: Mapping[str, Any]) -> dict[str, Any]:
    """`given` with a bool mask of one value per token as torch.long, the dtype tokenizers give: the same mask, which
    some transformers models take only as integers (ModernBERT's multiple-choice model pools by its argmax, which
    torch refuses for bool). A 4-D mask (a decoder's own attention pattern) stays as given."""
    return {
        key: value.long()
        if key in MASKS and isinstance(value, torch.Tensor) and value.dtype == torch.bool and value.dim() <= 3
        else value
        for key, value in given.items()
    }


def input_embeddings(model: nn.Module) -> nn.Embedding:
    """The model's input embeddings, whose weight gives the vocabulary, width, dtype and device the inputs must fit."""
    return cast(nn.Embedding, cast(Any, model).get_input_embeddings())


def token_shape(
    given: Mapping[str, Any], choices: bool, head: str | None, width: int, dtype: torch.dtype, prefix: str = ""
) -> torch.Size:
    """The [batch, (choices,) seq] shape of the call, from input_ids or inputs_embeds (of the embeddings' `width`
    and `dtype`), checked; prefix 'decoder_': an encoder-decoder's decoder inputs, checked by the same rules."""
    for key in TOKEN_INPUTS:
        if prefix + key in given:
            _require_tensor(prefix + key, given[prefix + key])
    ids, embeds = given.get(f"{prefix}input_ids"), given.get(f"{prefix}inputs_embeds")
    if (ids is None) == (embeds is None):
        which = "neither" if ids is None else "both"
        hint = "" if prefix else ". Pass the tokenizer's output: model(**tokenizer(texts, return_tensors='pt', "
        hint += "" if prefix else "padding=True))"
        raise ConfigError(
            f"a model call takes {prefix}input_ids or {prefix}inputs_embeds, not both and not neither; got {which}"
            + hint
        )
    rank = 3 if choices else 2
    layout = "[batch, num_choices, seq]" if choices else "[batch, seq]"
    if ids is not None:
        key, value, shape = f"{prefix}input_ids", ids, ids.shape
        _check_index_dtype(key, ids, "token ids")
    else:
        embeds = cast(torch.Tensor, embeds)
        key, value, shape, layout = f"{prefix}inputs_embeds", embeds, embeds.shape[:-1], layout[:-1] + ", hidden]"
        if not embeds.is_floating_point() or embeds.shape[-1:] != (width,):
            raise ConfigError(
                f"{key} of shape {tuple(embeds.shape)} and dtype {embeds.dtype}: they must be a float tensor "
                f"whose last dimension is the embedding width {width}"
            )
        if embeds.dtype != dtype and not of_autocast_dtype(embeds):
            raise ConfigError(
                f"{key} have dtype {embeds.dtype} but the model's weights are {dtype}; pass "
                f"{key}.to({dtype}) (or convert the model with model.to({embeds.dtype}))"
            )
    if value.dim() != rank + key.endswith("inputs_embeds"):
        raise ConfigError(f"{key} of shape {tuple(value.shape)} must be {layout}{_rank_hint(value.dim(), rank, head)}")
    if 0 in shape:
        raise ConfigError(
            f"{key} of shape {tuple(value.shape)} is empty: a model call needs at least one example of at least one "
            "token; skip empty batches before calling the model"
        )
    return shape


def _rank_hint(dim: int, rank: int, head: str | None) -> str:
    if dim < rank:
        return "; for one sequence add the batch dimension: input_ids.unsqueeze(0)"
    if rank == 2:
        return (
            f" for the active head {head!r}" if head is not None else ""
        ) + "; [batch, num_choices, seq] inputs are read by a MultipleChoiceHead (activate one)"
    return f": the active head {head!r} is a MultipleChoiceHead" if head is not None else ""


def _require_tensor(key: str, value: Any) -> None:
    if not isinstance(value, torch.Tensor):
        raise ConfigError(
            f"{key} is a {type(value).__name__}, not a torch.Tensor; pass the tokenizer's output with "
            "return_tensors='pt', or torch.tensor(...) of it"
        )


def check_per_token(given: Mapping[str, Any], shape: torch.Size, past: int = 0, prefix: str = "") -> None:
    """One value per token. After `past` cached tokens the attention mask covers them and the new ones, as
    transformers' generate builds it: a mask of the new tokens alone would be read as the whole sequence's."""
    for key in PER_TOKEN if not prefix else (f"{prefix}attention_mask",):
        value = given.get(key)
        if value is None:
            continue
        _require_tensor(key, value)
        expected = (*shape[:-1], shape[-1] + past) if key.endswith("attention_mask") else tuple(shape)
        shared = key == "position_ids" and len(shape) == 2 and value.shape == (1, shape[1])
        if key.endswith("attention_mask") and value.dim() > len(expected):
            _refuse_pattern_mask(key, value, expected)
        if value.shape != expected and not shared:
            cached = (
                f" ({past} cached tokens + {shape[-1]} new: a cached step's mask covers the past_key_values' tokens "
                "and the new ones)"
                if past and key.endswith("attention_mask")
                else ""
            )
            raise ConfigError(
                f"{key} of shape {tuple(value.shape)} does not match the inputs' {expected}{cached}: pass one value "
                "per token of the same batch (the tokenizer's output, padded together)"
            )
        if not key.endswith("attention_mask"):
            _check_index_dtype(key, value, "token types and positions")
        elif value.dtype not in INTEGER_DTYPES and not (
            key == "attention_mask" and (value.dtype == torch.bool or value.is_floating_point())
        ):  # a mask is only compared and multiplied, so any integer dtype does
            raise ConfigError(f"{key} have dtype {value.dtype}; pass an integer tensor (torch.long)")


def _refuse_pattern_mask(key: str, value: torch.Tensor, expected: tuple[int, ...]) -> None:
    """A mask of more dimensions than the inputs: a custom attention pattern (transformers takes a 4-D float mask
    [batch, 1, query, key] on Llama-style decoders). Not supported: our input checks, the heads' pooling and
    generation read the mask as one value per token."""
    raise ConfigError(
        f"{key} of shape {tuple(value.shape)} is a {value.dim()}-D mask, a custom attention pattern over query and key "
        f"positions, which adapterfusion does not take; pass the padding mask instead: one value per token, of shape "
        f"{expected}, 1 for a token and 0 for padding, as the tokenizer returns it (a decoder builds its causal "
        "pattern from it). Sequences packed into one row with a block-diagonal mask: give each its own row of a "
        "padded batch"
    )


def of_autocast_dtype(states: torch.Tensor) -> bool:
    """Whether `states` are of the dtype an autocast block around the call computes in on their device: the model
    takes those with weights of another dtype (autocast casts what goes into matmuls; LayerNorm runs in float32)."""
    kind = states.device.type
    return torch.is_autocast_enabled(kind) and states.dtype == torch.get_autocast_dtype(kind)


def _check_index_dtype(key: str, value: torch.Tensor, what: str) -> None:
    """Ids, token types and positions are looked up in the model's tables, by torch's embedding (or gather), which
    takes INDEX_DTYPES only."""
    if value.dtype not in INDEX_DTYPES:
        raise ConfigError(
            f"{key} have dtype {value.dtype}; {what} must be integers of dtype torch.long (or torch.int32), the index "
            f"dtypes the model's embedding tables take: pass {key}.long() (a tokenizer's output is torch.long)"
        )


def check_devices(model: nn.Module, given: Mapping[str, Any], device: torch.device) -> None:
    """Every input (and labels) on the embeddings' device, where add_head puts heads too (unless accelerate places
    the model and moves the inputs itself). A model on the meta device has no values to compute with."""
    if getattr(model, "hf_device_map", None):
        return
    if device.type == "meta":
        check_not_offloaded(model, "forward")
        check_has_values(model.parameters(), "the model's weights are", "it cannot compute outputs")
    for key, value in given.items():
        if isinstance(value, torch.Tensor) and value.device != device:
            raise ConfigError(
                f"{key} is on {value.device} but the model is on {device}; move the inputs with .to({str(device)!r})"
            )


def check_values(given: Mapping[str, Any], vocabulary: int, limits: Limits, prefix: str = "") -> None:
    """Ids inside their tables and a mask of 0/1 with a real token in each row. CPU tensors only (module docstring):
    on CUDA reading a value waits for the device. prefix 'decoder_': an encoder-decoder's decoder inputs."""
    ids = given.get(f"{prefix}input_ids")
    if ids is not None and ids.device.type == "cpu":
        hint = "was the tokenizer made for this model?"
        _check_range(ids, f"{prefix}input_ids", vocabulary, "the model's vocabulary", hint)
    types, count = given.get("token_type_ids"), limits.token_types
    if types is not None and types.device.type == "cpu" and count != 0:
        table = f"type_vocab_size={count}" if count else f"{limits.config.model_type} embeds token types as tokens"
        _check_range(types, "token_type_ids", count or vocabulary, table, "pass 0 for one segment")
    tasks, kinds = given.get("task_type_ids"), getattr(limits.config, "task_type_vocab_size", None)
    if tasks is not None and tasks.device.type == "cpu" and isinstance(kinds, int) and kinds > 0:
        _check_range(tasks, "task_type_ids", kinds, f"task_type_vocab_size={kinds}", "pass 0 for the default task")
    positions, rows = given.get("position_ids"), limits.positions
    if positions is not None and positions.device.type == "cpu" and rows is not None:
        _check_range(positions, "position_ids", rows, f"max_position_embeddings={rows}", "leave position_ids out")
    mask = given.get(f"{prefix}attention_mask")
    if mask is not None and mask.device.type == "cpu":
        _check_mask(mask, f"{prefix}attention_mask")
    embeds = given.get(f"{prefix}inputs_embeds")
    if embeds is not None and embeds.device.type == "cpu" and not bool(torch.isfinite(embeds).all()):
        raise ConfigError(
            f"{prefix}inputs_embeds hold NaN or infinite values, so every output would be NaN; check how they were made"
        )


def _check_range(values: torch.Tensor, key: str, count: int, table: str, hint: str) -> None:
    low, high = torch.aminmax(values)
    if int(low) < 0 or int(high) >= count:
        bad = sorted(set(values[(values < 0) | (values >= count)].tolist()))
        raise ConfigError(f"{key} holds {bad[:5]}, outside 0..{count - 1} ({table}); {hint}")


def _check_mask(mask: torch.Tensor, key: str = "attention_mask") -> None:
    if mask.dtype != torch.bool:
        if bool(((mask != 0) & (mask != 1)).any()):  # 0.5 or 2 would be added into the attention scores
            odd = mask[(mask != 0) & (mask != 1)]
            raise ConfigError(
                f"{key} holds {sorted(set(odd.tolist()))[:5]}; it must hold only 0 and 1 (1 = a real token)"
            )
    if not bool(mask.any(dim=-1).all()):
        empty = ~mask.any(dim=-1)
        where = [tuple(index) if len(index) > 1 else index[0] for index in empty.nonzero().tolist()]
        raise ConfigError(
            f"{key} rows {where[:10]} have no token (all 0): their output would be made of padding alone; "
            "drop those examples (an empty text still tokenises to [CLS] [SEP], which the mask marks 1)"
        )


def check_logits_to_keep(value: Any, length: int | None, labelled: bool = False) -> None:
    """logits_to_keep as transformers documents it: an int N >= 0 (the last N positions; 0 all), or a 1-D tensor
    of the positions to keep, inside the `length` positions run (None: not known here). Anything else fails in
    torch's indexing, or (a bool, a negative N) drops positions without a word. `labelled`: the call computes a
    language model's loss, which needs every position's logits (_check_all_kept)."""
    if value is None:
        return
    _check_form(value, length)
    if labelled:
        _check_all_kept(value, length)


def _check_form(value: Any, length: int | None) -> None:
    """logits_to_keep an int N >= 0, or a 1-D integer tensor of positions inside the `length` positions run."""
    expected = (
        "an integer N >= 0 (the logits of the last N positions; 0: all) or a 1-D integer tensor (torch.long or "
        "torch.int32) of the positions to keep"
    )
    if isinstance(value, torch.Tensor):
        if value.dim() != 1 or value.dtype not in INDEX_DTYPES:  # a uint8 tensor would index as a mask
            raise ConfigError(
                f"logits_to_keep is a tensor of shape {tuple(value.shape)} and dtype {value.dtype}; expected {expected}"
            )
        if length is not None and value.device.type == "cpu":
            outside = value[(value < -length) | (value >= length)]
            if outside.numel():
                raise ConfigError(
                    f"logits_to_keep holds {sorted(set(outside.tolist()))[:5]}, outside the {length} positions of "
                    f"the inputs (-{length}..{length - 1}); pass positions of these inputs"
                )
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"logits_to_keep={value!r} has type {type(value).__name__}; expected {expected}")
    if value < 0:
        raise ConfigError(f"logits_to_keep={value!r} is negative; expected {expected}")


def _check_all_kept(value: Any, length: int | None) -> None:
    """A causal LM's loss compares each position's logits with the next label: logits of fewer positions than the
    labels were torch's "Expected input batch_size (2) to match target batch_size (14)" from cross_entropy (and of
    the positions reordered, a loss of the wrong pairs)."""
    if isinstance(value, torch.Tensor):
        everything = length is not None and torch.equal(value.cpu(), torch.arange(length, dtype=value.dtype))
    else:
        everything = value == 0 or (length is not None and value >= length)
    if not everything:
        shown = f"a tensor of {value.numel()} positions" if isinstance(value, torch.Tensor) else repr(value)
        raise ConfigError(
            f"logits_to_keep={shown} with labels: the loss needs the logits of every position, one per label; "
            "drop logits_to_keep (or 0) to compute the loss, or compute it yourself from the logits kept"
        )
