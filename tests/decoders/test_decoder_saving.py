"""Saving and loading on decoders and encoder-decoders: each piece alone and whole setups (save_pretrained /
from_pretrained, the base given as a model or as its folder) give back the same outputs, bit for bit, with the
wrapped model's LM head."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import adapterfusion as af
from adapterfusion.piece import SETUP_FILE
from tiny_decoders import randomise_pieces, tiny_decoder, tiny_decoder_inputs
from tolerances import assert_close


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


@pytest.mark.parametrize("model_type", ["gpt2", "t5"])
@pytest.mark.parametrize(
    ("saved_over", "loaded_over", "message"),
    [
        (
            af.AdapterConfig.pfeiffer(reduction_factor=4),
            af.AdapterConfig.houlsby(4, train_layer_norm=False),
            r"no weights for \['layer.0.attention'.*where the adapters it fuses place it.*positions=\['attention', "
            r"'output'\]",
        ),
        (
            af.AdapterConfig.houlsby(4, train_layer_norm=False),
            af.AdapterConfig.pfeiffer(reduction_factor=4),
            r"weights at \['layer.0.attention'.*where the adapters it fuses place none.*positions=\['output'\]",
        ),
        (
            af.AdapterConfig.pfeiffer(reduction_factor=4),
            af.AdapterConfig.pfeiffer(reduction_factor=4, leave_out=[0]),
            r"weights at \['layer.0.output'\], where the adapters it fuses place none.*leave_out=\[0\]",
        ),
    ],
)
def test_a_fusion_saved_over_adapters_placed_otherwise_is_refused_naming_their_placement(
    model_type: str, saved_over: af.AdapterConfig, loaded_over: af.AdapterConfig, message: str, tmp_path: Path
) -> None:
    """A fusion sits where its adapters do: loaded over adapters of another placement it was 'holds weights for the
    sites of layers [0, 1] but none for layers [0, 1] ... saved from an encoder with another number of layers', or
    'sites this encoder's config does not place', blaming the encoder; the model is left as it was."""
    model = af.wrap(tiny_decoder(model_type))
    for name in ("a", "b"):
        model.add_adapter(name, saved_over)
    model.add_fusion("f", ["a", "b"])
    model.save_fusion("f", tmp_path / "f")
    again = af.wrap(tiny_decoder(model_type))
    for name in ("a", "b"):
        again.add_adapter(name, loaded_over)
    before = again.state_dict()
    with pytest.raises(af.IncompatibleModelError, match=message + r".*Load the adapters it was saved with"):
        again.load_fusion(tmp_path / "f")
    assert again.fusion_names == [] and again.state_dict().keys() == before.keys()


def _edited_setup(folder: Path, edit: Callable[[dict], None]) -> Path:
    """A tiny gpt2 setup (adapters a and b, fusion f, head h) saved in `folder`, its index changed by `edit`."""
    _setup("gpt2").save_pretrained(folder)
    index = json.loads((folder / SETUP_FILE).read_text())
    edit(index)
    (folder / SETUP_FILE).write_text(json.dumps(index))
    return folder


@pytest.mark.parametrize(
    ("edit", "error", "message"),
    [
        (lambda i: i["active"].update(adapter=3), af.SerializationError, r"active.adapter=3 has type int"),
        (lambda i: i["active"].update(fusion="zz"), af.SerializationError, r"names the fusion 'zz'.*do not list"),
        (lambda i: i["active"].update(skip_layers=[9]), af.ConfigError, r"adapterfusion_setup.json: skip_layers \[9\]"),
        (lambda i: i["pieces"].append(dict(i["pieces"][0])), af.SerializationError, r"adapter 'a' more than once"),
        (lambda i: i["base_model"].update({"class": 5}), af.SerializationError, r"base_model.class=5 has type int"),
        (
            lambda i: i["base_model"].update({"class": "BertModel"}),
            af.SerializationError,
            r"base_model.class='BertModel' is a class of 'bert' models, but base_model.model_type is 'gpt2'",
        ),
    ],
)
def test_a_setup_index_edited_by_hand_is_refused_naming_the_field(
    edit: Callable[[dict], None], error: type[Exception], message: str, tmp_path: Path
) -> None:
    """Each was another error blaming the model ('activate() takes an adapter or a fusion, not both', 'an adapter
    named 'a' already exists', 'no fusion named 'zz' is loaded; add it with add_fusion'), a TypeError from getattr,
    or the base's checkpoint loaded into a BertModel with every weight missing; the base folder loads nothing."""
    tiny_decoder("gpt2", dtype=torch.float64).save_pretrained(tmp_path / "base")
    folder = _edited_setup(tmp_path / "setup", edit)
    with pytest.raises(error, match=message):
        af.AdaptedModel.from_pretrained(tmp_path / "base", folder)


