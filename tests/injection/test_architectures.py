"""Every row of af.ARCHITECTURES on a tiny random encoder: the wrapper is invisible until something is
active, a zero up-projection reproduces the encoder, fusion runs and both implementations agree, and
unload() gives the original model back."""

from __future__ import annotations

import pytest
import torch
import transformers

import adapterfusion as af
from adapterfusion.injection.architectures import SiteKind
from tiny_decoders import EXTRA_DECODER_CONFIGS, EXTRA_SEQ2SEQ_CONFIGS, TINY_DECODER_CONFIGS
from tiny_models import randomise, tiny_encoder, tiny_inputs, tiny_pair
from tolerances import assert_close

# The model types with an encoder row (BERT-generation's besides its decoder row); the rows for decoders and
# encoder-decoders are tested in tests/decoders/ on tiny_decoders.py's models.
MODEL_TYPES = sorted(
    model_type
    for model_type, spec in af.ARCHITECTURES.items()
    if any(not row.causal and row.decoder is None for row in (spec, *spec.variants))
)


def _has_pre_residual_site(model_type: str) -> bool:
    spec = af.ARCHITECTURES[model_type]
    return SiteKind.PRE_RESIDUAL in (spec.attention.kind, spec.output.kind)


def _houlsby_zero_up(model_type: str) -> af.AdapterConfig:
    """Houlsby with an exact-identity init; without LayerNorm copies where the site kind forbids them."""
    overrides = {"train_layer_norm": False} if _has_pre_residual_site(model_type) else {}
    return af.AdapterConfig.houlsby(reduction_factor=4, init="zero_up", **overrides)


def _double_pair(model_type: str) -> tuple[torch.nn.Module, af.AdaptedModel]:
    """tiny_pair in float64, for tests that claim two computations are equal (pieces added later follow)."""
    reference, model = tiny_pair(model_type)
    return reference.double(), model.double()


def _hidden(model: torch.nn.Module, inputs: dict) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs).last_hidden_state


def test_every_architecture_has_a_tiny_config():
    from tiny_models import TINY_CONFIGS

    assert sorted(TINY_CONFIGS) == MODEL_TYPES
    tested_in_decoders = set(TINY_DECODER_CONFIGS) | set(EXTRA_SEQ2SEQ_CONFIGS) | set(EXTRA_DECODER_CONFIGS)
    assert set(af.ARCHITECTURES) - set(MODEL_TYPES) <= tested_in_decoders


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_wrapped_model_with_nothing_active_is_bit_identical(model_type):
    reference, model = tiny_pair(model_type)
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    inputs = tiny_inputs()
    expected = _hidden(reference, inputs)
    assert torch.equal(_hidden(model, inputs), expected)
    model.activate(adapter="a")
    model.activate()
    assert torch.equal(_hidden(model, inputs), expected)


