"""Integer inputs of other dtypes than torch.long (forward_inputs/tokens.py, labels.py), on decoders,
encoder-decoders and encoders alike: ids, token types and positions of int32 run as int64 ones do, and of any
other integer dtype (which torch's embedding does not take) are a ConfigError naming the key, the dtype and the fix,
in forward and in generate; a language model's (and a wrapped task model's) int32 labels give the int64 labels'
loss exactly, where they failed in cross_entropy."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers

import adapterfusion as af
from tiny_decoders import tiny_decoder, tiny_decoder_inputs
from tiny_models import tiny_config, tiny_encoder, tiny_inputs

REFUSED = [torch.uint8, torch.int8, torch.int16]


def _lm(model_type: str) -> af.AdaptedModel:
    model = af.wrap(tiny_decoder(model_type))
    model.add_adapter("a")
    model.activate(adapter="a")
    return model


def _states(output: af.AdaptedModelOutput) -> torch.Tensor:
    """A language model's logits, else an encoder's last hidden states."""
    return output.logits if output.logits is not None else output.last_hidden_state


def _positions(ids: torch.Tensor) -> torch.Tensor:
    return torch.arange(ids.shape[-1]).expand_as(ids)


@pytest.mark.parametrize("model_type", ["llama", "gpt2", "t5", "bart"])
def test_int32_ids_run_as_int64_ids(model_type: str) -> None:
    model = _lm(model_type)
    inputs = tiny_decoder_inputs(model_type, padding_side="left")
    narrow = {key: value.int() for key, value in inputs.items()}
    assert torch.equal(model(**narrow).logits, model(**inputs).logits)
    prompts = {key: value for key, value in inputs.items() if key != "decoder_input_ids"}
    options: dict[str, Any] = dict(max_new_tokens=3, pad_token_id=0, do_sample=False)
    expected = model.generate(**prompts, **options)
    assert torch.equal(model.generate(**{key: value.int() for key, value in prompts.items()}, **options), expected)


@pytest.mark.parametrize("dtype", REFUSED, ids=str)
@pytest.mark.parametrize("model_type", ["llama", "gpt2", "t5", "bart"])
def test_ids_of_another_integer_dtype_are_refused_naming_key_dtype_and_fix(model_type: str, dtype: torch.dtype) -> None:
    """Was a RuntimeError from torch's embedding ("Expected tensor for argument #1 'indices' ...")."""
    model = _lm(model_type)
    inputs = tiny_decoder_inputs(model_type)
    keys = ["input_ids", "decoder_input_ids"] if "decoder_input_ids" in inputs else ["input_ids"]
    for key in keys:
        message = rf"{key} have dtype {dtype}; token ids must be integers of dtype torch\.long .* {key}\.long\(\)"
        with pytest.raises(af.ConfigError, match=message):
            model(**{**inputs, key: inputs[key].to(dtype)})
        generated = {k: v for k, v in inputs.items() if k != "decoder_input_ids" or key == k}
        with pytest.raises(af.ConfigError, match=message):
            model.generate(**{**generated, key: inputs[key].to(dtype)}, max_new_tokens=2, pad_token_id=0)


@pytest.mark.parametrize("dtype", REFUSED, ids=str)
def test_token_types_and_positions_of_another_integer_dtype_are_refused(dtype: torch.dtype) -> None:
    gpt2, inputs = _lm("gpt2"), tiny_decoder_inputs("gpt2")
    bert, batch = af.wrap(tiny_encoder("bert")), tiny_inputs()
    ernie, ernie_batch = af.wrap(tiny_encoder("ernie", use_task_id=True, task_type_vocab_size=3)), tiny_inputs()
    calls = [
        (gpt2, inputs, "position_ids", _positions(inputs["input_ids"])),
        (gpt2, inputs, "token_type_ids", torch.zeros_like(inputs["input_ids"])),
        (bert, batch, "position_ids", _positions(batch["input_ids"])),
        (bert, batch, "token_type_ids", torch.zeros_like(batch["input_ids"])),
        (ernie, ernie_batch, "task_type_ids", torch.zeros_like(ernie_batch["input_ids"])),
    ]
    for model, given, key, value in calls:
        expected = _states(model(**given, **{key: value}))
        assert torch.equal(_states(model(**given, **{key: value.int()})), expected)  # int32 runs as int64 does
        with pytest.raises(af.ConfigError, match=rf"{key} have dtype {dtype};.*pass {key}\.long\(\)"):
            model(**given, **{key: value.to(dtype)})
    with pytest.raises(af.ConfigError, match=rf"position_ids have dtype {dtype};"):
        gpt2.generate(**inputs, position_ids=_positions(inputs["input_ids"]).to(dtype), max_new_tokens=2)


