"""The base model a setup was saved on, as from_pretrained meets it: the encoder loaded from a folder or Hub id as the
class the setup was saved with, refused where it is another model type or its checkpoint lacks a part of that class
(transformers would fill it at random), and the task model's own output layer, which no piece holds, saved beside
the pieces (own_head_state) and put back on load (load_own_head).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load as load_safetensors_bytes
from torch import nn

from adapterfusion.encoder_loading import load_encoder_model_and_missing, unloaded_parts
from adapterfusion.encoders import resolve_encoder
from adapterfusion.errors import ConfigError, IncompatibleModelError, SerializationError
from adapterfusion.io.documents import read_bytes, read_json
from adapterfusion.serialization.setup_index import OWN_HEAD_DIGEST, OWN_HEAD_FILE
from adapterfusion.trainable import own_head_parameters

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


def base_encoder(
    base: nn.Module | str | os.PathLike, model_class: type, saved: Mapping[str, Any], index: Path
) -> nn.Module:
    """`base` itself, or loaded from its folder or Hub id as the class the setup was saved with (a decoder's
    *ForCausalLM keeps its LM head); a local folder of another model type than the setup's is refused before
    loading (transformers would load it into the saved class with every weight missing)."""
    if isinstance(base, model_class):
        raise ConfigError(
            "base is already an AdaptedModel; pass the plain HuggingFace encoder (model.unload() "
            "returns it), its folder or its Hub id"
        )
    if isinstance(base, nn.Module):
        return base
    encoder = resolve_encoder(base, tokenizer=False)
    _check_base_type(encoder.folder, saved, index)
    class_name = _saved_class(saved, index)
    model, missing = load_encoder_model_and_missing(encoder, class_name)
    _check_base_parts(str(encoder), model, missing, class_name, saved, index)
    return model


def _check_base_parts(
    base: str, model: nn.Module, missing: frozenset[str], class_name: str | None, saved: Mapping[str, Any], index: Path
) -> None:
    """Refuse a base whose checkpoint lacks a part of the class the setup was saved on: its LM head (a bare
    LlamaModel's folder loaded as LlamaForCausalLM, whose lm_head is then drawn at random) or, for an
    encoder-decoder, its whole decoder (a T5EncoderModel's folder loaded as T5ForConditionalGeneration).
    transformers fills such weights at random and only logs it, so generate() and every output through them was
    noise with no error. Which weights are a part's own, and which the checkpoint lacked, says
    encoder_loading.unloaded_parts."""
    if class_name is None:
        return
    get_decoder = getattr(model, "get_decoder", None)
    decoder = get_decoder() if saved.get("decoder_layers") is not None and callable(get_decoder) else None
    parts = unloaded_parts(model, missing, [decoder] if isinstance(decoder, nn.Module) else [])
    decoder_path = next((path for path, module in model.named_modules() if module is decoder), None)
    lacking = [
        f"{'its decoder' if path == decoder_path else f'its {path}'} ({path}.*: {len(names)} weight(s) missing)"
        for path, names in parts.items()
    ]
    if lacking:
        raise IncompatibleModelError(
            f"{index} was saved on a {class_name}, but the base {base!r} holds a checkpoint without "
            f"{' or '.join(lacking)}: it was saved from a model without that part (AutoModel, or an encoder alone), "
            "and transformers would fill it with random weights, making every output that passes through it noise. "
            f"Pass the folder of the whole model, saved from {class_name}, or the loaded model itself as base"
        )


def _saved_class(saved: Mapping[str, Any], index: Path) -> str | None:
    """The transformers class name the setup's base was saved as, checked against its model type: a number there
    failed inside getattr, and a class of another model type (BertModel for a 'gpt2' setup) loaded the base's
    checkpoint into it with every weight missing, to fail only when wrapped."""
    import transformers

    name = saved.get("class")
    if name is None:
        return None
    if not isinstance(name, str):
        raise SerializationError(
            f"{index}: base_model.class={name!r} has type {type(name).__name__}; expected a transformers class name "
            "such as 'GPT2LMHeadModel'. The file is damaged or was edited by hand: save the setup again"
        )
    found = getattr(getattr(getattr(transformers, name, None), "config_class", None), "model_type", None)
    expected = saved.get("model_type")
    if isinstance(found, str) and found and isinstance(expected, str) and found != expected:
        raise SerializationError(
            f"{index}: base_model.class={name!r} is a class of {found!r} models, but base_model.model_type is "
            f"{expected!r}; the file is damaged or was edited by hand: save the setup again"
        )
    return name


def _check_base_type(folder: Path | None, saved: Mapping[str, Any], index: Path) -> None:
    """IncompatibleModelError when the local `folder`'s config.json names another model_type than `saved`."""
    expected = saved.get("model_type")
    if folder is None or not expected or not (folder / "config.json").is_file():
        return
    document = read_json(folder / "config.json")
    found = document.get("model_type") if isinstance(document, dict) else None
    if found and found != expected:
        raise IncompatibleModelError(
            f"{index} was saved on a {expected!r} model ({saved.get('name_or_path') or 'unnamed'}), but the base "
            f"{str(folder)!r} is a {found!r} model; pass the base the setup was trained on (base=..., or --base "
            "for adapterfusion serve)"
        )


def own_head_state(model: AdaptedModel) -> dict[str, torch.Tensor]:
    """The wrapped task model's own output layer (trainable.own_head_parameters: score, classifier) by parameter
    name: trained when no head of ours is active, and a part of no piece, so a setup saves it beside them. {} for a
    bare or language model."""
    parameters = {id(parameter) for parameter in own_head_parameters(model)}
    return {name: parameter for name, parameter in model.model.named_parameters() if id(parameter) in parameters}


def load_own_head(model: AdaptedModel, folder: Path, saved: Mapping[str, Any], index: Path) -> None:
    """The task model's own output layer saved beside the pieces, put into the loaded base (whose checkpoint holds
    it untrained, or not at all, drawn at random). A setup saved without one (a bare or language model, or saved
    before this file existed) leaves the base's as it is."""
    digest = saved.get(OWN_HEAD_DIGEST)
    if digest is None:
        return
    path = folder / OWN_HEAD_FILE
    data = read_bytes(path, f"{index} lists the task model's own output layer there: save the setup again")
    if hashlib.sha256(data).hexdigest() != digest:
        raise SerializationError(
            f"{path} is not the file {index} was saved with (its digest differs): a save over the setup was cut off "
            "between its renames, or the file was replaced; save the setup again"
        )
    tensors = load_safetensors_bytes(data)
    own = own_head_state(model)
    shapes = {name: tuple(tensor.shape) for name, tensor in tensors.items()}
    if shapes != {name: tuple(parameter.shape) for name, parameter in own.items()}:
        raise IncompatibleModelError(
            f"{path} holds the own output layer {shapes} of the {saved.get('class')} the setup was saved on, but the "
            f"base {type(model.model).__name__} has {dict((n, tuple(p.shape)) for n, p in own.items())}; pass as base "
            "the model the setup was saved on (the same task class and number of labels)"
        )
    with torch.no_grad():
        for name, parameter in own.items():
            parameter.copy_(tensors[name])
