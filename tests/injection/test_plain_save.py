"""The wrapped model's own save_pretrained while af.wrap holds it (injection/plain_save.py): it wrote the wrapped
state dict (`<site>.base_layer.` keys and the adapters' weights), and transformers loaded that checkpoint with every
adapted sub-layer freshly initialised (outputs 0.08-0.28 off). It writes the plain model now: the reloaded model
holds exactly the weights the model had before it was wrapped."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import transformers

import adapterfusion as af
from tiny_decoders import tiny_decoder
from tiny_models import randomise, tiny_encoder


def _same_weights(loaded: torch.nn.Module, expected: dict[str, torch.Tensor]) -> None:
    got = loaded.state_dict()
    assert set(expected) <= set(got) and not any("base_layer" in key or "adapters." in key for key in got)
    for key, value in expected.items():
        assert torch.equal(got[key], value), key


@pytest.mark.parametrize("model_type", ["gpt2", "llama"])
def test_a_wrapped_decoder_saves_as_the_plain_model(model_type, tmp_path):
    base = tiny_decoder(model_type)
    expected = {key: value.clone() for key, value in base.state_dict().items()}
    model = af.wrap(base)
    model.add_adapter("a", "houlsby")
    randomise(torch.nn.ModuleList(site.adapters["a"] for site in model.sites_with_adapter("a")), std=0.3)
    model.activate(adapter="a")
    base.save_pretrained(tmp_path / "plain")
    _same_weights(transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "plain"), expected)


def test_a_wrapped_encoder_saves_as_the_plain_model_and_unload_gives_the_class_method_back(tmp_path):
    base = tiny_encoder("bert")
    expected = {key: value.clone() for key, value in base.state_dict().items()}
    model = af.wrap(base)
    model.add_adapter("a")
    copied = pickle.loads(pickle.dumps(model))  # the override travels with the model, bound to the copy
    copy.deepcopy(model).model.save_pretrained(tmp_path / "deep")
    copied.model.save_pretrained(tmp_path / "pickled")
    base.save_pretrained(tmp_path / "plain", state_dict=None)
    for folder in ("plain", "pickled", "deep"):
        _same_weights(transformers.AutoModel.from_pretrained(tmp_path / folder), expected)
    plain = model.unload()
    assert "save_pretrained" not in plain.__dict__
