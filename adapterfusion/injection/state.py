"""ActiveState: what runs, as one frozen value.

AdaptedModel keeps the current value (`model.state`) and hands the same value to every AdapterSite through
`site.set_state(state)`; a site works out once what the value means for it (is anything active here, which of the
active fusion's adapters a mask keeps). Changing what runs (`activate`, `activated`, `set_fusion_mask`,
`set_fusion_step`, `set_fusion_implementation`, `forward_parallel`) makes a new value; nothing else writes a site's
activation, so a `with model.activated(...)` block can put back exactly what ran before.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from adapterfusion._validation import check_int, check_ordered, require_loaded, short_repr
from adapterfusion.blocks import Block, is_loaded, resolve
from adapterfusion.errors import AdapterFusionError, ConfigError
from adapterfusion.injection.routing import RowRouting

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


@dataclass(frozen=True)
class ActiveState:
    """One adapter, one fusion or one composition block (or none: the bare encoder) and a head or none; the layers
    that run bare (AdapterDrop); per fusion the adapters a mask keeps; the fusion controls; and, only inside
    composition.forward_parallel, the adapters that each run alone on their own slice of the batch."""

    adapter: str | None = None
    fusion: str | None = None
    fused: tuple[str, ...] = ()  # the active fusion's adapters, in order, so a site needs nothing else
    head: str | None = None
    skip_layers: tuple[int, ...] = ()
    fusion_masks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # fusion -> kept adapters; never mutated
    fusion_step: int = 0  # drives a fusion's temperature schedule
    fusion_implementation: str = "fast"  # or 'reference' (injection/site.py FUSION_IMPLEMENTATIONS)
    parallel_routes: tuple[str, ...] | None = None
    # With parallel routes: the key of the site where the plain batch becomes one slice per route (the encoder
    # below it ran once); None: the batch came in repeated per route.
    parallel_split_site: str | None = None
    # Only during a `model(**batch, adapter_names=[...])` call: what each row runs (injection/routing.py).
    routing: RowRouting | None = None
    # A composition block (blocks.py, resolved against the model) in place of one adapter or fusion.
    block: Block | None = None

    def __post_init__(self) -> None:
        check_int(self.fusion_step, "fusion step", minimum=0)


def checked(
    state: ActiveState,
    adapters: Collection[str],
    fusions: Mapping[str, tuple[str, ...]],
    heads: Collection[str],
    num_layers: int,
) -> ActiveState:
    """`state` if the pieces it names are among the loaded `adapters`, `fusions` (name -> fused adapters) and `heads`
    (else NameNotFoundError) and its skipped layers exist, with the active fusion's adapters filled in and the masks
    that no longer fit a loaded fusion dropped."""
    loaded = {"adapter": adapters, "fusion": fusions, "head": heads}
    for kind, name in (("adapter", state.adapter), ("fusion", state.fusion), ("head", state.head)):
        if name is not None:
            require_loaded(kind, name, loaded[kind], {k: v for k, v in loaded.items() if k != kind})
    bad = [
        layer
        for layer in state.skip_layers
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < num_layers
    ]
    if bad:
        raise ConfigError(f"skip_layers {bad} are not layer indices of this encoder (0..{num_layers - 1})")
    masks = {
        fusion: kept
        for fusion, kept in state.fusion_masks.items()
        if fusion in fusions and set(kept) <= set(fusions[fusion])
    }
    fused = fusions[state.fusion] if state.fusion is not None else ()
    block = state.block if state.block is not None and is_loaded(state.block, adapters, fusions) else None
    return dataclasses.replace(state, fused=fused, fusion_masks=masks, block=block)


def kept_adapters(fusion: str, fused: tuple[str, ...], keep: object) -> tuple[str, ...]:
    """The adapters of `fusion` (fusing `fused`) that a mask `keep` keeps, in fusion order: `keep` must list some of
    them, each once."""
    if isinstance(keep, str) or not isinstance(keep, (list, tuple, set, frozenset)):
        raise ConfigError(
            f"keep={short_repr(keep)} has type {type(keep).__name__}; expected a list of fusion {fusion!r}'s adapters "
            f"{list(fused)}, e.g. keep=[{fused[0]!r}], or None for all of them"
        )
    keep = list(keep)
    unknown = [k for k in keep if k not in fused]
    if unknown or not keep or len(set(keep)) != len(keep):
        problem = f"names {unknown}, which the fusion does not fuse" if unknown else "is empty" if not keep else ""
        raise ConfigError(
            f"keep={keep} {problem or 'lists an adapter twice'}; keep must be a non-empty subset of fusion "
            f"{fusion!r}'s adapters {list(fused)}, each listed once (keep=None fuses them all)"
        )
    return tuple(name for name in fused if name in keep)


def with_routes(state: ActiveState, routes: Sequence[str], split_site: str | None = None) -> ActiveState:
    """`state` with parallel routes: adapters of its active fusion, each run alone on its own slice of the batch
    (repeated from the plain batch at `split_site`, if given)."""
    if not isinstance(routes, Iterable):  # 3 was a raw TypeError from tuple(); sets and dicts: check_ordered
        raise ConfigError(
            f"parallel_routes={short_repr(routes)} has type {type(routes).__name__}; pass a list of adapter names, "
            "e.g. parallel_routes=['a', 'b']"
        )
    if isinstance(routes, str):  # a str is a sequence of one-letter names: 'ab' was read as ['a', 'b']
        raise ConfigError(
            f"parallel_routes={short_repr(routes)} is a string; pass a list of adapter names, e.g. "
            f"parallel_routes=[{short_repr(routes)}]"
        )
    check_ordered(
        routes,
        "activated: parallel_routes",
        "the slices of the batch (slice n runs route n)",
        "pass a list, e.g. parallel_routes=['a', 'b']",
    )
    routes = tuple(routes)
    if state.fusion is None or not routes or any(name not in state.fused for name in routes):
        raise ConfigError(
            f"parallel_routes={list(routes)} must name adapters of the activated fusion "
            f"{state.fusion!r} ({list(state.fused)})"
        )
    return dataclasses.replace(state, parallel_routes=routes, parallel_split_site=split_site)


def checked_against(model: AdaptedModel, state: ActiveState) -> ActiveState:
    """`checked` against the pieces `model` holds now."""
    if not isinstance(state, ActiveState):  # set_state(None) was an AttributeError deep in the check
        raise ConfigError(
            f"state={short_repr(state)} has type {type(state).__name__}; set_state takes an ActiveState (model.state, "
            "or one model.state_for(...) made); to choose what runs, call activate(...)"
        )
    fusions = {name: setup.adapters for name, setup in model.fusion_setups.items()}
    return checked(state, model.adapter_configs, fusions, list(model.heads), model.num_layers)


def refit(model: AdaptedModel, state: ActiveState) -> ActiveState:
    """`state` checked again against the pieces `model` holds now, as activate() checks it, after a piece it names
    was replaced (add_*(..., overwrite=True)): a block is resolved again (a Fuse must still match its fusion, an
    Average's adapters share one placement), parallel routes must still be adapters of the fusion, and a fusion's
    mask its adapters. ConfigError where the state no longer fits; a block or mask of a deleted piece is dropped."""
    fitted = checked_against(model, state)
    unfit = [f for f in state.fusion_masks if f in model.fusion_setups and f not in fitted.fusion_masks]
    if unfit:
        raise ConfigError(
            f"the mask of fusion {unfit[0]!r} keeps {list(state.fusion_masks[unfit[0]])}, which it no longer fuses "
            f"(it fuses {list(model.fusion_setups[unfit[0]].adapters)})"
        )
    if fitted.block is not None:
        fitted = dataclasses.replace(fitted, block=resolve(model, fitted.block))
    if fitted.parallel_routes is not None:
        fitted = with_routes(fitted, fitted.parallel_routes, fitted.parallel_split_site)
    return fitted


def restorable(model: AdaptedModel, state: ActiveState) -> ActiveState:
    """`state` as it may run again after a `with` block that changed the pieces. What was deleted is left out, as
    delete_* leave an active state (the bare encoder; a deleted head: the wrapped model's own output). What was
    replaced (add_*(..., overwrite=True)) is checked again (refit); what the new piece does not fit leaves nothing
    active but the head, with a warning, as such a replacement outside a `with` block does."""
    if (state.adapter is not None and state.adapter not in model.adapter_configs) or (
        state.fusion is not None and state.fusion not in model.fusion_setups
    ):
        state = _bare(state)
    if state.head is not None and state.head not in model.heads:
        state = dataclasses.replace(state, head=None)
    try:
        return refit(model, state)
    except AdapterFusionError as error:
        warnings.warn(
            f"a piece was replaced inside the `with` block, and what ran before it cannot run again ({error}); "
            "nothing is active now but the head: activate what should run",
            stacklevel=4,  # the `with` statement: here, model.running(), contextlib's __exit__
        )
        return _bare(state)


def _bare(state: ActiveState) -> ActiveState:
    """`state` with no adapter, fusion, block or parallel routes active (the head, skipped layers, masks and fusion
    controls stay)."""
    return dataclasses.replace(
        state, adapter=None, fusion=None, block=None, parallel_routes=None, parallel_split_site=None
    )
