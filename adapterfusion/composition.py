"""Parallel composition: every fused adapter alone and their fusion, each with its own head, in one forward
(AdapterHub issue #268).

The batch is repeated once per route along the batch dimension: slice n runs adapter n alone, the last slice
the fusion. At each site the single-adapter slices run in one batched matmul (adapters/bottleneck.py
`run_each`) and the fusion slice exactly as a fused forward does (injection/site.py `_adapt_parallel`), so
each route's logits are those of activating it alone, in one call of the encoder instead of N + 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from adapterfusion.errors import ConfigError, NameNotFoundError
from adapterfusion.heads.module import flatten_choices

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

_PER_EXAMPLE_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "position_ids", "inputs_embeds")


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
    **inputs: Any,
) -> ParallelOutput:
    """See AdaptedModel.forward_parallel."""
    model.require("fusion", fusion)
    fused = model.fusion_setups[fusion][1]
    heads = dict(heads) if heads is not None else {name: name for name in fused}
    fusion_head = fusion_head if fusion_head is not None else fusion
    if inputs.get("labels") is not None:
        raise ConfigError(
            "forward_parallel returns logits only, one set per route: drop labels= and compute each "
            "route's loss from out.adapter_logits / out.fusion_logits"
        )
    _check_routes(model, fusion, fused, heads, fusion_head)

    inputs = {key: value for key, value in inputs.items() if value is not None and key != "labels"}
    num_choices = None
    if model.get_head(fusion_head).config.kind == "multiple_choice":
        num_choices = flatten_choices(inputs)
    routes = tuple(heads)
    batch = next((inputs[key].shape[0] for key in ("input_ids", "inputs_embeds") if key in inputs), None)
    if batch is None:
        raise ConfigError("forward_parallel needs input_ids (or inputs_embeds) of shape [batch, seq]")
    repeated = {
        key: value.repeat(len(routes) + 1, *(1,) * (value.dim() - 1))
        if key in _PER_EXAMPLE_INPUTS and value.shape[0] == batch
        else value
        for key, value in inputs.items()
    }

    encoder = model.model.base_model
    assert isinstance(encoder, torch.nn.Module)
    with (
        model.activated(fusion=fusion, skip_layers=model.skip_layers, parallel_routes=routes),
        model.recording_fusion_attentions(output_fusion_attentions) as recorder,
    ):
        encoded = encoder(**repeated)

    hidden = encoded.last_hidden_state.unflatten(0, (len(routes) + 1, -1))
    mask = inputs.get("attention_mask")
    return ParallelOutput(
        adapter_logits={name: model.heads[heads[name]](hidden[n], mask, num_choices) for n, name in enumerate(routes)},
        fusion_logits=model.heads[fusion_head](hidden[-1], mask, num_choices),
        fusion_attentions_by_site=dict(recorder) if recorder is not None else None,
    )


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
