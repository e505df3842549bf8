"""Parallel composition: every fused adapter alone and their fusion, each with its own head, in one forward
(AdapterHub issue #268).

The batch is repeated once per route along the batch dimension: slice n runs adapter n alone, the last slice
the fusion. At each site the single-adapter slices run in one batched matmul (adapters/bottleneck.py
`run_each`) and the fusion slice exactly as a fused forward does (injection/site.py `_adapt_parallel`), so
each route's logits are those of activating it alone, in one call of the encoder instead of N + 1.

Below the fusion's first site every route computes the same thing, so where the architecture allows it
(injection/architectures.py `batch_arguments`) the encoder runs that part once on the plain batch: the first
site repeats its inputs per route, and forward pre-hooks repeat the per-example arguments (attention mask) of
the layers after it. With Pfeiffer adapters that shares the embeddings and layer 0 up to its feed-forward output.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from adapterfusion._validation import check_bool, short_repr
from adapterfusion.errors import ConfigError, NameNotFoundError
from adapterfusion.forward_inputs import check_call
from adapterfusion.forward_runtime import keep_state_in_recompute
from adapterfusion.injection.architectures import SiteKind
from adapterfusion.injection.site import AdapterSite, per_route
from adapterfusion.injection.state import ActiveState

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

_PER_EXAMPLE_INPUTS = (
    "input_ids",
    "attention_mask",
    "token_type_ids",
    "position_ids",
    "inputs_embeds",
    # an encoder-decoder's (T5, BART): what the decoder reads for a head, made by forward_inputs from the inputs
    "decoder_input_ids",
    "decoder_attention_mask",
    "decoder_inputs_embeds",
)


@dataclass
class ParallelOutput:
    """adapter_logits[name]: what activate(adapter=name, head=heads[name]) gives; fusion_logits: what
    activate(fusion=..., head=fusion_head) gives; fusion_attentions_by_site as in AdaptedModelOutput."""

    adapter_logits: dict[str, torch.Tensor]
    fusion_logits: torch.Tensor
    fusion_attentions_by_site: dict[tuple[int, str], torch.Tensor] | None = None


def forward_parallel(
    model: AdaptedModel,
    fusion: str,
    heads: Mapping[str, str] | None = None,
    fusion_head: str | None = None,
    output_fusion_attentions: bool = False,
    share_encoder_prefix: bool = True,
    **inputs: Any,
) -> ParallelOutput:
    """See AdaptedModel.forward_parallel."""
    check_bool(share_encoder_prefix, "forward_parallel(share_encoder_prefix)")
    check_bool(output_fusion_attentions, "forward_parallel(output_fusion_attentions)")
    model.require("fusion", fusion)
    fused = model.fusion_setup(fusion).adapters
    if heads is not None and not isinstance(heads, Mapping):
        raise ConfigError(
            f"heads={short_repr(heads)} has type {type(heads).__name__}; expected a mapping of adapter -> head name, "
            f"e.g. heads={{{fused[0]!r}: {fused[0]!r}}} (leave it out for the heads named like the adapters)"
        )
    heads = dict(heads) if heads is not None else {name: name for name in fused}
    fusion_head = fusion_head if fusion_head is not None else fusion
    if inputs.get("labels") is not None:
        raise ConfigError(
            "forward_parallel returns logits only, one set per route: drop labels= and compute each "
            "route's loss from out.adapter_logits / out.fusion_logits"
        )
    _check_routes(model, fusion, fused, heads, fusion_head)

    model.check_cache_placement()
    keep_state_in_recompute(model)
    call = check_call(model, {key: value for key, value in inputs.items() if key != "labels"}, fusion_head)
    inputs, num_choices, batch = call.inputs, call.num_choices, call.rows
    routes = tuple(heads)
    copies = len(routes) + 1
    split = split_site(model, fusion) if share_encoder_prefix else None
    if split is None:
        inputs_in = {
            key: per_route(value, copies) if key in _PER_EXAMPLE_INPUTS and value.shape[0] == batch else value
            for key, value in inputs.items()
        }
    else:
        inputs_in = inputs

    with (
        model.activated(
            fusion=fusion,
            skip_layers=model.skip_layers,
            parallel_routes=routes,
            parallel_split_site=split.key if split is not None else None,
        ),
        model.recording_fusion_attentions(output_fusion_attentions) as recorder,
        _per_route_layer_arguments(model, split.layer_index if split is not None else None, copies, batch),
    ):
        encoded = call.encoder(**inputs_in)

    hidden = encoded.last_hidden_state.unflatten(0, (len(routes) + 1, -1))
    mask = call.head_mask
    return ParallelOutput(
        adapter_logits={name: model.heads[heads[name]](hidden[n], mask, num_choices) for n, name in enumerate(routes)},
        fusion_logits=model.heads[fusion_head](hidden[-1], mask, num_choices),
        fusion_attentions_by_site=dict(recorder) if recorder is not None else None,
    )


def check_route_rows(state: ActiveState, rows: int) -> None:
    """Refuse a batch of `rows` rows that cannot be the examples repeated once per parallel route and once for the
    fusion, as `state`'s routes (activated(..., parallel_routes=...)) read it: each site would fail in torch's
    unflatten."""
    routes = state.parallel_routes
    if routes is None or state.parallel_split_site is not None:  # a split site repeats the plain batch itself
        return
    copies = len(routes) + 1
    if rows % copies:
        raise ConfigError(
            f"parallel_routes={list(routes)} runs the batch as {copies} equal slices, one per route and the last "
            f"for fusion {state.fusion!r}, so the batch must be the examples repeated {copies} times along the batch "
            f"dimension (e.g. input_ids.repeat({copies}, 1)); got {rows} rows, not a multiple of {copies}. "
            "model.forward_parallel(fusion, heads=...) repeats the batch itself"
        )


def split_site(model: AdaptedModel, fusion: str) -> AdapterSite | None:
    """The first site `fusion` runs at, if the encoder below it may run once for all routes (None: it may not).

    It may when the architecture names its layers' per-example arguments, nothing blocks it, and that site
    receives both the sub-layer output and its residual (a BERT-style output module), so it can repeat both
    itself; at other kinds of site the parent block adds a residual the site never sees. Never on an
    encoder-decoder: its decoder reads the encoder's output and its own inputs, which the layers' hooks do not
    repeat."""
    architecture = model.architecture
    base = model.model.base_model
    assert isinstance(base, nn.Module)
    if architecture.decoder is not None:
        return None
    if not architecture.batch_arguments or any(_has_module(base, path) for path in architecture.prefix_blockers):
        return None
    first = next(
        (site for site in model.sites if fusion in site.fusions and site.layer_index not in model.skip_layers), None
    )
    return first if first is not None and first.spec.kind is SiteKind.POST_LN_OUTPUT else None


def _has_module(root: nn.Module, path: str) -> bool:
    try:
        root.get_submodule(path)
    except AttributeError:
        return False
    return True


@contextlib.contextmanager
def _per_route_layer_arguments(model: AdaptedModel, split_layer: int | None, copies: int, batch: int) -> Iterator[None]:
    """While open: the layers after `split_layer` (whose hidden states are one slice per route) get their
    per-example arguments repeated per route too. Nothing happens when split_layer is None."""
    if split_layer is None:
        yield
        return
    names = model.architecture.batch_arguments
    layers = list(model.encoder_layers())[split_layer + 1 :]
    signatures = {id(layer): inspect.signature(layer.forward) for layer in layers}

    def repeat_arguments(layer: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        bound = signatures[id(layer)].bind_partial(*args, **kwargs)
        for name in names:
            value = bound.arguments.get(name)
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch:
                bound.arguments[name] = per_route(value, copies)
        return bound.args, bound.kwargs

    handles = [layer.register_forward_pre_hook(repeat_arguments, with_kwargs=True) for layer in layers]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _check_routes(
    model: AdaptedModel, fusion: str, fused: tuple[str, ...], heads: dict[str, str], fusion_head: str
) -> None:
    """Every route needs an adapter of the fusion and a loaded head; all heads must read the same inputs."""
    if not heads:
        raise ConfigError(
            f"heads={heads} names no adapter; map some of fusion {fusion!r}'s adapters {list(fused)} "
            "to their heads, e.g. heads={'mnli': 'mnli'}"
        )
    stray = [name for name in heads if name not in fused]
    if stray:
        raise ConfigError(f"heads names {stray}, which fusion {fusion!r} does not fuse; its adapters are {list(fused)}")
    loaded = list(model.heads)
    routes = [(f"adapter {name!r}", head) for name, head in heads.items()] + [(f"fusion {fusion!r}", fusion_head)]
    for route, head in routes:
        if not isinstance(head, str):  # a list is no key of model.heads: torch's TypeError
            raise ConfigError(
                f"the head for {route} is {short_repr(head)} of type {type(head).__name__}, not a head name; give "
                f"one loaded head's name (a str) with heads={{adapter: head}} / fusion_head=...; loaded heads: {loaded}"
            )
        if head not in model.heads:
            raise NameNotFoundError(
                f"no head named {head!r} is loaded for {route}; loaded heads: {loaded or 'none'}. Add it with "
                "add_head() or load_head(), or name another with heads={adapter: head} / fusion_head=..."
            )
    kinds = {head: model.get_head(head).config.kind == "multiple_choice" for head in [*heads.values(), fusion_head]}
    if len(set(kinds.values())) > 1:
        choice = sorted(head for head, is_choice in kinds.items() if is_choice)
        raise ConfigError(
            f"heads {choice} are multiple-choice heads and the others are not; they cannot read the "
            "same inputs in one forward: run them with separate forward_parallel calls"
        )
