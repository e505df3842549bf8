"""Putting AdapterSites into an encoder and pieces into an AdaptedModel, and taking them out again (PEFT's
BaseTuner.inject_adapter / delete_adapter). The model keeps the registries (`adapter_configs`, `fusion_setups`,
`heads`); these functions are their only writers. AdaptedModel.add_* and delete_* are add_* and delete_* here.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from torch import nn

from adapterfusion._validation import check_bool, check_piece_name, require_loaded
from adapterfusion.adapters.config import AdapterConfig, resolve_adapter_config
from adapterfusion.errors import ConfigError, PieceExistsError
from adapterfusion.fusion.config import FusionConfig, FusionSetup, resolve_fusion_config
from adapterfusion.heads.config import HeadConfig
from adapterfusion.heads.module import PredictionHead
from adapterfusion.injection import controls
from adapterfusion.injection.architectures import get_submodule
from adapterfusion.injection.placement import adapter_modules, fused_adapters, fusion_modules
from adapterfusion.injection.runtime import ForwardRuntime
from adapterfusion.injection.site import AdapterSite
from adapterfusion.injection.state import ActiveState, refit
from adapterfusion.injection.unloaded import UnloadedSites, check_wrapped

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


def inject_sites(model: AdaptedModel, runtime: ForwardRuntime) -> list[AdapterSite]:
    """Replace each insertion site of each layer with an AdapterSite reading `runtime`, in layer order: the
    encoder's layers, then an encoder-decoder's decoder layers, numbered on from the encoder's."""
    base = cast(nn.Module, model.model.base_model)
    repeats = get_submodule(base, model.architecture.repeats) if model.architecture.repeats else None
    sites = []
    index = 0
    for stack in model.architecture.stacks():
        for number, layer in enumerate(cast(nn.ModuleList, get_submodule(base, stack.layers))):
            for position in stack.positions:
                spec = stack.site(position)
                parent_path, _, attribute = spec.path.rpartition(".")
                parent = get_submodule(layer, parent_path) if parent_path else layer
                layer_norm = get_submodule(layer, spec.layer_norm) if spec.layer_norm else None
                site = AdapterSite(getattr(parent, attribute), spec, index, position, layer_norm, runtime)
                site.module_path = f"{stack.layers}.{number}.{spec.path}"
                site.adapterhub_module_path = f"{stack.layers}.{number}.{spec.adapterhub_path or spec.path}"
                if spec.residual_input:  # residual_adds names a sub-layer of an earlier position, wrapped by now
                    added = get_submodule(layer, spec.residual_adds) if spec.residual_adds else None
                    site.listen_for_residual(get_submodule(layer, spec.residual_input), added)
                if spec.output_scale:
                    site.scale_output(float(getattr(model.model.config, spec.output_scale)))
                if spec.output_adds:  # a sub-layer the block runs before this one, never wrapped itself
                    site.listen_for_summand(get_submodule(layer, spec.output_adds))
                if spec.rows_from:  # a sub-layer of an earlier position, wrapped by now, or a norm
                    site.listen_for_rows(get_submodule(layer, spec.rows_from))
                if repeats is not None:
                    site.listen_for_repeats(repeats)
                setattr(parent, attribute, site)
                sites.append(site)
            index += 1
    return sites


def decoder_layers(model: AdaptedModel) -> int | None:
    """An encoder-decoder's number of decoder layers (None for one stack), which with the total fixes where its
    encoder's layers end (EncoderFingerprint.decoder_layers)."""
    decoder = model.architecture.decoder
    if decoder is None:
        return None
    return len(cast(nn.ModuleList, get_submodule(cast(nn.Module, model.model.base_model), decoder.layers)))


def unload_sites(model: AdaptedModel) -> UnloadedSites:
    """Put every original sub-module back; the sites list that replaces the model's refuses every later use."""
    base = cast(nn.Module, model.model.base_model)
    for site in model.sites:
        parent_path, _, attribute = site.module_path.rpartition(".")
        setattr(get_submodule(base, parent_path), attribute, site.unwrap())
    return UnloadedSites()


