"""Where an adapter goes in a wrapped encoder: its config checked against the sites, and its modules built there.

The modules are built on the side and not attached, so a caller (AdaptedModel) can fill and check them before
anything in the model is replaced.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from adapterfusion._validation import check_piece_name
from adapterfusion.adapters.config import AdapterConfig
from adapterfusion.errors import ConfigError
from adapterfusion.injection.site import AdapterSite


def adapter_modules(
    sites: Sequence[AdapterSite], name: str, config: AdapterConfig, num_layers: int, hidden_size: int
) -> dict[AdapterSite, nn.Module]:
    """A new adapter `name` for each site `config` places it at (its positions, less its leave_out layers)."""
    check_piece_name(name, "adapter")
    _check_layers(config, name, num_layers)
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
