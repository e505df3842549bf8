"""Saving and loading on decoders and encoder-decoders: each piece alone and whole setups (save_pretrained /
from_pretrained, the base given as a model or as its folder) give back the same outputs, bit for bit, with the
wrapped model's LM head."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import adapterfusion as af
from tiny_decoders import tiny_decoder, tiny_decoder_inputs


def _setup(model_type: str, base: torch.nn.Module | None = None) -> af.AdaptedModel:
    model = af.wrap(base if base is not None else tiny_decoder(model_type, dtype=torch.float64))
    config = af.AdapterConfig.houlsby(4, init="bert", train_layer_norm=False)
    for name in ("a", "b"):
        model.add_adapter(name, config)
    model.add_fusion("f", ["a", "b"], af.FusionConfig.dynamic(value_init_noise=0.1))
    if model.architecture.causal:
        model.add_head("h", af.ClassificationHead(num_labels=3, pooling="last"))
    model.activate(fusion="f")
    return model.eval()


@pytest.mark.parametrize("model_type", ["llama", "gpt2", "t5", "bart"])
def test_a_decoder_setup_saves_and_loads_to_the_same_outputs(model_type: str, tmp_path: Path) -> None:
    base_dir = tmp_path / "base"
    tiny_decoder(model_type, dtype=torch.float64).save_pretrained(base_dir)

    def loaded_base() -> torch.nn.Module:  # the saved class, as from_pretrained must load it from the folder
        return type(tiny_decoder(model_type)).from_pretrained(base_dir)

    model = _setup(model_type, loaded_base())
    inputs = tiny_decoder_inputs(model_type)
    with torch.no_grad():
        expected = model(**inputs).logits
    model.save_pretrained(tmp_path / "setup")
    for base in (loaded_base(), base_dir):
        again = af.AdaptedModel.from_pretrained(base, tmp_path / "setup").eval()
        assert type(again.model) is type(model.model)  # a folder loads as the class saved: the LM head is kept
        assert again.active_fusion == "f" and again.adapter_names == model.adapter_names
        with torch.no_grad():
            assert torch.equal(again(**inputs).logits, expected)


def test_decoder_pieces_save_and_load_one_by_one(tmp_path: Path) -> None:
    model = _setup("qwen2")
    again = af.wrap(tiny_decoder("qwen2", dtype=torch.float64)).eval()
    for name in ("a", "b"):
        model.save_adapter(name, tmp_path / name)
        again.load_adapter(tmp_path / name)
    model.save_fusion("f", tmp_path / "f")
    model.save_head("h", tmp_path / "h")
    again.load_fusion(tmp_path / "f")
    again.load_head(tmp_path / "h")
    inputs = tiny_decoder_inputs("qwen2")
    for choice in (dict(fusion="f"), dict(fusion="f", head="h"), dict(adapter="b", head="h")):
        model.activate(**choice)
        again.activate(**choice)
        with torch.no_grad():
            assert torch.equal(again(**inputs).logits, model(**inputs).logits), choice
