"""Composition blocks and per-example routing with unusual inputs: calls under an active Parallel block whose
per-example inputs do not fit the batch (the errors must name what was passed, not the batch the block repeats), a
cached step under it, an Average over adapters of which only some hold their own LayerNorm copies, and labels on
another device for several heads. Each refusal leaves the active setup as it was."""

from __future__ import annotations

import pytest
import torch

import adapterfusion as af
from tiny_decoders import randomise_pieces, tiny_decoder, tiny_decoder_inputs
from tiny_models import tiny_encoder, tiny_inputs


def _encoder() -> af.AdaptedModel:
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=8))
    model.add_adapter("b", af.AdapterConfig.pfeiffer(reduction_factor=16))
    model.add_fusion("f", ["a", "b"])
    model.add_head("h", af.ClassificationHead(num_labels=2))
    return model.eval()


def _decoder(model_type: str) -> af.AdaptedModel:
    model = af.wrap(tiny_decoder(model_type))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=8))
    model.add_adapter("b", af.AdapterConfig.pfeiffer(reduction_factor=16))
    randomise_pieces(model, seed=0)
    return model.eval()


def _refused(model: af.AdaptedModel, match: str, **call: object) -> None:
    """model(**call) is refused with `match` and leaves the active setup as it was."""
    before = model.state
    with pytest.raises(af.ConfigError, match=match):
        model(**call)
    assert model.state == before


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        # was "input_ids of shape (14,) must be [batch, seq]": the 7 tokens read as 7 examples, repeated twice
        (lambda x: {"input_ids": x["input_ids"][0]}, r"input_ids of shape \(7,\) must be \[batch, seq\].*unsqueeze"),
        # was "attention_mask of shape (2, 7) does not match the inputs' (6, 7)"
        (
            lambda x: {**x, "attention_mask": x["attention_mask"][:2]},
            r"attention_mask of shape \(2, 7\) has 2 rows but input_ids has 3 examples; .* one row per example \(3\)",
        ),
        (
            lambda x: {**x, "token_type_ids": torch.zeros(1, 7, dtype=torch.long)},
            r"token_type_ids of shape \(1, 7\) has 1 rows but input_ids has 3",
        ),
        # was "a single value as labels for a batch of 6 examples"
        (lambda x: {**x, "labels": torch.tensor(1)}, r"a single value as labels for a batch of 3 examples"),
        # was "position_ids of shape (2, 7) does not match the inputs' (6, 7)"
        (
            lambda x: {**x, "position_ids": torch.arange(7).expand(2, 7)},
            r"position_ids of shape \(2, 7\) has 2 rows but input_ids has 3 examples; .*or one row for all",
        ),
        # was "token_type_ids of shape () does not match the inputs' (6, 7)"
        (lambda x: {**x, "token_type_ids": torch.tensor(0)}, r"token_type_ids of shape \(\) must be \[batch, seq"),
        # was "a Parallel block needs input_ids or inputs_embeds with a batch dimension"
        (lambda x: {"input_ids": x["input_ids"].tolist()}, r"input_ids is a list, not a torch.Tensor"),
        # the checks of every call, on the inputs as given: were "labels of shape (6, 1)", "attention_mask of shape
        # (6, 1, 1, 7)", the batch repeated once per child
        (lambda x: {**x, "labels": torch.tensor([[0], [1], [1]])}, r"labels of shape \(3, 1\) must be \[batch\]"),
        (
            lambda x: {**x, "attention_mask": x["attention_mask"][:, None, None, :].float()},
            r"attention_mask of shape \(3, 1, 1, 7\) is a 4-D mask",
        ),
    ],
    ids=[
        "one-dimensional-ids",
        "mask-rows",
        "token-type-rows",
        "scalar-label",
        "position-rows",
        "scalar-types",
        "list-ids",
        "label-shape",
        "four-dimensional-mask",
    ],
)
def test_a_parallel_call_names_the_inputs_as_passed(edit, match: str) -> None:
    model = _encoder()
    model.activate(af.Parallel("a", "f"), head="h")
    _refused(model, match, **edit(tiny_inputs(batch=3)))


def test_a_parallel_call_on_a_decoder_refuses_position_ids_as_long_as_the_batch_without_a_batch_dimension() -> None:
    """[seq] position_ids of a batch of 7 prompts of 7 tokens: 7 'rows', which the block repeated as if they were the
    examples' (then named against shape (14,))."""
    model = _decoder("llama")
    model.activate(af.Parallel("a", "b"))
    ids = torch.randint(3, 50, (7, 7))
    _refused(model, r"position_ids of shape \(7,\) must be \[batch, seq", input_ids=ids, position_ids=torch.arange(7))


