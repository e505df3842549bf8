"""An AdaptedModel's pieces in and out, as PEFT's utils/save_and_load.py is for a PeftModel.

`export_piece` reads an adapter, fusion or head out of the model as a Piece (piece.py: its config and tensors, no
modules); `install_piece` checks a Piece on modules built on the side and only then adds it. `save_piece` and
`load_piece` hand Pieces to and from a folder (ours or AdapterHub's, serialization/formats.py), which sees the encoder
only through `layout(model)`. AdaptedModel's export_piece, install_piece, save_* and load_* call these.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from adapterfusion._validation import check_choice, check_has_values, naming_file, short_repr
from adapterfusion.adapters.config import AdapterConfig
from adapterfusion.encoder_identity import sampled_fingerprint
from adapterfusion.errors import ConfigError, IncompatibleModelError, NameNotFoundError, SerializationError
from adapterfusion.fusion.config import FusionConfig, FusionSetup
from adapterfusion.heads.config import HeadConfig, check_head_labels
from adapterfusion.injection import inject
from adapterfusion.injection.placement import adapter_modules, fusion_modules
from adapterfusion.injection.site import AdapterSite
from adapterfusion.piece import PIECE_KINDS, EncoderLayout, Piece, by_site, param_key
from adapterfusion.serialization.formats import read_piece, write_piece
from adapterfusion.serialization.pieces import check_weights
from adapterfusion.serialization.setup_load import piece_source

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


class AdaptersNotLoadedError(NameNotFoundError):
    """A fusion loaded before the adapters it fuses; `fused` are its adapters' names, `missing` those not loaded."""

    def __init__(self, message: str, fused: tuple[str, ...], missing: tuple[str, ...]) -> None:
        super().__init__(message)
        self.fused, self.missing = fused, missing


def layout(model: AdaptedModel) -> EncoderLayout:
    """What a file format may know of the model's encoder: fingerprint (with a sample digest of its weights, which
    our pieces record), where each site is, its HF config and each site's pretrained LayerNorm (for formats that
    store weights by module path)."""
    architecture = model.architecture
    return EncoderLayout(
        fingerprint=sampled_fingerprint(model),
        architecture=architecture,
        site_paths={site.key: site.adapterhub_module_path for site in model.sites},
        base_model_prefix=str(getattr(model.model, "base_model_prefix", "") or ""),
        base_model_class=type(model.model.base_model).__name__,
        config=model.model.config,
        pretrained_layer_norms={
            site.key: norm.state_dict() if (norm := site.pretrained_layer_norm) is not None else {}
            for site in model.sites
        },
    )


def export_piece(model: AdaptedModel, kind: str, name: str) -> Piece:
    """Adapter, fusion or head `name` as a Piece (its config and tensors, no modules), for a format to write."""
    check_choice(kind, PIECE_KINDS, "piece kind")
    model.require(kind, name)
    if kind == "head":
        head = model.get_head(name)
        return Piece("head", name, head.config, head.state_dict())
    if kind == "adapter":
        modules = {site: site.adapters[name] for site in model.sites_with_adapter(name)}
    else:
        modules = {site: site.fusions[name] for site in model.sites_with_fusion(name)}
    tensors = {
        param_key(site.key, key): value
        for site, module in modules.items()
        for key, value in module.state_dict().items()
    }
    if kind == "adapter":
        return Piece("adapter", name, model.adapter_configs[name], tensors)
    setup = model.fusion_setup(name)
    return Piece("fusion", name, setup.config, tensors, setup.adapters)


