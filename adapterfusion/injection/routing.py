"""Per-example routing at one site: row i of the batch runs its own adapter, a fusion, or the plain sub-layer.

`RowRouting` (held by ActiveState while a `model(**batch, adapter_names=[...])` call runs) says what each row chose.
A site works out once per call what that means for it (`RowRouting.plan`, shared by the sites that hold the same
pieces): the rows of each kind, and for the adapter rows the slot of each row's adapter in a stack of the adapters'
weights. `adapt_routed` then runs, per site:
  * every adapter row in one gathered, batched matmul each way (Punica's SGMV idea): the routed adapters' down- and
    up-projections are stacked once, gathered per row (W[slot], one index_select for both) and applied with
    torch.baddbmm, so the cost does not grow with the number of distinct adapters. Adapters whose placement options
    differ (Pfeiffer beside Houlsby, or another non-linearity) cannot share the equations, so each such kind is one
    group (usually there is one); different bottleneck sizes are zero-padded to the largest (padded up-projection
    columns are 0, so exact);
  * the rows of each fusion through the fusion's own fast path (fusion/layer.py), on those rows only;
  * the rows of each composition block (blocks.py; a Stack, Average or Fuse as an adapter_names entry) through the
    block's own path (injection/composed.py), on those rows only;
  * a row that chose nothing, or whose adapter or fusion is not at this site (leave_out), as the bare sub-layer.
When one kind covers every row, nothing is gathered or scattered. Otherwise the plain sub-layer, or where no row
chose nothing the largest adapter group, runs on every row, and each other kind's rows are taken with index_select
and written over it with index_copy (out of place where gradients flow, so they do).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from adapterfusion.adapters.bottleneck import BottleneckAdapter
from adapterfusion.adapters.config import AdapterConfig
from adapterfusion.errors import ConfigError
from adapterfusion.injection.architectures import SiteKind
from adapterfusion.injection.composed import held_at, run_node
from adapterfusion.injection.runtime import parameters_of

if TYPE_CHECKING:
    from adapterfusion.injection.site import AdapterSite

ADAPTER, FUSION, BLOCK = "adapter", "fusion", "block"
# (ADAPTER or FUSION, name) per row, (BLOCK, a resolved block), or None for the plain model
Choice = tuple[str, Any] | None


class AdapterGroup(NamedTuple):
    """Adapter rows that share placement options: `names` in slot order, `slots[i]` the slot of the i-th row of
    `rows` (None: every row of the batch, where rows of other kinds have any slot and are overwritten)."""

    names: tuple[str, ...]
    slots: torch.Tensor
    rows: torch.Tensor | None


class FusionGroup(NamedTuple):
    """The rows of one fusion (None: every row), its adapters and what its mask keeps (site.adapt_with's keep/kept)."""

    name: str
    fused: tuple[str, ...]
    rows: torch.Tensor | None
    keep: torch.Tensor | None
    kept: tuple[int, ...] | None


class BlockGroup(NamedTuple):
    """The rows of one composition block (None: every row)."""

    block: Any
    rows: torch.Tensor | None


# The adapters of a stack, its key among the site's prepared stacks, and a group's slots in it (_stack_for).
SharedStack = tuple[tuple[str, ...], str, torch.Tensor]


@dataclass(frozen=True)
class SitePlan:
    """What a routed call means at one site (see the module docstring)."""

    adapter_groups: tuple[AdapterGroup, ...]
    fusion_groups: tuple[FusionGroup, ...]
    has_plain_rows: bool
    block_groups: tuple[BlockGroup, ...] = ()
    # a group's names -> the adapters of the stack it gathers from inside inference_cache(), that stack's key and the
    # group's slots in it: worked out once per call for the sites sharing this plan (_stack_for)
    stacks: dict[tuple[str, ...], SharedStack] = field(default_factory=dict, compare=False)

    @property
    def active(self) -> bool:
        return bool(self.adapter_groups or self.fusion_groups or self.block_groups)


@dataclass(frozen=True, eq=False)
class RowRouting:
    """Per row, the piece it runs (`choices`), made for one call; `fused` and `masks` describe the chosen fusions."""

    choices: tuple[Choice, ...]
    fused: Mapping[str, tuple[str, ...]]
    masks: Mapping[str, tuple[str, ...]]
    fast: bool  # the fast fusion implementation runs (only it skips the adapters a mask drops)
    device: torch.device
    _plans: dict[tuple[tuple[str, ...], tuple[str, ...]], SitePlan] = field(default_factory=dict, repr=False)

    def plan(self, site: AdapterSite) -> SitePlan:
        """What this call means at `site`. Sites holding the same pieces (all of a model's, unless an adapter leaves
        some layers out) share one plan: what a site makes of the choices depends on nothing else."""
        holdings = (tuple(site.adapters), tuple(site.fusions))
        plan = self._plans.get(holdings)
        if plan is None:
            plan = self._plans[holdings] = self._make_plan(site)
        return plan

    def _make_plan(self, site: AdapterSite) -> SitePlan:
        rows: dict[Any, list[int]] = {}  # group key -> rows
        for row, choice in enumerate(self.choices):
            if choice is None or not name_in(site, choice):
                key: Any = None
            elif choice[0] == ADAPTER:
                key = (ADAPTER, placement_kind(site.adapter(choice[1]).config))
            else:
                key = choice
            rows.setdefault(key, []).append(row)
        everyone = len(rows) == 1
        # Where no row runs the plain sub-layer, the largest adapter group runs on every row (any slot for the rows
        # of other kinds, which those overwrite): its rows are neither gathered nor scattered, and a row of the
        # gathered matmul costs next to nothing beside the copies it saves.
        kinds = [key for key in rows if key is not None and key[0] == ADAPTER]
        base = max(kinds, key=lambda key: len(rows[key])) if kinds and None not in rows and not everyone else None
        # Every index list of the plan goes to the device in one copy: a copy from pageable host memory waits for
        # the device to finish what was queued, so one per group would stall a GPU once per group.
        lists: list[list[int]] = []
        adapter_names: dict[Any, tuple[str, ...]] = {}
        for key, members in rows.items():
            if key is None:
                continue
            if not everyone and key != base:
                lists.append(members)
            if key[0] == ADAPTER:
                names = adapter_names[key] = tuple(dict.fromkeys(self._name(row) for row in members))
                slot = {name: index for index, name in enumerate(names)}
                if key == base:
                    chosen = set(members)
                    lists.append([slot[self._name(row)] if row in chosen else 0 for row in range(len(self.choices))])
                else:
                    lists.append([slot[self._name(row)] for row in members])
        on_device = iter(self._tensors(lists))
        adapter_groups: list[AdapterGroup] = []
        fusion_groups: list[FusionGroup] = []
        block_groups: list[BlockGroup] = []
        for key in rows:
            if key is None:
                continue
            index = None if everyone or key == base else next(on_device)
            if key[0] == BLOCK:
                block_groups.append(BlockGroup(key[1], index))
            elif key[0] == ADAPTER:
                adapter_groups.insert(
                    0 if key == base else len(adapter_groups), AdapterGroup(adapter_names[key], next(on_device), index)
                )
            else:
                fusion_groups.append(self._fusion_group(key[1], index))
        return SitePlan(tuple(adapter_groups), tuple(fusion_groups), None in rows, tuple(block_groups))

    def _fusion_group(self, name: str, rows: torch.Tensor | None) -> FusionGroup:
        fused, mask = self.fused[name], self.masks.get(name)
        kept = tuple(i for i, adapter in enumerate(fused) if adapter in mask) if mask is not None else None
        keep = self._tensor([i in kept for i in range(len(fused))], torch.bool) if kept is not None else None
        fast_kept = kept if self.fast and kept is not None and len(kept) < len(fused) else None
        return FusionGroup(name, fused, rows, keep, fast_kept)

    def _name(self, row: int) -> str:
        choice = self.choices[row]
        assert choice is not None
        return choice[1]

    def _tensor(self, values: Sequence[Any], dtype: torch.dtype = torch.long) -> torch.Tensor:
        return on_device(values, dtype, self.device)

    def _tensors(self, lists: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Each of `lists` as a long tensor on the device, all moved there in one copy."""
        if not lists:
            return []
        joined = on_device([value for values in lists for value in values], torch.long, self.device)
        return list(joined.split([len(values) for values in lists]))


def on_device(values: Sequence[Any], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """`values` as a tensor on `device`, copied to a CUDA device without waiting for its queued work: a blocking copy
    (what torch.tensor(..., device=cuda) does) makes the host wait until the GPU has run everything queued before it.
    Only CUDA: there the driver stages a pageable source before the call returns; other backends (MPS) may read the
    freed source later."""
    return torch.tensor(values, dtype=dtype).to(device, non_blocking=device.type == "cuda")


def name_in(site: AdapterSite, choice: tuple[str, Any]) -> bool:
    """Whether `site` holds the chosen adapter or fusion (or any piece of the chosen block)."""
    if choice[0] == BLOCK:
        return held_at(site, choice[1])
    return choice[1] in (site.adapters if choice[0] == ADAPTER else site.fusions)


def placement_kind(config: AdapterConfig) -> tuple[Any, ...]:
    """The options that decide an adapter's equations at a site besides its weights: adapters that agree on them
    share one gathered matmul."""
    return (
        config.original_ln_before,
        config.residual_before_ln,
        config.original_ln_after,
        config.ln_before,
        config.ln_after,
        config.skip_first,
        config.non_linearity,
    )


# ---- forward ------------------------------------------------------------------------------------------------------
def adapt_routed(
    site: AdapterSite, plan: SitePlan, h: torch.Tensor, r: torch.Tensor | None, apply_final_ln: bool
) -> torch.Tensor:
    """The site's output for a routed batch: each row as if its choice alone were active (module docstring)."""
    groups = len(plan.adapter_groups) + len(plan.fusion_groups) + len(plan.block_groups)
    if groups == 1 and not plan.has_plain_rows:  # one kind for every row: nothing to gather or scatter
        if plan.adapter_groups:
            return _run_adapters(site, plan, plan.adapter_groups[0], h, r, apply_final_ln)
        if plan.block_groups:
            return run_node(site, plan.block_groups[0].block, h, r, apply_final_ln)
        return _run_fusion(site, plan.fusion_groups[0], h, r, apply_final_ln)
    # Rows that chose nothing here get the plain sub-layer's output; where there are none, the plan's largest adapter
    # group runs on every row (its rows None) and the other groups write their rows over it.
    out = _plain(site, h, r, apply_final_ln) if plan.has_plain_rows else None
    for adapters in plan.adapter_groups:  # the group of every row, if there is one, comes first
        run = partial(_run_adapters, site, plan, adapters, apply_final_ln=apply_final_ln)
        out = run(h, r) if adapters.rows is None else _put(out, adapters.rows, h, r, run)
    for group in plan.block_groups:
        out = _put(out, group.rows, h, r, partial(run_node, site, group.block, end=apply_final_ln))
    for fusion in plan.fusion_groups:
        out = _put(out, fusion.rows, h, r, partial(_run_fusion, site, fusion, apply_final_ln=apply_final_ln))
    assert out is not None  # plain rows, or two groups or more
    return out


def _put(
    out: torch.Tensor | None,
    rows: torch.Tensor | None,
    h: torch.Tensor,
    r: torch.Tensor | None,
    run: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
) -> torch.Tensor:
    """`out` with its `rows` replaced by what `run` makes of those rows of h and r (`out` None: a new tensor whose
    other rows the caller's later groups fill). Out of place where gradients flow; in place otherwise, into a tensor
    this call or an earlier one made (never h itself, which `_plain` returns at a pre-norm site)."""
    assert rows is not None  # a group of some rows only: adapt_routed runs a group of every row directly
    values = run(h.index_select(0, rows), r.index_select(0, rows) if r is not None else None)
    if out is None:
        out = values.new_empty((h.shape[0], *values.shape[1:]))
    elif out is h:
        return out.index_copy(0, rows, values)
    if torch.is_grad_enabled() and (out.requires_grad or values.requires_grad):
        return out.index_copy(0, rows, values)
    return out.index_copy_(0, rows, values)


def _plain(site: AdapterSite, h: torch.Tensor, r: torch.Tensor | None, apply_final_ln: bool) -> torch.Tensor:
    """What the unadapted sub-layer returns: LN(h + r) where the site computes the sub-layer's end itself (a
    BERT-style output module), else h."""
    if not apply_final_ln:
        return h
    r, norm = site._around(r, site.pretrained_layer_norm)
    return norm(h + r)


def _run_fusion(
    site: AdapterSite, group: FusionGroup, h: torch.Tensor, r: torch.Tensor | None, apply_final_ln: bool
) -> torch.Tensor:
    return site.adapt_with(h, r, apply_final_ln, group.name, group.fused, group.keep, group.kept)


def _run_adapters(
    site: AdapterSite,
    plan: SitePlan,
    group: AdapterGroup,
    h: torch.Tensor,
    r: torch.Tensor | None,
    apply_final_ln: bool,
) -> torch.Tensor:
    """Row i with adapter names[slots[i]], all rows in one gathered matmul each way (one adapter: its own path)."""
    if len(group.names) == 1:
        return site.adapt_with(h, r, apply_final_ln, None, group.names, None, None)
    stack, slots = _stack_for(site, plan, group)
    config = stack.config
    if site.spec.kind is SiteKind.PRE_NORM:
        x, residual = site._placed_pre_norm(h, r, config)
    else:
        r, _ = site._around(r, site.pretrained_layer_norm)
        x, residual = site._placed(h, r, config, partial(normalised, stack.layer_norm, slots))
    z = gathered_delta(stack, slots, x)
    if config.ln_after:
        after = normalised(stack.ln_after, slots, z if not config.skip_first else z + residual)
        out = after + residual if not config.skip_first else after
    else:
        out = z + residual
    if site._ends_with_layer_norm(config, apply_final_ln):
        assert r is not None
        out = normalised(stack.layer_norm, slots, out + r)
    return out


def _stack_for(site: AdapterSite, plan: SitePlan, group: AdapterGroup) -> tuple[RoutedStack, torch.Tensor]:
    """The stack the group's rows gather from, and each row's slot in it. Outside inference_cache() (training, or
    a one-off call): the group's own adapters, stacked with gradients. Inside it, the stack covers every adapter at the
    site that could share it (the group's placement kind, bottleneck at most the group's largest, so no wider
    padding) and is made once and kept: a server's batches route ever other subsets of the same adapters. Which
    adapters those are is worked out once per call for all sites sharing the plan (they hold the same pieces)."""
    if not site._runtime.is_caching:
        return stack_routed(_adapters_at(site, group.names), _site_norm(site)), group.slots
    shared = plan.stacks.get(group.names)
    if shared is None:
        sharing = _sharing(site, group.names)
        where = on_device([sharing.index(name) for name in group.names], torch.long, group.slots.device)
        shared = plan.stacks[group.names] = (sharing, ",".join(sharing), where[group.slots])
    sharing, key, slots = shared
    adapters, norm = partial(_adapters_at, site, sharing), _site_norm(site)
    stack = site._runtime.prepared(
        "stack",
        site.key,
        key,
        lambda: stack_routed(adapters(), norm),
        lambda: parameters_of([*adapters(), *([norm] if norm is not None else [])]),
    )
    assert stack is not None  # inside inference_cache()
    return stack, slots


def _sharing(site: AdapterSite, names: tuple[str, ...]) -> tuple[str, ...]:
    """The adapters at `site` whose stack can serve a group of `names` (see _stack_for)."""
    chosen = _adapters_at(site, names)
    size = max(adapter.bottleneck_size for adapter in chosen)
    kind = placement_kind(chosen[0].config)
    here = zip(site.adapters, _adapters_at(site, list(site.adapters)), strict=True)
    return tuple(
        name for name, adapter in here if placement_kind(adapter.config) == kind and adapter.bottleneck_size <= size
    )


def _adapters_at(site: AdapterSite, names: Sequence[str]) -> list[BottleneckAdapter]:
    return [site.adapter(name) for name in names]


def _site_norm(site: AdapterSite) -> nn.Module | None:
    """The LayerNorm a routed adapter without its own copy ends with (None at a PRE_NORM site: none to end with)."""
    return site.pretrained_layer_norm if site.spec.kind is not SiteKind.PRE_NORM else None


class StackedNorm(NamedTuple):
    """LayerNorms of one shape and eps (Houlsby's copies): their affine parameters stacked [A, d] in slot order."""

    weight: torch.Tensor
    bias: torch.Tensor
    shape: tuple[int, ...]
    eps: float


# A group's LayerNorm at one place: one module for every slot, stacked copies, or none.
Norm = nn.Module | StackedNorm | None


class RoutedStack(NamedTuple):
    """What a group's rows are computed from, in slot order: the adapters' projections stacked along a first
    dimension, bottlenecks zero-padded to the largest (padded up-projection rows are 0, so exact) and scaled where any
    adapter scales, down-projections and transposed up-projections in one tensor so that a row takes both in one
    gather; and their LayerNorms (stacked_norm). The group's adapters share a placement kind (placement_kind), so one
    config and one non-linearity serve all."""

    projections: torch.Tensor  # [A, 2m, d]: rows :m the down-projection, rows m: the up-projection transposed
    biases: torch.Tensor  # [A, 1, m + d]: the down-projection's bias, then the up-projection's (a row: baddbmm's)
    bottleneck: int  # m
    config: AdapterConfig
    activation: nn.Module
    ln_before: Norm
    ln_after: Norm
    layer_norm: Norm  # how the sub-layer ends: each adapter's own copy or the site's (None: a PRE_NORM site)


def stack_routed(adapters: Sequence[BottleneckAdapter], site_norm: nn.Module | None) -> RoutedStack:
    """The stack of `adapters` (made once per inference_cache() block and kept, or per call with gradients)."""
    size = max(adapter.bottleneck_size for adapter in adapters)
    scaled = any(adapter.config.scaling != 1.0 for adapter in adapters)
    down = torch.stack([_pad(a.down.weight, size, 0) for a in adapters])
    up = torch.stack([_pad(_scaled(a, a.up.weight, scaled), size, 1) for a in adapters])
    biases = [torch.cat([_pad(a.down.bias, size, 0), _scaled(a, a.up.bias, scaled)]) for a in adapters]
    first = adapters[0]
    ends = [a.layer_norm if a.layer_norm is not None else site_norm for a in adapters]
    return RoutedStack(
        torch.cat([down, up.transpose(1, 2)], dim=1),
        torch.stack(biases)[:, None],
        size,
        first.config,
        first.activation,
        stacked_norm([a.ln_before for a in adapters]) if first.ln_before is not None else None,
        stacked_norm([a.ln_after for a in adapters]) if first.config.ln_after else None,
        stacked_norm(ends) if site_norm is not None else None,
    )


def gathered_delta(stack: RoutedStack, slots: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """adapters[slots[i]].delta(x[i]) for every row i of x [rows, ..., d]: each row's projections gathered from the
    stack (one index_select for both weights, one for both biases), one baddbmm down and one up. Few operators: on a
    GPU each costs the host more than its kernel costs the device (a routed batch is host-bound there)."""
    three_d = x.dim() == 3
    flat = x if three_d else x.flatten(1, -2)  # [rows, tokens, d]
    if stack.ln_before is not None:  # placement_kind: all or none of a group have one
        flat = normalised(stack.ln_before, slots, flat)
    size = stack.bottleneck
    down, up = stack.projections.index_select(0, slots).split(size, dim=1)
    down_bias, up_bias = stack.biases.index_select(0, slots).split([size, stack.biases.shape[-1] - size], dim=2)
    delta = torch.baddbmm(up_bias, stack.activation(torch.baddbmm(down_bias, flat, down.transpose(1, 2))), up)
    return delta if three_d else delta.view_as(x)


def _scaled(adapter: BottleneckAdapter, tensor: torch.Tensor, scaled: bool) -> torch.Tensor:
    """scaling * (U a + c) = (scaling U) a + scaling c; left alone when no adapter scales (exactly its own path)."""
    return tensor * adapter.config.scaling if scaled else tensor


def _pad(tensor: torch.Tensor, size: int, dim: int) -> torch.Tensor:
    """`tensor` with dimension `dim` zero-padded to `size`."""
    missing = size - tensor.shape[dim]
    if missing == 0:
        return tensor
    padding = [0, 0] * (tensor.dim() - 1 - dim) + [0, missing]
    return F.pad(tensor, padding)


def stacked_norm(norms: Sequence[nn.Module | None]) -> Norm:
    """The module itself where every slot has the same one (or none), else the slots' affine parameters stacked
    (LayerNorms of one shape and eps, as Houlsby's copies)."""
    first = norms[0]
    if all(norm is first for norm in norms):
        return first
    affine = [norm for norm in norms if isinstance(norm, nn.LayerNorm) and norm.weight is not None]
    if len(affine) < len(norms) or any(
        norm.bias is None or norm.eps != affine[0].eps or norm.normalized_shape != affine[0].normalized_shape
        for norm in affine
    ):
        kinds = sorted({type(norm).__name__ for norm in norms})
        raise ConfigError(
            f"per-example routing needs the routed adapters' own LayerNorms to be affine nn.LayerNorms of one shape "
            f"and eps (found {kinds}); run these adapters in separate calls"
        )
    weight = torch.stack([norm.weight for norm in affine])
    bias = torch.stack([norm.bias for norm in affine])
    return StackedNorm(weight, bias, tuple(affine[0].normalized_shape), affine[0].eps)


def normalised(norm: Norm, slots: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """u -> norm[slots[i]](u[i]) for u [rows, ..., d]: one normalisation and the stacked affine gathered per row."""
    assert norm is not None  # a group has the LayerNorm it is asked to apply
    if not isinstance(norm, StackedNorm):
        return norm(u)
    view = (u.shape[0],) + (1,) * (u.dim() - 2) + (u.shape[-1],)
    weight, bias = norm.weight.index_select(0, slots), norm.bias.index_select(0, slots)
    return F.layer_norm(u, norm.shape, eps=norm.eps) * weight.view(view) + bias.view(view)
