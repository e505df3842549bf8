"""inference_cache() keeps what it prepares (folds, lanes, routed stacks) between blocks while the weights are
unchanged. A write through `p.data` (the EMA / weight-averaging idiom) changes the values but bumps no version
counter: the next block must still see the new weights. Each cached result is compared in float64 to a deep copy of
the changed model run without the cache (a model that never prepared anything)."""

from __future__ import annotations

import copy

import torch

import adapterfusion as af
from tiny_decoders import randomise_pieces, tiny_decoder, tiny_decoder_inputs
from tiny_models import tiny_encoder, tiny_inputs


def _scale_through_data(model: af.AdaptedModel, part: str, factor: float) -> None:
    """Scale every parameter whose name holds `part` in place through `.data`, as EMA code does."""
    for name, parameter in model.named_parameters():
        if part in name:
            parameter.data.mul_(factor)


def _uncached_copy_logits(model: af.AdaptedModel, **inputs: object) -> torch.Tensor:
    with torch.no_grad():
        return copy.deepcopy(model)(**inputs).logits


def _cached_logits(model: af.AdaptedModel, check_values: bool = True, **inputs: object) -> torch.Tensor:
    with model.inference_cache(check_values=check_values):
        return model(**inputs).logits


def _assert_cache_sees_the_weights(model: af.AdaptedModel, check_values: bool = True, **inputs: object) -> None:
    """The cached logits equal those of a copy of the model as it is now, run without the cache (float64)."""
    expected = _uncached_copy_logits(model, **inputs)
    actual = _cached_logits(model, check_values, **inputs)
    torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-12)


def _encoder_with(*adapters: str) -> af.AdaptedModel:
    model = af.wrap(tiny_encoder().double())
    for name in adapters:
        model.add_adapter(name)
    return model


def _fused_encoder(seed: int) -> af.AdaptedModel:
    """A float64 tiny encoder running fusion 'f' over adapters a and b with head 'h', every piece randomised."""
    model = _encoder_with("a", "b")
    model.add_fusion("f", ["a", "b"])
    model.add_head("h", af.ClassificationHead(num_labels=2))
    model.activate(fusion="f", head="h")
    randomise_pieces(model, seed=seed)
    return model


def test_a_routed_batch_sees_adapter_weights_changed_through_data() -> None:
    model = _encoder_with("a", "b")
    model.add_head("h", af.ClassificationHead(num_labels=2))
    model.activate(head="h")
    randomise_pieces(model, seed=3)
    inputs = dict(tiny_inputs(batch=3), adapter_names=["a", "b", None])
    _cached_logits(model, **inputs)  # prepares the routed stack
    _scale_through_data(model, ".adapters.a.", 3.0)
    _assert_cache_sees_the_weights(model, **inputs)


def test_a_fusion_sees_fusion_weights_changed_through_data() -> None:
    model = _fused_encoder(seed=4)
    inputs = tiny_inputs(batch=3)
    _cached_logits(model, **inputs)  # folds the fusion
    _scale_through_data(model, ".fusions.f.", 1.7)
    _assert_cache_sees_the_weights(model, **inputs)
    _scale_through_data(model, ".adapters.b.", -2.0)  # the adapters the fold is made from
    _assert_cache_sees_the_weights(model, **inputs)


def test_a_change_of_one_value_is_seen() -> None:
    model = _fused_encoder(seed=5)
    inputs = tiny_inputs(batch=2)
    _cached_logits(model, **inputs)
    weight = next(p for name, p in model.named_parameters() if ".fusions.f." in name and p.dim() == 2)
    weight.data[0, 0] += 1e-6  # about 1e-7 in the logits
    _assert_cache_sees_the_weights(model, **inputs)


def test_generate_and_decoder_lanes_see_weights_changed_through_data() -> None:
    for model_type, fused in (("gpt2", True), ("llama", False)):  # a fold; a pre-norm lane of one adapter
        model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
        model.add_adapter("a")
        model.add_adapter("b")
        if fused:
            model.add_fusion("f", ["a", "b"])
            model.activate(fusion="f")
        else:
            model.activate("a")
        randomise_pieces(model, seed=1, std=0.5)
        inputs = tiny_decoder_inputs(model_type, batch=1)
        options = dict(max_new_tokens=6, pad_token_id=0, eos_token_id=None)
        model.generate(**inputs, **options)  # prepares once
        _scale_through_data(model, ".adapters.", -3.0)
        _scale_through_data(model, ".fusions.", 2.0)
        reference = copy.deepcopy(model)
        assert torch.equal(model.generate(**inputs, **options), reference.generate(**inputs, **options))
        _assert_cache_sees_the_weights(model, **inputs)


