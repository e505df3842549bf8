"""forward_parallel: each fused adapter alone and the fusion in one forward must give, in float64, what activating
each of them alone gives (the independent reference: N + 1 ordinary forwards)."""

from __future__ import annotations

import pytest
import torch

import adapterfusion as af
from tiny_models import TINY_CONFIGS, randomise, tiny_encoder, tiny_inputs
from tolerances import assert_close

NAMES = ("a", "b", "c")


def _setup(
    model_type: str, configs: dict[str, af.AdapterConfig], head: af.HeadConfig | None = None, **overrides
) -> af.AdaptedModel:
    """A float64 model with randomised adapters (and Houlsby LayerNorm copies), heads named like each adapter
    and the fusion 'f', and a randomised fusion; `overrides` go to the tiny encoder's config."""
    model = af.wrap(tiny_encoder(model_type, **overrides).double())
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
    model: af.AdaptedModel, out, inputs: dict[str, torch.Tensor], heads: dict[str, str], skip_layers=()
) -> None:
    for name, head in heads.items():
        model.activate(adapter=name, head=head, skip_layers=skip_layers)
        assert_close(out.adapter_logits[name], model(**inputs).logits, label=name)
    model.activate(fusion="f", head="f", skip_layers=skip_layers)
    alone = model(**inputs, output_fusion_attentions=True)
    assert_close(out.fusion_logits, alone.logits, label="fusion")
    if out.fusion_attentions_by_site is not None:
        assert out.fusion_attentions_by_site.keys() == alone.fusion_attentions_by_site.keys()
        for site, probs in alone.fusion_attentions_by_site.items():
            assert_close(out.fusion_attentions_by_site[site], probs, label=str(site))


@pytest.mark.parametrize("model_type", sorted(TINY_CONFIGS))  # the encoders; decoders: tests/decoders
@pytest.mark.parametrize("preset", ["pfeiffer", "houlsby"])
def test_every_route_equals_its_own_forward(model_type: str, preset: str) -> None:
    config = af.AdapterConfig.from_name(preset, reduction_factor=4, train_layer_norm=False)
    model = _setup(model_type, {name: config for name in NAMES})
    inputs = _padded_inputs()
    with torch.no_grad():
        out = model.forward_parallel("f", output_fusion_attentions=True, **inputs)
    assert set(out.adapter_logits) == set(NAMES)
    _assert_routes_equal_one_by_one(model, out, inputs, {name: name for name in NAMES})


def _batch_sizes_seen(model: af.AdaptedModel, inputs: dict[str, torch.Tensor], **options) -> dict[str, int]:
    """The batch size the embeddings and each encoder layer ran on during one forward_parallel."""
    seen: dict[str, int] = {}
    modules = {"embeddings": model.model.base_model.embeddings}
    modules.update({f"layer {i}": layer for i, layer in enumerate(model.encoder_layers())})

    def record(name: str):
        def hook(module, args, kwargs, output) -> None:
            seen.setdefault(name, (output[0] if isinstance(output, tuple) else output).shape[0])

        return hook

    handles = [module.register_forward_hook(record(name), with_kwargs=True) for name, module in modules.items()]
    try:
        with torch.no_grad():
            model.forward_parallel("f", **inputs, **options)
    finally:
        for handle in handles:
            handle.remove()
    return seen


@pytest.mark.parametrize(
    ("model_type", "preset", "skip", "overrides", "plain_until"),
    [
        # the first site is layer 0's feed-forward output: the embeddings run once, layer 0's output is per route
        ("bert", "pfeiffer", [], {}, "embeddings"),
        ("deberta-v2", "pfeiffer", [], {}, "embeddings"),
        ("mpnet", "pfeiffer", [], {}, "embeddings"),
        # no adapter in layer 0: all of it runs once
        ("bert", "pfeiffer", [0], {}, "layer 0"),
        # the first site is a PRE_RESIDUAL one (MPNet's attention), DeBERTa-v2's convolution mixes the plain
        # embeddings into layer 0's output, DistilBERT and ModernBERT have no BERT-style site: no sharing
        ("mpnet", "houlsby", [], {}, None),
        ("deberta-v2", "pfeiffer", [], {"conv_kernel_size": 3}, None),
        ("distilbert", "pfeiffer", [], {}, None),
        ("modernbert", "pfeiffer", [], {}, None),
    ],
)
def test_the_encoder_below_the_first_site_runs_once_and_changes_no_logit(
    model_type: str, preset: str, skip: list[int], overrides: dict, plain_until: str | None
) -> None:
    config = af.AdapterConfig.from_name(preset, reduction_factor=4, train_layer_norm=False)
    model = _setup(model_type, {name: config for name in NAMES}, **overrides)
    model.activate(fusion="f", head="f", skip_layers=skip)
    inputs = _padded_inputs()
    batch, routes = 3, len(NAMES) + 1

    seen = _batch_sizes_seen(model, inputs)
    order = ["embeddings", "layer 0", "layer 1"]
    plain = order[: order.index(plain_until) + 1] if plain_until is not None else []
    assert seen == {name: batch if name in plain else batch * routes for name in order}
    assert set(_batch_sizes_seen(model, inputs, share_encoder_prefix=False).values()) == {batch * routes}

    with torch.no_grad():
        shared = model.forward_parallel("f", output_fusion_attentions=True, **inputs)
    _assert_routes_equal_one_by_one(model, shared, inputs, {name: name for name in NAMES}, skip_layers=skip)


