"""The loaded pieces as requests are checked against them: a Catalog snapshot of a model's adapters, fusions and
heads, taken on the model's thread so that the event loop never reads the model while a piece loads into it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from adapterfusion.blocks import AVERAGE_SHARED_OPTIONS, holds_layer_norm_copy

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

# What the adapters of an average block must agree on (blocks.py refuses the rest when the block runs, which would
# fail the forward the request shares): the placement options, and whether each holds its own LayerNorm copies.
PLACEMENT_FIELDS = (*AVERAGE_SHARED_OPTIONS, "train_layer_norm")


@dataclass(frozen=True)
class HeadInfo:
    kind: str
    outputs: int
    labels: tuple[str, ...] | None


@dataclass(frozen=True)
class Catalog:
    """The loaded pieces, as requests are checked against them: a snapshot taken on the model's thread (at start
    and after each load), so the event loop never reads the model while a piece is being loaded into it."""

    adapters: tuple[str, ...]
    fusions: dict[str, tuple[str, ...]]
    heads: dict[str, HeadInfo]
    active: dict[str, str | None]
    generates: bool = False  # the model has a language-model head (POST /v1/generate)
    # adapter -> its PLACEMENT_FIELDS' values: an average block needs them alike
    placements: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, model: AdaptedModel) -> Catalog:
        heads = {}
        for name in model.head_names:
            config = model.get_head(name).config
            heads[name] = HeadInfo(config.kind, config.output_size, tuple(config.labels) if config.labels else None)
        return cls(
            tuple(model.adapter_names),
            {name: tuple(model.fusion_setup(name).adapters) for name in model.fusion_names},
            heads,
            {"adapter": model.active_adapter, "fusion": model.active_fusion, "head": model.active_head},
            model.can_generate(),
            {
                name: (
                    *(getattr(model.adapter_configs[name], option) for option in AVERAGE_SHARED_OPTIONS),
                    holds_layer_norm_copy(model, name),
                )
                for name in model.adapter_names
            },
        )

    def to_dict(self) -> dict[str, Any]:
        """What GET /v1/pieces answers."""
        return {
            "adapters": list(self.adapters),
            "fusions": {name: list(fused) for name, fused in self.fusions.items()},
            "heads": {
                name: {"kind": head.kind, "outputs": head.outputs, "labels": list(head.labels or ())}
                for name, head in self.heads.items()
            },
            "active": dict(self.active),
        }
