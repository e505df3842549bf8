"""The AdapterHub translator: folders saved by AdapterHub's `adapters` library to `Piece`s and back.

serialization/formats.py hands an AdapterHub folder here when `load_adapter/load_fusion/load_head` meet one, so users
load either format the same way. AdapterHub keeps its modules *on* the sub-layer output modules, so its weight names are
`[<prefix>.]encoder.layer.<i>.<site path>.adapters.<name>.<param>`; on the decoders it patches (GPT-2, Llama, Mistral,
Qwen2/3) they hang on the block, `<layers>.<i>.attention_adapters` / `output_adapters`. The encoder layout gives each
site key that module path (EncoderLayout.site_paths, from SiteSpec.adapterhub_path), which is how keys are placed.
The translator sees the encoder only through that layout and never imports the model; `export_adapterhub` and
`load_adapterhub` take any model with `export_piece` / `install_piece` (piece.PieceHolder).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from adapterfusion._validation import check_bool, check_has_values, naming_file, require_wrapped, short_repr
from adapterfusion.adapters.config import AdapterConfig
from adapterfusion.errors import ConfigError, IncompatibleModelError, SerializationError, UnsupportedArchitectureError
from adapterfusion.fusion.config import FusionConfig
from adapterfusion.heads.config import HeadConfig
from adapterfusion.injection.architectures import SiteKind
from adapterfusion.interop.adapterhub_config import (
    adapter_config_from_adapterhub,
    adapter_config_to_adapterhub,
    adapterhub_config_value,
    adapterhub_head_dropout,
    adapterhub_pooling,
    fusion_config_from_adapterhub,
    fusion_config_to_adapterhub,
    head_config_from_adapterhub,
    head_config_to_adapterhub,
)
from adapterfusion.interop.adapterhub_files import (
    ADAPTERHUB_VERSION,
    FILES,
    check_kind,
    is_adapterhub_dir,
    read_document,
    read_weights,
    write_folder,
)
from adapterfusion.io.paths import as_path, describe, out_of_reach
from adapterfusion.piece import (
    EncoderLayout,
    Piece,
    PieceHolder,
    by_site,
    check_finite_weights,
    check_not_in_setup,
    param_key,
    split_param_key,
)

__all__ = ["export_adapterhub", "is_adapterhub_dir", "load_adapterhub", "piece_from_adapterhub", "piece_to_adapterhub"]

# AdapterHub parameter name inside one adapter -> ours (BottleneckAdapter), without the down projection,
# whose index depends on ln_before (adapter_down = Sequential([adapter_norm_before]?, Linear, act)).
_ADAPTER_PARAMS = {"adapter_up": "up", "adapter_norm_before": "ln_before", "adapter_norm_after": "ln_after"}


# ---- a model in, a model out -------------------------------------------------------------------------
def load_adapterhub(
    model: PieceHolder,
    kind: str,
    directory: str | Path,
    name: str | None = None,
    overwrite: bool = False,
    labels: Sequence[str] | None = None,
) -> str:
    """Load an AdapterHub adapter, fusion or head folder into `model`; returns the name it is loaded under. `labels`
    (heads only) are the label names the head must have been trained for."""
    require_wrapped(model, "load_adapterhub")
    check_bool(overwrite, "overwrite")
    check_kind(kind, "loadable")
    if labels is not None and kind != "head":  # install_piece checks them on heads only: they would go unread
        raise ConfigError(
            f"load_adapterhub(kind={kind!r}) got labels={short_repr(labels)}, but only a head has labels to check; "
            "drop labels, or pass them when you load the head (kind='head')"
        )
    piece = piece_from_adapterhub(directory, kind, model.layout())
    return model.install_piece(piece.renamed(name), overwrite, labels)


def export_adapterhub(
    model: PieceHolder,
    kind: str,
    name: str,
    directory: str | Path,
    use_safetensors: bool = True,
    overwrite: bool = False,
) -> Path:
    """Write adapter, fusion or head `name` of `model` as AdapterHub's `adapters` 1.3.0 saves it, so that
    `adapters`' load_adapter / load_adapter_fusion / load_head reads it (safetensors unless told otherwise). AdapterHub
    files of that kind already in `directory` are replaced only with `overwrite` (an export and a download look
    alike); a config of that name that is neither AdapterHub's nor ours (a PEFT adapter's) is never replaced."""
    require_wrapped(model, "export_adapterhub")
    check_kind(kind, "exportable")
    return piece_to_adapterhub(model.export_piece(kind, name), directory, model.layout(), use_safetensors, overwrite)


# ---- reading -----------------------------------------------------------------------------------------
def piece_from_adapterhub(directory: str | Path, kind: str, layout: EncoderLayout) -> Piece:
    """The AdapterHub `kind` in `directory` as a Piece for the encoder `layout` describes. Its name is the saved one
    (a fusion's: its adapters joined by '-', as AdapterHub's 'a,b' is no valid module key)."""
    directory = as_path(directory, f"the AdapterHub {check_kind(kind, 'loadable')} folder")
    _check_layout(layout, "piece_from_adapterhub", "the model to load the piece into")
    found = describe(directory)  # anything else (a NUL in the path, no permission) the reader says as such
    if found == "nothing" and not out_of_reach(directory):
        raise SerializationError(
            f"the AdapterHub {kind} folder {str(directory)!r} does not exist; this reads a local folder: check the "
            f"path, or load a Hub repository's {kind} with model.load_{kind}('org/name/<folder>'), which downloads it"
        )
    if found == "a file":
        raise SerializationError(
            f"the AdapterHub {kind} folder {str(directory)!r} is a file; pass the folder holding it"
        )
    document = read_document(directory, kind)
    config_file = directory / FILES[kind][0]
    saved: dict[str, Any] = {key: document[key] for key in ("model_type", "hidden_size") if key in document}
    for key, expected in (("model_type", str), ("hidden_size", int)):  # as AdapterHub names them, not our base_model.*
        value = saved.get(key, expected())
        if not isinstance(value, expected) or isinstance(value, bool):
            raise SerializationError(
                f"{config_file}: {key}={short_repr(value)} has type {type(value).__name__}; AdapterHub writes the "
                f"model's {key} there as {'a string' if expected is str else 'an integer'}, so the file is damaged or "
                "was edited by hand: restore it from the source of this piece, or export it again"
            )
    layout.fingerprint.check_compatible(saved, directory, check_layers=False)
    with naming_file(config_file):
        reader = {"adapter": _read_adapter, "fusion": _read_fusion, "head": _read_head}[kind]
        piece = reader(layout, directory, document)
    return dataclasses.replace(piece, source=str(directory), blame=config_file)


def _read_adapter(layout: EncoderLayout, directory: Path, document: dict[str, Any]) -> Piece:
    _require_adapterhub_sites(layout)
    saved_name = str(document.get("name", ""))
    config = adapter_config_from_adapterhub(document["config"])
    _check_post_add(config, layout, None)
    tensors = _site_tensors(layout, read_weights(directory, "adapter"), f"adapters.{saved_name}", directory)
    tensors = {
        key: value
        for key, value in (
            _adapter_param(key, value, config.ln_before, tensors, directory) for key, value in tensors.items()
        )
        if key is not None
    }
    return Piece("adapter", saved_name, config, tensors)


def _adapter_param(
    key: str, value: torch.Tensor, ln_before: bool, all_tensors: dict[str, torch.Tensor], directory: Path
) -> tuple[str | None, torch.Tensor]:
    """Rename one `<site key>.<AdapterHub param>` key; None drops the LayerNorm stored twice."""
    site, param = split_param_key(key)
    module, _, leaf = param.rpartition(".")
    down = "adapter_down.1" if ln_before else "adapter_down.0"
    if module == down:
        return param_key(site, f"down.{leaf}"), value
    if ln_before and module == "adapter_down.0":  # the same LayerNorm as adapter_norm_before
        twin = all_tensors.get(param_key(site, f"adapter_norm_before.{leaf}"))
        if twin is None:
            return param_key(site, f"ln_before.{leaf}"), value
        if not _same_bits(twin, value):
            raise SerializationError(f"{directory}: {key} differs from adapter_norm_before.{leaf}, which it must equal")
        return None, value
    if module in _ADAPTER_PARAMS:
        return param_key(site, f"{_ADAPTER_PARAMS[module]}.{leaf}"), value
    raise SerializationError(f"{directory}: unexpected AdapterHub adapter weight {key!r} (parameter {module!r})")


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same values bit for bit, whatever their dtype (torch.equal computes nothing in
    float8, whose weights check_weights refuses later with a message of its own)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def _read_fusion(layout: EncoderLayout, directory: Path, document: dict[str, Any]) -> Piece:
    _require_adapterhub_sites(layout)
    adapters = document.get("adapter_names")
    if not isinstance(adapters, list) or not adapters or not all(isinstance(a, str) for a in adapters):
        raise SerializationError(
            f"{directory}: adapter_fusion_config.json has no 'adapter_names' list of adapter names (it holds "
            f'{short_repr(adapters)}); expected a non-empty list of strings, e.g. ["a", "b"]'
        )
    saved_name = document.get("name") or ",".join(adapters)
    if not isinstance(saved_name, str) or saved_name.split(",") != adapters:
        # adapters 1.3.0 fuses the adapters its 'name' lists (add_adapter_fusion splits it at ','), not adapter_names
        raise SerializationError(
            f"{directory}: adapter_fusion_config.json names the fusion {short_repr(saved_name)} (its 'name' field), "
            f"but its adapter_names are {adapters}; AdapterHub fuses the adapters the name lists, joined by ',' "
            f"({','.join(adapters)!r} for these), so the file was edited by hand: set both back to the adapters the "
            "fusion was trained over (the weights' keys name them), or export it again"
        )
    model_type = layout.fingerprint.model_type
    attention_dropout = adapterhub_config_value(layout.config, model_type, "attention_probs_dropout_prob") or 0.0
    config = fusion_config_from_adapterhub(document["config"], attention_dropout)
    tensors = _site_tensors(layout, read_weights(directory, "fusion"), f"adapter_fusion_layer.{saved_name}", directory)
    # A fusion with no query, key or value has an unused Linear "dense" in adapters; we have nothing to load.
    tensors = {k: v for k, v in tensors.items() if ".dense." not in k}
    return Piece("fusion", "-".join(adapters), config, tensors, tuple(adapters))


def _read_head(layout: EncoderLayout, directory: Path, document: dict[str, Any]) -> Piece:
    saved_name = str(document.get("name", ""))
    default_dropout = adapterhub_head_dropout(layout.config, layout.fingerprint.model_type)
    pooling = adapterhub_pooling(layout.architecture.pools_last_token)
    config = head_config_from_adapterhub(document["config"], default_dropout, pooling)
    prefix = f"heads.{saved_name}."
    weights = read_weights(directory, "head")
    stray = sorted(k for k in weights if not k.startswith(prefix))
    owners = {k.split(".")[1] for k in stray if k.startswith("heads.") and k.count(".") >= 2}
    if stray and len(owners) == 1 and len(stray) == len(weights):
        owner = owners.pop()
        raise SerializationError(
            f"{directory}: the weights are of head {owner!r} ({stray[0]!r}, ...), but head_config.json names the head "
            f"{saved_name!r} (its 'name' field), so the config and the weights do not belong together: set 'name' "
            f"back to {owner!r} if the file was edited by hand, or put the config and weights of one export in the "
            "folder"
        )
    if stray:
        raise SerializationError(f"{directory}: weights that are not head {saved_name!r}'s: {stray[:5]}")
    tensors = {f"layers.{k[len(prefix) :]}": v for k, v in weights.items()}
    _check_head_outputs(config, tensors, directory)
    return Piece("head", saved_name, config, tensors)


def _check_head_outputs(config: HeadConfig, tensors: dict[str, torch.Tensor], directory: Path) -> None:
    """Refuse a head_config.json whose output count its output layer's weights do not have, before the head is built:
    a num_labels of 10**9 (an edited file) built a 10**9-row layer, which ran the process out of memory, before the
    saved weights were compared with it."""
    numbered = [key for key, value in tensors.items() if key.endswith(".weight") and value.dim() == 2]
    index = {key: key.split(".")[1] for key in numbered}
    last = max((key for key in numbered if index[key].isdigit()), key=lambda key: int(index[key]), default=None)
    if last is None or tensors[last].shape[0] == config.output_size:
        return  # no output layer to compare: the install names what is missing
    what = "num_choices" if config.kind == "multiple_choice" else "num_labels"
    raise SerializationError(
        f"{directory}: head_config.json makes a head of {config.output_size} output(s) ({what}), but its output layer "
        f"{last.removeprefix('layers.')!r} in the weights file has {tensors[last].shape[0]}: the config and the "
        "weights do not belong together (the file was edited by hand, or they come from different saves); put the "
        "config and weights of one save in the folder"
    )


def _require_adapterhub_sites(layout: EncoderLayout) -> None:
    if not layout.architecture.in_adapterhub:
        raise UnsupportedArchitectureError(
            f"AdapterHub 1.3.0 has no adapters at the sites adapterfusion uses on {layout.fingerprint.model_type!r} "
            f"(sites of kind {sorted(k.value for k in layout.site_kinds)}), so its adapter and fusion files do not "
            "translate; save in adapterfusion's own format (the default) instead. AdapterHub's files translate for "
            "the BERT-style encoders it runs (not CamemBERT, Data2Vec-text or ERNIE) and for the decoders it "
            "supports (GPT-2, Llama, Mistral, Qwen2, Qwen3)"
        )


def _base_prefix(layout: EncoderLayout) -> str:
    return f"{layout.base_model_prefix}." if layout.base_model_prefix else ""


def _site_tensors(
    layout: EncoderLayout, weights: dict[str, torch.Tensor], container: str, directory: Path
) -> dict[str, torch.Tensor]:
    """AdapterHub keys `[<prefix>.]<site module>.<container>.<param>` -> `<site key>.<param>`."""
    base_prefix = _base_prefix(layout)
    sites = {f"{path}.": key for key, path in layout.site_paths.items()}
    marker = f".{container}."
    out: dict[str, torch.Tensor] = {}
    for key, value in weights.items():
        stripped = key[len(base_prefix) :] if base_prefix and key.startswith(base_prefix) else key
        module, found, param = stripped.partition(marker)
        site = sites.get(f"{module}.") if found else None
        if site is None:
            raise _unplaced(layout, key, stripped, container, directory)
        out[param_key(site, param)] = value
    return out


def _unplaced(layout: EncoderLayout, key: str, stripped: str, container: str, directory: Path) -> Exception:
    """The error for weight `key` that is at no site of this model under `container`: of a layer past the end of its
    stack (the encoder's or, in an encoder-decoder, the decoder's), of another piece than the config names (its
    'name' field edited, or weights of another piece beside it), or at no adapter site at all."""
    model_type = layout.fingerprint.model_type
    for stack, depth in _stack_depths(layout).items():
        head, _, rest = stripped.partition(f"{stack}.")
        number = rest.partition(".")[0]
        if not head and number.isdigit() and int(number) >= depth:
            layer, part = int(number), _stack_part(layout, stack)
            noun = _model_noun(layout)
            where, whose = (f" of its {part}", f"{model_type} model's {part}") if part else ("", f"{model_type} {noun}")
            saved_from = "a decoder" if part == "decoder" or noun == "decoder" else "an encoder"
            return IncompatibleModelError(
                f"{directory}: weight {key!r} is of layer {layer}{where}, and this {whose} has {depth} layers; it was "
                f"saved from {saved_from} with at least {layer + 1}: load it into a model of that shape"
            )
    kind_marker, _, wanted = container.partition(".")
    found = re.search(rf"\.{re.escape(kind_marker)}\.([^.]+)\.", stripped)
    if found is not None and found.group(1) != wanted:
        what = "adapter" if kind_marker == "adapters" else "fusion"
        config_file = FILES[what][0]
        return SerializationError(
            f"{directory}: weight {key!r} is of {what} {found.group(1)!r}, but {config_file} names the {what} "
            f"{wanted!r} (its 'name' field{'' if what == 'adapter' else ' or adapter_names'}), so the config and the "
            f"weights do not belong together: set 'name' back to {found.group(1)!r} if the file was edited by hand, "
            "or put the config and weights of one export in the folder"
        )
    patterns = " or ".join(
        f"'[{_base_prefix(layout)}]{stack}.<i>.<site>.{container}...'" for stack in _stack_depths(layout)
    )
    return SerializationError(
        f"{directory}: weight {key!r} is not at an adapter site of this {model_type} {_model_noun(layout)} (expected "
        f"{patterns})"
    )


def _model_noun(layout: EncoderLayout) -> str:
    """What the model is called in a message: a decoder, an encoder-decoder or an encoder."""
    if layout.architecture.decoder is not None:
        return "encoder-decoder"
    return "decoder" if layout.architecture.causal else "encoder"


def _stack_depths(layout: EncoderLayout) -> dict[str, int]:
    """Each layer stack's module path (the encoder's, then an encoder-decoder's decoder's) -> how many layers of it
    have adapter sites in this model, counted from the site paths the weights are placed by."""
    depths: dict[str, int] = {}
    for stack in layout.architecture.stacks():
        prefix = f"{stack.layers}."
        numbers = [
            path[len(prefix) :].partition(".")[0] for path in layout.site_paths.values() if path.startswith(prefix)
        ]
        depths[stack.layers] = max((int(n) + 1 for n in numbers if n.isdigit()), default=0)
    return depths


def _stack_part(layout: EncoderLayout, stack: str) -> str | None:
    """'decoder' or 'encoder' for the stacks of an encoder-decoder, None for a model of one stack."""
    decoder = layout.architecture.decoder
    if decoder is None:
        return None
    return "decoder" if stack == decoder.layers else "encoder"


# ---- writing -----------------------------------------------------------------------------------------
def piece_to_adapterhub(
    piece: Piece, directory: str | Path, layout: EncoderLayout, use_safetensors: bool = True, overwrite: bool = False
) -> Path:
    """Write `piece` (from the encoder `layout` describes) as AdapterHub's `adapters` 1.3.0 saves it (write_folder
    checks use_safetensors and `overwrite`)."""
    if not isinstance(piece, Piece):
        raise ConfigError(
            f"piece_to_adapterhub takes a Piece (model.export_piece(kind, name)), got {type(piece).__name__}"
        )
    _check_layout(layout, "piece_to_adapterhub", "the model the piece was exported from")
    check_not_in_setup(directory, piece.kind, writer="export_adapterhub")  # as save_<kind>: it breaks a setup alike
    if piece.kind != "head":
        _require_adapterhub_sites(layout)
    else:
        _require_head_model(layout)
    check_has_values(piece.tensors.values(), f"{piece.kind} {piece.name!r} has weights", "there is nothing to export")
    _check_fits(piece, layout)
    check_finite_weights(piece.tensors, piece.kind, piece.name, "export_adapterhub")
    document, tensors = _WRITERS[piece.kind](piece, layout)
    document.update(
        hidden_size=layout.fingerprint.hidden_size,
        model_class=_adapter_model_class(layout),
        model_name=layout.fingerprint.name_or_path,
        model_type=layout.fingerprint.model_type,
        version=ADAPTERHUB_VERSION,
    )
    return write_folder(directory, piece.kind, document, tensors, use_safetensors, overwrite)


def _check_layout(layout: object, caller: str, whose: str) -> None:
    if not isinstance(layout, EncoderLayout):
        raise ConfigError(f"{caller} takes the layout of {whose} (model.layout()), got {type(layout).__name__}")


def _check_fits(piece: Piece, layout: EncoderLayout) -> None:
    """Refuse a piece of another model than the one `layout` describes, whose files would name sites or a hidden size
    its weights do not have (a piece of a deeper model has sites past this one's layers: a KeyError before)."""
    model_type, hidden = layout.fingerprint.model_type, layout.fingerprint.hidden_size
    if piece.kind != "head":
        missing = sorted(site for site in by_site(piece.tensors) if site not in layout.site_paths)
        if missing:
            raise IncompatibleModelError(
                f"{piece.kind} {piece.name!r} has weights at {missing[:4]}, sites this {model_type} "
                f"{_model_noun(layout)} does not have: the layout is of another model than the piece; pass the layout "
                "of the model it was exported from (model.layout())"
            )
    wrong = sorted(key for key, value in piece.tensors.items() if value.dim() == 2 and hidden not in value.shape)
    if wrong:
        raise IncompatibleModelError(
            f"{piece.kind} {piece.name!r} has weight {wrong[0]!r} of shape {tuple(piece.tensors[wrong[0]].shape)}, "
            f"which does not fit this {model_type} {_model_noun(layout)}'s hidden size {hidden}: the layout is of "
            "another model than the piece; pass the layout of the model it was exported from (model.layout())"
        )


# Base model classes whose flex-head model adapters names otherwise than by the class's stem.
_BASE_STEMS = {"BertGenerationEncoder": "BertGeneration"}


def _adapter_model_class(layout: EncoderLayout) -> str:
    """adapters records the flex-head model class (BertModel -> BertAdapterModel); its load_head refuses a head
    saved from any other class. T5ForConditionalGeneration is its own base model: T5 -> T5AdapterModel, and
    BERT-generation's base model is BertGenerationEncoder: BertGenerationAdapterModel."""
    base = layout.base_model_class
    stem = base.removesuffix("Model") if base.endswith("Model") else base.partition("For")[0]
    stem = _BASE_STEMS.get(stem, stem)
    return f"{stem}AdapterModel"


def _require_head_model(layout: EncoderLayout) -> None:
    """adapters' load_head refuses a head of a model class it does not have (its load_adapter reads no class)."""
    name = _adapter_model_class(layout)
    if name not in ADAPTERHUB_HEAD_MODELS:
        raise UnsupportedArchitectureError(
            f"AdapterHub 1.3.0 has no head model for {layout.fingerprint.model_type!r} (no {name}), so a head exported "
            "for it would not load there; export the adapters and fusions, and save the head in adapterfusion's own "
            "format (save_head)"
        )


# The flex-head model classes of adapters 1.3.0 (`dir(adapters)`), whose names its head files record.
ADAPTERHUB_HEAD_MODELS = frozenset(
    {
        "AlbertAdapterModel", "BartAdapterModel", "BeitAdapterModel", "BertAdapterModel",
        "BertGenerationAdapterModel", "CLIPAdapterModel", "DebertaAdapterModel", "DebertaV2AdapterModel",
        "DistilBertAdapterModel", "ElectraAdapterModel", "GPT2AdapterModel", "GPTJAdapterModel", "LlamaAdapterModel",
        "MBartAdapterModel", "MT5AdapterModel", "MistralAdapterModel", "PLBartAdapterModel", "RobertaAdapterModel",
        "T5AdapterModel", "ViTAdapterModel", "WhisperAdapterModel", "XLMRobertaAdapterModel", "XmodAdapterModel",
    }
)  # fmt: skip


def _their_key(layout: EncoderLayout, site: str, container: str, param: str) -> str:
    return f"{_base_prefix(layout)}{layout.site_paths[site]}.{container}.{param}"


def _write_adapter(piece: Piece, layout: EncoderLayout) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    config = piece.config
    assert isinstance(config, AdapterConfig)
    container = f"adapters.{piece.name}"
    names = {
        "down": "adapter_down.1" if config.ln_before else "adapter_down.0",
        "up": "adapter_up",
        "ln_before": "adapter_norm_before",
        "ln_after": "adapter_norm_after",
    }
    tensors: dict[str, torch.Tensor] = {}
    for site, params in by_site(piece.tensors).items():
        own_norm = {
            param.partition(".")[2]: value for param, value in params.items() if param.partition(".")[0] == "layer_norm"
        }
        if own_norm and not _same_state(own_norm, layout.pretrained_layer_norms.get(site, {})):
            raise ConfigError(
                f"adapter {piece.name!r} has trained its own copy of the pretrained LayerNorm (train_layer_norm=True); "
                "AdapterHub has no place for it, so the export would change the outputs"
            )
        for module, theirs in names.items():
            for param, value in params.items():
                owner, _, leaf = param.partition(".")
                if owner != module:
                    continue
                tensors[_their_key(layout, site, container, f"{theirs}.{leaf}")] = value
                if module == "ln_before":  # adapters registers this LayerNorm a second time as adapter_down.0
                    tensors[_their_key(layout, site, container, f"adapter_down.0.{leaf}")] = value
    _check_post_add(config, layout, piece.name)
    return {"config": adapter_config_to_adapterhub(config), "name": piece.name}, tensors


def _check_post_add(config: AdapterConfig, layout: EncoderLayout, exporting: str | None) -> None:
    """Refuse residual_before_ln='post_add' on a model with pre-norm sites, both ways: adapters 1.3.0 fails on it
    there, so an export (of adapter `exporting`) would not load in adapters, and a file that says so on import was
    not written by adapters for this model."""
    if config.residual_before_ln != "post_add" or SiteKind.PRE_NORM not in layout.site_kinds:
        return
    model_type = layout.fingerprint.model_type
    if exporting is not None:
        what = f"adapter {exporting!r}: residual_before_ln='post_add' cannot be exported for {model_type!r}"
        fix = "keep it in adapterfusion's own format, or use residual_before_ln=True there"
    else:
        what = f"AdapterHub option residual_before_ln='post_add' cannot be loaded into {model_type!r}"
        fix = (
            "the file was edited by hand or written for another model: restore residual_before_ln from the "
            "adapter's source, or export it again"
        )
    raise ConfigError(
        f"{what}: adapters 1.3.0 gives its pre-norm sites no LayerNorm, and its 'post_add' residual is set only with "
        f"one, so the adapter fails on its first forward there; {fix}"
    )


def _same_state(a: dict[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _write_fusion(piece: Piece, layout: EncoderLayout) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    config = piece.config
    assert isinstance(config, FusionConfig)
    fused = ",".join(piece.adapters)
    tensors = {
        _their_key(layout, site, f"adapter_fusion_layer.{fused}", param): value
        for site, params in by_site(piece.tensors).items()
        for param, value in params.items()
    }
    document = {"adapter_names": list(piece.adapters), "config": fusion_config_to_adapterhub(config), "name": fused}
    return document, tensors


def _write_head(piece: Piece, layout: EncoderLayout) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    config = piece.config
    assert isinstance(config, HeadConfig)
    tensors = {f"heads.{piece.name}.{key[len('layers.') :]}": value for key, value in piece.tensors.items()}
    pooling = adapterhub_pooling(layout.architecture.pools_last_token)
    return {"config": head_config_to_adapterhub(config, pooling), "name": piece.name}, tensors


_WRITERS = {"adapter": _write_adapter, "fusion": _write_fusion, "head": _write_head}
