"""Per-example routing at one site: row i of the batch runs its own adapter, a fusion, or the plain sub-layer.

`RowRouting` (held by ActiveState while a `model(**batch, adapter_names=[...])` call runs) says what each row chose.
A site works out once per call what that means for it (`RowRouting.plan`, memoised by which of the chosen pieces
the site holds): the rows of each kind, and for the adapter rows the slot of each row's adapter in a stack of the
adapters' weights. `adapt_routed` then runs, per site:
  * every adapter row in one gathered, batched matmul each way (Punica's SGMV idea): the routed adapters' down- and
    up-projections are stacked once, gathered per row (W[slot]) and applied with torch.baddbmm, so the cost does not
    grow with the number of distinct adapters. Adapters whose placement options differ (Pfeiffer beside Houlsby, or
    another non-linearity) cannot share the equations, so each such kind is one group (usually there is one);
    different bottleneck sizes are zero-padded to the largest (padded up-projection columns are 0, so exact);
  * the rows of each fusion through the fusion's own fast path (fusion/layer.py), on those rows only;
  * the rows of each composition block (blocks.py; a Stack, Average or Fuse as an adapter_names entry) through the
    block's own path (injection/composed.py), on those rows only;
  * a row that chose nothing, or whose adapter or fusion is not at this site (leave_out), as the bare sub-layer.
When one kind covers every row, nothing is gathered or scattered; otherwise each kind's rows are taken with
index_select and put back with index_copy (out of place, so gradients flow).
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
    `rows` (None: every row of the batch)."""

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


