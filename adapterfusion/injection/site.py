"""AdapterSite: the visible wrapper that replaces one insertion site of an encoder layer.

It holds the original module as `base_layer` plus `adapters` and `fusions` ModuleDicts keyed by name, so
adapters show in `print(model)`, state-dict keys are deterministic, base weights are untouched, and
`unwrap()` gives the original module back. With nothing active it calls `base_layer` unchanged.

The flow through an active site (h: sub-layer output after its projection, r: residual input, LN: the
sub-layer's pretrained LayerNorm):
    x        = LN(h + r) if original_ln_before else h           # adapter input (and fusion query)
    residual = h | h + r | x       (residual_before_ln = True | 'post_add' | False)
    out      = adapter(x, residual)   or   fusion(query, adapters(x), residual)
    out      = LN(out + r) if original_ln_after                 # as the unadapted sub-layer ends
An adapter with its own trained LayerNorm copy LN_n (Houlsby) uses it for LN; a fusion over such adapters ends
with sum_n s_n LN_n(out + r), s the fusion attention (fusion/layer.py `mix_layer_norms_*`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypedDict, TypeVar, cast

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from adapterfusion.adapters.bottleneck import BottleneckAdapter, layer_norm_each, run_each
from adapterfusion.adapters.config import AdapterConfig
from adapterfusion.blocks import LAYOUT_BLOCKS
from adapterfusion.errors import ConfigError
from adapterfusion.fusion.layer import FUSION_IMPLEMENTATIONS, FoldedFusion, FusionLayer, fold_fusion, normalised_query
from adapterfusion.fusion.scalearn import SCALEARN_IMPLEMENTATIONS, ScaLearnLayer
from adapterfusion.injection.architectures import SiteKind, SiteSpec, site_key
from adapterfusion.injection.composed import held_at, run_node
from adapterfusion.injection.lanes import Lane, build_lane
from adapterfusion.injection.routing import SitePlan, adapt_routed
from adapterfusion.injection.runtime import ForwardRuntime, parameters_of
from adapterfusion.injection.state import ActiveState

ModuleT = TypeVar("ModuleT", bound=nn.Module)


class FuseOptions(TypedDict, total=False):
    """The keyword arguments a site passes to `FusionImplementation.fuse` (`folded`: the fast one only)."""

    temperature: float
    keep: torch.Tensor | None
    folded: FoldedFusion | None


def _held(
    hook: RemovableHandle | None,
    module: nn.Module | None,
    listen: bool,
    take: Callable[..., None],
    before: bool = False,
) -> RemovableHandle | None:
    """A site's hook `take` on `module` (before: a forward pre-hook, with the call's keywords; else on its output)
    while the site listens, registered if not yet; removed when it stops or has no such module: a module with hooks
    runs the slower call path of torch, which an inactive site should not cost it."""
    if module is not None and listen:
        if hook is not None:
            return hook
        return (
            module.register_forward_pre_hook(take, with_kwargs=True) if before else module.register_forward_hook(take)
        )
    if hook is not None:
        hook.remove()
    return None


def _first_input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A module call's first input, given by position or as its first keyword (OPT's self_attn(hidden_states=...)):
    the stream a hooked module or a PRE_RESIDUAL sub-layer receives."""
    return args[0] if args else next(iter(kwargs.values()))


