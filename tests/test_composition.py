"""forward_parallel: each fused adapter alone and the fusion in one forward must give, in float64, what activating
each of them alone gives (the independent reference: N + 1 ordinary forwards)."""

from __future__ import annotations

import pytest
import torch

import adapterfusion as af
from tiny_models import randomise, tiny_encoder, tiny_inputs
from tolerances import assert_close

NAMES = ("a", "b", "c")


def _setup(model_type: str, configs: dict[str, af.AdapterConfig], head: af.HeadConfig | None = None) -> af.AdaptedModel:
    """A float64 model with randomised adapters (and Houlsby LayerNorm copies), heads named like each adapter
    and the fusion 'f', and a randomised fusion."""
    model = af.wrap(tiny_encoder(model_type).double())
    for name, config in configs.items():
        model.add_adapter(name, config)
        randomise(torch.nn.ModuleList(site.adapters[name] for site in model.sites_with_adapter(name)), std=0.3)
        model.add_head(name, head or af.ClassificationHead(num_labels=len(name) + 1))
    model.add_fusion("f", list(configs), af.FusionConfig.dynamic(value_init_noise=0.05))
    for parameter in model.fusion_parameters("f"):
        parameter.data.add_(torch.randn_like(parameter) * 0.2)
    model.add_head("f", head or af.ClassificationHead(num_labels=4))
    return model.eval()


def _padded_inputs() -> dict[str, torch.Tensor]:
    inputs = tiny_inputs(batch=3, seq=9)
    inputs["attention_mask"][2, 4:] = 0
    return inputs


def _assert_routes_equal_one_by_one(
    model: af.AdaptedModel, out, inputs: dict[str, torch.Tensor], heads: dict[str, str]
) -> None:
    for name, head in heads.items():
        model.activate(adapter=name, head=head)
        assert_close(out.adapter_logits[name], model(**inputs).logits, label=name)
    model.activate(fusion="f", head="f")
    alone = model(**inputs, output_fusion_attentions=True)
    assert_close(out.fusion_logits, alone.logits, label="fusion")
    if out.fusion_attentions_by_site is not None:
        assert out.fusion_attentions_by_site.keys() == alone.fusion_attentions_by_site.keys()
        for site, probs in alone.fusion_attentions_by_site.items():
            assert_close(out.fusion_attentions_by_site[site], probs, label=str(site))


@pytest.mark.parametrize("model_type", ["bert", "distilbert", "modernbert"])
@pytest.mark.parametrize("preset", ["pfeiffer", "houlsby"])
def test_every_route_equals_its_own_forward(model_type: str, preset: str) -> None:
    config = af.AdapterConfig.from_name(preset, reduction_factor=4, train_layer_norm=False)
    model = _setup(model_type, {name: config for name in NAMES})
    inputs = _padded_inputs()
    with torch.no_grad():
        out = model.forward_parallel("f", output_fusion_attentions=True, **inputs)
    assert set(out.adapter_logits) == set(NAMES)
    _assert_routes_equal_one_by_one(model, out, inputs, {name: name for name in NAMES})


def test_houlsby_layer_norm_copies_each_route_its_own_and_the_fusion_mixes_them() -> None:
    # Houlsby with train_layer_norm: adapter n alone ends with its own LayerNorm copy, the fusion mixes the copies;
    # randomising the adapters' parameters gives every copy different weights.
    model = _setup("bert", {name: af.AdapterConfig.houlsby(reduction_factor=4) for name in NAMES})
    assert all(site.adapters["a"].layer_norm is not None for site in model.sites_with_adapter("a"))
    inputs = _padded_inputs()
    with torch.no_grad():
        out = model.forward_parallel("f", output_fusion_attentions=True, **inputs)
    _assert_routes_equal_one_by_one(model, out, inputs, {name: name for name in NAMES})


def test_adapters_of_different_shapes_and_inner_layer_norms() -> None:
    # Fused adapters need the same placement only: bottleneck size, non-linearity, new LayerNorms and scaling may
    # differ (the batched matmul path for equal shapes, one by one for the rest).
    same_shape = {
        "a": af.AdapterConfig.pfeiffer(reduction_factor=4, ln_before=True, scaling=2.0),
        "b": af.AdapterConfig.pfeiffer(reduction_factor=4, ln_after=True),
        "c": af.AdapterConfig.pfeiffer(reduction_factor=4, ln_after=True, skip_before_ln_after=False),
    }
    mixed = {
        "a": af.AdapterConfig.pfeiffer(reduction_factor=4),
        "b": af.AdapterConfig.pfeiffer(reduction_factor=8, non_linearity="tanh"),
        "c": af.AdapterConfig.pfeiffer(reduction_factor={"default": 4, "1": 2}),
    }
    inputs = _padded_inputs()
    for configs in (same_shape, mixed):
        model = _setup("bert", configs)
        with torch.no_grad():
            out = model.forward_parallel("f", **inputs)
        _assert_routes_equal_one_by_one(model, out, inputs, {name: name for name in NAMES})