@dataclass(frozen=True)
class SitePlan:
    """What a routed call means at one site (see the module docstring)."""

    adapter_groups: tuple[AdapterGroup, ...]
    fusion_groups: tuple[FusionGroup, ...]
    has_plain_rows: bool
    block_groups: tuple[BlockGroup, ...] = ()
    # (a group's names, the stack's names) -> the group's slots in that stack, made once per call and device
    slots_in_stack: dict[tuple[tuple[str, ...], str], torch.Tensor] = field(default_factory=dict, compare=False)

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
    _plans: dict[tuple[Any, ...], SitePlan] = field(default_factory=dict, repr=False)

    def plan(self, site: AdapterSite) -> SitePlan:
        """What this call means at `site`; sites holding the same chosen pieces share one plan."""
        here = tuple(
            choice is not None and name_in(site, choice) for choice in dict.fromkeys(c for c in self.choices if c)
        )
        plan = self._plans.get(here)
        if plan is None:
            plan = self._plans[here] = self._make_plan(site)
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
        # Every index list of the plan goes to the device in one copy: a copy from pageable host memory waits for
        # the device to finish what was queued, so one per group would stall a GPU once per group.
        lists: list[list[int]] = []
        adapter_names: dict[Any, tuple[str, ...]] = {}
        for key, members in rows.items():
            if key is None:
                continue
            if not everyone:
                lists.append(members)
            if key[0] == ADAPTER:
                names = adapter_names[key] = tuple(dict.fromkeys(self._name(row) for row in members))
                lists.append([names.index(self._name(row)) for row in members])
        on_device = iter(self._tensors(lists))
        adapter_groups, fusion_groups, block_groups = [], [], []
        for key in rows:
            if key is None:
                continue
            index = None if everyone else next(on_device)
            if key[0] == BLOCK:
                block_groups.append(BlockGroup(key[1], index))
            elif key[0] == ADAPTER:
                adapter_groups.append(AdapterGroup(adapter_names[key], next(on_device), index))
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
        return torch.tensor(values, dtype=dtype, device=self.device)

    def _tensors(self, lists: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Each of `lists` as a long tensor on the device, all moved there in one copy."""
        if not lists:
            return []
        joined = torch.tensor([value for values in lists for value in values], dtype=torch.long)
        return list(joined.to(self.device).split([len(values) for values in lists]))


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
    # Rows that chose nothing here get the plain sub-layer's output; where there are none, every row is written by a
    # group below, so no plain output is computed only to be overwritten.
    out = _plain(site, h, r, apply_final_ln) if plan.has_plain_rows else None
    for group in plan.block_groups:
        out = _put(out, group.rows, h, r, partial(run_node, site, group.block, end=apply_final_ln))
    for adapters in plan.adapter_groups:
        run = partial(_run_adapters, site, plan, adapters, apply_final_ln=apply_final_ln)
        out = _put(out, adapters.rows, h, r, run)
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
    adapters = [site.adapter(name) for name in group.names]
    config, slots = adapters[0].config, group.slots
    norm: Any = None
    if site.spec.kind is SiteKind.PRE_NORM:
        x, residual = site._placed_pre_norm(h, r, config)
    else:
        r, site_norm = site._around(r, site.pretrained_layer_norm)
        norm = gathered_norm([a.layer_norm if a.layer_norm is not None else site_norm for a in adapters], slots)
        x, residual = site._placed(h, r, config, norm)
    z = _gathered_delta_at(site, group, adapters, x, plan.slots_in_stack)
    if config.ln_after:
        after = gathered_norm([a.ln_after for a in adapters], slots)
        out = after(z) + residual if not config.skip_first else after(z + residual)
    else:
        out = z + residual
    if site._ends_with_layer_norm(config, apply_final_ln):
        assert r is not None
        out = norm(out + r)
    return out


def _gathered_delta_at(
    site: AdapterSite,
    group: AdapterGroup,
    adapters: list[BottleneckAdapter],
    x: torch.Tensor,
    slots_in_stack: dict[tuple[tuple[str, ...], str], torch.Tensor],
) -> torch.Tensor:
    """gathered_delta of the group's rows. Inside inference_cache() its stacks cover every adapter at the site that
    could share them (the group's placement kind, bottleneck at most the group's largest, so no wider padding) and
    are made once and kept: a server's batches route ever other subsets of the same adapters."""
    if not site._runtime.is_caching:  # training, or a call outside the cache: the group's own stacks, with gradients
        return gathered_delta(adapters, group.slots, x)
    size = max(adapter.bottleneck_size for adapter in adapters)
    kind = placement_kind(adapters[0].config)
    here = {name: site.adapter(name) for name in site.adapters}
    sharing = [
        name
        for name, adapter in here.items()
        if placement_kind(adapter.config) == kind and adapter.bottleneck_size <= size
    ]
    members = [here[name] for name in sharing]
    stack = ",".join(sharing)
    stacked = site._runtime.prepared(
        "stack", site.key, stack, partial(stack_weights, members), partial(parameters_of, members)
    )
    slots = slots_in_stack.get((group.names, stack))
    if slots is None:  # once per call: sites whose stacks list the same adapters share it
        where = torch.tensor([sharing.index(name) for name in group.names], device=group.slots.device)
        slots = slots_in_stack[(group.names, stack)] = where[group.slots]
    return gathered_delta(members, slots, x, stacked)


class StackedWeights(NamedTuple):
    """A group's adapters' weights stacked along a first dimension (slot order), bottlenecks zero-padded to the
    largest, and scaled where any adapter scales: down [A, m, d], its bias [A, m], up [A, d, m], its bias [A, d]."""

    down_weight: torch.Tensor
    down_bias: torch.Tensor
    up_weight: torch.Tensor
    up_bias: torch.Tensor


def stack_weights(adapters: Sequence[BottleneckAdapter]) -> StackedWeights:
    """The stacks gathered_delta gathers from; made once per inference_cache() block and kept (runtime.prepared)."""
    size = max(adapter.bottleneck_size for adapter in adapters)
    scaled = any(adapter.config.scaling != 1.0 for adapter in adapters)
    return StackedWeights(
        torch.stack([_pad(a.down.weight, size, 0) for a in adapters]),
        torch.stack([_pad(a.down.bias, size, 0) for a in adapters]),
        torch.stack([_pad(_scaled(a, a.up.weight, scaled), size, 1) for a in adapters]),
        torch.stack([_scaled(a, a.up.bias, scaled) for a in adapters]),
    )


def gathered_delta(
    adapters: Sequence[BottleneckAdapter], slots: torch.Tensor, x: torch.Tensor, stacked: StackedWeights | None = None
) -> torch.Tensor:
    """adapters[slots[i]].delta(x[i]) for every row i of x [rows, ..., d]: the stacked weights (`stacked`, else
    stacked here) gathered per row, one baddbmm down and one up."""
    flat = x.flatten(1, -2)  # [rows, tokens, d]
    if adapters[0].ln_before is not None:  # placement_kind: all or none of a group have one
        flat = gathered_norm([a.ln_before for a in adapters], slots)(flat)
    weights = stacked if stacked is not None else stack_weights(adapters)
    pre = torch.baddbmm(weights.down_bias[slots].unsqueeze(1), flat, weights.down_weight[slots].transpose(1, 2))
    hidden = adapters[0].activation(pre)  # placement_kind: one non-linearity per group
    up = torch.baddbmm(weights.up_bias[slots].unsqueeze(1), hidden, weights.up_weight[slots].transpose(1, 2))
    return up.view_as(x)


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


def gathered_norm(norms: Sequence[nn.Module | None], slots: torch.Tensor) -> Any:
    """u -> norms[slots[i]](u[i]) for u [rows, ..., d]: the module itself when every slot has the same one, else one
    normalisation and the stacked affine gathered per row (LayerNorms of one shape and eps, as Houlsby's copies)."""
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
    weight, bias = torch.stack([norm.weight for norm in affine]), torch.stack([norm.bias for norm in affine])
    shape, eps = affine[0].normalized_shape, affine[0].eps

    def normalise(u: torch.Tensor) -> torch.Tensor:
        view = (u.shape[0],) + (1,) * (u.dim() - 2) + (u.shape[-1],)
        return F.layer_norm(u, shape, eps=eps) * weight[slots].view(view) + bias[slots].view(view)

    return normalise
