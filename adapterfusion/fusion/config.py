"""FusionConfig: the knobs of one fusion layer: AdapterFusion's attention (Pfeiffer et al. 2021, §3.2), the default
kind, or ScaLearn's learned scales (Frohmann et al. 2023; fusion/scalearn.py), kind='scalearn'."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapterfusion._validation import (
    check_bool,
    check_choice,
    check_int,
    check_number,
    plain_fields,
    preset_by_name,
    reject_unknown_fields,
    reject_unknown_keys,
    short_repr,
    versioned_fields,
)
from adapterfusion.errors import ConfigError

CONFIG_FORMAT_VERSION = 1
FUSION_KINDS = ("attention", "scalearn")
SCALE_SHAPES = ("vector", "scalar")
# The fields only one kind reads. to_dict writes a kind's own fields only, so an attention fusion's config (and every
# experiment spec hash made from it) is what it was before ScaLearn existed.
SCALE_LIMIT = 1e4
SCALEARN_FIELDS = ("scale_shape", "scale_init", "scale_init_std", "scale_dropout", "share_layers")
ATTENTION_FIELDS = (
    "query",
    "key",
    "value",
    "query_before_ln",
    "query_norm",
    "residual_before",
    "value_before_softmax",
    "value_init_noise",
    "regularization",
    "regularization_weight",
    "temperature",
    "temperature_start",
    "temperature_steps",
    "score_dropout",
)
# Options that act only through a switch: with the switch off they change nothing, so a value given for one is refused
# (temperature_steps=20 without temperature=True trained at T = 1, as if never given). A saved config keeps loading:
# from_dict puts such a no-op value back to its default (_without_unused).
UNUSED_WITHOUT = {
    "temperature": ("temperature_start", "temperature_steps"),
    "value": ("value_init_noise", "regularization_weight"),  # (value_before_softmax too, but AdapterHub's may say so)
    "regularization": ("regularization_weight",),
}


@reject_unknown_fields
@dataclass(frozen=True)
class FusionConfig:
    """Query Q, key K and value V per layer; V starts at identity plus noise of norm ~value_init_noise and is
    pulled back towards identity by `regularization_weight * ||V - I||^2` in the training loss.

    temperature: divide scores by T(step) = max(T0 * (1 - step / temperature_steps), 1), a pure function of
    the training step that the trainer sets with `model.set_fusion_step(step)`; T0 = temperature_start >= 1.
    An option that its switch leaves without effect (temperature_steps without temperature, value_init_noise
    without value, regularization_weight without value or regularization) is refused: UNUSED_WITHOUT. A saved
    fusion_config.json or a finished run's record that holds one still loads, with the option at its default.
    score_dropout: dropout on the attention scores before the softmax (AdapterHub applies the encoder's
    attention dropout there; the paper is silent, so it is off by default).
    query_norm: scale the query to unit root mean square before Q (an RMSNorm without weights; ours, not the
    paper's or AdapterHub's). At a pre-norm decoder site the query is h + r, the raw residual stream, whose scale
    grows through the layers and makes the scores saturate the softmax from the start (examples/results/README.md,
    decoder-smollm2); normalised, the query has the scale a post-LayerNorm encoder's has.

    kind='scalearn' (ScaLearn, fusion/scalearn.py) reads only the scale_* fields, and the attention fields only
    kind='attention': o = sum_n w_n * z_n + r with w_n learned per site, a vector of d numbers per adapter
    (scale_shape='vector', ScaLearn) or one number (scale_shape='scalar', ScaLearnUniform); each starts at
    scale_init / N plus normal noise of std scale_init_std, and scale_dropout drops single scales in training
    (the official code's defaults: 2 / N, 0.001 and 0.3). share_layers=True uses one set of scales at every site
    (ScaLearn++ and ScaLearnUniform++: N·d or N parameters in all).
    """

    query: bool = True
    key: bool = True
    value: bool = True
    query_before_ln: bool = False
    query_norm: bool = False
    residual_before: bool = False
    value_before_softmax: bool = True
    value_init_noise: float = 1e-6
    regularization: bool = True
    regularization_weight: float = 0.01
    temperature: bool = False
    temperature_start: float = 50.0
    temperature_steps: int = 1000
    score_dropout: float = 0.0
    kind: str = "attention"
    scale_shape: str = "vector"
    scale_init: float = 2.0
    scale_init_std: float = 1e-3
    scale_dropout: float = 0.3
    share_layers: bool = False

    def __post_init__(self) -> None:
        plain_fields(self)  # np.float32(2.0) would pass every check and then fail json at save time
        check_choice(self.kind, FUSION_KINDS, "fusion kind")
        check_choice(self.scale_shape, SCALE_SHAPES, "fusion scale_shape")
        # The scales multiply the adapters' outputs: beyond SCALE_LIMIT the sum overflows (scale_init=1e308: every
        # logit NaN) long before it means anything; the authors start at 2 with noise 0.001.
        bounds = f"a number between -{SCALE_LIMIT:g} and {SCALE_LIMIT:g}"
        check_number(self.scale_init, "scale_init", minimum=-SCALE_LIMIT, below=SCALE_LIMIT, expected=bounds)
        check_number(
            self.scale_init_std,
            "scale_init_std",
            minimum=0,
            below=SCALE_LIMIT,
            expected=f"a number in [0, {SCALE_LIMIT:g})",
        )
        check_number(self.scale_dropout, "scale_dropout", minimum=0, below=1, expected="a number in [0, 1)")
        check_bool(self.share_layers, "fusion share_layers")
        foreign = ATTENTION_FIELDS if self.kind == "scalearn" else SCALEARN_FIELDS
        changed = [name for name in foreign if getattr(self, name) != _DEFAULTS[name]]
        if changed:
            owner = "kind='attention' (AdapterFusion)" if self.kind == "scalearn" else "kind='scalearn'"
            raise ConfigError(
                f"fusion kind={short_repr(self.kind)} does not use {changed}: those options belong to {owner}; "
                "leave them out or choose that kind"
            )
        limit = f"[0, {SCALE_LIMIT:g})"
        fields = type(self).__dataclass_fields__
        for flag in (name for name in ATTENTION_FIELDS if isinstance(fields[name].default, bool)):
            check_bool(getattr(self, flag), f"fusion {flag}")
        # stored as the floats they are: a Python int past 2**63 was an OverflowError in a product with a tensor. Both
        # scale tensors (V's noise, the loss term), so past SCALE_LIMIT every logit was NaN or the loss inf.
        for name in ("value_init_noise", "regularization_weight"):
            value = check_number(
                getattr(self, name),
                name,
                minimum=0,
                below=SCALE_LIMIT,
                expected=f"a number in {limit} (past it the outputs or the loss overflow)",
            )
            object.__setattr__(self, name, value)
        # T(step) = max(T0 * (1 - step / steps), 1): a start below 1 is T = 1 at every step, no temperature at all
        check_number(self.temperature_start, "temperature_start", minimum=1, expected="a number >= 1 (T anneals to 1)")
        check_int(self.temperature_steps, "temperature_steps", minimum=1)
        check_number(self.score_dropout, "score_dropout", minimum=0, below=1, expected="a number in [0, 1)")
        _refuse_unused(self)

    @classmethod
    def dynamic(cls, **overrides: Any) -> FusionConfig:
        """The paper's AdapterFusion: learned Q, K and V, V regularised towards identity."""
        return cls._preset("dynamic", {}, overrides)

    @classmethod
    def static(cls, **overrides: Any) -> FusionConfig:
        """Q and K only: a convex combination of the adapters' outputs, no value projection."""
        return cls._preset("static", dict(value=False, regularization=False), overrides)

    @classmethod
    def scalearn(cls, **overrides: Any) -> FusionConfig:
        """ScaLearn: a learned vector of d scales per adapter and site, o = sum_n w_n * z_n + r."""
        return cls._preset("scalearn", {"kind": "scalearn"}, overrides)

    @classmethod
    def scalearn_uniform(cls, **overrides: Any) -> FusionConfig:
        """ScaLearnUniform: one learned scale per adapter and site, the same for every hidden dimension."""
        return cls._preset("scalearn_uniform", {"kind": "scalearn", "scale_shape": "scalar"}, overrides)

    @classmethod
    def scalearn_plus_plus(cls, **overrides: Any) -> FusionConfig:
        """ScaLearn++: ScaLearn's vectors of d scales per adapter, one set shared by every layer."""
        return cls._preset("scalearn_plus_plus", {"kind": "scalearn", "share_layers": True}, overrides)

    @classmethod
    def scalearn_uniform_plus_plus(cls, **overrides: Any) -> FusionConfig:
        """ScaLearnUniform++: one scale per adapter, shared by every layer (N parameters in all)."""
        settings = {"kind": "scalearn", "scale_shape": "scalar", "share_layers": True}
        return cls._preset("scalearn_uniform_plus_plus", settings, overrides)

    @classmethod
    def _preset(cls, preset: str, settings: dict[str, Any], overrides: dict[str, Any]) -> FusionConfig:
        """The preset's settings with `overrides`, a misspelt option refused by name as a dict config's is (the
        dataclass would raise a bare TypeError)."""
        reject_unknown_keys(overrides, [f.name for f in dataclasses.fields(cls)], f"FusionConfig.{preset}(...)")
        return cls(**{**settings, **overrides})

    @classmethod
    def from_name(cls, name: str, **overrides: Any) -> FusionConfig:
        presets = {
            "dynamic": cls.dynamic,
            "static": cls.static,
            "scalearn": cls.scalearn,
            "scalearn-uniform": cls.scalearn_uniform,
            "scalearn++": cls.scalearn_plus_plus,
            "scalearn-uniform++": cls.scalearn_uniform_plus_plus,
        }
        return preset_by_name(presets, name, "fusion", **overrides)

    def temperature_at(self, step: int) -> float:
        check_int(step, "fusion step", minimum=0)  # step -1 was T above its start, 'x' a TypeError
        if not self.temperature or step >= self.temperature_steps:  # (step 10**400 would overflow the division)
            return 1.0
        return max(self.temperature_start * (1.0 - step / self.temperature_steps), 1.0)

    @property
    def is_scalearn(self) -> bool:
        return self.kind == "scalearn"

    def to_dict(self) -> dict[str, Any]:
        """The fields of this kind (an attention fusion writes no kind, as before ScaLearn), with the format version."""
        data = dataclasses.asdict(self)
        for name in (*ATTENTION_FIELDS, "kind") if self.is_scalearn else (*SCALEARN_FIELDS, "kind"):
            data.pop(name)
        if self.is_scalearn:
            data = {"kind": self.kind, **data}
        elif not self.query_norm:
            data.pop("query_norm")  # newer than the format: written only when set, so older configs keep their hash
        data["format_version"] = CONFIG_FORMAT_VERSION
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FusionConfig:
        fields = versioned_fields(data, cls, CONFIG_FORMAT_VERSION, "fusion config")
        if "format_version" in data:  # a saved fusion_config.json: one written before UNUSED_WITHOUT still loads
            fields = _without_unused(fields)
        return cls(**fields)


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(FusionConfig)}


