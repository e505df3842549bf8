"""What runs is one frozen ActiveState: every site holds the model's value, changes make new values, and
`with model.activated(...)` puts back exactly what ran before, also when the block raises."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import adapterfusion as af
from adapterfusion.injection.state import ActiveState
from tiny_models import randomise, tiny_encoder, tiny_inputs


def _model() -> af.AdaptedModel:
    model = af.wrap(tiny_encoder("bert").double())
    for name in ("a", "b", "c"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_adapter("late", af.AdapterConfig.pfeiffer(reduction_factor=4, leave_out=(0,)))
    model.add_fusion("f", ["a", "b", "c"])
    model.add_head("h", af.ClassificationHead(num_labels=2))
    randomise(model, std=0.2)
    return model.eval()


def _output(model: af.AdaptedModel) -> torch.Tensor:
    with torch.no_grad():
        return model(**tiny_inputs()).last_hidden_state


def test_every_site_holds_the_models_one_frozen_value():
    model = _model()
    assert model.state == ActiveState() and all(site.state is model.state for site in model.sites)
    model.activate(fusion="f", head="h", skip_layers=[1])
    model.set_fusion_mask("f", ["c", "a"])
    model.set_fusion_step(7)
    state = model.state
    assert state == ActiveState(
        fusion="f", fused=("a", "b", "c"), head="h", skip_layers=(1,), fusion_masks={"f": ("a", "c")}, fusion_step=7
    )
    assert all(site.state is state for site in model.sites)
    assert (model.active_adapter, model.active_fusion, model.active_head, model.skip_layers) == (None, "f", "h", (1,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.fusion = None  # type: ignore[misc]
    model.activate(adapter="late")
    assert [site.is_active for site in model.sites] == [False, False, False, True]  # Pfeiffer: output site only
    assert model.state.fusion_masks == {"f": ("a", "c")} and model.state.fusion_step == 7  # masks and controls stay


def test_activated_restores_the_state_on_exit_and_on_exceptions():
    model = _model()
    model.activate(adapter="a", head="h", skip_layers=[0])
    model.set_fusion_mask("f", ["b"])
    before, output = model.state, _output(model)
    with model.activated(fusion="f") as inside:
        assert model.state is inside and inside.fusion == "f" and inside.head is None
        assert inside.fusion_masks == {"f": ("b",)}
        model.set_fusion_step(3)
    assert model.state == before and torch.equal(_output(model), output)
    with pytest.raises(RuntimeError, match="boom"), model.activated(adapter="b", skip_layers=[1]):
        model.set_fusion_mask("f", None)
        raise RuntimeError("boom")
    assert model.state == before and all(site.state == before for site in model.sites)
    assert torch.equal(_output(model), output)


def test_activated_refuses_bad_choices_without_changing_anything():
    model = _model()
    model.activate(adapter="a")
    before = model.state
    with pytest.raises(af.NameNotFoundError, match="no fusion named 'nope'"), model.activated(fusion="nope"):
        pass
    with pytest.raises(af.ConfigError, match="parallel_routes"), model.activated(fusion="f", parallel_routes=["x"]):
        pass
    with pytest.raises(af.ConfigError, match="parallel_routes"), model.activated(adapter="a", parallel_routes=["a"]):
        pass
    assert model.state is before


def test_a_piece_deleted_inside_the_block_leaves_the_outer_state_as_delete_would():
    """Deleting the outer state's fusion inside the block ends in the bare encoder on exit, as delete_fusion outside
    a block does (it used to raise on exit, hiding an exception in flight and leaving the block's state)."""
    model = _model()
    model.add_fusion("g", ["a", "b"])
    model.activate(fusion="g")
    with model.activated(adapter="a"):
        model.delete_fusion("g")
    assert (model.active_adapter, model.active_fusion) == (None, None)


def test_deleting_a_fusion_drops_its_mask():
    model = _model()
    model.set_fusion_mask("f", ["a"])
    model.delete_fusion("f")
    model.add_fusion("f", ["a", "b", "c"])
    assert model.state.fusion_masks == {}