def test_chosen_heads_a_subset_of_routes_fusion_mask_skip_layers_and_inference_cache() -> None:
    model = _setup("bert", {name: af.AdapterConfig.pfeiffer(reduction_factor=4) for name in NAMES})
    model.add_head("other", af.RegressionHead())
    model.set_fusion_mask("f", keep=["a", "c"])
    model.activate(adapter="b", head="b", skip_layers=[0])
    inputs = _padded_inputs()
    heads = {"c": "other", "a": "a"}
    with model.inference_cache():
        out = model.forward_parallel("f", heads=heads, fusion_head="c", **inputs)
    assert list(out.adapter_logits) == ["c", "a"] and out.adapter_logits["c"].shape == (3,)
    assert out.fusion_attentions_by_site is None
    # the model's own activation is left as it was
    assert (model.active_adapter, model.active_fusion, model.active_head, model.skip_layers) == ("b", None, "b", (0,))
    for name, head in heads.items():
        model.activate(adapter=name, head=head, skip_layers=[0])
        assert_close(out.adapter_logits[name], model(**inputs).logits, label=name)
    model.activate(fusion="f", head="c", skip_layers=[0])
    assert_close(out.fusion_logits, model(**inputs).logits, label="fusion")


def test_multiple_choice_heads() -> None:
    head = af.MultipleChoiceHead(num_labels=3)
    model = _setup("bert", {name: af.AdapterConfig.pfeiffer(reduction_factor=4) for name in NAMES}, head=head)
    input_ids = torch.randint(5, 100, (2, 3, 7))
    mask = torch.ones_like(input_ids)
    mask[1, 2, 5:] = 0
    inputs = {"input_ids": input_ids, "attention_mask": mask}
    with torch.no_grad():
        out = model.forward_parallel("f", **inputs)
    assert out.fusion_logits.shape == (2, 3)
    _assert_routes_equal_one_by_one(model, out, inputs, {name: name for name in NAMES})


def test_clear_errors_and_the_activation_is_kept_after_one() -> None:
    model = _setup("bert", {name: af.AdapterConfig.pfeiffer(reduction_factor=4) for name in ("a", "b")})
    model.add_adapter("x", "pfeiffer")
    model.add_head("mc", af.MultipleChoiceHead(num_labels=2))
    model.activate(adapter="a", head="a")
    inputs = _padded_inputs()
    with pytest.raises(af.NameNotFoundError, match="no fusion named 'g'"):
        model.forward_parallel("g", **inputs)
    with pytest.raises(af.ConfigError, match=r"names \['x'\], which fusion 'f' does not fuse"):
        model.forward_parallel("f", heads={"a": "a", "x": "a"}, **inputs)
    with pytest.raises(af.NameNotFoundError, match="no head named 'nope' is loaded for adapter 'b'"):
        model.forward_parallel("f", heads={"a": "a", "b": "nope"}, **inputs)
    model.delete_head("f")
    with pytest.raises(af.NameNotFoundError, match="no head named 'f' is loaded for fusion 'f'.*fusion_head="):
        model.forward_parallel("f", **inputs)
    with pytest.raises(af.ConfigError, match="names no adapter"):
        model.forward_parallel("f", heads={}, fusion_head="a", **inputs)
    with pytest.raises(af.ConfigError, match=r"heads \['mc'\] are multiple-choice"):
        model.forward_parallel("f", fusion_head="mc", **inputs)
    with pytest.raises(af.ConfigError, match="drop labels="):
        model.forward_parallel("f", labels=torch.tensor([0, 1, 0]), **inputs)
    with pytest.raises(af.ConfigError, match="needs input_ids"):
        model.forward_parallel("f", fusion_head="a", attention_mask=inputs["attention_mask"])
    assert (model.active_adapter, model.active_fusion, model.active_head) == ("a", None, "a")
    assert all(site.state.parallel_routes is None for site in model.sites)
