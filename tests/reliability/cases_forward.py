"""Bad-input cases at one boundary, forward inputs: what a model call is handed (input_ids, attention_mask, labels,
unknown keywords), and a max_length longer than the encoder's positions."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers

import adapterfusion as af
from adapterfusion.experiments.errors import ExperimentSpecError
from catalogue import Action, BadInput, cli, experiment
from tiny_models import tiny_config, tiny_encoder, tiny_inputs

B = BadInput
GROUP = "model calls"


# ---- helpers -------------------------------------------------------------------------------------------------------
def _headed(model_type: str = "bert", kind: str = "classification", **head: Any) -> af.AdaptedModel:
    """A tiny encoder of `model_type` with an active head 'h' of `kind`."""
    model = af.wrap(tiny_encoder(model_type))
    config = {
        "classification": lambda: af.ClassificationHead(num_labels=2, **head),
        "regression": lambda: af.RegressionHead(**head),
        "multiple_choice": lambda: af.MultipleChoiceHead(**head),
    }[kind]()
    model.add_head("h", config)
    model.activate(head="h")
    return model


def _call(build: Callable[[], af.AdaptedModel], **changes: Any) -> Callable[[Path], Action]:
    """model(**tiny_inputs() with `changes`); a value None drops that input."""

    def prepare(folder: Path) -> Action:
        model = build()
        inputs: dict[str, Any] = {**tiny_inputs(), **changes}
        return lambda: model(**{key: value for key, value in inputs.items() if value is not None})

    return prepare


def _ids(*shape: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
    return torch.full(shape, 7, dtype=dtype)


def _mask_with_empty_row() -> torch.Tensor:
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[1] = 0
    return mask


def _labels_without_loss(folder: Path) -> Action:
    """A fusion active and no head on a bare AutoModel: nothing can turn labels into a loss."""
    model = af.wrap(tiny_encoder("bert"))
    for name in ("a", "b"):
        model.add_adapter(name)
    model.add_fusion("f", ["a", "b"])
    model.activate(fusion="f")
    return lambda: model(**tiny_inputs(), labels=torch.tensor([0, 1]))


def _task_model_labels(labels: Any) -> Callable[[Path], Action]:
    """af.wrap(BertForSequenceClassification) with no head of ours: labels go to transformers' loss."""

    def prepare(folder: Path) -> Action:
        model = af.wrap(transformers.BertForSequenceClassification(tiny_config("bert")).eval())
        return lambda: model(**tiny_inputs(), labels=labels)

    return prepare


def _parallel(**changes: Any) -> Callable[[Path], Action]:
    """forward_parallel of fusion 'f' over adapters a, b (heads a, b, f) with `changes` to the inputs."""

    def prepare(folder: Path) -> Action:
        model = af.wrap(tiny_encoder("bert"))
        for name in ("a", "b", "f"):
            if name != "f":
                model.add_adapter(name)
            model.add_head(name, af.ClassificationHead(num_labels=2))
        model.add_fusion("f", ["a", "b"])
        inputs = {**tiny_inputs(), **changes}
        return lambda: model.forward_parallel("f", **inputs)

    return prepare


def _train_adapter_max_length(folder: Path) -> Action:
    return lambda: cli(
        "train-adapter",
        *("--task", "rte", "--setup", "st-a", "--max-length", "100000"),
        *("--output-dir", str(folder / "runs"), "--store", str(folder / "store")),
    )


def _regression_head() -> af.AdaptedModel:
    return _headed(kind="regression")


