"""Our prediction heads on decoders: pooled at each row's last non-padding token, with left or right padding, equal
to the head on that row run alone without padding (float64); 'cls' pooling refused where it reads nothing."""

from __future__ import annotations

import pytest
import torch

import adapterfusion as af
from tiny_decoders import tiny_decoder, tiny_decoder_inputs
from tiny_models import tiny_encoder
from tolerances import assert_close

# Gemma2 is left out: transformers runs it with eager attention only, which in float64 turns left padding into NaN.
DECODERS = ("gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma3_text", "phi3")


def _model(model_type: str) -> af.AdaptedModel:
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    model.model.set_attn_implementation("sdpa")  # eager float64 turns fully masked (left-pad) rows into NaN
    model.add_adapter("a", af.AdapterConfig.pfeiffer(4, init="bert"))
    model.add_head("cls", af.ClassificationHead(num_labels=3, pooling="last"))
    model.activate(adapter="a", head="cls")
    return model


def _alone(model: af.AdaptedModel, tokens: torch.Tensor) -> torch.Tensor:
    """The head on one unpadded sequence: its last position's hidden state, pooled by hand."""
    with model.activated(adapter="a"):
        hidden = model.model.base_model(input_ids=tokens[None]).last_hidden_state  # the decoder's own last layer
    return model.get_head("cls").from_pooled(hidden[:, -1])[0]


@pytest.mark.parametrize("model_type", DECODERS)
@pytest.mark.parametrize("side", ["right", "left"])
def test_last_token_pooling_equals_each_row_alone(model_type: str, side: str) -> None:
    model = _model(model_type).eval()
    rows = [torch.tensor([11, 12, 13, 14, 15, 16]), torch.tensor([21, 22, 23, 24])]
    width = max(len(row) for row in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        place = slice(0, len(row)) if side == "right" else slice(width - len(row), width)
        ids[i, place], mask[i, place] = row, 1
    with torch.no_grad():
        # no position_ids: a head call numbers each row's tokens from 0 (GPT-2's learned positions would shift)
        logits = model(input_ids=ids, attention_mask=mask).logits
        for i, row in enumerate(rows):
            assert_close(logits[i], _alone(model, row), dtype=torch.float64, label=f"row {i}")
        routed = model(input_ids=ids, attention_mask=mask, adapter_names=["a", "a"]).logits  # routed calls alike
        assert_close(routed, logits, dtype=torch.float64)


def test_cls_pooling_is_refused_on_a_decoder_and_a_head_pools_the_last_token_by_default() -> None:
    model = af.wrap(tiny_decoder("llama"))
    with pytest.raises(af.ConfigError, match="pooling='last'"):
        model.add_head("h", af.ClassificationHead(num_labels=2, pooling="cls"))
    assert model.head_names == []
    model.add_head("h", af.ClassificationHead(num_labels=2))
    assert model.heads["h"].config.pooling == "last"
    encoder = af.wrap(tiny_encoder("bert"))
    encoder.add_head("h", af.ClassificationHead(num_labels=2))
    assert encoder.heads["h"].config.pooling == "cls"


def test_a_fusion_and_a_head_train_on_a_decoder() -> None:
    model = af.wrap(tiny_decoder("qwen2"))
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(4, init="bert"))
    model.add_fusion("f", ["a", "b"])
    model.add_head("f", af.ClassificationHead(num_labels=2, pooling="last"))
    model.train_fusion("f")
    model.activate(fusion="f", head="f")
    inputs = tiny_decoder_inputs("qwen2")
    output = model(**inputs, labels=torch.tensor([0, 1]))
    output.loss.backward()
    trained = {name for name, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert trained and all(".fusions.f." in name or name.startswith("heads.f.") for name in trained)


@pytest.mark.parametrize("model_type", ["llama", "bart"])  # a decoder, and an encoder-decoder's decoder
def test_multiple_choice_on_a_decoder(model_type: str) -> None:
    model = af.wrap(tiny_decoder(model_type))
    model.add_head("mc", af.MultipleChoiceHead(num_labels=3, pooling="last"))
    model.activate(head="mc")
    ids = torch.randint(5, 100, (2, 3, 6))
    output = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=torch.tensor([0, 2]))
    assert output.logits.shape == (2, 3) and torch.isfinite(output.loss)


@pytest.mark.parametrize(
    "head", [af.QuestionAnsweringHead(), af.TokenClassificationHead(num_labels=3)], ids=lambda h: h.kind
)
def test_per_token_heads_on_a_decoder_are_not_refused_over_pooling(head: af.HeadConfig) -> None:
    """QA and tagging heads read every token and never pool, so the cls-pooling refusal (whose advice, pooling=
    'last', changed nothing for them) does not apply: with the default config each token gets its logits."""
    model = af.wrap(tiny_decoder("llama"))
    model.add_head("h", head)
    model.activate(head="h")
    inputs = tiny_decoder_inputs("llama")
    with torch.no_grad():
        output = model(**inputs)
    assert output.logits.shape[:2] == inputs["input_ids"].shape  # QA: [batch, tokens, 2] start and end logits
