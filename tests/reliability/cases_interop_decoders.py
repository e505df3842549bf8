"""Bad-input cases at one boundary, AdapterHub's format on decoders and encoder-decoders: adapters, fusions and heads
of GPT-2, Llama, Qwen, T5 and BART read from and written to AdapterHub folders."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers

import adapterfusion as af
from adapterfusion.interop import load_adapterhub
from adapterfusion.interop.adapterhub import piece_to_adapterhub
from catalogue import Action, BadInput, edit_json, load_into
from tiny_decoders import tiny_decoder

B = BadInput
GROUP = "AdapterHub decoders"

_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "adapterhub"
_DECODERS, _HEADS = _FIXTURES / "decoders", _FIXTURES / "decoder_heads"


# ---- helpers -------------------------------------------------------------------------------------------------------
def _base(fixtures: Path, model_type: str) -> af.AdaptedModel:
    """The fixture's base model (a causal LM, or a seq2seq LM for BART and T5), wrapped."""
    auto = json.loads((fixtures / model_type / "manifest.json").read_text())["auto_class"]
    base = getattr(transformers, auto).from_pretrained(
        fixtures / model_type / "base_model", dtype=torch.float32, attn_implementation="eager"
    )
    return af.wrap(base.eval())


def _copied(source: Path, folder: Path, config: str = "", edit: Callable[[dict], Any] | None = None) -> Path:
    """A copy of the AdapterHub folder `source` in `folder`, its file `config` edited by `edit`."""
    copy = folder / source.name
    shutil.copytree(source, copy)
    if edit is not None:
        edit_json(copy / config, edit)
    return copy


def _head_with(edit: Callable[[dict], Any]) -> Callable[[Path], Action]:
    """model.load_head(<GPT-2's AdapterHub classification head 'sst' (2 layers, 3 labels) edited by `edit`>)."""

    def prepare(folder: Path) -> Action:
        model = _base(_HEADS, "gpt2")
        return load_into(model, "head", _copied(_HEADS / "gpt2" / "adapters" / "sst", folder, "head_config.json", edit))

    return prepare


def _misspelt_activation(document: dict) -> None:
    config = document["config"]
    config["activation_functon"] = "relu"
    del config["activation_function"]


def _fusion_with(edit: Callable[[dict], Any]) -> Callable[[Path], Action]:
    """model.load_fusion(<GPT-2's AdapterHub fusion of pf, pf_tanh and pf_gelu, edited by `edit`>), its adapters
    loaded first."""

    def prepare(folder: Path) -> Action:
        model = _base(_DECODERS, "gpt2")
        for name in ("pf", "pf_tanh", "pf_gelu"):
            model.load_adapter(_DECODERS / "gpt2" / "adapters" / name)
        return load_into(
            model,
            "fusion",
            _copied(_DECODERS / "gpt2" / "fusions" / "pf_dynamic", folder, "adapter_fusion_config.json", edit),
        )

    return prepare


def _gpt2_adapter_into_llama(folder: Path) -> Action:
    """model.load_adapter(<GPT-2's AdapterHub adapter, its model_type and hidden_size removed>) on a Llama."""

    def strip(document: dict) -> None:
        del document["model_type"], document["hidden_size"]

    model = _base(_DECODERS, "llama")
    return load_into(
        model, "adapter", _copied(_DECODERS / "gpt2" / "adapters" / "pf", folder, "adapter_config.json", strip)
    )


def _llama_adapter_with(edit: Callable[[dict], Any]) -> Callable[[Path], Action]:
    """model.load_adapter(<Llama's AdapterHub adapter 'pf', its adapter_config.json edited by `edit`>) on a Llama."""

    def prepare(folder: Path) -> Action:
        model = _base(_DECODERS, "llama")
        adapter = _copied(_DECODERS / "llama" / "adapters" / "pf", folder, "adapter_config.json", edit)
        return load_into(model, "adapter", adapter)

    return prepare


def _adapter_with_labels(folder: Path) -> Action:
    model = _base(_DECODERS, "gpt2")
    source = _copied(_DECODERS / "gpt2" / "adapters" / "pf", folder)
    return lambda: load_adapterhub(model, "adapter", source, labels=["negative", "positive"])


def _piece_with_layout_of(model_type: str, **shallower: Any) -> Callable[[Path], Action]:
    """piece_to_adapterhub(<adapter 'a' of a 4-layer T5 (4 encoder, 4 decoder layers)>, folder, <the layout of a
    `model_type` with `shallower`>)."""

    def prepare(folder: Path) -> Action:
        deep = af.wrap(tiny_decoder("t5", num_layers=4, num_decoder_layers=4))
        deep.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4, positions=("cross", "output")))
        layout = af.wrap(tiny_decoder(model_type, **shallower)).layout()
        return lambda: piece_to_adapterhub(deep.export_piece("adapter", "a"), folder / "a", layout)

    return prepare