def test_an_attention_mask_of_any_integer_dtype_is_taken() -> None:
    model, inputs = _lm("llama"), tiny_decoder_inputs("llama")
    expected = model(**inputs).logits
    for dtype in (torch.int32, torch.int16, torch.uint8, torch.bool):
        assert torch.equal(model(**{**inputs, "attention_mask": inputs["attention_mask"].to(dtype)}).logits, expected)


def test_logits_to_keep_of_another_integer_dtype_is_refused() -> None:
    """An int16 index failed in torch; a uint8 one would index as a mask."""
    model, inputs = _lm("llama"), tiny_decoder_inputs("llama")
    keep = torch.tensor([0, 3])
    assert torch.equal(model(**inputs, logits_to_keep=keep.int()).logits, model(**inputs, logits_to_keep=keep).logits)
    for dtype in (torch.int16, torch.uint8):
        with pytest.raises(af.ConfigError, match=rf"logits_to_keep is a tensor of shape \(2,\) and dtype {dtype}"):
            model(**inputs, logits_to_keep=keep.to(dtype))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.int8], ids=str)
@pytest.mark.parametrize("model_type", ["llama", "gpt2", "t5", "bart"])
def test_narrow_lm_labels_give_the_int64_labels_loss_exactly(model_type: str, dtype: torch.dtype) -> None:
    """Was a RuntimeError from cross_entropy ('expected target dtype to be Long')."""
    model = _lm(model_type)
    inputs = tiny_decoder_inputs(model_type)
    labels = inputs.get("decoder_input_ids", inputs["input_ids"]).clone()
    labels[1, -2:] = -100
    expected = model(**inputs, labels=labels).loss
    assert torch.equal(model(**inputs, labels=labels.to(dtype)).loss, expected)
    routed = model(**inputs, labels=labels.to(dtype), adapter_names=["a", None]).loss
    assert torch.equal(routed, model(**inputs, labels=labels, adapter_names=["a", None]).loss)


def test_uint8_lm_labels_are_refused() -> None:
    model, inputs = _lm("llama"), tiny_decoder_inputs("llama")
    with pytest.raises(af.ConfigError, match=r"labels have dtype torch\.uint8; .*-100 \(which uint8 cannot hold\)"):
        model(**inputs, labels=inputs["input_ids"].to(torch.uint8))


def _task_model(name: str) -> tuple[af.AdaptedModel, dict[str, torch.Tensor], torch.Tensor]:
    torch.manual_seed(0)
    model = af.wrap(getattr(transformers, name)(tiny_config("bert", num_labels=3)).eval())
    inputs = tiny_inputs()
    if name == "BertForMultipleChoice":
        inputs = {key: value.unsqueeze(1).expand(-1, 2, -1).contiguous() for key, value in inputs.items()}
    labels = {
        "BertForSequenceClassification": torch.tensor([0, 2]),
        "BertForMultipleChoice": torch.tensor([1, 0]),
        "BertForTokenClassification": torch.ones(2, 7, dtype=torch.long),
        "BertForMaskedLM": inputs["input_ids"].clone(),
    }[name]
    return model, inputs, labels


@pytest.mark.parametrize(
    "name", ["BertForSequenceClassification", "BertForMultipleChoice", "BertForTokenClassification", "BertForMaskedLM"]
)
def test_a_wrapped_task_models_narrow_labels_give_the_int64_labels_loss_exactly(name: str) -> None:
    model, inputs, labels = _task_model(name)
    expected = model(**inputs, labels=labels).loss
    for dtype in (torch.int32, torch.int16, torch.int8):
        assert torch.equal(model(**inputs, labels=labels.to(dtype)).loss, expected), dtype
