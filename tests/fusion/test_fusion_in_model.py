"""Fast vs reference fusion inside a whole encoder: outputs and gradients of a padded, masked batch agree
(in float64: the paths are algebraically equal, so they must agree to rounding)."""

from __future__ import annotations

import pytest
import torch

import adapterfusion as af
from tiny_models import tiny_encoder, tiny_inputs
from tolerances import assert_close


@pytest.mark.parametrize("model_type", ["bert", "distilbert", "modernbert", "albert"])
@pytest.mark.parametrize("preset", ["pfeiffer", "houlsby"])
def test_fast_and_reference_agree_on_padded_batches(model_type: str, preset: str) -> None:
    model = af.wrap(tiny_encoder(model_type).double())  # pieces added later follow the encoder's dtype
    names = ["a", "b", "c"]
    for name in names:
        model.add_adapter(name, af.AdapterConfig.from_name(preset, reduction_factor=4, train_layer_norm=False))
        for parameter in model.adapter_parameters(name):
            torch.nn.init.normal_(parameter, std=0.3)
    model.add_head("h", af.ClassificationHead(num_labels=3, dropout=0.0))
    model.add_fusion("f", names, af.FusionConfig.dynamic(value_init_noise=0.05))
    for parameter in model.fusion_parameters("f"):
        if parameter.dim() == 2:
            parameter.data.add_(torch.randn_like(parameter) * 0.2)
    model.train_fusion("f", head="h")
    model.eval()  # no dropout, so both paths see the same function; gradients still flow
    inputs = tiny_inputs(batch=3, seq=9)
    inputs["attention_mask"][2, 4:] = 0
    labels = torch.tensor([0, 2, 1])

    results = {}
    for implementation in ("reference", "fast"):
        model.set_fusion_implementation(implementation)
        model.zero_grad()
        out = model(**inputs, labels=labels, output_fusion_attentions=True)
        out.loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results[implementation] = (out, grads)

    (ref, ref_grads), (fast, fast_grads) = results["reference"], results["fast"]
    assert_close(fast.logits, ref.logits)
    assert_close(fast.last_hidden_state, ref.last_hidden_state)
    for ref_attention, fast_attention in zip(ref.fusion_attentions, fast.fusion_attentions, strict=True):
        assert_close(fast_attention, ref_attention)
    largest = max(g.abs().max() for g in ref_grads.values())
    for name, ref_grad in ref_grads.items():
        if name.endswith("key.bias"):  # its true gradient is zero (the softmax cancels it): rounding noise only
            assert_close(ref_grad / largest, torch.zeros_like(ref_grad), label=name)
            assert_close(fast_grads[name] / largest, torch.zeros_like(ref_grad), label=name)
            continue
        assert_close(fast_grads[name], ref_grad, label=name)


def test_inference_cache_gives_the_same_outputs_and_is_dropped_on_exit(monkeypatch) -> None:
    import adapterfusion.injection.site as site_module

    folds = []
    real_fold = site_module.fold_fusion
    monkeypatch.setattr(site_module, "fold_fusion", lambda *args: folds.append(1) or real_fold(*args))
    model = af.wrap(tiny_encoder("bert")).eval()
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
        for parameter in model.adapter_parameters(name):
            torch.nn.init.normal_(parameter, std=0.3)
    model.add_fusion("f", ["a", "b"], af.FusionConfig.dynamic(value_init_noise=0.1))
    model.activate(fusion="f")
    inputs = tiny_inputs()
    with torch.no_grad():
        expected = model(**inputs).last_hidden_state
    folds.clear()
    with model.inference_cache():
        first = model(**inputs).last_hidden_state
        second = model(**inputs).last_hidden_state
    assert len(folds) == len(model.sites_with_fusion("f"))  # folded once per site; the second forward reused it
    assert torch.equal(first, expected) and torch.equal(second, expected)
    folds.clear()
    with model.inference_cache():  # the weights did not change: the next block reuses the folds
        assert torch.equal(model(**inputs).last_hidden_state, expected)
    assert folds == []
    with torch.no_grad():  # weights changed after the block: the next forward sees them, in or out of a block
        model.fusion_parameters("f")[0].add_(1.0)
        changed = model(**inputs).last_hidden_state
        assert not torch.equal(changed, expected)
    with model.inference_cache():
        assert_close(model(**inputs).last_hidden_state, changed)
    assert len(folds) == 1  # only the site whose weights changed folds again