def _unused(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(switch, option) for each option of `values` (every field) given a value that its switch, off, leaves without
    effect."""
    return [
        (switch, name)
        for switch, names in UNUSED_WITHOUT.items()
        if values[switch] is False
        for name in names
        if values[name] != _DEFAULTS[name]
    ]


def _refuse_unused(config: FusionConfig) -> None:
    found = _unused(dataclasses.asdict(config))
    if found:
        names = dict.fromkeys(name for _, name in found)
        given = ", ".join(f"{name}={short_repr(getattr(config, name))}" for name in names)
        switches = sorted({switch for switch, _ in found})
        raise ConfigError(
            f"fusion {given} has no effect with {', '.join(f'{s}=False' for s in switches)}: it would be ignored "
            f"without a word; set {' and '.join(f'{s}=True' for s in switches)} to use it, or leave it out"
        )


def _without_unused(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` with each no-op option (_unused) at its default: what it computes is unchanged."""
    return {**fields, **{name: _DEFAULTS[name] for _, name in _unused({**_DEFAULTS, **fields})}}


def recorded_fusion_config(config: FusionConfig | str | Mapping[str, Any] | None) -> FusionConfig:
    """A fusion config as a finished run's config.json records it. A run recorded before UNUSED_WITHOUT was refused
    may hold a no-op option; it trained without its effect, so it loads at its default, as a saved config does."""
    if isinstance(config, Mapping):
        fields = versioned_fields(config, FusionConfig, CONFIG_FORMAT_VERSION, "fusion config")
        return FusionConfig(**_without_unused(fields))
    return resolve_fusion_config(config)


def resolve_fusion_config(config: FusionConfig | str | Mapping[str, Any] | None) -> FusionConfig:
    if config is None:
        return FusionConfig.dynamic()
    if isinstance(config, FusionConfig):
        return config
    if isinstance(config, str):
        return FusionConfig.from_name(config)
    if isinstance(config, Mapping):
        return FusionConfig.from_dict(config)
    raise ConfigError(f"fusion config must be a FusionConfig, a preset name or a dict, got {type(config).__name__}")


@dataclass(frozen=True)
class FusionSetup:
    """A loaded fusion as the model knows it: its config and the adapters it fuses, in order
    (`AdaptedModel.fusion_setup(name)`)."""

    config: FusionConfig
    adapters: tuple[str, ...]
