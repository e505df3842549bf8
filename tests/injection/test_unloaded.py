"""After unload() the AdaptedModel has no sites: everything that would add, activate, train, save or run a piece on
it is refused (an adapter added to it used to be kept by name and never run), and the plain model it gave back is
unchanged."""

from __future__ import annotations

import pytest
import torch

import adapterfusion as af
from tiny_models import tiny_encoder, tiny_inputs

USES = {
    "add_adapter": lambda m, d: m.add_adapter("c"),
    "add_fusion": lambda m, d: m.add_fusion("g", ["a"]),
    "add_head": lambda m, d: m.add_head("h2", af.ClassificationHead()),
    "load_adapter": lambda m, d: m.load_adapter(d / "a", name="c"),
    "load_head": lambda m, d: m.load_head(d / "h", name="h2"),
    "activate": lambda m, d: m.activate(adapter="a"),
    "activated": lambda m, d: m.activated(adapter="a").__enter__(),
    "train_adapter": lambda m, d: m.train_adapter("a"),
    "train_head": lambda m, d: m.train_head("h"),
    "set_fusion_step": lambda m, d: m.set_fusion_step(3),
    "save_adapter": lambda m, d: m.save_adapter("a", d / "again"),
    "save_pretrained": lambda m, d: m.save_pretrained(d / "setup"),
    "delete_adapter": lambda m, d: m.delete_adapter("a"),
    "forward": lambda m, d: m(**tiny_inputs()),
    "parameter_report": lambda m, d: m.parameter_report(),
    "unload": lambda m, d: m.unload(),
}


@pytest.mark.parametrize("use", sorted(USES))
def test_an_unloaded_model_refuses_to_be_used(tmp_path, use):
    model = af.wrap(tiny_encoder("bert").eval())
    model.add_adapter("a")
    model.add_head("h", af.ClassificationHead())
    model.save_adapter("a", tmp_path / "a")
    model.save_head("h", tmp_path / "h")
    plain = model.unload()
    with torch.no_grad():
        expected = plain(**tiny_inputs()).last_hidden_state
    with pytest.raises(af.ModelUnloadedError, match=r"this model was unloaded.*af\.wrap"):
        USES[use](model, tmp_path)
    with torch.no_grad():
        assert torch.equal(plain(**tiny_inputs()).last_hidden_state, expected)
    assert not any(isinstance(module, af.BottleneckAdapter) for module in plain.modules())