def test_one_row_of_position_ids_under_parallel_runs_as_every_examples() -> None:
    model = _encoder()
    model.activate(af.Parallel("a", "f"), head="h")
    inputs = tiny_inputs(batch=3)
    shared = model(**inputs, position_ids=torch.arange(7)[None]).logits
    torch.testing.assert_close(shared, model(**inputs, position_ids=torch.arange(7).expand(3, 7)).logits)


def test_a_parallel_call_on_an_encoder_decoder_names_the_decoder_rows_as_passed() -> None:
    """Was "the decoder inputs have 1 rows but the encoder inputs 4" for 2 examples under 2 children."""
    model = _decoder("t5")
    model.activate(af.Parallel("a", "b"))
    inputs = tiny_decoder_inputs("t5", batch=2)
    inputs["decoder_input_ids"] = inputs["decoder_input_ids"][:1]
    _refused(model, r"decoder_input_ids of shape \(1, 6\) has 1 rows but input_ids has 2 examples", **inputs)


def test_a_cached_step_under_parallel_is_refused() -> None:
    """A cache made under Parallel holds a row per child and example: the next tokens of the examples (2 rows) were
    repeated to its 4 rows and ran silently, every child continuing with the tokens given for all; the next tokens
    per output row (4) were repeated to 8 and refused as '8 inputs for a cache of 4 rows'."""
    model = _decoder("llama")
    model.activate(af.Parallel("a", "b"))
    inputs = tiny_decoder_inputs("llama", batch=2)
    with torch.no_grad():
        cache = model(**inputs, use_cache=True).past_key_values
    assert cache.get_seq_length() == 7
    mask = torch.ones(2, 8, dtype=torch.long)
    for rows in (2, 4):
        step = {"input_ids": torch.full((rows, 1), 9), "attention_mask": mask[:1].expand(rows, -1)}
        _refused(
            model,
            r"past_key_values hold 7 tokens.*Parallel block.*adapter_names=\[child, \.\.\.\]",
            **step,
            past_key_values=cache,
        )
    model.activate(None)  # the same examples, routed by hand, continue their cache
    with torch.no_grad():
        out = model(**inputs, use_cache=True, adapter_names=["a", "b"])
        step = model(
            input_ids=torch.full((2, 1), 9),
            attention_mask=mask,
            past_key_values=out.past_key_values,
            adapter_names=["a", "b"],
        )
    assert step.logits.shape[:2] == (2, 1)


def test_an_average_over_adapters_with_and_without_layer_norm_copies_is_refused() -> None:
    """Average('a', 'p') with only p holding its own LayerNorm copy placed both with a's (the encoder's) LayerNorm
    and ended with p's: Average('a', 'p', weights=[1, 0]) was not adapter a, and the order of the children changed
    the output."""
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=8))
    model.add_adapter("p", af.AdapterConfig.pfeiffer(reduction_factor=8, train_layer_norm=True))
    model.add_adapter("q", af.AdapterConfig.pfeiffer(reduction_factor=8, train_layer_norm=True))
    model.activate("a")
    before = model.state
    match = r"adapters \['p'\] hold their own LayerNorm copies \(train_layer_norm=True\) and \['a'\] use the encoder's"
    for block in (af.Average("a", "p", weights=[1, 0]), af.Average("p", "a")):
        with pytest.raises(af.ConfigError, match=match):
            model.activate(block)
        with pytest.raises(af.ConfigError, match=match):
            model(**tiny_inputs(batch=2), adapter_names=[block, "a"])
        assert model.state == before
    model.activate(af.Average("p", "q"))  # both hold copies, as do two Houlsby adapters: allowed


def test_an_average_on_a_pre_norm_decoder_ignores_train_layer_norm_where_nothing_is_copied() -> None:
    """A pre-norm decoder's sites have no LayerNorm to copy, so train_layer_norm changes nothing there."""
    model = _decoder("llama")
    model.add_adapter("p", af.AdapterConfig.pfeiffer(reduction_factor=8, train_layer_norm=True))
    model.activate(af.Average("a", "p"))
    assert model.active_block is not None


@pytest.mark.parametrize("block", [None, af.Parallel("a", "f")], ids=["routed", "parallel"])
def test_labels_on_another_device_with_several_heads_are_refused_as_with_one(block) -> None:
    """With head_names naming several heads the labels skipped check_call's device check, and taking each head's
    rows failed inside torch (on CUDA: 'Expected all tensors to be on the same device'; here, labels on meta:
    'Tensor.item() cannot be called on meta tensors')."""
    model = _encoder()
    model.add_head("h3", af.ClassificationHead(num_labels=3))
    model.activate(block, head="h")
    labels = torch.tensor([0, 1, 1], device="meta")
    for heads in (["h", "h", "h"], ["h", "h3", "h"]):
        _refused(
            model, "labels is on meta but the model is on cpu", **tiny_inputs(batch=3), head_names=heads, labels=labels
        )