def install_piece(
    model: AdaptedModel, piece: Piece, overwrite: bool = False, labels: Sequence[str] | None = None
) -> str:
    """Add `piece` to the model (replacing one of that name with overwrite=True); returns its name. Everything is
    checked on modules built on the side, so a bad piece never replaces or half-adds anything. `labels` (heads only,
    e.g. a task's label_names): refuse a head saved for another label set. A fusion's adapters must be loaded first."""
    if not isinstance(piece, Piece):  # None was an AttributeError ('kind') below
        raise ConfigError(
            f"piece={short_repr(piece)} has type {type(piece).__name__}; install_piece takes a Piece, as "
            "export_piece(kind, name) or a format's reader (piece_from_folder) makes one"
        )
    consequence = f"the {piece.kind} {piece.name!r} loaded into it would keep none of its values"
    check_has_values(model.model.parameters(), "this model's weights are", consequence)
    with naming_file(piece.blame) if piece.blame is not None else contextlib.nullcontext():
        if piece.kind == "head":
            assert isinstance(piece.config, HeadConfig)
            check_head_labels(piece.config, labels, piece.source)
            check_weights(piece.tensors, piece.source)
            head = inject.build_head(model, piece.name, piece.config, overwrite)
            _load_state(head, dict(piece.tensors), piece.source)
            inject.attach_head(model, piece.name, head)
        elif piece.kind == "adapter":
            assert isinstance(piece.config, AdapterConfig)
            check_weights(piece.tensors, piece.source)
            modules = adapter_modules(model.sites, piece.name, piece.config, model.num_layers, model.hidden_size)
            _load_site_tensors(piece, modules, model.sites, {piece.name: piece.config})
            inject.attach_adapter(model, piece.name, piece.config, modules, overwrite)
        else:
            assert isinstance(piece.config, FusionConfig)
            missing = [a for a in piece.adapters if a not in model.adapter_configs]
            if missing:
                raise AdaptersNotLoadedError(
                    f"the fusion in {piece.source} fuses adapters {list(piece.adapters)}, of which {missing} are "
                    "not loaded; load_adapter() each of them first",
                    tuple(piece.adapters),
                    tuple(missing),
                )
            check_weights(piece.tensors, piece.source)
            modules = fusion_modules(
                model.sites, piece.name, piece.adapters, piece.config, model.adapter_configs, model.hidden_size
            )
            placed_by = {adapter: model.adapter_configs[adapter] for adapter in piece.adapters}
            _load_site_tensors(piece, modules, model.sites, placed_by)
            inject.attach_fusion(model, piece.name, FusionSetup(piece.config, piece.adapters), modules, overwrite)
    return piece.name


def save_piece(model: AdaptedModel, kind: str, name: str, directory: str | Path, overwrite: bool = False) -> Path:
    """Write the model's `kind` `name` into `directory` (serialization/formats.py write_piece); a piece of another
    name saved there is replaced only with `overwrite`."""
    _check_not_swapped(model, kind, name, directory)
    return write_piece(export_piece(model, kind, name), directory, layout(model), overwrite)


def _check_not_swapped(model: AdaptedModel, kind: str, name: Any, directory: Any) -> None:
    """Refuse save_<kind>(folder, name), AdapterHub's order (save_adapter(save_directory, adapter_name)), saying so:
    the folder was reported as an unknown piece name, or a Path as no name at all."""
    names: dict[str, Iterable[str]] = {"adapter": model.adapter_configs, "fusion": model.fusion_setups}
    loaded = set(names.get(kind, model.heads.keys()))
    if isinstance(directory, str) and directory in loaded and not (isinstance(name, str) and name in loaded):
        raise ConfigError(
            f"save_{kind}({short_repr(name)}, {directory!r}): {directory!r} is a loaded {kind} and the first argument "
            f"is not; save_{kind} takes the {kind}'s name first, then the folder (AdapterHub's takes the folder "
            f"first): call save_{kind}({directory!r}, {short_repr(str(name))})"
        )


def load_piece(
    model: AdaptedModel,
    kind: str,
    source: str | Path,
    name: str | None = None,
    overwrite: bool = False,
    labels: Sequence[str] | None = None,
) -> str:
    """Install the `kind` piece in `source` (a folder in either format, a saved setup holding one piece of that kind,
    or a Hub id of either: serialization/setup_load.py piece_source), named `name` if given; returns its name."""
    piece = read_piece(piece_source(source, kind), kind, layout(model))
    return install_piece(model, piece.renamed(name), overwrite, labels)


# AdaptedModel's methods, one per kind: the public names of save_piece and load_piece.
def save_adapter(model: AdaptedModel, name: str, directory: str | Path, overwrite: bool = False) -> Path:
    """Save adapter `name` into `directory` (adapter.safetensors + adapter_config.json, serialization/pieces.py).
    Saving it again there replaces it; an adapter of another name saved there is replaced only with `overwrite`."""
    return save_piece(model, "adapter", name, directory, overwrite)


def load_adapter(model: AdaptedModel, directory: str | Path, name: str | None = None, overwrite: bool = False) -> str:
    """Load an adapter saved by save_adapter or by AdapterHub; returns its name (the saved one unless `name` is
    given). `directory` may also be a saved setup holding one adapter, or a Hub id of either
    (serialization/setup_load.py)."""
    return load_piece(model, "adapter", directory, name, overwrite)