@pytest.mark.parametrize("model_type", ["bert", "roberta", "deberta-v2"])
@pytest.mark.parametrize("batch", [1, 4])
def test_shared_prefix_with_sdpa_attention_and_any_batch_size(model_type: str, batch: int) -> None:
    # The tiny configs use eager attention; the SDPA kernel (the default of real checkpoints) takes its mask in
    # another shape, which the per-route repeat of the layers' attention_mask must handle too.
    model = _setup(model_type, {name: af.AdapterConfig.pfeiffer(reduction_factor=4) for name in NAMES})
    model.model.set_attn_implementation("sdpa")
    inputs = tiny_inputs(batch=batch, seq=9)
    with torch.no_grad():
        shared = model.forward_parallel("f", **inputs)
        repeated = model.forward_parallel("f", share_encoder_prefix=False, **inputs)
    _assert_routes_equal_one_by_one(model, shared, inputs, {name: name for name in NAMES})
    for name in NAMES:
        assert_close(shared.adapter_logits[name], repeated.adapter_logits[name], label=name)


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
    with pytest.raises(af.ConfigError, match="takes input_ids or inputs_embeds"):
        model.forward_parallel("f", fusion_head="a", attention_mask=inputs["attention_mask"])
    assert (model.active_adapter, model.active_fusion, model.active_head) == ("a", None, "a")
    assert all(site.state.parallel_routes is None for site in model.sites)


def test_parallel_routes_outside_forward_parallel_need_the_batch_once_per_route() -> None:
    """activated(fusion=..., parallel_routes=[...]) with a batch that is not the examples repeated once per route
    failed in torch's unflatten at the first site; routes given as a set split the batch in hash order."""
    model = _setup("bert", {name: af.AdapterConfig.pfeiffer(reduction_factor=4) for name in ("a", "b")})
    inputs = _padded_inputs()
    with (
        model.activated(fusion="f", head="f", parallel_routes=["a"]),
        pytest.raises(
            af.ConfigError, match=r"2 equal slices.*repeated 2 times.*got 3 rows, not a multiple of 2.*forward_parallel"
        ),
    ):
        model(**inputs)
    repeated = {key: value.repeat(2, 1) for key, value in inputs.items()}
    with torch.no_grad():
        with model.activated(fusion="f", head="f", parallel_routes=["a"]):
            both = model(**repeated).logits
        out = model.forward_parallel("f", heads={"a": "f"}, **inputs)
    assert_close(both[:3], out.adapter_logits["a"])
    assert_close(both[3:], out.fusion_logits)
    with pytest.raises(af.ConfigError, match=r"parallel_routes=\{'a'\} is a set, whose order is not fixed"):
        model.activated(fusion="f", parallel_routes={"a"})
    with pytest.raises(af.ConfigError, match=r"parallel_routes='ab' is a string; .*parallel_routes=\['ab'\]"):
        model.activated(fusion="f", parallel_routes="ab")  # was read as ['a', 'b']
    with model.activated(fusion="f", parallel_routes={"a": 1}.keys()):  # a dict's keys keep their order
        pass


def test_parallel_routes_put_back_by_activated_are_checked_again() -> None:
    """An outer activated(parallel_routes=['a']) came back unchecked after its fusion was replaced inside an inner
    `with` block by one without 'a': adapter a ran as a route of a fusion that no longer fuses it."""
    model = _setup("bert", {name: af.AdapterConfig.pfeiffer(reduction_factor=4) for name in ("a", "b")})
    model.add_adapter("c", af.AdapterConfig.pfeiffer(reduction_factor=4))
    with model.activated(fusion="f", head="f", parallel_routes=["a"]):
        with pytest.warns(UserWarning, match=r"cannot run again \(parallel_routes=\['a'\] must name adapters"):
            with model.activated("b"):
                model.add_fusion("f", ["b", "c"], overwrite=True)
        assert (model.state.parallel_routes, model.active_fusion, model.active_head) == (None, None, "f")
    assert model.state.parallel_routes is None


@pytest.mark.parametrize("heads, fusion_head", [({"a": ["a"]}, "f"), ({"a": "a"}, ["f"]), ({"a": 1}, "f")])
def test_a_head_that_is_not_a_name_is_refused(heads, fusion_head) -> None:
    """Before: a list was torch's TypeError (unhashable type) from inside the ModuleDict."""
    model = _setup("bert", {"a": af.AdapterConfig.pfeiffer(reduction_factor=4), "b": af.AdapterConfig.pfeiffer()})
    with pytest.raises(af.ConfigError, match="the head for .* not a head name"):
        model.forward_parallel("f", heads=heads, fusion_head=fusion_head, **tiny_inputs())
