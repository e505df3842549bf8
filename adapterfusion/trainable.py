"""What trains: each call freezes every parameter of an AdaptedModel, then unfreezes one piece (with its head, and the
encoder where the setup trains it) and activates what it trains. AdaptedModel.train_adapter, train_fusion and
train_head are these (training/setups.py picks one per setup), and parameter_report counts what trains. Which
parameters are whose (adapter_parameters, fusion_parameters, encoder_parameters, and the sites holding each piece)
is worked out here too, for the model's methods of those names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from adapterfusion._validation import check_bool
from adapterfusion.blocks import Block
from adapterfusion.errors import ConfigError
from adapterfusion.forward_inputs.encoder_decoder import is_seq2seq
from adapterfusion.fusion.layer import FusionLayer
from adapterfusion.injection.site import AdapterSite
from adapterfusion.parameters import ParameterReport, build_parameter_report

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


def sites_with_adapter(model: AdaptedModel, name: str) -> list[AdapterSite]:
    """The sites that hold adapter `name` (its positions, without its leave_out layers), in layer order; a name that
    is no loaded adapter (a fusion's, a typo) is refused, which had been an empty list: no parameters, no sites."""
    model.require("adapter", name)  # a list was torch's "unhashable type" from ModuleDict
    return [site for site in model.sites if name in site.adapters]


def sites_with_fusion(model: AdaptedModel, name: str) -> list[AdapterSite]:
    """The sites that hold a layer of fusion `name`, in layer order; refused for a name that is no loaded fusion."""
    model.require("fusion", name)
    return [site for site in model.sites if name in site.fusions]


def fusion_layers(model: AdaptedModel, name: str) -> list[FusionLayer]:
    """Fusion `name`'s attention layers, whose V the loss regularises (a ScaLearn fusion has none)."""
    layers = [site.fusions[name] for site in sites_with_fusion(model, name)]
    return [layer for layer in layers if isinstance(layer, FusionLayer)]


def adapter_parameters(model: AdaptedModel, name: str) -> list[nn.Parameter]:
    """Adapter `name`'s parameters at every site (with Houlsby's own LayerNorm copies)."""
    return [p for site in sites_with_adapter(model, name) for p in site.adapters[name].parameters()]


def fusion_parameters(model: AdaptedModel, name: str) -> list[nn.Parameter]:
    """Fusion `name`'s parameters at every site (Q/K/V, or ScaLearn's scales), each once: ScaLearn++ shares one
    Parameter among all its sites."""
    found = [p for site in sites_with_fusion(model, name) for p in site.fusions[name].parameters()]
    return list({id(p): p for p in found}.values())


def encoder_parameters(model: AdaptedModel) -> list[nn.Parameter]:
    """The pretrained weights: everything in the HF model that is not an adapter or a fusion layer."""
    added = {id(p) for site in model.sites for module in (site.adapters, site.fusions) for p in module.parameters()}
    return [p for p in model.model.parameters() if id(p) not in added]


def own_head_parameters(model: AdaptedModel) -> list[nn.Parameter]:
    """The wrapped transformers task model's own output layer (score, classifier, classification_head, qa_outputs,
    GPT-2's multiple_choice_head: what transformers initialises anew for the task), which its own loss reads when no
    head of ours is active: its parameters outside the base model and outside the module that holds its output
    embeddings (a language model's pretrained LM head, with its transform: BERT's `cls`, RoBERTa's `lm_head`). None
    for a bare or language model."""
    wrapped: Any = model.model  # a transformers PreTrainedModel; nn.Module types its attributes as Tensor | Module
    if wrapped.base_model is not wrapped:
        body = [wrapped.base_model]
    elif is_seq2seq(wrapped):  # T5ForQuestionAnswering holds its stacks itself
        body = [wrapped.get_encoder(), wrapped.get_decoder(), wrapped.get_input_embeddings()]
    else:
        return []
    output = wrapped.get_output_embeddings()
    if output is not None:
        body += [child for child in wrapped.children() if any(module is output for module in child.modules())]
    known = {id(p) for module in body for p in module.parameters()}
    return [p for p in wrapped.parameters() if id(p) not in known]


def pieces_of_other_dtype(model: AdaptedModel) -> dict[str, torch.dtype]:
    """Each adapter, fusion and head ("adapter 'a'") holding a floating-point weight of another dtype than the
    encoder's embeddings, with that dtype."""
    pieces = [(f"adapter {name!r}", adapter_parameters(model, name)) for name in model.adapter_names]
    pieces += [(f"fusion {name!r}", fusion_parameters(model, name)) for name in model.fusion_names]
    pieces += [(f"head {name!r}", list(model.heads[name].parameters())) for name in model.head_names]
    odd = {}
    for piece, parameters in pieces:
        other = next((p.dtype for p in parameters if p.is_floating_point() and p.dtype != model.dtype), None)
        if other is not None:
            odd[piece] = other
    return odd


def encoder_dtypes(model: AdaptedModel) -> dict[torch.dtype, str]:
    """Each floating-point dtype among the encoder's own weights, with the name of its first weight: more than one
    where part of the encoder was cast by hand (`model.model.encoder.to(torch.bfloat16)`), and where transformers
    keeps some modules in float32 (`_keep_in_fp32_modules`, e.g. T5's feed-forward output in a float16 model)."""
    added = {id(p) for site in model.sites for module in (site.adapters, site.fusions) for p in module.parameters()}
    found: dict[torch.dtype, str] = {}
    for name, parameter in model.model.named_parameters():
        if id(parameter) not in added and parameter.is_floating_point():
            found.setdefault(parameter.dtype, name)
    return found


def train_adapter(model: AdaptedModel, name: str, head: str | None = None, train_encoder: bool = False) -> None:
    """Freeze everything but adapter `name` (with its own LayerNorm copies, for Houlsby) and its head. The head
    defaults to the one named like the adapter, else the active head; with none, the wrapped task model's own output
    layer trains (own_head_parameters). train_encoder=True also trains the encoder (MT-A, Stickland & Murray 2019)."""
    check_bool(train_encoder, "train_encoder")  # "no" would train the whole encoder: a str is truthy
    _refuse_block(name, "train_adapter")
    model.require("adapter", name)
    head = _default_head(model, head, name, model.active_head)
    model.activate(adapter=name, head=head, skip_layers=model.skip_layers)
    trainable = model.adapter_parameters(name) + (model.encoder_parameters() if train_encoder else [])
    _set_trainable(model, trainable + _head_parameters(model, head))


def train_fusion(model: AdaptedModel, name: str, head: str | None = None) -> None:
    """Freeze the encoder and all adapters; train the fusion's Q/K/V and the head (explicit, else the one named like
    the fusion, else the active head; with none, the wrapped task model's own output layer)."""
    _refuse_block(name, "train_fusion")
    model.require("fusion", name)
    head = _default_head(model, head, name, model.active_head)
    model.activate(fusion=name, head=head, skip_layers=model.skip_layers)
    _set_trainable(model, model.fusion_parameters(name) + _head_parameters(model, head))


def _refuse_block(name: object, method: str) -> None:
    """A composition block where one piece's name is expected, refused with the way to train under a block."""
    if isinstance(name, Block):
        piece = "f" if method == "train_fusion" else "b"
        raise ConfigError(
            f"{method}({name!r}): {method} trains one piece, named by a string, and a composition block is not one; "
            f"train the piece that should learn, e.g. model.{method}({piece!r}), then run the block with "
            f"model.activate(af.Stack('a', {piece!r}), head=...): activate changes what runs, not what trains"
        )


def train_head(model: AdaptedModel, name: str, train_encoder: bool = False) -> None:
    """The 'Head' baseline (frozen encoder) or, with train_encoder=True, full fine-tuning. Keeps the active adapter or
    fusion running but frozen."""
    check_bool(train_encoder, "train_encoder")
    model.require("head", name)
    model.set_state(dataclasses.replace(model.state, head=name))  # whatever runs keeps running, a block too
    _set_trainable(model, _head_parameters(model, name) + (model.encoder_parameters() if train_encoder else []))


def parameter_report(model: AdaptedModel) -> ParameterReport:
    """Total and trainable parameters of the encoder and of every adapter, fusion and head."""
    pieces = (
        [(name, "adapter", model.adapter_parameters(name)) for name in model.adapter_names]
        + [(name, "fusion", model.fusion_parameters(name)) for name in model.fusion_names]
        + [(name, "head", list(model.heads[name].parameters())) for name in model.head_names]
    )
    return build_parameter_report(model.encoder_parameters(), pieces)


def _set_trainable(model: AdaptedModel, parameters: Iterable[nn.Parameter]) -> None:
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    for parameter in parameters:
        parameter.requires_grad_(True)


def _head_parameters(model: AdaptedModel, head: str | None) -> list[nn.Parameter]:
    """Head `head`'s parameters; with none of ours, those of the wrapped model's own output layer, which its own
    loss then reads (left frozen, an adapter would be fitted to its random initialisation)."""
    return list(model.heads[head].parameters()) if head else own_head_parameters(model)


def _default_head(model: AdaptedModel, explicit: str | None, *candidates: str | None) -> str | None:
    if explicit is not None:
        return explicit
    return next((c for c in candidates if c is not None and c in model.heads), None)
