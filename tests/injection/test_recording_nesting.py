"""Recording fusion attentions (injection/runtime.py `recording`) when blocks nest: a
`recording_fusion_attentions()` block records every fusion site of every call inside it, whatever the call's own
output_fusion_attentions (a forward opens a recording of its own, which must neither switch off nor replace the
caller's); each call's own recording and the block around it get the same tensors. What a recording cannot hold,
one fusion's weights per site and call, is refused: routed calls and a Stack of two fusions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import adapterfusion as af
from tiny_decoders import randomise_pieces, tiny_decoder, tiny_decoder_inputs
from tiny_models import tiny_encoder, tiny_inputs

Batch = dict[str, torch.Tensor]


def _fused(base: torch.nn.Module) -> af.AdaptedModel:
    """`base` (float64) wrapped with adapters a, b, c, fusions f (a, b, c) and g (a, b), random pieces, f active."""
    model = af.wrap(base.to(torch.float64))
    for name in "abc":
        model.add_adapter(name, "pfeiffer")
    model.add_fusion("f", ["a", "b", "c"])
    model.add_fusion("g", ["a", "b"])
    randomise_pieces(model, seed=3)
    model.activate(fusion="f")
    return model


MODELS: dict[str, Callable[[], tuple[af.AdaptedModel, Batch]]] = {
    "bert": lambda: (_fused(tiny_encoder("bert")), tiny_inputs()),
    "gpt2": lambda: (_fused(tiny_decoder("gpt2")), tiny_decoder_inputs("gpt2", padding_side="left")),
    "t5": lambda: (_fused(tiny_decoder("t5")), tiny_decoder_inputs("t5")),
}


def _assert_same(recorded: dict[tuple[int, str], torch.Tensor] | None, expected: dict[tuple[int, str], torch.Tensor]):
    assert recorded is not None and expected
    assert recorded.keys() == expected.keys()
    for key, weights in expected.items():
        assert torch.equal(recorded[key], weights), key


@pytest.mark.parametrize("kind", list(MODELS))
def test_a_block_around_the_model_records_what_output_fusion_attentions_returns(kind: str) -> None:
    model, batch = MODELS[kind]()
    expected = model(**batch, output_fusion_attentions=True).fusion_attentions_by_site
    assert expected is not None and len(expected) == len(model.sites_with_fusion("f"))
    with model.recording_fusion_attentions() as around_model:
        model(**batch)
    _assert_same(around_model, expected)
    with model.recording_fusion_attentions() as around_wrapped:  # the wrapped model, our forward bypassed
        model.model(**batch)
    _assert_same(around_wrapped, expected)


def test_a_call_recording_its_own_inside_a_block_fills_both() -> None:
    model, batch = MODELS["bert"]()
    expected = model(**batch, output_fusion_attentions=True).fusion_attentions_by_site
    assert expected is not None
    with model.recording_fusion_attentions() as outer:
        own = model(**batch, output_fusion_attentions=True).fusion_attentions_by_site
        with model.recording_fusion_attentions() as inner:
            model(**batch)
        with model.recording_fusion_attentions(enabled=False) as off:
            assert off is None
            model(**batch)  # the block around it still records
    _assert_same(own, expected)
    _assert_same(inner, expected)
    _assert_same(outer, expected)
    with model.recording_fusion_attentions(enabled=False) as alone:
        output = model(**batch)
    assert alone is None and output.fusion_attentions_by_site is None
    assert not model.runtime.is_recording


def test_the_block_holds_the_last_call_of_several() -> None:
    model, batch = MODELS["gpt2"]()
    other = tiny_decoder_inputs("gpt2", batch=3, seed=5, padding_side="left")
    expected = model(**other, output_fusion_attentions=True).fusion_attentions_by_site
    assert expected is not None
    with model.recording_fusion_attentions() as recorded:
        model(**batch)
        model(**other)
    _assert_same(recorded, expected)


def test_forward_parallel_inside_a_block_records_the_fusion_slice() -> None:
    model, batch = MODELS["bert"]()
    for name in ("a", "b", "c", "f"):
        model.add_head(name, af.ClassificationHead(num_labels=2))
    model.activate(fusion="f")
    expected = model(**batch, output_fusion_attentions=True).fusion_attentions_by_site
    assert expected is not None
    own = model.forward_parallel("f", output_fusion_attentions=True, **batch).fusion_attentions_by_site
    with model.recording_fusion_attentions() as recorded:
        model.forward_parallel("f", **batch)
    for key, weights in expected.items():  # the fusion slice is computed in another batch: equal to rounding
        torch.testing.assert_close(recorded[key], weights, rtol=1e-12, atol=1e-12)
        assert own is not None and torch.equal(recorded[key], own[key])


def test_a_stack_with_one_fusion_records_inside_a_block() -> None:
    model, batch = MODELS["bert"]()
    model.add_adapter("base", "pfeiffer")
    randomise_pieces(model, seed=4)
    model.activate(af.Stack("base", "f"))
    expected = model(**batch, output_fusion_attentions=True).fusion_attentions_by_site
    assert expected is not None and len(expected) == len(model.sites_with_fusion("f"))
    with model.recording_fusion_attentions() as recorded:
        model(**batch)
    _assert_same(recorded, expected)


def test_generate_inside_a_block_records_every_position_run() -> None:
    model, batch = MODELS["gpt2"]()
    with model.recording_fusion_attentions() as outer:
        with model.recording_fusion_attentions() as inner:
            generated = model.generate(**batch, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert outer is not None and len(outer) == model.num_layers
    _assert_same(inner, outer)
    for weights in outer.values():
        assert weights.shape == (2, generated.shape[1] - 1, 3)


def test_a_stack_of_two_fusions_refuses_to_record_and_runs_unrecorded() -> None:
    model, batch = MODELS["gpt2"]()
    model.activate(af.Stack("f", "g"))
    plain = model(**batch)
    assert plain.fusion_attentions_by_site is None
    calls: dict[str, Callable[[], Any]] = {
        "output_fusion_attentions": lambda: model(**batch, output_fusion_attentions=True),
        "block around model(...)": lambda: _inside_block(model, lambda: model(**batch)),
        "block around model.model(...)": lambda: _inside_block(model, lambda: model.model(**batch)),
        "block around generate": lambda: _inside_block(
            model, lambda: model.generate(**batch, max_new_tokens=2, do_sample=False, pad_token_id=0)
        ),
    }
    for call in calls.values():
        with pytest.raises(af.ConfigError, match=r"one fusion's weights per site.*\['f', 'g'\].*activated"):
            call()
        assert not model.runtime.is_recording
    assert torch.equal(model(**batch).logits, plain.logits)


def _inside_block(model: af.AdaptedModel, call: Callable[[], Any]) -> None:
    with model.recording_fusion_attentions():
        call()


@pytest.mark.parametrize(
    "routed",
    [
        {"adapter_names": ["f", "a"]},
        {"adapter_names": ["f", "f"]},
        {"block": af.Parallel("f", "a")},
        {"block": af.BatchSplit("f", "g", batch_sizes=[1, 1])},
    ],
    ids=["adapter_names", "adapter_names-same", "Parallel", "BatchSplit"],
)
def test_a_routed_call_inside_a_block_is_refused(routed: dict[str, Any]) -> None:
    """Its rows run different pieces (or the batch once per child), which one fusion's weights per site cannot
    describe: as output_fusion_attentions=True on such a call, it is refused, not recorded for some rows."""
    model, batch = MODELS["bert"]()
    if "block" in routed:
        model.activate(routed["block"])
    state = model.state
    names = routed.get("adapter_names")
    with model.recording_fusion_attentions() as recorded:
        with pytest.raises(af.ConfigError, match="recording fusion attentions records one fusion's weights"):
            model(**batch, adapter_names=names)
    assert recorded == {} and model.state is state
    model(**batch, adapter_names=names)  # outside a block it runs


@pytest.mark.parametrize(
    "active, runs",
    [
        ({}, "no adapter or fusion (the plain encoder)"),
        ({"adapter": "a"}, "adapter 'a' alone"),
        ({"adapter": af.Stack("a", "b")}, "a Stack block with no fusion in it"),
    ],
)
def test_output_fusion_attentions_without_an_active_fusion_is_refused(active: dict[str, Any], runs: str) -> None:
    """It returned fusion_attentions of Nones, as a fusion that recorded nothing would. A block around such a call
    still records in silence (nothing), and generate() records as before."""
    model, inputs = MODELS["bert"]()
    model.activate(**active)
    with pytest.raises(af.ConfigError, match="no fusion is active") as refused:
        model(**inputs, output_fusion_attentions=True)
    assert runs in str(refused.value) and "model.activate(fusion='f')" in str(refused.value)
    with model.recording_fusion_attentions() as weights:
        model(**inputs)
    assert weights == {}

    decoder, prompt = MODELS["gpt2"]()
    decoder.activate(**active)
    with pytest.raises(af.ConfigError, match="no fusion is active"):
        decoder(**prompt, output_fusion_attentions=True)
    decoder.activate(fusion="f")
    with torch.no_grad(), decoder.recording_fusion_attentions() as weights:
        decoder.generate(**prompt, max_new_tokens=2, do_sample=False)
    assert weights
