"""Inference lanes (injection/lanes.py): inside `inference_cache()` an active pre-norm site runs a lane prepared once
per block instead of the general path. A lane must give what the general path gives, for every case it covers, on
every decoder row; leave alone the cases it does not cover; and follow the weights between blocks."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import adapterfusion as af
from adapterfusion.fusion.layer import SUBNORMAL_WEIGHT
from adapterfusion.injection import lanes as lanes_module
from tiny_decoders import DECODER_TYPES, tiny_decoder, tiny_decoder_inputs
from tolerances import assert_close

ADAPTERS = {
    "pfeiffer": af.AdapterConfig.pfeiffer(reduction_factor=4),  # reads r: original_ln_before
    "houlsby": af.AdapterConfig.houlsby(reduction_factor=4, train_layer_norm=False),  # does not read r
    "post_add": af.AdapterConfig.pfeiffer(reduction_factor=4, residual_before_ln="post_add", non_linearity="gelu"),
}


def _model(model_type: str, adapter: str, fusion: af.FusionConfig | None = None) -> af.AdaptedModel:
    """A float64 decoder with three random adapters of kind `adapter` and a fusion over them."""
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64)).eval()
    for name in ("a", "b", "c"):
        model.add_adapter(name, ADAPTERS[adapter])
    model.add_fusion("f", ["a", "b", "c"], fusion)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".adapters." in name or ".fusions." in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype) * 0.3)
    return model


class LaneSpy:
    """Counts the lanes built, and those built as None (a case left to the general path)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.built: list[bool] = []
        original = lanes_module.build_lane

        def spying(*args: Any, **kwargs: Any) -> Any:
            lane = original(*args, **kwargs)
            self.built.append(lane is not None)
            return lane

        monkeypatch.setattr(af.injection.site, "build_lane", spying)


