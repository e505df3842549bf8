"""Load adapters, fusions and heads saved by AdapterHub's `adapters` library, and export ours in its format.

`AdaptedModel.load_adapter/load_fusion/load_head` call `load_adapterhub` when a folder holds AdapterHub files,
so users load either format the same way. AdapterHub keeps its modules *on* the sub-layer output modules, so its
weight names are `[<prefix>.]encoder.layer.<i>.<site path>.adapters.<name>.<param>`; the site path is the same
module path as our AdapterSite's, which is how keys are placed, for every BERT-style row of ARCHITECTURES.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from adapterfusion._validation import naming_file
from adapterfusion.errors import ConfigError, SerializationError, UnsupportedArchitectureError
from adapterfusion.injection.architectures import SiteKind
from adapterfusion.interop.adapterhub_config import (
    adapter_config_from_adapterhub,
    adapter_config_to_adapterhub,
    fusion_config_from_adapterhub,
    fusion_config_to_adapterhub,
    head_config_from_adapterhub,
    head_config_to_adapterhub,
)
from adapterfusion.interop.adapterhub_files import (
    ADAPTERHUB_VERSION,
    FILES,
    is_adapterhub_dir,
    read_document,
    read_weights,
    write_piece,
)

if TYPE_CHECKING:
    from adapterfusion.injection.site import AdapterSite
    from adapterfusion.model import AdaptedModel

__all__ = ["export_adapterhub", "is_adapterhub_dir", "load_adapterhub"]

# AdapterHub parameter name inside one adapter -> ours (BottleneckAdapter), without the down projection,
# whose index depends on ln_before (adapter_down = Sequential([adapter_norm_before]?, Linear, act)).
_ADAPTER_PARAMS = {"adapter_up": "up", "adapter_norm_before": "ln_before", "adapter_norm_after": "ln_after"}


# ---- loading -----------------------------------------------------------------------------------------
def load_adapterhub(model: AdaptedModel, kind: str, directory: str | Path, name: str | None = None,
                    overwrite: bool = False, labels: Sequence[str] | None = None) -> str:
    """Load an AdapterHub adapter, fusion or head folder into `model`; returns the name it is loaded under. `labels`
    (heads only) are the label names the head must have been trained for."""
    directory = Path(directory)
    document = read_document(directory, kind)
    saved = {key: document[key] for key in ("model_type", "hidden_size") if key in document}
    model.fingerprint.check_compatible(saved, directory, check_layers=False)
    with naming_file(directory / FILES[kind][0]):
        if kind == "head":
            return _load_head(model, directory, document, name, overwrite, labels)
        loader = {"adapter": _load_adapter, "fusion": _load_fusion}[kind]
        return loader(model, directory, document, name, overwrite)


def _load_adapter(model: AdaptedModel, directory: Path, document: dict[str, Any], name: str | None,
                  overwrite: bool) -> str:
    _require_post_ln_sites(model)
    saved_name = str(document.get("name", ""))
    config = adapter_config_from_adapterhub(document["config"])
    tensors = _site_tensors(model, read_weights(directory, "adapter"), f"adapters.{saved_name}", directory)
    tensors = {key: value for key, value in
               (_adapter_param(key, value, config.ln_before, tensors, directory) for key, value in tensors.items())
               if key is not None}
    return model.install_adapter(name or saved_name, config, tensors, directory, overwrite)


def _adapter_param(key: str, value: torch.Tensor, ln_before: bool, all_tensors: dict[str, torch.Tensor],
                   directory: Path) -> tuple[str | None, torch.Tensor]:
    """Rename one `layer.<i>.<position>.<AdapterHub param>` key; None drops the LayerNorm stored twice."""
    site, _, param = key.partition(".adapter")
    module, _, leaf = ("adapter" + param).rpartition(".")
    down = "adapter_down.1" if ln_before else "adapter_down.0"
    if module == down:
        return f"{site}.down.{leaf}", value
    if ln_before and module == "adapter_down.0":  # the same LayerNorm as adapter_norm_before
        twin = all_tensors.get(f"{site}.adapter_norm_before.{leaf}")
        if twin is None:
            return f"{site}.ln_before.{leaf}", value
        if not torch.equal(twin, value):
            raise SerializationError(f"{directory}: {key} differs from adapter_norm_before.{leaf}, which it must equal")
        return None, value
    if module in _ADAPTER_PARAMS:
        return f"{site}.{_ADAPTER_PARAMS[module]}.{leaf}", value
    raise SerializationError(f"{directory}: unexpected AdapterHub adapter weight {key!r} (parameter {module!r})")


def _load_fusion(model: AdaptedModel, directory: Path, document: dict[str, Any], name: str | None,
                 overwrite: bool) -> str:
    _require_post_ln_sites(model)
    adapters = document.get("adapter_names")
    if not isinstance(adapters, list) or not adapters:
        raise SerializationError(f"{directory}: adapter_fusion_config.json has no 'adapter_names' list")
    attention_dropout = float(getattr(model.model.config, "attention_probs_dropout_prob", 0.0) or 0.0)
    config = fusion_config_from_adapterhub(document["config"], attention_dropout)
    saved_name = str(document.get("name") or ",".join(adapters))
    tensors = _site_tensors(model, read_weights(directory, "fusion"), f"adapter_fusion_layer.{saved_name}",
                            directory)
    # A fusion with no query, key or value has an unused Linear "dense" in adapters; we have nothing to load.
    tensors = {k: v for k, v in tensors.items() if ".dense." not in k}
    name = name or "-".join(adapters)  # AdapterHub's name "a,b" is not a valid module key here
    return model.install_fusion(name, adapters, config, tensors, directory, overwrite)


def _load_head(model: AdaptedModel, directory: Path, document: dict[str, Any], name: str | None,
               overwrite: bool, labels: Sequence[str] | None = None) -> str:
    saved_name = str(document.get("name", ""))
    hf_config = model.model.config
    default_dropout = getattr(hf_config, "classifier_dropout", None)
    if default_dropout is None:
        default_dropout = getattr(hf_config, "hidden_dropout_prob", 0.1)
    config = head_config_from_adapterhub(document["config"], float(default_dropout))
    prefix = f"heads.{saved_name}."
    weights = read_weights(directory, "head")
    stray = sorted(k for k in weights if not k.startswith(prefix))
    if stray:
        raise SerializationError(f"{directory}: weights that are not head {saved_name!r}'s: {stray[:5]}")
    return model.install_head(name or saved_name, config,
                              {f"layers.{k[len(prefix):]}": v for k, v in weights.items()}, directory, overwrite,
                              labels)


def _require_post_ln_sites(model: AdaptedModel) -> None:
    kinds = {model.architecture.attention.kind, model.architecture.output.kind}
    if kinds != {SiteKind.POST_LN_OUTPUT}:
        raise UnsupportedArchitectureError(
            f"AdapterHub adapters and fusions can be imported into BERT-style encoders only (sites of kind "
            f"{SiteKind.POST_LN_OUTPUT.value}); {model.fingerprint.model_type!r} uses {sorted(k.value for k in kinds)}"
        )


def _adapterhub_site_prefixes(model: AdaptedModel) -> dict[str, AdapterSite]:
    """`encoder.layer.<i>.<site path>.` (the module AdapterHub stores its weights on) -> our site."""
    return {f"{model.architecture.layers}.{s.layer_index}.{s.spec.path}.": s for s in model.sites}


def _site_tensors(model: AdaptedModel, weights: dict[str, torch.Tensor], container: str,
                  directory: Path) -> dict[str, torch.Tensor]:
    """AdapterHub keys `[<prefix>.]<site module>.<container>.<param>` -> `layer.<i>.<position>.<param>`."""
    base_prefix = f"{model.model.base_model_prefix}." if getattr(model.model, "base_model_prefix", "") else ""
    sites = _adapterhub_site_prefixes(model)
    marker = f".{container}."
    out: dict[str, torch.Tensor] = {}
    for key, value in weights.items():
        stripped = key[len(base_prefix):] if base_prefix and key.startswith(base_prefix) else key
        module, found, param = stripped.partition(marker)
        site = sites.get(f"{module}.") if found else None
        if site is None:
            raise SerializationError(
                f"{directory}: weight {key!r} is not at an adapter site of this {model.fingerprint.model_type} "
                f"encoder (expected '[{base_prefix}]{model.architecture.layers}.<i>.<site>{marker}...')"
            )
        out[f"layer.{site.layer_index}.{site.position}.{param}"] = value
    return out


# ---- export ------------------------------------------------------------------------------------------
def export_adapterhub(model: AdaptedModel, kind: str, name: str, directory: str | Path,
                      use_safetensors: bool = True) -> Path:
    """Write adapter, fusion or head `name` of `model` as AdapterHub's `adapters` 1.3.0 saves it, so that
    `adapters`' load_adapter / load_adapter_fusion / load_head reads it (safetensors unless told otherwise)."""
    writers = {"adapter": _export_adapter, "fusion": _export_fusion, "head": _export_head}
    if kind not in writers:
        raise ConfigError(f"kind={kind!r} is not exportable; choose one of {', '.join(writers)}")
    if kind != "head":
        _require_post_ln_sites(model)
    document, tensors = writers[kind](model, name)
    document.update(
        hidden_size=model.hidden_size,
        model_class=_adapter_model_class(model),
        model_name=model.fingerprint.name_or_path,
        model_type=model.fingerprint.model_type,
        version=ADAPTERHUB_VERSION,
    )
    return write_piece(directory, kind, document, tensors, use_safetensors)


