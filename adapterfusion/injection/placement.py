"""Where an adapter or a fusion goes in a wrapped encoder: an adapter's config checked against the sites and its
modules built there; the fused adapters checked to share their sites and placement, and one FusionLayer built at
each site they share.

The modules are built on the side and not attached, so a caller (AdaptedModel) can fill and check them before
anything in the model is replaced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torch import nn

from adapterfusion._validation import check_piece_name, require_loaded, short_repr
from adapterfusion.adapters.config import AdapterConfig
from adapterfusion.errors import ConfigError
from adapterfusion.fusion.config import FusionConfig
from adapterfusion.fusion.layer import FusionLayer
from adapterfusion.fusion.scalearn import ScaLearnLayer
from adapterfusion.injection.site import AdapterSite


def adapter_modules(
    sites: Sequence[AdapterSite], name: str, config: AdapterConfig, num_layers: int, hidden_size: int
) -> dict[AdapterSite, nn.Module]:
    """A new adapter `name` for each site `config` places it at (its positions, less its leave_out layers)."""
    check_piece_name(name, "adapter")
    _check_layers(config, name, num_layers)
    if "cross" in config.positions and not any(site.position == "cross" for site in sites):
        raise ConfigError(
            f"adapter {name!r}: positions={list(config.positions)} includes 'cross', the site after cross-attention, "
            "which only an encoder-decoder's decoder layers have (T5, BART); this model has no cross-attention, so "
            "leave 'cross' out"
        )
    targets = [s for s in sites if s.position in config.positions and s.layer_index not in config.leave_out]
    for site in targets:
        site.check_supports(config, name)
    return {site: site.build_adapter(config, hidden_size) for site in targets}


def _check_layers(config: AdapterConfig, name: str, num_layers: int) -> None:
    out_of_range = [layer for layer in config.leave_out if layer >= num_layers]
    if not out_of_range and len(config.leave_out) == num_layers:
        raise ConfigError(
            f"adapter {name!r}: leave_out={list(config.leave_out)} covers every layer of this encoder "
            f"(num_layers={num_layers}), which leaves the adapter no site and no parameters; leave out fewer layers"
        )
    if isinstance(config.reduction_factor, dict):
        out_of_range += [int(k) for k in config.reduction_factor if k != "default" and int(k) >= num_layers]
    if out_of_range:
        raise ConfigError(
            f"adapter {name!r} names layer(s) {sorted(set(out_of_range))} but this encoder has layers "
            f"0..{num_layers - 1}"
        )


def fused_adapters(name: str, adapters: object) -> tuple[str, ...]:
    """The adapters fusion `name` fuses, given as a list of names (or one name): at least one, none twice."""
    if isinstance(adapters, str):
        adapters = (adapters,)
    if not isinstance(adapters, (list, tuple)) or not all(isinstance(a, str) for a in adapters):
        raise ConfigError(
            f"fusion {name!r}: adapters={short_repr(adapters)} has type {type(adapters).__name__}; expected a list of "
            "adapter names, e.g. ['a', 'b']"
        )
    if not adapters:
        raise ConfigError(f"fusion {name!r} needs at least one adapter")
    if len(set(adapters)) != len(adapters):
        raise ConfigError(f"fusion {name!r} lists an adapter twice: {list(adapters)}")
    return tuple(adapters)


def fusion_modules(
    sites: Sequence[AdapterSite],
    name: str,
    adapters: tuple[str, ...],
    config: FusionConfig,
    loaded: Mapping[str, AdapterConfig],
    hidden_size: int,
) -> dict[AdapterSite, nn.Module]:
    """A new fusion layer of fusion `name` (a FusionLayer, or a ScaLearnLayer for kind='scalearn') for each site that
    holds the fused `adapters` (of the `loaded` ones)."""
    check_piece_name(name, "fusion")
    for adapter in fused_adapters(name, adapters):
        require_loaded("adapter", adapter, loaded)
    placements = {adapter: loaded[adapter].site_options() for adapter in adapters}
    if len(set(placements.values())) > 1:
        detail = "; ".join(
            f"{a}: positions={p[0]}, original_ln_before={p[1]}, original_ln_after={p[2]}, residual_before_ln={p[3]}"
            for a, p in placements.items()
        )
        raise ConfigError(
            f"fusion {name!r} mixes adapters with different placements ({detail}); fused adapters share "
            "one site, so give them the same positions and LayerNorm/residual options"
        )
    modules: dict[AdapterSite, nn.Module] = {}
    shared: nn.Parameter | None = None  # share_layers: the first site's scales, used by every other site's layer
    for site in sites:
        present = [a for a in adapters if a in site.adapters]
        if present and len(present) != len(adapters):
            missing = sorted(set(adapters) - set(present))
            raise ConfigError(
                f"fusion {name!r}: layer {site.layer_index} ({site.position}) has no adapter {missing}, "
                "but has the others; fuse adapters with the same leave_out layers"
            )
        copies = [a for a in present if site.adapters[a].layer_norm is not None]
        if copies and config.is_scalearn:
            raise ConfigError(
                f"fusion {name!r}: ScaLearn cannot fuse adapters {copies}, which end with their own LayerNorm copy "
                "(train_layer_norm=True, e.g. Houlsby): its scales do not sum to one, so there is no mix of those "
                "copies to end with; fuse adapters with train_layer_norm=False, or use kind='attention'"
            )
        if copies and loaded[copies[0]].original_ln_before:
            raise ConfigError(
                f"fusion {name!r}: adapters {copies} apply their own LayerNorm copy (train_layer_norm=True) "
                "before the adapter (original_ln_before=True), so each would see a different input and the "
                "fusion would have no single query; fuse adapters with train_layer_norm=False or "
                "original_ln_before=False (as the Houlsby preset)"
            )
        if present:
            if config.is_scalearn:
                scalearn = ScaLearnLayer(hidden_size, len(adapters), config, shared)
                shared = scalearn.scales if config.share_layers else None
                layer: nn.Module = scalearn
            else:
                layer = FusionLayer(hidden_size, config)
            modules[site] = site.match_base(layer)
    return modules