def _general_and_lane(model: af.AdaptedModel, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        general = model(**inputs).logits
    with model.inference_cache():
        lane = model(**inputs).logits
    return general, lane


@pytest.mark.parametrize("model_type", DECODER_TYPES)
@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
@pytest.mark.parametrize("active", ["adapter", "fusion"])
def test_a_lane_gives_what_the_general_path_gives(
    model_type: str, adapter: str, active: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _model(model_type, adapter)
    model.activate(**({"adapter": "b"} if active == "adapter" else {"fusion": "f"}))
    spy = LaneSpy(monkeypatch)
    general, lane = _general_and_lane(model, tiny_decoder_inputs(model_type))
    assert spy.built and all(spy.built)  # the block ran lanes, one per active site
    assert len(spy.built) == sum(site.is_active for site in model.sites)
    assert_close(lane, general, dtype=torch.float64)
    model.activate()
    with torch.no_grad():
        assert not torch.equal(model(**tiny_decoder_inputs(model_type)).logits, general)  # the adapters act


def test_a_fusion_mask_runs_a_lane_over_the_kept_adapters(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model("llama", "pfeiffer")
    model.activate(fusion="f")
    model.set_fusion_mask("f", keep=["a", "c"])
    spy = LaneSpy(monkeypatch)
    inputs = tiny_decoder_inputs("llama")
    general, lane = _general_and_lane(model, inputs)
    assert all(spy.built)
    assert_close(lane, general, dtype=torch.float64)
    model.set_fusion_implementation("reference")
    with torch.no_grad():
        assert_close(model(**inputs).logits, lane, dtype=torch.float64)


@pytest.mark.parametrize(
    "fusion",
    [af.FusionConfig.dynamic(score_dropout=0.1), af.FusionConfig.dynamic(query_before_ln=True)],
    ids=["score-dropout", "query-before-ln"],
)
def test_cases_a_lane_does_not_cover_run_the_general_path(
    fusion: af.FusionConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _model("qwen2", "pfeiffer", fusion)
    model.activate(fusion="f")
    spy = LaneSpy(monkeypatch)
    general, cached = _general_and_lane(model, tiny_decoder_inputs("qwen2"))
    assert spy.built and not any(spy.built)
    assert_close(cached, general, dtype=torch.float64)


def test_recording_fusion_attentions_inside_the_cache_takes_the_general_path() -> None:
    model = _model("gpt2", "pfeiffer")
    model.activate(fusion="f")
    inputs = tiny_decoder_inputs("gpt2")
    with model.inference_cache():
        plain = model(**inputs).logits
        recorded = model(**inputs, output_fusion_attentions=True)
    assert len(recorded.fusion_attentions_by_site) == model.num_layers
    assert_close(recorded.logits, plain, dtype=torch.float64)


def test_a_lane_follows_the_weights_between_blocks_and_the_state_within_one() -> None:
    model = _model("llama", "pfeiffer")
    inputs = tiny_decoder_inputs("llama")
    model.activate(fusion="f")
    with model.inference_cache():
        before = model(**inputs).logits
        model.activate(adapter="a")  # a new state inside the block: its own lane
        alone = model(**inputs).logits
        model.activate(fusion="f")
        assert torch.equal(model(**inputs).logits, before)
    with torch.no_grad():
        model.sites_with_fusion("f")[1].adapters["b"].up.weight.mul_(2.0)  # as an optimizer step would
        general = model(**inputs).logits
    with model.inference_cache():
        after = model(**inputs).logits
    assert not torch.equal(after, before)
    assert_close(after, general, dtype=torch.float64)
    model.activate(adapter="a")
    with torch.no_grad():
        assert_close(model(**inputs).logits, alone, dtype=torch.float64)


def test_a_site_whose_adapters_ignore_the_residual_stream_does_not_listen_for_it() -> None:
    """Houlsby's placement (no original_ln_before) never reads r: its sites put no hook on the block's norm, which
    would send every call of that norm through torch's slower hooked path."""
    model = _model("llama", "houlsby")
    model.activate(fusion="f")
    assert all(site._residual_hook is None for site in model.sites)
    pfeiffer = _model("llama", "pfeiffer")
    pfeiffer.activate(fusion="f")
    assert sum(site._residual_hook is not None for site in pfeiffer.sites) == pfeiffer.num_layers


def test_subnormal_fusion_weights_become_zero_at_inference_without_changing_the_output() -> None:
    """A saturated fusion gives the other adapters subnormal softmax weights, which x86 multiplies many times slower;
    at inference on the CPU in float32 the lane and the general fast path set weights below SUBNORMAL_WEIGHT to 0,
    and the site's output stays what the unflushed computation (with gradients on) gives, to float32 rounding
    (checked at the site, where a weight dropped too early would show)."""
    model = af.wrap(tiny_decoder("llama")).eval()  # float32
    for name in ("a", "b", "c"):
        model.add_adapter(name, ADAPTERS["pfeiffer"])
    model.add_fusion("f", ["a", "b", "c"])
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".adapters." in name or ".fusions." in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    model.activate(fusion="f")
    site = model.sites_with_fusion("f")[0]
    scale = torch.logspace(-1, 1.5, 40).view(4, 10, 1)  # from spread weights to saturated ones, token by token
    h, r = (torch.randn(4, 10, 32, generator=generator) * scale for _ in range(2))
    with model.recording_fusion_attentions() as recorded:  # gradients on: nothing flushed
        unflushed = site.adapt_with(h, r, False, "f", ("a", "b", "c"), None, None).detach()
    assert recorded is not None
    weights = recorded[(site.layer_index, site.position)]
    assert ((weights > 0) & (weights < SUBNORMAL_WEIGHT)).any()  # the case arises
    assert ((weights > 1e-6) & (weights < 0.99)).any()  # and not every row is saturated
    with torch.no_grad(), model.recording_fusion_attentions() as recorded:
        general = site.adapt_with(h, r, False, "f", ("a", "b", "c"), None, None)
    assert recorded is not None
    flushed = recorded[(site.layer_index, site.position)]
    assert not ((flushed > 0) & (flushed < SUBNORMAL_WEIGHT)).any()
    assert torch.equal(flushed, torch.where(weights < SUBNORMAL_WEIGHT, 0.0, weights))
    lane = lanes_module.build_lane([site.adapter(n) for n in ("a", "b", "c")], site.fusion("f"), lambda u: u)
    assert lane is not None
    with torch.no_grad():
        assert_close(general, unflushed, dtype=torch.float32)
        assert_close(lane(h, r), unflushed, dtype=torch.float32)


@pytest.mark.parametrize("model_type", DECODER_TYPES)
@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_the_traced_fusion_lane_gives_what_the_general_path_gives(
    model_type: str, adapter: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under torch.compile the fusion lane takes its traced form (two matmuls, sums over reshaped units: few kernels
    for CUDA graphs). The eager backend runs exactly the traced operators, so float64 pins its numbers."""
    torch._dynamo.reset()
    traced_steps: list[int] = []
    original = lanes_module._traced_fusion_step

    def counted(*args: Any, **kwargs: Any) -> torch.Tensor:
        traced_steps.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(lanes_module, "_traced_fusion_step", counted)
    model = _model(model_type, adapter)
    model.activate(fusion="f")
    inputs = tiny_decoder_inputs(model_type)
    with torch.no_grad():
        general = model(**inputs).logits
        with model.inference_cache():
            model.model(**inputs)  # the block's lanes, prepared eagerly (as generate's first step does)
            assert not traced_steps  # eagerly, the nine-operator form
            traced = torch.compile(model.model, backend="eager", fullgraph=True)(**inputs).logits
    assert len(traced_steps) >= sum(site.is_active for site in model.sites)  # every fusion site, traced
    assert_close(traced, general, dtype=torch.float64)
