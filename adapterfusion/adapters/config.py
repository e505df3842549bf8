"""AdapterConfig: the knobs of one bottleneck adapter, covering the placement search space of the
AdapterFusion appendix (Fig. 5 left), with the two presets the papers settle on."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adapterfusion._validation import (
    FLOAT32_MAX,
    check_bool,
    check_choice,
    check_layers,
    check_number,
    check_positive,
    plain_fields,
    preset_by_name,
    reject_unknown_fields,
    reject_unknown_keys,
    short_repr,
    versioned_fields,
)
from adapterfusion.adapters.activations import ACTIVATION_NAMES
from adapterfusion.errors import ConfigError

POSITIONS = ("attention", "cross", "output")
"""'attention': after the multi-head attention sub-layer ("bottom"); 'output': after the feed-forward block ("top");
'cross': after an encoder-decoder's cross-attention, in its decoder layers only (AdapterHub's cross_adapter)."""

INITS = ("houlsby", "bert", "zero_up")
CONFIG_FORMAT_VERSION = 1

ReductionFactor = float | Mapping[str, float]
# A bottleneck at most this many times the hidden size (reduction_factor >= 1/64): wider adapters than any paper uses.
MAX_WIDENING = 64


@reject_unknown_fields
@dataclass(frozen=True)
class AdapterConfig:
    """One bottleneck adapter d -> m -> d with an internal skip connection, m = d // reduction_factor.

    Site options (applied where the adapter sits, with h the sub-layer output after its projection, r the
    sub-layer's residual input and LN the pretrained LayerNorm of that sub-layer):
      - original_ln_before: feed the adapter LN(h + r) instead of h.
      - residual_before_ln: the adapter's skip connection carries h (True), h + r ("post_add"), or its own input
        (False).
      - original_ln_after: finish with LN(adapter_output + r), as the unadapted sub-layer would.
    ln_before / ln_after add newly trained LayerNorms inside the adapter; skip_before_ln_after says whether the
    skip connection is added before ln_after (None: before, unless residual_before_ln is False). train_layer_norm gives
    the adapter its own trainable copy of the site's pretrained LayerNorm (Houlsby §2.1 trains layer norms per task),
    so training one task never changes the encoder shared by the others. init: "houlsby" (weights of std init_std,
    near the identity where the adapter's input is of LayerNorm scale, as in an encoder; not on a decoder whose
    residual stream holds very large values, such as SmolLM2's: README, Decoders), "bert" (std 0.02, AdapterHub's
    default) or "zero_up" (a zero up-projection: exactly the identity until trained).
    """

    reduction_factor: ReductionFactor = 16.0
    non_linearity: str = "relu"
    positions: tuple[str, ...] = ("output",)
    original_ln_before: bool = True
    original_ln_after: bool = True
    residual_before_ln: bool | str = True
    ln_before: bool = False
    ln_after: bool = False
    skip_before_ln_after: bool | None = None
    scaling: float = 1.0
    init: str = "houlsby"
    init_std: float = 1e-2
    train_layer_norm: bool = False
    leave_out: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        plain_fields(self)  # np.float32(0.5) would pass every check and then fail json at save time
        rf = self.reduction_factor
        if isinstance(rf, Mapping):
            if "default" not in rf:
                raise ConfigError(
                    f"per-layer reduction_factor {short_repr(dict(rf))} needs a 'default' entry, e.g. "
                    f"{{'default': 16, '11': 8}}"
                )
            normalised = {}
            for key, value in rf.items():
                key = str(key) if not isinstance(key, bool) else repr(key)
                if key != "default" and not (key.isascii() and key.isdigit() and key == str(int(key))):
                    raise ConfigError(
                        f"reduction_factor key {short_repr(key)} must be 'default' or a layer index written "
                        "like '3' (ASCII digits, no leading zero: the layer it names is looked up by that spelling)"
                    )
                if key in normalised:
                    raise ConfigError(f"reduction_factor names layer {short_repr(key)} twice; give each layer once")
                check_positive(value, f"reduction_factor[{short_repr(key)}]")
                normalised[key] = float(value)
            object.__setattr__(self, "reduction_factor", normalised)
        else:
            check_positive(rf, "reduction_factor")
            object.__setattr__(self, "reduction_factor", float(rf))
        check_choice(self.non_linearity, ACTIVATION_NAMES, "non_linearity")
        if not isinstance(self.positions, (str, list, tuple)):
            raise ConfigError(
                f"positions={short_repr(self.positions)} has type {type(self.positions).__name__}; expected a "
                "list such as ('output',) or ('attention', 'output')"
            )
        positions = tuple(self.positions) if not isinstance(self.positions, str) else (self.positions,)
        if not positions:
            raise ConfigError("positions is empty; use ('output',), ('attention',) or ('attention', 'output')")
        for position in positions:
            check_choice(position, POSITIONS, "positions")
        if len(set(positions)) != len(positions):
            raise ConfigError(f"positions {short_repr(positions)} lists a position twice")
        object.__setattr__(self, "positions", tuple(p for p in POSITIONS if p in positions))
        if not (isinstance(self.residual_before_ln, bool) or self.residual_before_ln == "post_add"):
            raise ConfigError(
                f"residual_before_ln={short_repr(self.residual_before_ln)}; choose True, False or 'post_add'"
            )
        for flag in ("original_ln_before", "original_ln_after", "ln_before", "ln_after", "train_layer_norm"):
            check_bool(getattr(self, flag), flag)
        if self.skip_before_ln_after is not None:
            check_bool(self.skip_before_ln_after, "skip_before_ln_after")
        # stored as the float it is: a Python int past 2**63 (2**70) was an OverflowError in every product with it
        scaling = check_number(self.scaling, "scaling")
        if abs(scaling) > FLOAT32_MAX:  # inf in a float32 model: every output inf or NaN (inf × 0)
            raise ConfigError(
                f"scaling={short_repr(self.scaling)} is beyond float32's range (about ±3.4e38), so the adapter's "
                "output would be inf or NaN; adapters scale their output by about 1 (AdapterHub's default 1.0)"
            )
        object.__setattr__(self, "scaling", scaling)
        check_choice(self.init, INITS, "init")
        check_positive(self.init_std, "init_std")
        # Whether they leave any layer for the adapter depends on the encoder: injection/placement.py checks that.
        object.__setattr__(self, "leave_out", check_layers(self.leave_out, "leave_out"))

    # ---- presets -------------------------------------------------------------------------------------
    @classmethod
    def pfeiffer(cls, reduction_factor: ReductionFactor = 16.0, **overrides: Any) -> AdapterConfig:
        """ST-A (AdapterFusion Fig. 5 right): one adapter after the feed-forward block, pretrained LayerNorm
        before and after, no new LayerNorm."""
        _check_overrides(cls, overrides, "pfeiffer")
        return cls(reduction_factor=reduction_factor, **overrides)

    @classmethod
    def houlsby(cls, reduction_factor: ReductionFactor = 16.0, **overrides: Any) -> AdapterConfig:
        """ST-A Houlsby: adapters after attention and after the feed-forward block, on the sub-layer output
        before the residual add; the layer norms are trained per task."""
        settings: dict[str, Any] = dict(  # Any: the overrides merged in are any of the fields
            reduction_factor=reduction_factor,
            non_linearity="swish",
            positions=("attention", "output"),
            original_ln_before=False,
            original_ln_after=True,
            residual_before_ln=True,
            train_layer_norm=True,
        )
        _check_overrides(cls, overrides, "houlsby")
        settings.update(overrides)
        return cls(**settings)

    @classmethod
    def from_name(cls, name: str, **overrides: Any) -> AdapterConfig:
        presets = {
            "pfeiffer": cls.pfeiffer,
            "seq_bn": cls.pfeiffer,
            "houlsby": cls.houlsby,
            "double_seq_bn": cls.houlsby,
        }
        return preset_by_name(presets, name, "adapter", **overrides)

    # ---- derived values ------------------------------------------------------------------------------
    def reduction_factor_for(self, layer: int) -> float:
        rf = self.reduction_factor
        if isinstance(rf, Mapping):
            return rf.get(str(layer), rf["default"])
        return rf

    def bottleneck_size(self, hidden_size: int, layer: int) -> int:
        size = int(hidden_size // self.reduction_factor_for(layer))
        if size < 1:
            raise ConfigError(
                f"reduction_factor {self.reduction_factor_for(layer)} leaves no bottleneck for hidden size "
                f"{hidden_size} (layer {layer}); use a reduction factor of at most {hidden_size}"
            )
        if size > MAX_WIDENING * hidden_size:  # 1e-9 asks for terabytes: refused here, not by torch's allocator
            raise ConfigError(
                f"reduction_factor {self.reduction_factor_for(layer)} makes a bottleneck of {size} units for hidden "
                f"size {hidden_size} (layer {layer}), more than {MAX_WIDENING} times the hidden size; use a reduction "
                f"factor of at least {1 / MAX_WIDENING:g} (16 is the paper's default)"
            )
        return size

    @property
    def skip_first(self) -> bool:
        """Whether the adapter adds its skip connection before its new LayerNorm (ln_after)."""
        if self.skip_before_ln_after is not None:
            return self.skip_before_ln_after
        return self.residual_before_ln is not False

    def site_options(self) -> tuple:
        """What every adapter fused at one site must agree on: they share the site's pre/post processing."""
        return (self.positions, self.original_ln_before, self.original_ln_after, self.residual_before_ln)

    # ---- serialisation -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["positions"] = list(self.positions)
        data["leave_out"] = list(self.leave_out)
        data["format_version"] = CONFIG_FORMAT_VERSION
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AdapterConfig:
        data = versioned_fields(data, cls, CONFIG_FORMAT_VERSION, "adapter config")
        for key in ("positions", "leave_out"):
            if key in data:
                if not isinstance(data[key], (list, tuple)):
                    raise ConfigError(f"adapter config {key}={short_repr(data[key])} must be a list")
                data[key] = tuple(data[key])
        return cls(**data)


def _check_overrides(cls: type[AdapterConfig], overrides: Mapping[str, Any], preset: str) -> None:
    """A misspelt preset option refused by name as a dict config's is (the dataclass would raise a bare TypeError)."""
    reject_unknown_keys(dict(overrides), [f.name for f in dataclasses.fields(cls)], f"AdapterConfig.{preset}(...)")


def resolve_adapter_config(config: AdapterConfig | str | Mapping[str, Any] | None) -> AdapterConfig:
    """Accept a config object, a preset name or a dict, as users write all three."""
    if config is None:
        return AdapterConfig.pfeiffer()
    if isinstance(config, AdapterConfig):
        return config
    if isinstance(config, str):
        return AdapterConfig.from_name(config)
    if isinstance(config, Mapping):
        return AdapterConfig.from_dict(config)
    raise ConfigError(f"adapter config must be an AdapterConfig, a preset name or a dict, got {type(config).__name__}")


def bottleneck_problem(reduction_factor: ReductionFactor, hidden_size: int) -> str | None:
    """Why `reduction_factor` leaves no bottleneck for an encoder of `hidden_size` (or widens it past reason), or
    None: what training and experiment files check from an encoder's config before any model or data loads."""
    try:
        AdapterConfig.pfeiffer(reduction_factor=reduction_factor).bottleneck_size(hidden_size, 0)
    except ConfigError as err:
        return str(err)
    return None
