"""A fusion mask (`set_fusion_mask`) on the fast path runs only the kept adapters; that must equal the literal
masked softmax over all of them, in the outputs, the recorded fusion attentions (0 for the masked adapters) and the
gradients of Q/K/V and the head, for Pfeiffer adapters and for Houlsby ones (their LayerNorm copies mixed)."""

from __future__ import annotations

import pytest
import torch

import adapterfusion as af
from tiny_models import randomise, tiny_encoder, tiny_inputs
from tolerances import assert_close

ADAPTERS = ("a", "b", "c", "d")


def _model(layout: str) -> af.AdaptedModel:
    model = af.wrap(tiny_encoder("bert").double())
    config = (
        af.AdapterConfig.pfeiffer(reduction_factor=4)
        if layout == "pfeiffer"
        else af.AdapterConfig.houlsby(reduction_factor=4)
    )
    for name in ADAPTERS:
        model.add_adapter(name, config)
        randomise(torch.nn.ModuleList(s.adapters[name] for s in model.sites_with_adapter(name)), std=0.3)
    model.add_fusion("f", ADAPTERS, af.FusionConfig.dynamic())
    randomise(torch.nn.ModuleList(s.fusions["f"] for s in model.sites_with_fusion("f")), std=0.3)
    model.add_head("h", af.ClassificationHead(num_labels=2, dropout=0.0))
    model.train_fusion("f", head="h")
    return model


def _run(model: af.AdaptedModel, implementation: str, keep):
    model.set_fusion_implementation(implementation)
    model.set_fusion_mask("f", keep)
    model.zero_grad(set_to_none=True)
    out = model(**tiny_inputs(batch=3, seq=6), labels=torch.tensor([0, 1, 1]), output_fusion_attentions=True)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}
    return out.logits.detach(), [a.detach() for a in out.fusion_attentions], grads


@pytest.mark.parametrize("layout", ["pfeiffer", "houlsby"])
@pytest.mark.parametrize("keep", [["a", "c"], ["d"], ["b", "c", "d"]])
def test_masked_fast_fusion_equals_the_literal_masked_softmax(layout, keep):
    model = _model(layout)
    model.eval()  # no dropout anywhere: both paths see the same numbers (fusion training mode kept for V's regulariser)
    logits, attentions, grads = _run(model, "fast", keep)
    expected_logits, expected_attentions, expected_grads = _run(model, "reference", keep)
    assert_close(logits, expected_logits, label="logits")
    assert len(attentions) == len(expected_attentions) > 0
    masked = [i for i, name in enumerate(ADAPTERS) if name not in keep]
    for got, want in zip(attentions, expected_attentions, strict=True):
        assert got.shape[-1] == len(ADAPTERS)
        assert_close(got, want, label="fusion attention")
        assert torch.count_nonzero(got[..., masked]) == 0
    assert grads.keys() == expected_grads.keys() and grads
    for name in grads:
        assert_close(grads[name], expected_grads[name], label=name)


def test_masked_fast_path_runs_only_the_kept_adapters(monkeypatch):
    import adapterfusion.injection.site as site_module

    folded_over = []
    real_fold = site_module.fold_fusion
    monkeypatch.setattr(
        site_module,
        "fold_fusion",
        lambda fusion, adapters: folded_over.append(len(adapters)) or real_fold(fusion, adapters),
    )
    model = _model("pfeiffer").eval()
    model.set_fusion_mask("f", ["b", "d"])
    with torch.no_grad(), model.inference_cache():
        model(**tiny_inputs())
        model(**tiny_inputs())
    # every site folded (and so runs) the two kept adapters only, once: the second forward reused the fold
    assert folded_over == [2] * len(model.sites_with_fusion("f"))