def add_adapter(
    model: AdaptedModel,
    name: str,
    config: AdapterConfig | str | Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> AdapterConfig:
    """Add a new adapter `name` at the sites `config` places it (a config, a preset name such as 'pfeiffer' or
    'houlsby', a dict, or None for Pfeiffer); returns the resolved config. It is not activated."""
    config = resolve_adapter_config(config)
    modules = adapter_modules(model.sites, name, config, model.num_layers, model.hidden_size)
    attach_adapter(model, name, config, modules, overwrite)
    return config


def add_fusion(
    model: AdaptedModel,
    name: str,
    adapters: Sequence[str],
    config: FusionConfig | str | Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> FusionConfig:
    """Add a new fusion `name` over loaded `adapters` (same placement, same leave_out layers), with `config` a
    FusionConfig, preset name ('dynamic', 'static'), dict or None ('dynamic'); returns the resolved config."""
    config = resolve_fusion_config(config)
    adapters = fused_adapters(name, adapters)
    for adapter in adapters:  # a fusion among them is named as one (fusion_modules knows only the adapters)
        require_loaded("adapter", adapter, model.adapter_configs, {"fusion": model.fusion_setups})
    modules = fusion_modules(model.sites, name, adapters, config, model.adapter_configs, model.hidden_size)
    attach_fusion(model, name, FusionSetup(config, adapters), modules, overwrite)
    return config


def add_head(model: AdaptedModel, name: str, config: HeadConfig, overwrite: bool = False) -> PredictionHead:
    """Add a new prediction head `name` (e.g. af.ClassificationHead(num_labels=2)); returns its module."""
    return attach_head(model, name, build_head(model, name, config, overwrite))


def delete_adapter(model: AdaptedModel, name: str) -> None:
    """Remove adapter `name` (refused while a fusion uses it); if it was active, alone or in the active block,
    the bare encoder runs."""
    remove_adapter(model, name)
    if model.active_adapter == name:
        model.activate(head=model.active_head)
    model.set_state(model.state)  # an active block that used it no longer runs


def delete_fusion(model: AdaptedModel, name: str) -> None:
    """Remove fusion `name` and its mask; if it was active, alone or in the active block, the bare encoder runs."""
    remove_fusion(model, name)
    if model.active_fusion == name:
        model.activate(head=model.active_head)
    model.set_state(controls.with_mask(model.state, name, (), None))  # nor does an active block that used it


def delete_head(model: AdaptedModel, name: str) -> None:
    """Remove head `name`; if it was active, the forward returns the wrapped model's own output."""
    model.require("head", name)
    del model.heads[name]
    if model.active_head == name:
        model.set_state(dataclasses.replace(model.state, head=None))


def attach_adapter(
    model: AdaptedModel, name: str, config: AdapterConfig, modules: Mapping[AdapterSite, nn.Module], overwrite: bool
) -> None:
    """Register adapter `name`, built per site by placement.py, replacing one with overwrite=True (what ran keeps
    running, the new piece in the old one's place: _keep_running)."""
    previous = model.state
    replaced = _refuse_existing(model, "adapter", name, overwrite)
    for site, module in modules.items():
        site.adapters[name] = module
    model.adapter_configs[name] = config
    model.runtime.pieces_changed()
    if replaced:
        _keep_running(model, previous, "adapter", name)


def attach_fusion(
    model: AdaptedModel, name: str, setup: FusionSetup, modules: Mapping[AdapterSite, nn.Module], overwrite: bool
) -> None:
    """Register fusion `name`, built per site by placement.py, replacing one with overwrite=True (what ran keeps
    running: _keep_running)."""
    previous = model.state
    replaced = _refuse_existing(model, "fusion", name, overwrite)
    for site, module in modules.items():
        site.fusions[name] = module
    model.fusion_setups[name] = setup
    model.runtime.pieces_changed()
    if replaced:
        _keep_running(model, previous, "fusion", name)


def _keep_running(model: AdaptedModel, previous: ActiveState, kind: str, name: str) -> None:
    """After a piece was replaced under its name (overwrite=True), the state that ran before runs again, the new
    piece where the old one was, as a replaced head stays active: deleting the old one had fallen back to the bare
    model, silently. A state the new piece does not fit (a fusion mask over other adapters) stays off, with a
    warning that says so."""
    try:
        model.set_state(refit(model, previous))
    except ConfigError as error:
        warnings.warn(
            f"the {kind} {name!r} was replaced, and what ran before cannot run with the new one ({error}); "
            "nothing is active now: activate what should run",
            stacklevel=4,
        )


def build_head(model: AdaptedModel, name: str, config: HeadConfig, overwrite: bool) -> PredictionHead:
    """Check the name and config and build the head on the encoder's device and dtype (so weights loaded into it
    keep their precision), without touching the model yet."""
    check_wrapped(model.sites)
    check_piece_name(name, "head")
    if not isinstance(config, HeadConfig):
        raise ConfigError(
            f"head {name!r}: expected a head config such as af.ClassificationHead(num_labels=2), "
            f"got {type(config).__name__}"
        )
    if name in model.heads and not check_bool(overwrite, "overwrite"):
        raise PieceExistsError(
            f"a head named {name!r} already exists; delete_head({name!r}) or pass overwrite=True", name
        )
    if model.architecture.decoder is not None and config.kind in ("question_answering", "token_classification"):
        raise ConfigError(
            f"head {name!r}: {config.kind} heads on encoder-decoders ({model.fingerprint.model_type}) are not "
            "supported; classification, regression and multiple-choice heads are, and the model's own LM head "
            "(labels=target ids, answers with generate())"
        )
    if config.pooling is None and not config.per_token:  # a per-token head pools nothing
        config = dataclasses.replace(config, pooling="last" if model.architecture.pools_last_token else "cls")
    if model.architecture.pools_last_token and config.pooling == "cls" and not config.per_token:
        kind = "an encoder-decoder's decoder" if model.architecture.decoder is not None else "a decoder"
        raise ConfigError(
            f"head {name!r}: pooling='cls' reads the first token, which in {kind} ({model.fingerprint.model_type}) "
            "has seen no other token; pass pooling='last' (the last non-padding token, as transformers' "
            "*ForSequenceClassification models do) or pooling='mean'"
        )
    reference = next(model.model.parameters())
    return PredictionHead(config, model.hidden_size).to(device=reference.device, dtype=reference.dtype)


def attach_head(model: AdaptedModel, name: str, head: PredictionHead) -> PredictionHead:
    """Register head `name` (build_head made it), in the model's train/eval mode."""
    model.heads[name] = head.train(model.training)
    return head


def _fusions_using(model: AdaptedModel, adapter: str) -> list[str]:
    return [fusion for fusion, setup in model.fusion_setups.items() if adapter in setup.adapters]


def remove_adapter(model: AdaptedModel, name: str) -> None:
    """Take adapter `name` out of its sites and the registry (refused while a fusion uses it)."""
    model.require("adapter", name)
    users = _fusions_using(model, name)
    if users:
        raise ConfigError(f"adapter {name!r} is used by fusion(s) {users}; delete those fusions first")
    for site in model.sites_with_adapter(name):
        del site.adapters[name]
    del model.adapter_configs[name]
    model.runtime.pieces_changed()


def remove_fusion(model: AdaptedModel, name: str) -> None:
    """Take fusion `name` out of its sites and the registry."""
    model.require("fusion", name)
    for site in model.sites_with_fusion(name):
        del site.fusions[name]
    del model.fusion_setups[name]
    model.runtime.pieces_changed()


def _refuse_existing(model: AdaptedModel, kind: str, name: str, overwrite: bool) -> bool:
    """Refuse a name already loaded, or with overwrite=True delete the loaded piece (model.delete_*): True then."""
    if name in (model.adapter_configs if kind == "adapter" else model.fusion_setups):
        if not check_bool(overwrite, "overwrite"):
            article = "an" if kind == "adapter" else "a"
            users = _fusions_using(model, name) if kind == "adapter" else []
            # An adapter a fusion uses can be neither deleted nor overwritten: only another name works.
            fix = (
                f"fusion(s) {users} use it, so it can be neither deleted nor overwritten: use another name "
                "(load_adapter(..., name=...))"
                if users
                else f"delete_{kind}({name!r}), pass overwrite=True, or use another name"
            )
            raise PieceExistsError(f"{article} {kind} named {name!r} already exists; {fix}", name)
        (model.delete_adapter if kind == "adapter" else model.delete_fusion)(name)
        return True
    return False