def save_fusion(model: AdaptedModel, name: str, directory: str | Path, overwrite: bool = False) -> Path:
    """Save fusion `name` (its Q/K/V at every site and the names of the adapters it fuses) into `directory`;
    `overwrite` as in save_adapter."""
    return save_piece(model, "fusion", name, directory, overwrite)


def load_fusion(model: AdaptedModel, directory: str | Path, name: str | None = None, overwrite: bool = False) -> str:
    """Load a fusion saved by save_fusion or AdapterHub (or a Hub id, as in load_adapter); the adapters it fuses
    must be loaded first."""
    return load_piece(model, "fusion", directory, name, overwrite)


def save_head(model: AdaptedModel, name: str, directory: str | Path, overwrite: bool = False) -> Path:
    """Save head `name` into `directory` (head.safetensors + head_config.json); `overwrite` as in save_adapter."""
    return save_piece(model, "head", name, directory, overwrite)


def load_head(
    model: AdaptedModel,
    directory: str | Path,
    name: str | None = None,
    overwrite: bool = False,
    labels: Sequence[str] | None = None,
) -> str:
    """Load a head saved by save_head (or AdapterHub); with `labels` (e.g. a task's label_names), a head saved for
    another label set is refused. `directory` may be a Hub id, as in load_adapter."""
    return load_piece(model, "head", directory, name, overwrite, labels)


def fusion_state_dict(model: AdaptedModel, name: str) -> dict[str, torch.Tensor]:
    """Fusion `name`'s Q/K/V weights keyed `<site key>.<param>` (piece.py): the tensors of its Piece."""
    return dict(export_piece(model, "fusion", name).tensors)


def load_state_dict(
    model: AdaptedModel, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
) -> Any:
    """nn.Module.load_state_dict, with the pieces a strict load would miss named first: a state dict taken from a
    model that held adapters, fusions or heads this one lacks failed with torch's list of every unexpected tensor,
    which does not say that the fix is adding those pieces (a state dict carries no piece configs)."""
    if strict:
        lacking = _pieces_lacking(model, state_dict.keys())
        if lacking:
            listed = "; ".join(f"{kind}s {names}" for kind, names in lacking.items())
            raise NameNotFoundError(
                f"load_state_dict: the state dict holds {listed}, which this model has not. A state dict has no "
                "piece configs: add each piece first with the config it was made with (add_adapter, add_fusion, "
                "add_head), or move pieces with save_adapter/load_adapter (and _fusion, _head) or save_pretrained, "
                "which keep them; strict=False loads the rest and returns their keys as unexpected"
            )
    return nn.Module.load_state_dict(model, state_dict, strict=strict, assign=assign)


def _pieces_lacking(model: AdaptedModel, keys: Iterable[str]) -> dict[str, list[str]]:
    """Names of the adapters, fusions and heads whose tensors `keys` hold (at this model's sites, or its heads) but
    this model has not, by kind."""
    sites = {path for path, module in model.named_modules() if isinstance(module, AdapterSite)}
    have = {"adapter": set(model.adapter_configs), "fusion": set(model.fusion_names), "head": set(model.heads)}
    lacking: dict[str, list[str]] = {}
    for key in keys:
        kind, name = _piece_of_key(key, sites)
        if kind is not None and name not in have[kind] and name not in lacking.setdefault(kind, []):
            lacking[kind].append(name)
    return {kind: names for kind, names in lacking.items() if names}


def _piece_of_key(key: str, sites: set[str]) -> tuple[str | None, str]:
    """('adapter' | 'fusion' | 'head', name) of a state dict key of a piece's tensor, else (None, '')."""
    if key.startswith("heads."):
        return "head", key.split(".", 2)[1]
    for kind in ("adapter", "fusion"):
        site, found, rest = key.partition(f".{kind}s.")
        if found and site in sites:
            return kind, rest.split(".", 1)[0]
    return None, ""