@pytest.mark.parametrize("preset", ["pfeiffer", "houlsby"])
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_zero_up_projection_reproduces_the_encoder(model_type, preset):
    reference, model = _double_pair(model_type)
    config = (
        af.AdapterConfig.pfeiffer(reduction_factor=4, init="zero_up")
        if preset == "pfeiffer"
        else _houlsby_zero_up(model_type)
    )
    model.add_adapter("a", config)
    model.activate(adapter="a")
    inputs = tiny_inputs()
    assert_close(_hidden(model, inputs), _hidden(reference, inputs))

    randomise(torch.nn.ModuleList(site.adapters["a"] for site in model.sites_with_adapter("a")), std=0.3)
    changed = _hidden(model, inputs)
    assert not torch.allclose(changed, _hidden(reference, inputs), atol=1e-3)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_dynamic_fusion_of_three_adapters(model_type):
    _, model = _double_pair(model_type)
    for name in "abc":
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
        for site in model.sites_with_adapter(name):
            randomise(site.adapters[name], std=0.2)
    model.add_fusion("f", ["a", "b", "c"], af.FusionConfig.dynamic())
    for site in model.sites_with_fusion("f"):
        for linear in (site.fusions["f"].query, site.fusions["f"].key):
            randomise(linear, std=0.2)
    model.activate(fusion="f")
    inputs = tiny_inputs()
    with torch.no_grad():
        fast = model(**inputs, output_fusion_attentions=True)
        model.set_fusion_implementation("reference")
        reference = model(**inputs, output_fusion_attentions=True)

    assert len(fast.fusion_attentions) == model.num_layers
    for probs in fast.fusion_attentions:
        assert probs.shape == (2, 7, 3)
        assert_close(probs.sum(-1), torch.ones(2, 7, dtype=probs.dtype))
        assert (probs >= 0).all()
    assert_close(fast.last_hidden_state, reference.last_hidden_state)
    for fast_probs, reference_probs in zip(fast.fusion_attentions, reference.fusion_attentions, strict=True):
        assert_close(fast_probs, reference_probs)
    # Not uniform: the attention depends on the random Q and K.
    assert fast.fusion_attentions[0].std() > 1e-3


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_unload_restores_original_modules_and_outputs(model_type):
    reference, model = tiny_pair(model_type)
    original_classes = {name: type(module) for name, module in reference.named_modules()}
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.activate(adapter="a")
    inputs = tiny_inputs()
    assert not torch.equal(_hidden(model, inputs), _hidden(reference, inputs))

    plain = model.unload()
    assert {name: type(module) for name, module in plain.named_modules()} == original_classes
    assert not any(isinstance(module, af.injection.site.AdapterSite) for module in plain.modules())
    assert torch.equal(_hidden(plain, inputs), _hidden(reference, inputs))
    assert plain.state_dict().keys() == reference.state_dict().keys()


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_state_dict_keys_are_deterministic_and_sites_are_visible(model_type):
    reference, first = tiny_pair(model_type)
    _, second = tiny_pair(model_type)
    for model in (first, second):
        model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    assert list(first.state_dict()) == list(second.state_dict())

    # The base weights keep their names, with the wrapped module one level down under 'base_layer'.
    base_keys = {key.replace("base_layer.", "") for key in first.model.state_dict() if ".adapters." not in key}
    assert base_keys == set(reference.state_dict())
    assert any(".base_layer." in key for key in first.model.state_dict())
    # The adapter's keys are exactly its modules' parameters under each site's module path: one copy per site that
    # holds it (Pfeiffer: the output site of every layer), found by visiting the sites, not by matching names.
    path_of = {module: name for name, module in first.model.named_modules()}
    holding = [site for site in first.sites if "a" in site.adapters]
    assert len(holding) == first.num_layers
    expected = {f"{path_of[site]}.adapters.a.{key}" for site in holding for key in site.adapters["a"].state_dict()}
    assert {key for key in first.model.state_dict() if ".adapters." in key} == expected

    text = repr(first)
    assert "AdapterSite" in text
    assert text.count("AdapterSite") == 2 * first.num_layers


def test_unsupported_architecture_names_the_table():
    xlnet = transformers.XLNetModel(  # any model_type without a row
        transformers.XLNetConfig(d_model=32, n_layer=2, n_head=4, d_inner=64, vocab_size=100)
    )
    with pytest.raises(af.UnsupportedArchitectureError, match="architectures.py") as error:
        af.wrap(xlnet)
    assert "'xlnet'" in str(error.value)


def test_albert_with_more_than_one_layer_group_is_refused_naming_the_setting():
    """Layers in several groups have no one list of layers for the sites; every released ALBERT has one group."""
    with pytest.raises(af.UnsupportedArchitectureError, match="num_hidden_groups=2") as error:
        af.wrap(tiny_encoder("albert", num_hidden_groups=2))
    assert "num_hidden_groups=1" in str(error.value)


@pytest.mark.parametrize("model_type", ["distilbert", "mpnet", "albert"])
def test_houlsby_layer_norm_copies_are_refused_at_pre_residual_sites(model_type):
    model = af.wrap(tiny_encoder(model_type))
    with pytest.raises(af.ConfigError, match="train_layer_norm"):
        model.add_adapter("h", "houlsby")
    assert "h" not in model.adapter_names
    assert not any("h" in site.adapters for site in model.sites)
