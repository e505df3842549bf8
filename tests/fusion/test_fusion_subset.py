"""add_fusion_subset: a fusion over some of another's adapters carries bit-identical copies of its Q/K/V, keeps the
source's adapter order, and equals the source fusion with the other adapters masked out."""

from __future__ import annotations

import pytest
import torch

import adapterfusion as af
from adapterfusion.fusion import add_fusion_subset
from tiny_models import randomise, tiny_encoder
from tolerances import assert_close

ADAPTERS = ("a", "b", "c", "d")


@pytest.fixture
def model() -> af.AdaptedModel:
    model = af.wrap(tiny_encoder("bert").double())  # float64: the equality tests compare two exact computations
    for name in ADAPTERS:
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
        randomise(torch.nn.ModuleList(s.adapters[name] for s in model.sites_with_adapter(name)), std=0.3)
    model.add_fusion("f", ADAPTERS, af.FusionConfig.dynamic())
    randomise(torch.nn.ModuleList(s.fusions["f"] for s in model.sites_with_fusion("f")), std=0.3)
    model.add_head("h", af.ClassificationHead(num_labels=2, dropout=0.0))
    return model.eval()


def test_subset_copies_weights_in_source_order(model):
    add_fusion_subset(model, "f", ["d", "b"], "sub")
    assert model.fusion_setup("sub").adapters == ("b", "d")
    assert model.fusion_setup("sub").config == model.fusion_setup("f").config
    source, subset = model.fusion_state_dict("f"), model.fusion_state_dict("sub")
    assert source.keys() == subset.keys() and all(torch.equal(source[k], subset[k]) for k in source)
    assert all(source[k].data_ptr() != subset[k].data_ptr() for k in source)  # copies, not shared tensors


def test_subset_equals_masked_literal_fusion(model, inputs):
    add_fusion_subset(model, "f", ["a", "c"], "sub")
    with torch.no_grad():
        model.activate(fusion="sub", head="h")
        fast = model(**inputs).logits
        model.set_fusion_implementation("reference")
        model.set_fusion_mask("f", ["a", "c"])
        model.activate(fusion="f", head="h")
        reference = model(**inputs).logits
    assert_close(fast, reference)


@pytest.mark.parametrize("adapters", [[], ["a", "zz"], ["zz"]])
def test_subset_must_name_some_of_the_source_adapters(model, adapters):
    with pytest.raises(af.ConfigError, match="subset of fusion 'f'"):
        add_fusion_subset(model, "f", adapters, "sub")
    assert "sub" not in model.fusion_names


def test_unknown_source_fusion(model):
    with pytest.raises(af.NameNotFoundError, match="no fusion named 'nope'"):
        add_fusion_subset(model, "nope", ["a"], "sub")


@pytest.mark.parametrize("given", ["model.model", "a path"])
def test_subset_of_what_is_no_wrapped_model_is_refused(model, given):
    """The plain HuggingFace model (or a path) had been an AttributeError: 'BertModel' object has no attribute."""
    target = model.model if given == "model.model" else "runs/encoder"
    with pytest.raises(af.ConfigError, match=r"add_fusion_subset takes a wrapped model.*af\.wrap"):
        add_fusion_subset(target, "f", ["a"], "sub")