def _adapter_model_class(model: AdaptedModel) -> str:
    """adapters records the flex-head model class (BertModel -> BertAdapterModel); its load_head refuses
    a head saved from any other class."""
    base = type(model.model.base_model).__name__
    return f"{base[:-len('Model')]}AdapterModel" if base.endswith("Model") else base


def _site_key(model: AdaptedModel, site: AdapterSite, container: str, param: str) -> str:
    base = f"{model.model.base_model_prefix}." if getattr(model.model, "base_model_prefix", "") else ""
    return f"{base}{model.architecture.layers}.{site.layer_index}.{site.spec.path}.{container}.{param}"


def _export_adapter(model: AdaptedModel, name: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    model._require("adapter", name, model.adapter_configs)
    config = model.adapter_configs[name]
    tensors: dict[str, torch.Tensor] = {}
    for site in model.sites_with_adapter(name):
        adapter = site.adapters[name]
        if adapter.layer_norm is not None and not _same_layer_norm(adapter.layer_norm, site.pretrained_layer_norm):
            raise ConfigError(
                f"adapter {name!r} has trained its own copy of the pretrained LayerNorm (train_layer_norm=True); "
                "AdapterHub has no place for it, so the export would change the outputs"
            )
        names = {"down": "adapter_down.1" if adapter.ln_before is not None else "adapter_down.0",
                 "up": "adapter_up", "ln_before": "adapter_norm_before", "ln_after": "adapter_norm_after"}
        for module, theirs in names.items():
            sub = getattr(adapter, module)
            if sub is None:
                continue
            for leaf, value in sub.state_dict().items():
                tensors[_site_key(model, site, f"adapters.{name}", f"{theirs}.{leaf}")] = value
                if module == "ln_before":  # adapters registers this LayerNorm a second time as adapter_down.0
                    tensors[_site_key(model, site, f"adapters.{name}", f"adapter_down.0.{leaf}")] = value
    return {"config": adapter_config_to_adapterhub(config), "name": name}, tensors


def _same_layer_norm(a: torch.nn.Module, b: torch.nn.Module | None) -> bool:
    if b is None:
        return False
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def _export_fusion(model: AdaptedModel, name: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    model._require("fusion", name, model.fusion_setups)
    config, adapters = model.fusion_setups[name]
    fused = ",".join(adapters)
    tensors = {_site_key(model, site, f"adapter_fusion_layer.{fused}", key): value
               for site in model.sites_with_fusion(name) for key, value in site.fusions[name].state_dict().items()}
    document = {"adapter_names": list(adapters), "config": fusion_config_to_adapterhub(config), "name": fused}
    return document, tensors


def _export_head(model: AdaptedModel, name: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    model._require("head", name, model.heads)
    head = model.heads[name]
    tensors = {f"heads.{name}.{key[len('layers.'):]}": value for key, value in head.state_dict().items()}
    return {"config": head_config_to_adapterhub(head.config), "name": name}, tensors
