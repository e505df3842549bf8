"""Per-example routing: `model(**batch, adapter_names=[...], head_names=[...])`, one entry per example.

An adapter_names entry is an adapter's name, a fusion's name (or {'adapter': name} / {'fusion': name} where a name
is both) or None for the plain model; head_names entries name a loaded head each (left out: the active head for
every row). This module checks the choices and applies the heads; at the sites, injection/routing.py runs each row
with its choice (one gathered batched matmul for the adapter rows, each fusion's fast path on its rows). A call
whose rows all chose the same runs exactly as `with model.activated(...)` would, with no routing at all.

Several heads: each head runs on its rows (a loop over the distinct heads: heads differ in kind and size, and a
head is one small matmul). `logits` is one [batch, ...] tensor when every head gives the same shape per example;
otherwise it is None and `row_logits` holds each example's logits. With labels the loss is the mean over examples:
each head's loss (a mean over its rows) weighted by its share of the batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from transformers.cache_utils import Cache

from adapterfusion.blocks import BatchSplit, Block, Fuse, Parallel, fusions_in, resolve
from adapterfusion.errors import ConfigError, NameNotFoundError
from adapterfusion.forward_inputs import ForwardCall, check_call, check_head_labels
from adapterfusion.forward_inputs.tokens import check_devices
from adapterfusion.injection.routing import ADAPTER, BLOCK, FUSION, Choice, on_device
from adapterfusion.injection.site import per_route

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

_EXAMPLE = "e.g. adapter_names=['rte', 'cb_fusion', None] for three examples"


_DEVICE_INPUTS = (
    "input_ids", "inputs_embeds", "decoder_input_ids", "decoder_inputs_embeds", "attention_mask"
)  # fmt: skip


@dataclass(frozen=True)
class RoutedCall:
    """A checked routed call: per example its choice (`choices`, one per example), per head the example rows that
    read it (None: all), and the checked encoder call."""

    call: ForwardCall
    choices: tuple[Choice, ...]
    heads: tuple[tuple[str | None, torch.Tensor | None], ...]
    examples: int

    @property
    def device(self) -> torch.device:
        """Where the inputs (and so the model) are: the first tensor among them (a cached encoder-decoder step has
        only decoder ids and the encoder's outputs)."""
        inputs = self.call.inputs
        for key in _DEVICE_INPUTS:
            if isinstance(inputs.get(key), torch.Tensor):
                return inputs[key].device
        encoded = inputs.get("encoder_outputs")
        first = (
            encoded[0]
            if isinstance(encoded, (tuple, list)) and encoded
            else getattr(encoded, "last_hidden_state", None)
        )
        if isinstance(first, torch.Tensor):
            return first.device
        return next(tensor.device for tensor in inputs.values() if isinstance(tensor, torch.Tensor))

    @property
    def row_choices(self) -> tuple[Choice, ...]:
        """The choices per row of the encoder (an example's choices repeated for a multiple-choice head)."""
        repeat = self.call.rows // self.examples
        return tuple(choice for choice in self.choices for _ in range(repeat))

    @property
    def fusions(self) -> tuple[str, ...]:
        """The fusions some example runs, alone or inside its block."""
        named = [choice[1] for choice in self.choices if choice and choice[0] == FUSION]
        inside = [
            fusion for choice in self.choices if choice and choice[0] == BLOCK for fusion in fusions_in(choice[1])
        ]
        return tuple(dict.fromkeys([*named, *inside]))


def prepare(
    model: AdaptedModel,
    inputs: Mapping[str, Any],
    adapter_names: Sequence[Any] | None,
    head_names: Sequence[Any] | None,
    labels: Any,
    output_fusion_attentions: bool,
) -> RoutedCall:
    """Check a routed call's inputs and choices (ConfigError / NameNotFoundError naming the entry)."""
    if output_fusion_attentions:
        raise ConfigError(
            "output_fusion_attentions=True records one fusion's weights for the whole batch, which a routed call "
            "does not run; run the fusion's examples alone: `with model.activated(fusion=...): model(**batch, "
            "output_fusion_attentions=True)`"
        )
    heads = _checked_heads(model, head_names) if head_names is not None else None
    if heads is not None:
        _check_same_inputs(model, heads)
    first_head = heads[0] if heads else model.active_head
    single_head = heads is None or len(set(heads)) == 1
    call = check_call(model, inputs, first_head, labels if single_head else None)
    examples = call.rows // (call.num_choices or 1)
    if heads is not None and len(heads) != examples:
        raise ConfigError(
            f"head_names has {len(heads)} entries for a batch of {examples} examples; give one per example"
        )
    choices = example_choices(model, adapter_names, examples)
    routed = RoutedCall(call, choices, _head_rows(heads, first_head, call), examples)
    if labels is not None and not single_head:
        _check_labels_per_head(model, labels, routed, _example_shape(inputs), inputs.get("attention_mask"))
    return routed


def example_choices(model: AdaptedModel, adapter_names: Sequence[Any] | None, examples: int) -> tuple[Choice, ...]:
    """Each of `examples` examples' choice: its adapter_names entry, checked (ConfigError / NameNotFoundError naming
    the entry), or with adapter_names None what an active BatchSplit gives it, else what is active."""
    if isinstance(model.state.block, BatchSplit):
        if adapter_names is not None:
            raise ConfigError(
                "a BatchSplit block is active, which already gives every example its adapter; pass adapter_names=... "
                "without it (model.activate(...) something else first) or drop adapter_names"
            )
        return tuple(_resolved(entry) for entry in model.state.block.entries(examples))
    if adapter_names is None:
        return (_active_choice(model),) * examples
    entries = _check_list(adapter_names, "adapter_names")
    if len(entries) != examples:
        raise ConfigError(
            f"adapter_names has {len(entries)} entries for a batch of {examples} examples; give one per example "
            f"({_EXAMPLE})"
        )
    return tuple(_choice(model, entry, index) for index, entry in enumerate(entries))


def _check_labels_per_head(
    model: AdaptedModel, labels: Any, routed: RoutedCall, shape: torch.Size, mask: Any = None
) -> None:
    """Each head's labels are those of its examples: checked as that head's, on those rows (and their mask)."""
    first = routed.heads[0][0]
    assert first is not None
    if not isinstance(labels, torch.Tensor) or labels.dim() == 0 or labels.shape[0] != routed.examples:
        check_head_labels(labels, model.get_head(first).config, first, shape)  # refuses it, saying what to pass
    check_devices(model.model, {"labels": labels}, routed.device)  # each head's rows are taken on the inputs' device
    for head, rows in routed.heads:
        assert head is not None and rows is not None
        rows_shape = torch.Size((rows.numel(), *shape[1:]))
        rows_mask = mask.index_select(0, rows.to(mask.device)) if isinstance(mask, torch.Tensor) else None
        config = model.get_head(head).config
        check_head_labels(labels.index_select(0, rows), config, head, rows_shape, rows_mask, rows)


def _example_shape(inputs: Mapping[str, Any]) -> torch.Size:
    """The [batch, (choices,) seq] shape of the inputs as given (check_call has checked them)."""
    ids = inputs.get("input_ids")
    return ids.shape if ids is not None else inputs["inputs_embeds"].shape[:-1]


def _checked_heads(model: AdaptedModel, head_names: Any) -> list[str]:
    """head_names as a list, each entry a loaded head's name (ConfigError / NameNotFoundError naming the entry)."""
    heads = _check_list(head_names, "head_names")
    for index, head in enumerate(heads):
        if not isinstance(head, str):
            raise ConfigError(
                f"head_names[{index}] = {head!r}: each entry names a loaded head ({model.head_names or 'none'})"
            )
        model.require("head", head)
    return heads


def _check_list(value: Any, name: str) -> list[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
        raise ConfigError(f"{name}={value!r} has type {type(value).__name__}; pass a list with one entry per example")
    return list(value)


def _choice(model: AdaptedModel, entry: Any, index: int) -> Choice:
    """adapter_names[index] as (kind, name), (BLOCK, resolved block) or None."""
    if entry is None:
        return None
    if isinstance(entry, Block):
        return _resolved(resolve(model, entry, layout=False))
    if isinstance(entry, tuple) and len(entry) == 2 and entry[0] in (ADAPTER, FUSION):  # a resolved block's leaf
        model.require(*entry)
        return (entry[0], entry[1])
    if isinstance(entry, Mapping) and len(entry) == 1 and next(iter(entry)) in (ADAPTER, FUSION):
        kind, name = next(iter(entry.items()))
        model.require(kind, name)
        return (kind, name)
    if not isinstance(entry, str):
        raise ConfigError(
            f"adapter_names[{index}] = {entry!r} has type {type(entry).__name__}; each entry is an adapter's or a "
            f"fusion's name, {{'adapter': name}} / {{'fusion': name}}, or None for the plain model ({_EXAMPLE})"
        )
    is_adapter, is_fusion = entry in model.adapter_configs, entry in model.fusion_setups
    if is_adapter and is_fusion:
        raise ConfigError(
            f"adapter_names[{index}] = {entry!r} names both an adapter and a fusion; say which with "
            f"{{'adapter': {entry!r}}} or {{'fusion': {entry!r}}}"
        )
    if not (is_adapter or is_fusion):
        raise NameNotFoundError(
            f"adapter_names[{index}] = {entry!r} is neither a loaded adapter ({model.adapter_names or 'none'}) nor "
            f"a loaded fusion ({model.fusion_names or 'none'}); load it first or pass None for the plain model"
        )
    return (ADAPTER if is_adapter else FUSION, entry)


def _resolved(entry: Any) -> Choice:
    """A resolved block's child as a row's choice: a Fuse is its fusion (routed through the fusion's fast path)."""
    if isinstance(entry, Fuse):
        return (FUSION, entry.name)
    return (BLOCK, entry) if isinstance(entry, Block) else entry


def parallel_inputs(
    block: Parallel, inputs: Mapping[str, Any], labels: Any, adapter_names: Any, head_names: Any
) -> tuple[dict[str, Any], Any, list[Any], Any]:
    """A Parallel block's call as a routed one: for each copy of the batch its child as every row's adapter_names
    entry (AdapterHub's layout: child i has rows i*B..(i+1)*B), and head_names one per output row (given one per
    example: repeated for each child's copy, as the labels are; or one per output row). The inputs and labels are
    returned as given: `repeated_for_parallel` checks them as such, then repeats them once per child."""
    if adapter_names is not None:
        raise ConfigError(
            "a Parallel block is active, which runs every example once per child; pass adapter_names=... without it "
            "(model.activate(...) something else first) or drop adapter_names"
        )
    copies = len(block.children)
    batch = _parallel_batch(inputs, copies)
    if isinstance(labels, torch.Tensor) and (labels.dim() == 0 or labels.shape[0] != batch):
        given = f"{labels.shape[0]} labels" if labels.dim() else "a single value as labels"
        raise ConfigError(
            f"{given} for a batch of {batch} examples under a Parallel block of {copies} children; "
            f"pass one label per input example ({batch}): each child's copy of the batch gets the same labels"
        )
    if head_names is not None:
        heads = _check_list(head_names, "head_names")
        if len(heads) not in (batch, batch * copies):
            raise ConfigError(
                f"head_names has {len(heads)} entries for a batch of {batch} examples under a Parallel block of "
                f"{copies} children; give one per example ({batch}: each child's copy of an example gets its head) "
                f"or one per output row ({batch * copies}, child by child)"
            )
        head_names = heads * copies if len(heads) == batch else heads
    return dict(inputs), labels, [child for child in block.children for _ in range(batch)], head_names


def repeated_for_parallel(
    model: AdaptedModel, block: Parallel, inputs: Mapping[str, Any], labels: Any, head_names: Sequence[Any] | None
) -> tuple[dict[str, Any], Any]:
    """The inputs and labels of a call under `block` (parallel_inputs'), checked as the caller passed them, then
    repeated once per child along the batch. Checked first, so that a refusal names the shapes given: once repeated,
    labels of shape (3, 1) were refused as (6, 1), a 4-D mask of 3 rows as one of 6."""
    heads = _checked_heads(model, head_names) if head_names is not None else None
    first = heads[0] if heads else model.active_head
    check_call(model, inputs, first, labels if heads is None or len(set(heads)) == 1 else None)
    copies = len(block.children)
    batch = _parallel_batch(inputs, copies)
    repeated = {
        key: per_route(value, copies)
        if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == batch
        else value
        for key, value in inputs.items()
    }
    return repeated, per_route(labels, copies) if isinstance(labels, torch.Tensor) and labels.dim() else labels


# The inputs a Parallel block repeats that hold one row per example: checked as given, since once repeated a
# mismatch would be reported against a batch the caller never passed. Position ids may also be one row for all.
_PARALLEL_ROWS = (
    "input_ids", "inputs_embeds", "attention_mask", "token_type_ids",
    "decoder_input_ids", "decoder_inputs_embeds", "decoder_attention_mask", "position_ids", "decoder_position_ids",
)  # fmt: skip
_SHARED_ROW = ("position_ids", "decoder_position_ids")


def _parallel_batch(inputs: Mapping[str, Any], copies: int) -> int:
    """The examples of a call under a Parallel block of `copies` children, its per-example inputs checked as given
    (ConfigError naming the input and its shape as passed). A cache holding tokens is refused: the block would repeat
    the next tokens once per child, so they cannot continue the cache's rows, one per example and child."""
    key = "input_ids" if inputs.get("input_ids") is not None else "inputs_embeds"
    given = inputs.get(key)
    if given is not None and not isinstance(given, torch.Tensor):  # as without the block, not 'needs input_ids'
        raise ConfigError(
            f"{key} is a {type(given).__name__}, not a torch.Tensor; pass the tokenizer's output with "
            "return_tensors='pt', or torch.tensor(...) of it"
        )
    if given is None:
        raise ConfigError("a Parallel block needs input_ids or inputs_embeds with a batch dimension")
    dims = 2 if key == "input_ids" else 3
    if given.dim() < dims:
        raise ConfigError(
            f"{key} of shape {tuple(given.shape)} must be [batch, seq{', hidden' if dims == 3 else ''}] under a "
            f"Parallel block, which repeats the batch once per child; for one sequence add the batch dimension: "
            f"{key}.unsqueeze(0)"
        )
    batch = int(given.shape[0])
    for name in _PARALLEL_ROWS:
        value = inputs.get(name)
        if not isinstance(value, torch.Tensor):
            continue
        if value.dim() < 2:  # a [seq] tensor whose length happened to equal the batch would be repeated as rows
            raise ConfigError(
                f"{name} of shape {tuple(value.shape)} must be [batch, seq, ...] under a Parallel block, which "
                f"repeats the batch once per child; give it the batch dimension of {key} ({batch} examples)"
            )
        rows = int(value.shape[0])
        if rows != batch and not (rows == 1 and name in _SHARED_ROW):
            one = " (or one row for all)" if name in _SHARED_ROW else ""
            raise ConfigError(
                f"{name} of shape {tuple(value.shape)} has {rows} rows but {key} has {batch} examples; under a "
                f"Parallel block of {copies} children pass one row per example ({batch}){one}, as without it: each "
                "child's copy of the batch gets the same rows"
            )
    past = inputs.get("past_key_values")
    if isinstance(past, Cache) and past.get_seq_length() > 0:
        raise ConfigError(
            f"past_key_values hold {past.get_seq_length()} tokens, but a Parallel block repeats the batch once per "
            "child, so a cached step under it cannot line up its rows with the cache's; decode each child with it "
            "activated alone, or repeat the prompts once per child yourself and pass adapter_names=[child, ...] "
            "(one entry per row) with model.activate(None)"
        )
    return batch


def _active_choice(model: AdaptedModel) -> Choice:
    if model.state.block is not None:
        return _resolved(model.state.block)
    if model.active_adapter is not None:
        return (ADAPTER, model.active_adapter)
    return (FUSION, model.active_fusion) if model.active_fusion is not None else None


def _check_same_inputs(model: AdaptedModel, heads: Sequence[str]) -> None:
    kinds = {head: model.get_head(head).config.kind == "multiple_choice" for head in heads}
    if len(set(kinds.values())) > 1:
        choice = sorted(head for head, is_choice in kinds.items() if is_choice)
        raise ConfigError(
            f"head_names mixes multiple-choice heads {choice} with others; they cannot read the same inputs in "
            "one forward: route them in separate calls"
        )


def _head_rows(
    heads: Sequence[str] | None, first: str | None, call: ForwardCall
) -> tuple[tuple[str | None, torch.Tensor | None], ...]:
    if heads is None or len(set(heads)) == 1:
        return ((first, None),)
    ids = call.inputs.get("input_ids")
    device = (ids if ids is not None else call.inputs["inputs_embeds"]).device
    rows: dict[str, list[int]] = {}
    for example, head in enumerate(heads):
        rows.setdefault(head, []).append(example)
    return tuple((head, on_device(members, torch.long, device)) for head, members in rows.items())


@dataclass
class HeadOutputs:
    """What the heads made of a routed call (see the module docstring)."""

    logits: torch.Tensor | None
    row_logits: tuple[torch.Tensor, ...] | None
    task_loss: torch.Tensor | None


def apply_heads(model: AdaptedModel, routed: RoutedCall, hidden: torch.Tensor, labels: Any) -> HeadOutputs:
    """Each head on its examples' rows of `hidden`, the encoder's last hidden state."""
    call, mask = routed.call, routed.call.head_mask
    logits, losses, rows_of = [], [], []
    for name, rows in routed.heads:
        assert name is not None
        head = model.get_head(name)
        states, head_mask, head_labels = hidden, mask, labels
        if rows is not None:
            states = _take(hidden, rows, call.num_choices)
            head_mask = _take(mask, rows, call.num_choices) if mask is not None else None
            head_labels = labels.index_select(0, rows) if labels is not None else None
        out = head(states, head_mask, call.num_choices)
        logits.append(out)
        rows_of.append(rows)
        if head_labels is not None:
            share = (rows.numel() if rows is not None else routed.examples) / routed.examples
            losses.append(head.loss(out, head_labels) * share if rows is not None else head.loss(out, head_labels))
    task_loss = torch.stack(losses).sum() if losses else None
    if len(logits) == 1:
        return HeadOutputs(logits[0], None, task_loss)
    if len({(out.shape[1:], out.dtype) for out in logits}) == 1:
        combined = logits[0].new_zeros(routed.examples, *logits[0].shape[1:])
        for out, rows in zip(logits, rows_of, strict=True):
            assert rows is not None
            combined = combined.index_copy(0, rows, out)
        return HeadOutputs(combined, None, task_loss)
    placed: dict[int, torch.Tensor] = {}
    for out, rows in zip(logits, rows_of, strict=True):
        assert rows is not None
        placed.update(zip(rows.tolist(), out.unbind(0), strict=True))
    return HeadOutputs(None, tuple(placed[example] for example in range(routed.examples)), task_loss)


def _take(value: torch.Tensor, rows: torch.Tensor, choices: int | None) -> torch.Tensor:
    """The rows of examples `rows` (each example's `choices` rows, for a multiple-choice head)."""
    if choices is None:
        return value.index_select(0, rows)
    return value.unflatten(0, (-1, choices)).index_select(0, rows).flatten(0, 1)
