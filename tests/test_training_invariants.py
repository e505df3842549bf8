"""AdapterHub's run_train_test invariant: after a few AdamW steps at a high learning rate the trained piece
changed and everything else (other adapters, fusions, the whole base model) is bit-identical."""

from __future__ import annotations

import pytest
import torch
import transformers

import adapterfusion as af
from adapterfusion.trainable import own_head_parameters
from tiny_decoders import tiny_decoder_config
from tiny_models import HIDDEN, randomise, tiny_config, tiny_encoder, tiny_inputs
from tolerances import assert_close

NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _setup(adapter_preset: str = "pfeiffer", dropout: bool = True) -> af.AdaptedModel:
    model = af.wrap(tiny_encoder("bert", **({} if dropout else NO_DROPOUT)))
    model.add_adapter("a", af.AdapterConfig.from_name(adapter_preset, reduction_factor=4))
    model.add_adapter("b", af.AdapterConfig.from_name(adapter_preset, reduction_factor=4))
    model.add_fusion("f", ["a", "b"])
    model.add_head("h", af.ClassificationHead(num_labels=2, dropout=0.1 if dropout else 0.0))
    return model


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {key: value.detach().clone() for key, value in model.state_dict().items()}


def _train(model: af.AdaptedModel, steps: int = 5, lr: float = 1e-2) -> list[float]:
    """AdamW over *all* parameters, as a careless trainer would: freezing must do the work."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    inputs = tiny_inputs(batch=4, seq=6)
    labels = torch.tensor([0, 1, 1, 0])
    model.train()
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = model(**inputs, labels=labels).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _changed(before: dict[str, torch.Tensor], model: torch.nn.Module) -> set[str]:
    after = model.state_dict()
    assert after.keys() == before.keys()
    return {key for key in before if not torch.equal(before[key], after[key])}


def _owned_by(key: str, *pieces: str) -> bool:
    return any(piece in key for piece in pieces)


def test_train_adapter_changes_only_that_adapter_and_the_head():
    model = _setup()
    before = _snapshot(model)
    model.train_adapter("a", head="h")
    _train(model)
    changed = _changed(before, model)
    trained = {k for k in before if _owned_by(k, ".adapters.a.", "heads.h.")}
    assert changed == trained
    assert all(".adapters.a." in k for k in trained if not k.startswith("heads."))
    assert any(".adapters.a.down." in k for k in changed) and any(".adapters.a.up." in k for k in changed)


def test_train_fusion_changes_only_fusion_and_head():
    model = _setup()
    before = _snapshot(model)
    model.train_fusion("f", head="h")
    _train(model)
    changed = _changed(before, model)
    # K's bias adds the same constant to every score and cancels in the softmax: its gradient is zero.
    cancelling = {k for k in before if k.endswith(".fusions.f.key.bias")}
    assert changed == {k for k in before if _owned_by(k, ".fusions.f.", "heads.h.")} - cancelling
    for part in ("query", "key", "value"):
        assert any(f".fusions.f.{part}.weight" in k for k in changed)


def test_houlsby_trains_its_layer_norm_copies_not_the_encoders():
    model = _setup("houlsby")
    before = _snapshot(model)
    model.train_adapter("a", head="h")
    _train(model)
    changed = _changed(before, model)
    assert changed == {k for k in before if _owned_by(k, ".adapters.a.", "heads.h.")}
    copies = {k for k in changed if ".adapters.a.layer_norm." in k}
    assert len(copies) == 2 * 2 * 2  # (weight, bias) x 2 positions x 2 layers
    encoder_norms = [k for k in before if "LayerNorm" in k and ".adapters." not in k]
    assert encoder_norms and not set(encoder_norms) & changed


def test_train_encoder_changes_the_encoder_but_not_other_adapters():
    model = _setup()
    before = _snapshot(model)
    model.train_adapter("a", head="h", train_encoder=True)
    _train(model)
    changed = _changed(before, model)
    assert not {k for k in changed if _owned_by(k, ".adapters.b.", ".fusions.")}
    for key in (
        "model.embeddings.word_embeddings.weight",
        "model.encoder.layer.0.output.base_layer.dense.weight",
        "model.encoder.layer.1.attention.output.base_layer.LayerNorm.weight",
    ):
        assert key in changed
    assert any(".adapters.a." in k for k in changed) and any(k.startswith("heads.h.") for k in changed)


# Wrapped transformers task models and the prefix of their own output layer's weights, which transformers initialises
# anew for the task and the model's own loss reads when no head of ours is active.
OWN_HEADS = {
    "BertForSequenceClassification": ("bert", "model.classifier."),
    "LlamaForSequenceClassification": ("llama", "model.score."),
    "GPT2ForSequenceClassification": ("gpt2", "model.score."),
    "BartForSequenceClassification": ("bart", "model.classification_head."),
}


@pytest.mark.parametrize("piece", ["adapter", "fusion"])
@pytest.mark.parametrize("class_name", sorted(OWN_HEADS))
def test_with_no_head_of_ours_the_task_models_own_output_layer_trains_too(class_name: str, piece: str) -> None:
    """It was left frozen at its random initialisation, so the piece was fitted to a random classifier; the rest of
    the base model stays bit-identical."""
    model_type, own = OWN_HEADS[class_name]
    config = tiny_config(model_type) if model_type == "bert" else tiny_decoder_config(model_type, num_labels=2)
    torch.manual_seed(0)
    model = af.wrap(getattr(transformers, class_name)(config))
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(4))
    model.add_fusion("f", ["a", "b"])
    before = _snapshot(model)
    model.train_adapter("a") if piece == "adapter" else model.train_fusion("f")
    inputs = tiny_inputs(batch=4, seq=6)
    inputs["input_ids"][:, -1] = 2  # BART pools each row's end token (its eos id)
    inputs["attention_mask"][:] = 1
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(3):
        optimizer.zero_grad()
        model(**inputs, labels=torch.tensor([0, 1, 1, 0])).loss.backward()
        optimizer.step()
    changed = _changed(before, model)
    pieces = ".adapters.a." if piece == "adapter" else ".fusions.f."
    cancelling = {k for k in before if k.endswith(".fusions.f.key.bias")}  # as in test_train_fusion_...
    assert changed == {k for k in before if pieces in k or k.startswith(own)} - cancelling
    assert any(k.startswith(own) for k in changed)


def test_a_language_models_head_is_not_its_own_task_layer() -> None:
    """A language model's LM head is pretrained, with the module around it (a masked LM's whole prediction head,
    BERT's LM transform, BertForPreTraining's next-sentence layer): it stays frozen."""
    heads = {}
    for class_name, config in (
        ("LlamaForCausalLM", tiny_decoder_config("llama", tie_word_embeddings=False)),
        ("BertForMaskedLM", tiny_config("bert")),
        ("GPT2DoubleHeadsModel", tiny_decoder_config("gpt2")),
        ("T5ForQuestionAnswering", tiny_decoder_config("t5")),  # its own base model: the stacks are its own
        ("T5ForConditionalGeneration", tiny_decoder_config("t5")),
        ("BertLMHeadModel", tiny_config("bert", is_decoder=True)),  # its LM head's dense + LayerNorm transform
        ("RobertaForCausalLM", tiny_config("roberta", is_decoder=True)),
        ("BertForPreTraining", tiny_config("bert")),  # and the pretrained next-sentence layer beside it
    ):
        model = af.wrap(getattr(transformers, class_name)(config))
        names = {id(p): n for n, p in model.model.named_parameters()}
        heads[class_name] = sorted(names[id(p)] for p in own_head_parameters(model))
    assert heads == {
        "LlamaForCausalLM": [],
        "BertForMaskedLM": [],
        "GPT2DoubleHeadsModel": ["multiple_choice_head.summary.bias", "multiple_choice_head.summary.weight"],
        "T5ForQuestionAnswering": ["qa_outputs.bias", "qa_outputs.weight"],
        "T5ForConditionalGeneration": [],
        "BertLMHeadModel": [],
        "RobertaForCausalLM": [],
        "BertForPreTraining": [],
    }


def test_value_gradient_includes_the_regulariser():
    model = _setup(dropout=False).double()  # float64: the two gradients are equal up to rounding
    model.train_fusion("f", head="h")
    with torch.no_grad():
        for site in model.sites_with_fusion("f"):
            randomise(site.fusions["f"].query, std=0.2)
            randomise(site.fusions["f"].key, std=0.2)
            site.fusions["f"].value.weight.add_(torch.randn(HIDDEN, HIDDEN) * 0.1)
    values = [p for n, p in model.named_parameters() if n.endswith("fusions.f.value.weight")]
    inputs, labels = tiny_inputs(), torch.tensor([1, 0])
    model.train()

    out = model(**inputs, labels=labels)
    total = torch.autograd.grad(out.loss, values)
    out = model(**inputs, labels=labels)
    task = torch.autograd.grad(out.task_loss, values)
    for value, g_total, g_task in zip(values, total, task, strict=True):
        expected = g_task + 0.02 * (value.detach() - torch.eye(HIDDEN, dtype=value.dtype))
        assert_close(g_total, expected)
        assert (0.02 * (value.detach() - torch.eye(HIDDEN, dtype=value.dtype))).abs().max() > 1e-4


@pytest.mark.parametrize("setup", ["adapter", "fusion"])
def test_loss_falls_on_a_learnable_task(setup):
    model = _setup(dropout=False)
    if setup == "adapter":
        model.train_adapter("a", head="h")
    else:
        model.train_fusion("f", head="h")
    generator = torch.Generator().manual_seed(3)
    input_ids = torch.randint(5, 100, (16, 6), generator=generator)
    labels = (input_ids[:, 1] >= 52).long()  # a property of one token: learnable from the CLS position
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = model(input_ids=input_ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses
