"""A wrapped model across its lifetime's edges: copied inside an inference_cache() block, an activated() block whose
outer pieces were deleted inside it, and unload() after training froze the encoder."""

from __future__ import annotations

import copy
import io

import pytest
import torch

import adapterfusion as af
from tiny_models import randomise, tiny_encoder, tiny_inputs
from tolerances import assert_close


def _fused() -> af.AdaptedModel:
    model = af.wrap(tiny_encoder("bert")).double()
    for name in "ab":
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_fusion("f", ["a", "b"], af.FusionConfig.dynamic())
    with torch.no_grad():
        for site in model.sites:
            randomise(site.adapters, std=0.3)
            randomise(site.fusions, std=0.3)
    model.add_head("h", af.ClassificationHead(num_labels=2))
    model.activate(fusion="f", head="h")
    return model.double().eval()


def _through_pickle(model: af.AdaptedModel) -> af.AdaptedModel:
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


@pytest.mark.parametrize("copier", [copy.deepcopy, _through_pickle], ids=["deepcopy", "pickle"])
def test_a_copy_made_inside_inference_cache_starts_outside_it(copier) -> None:
    """The block belongs to the original's `with`; a copy that kept its folds would run them for good, whatever its
    own weights became."""
    model, inputs = _fused(), tiny_inputs()
    with model.inference_cache():
        model(**inputs)  # the block has folded the fusion
        inside = copier(model)
    assert not inside.runtime.is_caching
    with torch.no_grad():
        for site in inside.sites:  # the copy's own weights change after the block
            if "f" in site.fusions:
                site.fusions["f"].value.weight.mul_(1.5)
    outside = copy.deepcopy(inside)
    with torch.no_grad():
        assert_close(inside(**inputs).logits, outside(**inputs).logits, dtype=torch.float64)
        assert not torch.equal(inside(**inputs).logits, model(**inputs).logits)  # the change acted
    inside.train_fusion("f")
    inside(**inputs, labels=torch.tensor([0, 1])).loss.backward()
    fusion_parameters = inside.fusion_parameters("f")
    assert all(p.grad is not None for p in fusion_parameters)  # a cached fold would have cut them off


def test_activated_gives_back_what_is_left_of_the_outer_state_and_the_users_exception() -> None:
    model = _fused()
    model.add_head("h2", af.ClassificationHead(num_labels=2))
    with pytest.raises(ValueError, match="the user's own"):
        with model.activated("a", head="h2", skip_layers=[0]):
            model.delete_fusion("f")  # the outer state's fusion
            raise ValueError("the user's own error")
    assert (model.active_adapter, model.active_fusion, model.active_head, model.skip_layers) == (None, None, "h", ())
    model.add_fusion("g", ["a", "b"])
    model.activate(fusion="g", head="h2")
    with model.activated("a"):
        model.delete_head("h2")
    assert (model.active_fusion, model.active_head) == ("g", None)


def test_unload_gives_back_the_trainable_flags_the_model_came_with() -> None:
    encoder = tiny_encoder("bert")
    encoder.embeddings.word_embeddings.weight.requires_grad_(False)  # the user's own choice
    before = {name: p.requires_grad for name, p in encoder.named_parameters()}
    model = af.wrap(encoder)
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.train_adapter("a")
    assert not any(p.requires_grad for p in model.encoder_parameters())
    plain = model.unload()
    assert {name: p.requires_grad for name, p in plain.named_parameters()} == before