@pytest.mark.parametrize("model_type", ["gpt2", "bart"])
def test_a_setup_index_listing_its_fusion_first_loads_to_the_same_outputs(model_type: str, tmp_path: Path) -> None:
    """Pieces load adapters first whatever order the index lists them in: a fusion listed before its adapters was
    refused as 'not loaded; load_adapter() each of them first', which no user of from_pretrained can do."""
    model = _setup(model_type)
    model.save_pretrained(tmp_path / "setup")
    index = json.loads((tmp_path / "setup" / SETUP_FILE).read_text())
    index["pieces"].reverse()
    (tmp_path / "setup" / SETUP_FILE).write_text(json.dumps(index))
    again = af.AdaptedModel.from_pretrained(tiny_decoder(model_type, dtype=torch.float64), tmp_path / "setup").eval()
    inputs = tiny_decoder_inputs(model_type)
    with torch.no_grad():
        assert torch.equal(again(**inputs).logits, model(**inputs).logits)


@pytest.mark.parametrize("model_type", ["llama", "t5"])
def test_a_bf16_setup_loads_into_fp32_and_back_unchanged(model_type: str, tmp_path: Path) -> None:
    """Pieces take the dtype of the model they are loaded into; bf16 -> fp32 -> bf16 gives back every tensor."""
    model = _setup(model_type, tiny_decoder(model_type, dtype=torch.bfloat16))
    randomise_pieces(model, seed=3)
    model.save_pretrained(tmp_path / "bf16")
    with pytest.warns(af.BaseModelMismatchWarning, match="another precision"):  # the base's weights were cast
        wide = af.AdaptedModel.from_pretrained(tiny_decoder(model_type), tmp_path / "bf16")
    wide.save_pretrained(tmp_path / "fp32")
    with pytest.warns(af.BaseModelMismatchWarning, match="another precision"):
        back = af.AdaptedModel.from_pretrained(tiny_decoder(model_type, dtype=torch.bfloat16), tmp_path / "fp32")
    saved, widened, restored = (m.state_dict() for m in (model, wide, back))
    pieces = [key for key in saved if ".adapters." in key or ".fusions." in key or key.startswith("heads.")]
    assert pieces
    for key in pieces:
        value = saved[key]
        assert widened[key].dtype == torch.float32 and torch.equal(widened[key], value.float()), key
        assert restored[key].dtype == torch.bfloat16 and torch.equal(restored[key], value), key


def test_a_task_models_own_output_layer_is_saved_with_the_setup(tmp_path: Path) -> None:
    """A GPT-2 sequence classifier's own `score`, trained with no head of ours, was silently dropped: save_pretrained
    held no piece of it, and from_pretrained onto the base gave the base's score, other outputs with no word. The
    setup now saves it (own_head.safetensors, its digest in the index) and from_pretrained puts it back; a base of
    another number of labels is refused."""
    from transformers import GPT2ForSequenceClassification

    from adapterfusion.serialization.setup_index import OWN_HEAD_FILE
    from adapterfusion.trainable import train_adapter
    from tiny_decoders import tiny_decoder_config, tiny_decoder_inputs

    torch.manual_seed(0)
    base = GPT2ForSequenceClassification(tiny_decoder_config("gpt2", num_labels=2)).eval()
    base.save_pretrained(tmp_path / "base")
    model = af.wrap(base)
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    train_adapter(model, "a")  # no head of ours: the task model's own score trains
    with torch.no_grad():
        model.model.score.weight.add_(1.0)
    model.eval()
    inputs = tiny_decoder_inputs("gpt2")
    with torch.no_grad():
        expected = model(**inputs).logits
    model.save_pretrained(tmp_path / "trained")
    assert (tmp_path / "trained" / OWN_HEAD_FILE).is_file()
    loaded = af.AdaptedModel.from_pretrained(tmp_path / "base", tmp_path / "trained").eval()
    assert torch.equal(loaded.model.score.weight, model.model.score.weight)
    with torch.no_grad():
        assert_close(loaded(**inputs).logits, expected)  # another load of the base: float32 rounding apart
    GPT2ForSequenceClassification(tiny_decoder_config("gpt2", num_labels=3)).save_pretrained(tmp_path / "three")
    with pytest.raises(af.IncompatibleModelError, match="own output layer"):
        af.AdaptedModel.from_pretrained(tmp_path / "three", tmp_path / "trained")