CASES: tuple[BadInput, ...] = (
    B(
        "adapterhub-head-option-misspelt",
        GROUP,
        "model.load_head(<GPT-2's AdapterHub head whose head_config.json spells activation_function "
        "'activation_functon': 'relu'>) (was loaded as a tanh head around the relu-trained weights: adapters fails on "
        "an unknown option, we dropped it unread)",
        af.SavedSettingError,
        ("head_config.json", "['activation_functon']", "not options of that head", "correct the spelling"),
        _head_with(_misspelt_activation),
    ),
    B(
        "adapterhub-tagging-head-with-bias-option",
        GROUP,
        "model.load_head(<GPT-2's AdapterHub classification head turned into head_type 'tagging', keeping its bias "
        "and use_pooler options>) (was loaded as a tagging head; adapters' TaggingHead takes neither and fails on "
        "them)",
        af.SavedSettingError,
        ("tagging head option(s) ['bias', 'use_pooler']", "adapters 1.3.0's takes", "edited by hand"),
        _head_with(lambda document: document["config"].update(head_type="tagging")),
    ),
    B(
        "adapterhub-causal-lm-head",
        GROUP,
        "model.load_head(<an AdapterHub head_config.json of head_type 'causal_lm'>) on a GPT-2 (was 'not supported' "
        "with a list of head types, not saying that the wrapped LM's own output layer is that head)",
        af.SavedSettingError,
        ("head_type='causal_lm' is not supported", "AutoModelForCausalLM", "load only the adapter"),
        _head_with(lambda document: document.update(config={"head_type": "causal_lm", "layers": 1})),
    ),
    B(
        "adapterhub-fusion-adapter-names-edited",
        GROUP,
        "model.load_fusion(<GPT-2's AdapterHub fusion 'pf,pf_tanh,pf_gelu' whose adapter_names were edited to "
        "['pf', 'pf_tanh']>) (was loaded as a fusion of 2 adapters, where adapters fuses the 3 its name lists)",
        af.SerializationError,
        ("names the fusion 'pf,pf_tanh,pf_gelu'", "adapter_names are ['pf', 'pf_tanh']", "edited by hand"),
        _fusion_with(lambda document: document.update(adapter_names=["pf", "pf_tanh"])),
    ),
    B(
        "adapterhub-fusion-adapter-names-reordered",
        GROUP,
        "model.load_fusion(<GPT-2's AdapterHub fusion whose adapter_names were reordered to pf_tanh, pf, pf_gelu>) "
        "(was loaded as fusion 'pf_tanh-pf-pf_gelu', in another order than adapters fuses them)",
        af.SerializationError,
        ("adapter_names are ['pf_tanh', 'pf', 'pf_gelu']", "AdapterHub fuses the adapters the name lists"),
        _fusion_with(lambda document: document.update(adapter_names=["pf_tanh", "pf", "pf_gelu"])),
    ),
    B(
        "adapterhub-gpt2-keys-on-llama-called-encoder",
        GROUP,
        "model.load_adapter(<GPT-2's AdapterHub adapter without model_type and hidden_size>) on a Llama (was 'not "
        "at an adapter site of this llama encoder': a decoder called an encoder)",
        af.SerializationError,
        ("'transformer.h.", "not at an adapter site of this llama decoder", "'[model.]layers.<i>.<site>.adapters."),
        _gpt2_adapter_into_llama,
    ),
    B(
        "load-adapterhub-adapter-with-labels",
        GROUP,
        "load_adapterhub(model, 'adapter', <GPT-2's AdapterHub adapter>, labels=['negative', 'positive']) (the labels "
        "were ignored: only a head's are checked)",
        af.ConfigError,
        ("load_adapterhub(kind='adapter') got labels=", "only a head has labels", "kind='head'"),
        _adapter_with_labels,
    ),
    B(
        "piece-to-adapterhub-layout-of-shallower-t5",
        GROUP,
        "piece_to_adapterhub(<an adapter of a T5 with 4 encoder and 4 decoder layers>, folder, <a 2+2-layer T5's "
        "layout>) (KeyError 'layer.4.cross' from the key lookup)",
        af.IncompatibleModelError,
        ("adapter 'a' has weights at ['layer.4.cross', 'layer.4.output', ", "t5 encoder-decoder does not have"),
        _piece_with_layout_of("t5"),
    ),
    B(
        "piece-to-adapterhub-layout-of-wider-t5",
        GROUP,
        "piece_to_adapterhub(<an adapter of a T5 of hidden size 32>, folder, <the layout of a deeper T5 of hidden "
        "size 64>) (written: a file saying hidden_size 64 around weights of 32)",
        af.IncompatibleModelError,
        ("of shape (8, 32)", "does not fit this t5 encoder-decoder's hidden size 64", "model.layout()"),
        _piece_with_layout_of("t5", d_model=64, num_layers=4, num_decoder_layers=4),
    ),
    B(
        "adapterhub-head-num-labels-billion",
        GROUP,
        "model.load_head(<GPT-2's AdapterHub 3-label head whose head_config.json says num_labels 10**9>) (a "
        "MemoryError, or the process killed, from comparing label2id with a list of 10**9 ids; a smaller count built "
        "its output layer before the weights were compared)",
        af.SerializationError,
        ("head_config.json makes a head of 1000000000 output(s) (num_labels)", "'4.weight'", "has 3"),
        _head_with(lambda document: document["config"].update(num_labels=10**9)),
    ),
    B(
        "adapterhub-llama-hidden-size-string",
        GROUP,
        'model.load_adapter(<Llama\'s AdapterHub adapter whose adapter_config.json says "hidden_size": "32">) (was '
        "\"base_model.hidden_size='32' has type str\", a field of our format that AdapterHub's file does not have)",
        af.SerializationError,
        ("adapter_config.json: hidden_size='32' has type str", "AdapterHub writes the model's hidden_size there"),
        _llama_adapter_with(lambda document: document.update(hidden_size="32")),
    ),
    B(
        "adapterhub-scaling-beyond-float32",
        GROUP,
        "model.load_adapter(<Llama's AdapterHub adapter whose adapter_config.json says scaling 1e308>) (was loaded: "
        "1e308 is inf in the float32 model, so every output of the adapted model was inf or NaN, without a word)",
        af.ConfigError,
        ("scaling=1e+308 is beyond float32's range",),
        _llama_adapter_with(lambda document: document["config"].update(scaling=1e308)),
    ),
)