def _load_site_tensors(
    piece: Piece,
    modules: Mapping[AdapterSite, nn.Module],
    sites: Sequence[AdapterSite],
    placed_by: Mapping[str, AdapterConfig],
) -> None:
    """Load each site's tensors into its module, once every saved site is a placed one and back. `sites` are all
    the model's sites; `placed_by` the adapter configs that decide where the piece sits (an adapter's own, or the
    fused adapters' for a fusion)."""
    per_site = by_site(piece.tensors)
    if not per_site and any(module.state_dict() for module in modules.values()):
        # an empty weights file: each site's "weights do not match the saved config (missing [...])" blamed the config
        raise SerializationError(
            f"{piece.source}: the {piece.kind} file holds no weights at all, where its config places weights at "
            f"{len(modules)} sites of this model; the weights file was written empty or cut short. Save the "
            f"{piece.kind} again"
        )
    placed = {site.key for site in modules}
    stray = sorted(set(per_site) - placed)
    foreign = [key for key in stray if key not in {site.key for site in sites}]
    if foreign:
        raise SerializationError(
            f"{piece.source}: weights for sites this encoder's config does not place ({foreign[:5]})"
        )
    empty = [site for site in modules if site.key not in per_site] if per_site else []
    held_layers = {site.layer_index for site in modules if site.key in per_site}
    if empty and not {site.layer_index for site in empty} <= held_layers:  # whole layers: another encoder's depth
        held = sorted(held_layers)
        raise IncompatibleModelError(
            f"{piece.source}: the {piece.kind} holds weights for the sites of layers {held} but none for layers "
            f"{sorted({site.layer_index for site in empty} - held_layers)}, where its config places it on this "
            f"encoder of {len({s.layer_index for s in modules})} adapted layers; it was saved from an encoder with "
            "another number of layers (or with leave_out): load it into a model of that encoder"
        )
    if stray or empty:  # sites of this model, at other positions or layers than those it is placed at here
        raise _misplaced(piece, stray, [site.key for site in empty], placed_by)
    for site, module in modules.items():
        _load_state(module, per_site.get(site.key, {}), piece.source)


def _misplaced(
    piece: Piece, stray: Sequence[str], empty: Sequence[str], placed_by: Mapping[str, AdapterConfig]
) -> Exception:
    """The error for a piece whose saved sites are sites of this model, but not those it is placed at here: a
    fusion saved over adapters of another placement (Houlsby vs Pfeiffer, another leave_out), or an adapter whose
    weights and config come from two saves."""
    where = "; ".join(
        f"{name}: positions={list(config.positions)}, leave_out={list(config.leave_out)}"
        for name, config in placed_by.items()
    )
    places = "the adapters it fuses place" if piece.kind == "fusion" else f"its config ({where}) places"
    parts = (
        f"weights at {list(stray[:5])}, where {places} none" if stray else "",
        f"no weights for {list(empty[:5])}, where {places} it" if empty else "",
    )
    detail = " and ".join(part for part in parts if part)
    if piece.kind == "fusion":
        return IncompatibleModelError(
            f"{piece.source}: the fusion holds {detail}. A fusion sits where the adapters it fuses do, and here they "
            f"are placed as {where}: it was saved over adapters placed otherwise. Load the adapters it was saved "
            "with (their saved folders, or save_pretrained's setup) before it, or fuse these with add_fusion and "
            "train the fusion anew"
        )
    return SerializationError(
        f"{piece.source}: the adapter holds {detail}: its weights and its config come from different saves or were "
        "edited. Save the adapter again"
    )


def _load_state(module: nn.Module, state: dict[str, torch.Tensor], source: str | Path) -> None:
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    wrong = sorted(k for k in set(own) & set(state) if own[k].shape != state[k].shape)
    if missing or unexpected or wrong:
        detail = "; ".join(
            part
            for part in (
                f"missing {missing[:5]}" if missing else "",
                f"unexpected {unexpected[:5]}" if unexpected else "",
                "wrong shapes "
                + ", ".join(f"{k}: saved {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in wrong[:5])
                if wrong
                else "",
            )
            if part
        )
        raise SerializationError(f"{source}: weights do not match the saved config ({detail})")
    _check_castable(state, own, source)
    module.load_state_dict(state)


def _check_castable(state: Mapping[str, torch.Tensor], own: Mapping[str, torch.Tensor], source: str | Path) -> None:
    """Refuse saved weights that the model's dtype cannot hold: load_state_dict casts them without a word, and a
    float32 weight beyond float16's range (65504) became inf in a float16 model, so every output through it was
    NaN, far from the file that caused it (a file's own NaN or inf check_weights refuses before)."""
    for key, value in state.items():
        target = own[key].dtype
        if value.dtype == target or not target.is_floating_point:
            continue
        bad = int((~torch.isfinite(value.to(target))).sum())
        if bad:
            largest = float(value.detach().abs().max())
            raise IncompatibleModelError(
                f"{source}: weight {key!r} ({str(value.dtype).removeprefix('torch.')}) holds {bad} value(s) beyond "
                f"what this model's {str(target).removeprefix('torch.')} can hold (largest magnitude {largest:.4g}): "
                "cast, they would become inf and turn every output through them into NaN. Load the model in "
                "float32 or bfloat16 (dtype=torch.float32) to use this piece"
            )