CASES: tuple[BadInput, ...] = (
    # keywords
    B(
        "forward-adapter-names",
        GROUP,
        "model(**batch, adapter_names=['a']) for a batch of 2 (one entry per example; was silently ignored)",
        af.ConfigError,
        ("adapter_names", "1 entries", "batch of 2", "one per example"),
        _call(_headed, adapter_names=["a"]),
    ),
    B(
        "forward-unknown-keyword",
        GROUP,
        "model(**batch, input_idz=...) (a typo; was silently ignored)",
        af.ConfigError,
        ("'input_idz'", "BertModel", "token_type_ids"),
        _call(_headed, input_idz=torch.ones(2, 7, dtype=torch.long)),
    ),
    B(
        "forward-keyword-other-architecture",
        GROUP,
        "token_type_ids=... to a DistilBERT model, whose forward has no such input (was silently ignored)",
        af.ConfigError,
        ("'token_type_ids'", "DistilBertModel"),
        _call(lambda: _headed("distilbert"), token_type_ids=torch.zeros(2, 7, dtype=torch.long)),
    ),
    B(
        "forward-unknown-keyword-deberta",
        GROUP,
        "model(**batch, foo=1) to a DeBERTa-v2, whose forward swallows any **kwargs unread (was silently ignored)",
        af.ConfigError,
        ("'foo'", "DebertaV2Model", "token_type_ids"),
        _call(lambda: _headed("deberta-v2"), foo=1),
    ),
    B(
        "forward-return-dict-false",
        GROUP,
        "model(**batch, return_dict=False) with a head (was an AttributeError on a tuple)",
        af.ConfigError,
        ("return_dict=False", "to_tuple()"),
        _call(_headed, return_dict=False),
    ),
    # input_ids / inputs_embeds
    B(
        "forward-no-input",
        GROUP,
        "model(attention_mask=...) with neither input_ids nor inputs_embeds (was a ValueError from transformers)",
        af.ConfigError,
        ("input_ids", "inputs_embeds", "neither"),
        _call(_headed, input_ids=None),
    ),
    B(
        "forward-ids-and-embeds",
        GROUP,
        "model(input_ids=..., inputs_embeds=...) (was a ValueError from transformers)",
        af.ConfigError,
        ("input_ids", "inputs_embeds", "not both"),
        _call(_headed, inputs_embeds=torch.zeros(2, 7, 32)),
    ),
    B(
        "forward-ids-list",
        GROUP,
        "input_ids as a Python list of lists (was an AttributeError from transformers)",
        af.ConfigError,
        ("input_ids", "list", "torch.Tensor", "return_tensors='pt'"),
        _call(_headed, input_ids=[[7] * 7] * 2),
    ),
    B(
        "forward-ids-float",
        GROUP,
        "float input_ids (was a RuntimeError from the embedding)",
        af.ConfigError,
        ("input_ids", "torch.float32", "integer"),
        _call(_headed, input_ids=_ids(2, 7, dtype=torch.float32)),
    ),
    B(
        "forward-ids-1d",
        GROUP,
        "1-D input_ids [seq] (one unbatched sentence; was a ValueError from transformers)",
        af.ConfigError,
        ("input_ids", "(7,)", "[batch, seq]", "unsqueeze(0)"),
        _call(_headed, input_ids=_ids(7), attention_mask=None),
    ),
    B(
        "forward-ids-3d",
        GROUP,
        "3-D input_ids [batch, choices, seq] for a classification head (was a ValueError from transformers)",
        af.ConfigError,
        ("input_ids", "(2, 3, 7)", "[batch, seq]", "MultipleChoiceHead"),
        _call(_headed, input_ids=_ids(2, 3, 7), attention_mask=None),
    ),
    B(
        "forward-choices-2d",
        GROUP,
        "2-D input_ids for a multiple-choice head",
        af.ConfigError,
        ("input_ids", "(2, 7)", "[batch, num_choices, seq]"),
        _call(lambda: _headed(kind="multiple_choice")),
    ),
    B(
        "forward-choices-mask-shape",
        GROUP,
        "a multiple-choice batch whose attention_mask has 2 choices where input_ids have 3 (was silently accepted)",
        af.ConfigError,
        ("attention_mask", "(2, 2, 7)", "(2, 3, 7)"),
        _call(
            lambda: _headed(kind="multiple_choice"),
            input_ids=_ids(2, 3, 7),
            attention_mask=torch.ones(2, 2, 7, dtype=torch.long),
        ),
    ),
    B(
        "forward-empty-batch",
        GROUP,
        "input_ids of shape (0, 7): an empty batch (was a RuntimeError from a reshape)",
        af.ConfigError,
        ("input_ids", "(0, 7)", "empty"),
        _call(_headed, input_ids=_ids(0, 7), attention_mask=None),
    ),
    B(
        "forward-empty-sequence",
        GROUP,
        "input_ids of shape (2, 0): no tokens (was a RuntimeError from a reshape)",
        af.ConfigError,
        ("input_ids", "(2, 0)", "empty"),
        _call(_headed, input_ids=_ids(2, 0), attention_mask=None),
    ),
    B(
        "forward-too-long",
        GROUP,
        "100 tokens into a BERT with 64 positions (was a RuntimeError about an expanded size)",
        af.ConfigError,
        ("100 tokens", "64", "max_position_embeddings", "truncat"),
        _call(_headed, input_ids=_ids(1, 100), attention_mask=None),
    ),
    B(
        "forward-too-long-roberta",
        GROUP,
        "63 tokens into a RoBERTa with max_position_embeddings=64 and pad id 1: its positions start at 2, so "
        "62 fit (was an IndexError from the embedding)",
        af.ConfigError,
        ("63 tokens", "62", "padding"),
        _call(lambda: _headed("roberta"), input_ids=_ids(1, 63), attention_mask=None),
    ),
    B(
        "forward-token-id-negative",
        GROUP,
        "input_ids holding -1 (was an IndexError from the embedding; a device-side assert on CUDA)",
        af.ConfigError,
        ("input_ids", "-1", "0..99", "vocabulary"),
        _call(_headed, input_ids=torch.tensor([[5, -1, 6], [5, 6, 7]]), attention_mask=None),
    ),
    B(
        "forward-token-id-too-large",
        GROUP,
        "input_ids holding 100 for a vocabulary of 100 (a tokenizer of another model; was an IndexError)",
        af.ConfigError,
        ("input_ids", "100", "0..99", "tokenizer"),
        _call(_headed, input_ids=torch.tensor([[5, 100, 6], [5, 6, 7]]), attention_mask=None),
    ),
    B(
        "forward-token-type-id-out-of-range",
        GROUP,
        "token_type_ids holding 2 for a BERT with type_vocab_size=2 (was an IndexError from the embedding)",
        af.ConfigError,
        ("token_type_ids", "2", "type_vocab_size"),
        _call(_headed, token_type_ids=torch.full((2, 7), 2)),
    ),
    B(
        "forward-embeds-width",
        GROUP,
        "inputs_embeds of width 16 into an encoder of hidden size 32 (was a RuntimeError deep in a layer)",
        af.ConfigError,
        ("inputs_embeds", "(2, 7, 16)", "32"),
        _call(_headed, input_ids=None, inputs_embeds=torch.zeros(2, 7, 16)),
    ),
    # attention_mask / token_type_ids against input_ids
    B(
        "forward-mask-batch-mismatch",
        GROUP,
        "attention_mask of 3 rows for input_ids of 2 (was silently accepted)",
        af.ConfigError,
        ("attention_mask", "(3, 7)", "(2, 7)"),
        _call(_headed, attention_mask=torch.ones(3, 7, dtype=torch.long)),
    ),
    B(
        "forward-mask-length-mismatch",
        GROUP,
        "attention_mask of 5 tokens for input_ids of 7 (was silently accepted)",
        af.ConfigError,
        ("attention_mask", "(2, 5)", "(2, 7)"),
        _call(_headed, attention_mask=torch.ones(2, 5, dtype=torch.long)),
    ),
    B(
        "forward-token-types-mismatch",
        GROUP,
        "token_type_ids of 5 tokens for input_ids of 7 (was a RuntimeError from the embeddings)",
        af.ConfigError,
        ("token_type_ids", "(2, 5)", "(2, 7)"),
        _call(_headed, token_type_ids=torch.zeros(2, 5, dtype=torch.long)),
    ),
    B(
        "forward-mask-row-empty",
        GROUP,
        "a mean-pooling head and a batch whose row 1 has an all-zero attention_mask (was the same finite logits "
        "for every such row)",
        af.ConfigError,
        ("attention_mask", "rows [1]", "no token"),
        _call(lambda: _headed(pooling="mean"), input_ids=_ids(3, 7), attention_mask=_mask_with_empty_row()),
    ),
    B(
        "forward-mask-values",
        GROUP,
        "an attention_mask holding 2 (was silently accepted: transformers adds it into the attention scores)",
        af.ConfigError,
        ("attention_mask", "[2]", "0 and 1"),
        _call(_headed, attention_mask=torch.full((2, 7), 2)),
    ),
    # labels
    B(
        "forward-labels-list",
        GROUP,
        "labels as a Python list [0, 1] (was an AttributeError)",
        af.ConfigError,
        ("labels", "list", "torch.tensor("),
        _call(_headed, labels=[0, 1]),
    ),
    B(
        "forward-labels-strings",
        GROUP,
        "labels as strings ['yes', 'no'] (was an AttributeError)",
        af.ConfigError,
        ("labels", "list", "class ids"),
        _call(_headed, labels=["yes", "no"]),
    ),
    B(
        "forward-labels-2d",
        GROUP,
        "labels of shape (2, 1) for a classification head (was a RuntimeError from cross_entropy)",
        af.ConfigError,
        ("labels", "(2, 1)", "[batch]"),
        _call(_headed, labels=torch.tensor([[0], [1]])),
    ),
    B(
        "forward-labels-regression-shape",
        GROUP,
        "labels of shape (2, 1) for a regression head (was a broadcast mse_loss over a 2 x 2 grid)",
        af.ConfigError,
        ("labels", "(2, 1)", "[batch]"),
        _call(lambda: _headed(kind="regression"), labels=torch.tensor([[0.5], [1.0]])),
    ),
    B(
        "forward-labels-device",
        GROUP,
        "labels on another device than the head (was a RuntimeError from cross_entropy)",
        af.ConfigError,
        ("labels", "meta", "cpu", ".to("),
        _call(_headed, labels=torch.tensor([0, 1], device="meta")),
    ),
    B(
        "forward-labels-without-loss",
        GROUP,
        "labels with a fusion active and no head on a bare AutoModel (was loss None)",
        af.ConfigError,
        ("labels", "no head is active", "activate(head=", "add_head"),
        _labels_without_loss,
    ),
    B(
        "forward-task-model-labels-batch",
        GROUP,
        "af.wrap(BertForSequenceClassification) with 3 labels for a batch of 2 (was a ValueError from transformers)",
        af.ConfigError,
        ("labels", "3", "batch of 2"),
        _task_model_labels(torch.tensor([0, 1, 1])),
    ),
    # forward_parallel runs the same checks
    B(
        "parallel-unknown-keyword",
        GROUP,
        "forward_parallel('f', **batch, adapter_names=['a']) (was silently ignored)",
        af.ConfigError,
        ("adapter_names", "not supported"),
        _parallel(adapter_names=["a"]),
    ),
    B(
        "parallel-mask-mismatch",
        GROUP,
        "forward_parallel with an attention_mask of 3 rows for input_ids of 2 (was silently accepted)",
        af.ConfigError,
        ("attention_mask", "(3, 7)", "(2, 7)"),
        _parallel(attention_mask=torch.ones(3, 7, dtype=torch.long)),
    ),
    # max_length against the encoder's positions
    B(
        "train-max-length-over-positions",
        "command line",
        "`adapterfusion train-adapter --max-length 100000` on the shipped MiniLM (512 positions)",
        af.ConfigError,
        ("max_length=100000", "512", "max_position_embeddings"),
        _train_adapter_max_length,
        cli=True,
    ),
    B(
        "experiment-max-length-over-positions",
        "experiment files",
        "experiment file training: {max_length: 100000} on the shipped MiniLM (512 positions)",
        ExperimentSpecError,
        ("training.max_length", "100000", "512"),
        experiment(encoder=None, training={"max_length": 100000}),
        cli=True,
    ),
    # #21's second trial: what the first validator let through
    B(
        "forward-embeds-other-dtype",
        GROUP,
        "float64 inputs_embeds into a float32 model (was a RuntimeError 'mixed dtype' from a LayerNorm)",
        af.ConfigError,
        ("inputs_embeds", "torch.float64", "torch.float32", ".to("),
        _call(_headed, input_ids=None, attention_mask=None, inputs_embeds=torch.zeros(2, 7, 32, dtype=torch.float64)),
    ),
    B(
        "forward-embeds-nan",
        GROUP,
        "inputs_embeds holding NaN (was NaN logits, without a word)",
        af.ConfigError,
        ("inputs_embeds", "NaN"),
        _call(_headed, input_ids=None, attention_mask=None, inputs_embeds=torch.full((2, 7, 32), math.nan)),
    ),
    B(
        "forward-flag-not-bool",
        GROUP,
        "model(**batch, output_hidden_states='yes') (was a TypeError from inside transformers)",
        af.ConfigError,
        ("output_hidden_states='yes'", "str", "True or False"),
        _call(_headed, output_hidden_states="yes"),
    ),
    B(
        "forward-mask-fraction",
        GROUP,
        "a float attention_mask holding 0.5 (was silently accepted: transformers adds it into the attention scores)",
        af.ConfigError,
        ("attention_mask", "[0.5]", "only 0 and 1"),
        _call(_headed, attention_mask=torch.full((2, 7), 0.5)),
    ),
    B(
        "forward-labels-regression-nan",
        GROUP,
        "regression labels [1.0, nan] (was a NaN loss, without a word)",
        af.ConfigError,
        ("head 'h'", "regression labels", "nan"),
        _call(_regression_head, labels=torch.tensor([1.0, math.nan])),
    ),
    B(
        "parallel-heads-list",
        GROUP,
        "forward_parallel('f', heads=['a', 'b']): a list where a mapping adapter -> head goes (was a ValueError "
        "from dict())",
        af.ConfigError,
        ("heads=['a', 'b']", "list", "mapping"),
        _parallel(heads=["a", "b"]),
    ),
)