class AdapterSite(nn.Module):
    """One wrapped insertion site: runs `base_layer` alone, or with the adapter or fusion the state activates."""

    # What set_state works out of the state (written straight into __dict__ there).
    state: ActiveState
    _adapter: str | None
    _fusion: str | None
    _keep: torch.Tensor | None
    _kept: tuple[int, ...] | None
    _routing: SitePlan | None
    _block: Any
    _active: bool
    _needs_residual: bool
    _lane_key: str | None

    def __init__(
        self,
        base_layer: nn.Module,
        spec: SiteSpec,
        layer_index: int,
        position: str,
        parent_layer_norm: nn.Module | None = None,
        runtime: ForwardRuntime | None = None,
    ) -> None:
        """`runtime`: the owner of what forwards record and reuse (injection/runtime.py), shared by every site of a
        model; a site made alone gets its own."""
        super().__init__()
        self.base_layer = base_layer
        self.adapters = nn.ModuleDict()
        self.fusions = nn.ModuleDict()
        self.train(base_layer.training)  # an eval-mode model wraps into eval-mode sites (and what they build)
        # Its own copy: a compiled forward reads the spec through each site, and one object shared by every site
        # would cost a Python aliasing guard per site and decode step (`site_i.spec is site_0.spec`).
        self.spec = dataclasses.replace(spec)
        # What forward asks of the spec's kind, as plain bools: an enum member is one object, shared by every site.
        self._post_ln_output = spec.kind is SiteKind.POST_LN_OUTPUT
        self._residual_is_input = spec.kind is SiteKind.PRE_RESIDUAL and spec.residual_input is None
        self.layer_index = layer_index
        self.position = position
        # The parent block owns this LayerNorm; registering it here would duplicate it in state_dict().
        self.__dict__["_parent_layer_norm"] = parent_layer_norm
        self._runtime = runtime if runtime is not None else ForwardRuntime()
        self._mask_key: tuple[Any, ...] | None = None
        self._residual: torch.Tensor | None = None  # PRE_NORM with residual_input: r of the running forward
        self._residual_hook: RemovableHandle | None = None
        self._added: torch.Tensor | None = None  # spec.residual_adds: that sub-layer's output in the running forward
        self._added_hook: RemovableHandle | None = None
        self._known_lane: tuple[str, Lane | None] | None = None  # (lane key, lane) of the running block
        self._output_scale: float | None = None  # spec.output_scale: the block's m in r + m * output
        self._rows: torch.Size | None = None  # spec.rows_from: [B, T] of the running forward
        self._rows_hook: RemovableHandle | None = None
        self._summand: torch.Tensor | None = None  # spec.output_adds: that sub-layer's output in the running forward
        self._summand_hook: RemovableHandle | None = None
        # A layer its model runs several times in one forward (ALBERT, `repeats`): how often this site has adapted in
        # the running forward, reset by a hook on the module that repeats the layers; a recording averages them.
        self._counts_applications = False
        self._application = 0
        self._repeats_hook: RemovableHandle | None = None
        # Where the site is below the HF base model, and where AdapterHub keeps its adapters for it (inject_sites).
        self.module_path = ""
        self.adapterhub_module_path = ""
        self.set_state(ActiveState())

    def __getstate__(self) -> dict[str, Any]:
        """A copy keeps no lane of the original's inference_cache() block nor a residual of its running forward."""
        state = dict(super().__getstate__())
        state.update(_known_lane=None, _residual=None, _added=None, _rows=None, _summand=None, _application=0)
        return state

    def listen_for_residual(self, norm: nn.Module, added: nn.Module | None = None) -> None:
        """PRE_NORM sites: take the residual stream r from the input of `norm`, the block's norm in front of this
        sub-layer, on each forward that adapts here (injection/architectures.py `residual_input`), plus the output of
        `added` where the block is parallel (`residual_adds`: the attention sub-layer, or its site, which runs
        first). The hooks are there only while the site is active: a module with hooks runs the slower call path of
        torch, which a bare forward (and every site that stays inactive) should not pay."""
        self.__dict__["_residual_norm"] = norm  # the block owns it: not a submodule of the site
        self.__dict__["_residual_added"] = added
        self._listen_while_active()

    def scale_output(self, multiplier: float) -> None:
        """Sites whose block adds r + m * output (`output_scale`, m = `multiplier`): the adapter works on m * output,
        the sub-layer's share of the stream, and the site returns its result divided by m (a finite, nonzero m:
        architecture_for_config checks it before any site is made)."""
        self._output_scale = multiplier

    def listen_for_rows(self, module: nn.Module) -> None:
        """Sites whose sub-layer runs on the batch flattened to [B*T, d] (`rows_from`): take [B, T] from the input of
        `module` on each forward that adapts here, to view the rows back as examples and tokens."""
        self.__dict__["_rows_module"] = module  # the block owns it: not a submodule of the site
        self._listen_while_active()

    def listen_for_summand(self, module: nn.Module) -> None:
        """Sites whose block sums their sub-layer's output with `module`'s before adding it to the stream
        (`output_adds`; `module` runs first): take its output on each forward that adapts here, to adapt the sum."""
        self.__dict__["_summand_module"] = module  # the block owns it: not a submodule of the site
        self._listen_while_active()

    def listen_for_repeats(self, module: nn.Module) -> None:
        """Sites of a layer that `module` runs several times in one call, with the same weights (ALBERT's shared
        layers, `repeats`): count the site's applications from each call of `module` on, so that a recording keeps
        the mean of the fusion weights of every application, not the last one's."""
        self.__dict__["_repeats_module"] = module  # the model owns it: not a submodule of the site
        self.__dict__["_counts_applications"] = True
        self._listen_while_active()

    def _listen_while_active(self) -> None:
        summand, rows = self.__dict__.get("_summand_module"), self.__dict__.get("_rows_module")
        repeats = self.__dict__.get("_repeats_module")
        self._repeats_hook = _held(self._repeats_hook, repeats, self._active, self._take_start, before=True)
        norm, added = self.__dict__.get("_residual_norm"), self.__dict__.get("_residual_added")
        listen = self._active and self._needs_residual
        self._summand_hook = _held(self._summand_hook, summand, self._active, self._take_summand)
        self._rows_hook = _held(self._rows_hook, rows, self._active, self._take_rows, before=True)
        self._residual_hook = _held(self._residual_hook, norm, listen, self._take_residual, before=True)
        self._added_hook = _held(self._added_hook, added if norm is not None else None, listen, self._take_added)

    def _take_residual(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.__dict__["_residual"] = _first_input(args, kwargs)  # no nn.Module.__setattr__

    def _take_rows(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.__dict__["_rows"] = _first_input(args, kwargs).shape[:-1]

    def _take_added(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        self.__dict__["_added"] = output[0] if isinstance(output, tuple) else output

    def _take_start(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.__dict__["_application"] = 0

    def _take_summand(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        self.__dict__["_summand"] = output[0] if isinstance(output, tuple) else output

    def _residual_needed(self, state: ActiveState) -> bool:
        """Whether what `state` runs here reads the residual stream r. At a PRE_NORM site, of one adapter or one
        fusion, only the LayerNorm options original_ln_before and residual_before_ln='post_add' do (Houlsby's
        placement does not): without them the site skips the hook that hands it r. Anything else (routed rows,
        parallel routes, composition blocks) may run any adapter, so it always takes it."""
        if self.spec.kind is not SiteKind.PRE_NORM or not _plain(state):
            return True
        names = state.fused if self._fusion is not None else (self._adapter,) if self._adapter is not None else ()
        configs = [self.adapter(name).config for name in names if name in self.adapters]
        return any(config.original_ln_before or config.residual_before_ln == "post_add" for config in configs)

    def set_state(self, state: ActiveState) -> None:
        """Run what `state` activates from now on. What it means here is worked out once, not per forward: the active
        adapter or fusion if this site has it, and as a bool tensor and as indices (so a forward needs no device
        sync) the fused adapters a mask keeps. A routed call sets a state before and after each forward, so the
        values go into __dict__ at once (nn.Module.__setattr__ checks each plain value against its registries)."""
        adapter = state.adapter if state.adapter is not None and state.adapter in self.adapters else None
        fusion = state.fusion if state.fusion is not None and state.fusion in self.fusions else None
        mask = state.fusion_masks.get(fusion) if fusion is not None else None
        kept = tuple(i for i, name in enumerate(state.fused) if name in mask) if mask is not None else None
        param = next(self.fusions[fusion].parameters(), None) if fusion is not None else None
        mask_key = (fusion, state.fused, kept, param.device if param is not None else None)
        keep = self.__dict__.get("_keep")
        if kept is None:
            keep = None
        elif mask_key != self.__dict__.get("_mask_key"):
            keep = torch.tensor([i in kept for i in range(len(state.fused))], dtype=torch.bool, device=mask_key[-1])
        self.__dict__.update(state=state, _adapter=adapter, _fusion=fusion, _keep=keep, _kept=kept, _mask_key=mask_key)
        skipped = self.layer_index in state.skip_layers
        # Per-example routing (injection/routing.py): what this call's rows chose, worked out for this site.
        routing: SitePlan | None = state.routing.plan(self) if state.routing is not None else None
        routed = routing is not None and routing.active
        # A composition block (blocks.py) with a piece here; BatchSplit/Parallel only reach a site through routing.
        block = state.block if state.block is not None and held_at(self, state.block) else None
        active = not skipped and (adapter is not None or fusion is not None or routed or block is not None)
        self.__dict__.update(_routing=routing, _block=block, _active=active)
        self.__dict__.update(_needs_residual=self._residual_needed(state), _lane_key=self._lane_key_for(state))
        self._listen_while_active()

    def _lane_key_for(self, state: ActiveState) -> str | None:
        """What names this state's lane (injection/lanes.py), or None where no lane can run: lanes are for PRE_NORM
        sites with one adapter or one fused set active, computed by the fast implementation."""
        if (
            not self._active
            or self.spec.kind is not SiteKind.PRE_NORM
            or not _plain(state)
            or state.fusion_implementation != "fast"
        ):
            return None
        if self._fusion is not None:
            return f"{self._fusion}:{self._kept}"
        return self._adapter

    # ---- what the site offers ------------------------------------------------------------------------
    @property
    def key(self) -> str:
        """This site's name in piece tensors, `layer.<i>.<position>` (architectures.site_key)."""
        return site_key(self.layer_index, self.position)

    def adapter(self, name: str) -> BottleneckAdapter:
        """Adapter `name` at this site. The cast is only for mypy, to which a ModuleDict holds plain nn.Modules:
        every adapter here was made by `build_adapter`."""
        return cast(BottleneckAdapter, self.adapters[name])

    def fusion(self, name: str) -> FusionLayer:
        """Attention fusion `name` at this site. The cast is only for mypy, as in `adapter`: every fusion here is a
        FusionLayer (placement.py), but for a ScaLearnLayer (kind='scalearn'), which `adapt_with` runs apart."""
        return cast(FusionLayer, self.fusions[name])

    @property
    def pretrained_layer_norm(self) -> nn.Module | None:
        if self.spec.kind is SiteKind.POST_LN_OUTPUT:
            return getattr(self.base_layer, self.spec.norm)
        return self.__dict__["_parent_layer_norm"]

    def check_supports(self, config: AdapterConfig, name: str) -> None:
        """Refuse, before any weight is created, placements this kind of site cannot express."""
        if (
            self.spec.kind is SiteKind.PRE_NORM
            and self.spec.residual_input is not None
            and not config.original_ln_after
        ):
            raise ConfigError(
                f"adapter {name!r}: original_ln_after=False is impossible at {self.spec.path!r} of this "
                "architecture, whose pre-norm block adds the residual stream after the sub-layer itself; keep "
                "original_ln_after=True"
            )
        if self.spec.kind is SiteKind.PRE_RESIDUAL:
            if not config.original_ln_after:
                raise ConfigError(
                    f"adapter {name!r}: original_ln_after=False is impossible at {self.spec.path!r} of this "
                    "architecture, whose block applies its LayerNorm after the sub-layer itself; keep "
                    "original_ln_after=True"
                )
            if config.train_layer_norm:
                raise ConfigError(
                    f"adapter {name!r}: train_layer_norm=True is not supported at {self.spec.path!r} of this "
                    "architecture (the block applies the shared LayerNorm itself); pass train_layer_norm=False (CLI: "
                    "train-adapter --no-train-layer-norm)"
                )

    def build_adapter(self, config: AdapterConfig, hidden_size: int) -> BottleneckAdapter:
        """A new adapter for this site, on the base layer's device and dtype; not attached yet, so a caller
        can fill and check it before it replaces anything."""
        adapter = BottleneckAdapter(
            hidden_size,
            config.bottleneck_size(hidden_size, self.layer_index),
            config,
            pretrained_layer_norm=self.pretrained_layer_norm if self.spec.kind is SiteKind.POST_LN_OUTPUT else None,
        )
        return self.match_base(adapter)

    def match_base(self, module: ModuleT) -> ModuleT:
        reference = next(self.base_layer.parameters(), None)
        if reference is not None:
            module.to(device=reference.device, dtype=reference.dtype)
        return module.train(self.training)

    def unwrap(self) -> nn.Module:
        self.__dict__.update(
            _residual_norm=None, _residual_added=None, _rows_module=None, _summand_module=None, _repeats_module=None
        )
        self._listen_while_active()
        return self.base_layer

    @property
    def is_active(self) -> bool:
        """Whether this site runs an adapter or a fusion (else it is exactly `base_layer`); worked out by
        `set_state`."""
        return self._active

    # ---- forward -------------------------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not self._active:
            return self.base_layer(*args, **kwargs)
        if not self._counts_applications:
            return self._adapted_forward(args, kwargs)
        try:
            return self._adapted_forward(args, kwargs)
        finally:
            self.__dict__["_application"] += 1

    def _adapted_forward(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """forward of an active site: the base layer's output with what the state activates here."""
        if self._post_ln_output:
            hidden_states = args[0] if args else kwargs["hidden_states"]
            input_tensor = args[1] if len(args) > 1 else kwargs["input_tensor"]
            dense = getattr(self.base_layer, self.spec.dense)
            dropout = getattr(self.base_layer, self.spec.dropout)
            return self._adapt_any(dropout(dense(hidden_states)), input_tensor, apply_final_ln=True)
        output = self.base_layer(*args, **kwargs)
        hidden = output[0] if isinstance(output, tuple) else output
        residual_input = None
        if self._residual_is_input:
            residual_input = _first_input(args, kwargs)
        elif self.spec.residual_input is not None and self._needs_residual:
            residual_input, added = self._residual, self._added
            self.__dict__.update(_residual=None, _added=None)
            if self.spec.residual_adds is not None and residual_input is not None:
                if added is None:
                    raise ConfigError(
                        f"the adapter site {self.spec.path!r} of layer {self.layer_index} ran before "
                        f"{self.spec.residual_adds!r}, whose output its residual stream adds; call the whole model (or "
                        "the whole layer), not the sub-layer alone"
                    )
                residual_input = residual_input + added
            if residual_input is None:
                raise ConfigError(
                    f"the adapter site {self.spec.path!r} of layer {self.layer_index} ran without its block: it "
                    f"takes the residual stream from {self.spec.residual_input!r}, which did not run before it; call "
                    "the whole model (or the whole layer), not the sub-layer alone"
                )
        summand = None
        if self.spec.output_adds is not None:  # the block sums this output with another's: adapt the sum
            summand = self._summand
            self.__dict__["_summand"] = None
            if summand is None:
                raise ConfigError(
                    f"the adapter site {self.spec.path!r} of layer {self.layer_index} ran without "
                    f"{self.spec.output_adds!r}, whose output its block adds to this one's; call the whole model (or "
                    "the whole layer), not the sub-layer alone"
                )
            hidden = hidden + summand
        rows = self._rows if hidden.dim() == 2 else None
        if rows is not None:  # the batch flattened by the block (rows_from): adapted as [B, T, d], handed back flat
            hidden = hidden.reshape(*rows, hidden.shape[-1])
            residual_input = residual_input.reshape(hidden.shape) if residual_input is not None else None
        scale = self._output_scale
        if scale is not None:  # the stream's share of the output, which the adapter sees as in a block without it
            hidden = hidden * scale
        lane = self._lane(hidden) if self._lane_key is not None else None
        if lane is not None:
            adapted = lane(hidden, residual_input)
        else:
            adapted = self._adapt_any(hidden, residual_input, apply_final_ln=False)
        if scale is not None:
            adapted = adapted / scale
        if rows is not None:
            adapted = adapted.reshape(-1, adapted.shape[-1])
        if summand is not None:  # the block adds the other sub-layer's output back
            adapted = adapted - summand
        return (adapted, *output[1:]) if isinstance(output, tuple) else adapted

    def _lane(self, hidden: torch.Tensor) -> Lane | None:
        """This state's lane, inside `inference_cache()` only, and only while nothing needs the general path
        (recording fusion attentions, autocast). A decode step asks once per token and site: the lane the site was
        handed in this block is its own attribute, which the runtime clears when the block ends or anything that
        voids it happens (`forget_lane`), so a compiled step reads nothing the sites share (each shared object read
        through every site costs a Python aliasing guard per site and step)."""
        if torch.is_autocast_enabled(hidden.device.type):
            return None
        known = self._known_lane
        if known is not None and known[0] == self._lane_key:
            return known[1]
        runtime = self._runtime
        if runtime.block is None or runtime.is_recording:
            return None
        assert self._lane_key is not None
        lane = runtime.prepared("lane", self.key, self._lane_key, self._make_lane, self._lane_weights)
        if known is None:  # a site that held one (another state's) is on the runtime's list already
            runtime.holds_lane(self)
        self.__dict__["_known_lane"] = (self._lane_key, lane)
        return lane

    def forget_lane(self) -> None:
        """Drop the lane of the running block (injection/runtime.py: the block ended, a recording began or ended,
        the pieces changed)."""
        self.__dict__["_known_lane"] = None

    def _lane_pieces(self) -> tuple[list[BottleneckAdapter], FusionLayer | None]:
        if self._fusion is None:
            return [self.adapter(self._adapter_names()[0])], None
        names = self.state.fused
        kept = self._kept_indices(len(names))
        chosen = names if kept is None else [names[i] for i in kept]
        return [self.adapter(name) for name in chosen], self.fusion(self._fusion)

    def _make_lane(self) -> Lane | None:
        adapters, fusion = self._lane_pieces()
        norm = self.pretrained_layer_norm
        return build_lane(adapters, fusion, norm if norm is not None else _unchanged)

    def _lane_weights(self) -> list[torch.Tensor]:
        adapters, fusion = self._lane_pieces()
        norm = self.pretrained_layer_norm
        modules = [*adapters, *([fusion] if fusion is not None else []), *([norm] if norm is not None else [])]
        return parameters_of(modules)

    def _adapt_any(self, h: torch.Tensor, r: torch.Tensor | None, apply_final_ln: bool) -> torch.Tensor:
        if self._routing is not None:
            return adapt_routed(self, self._routing, h, r, apply_final_ln)
        if self._block is not None:
            if isinstance(self._block, LAYOUT_BLOCKS):
                raise ConfigError(
                    f"{type(self._block).__name__} is active, which lays out the batch in the model's own forward; "
                    "call the model (model(**batch), or model.generate(...) for a BatchSplit), not the wrapped "
                    "model, or activate a Stack, Average or one adapter for it"
                )
            return run_node(self, self._block, h, r, apply_final_ln)
        if self.state.parallel_routes is None:
            return self._adapt(h, r, apply_final_ln)
        return self._adapt_parallel(h, r, apply_final_ln)

    def _adapt_parallel(self, h: torch.Tensor, r: torch.Tensor | None, apply_final_ln: bool) -> torch.Tensor:
        """Routes stacked along the batch, [(N + 1) * B, ...] (repeated here from [B, ...] at the split site): slice n
        runs adapter n alone (all N in one batched matmul), the last slice the active fusion exactly as `_adapt`."""
        names = self.state.parallel_routes
        assert names is not None
        if self.key == self.state.parallel_split_site:  # the encoder below ran once: one copy per route from here
            h = per_route(h, len(names) + 1)
            r = per_route(r, len(names) + 1) if r is not None else None
        h = h.unflatten(0, (len(names) + 1, -1))
        r = r.unflatten(0, (len(names) + 1, -1)) if r is not None else None
        fused = self._adapt(h[-1], r[-1] if r is not None else None, apply_final_ln)
        alone = self._adapt_each(names, h[:-1], r[:-1] if r is not None else None, apply_final_ln)
        return torch.cat([alone.flatten(0, 1), fused])

    def _adapt_each(
        self, names: Sequence[str], h: torch.Tensor, r: torch.Tensor | None, apply_final_ln: bool
    ) -> torch.Tensor:
        """`_adapt` with adapter n alone on h[n], r[n], for all n at once. Fused adapters share the placement
        options, so only the LayerNorm differs between slices: each adapter's own copy (Houlsby) or the site's."""
        adapters = [self.adapter(name) for name in names]
        config = adapters[0].config
        if self.spec.kind is SiteKind.PRE_NORM:  # no LayerNorm around the sub-layer: nothing to end with
            return run_each(adapters, *self._placed_pre_norm(h, r, config))
        r, site_norm = self._around(r, self.pretrained_layer_norm)
        norms = [adapter.layer_norm if adapter.layer_norm is not None else site_norm for adapter in adapters]
        x, residual = self._placed(h, r, config, lambda u: layer_norm_each(norms, u))
        out = run_each(adapters, x, residual)
        if self._ends_with_layer_norm(config, apply_final_ln):
            out = layer_norm_each(norms, out + r)
        return out

    def _around(self, r: torch.Tensor | None, layer_norm: nn.Module | None) -> tuple[torch.Tensor, nn.Module]:
        """The residual input r and the LayerNorm around the sub-layer, which every kind of site but PRE_NORM has
        (`forward` passes r, `inject_sites` or the base layer gives the LayerNorm)."""
        assert r is not None and layer_norm is not None, f"{self.key}: no residual input or LayerNorm around it"
        return r, layer_norm

    def _placed(
        self, h: torch.Tensor, r: torch.Tensor, config: AdapterConfig, normalise: Callable[[torch.Tensor], torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The adapter's input x and its residual, as the module docstring's placement rules say, at a site with a
        LayerNorm around its sub-layer (at a PRE_NORM site both are h); `normalise` is that LayerNorm (or each
        slice's own, for _adapt_each)."""
        x = normalise(h + r) if config.original_ln_before else h
        if config.residual_before_ln is True:
            return x, h
        return x, (h + r if config.residual_before_ln == "post_add" else x)

    def _placed_pre_norm(
        self, h: torch.Tensor, r: torch.Tensor | None, config: AdapterConfig
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`_placed` at a PRE_NORM site. original_ln_before normalises h + r with the block's post-norm of this
        sub-layer where it has one (Gemma2/3: `layer_norm` of the spec), else adds r alone (as AdapterHub does where
        it has no LayerNorm to pass); where r is not visible (ModernBERT), both are h."""
        if r is None:
            return h, h
        norm = self.pretrained_layer_norm
        return self._placed(h, r, config, norm if norm is not None else _unchanged)

    def _ends_with_layer_norm(self, config: AdapterConfig, apply_final_ln: bool) -> bool:
        return apply_final_ln and config.original_ln_after and self.spec.kind is not SiteKind.PRE_NORM

    def _adapt(self, h: torch.Tensor, r: torch.Tensor | None, apply_final_ln: bool) -> torch.Tensor:
        fusion_name = self._fusion
        names = self.state.fused if fusion_name is not None else self._adapter_names()
        return self.adapt_with(h, r, apply_final_ln, fusion_name, names, self._keep, self._kept_indices(len(names)))

    def adapt_with(
        self,
        h: torch.Tensor,
        r: torch.Tensor | None,
        apply_final_ln: bool,
        fusion_name: str | None,
        names: Sequence[str],
        keep: torch.Tensor | None,
        kept: tuple[int, ...] | None,
    ) -> torch.Tensor:
        """The site's output with adapter names[0] alone (fusion_name None) or fusion `fusion_name` over `names`,
        `keep` its mask (a bool per adapter) and `kept` the adapters the fast path runs (None: all): what `_adapt`
        runs for the active piece, and per-example routing (injection/routing.py) for one piece's rows."""
        adapters = [self.adapter(name) for name in names]
        config = adapters[0].config
        layer_norm = self.pretrained_layer_norm
        if fusion_name is None and adapters[0].layer_norm is not None:
            layer_norm = adapters[0].layer_norm

        if self.spec.kind is SiteKind.PRE_NORM:
            x, residual = self._placed_pre_norm(h, r, config)
        else:
            r, layer_norm = self._around(r, layer_norm)
            x, residual = self._placed(h, r, config, layer_norm)

        if fusion_name is None:
            out = adapters[0](x, residual)
        elif isinstance(scalearn := self.fusions[fusion_name], ScaLearnLayer):  # fusion/scalearn.py: learned scales
            out, weights = SCALEARN_IMPLEMENTATIONS[self.state.fusion_implementation](
                scalearn, adapters, x, residual, keep, kept
            )
            if self._runtime.is_recording:
                self._runtime.record(self.layer_index, self.position, weights, self._application)
        else:
            fusion = self.fusion(fusion_name)
            query = h if fusion.config.query_before_ln else x
            if fusion.config.query_norm:  # a new tensor: fuse_fast then projects it apart from the adapters' input
                query = normalised_query(query)
            implementation = FUSION_IMPLEMENTATIONS[self.state.fusion_implementation]
            # a dict literal, not FuseOptions(...): torch.compile cannot trace a call of a TypedDict with optional keys
            options: FuseOptions = {"temperature": fusion.config.temperature_at(self.state.fusion_step), "keep": keep}
            if kept is not None:
                # The fast path runs only the kept adapters: a masked-out adapter's softmax weight is exactly 0,
                # so the fusion over the kept ones with the same Q/K/V is the masked fusion (fusion/subset.py).
                adapters, options["keep"] = [adapters[i] for i in kept], None
            if self.state.fusion_implementation == "fast" and self._runtime.is_caching:
                cache_key = fusion_name if kept is None else f"{fusion_name}:{','.join(map(str, kept))}"
                if torch.is_autocast_enabled(x.device.type):  # a fold made under autocast is of its precision
                    cache_key = f"{cache_key}@{torch.get_autocast_dtype(x.device.type)}"
                fold = partial(fold_fusion, fusion, adapters)
                modules = (fusion, *adapters)
                sources = partial(parameters_of, modules)  # read only when the block has no fold for this site yet
                options["folded"] = self._runtime.folded(self.key, cache_key, fold, sources)
            out, probs = implementation.fuse(fusion, adapters, x, query, residual, **options)
            if self._runtime.is_recording:
                weights = probs if kept is None else _scatter(probs, kept, len(names))
                self._runtime.record(self.layer_index, self.position, weights, self._application)

        if self._ends_with_layer_norm(config, apply_final_ln):
            r, layer_norm = self._around(r, layer_norm)
            if fusion_name is not None and any(adapter.layer_norm is not None for adapter in adapters):
                # Each adapter ends with its own trained LayerNorm copy when alone: mix them by attention.
                norms = [adapter.layer_norm if adapter.layer_norm is not None else layer_norm for adapter in adapters]
                out = implementation.mix_layer_norms(norms, probs, out + r)
            else:
                out = layer_norm(out + r)
        return out

    def _adapter_names(self) -> tuple[str]:
        """The active adapter, as a one-name tuple, where no fusion runs (`is_active`: then an adapter does)."""
        assert self._adapter is not None
        return (self._adapter,)

    def _kept_indices(self, count: int) -> tuple[int, ...] | None:
        """The adapters the active fusion's mask keeps, when the fast path can run only those (None: run all)."""
        kept = self._kept if self.state.fusion_implementation == "fast" else None
        return None if kept is None or len(kept) == count else kept

    def extra_repr(self) -> str:
        return f"layer={self.layer_index}, position={self.position}, kind={self.spec.kind.value}"


def _plain(state: ActiveState) -> bool:
    """Whether `state` runs at most one adapter or one fusion on every row: no routing, parallel routes or block."""
    return state.routing is None and state.parallel_routes is None and getattr(state, "block", None) is None


def _unchanged(value: torch.Tensor) -> torch.Tensor:
    return value


def per_route(value: torch.Tensor, copies: int) -> torch.Tensor:
    """`copies` copies of a [B, ...] tensor stacked along the batch, [copies * B, ...]: how parallel routes lay out a
    batch (composition.forward_parallel)."""
    return value.repeat(copies, *(1,) * (value.dim() - 1))


def _scatter(probs: torch.Tensor, kept: tuple[int, ...], count: int) -> torch.Tensor:
    """Softmax weights over the kept adapters, placed among all `count` adapters (0 for the masked ones)."""
    full = probs.new_zeros(*probs.shape[:-1], count)
    full[..., list(kept)] = probs
    return full