def test_without_the_value_check_tracked_changes_are_still_seen() -> None:
    """check_values=False (the server's) trusts identity and version: an in-place change torch tracks (here under
    no_grad, as optimizers and EMA with torch._foreach ops do) and a replaced tensor are still seen."""
    model = _fused_encoder(seed=6)
    inputs = tiny_inputs(batch=2)
    _cached_logits(model, check_values=False, **inputs)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".fusions.f." in name:
                parameter.mul_(1.5)
    _assert_cache_sees_the_weights(model, check_values=False, **inputs)
    weight = next(p for name, p in model.named_parameters() if ".adapters.a." in name and p.dim() == 2)
    weight.data = weight.data * -1.0  # a new tensor: its storage differs
    _assert_cache_sees_the_weights(model, check_values=False, **inputs)


def test_a_piece_replaced_inside_the_block_runs_its_own_weights_and_stays_active(tmp_path) -> None:
    """load_fusion/load_adapter(..., overwrite=True) inside inference_cache(): the block ran the old fusion's folds
    (the new one has its name), and the replaced piece had been switched off, leaving the bare encoder."""
    other = _fused_encoder(seed=2)
    other.save_fusion("f", tmp_path / "f")
    other.save_adapter("a", tmp_path / "a")
    inputs = tiny_inputs()

    def outputs(replace: str, cached: bool) -> tuple[torch.Tensor, torch.Tensor]:
        model = _fused_encoder(seed=1).eval()
        if replace == "adapter":  # an adapter no fusion uses, active alone
            model.delete_fusion("f")
            model.activate(adapter="a", head="h")
        with model.inference_cache() if cached else torch.no_grad():
            before = model(**inputs).logits
            model.load_fusion(tmp_path / "f", overwrite=True) if replace == "fusion" else model.load_adapter(
                tmp_path / "a", overwrite=True
            )
            after = model(**inputs).logits
        assert (model.active_fusion, model.active_adapter)[replace == "adapter"] == replace[0]
        return before, after

    for replace in ("fusion", "adapter"):
        before, after = outputs(replace, cached=True)
        _, expected = outputs(replace, cached=False)
        assert not torch.allclose(before, after)
        torch.testing.assert_close(after, expected, rtol=0, atol=1e-12)


def test_a_fold_made_under_autocast_is_not_reused_outside_it_nor_the_other_way(monkeypatch) -> None:
    """A fold made under bf16 autocast is of bf16 precision: a later block without autocast must fold again (and one
    under autocast must not take a float32 fold), so each context gives what a fresh model gives in it; each context
    keeps its own, so switching back folds nothing again."""
    model = _fused_encoder(seed=3).float()
    inputs = tiny_inputs(batch=2, seq=6)
    folds: list[int] = []
    original = af.injection.site.fold_fusion
    monkeypatch.setattr(af.injection.site, "fold_fusion", lambda *a, **k: folds.append(1) or original(*a, **k))

    def cached(bf16: bool) -> torch.Tensor:
        with model.inference_cache(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return model(**inputs).logits.float()

    def fresh(bf16: bool) -> torch.Tensor:
        copied = copy.deepcopy(model)
        with copied.inference_cache(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return copied(**inputs).logits.float()

    in_bf16 = cached(True)
    in_float32 = cached(False)  # after a block that folded under autocast
    folded = len(folds)
    again_in_bf16 = cached(True)  # after a block that folded in float32
    assert folded == 2 * sum(site.is_active for site in model.sites) and len(folds) == folded
    assert torch.equal(in_float32, fresh(False))
    assert torch.equal(in_bf16, fresh(True)) and torch.equal(again_in_bf16, in_bf16)
    assert not torch.equal(in_bf16, in_float32)  # the two precisions differ, so the test can tell them apart
