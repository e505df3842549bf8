"""Bad-input cases at one boundary, forward inputs: what a model call is handed (input_ids, attention_mask, labels,
unknown keywords), and a max_length longer than the encoder's positions."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers.cache_utils import DynamicCache

import adapterfusion as af
from adapterfusion.experiments.errors import ExperimentSpecError
from catalogue import Action, BadInput, cli, experiment, generating, tiny_lm
from tiny_decoders import tiny_decoder, tiny_decoder_inputs
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


def _cast_inside_cache(folder: Path) -> Action:
    """A fused model's forward inside inference_cache(), after model.to(bfloat16) in the same block."""
    model = _headed()
    model.add_adapter("a")
    model.add_adapter("b")
    model.add_fusion("f", ["a", "b"])
    model.activate(fusion="f", head=model.active_head)

    def act() -> None:
        with model.inference_cache():
            model(**tiny_inputs())
            model.to(torch.bfloat16)
            model(**tiny_inputs())

    return act


def _head_cast_by_hand(folder: Path) -> Action:
    """model.get_head('h').to(torch.bfloat16) on a float32 encoder, then a forward."""
    model = _headed()
    model.get_head("h").to(torch.bfloat16)
    return lambda: model(**tiny_inputs())


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


def _task_model_labels(
    labels: Any, task_model: str = "BertForSequenceClassification", earlier: Any = None
) -> Callable[[Path], Action]:
    """af.wrap(<task_model>) with no head of ours: labels go to transformers' loss (after a call with `earlier`
    labels, which fixes the config's problem_type)."""

    def prepare(folder: Path) -> Action:
        model = af.wrap(getattr(transformers, task_model)(tiny_config("bert", num_labels=5)).eval())
        if earlier is not None:
            model(**tiny_inputs(), labels=earlier)
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


def _bare_t5_call(folder: Path) -> Action:
    """A bare T5Model (no LM head) with adapter 'a' active, called with input_ids and no decoder inputs."""
    model = af.wrap(transformers.T5Model(tiny_decoder("t5").config))
    model.add_adapter("a")
    model.activate(adapter="a")
    inputs = tiny_decoder_inputs("t5")
    return lambda: model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])


def _lm_call(model_type: str, **changes: Any) -> Callable[[Path], Action]:
    """model(**tiny_decoder_inputs(model_type) with `changes`) of tiny_lm(model_type); a value None drops that input."""

    def prepare(folder: Path) -> Action:
        model = tiny_lm(model_type)
        inputs: dict[str, Any] = {**tiny_decoder_inputs(model_type), **changes}
        return lambda: model(**{key: value for key, value in inputs.items() if value is not None})

    return prepare


def _cached_step(new_rows: int = 2, mask: int | None = 1, past: str = "cache") -> Callable[[Path], Action]:
    """A tiny Llama run on 7 tokens with use_cache=True, then a step of 1 new token per row of `new_rows` rows, its
    attention_mask covering `mask` tokens (None: no mask); past 'tuple': the cache as a legacy tuple of tuples."""

    def prepare(folder: Path) -> Action:
        model = tiny_lm("llama")
        ids = tiny_decoder_inputs("llama")["input_ids"]
        cache = model(input_ids=ids, use_cache=True).past_key_values
        given = ((torch.zeros(2, 2, 7, 8),) * 2,) * 2 if past == "tuple" else cache
        step = torch.full((new_rows, 1), 7)
        attention = None if mask is None else torch.ones(new_rows, mask, dtype=torch.long)
        return lambda: model(input_ids=step, attention_mask=attention, past_key_values=given)

    return prepare


def _labelled(model_type: str, labels: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[Path], Action]:
    """_lm_call(model_type) with labels made from its (decoder) input ids."""
    inputs = tiny_decoder_inputs(model_type)
    return _lm_call(model_type, labels=labels(inputs.get("decoder_input_ids", inputs["input_ids"])))


def _ignored_but_first(ids: torch.Tensor) -> torch.Tensor:
    """Causal-LM labels with only position 0 labelled, which no position predicts."""
    labels = torch.full_like(ids, -100)
    labels[:, 0] = ids[:, 0]
    return labels


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
        "forward-gpt2-token-type-out-of-vocab",
        GROUP,
        "token_type_ids holding 100 for a GPT-2 of 100 tokens, which has no type table and embeds token types with "
        "its token embeddings (was an IndexError from the embedding)",
        af.ConfigError,
        ("token_type_ids", "[100]", "0..99", "gpt2 embeds token types as tokens"),
        _lm_call("gpt2", token_type_ids=torch.full((2, 7), 100)),
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
        "forward-model-on-meta",
        GROUP,
        "model.to('meta'), then a forward (was a RuntimeError 'Tensor.item() cannot be called on meta tensors' from "
        "transformers' mask code)",
        af.ConfigError,
        ("the model's weights", "meta device", "no values", "to_empty"),
        _call(lambda: _headed().to("meta")),
    ),
    B(
        "forward-cast-inside-inference-cache",
        GROUP,
        "model.to(torch.bfloat16) inside inference_cache(), then a fused forward (was a RuntimeError 'mat1 and mat2 "
        "must have the same dtype' from torch: the block's folds were float32)",
        af.ConfigError,
        ("cast or moved inside inference_cache()", "torch.bfloat16", "outside the block"),
        _cast_inside_cache,
    ),
    B(
        "forward-head-cast-by-hand",
        GROUP,
        "model.get_head('h').to(torch.bfloat16) on a float32 encoder, then a forward (was torch's 'mat1 and mat2 "
        "must have the same dtype', naming no piece)",
        af.ConfigError,
        ("head 'h' (torch.bfloat16)", "another dtype than the encoder's torch.float32", "model.to(torch.float32)"),
        _head_cast_by_hand,
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
    B(
        "forward-task-model-float-class-labels",
        GROUP,
        "af.wrap(BertForSequenceClassification) with float labels [0., 1.] (was a ValueError from transformers' "
        "binary cross-entropy, which it picks for float labels)",
        af.ConfigError,
        ("float labels", "multi-label targets", "[batch, num_labels=5]", "integer labels"),
        _task_model_labels(torch.tensor([0.0, 1.0])),
    ),
    B(
        "forward-task-model-labels-after-problem-type",
        GROUP,
        "af.wrap(BertForSequenceClassification): multi-hot float labels after a call with class ids (was a "
        "ValueError: transformers had fixed problem_type to single-label)",
        af.ConfigError,
        ("single_label_classification", "problem_type", "integer class ids"),
        _task_model_labels(torch.zeros(2, 5), earlier=torch.tensor([0, 1])),
    ),
    B(
        "forward-task-model-class-id-rows",
        GROUP,
        "af.wrap(BertForSequenceClassification) with integer labels of shape (2, 3) (was a ValueError from "
        "transformers' cross-entropy)",
        af.ConfigError,
        ("integer labels of shape (2, 3)", "one per example, [batch]"),
        _task_model_labels(torch.zeros(2, 3, dtype=torch.long)),
    ),
    B(
        "forward-token-task-model-all-ignored",
        GROUP,
        "af.wrap(BertForTokenClassification) with every label -100 (was a NaN loss, silently)",
        af.ConfigError,
        ("no label is counted", "-100", "NaN"),
        _task_model_labels(torch.full((2, 7), -100), "BertForTokenClassification"),
    ),
    B(
        "forward-token-task-model-tag-range",
        GROUP,
        "af.wrap(BertForTokenClassification) with a tag 7 of 5 (was an IndexError from cross_entropy)",
        af.ConfigError,
        ("labels hold [7]", "num_labels=5", "0..4"),
        _task_model_labels(torch.full((2, 7), 7), "BertForTokenClassification"),
    ),
    B(
        "forward-token-task-model-labels-shape",
        GROUP,
        "af.wrap(BertForTokenClassification) with one label per example (was a ValueError from cross_entropy)",
        af.ConfigError,
        ("shape (2,)", "shaped like input_ids (2, 7)"),
        _task_model_labels(torch.tensor([0, 1]), "BertForTokenClassification"),
    ),
    B(
        "forward-positions-not-biased",
        GROUP,
        "position_ids to a DeBERTa-v2 of position_biased_input=False, as DeBERTa-v3 is (was silently ignored)",
        af.ConfigError,
        ("position_biased_input=False", "position_ids would be silently ignored"),
        _call(
            lambda: af.wrap(transformers.AutoModel.from_config(tiny_config("deberta-v2", position_biased_input=False))),
            position_ids=torch.arange(7).flip(0).expand(2, 7),
        ),
    ),
    B(
        "forward-task-type-ids-range",
        GROUP,
        "task_type_ids=5 to an ERNIE of use_task_id=True and 3 task types (was an IndexError from the embedding)",
        af.ConfigError,
        ("task_type_ids holds [5]", "task_type_vocab_size=3"),
        _call(
            lambda: af.wrap(
                transformers.AutoModel.from_config(tiny_config("ernie", use_task_id=True, task_type_vocab_size=3))
            ),
            task_type_ids=torch.full((2, 7), 5),
        ),
    ),
    B(
        "forward-qa-task-model-labels",
        GROUP,
        "labels= to af.wrap(BertForQuestionAnswering) (was told it has no task head of its own)",
        af.ConfigError,
        ("computes its own loss from start_positions and end_positions", "instead of labels"),
        _task_model_labels(torch.tensor([0, 1]), "BertForQuestionAnswering"),
    ),
    B(
        "forward-qa-task-model-start-only",
        GROUP,
        "start_positions without end_positions to af.wrap(BertForQuestionAnswering) (was loss=None, silently)",
        af.ConfigError,
        ("start_positions was given without end_positions", "pass end_positions too"),
        _call(
            lambda: af.wrap(transformers.BertForQuestionAnswering(tiny_config("bert")).eval()),
            start_positions=torch.tensor([1, 2]),
        ),
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
        ("output_hidden_states='yes'", "str", "true or false"),
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
    # cached steps (past_key_values)
    B(
        "forward-cache-mask-new-tokens-only",
        GROUP,
        "a cached step's attention_mask of shape (2, 1), the new token only, after 7 cached tokens (was silently "
        "accepted, with logits unlike the full forward's)",
        af.ConfigError,
        ("attention_mask", "(2, 1)", "(2, 8)", "7 cached tokens"),
        _cached_step(mask=1),
    ),
    B(
        "forward-cache-mask-too-long",
        GROUP,
        "a cached step's attention_mask of shape (2, 9) after 7 cached tokens and 1 new one",
        af.ConfigError,
        ("attention_mask", "(2, 9)", "(2, 8)"),
        _cached_step(mask=9),
    ),
    B(
        "forward-cache-other-batch",
        GROUP,
        "past_key_values of 2 rows with input_ids of 3 rows (was a RuntimeError from transformers' cache)",
        af.ConfigError,
        ("past_key_values", "2 rows", "3"),
        _cached_step(new_rows=3, mask=None),
    ),
    B(
        "forward-cache-legacy-tuple",
        GROUP,
        "past_key_values as a legacy tuple of tuples (was an AttributeError from transformers)",
        af.ConfigError,
        ("past_key_values", "tuple", "Cache"),
        _cached_step(past="tuple", mask=None),
    ),
    B(
        "seq2seq-cache-dynamic",
        GROUP,
        "T5 given past_key_values=DynamicCache(), a decoder's cache, which T5 shares between its self- and "
        "cross-attention (was a RuntimeError from the attention mask's shape)",
        af.ConfigError,
        ("past_key_values is a DynamicCache", "encoder-decoder", "EncoderDecoderCache(DynamicCache(), DynamicCache())"),
        _lm_call("t5", past_key_values=DynamicCache()),
    ),
    # language-model labels
    B(
        "lm-labels-shorter",
        GROUP,
        "causal-LM labels (2, 5) for input_ids (2, 7) (was a misleading ValueError from torch)",
        af.ConfigError,
        ("labels", "(2, 5)", "(2, 7)"),
        _labelled("gpt2", lambda ids: ids[:, :5]),
    ),
    B(
        "lm-labels-one-per-example",
        GROUP,
        "causal-LM labels of shape [batch] (was a misleading ValueError from torch)",
        af.ConfigError,
        ("labels", "(2,)", "(2, 7)"),
        _labelled("gpt2", lambda ids: ids[:, 0]),
    ),
    B(
        "lm-labels-trailing-dim",
        GROUP,
        "causal-LM labels of shape (2, 7, 1) (was a NaN loss, without a word)",
        af.ConfigError,
        ("labels", "(2, 7, 1)", "(2, 7)"),
        _labelled("gpt2", lambda ids: ids.unsqueeze(-1)),
    ),
    B(
        "lm-labels-out-of-vocab",
        GROUP,
        "causal-LM labels holding 100 with a vocabulary of 100 (was an IndexError from torch)",
        af.ConfigError,
        ("labels", "[100]", "0..99"),
        _labelled("gpt2", lambda ids: ids.masked_fill(ids == ids[0, 1], 100)),
    ),
    B(
        "lm-labels-minus-one",
        GROUP,
        "causal-LM labels holding -1 for the padding, not -100 (was an IndexError from torch)",
        af.ConfigError,
        ("labels", "[-1]", "-100"),
        _labelled("llama", lambda ids: ids.masked_fill(ids == 0, -1)),
    ),
    B(
        "lm-labels-float",
        GROUP,
        "float causal-LM labels (was a RuntimeError from torch)",
        af.ConfigError,
        ("labels", "torch.float32", "torch.long"),
        _labelled("gpt2", lambda ids: ids.float()),
    ),
    B(
        "lm-labels-bool",
        GROUP,
        "bool causal-LM labels (was a RuntimeError from torch)",
        af.ConfigError,
        ("labels", "torch.bool", "torch.long"),
        _labelled("gpt2", lambda ids: ids > 50),
    ),
    B(
        "lm-labels-all-ignored",
        GROUP,
        "causal-LM labels all -100 (was a NaN loss, without a word; transformers' own loss is NaN too)",
        af.ConfigError,
        ("no label token is counted", "-100", "NaN"),
        _labelled("gpt2", lambda ids: torch.full_like(ids, -100)),
    ),
    B(
        "lm-labels-first-only",
        GROUP,
        "causal-LM labels -100 but at position 0, which no position predicts (was a NaN loss, without a word)",
        af.ConfigError,
        ("no label token is counted", "labels[:, 0]"),
        _labelled("llama", _ignored_but_first),
    ),
    B(
        "seq2seq-labels-out-of-vocab",
        GROUP,
        "T5 labels holding 100 with a vocabulary of 100 (was an IndexError in the decoder's embedding)",
        af.ConfigError,
        ("labels", "[100]", "0..99"),
        _labelled("t5", lambda ids: ids.masked_fill(ids == ids[0, 1], 100)),
    ),
    B(
        "seq2seq-labels-one-per-example",
        GROUP,
        "BART labels of shape [batch] (was an IndexError from transformers)",
        af.ConfigError,
        ("labels", "(2,)", "[batch, seq]"),
        _labelled("bart", lambda ids: ids[:, 0]),
    ),
    B(
        "seq2seq-labels-vs-decoder-ids",
        GROUP,
        "T5 labels (2, 3) with decoder_input_ids (2, 6) (was a RuntimeError from torch)",
        af.ConfigError,
        ("labels", "(2, 3)", "decoder_input_ids", "(2, 6)"),
        _labelled("t5", lambda ids: ids[:, :3]),
    ),
    # an encoder-decoder's decoder inputs
    B(
        "seq2seq-decoder-ids-float",
        GROUP,
        "float decoder_input_ids to T5 (was a RuntimeError from torch)",
        af.ConfigError,
        ("decoder_input_ids", "torch.float32", "integer"),
        _lm_call("t5", decoder_input_ids=torch.full((2, 6), 7.0)),
    ),
    B(
        "seq2seq-decoder-ids-out-of-vocab",
        GROUP,
        "BART decoder_input_ids holding 100 with a vocabulary of 100 (was an IndexError from torch)",
        af.ConfigError,
        ("decoder_input_ids", "[100]", "0..99"),
        _lm_call("bart", decoder_input_ids=torch.full((2, 6), 100)),
    ),
    B(
        "seq2seq-decoder-ids-1d",
        GROUP,
        "1-D decoder_input_ids to T5 (was an IndexError from transformers)",
        af.ConfigError,
        ("decoder_input_ids", "(6,)", "[batch, seq]"),
        _lm_call("t5", decoder_input_ids=torch.full((6,), 7)),
    ),
    B(
        "seq2seq-decoder-ids-other-batch",
        GROUP,
        "decoder_input_ids of 3 rows for input_ids of 2 rows, BART (was a RuntimeError from torch)",
        af.ConfigError,
        ("decoder inputs have 3 rows", "2"),
        _lm_call("bart", decoder_input_ids=torch.full((3, 6), 7)),
    ),
    B(
        "seq2seq-decoder-ids-empty",
        GROUP,
        "decoder_input_ids of shape (2, 0), T5 (was a RuntimeError from torch)",
        af.ConfigError,
        ("decoder_input_ids", "(2, 0)", "empty"),
        _lm_call("t5", decoder_input_ids=torch.zeros(2, 0, dtype=torch.long)),
    ),
    B(
        "seq2seq-decoder-mask-shape",
        GROUP,
        "decoder_attention_mask (2, 3) for decoder_input_ids (2, 6), T5 (was silently accepted)",
        af.ConfigError,
        ("decoder_attention_mask", "(2, 3)", "(2, 6)"),
        _lm_call("t5", decoder_attention_mask=torch.ones(2, 3, dtype=torch.long)),
    ),
    B(
        "seq2seq-decoder-mask-two",
        GROUP,
        "decoder_attention_mask holding 2, BART (was silently accepted)",
        af.ConfigError,
        ("decoder_attention_mask", "[2]", "only 0 and 1"),
        _lm_call("bart", decoder_attention_mask=torch.full((2, 6), 2)),
    ),
    B(
        "seq2seq-decoder-ids-too-long",
        GROUP,
        "BART decoder_input_ids of 100 tokens, 64 positions (was an IndexError from torch)",
        af.ConfigError,
        ("decoder inputs", "100 tokens", "64"),
        _lm_call("bart", decoder_input_ids=torch.full((2, 100), 7)),
    ),
    B(
        "seq2seq-decoder-embeds-width",
        GROUP,
        "decoder_inputs_embeds of width 16 for hidden 32, T5 (was a RuntimeError from torch)",
        af.ConfigError,
        ("decoder_inputs_embeds", "(2, 6, 16)", "32"),
        _lm_call("t5", decoder_input_ids=None, decoder_inputs_embeds=torch.zeros(2, 6, 16)),
    ),
    B(
        "seq2seq-decoder-ids-and-embeds",
        GROUP,
        "decoder_input_ids and decoder_inputs_embeds both, BART (was a ValueError naming input_ids)",
        af.ConfigError,
        ("decoder_input_ids", "decoder_inputs_embeds", "both"),
        _lm_call("bart", decoder_inputs_embeds=torch.zeros(2, 6, 32)),
    ),
    B(
        "seq2seq-decoder-embeds-nan",
        GROUP,
        "NaN decoder_inputs_embeds, T5 (was every logit NaN, without a word)",
        af.ConfigError,
        ("decoder_inputs_embeds", "NaN"),
        _lm_call("t5", decoder_input_ids=None, decoder_inputs_embeds=torch.full((2, 6, 32), math.nan)),
    ),
    B(
        "seq2seq-no-decoder-inputs",
        GROUP,
        "T5 called with input_ids alone, no decoder inputs and no labels (was a ValueError from transformers, "
        "naming input_ids)",
        af.ConfigError,
        ("no decoder inputs", "decoder_input_ids", "labels", "generate"),
        _lm_call("t5", decoder_input_ids=None),
    ),
    B(
        "seq2seq-bare-no-decoder-inputs",
        GROUP,
        "a bare T5Model (AutoModel, no LM head) called with input_ids alone (the fix advised labels and generate(), "
        "which it takes neither)",
        af.ConfigError,
        ("no decoder inputs", "decoder_input_ids", "wrap the model loaded with AutoModelForSeq2SeqLM"),
        _bare_t5_call,
    ),
    B(
        "seq2seq-position-ids",
        GROUP,
        "BART given position_ids, which it takes in its **kwargs and ignores (was accepted; the logits unchanged)",
        af.ConfigError,
        ("BartForConditionalGeneration counts token positions itself", "leave position_ids out"),
        _lm_call("bart", position_ids=torch.arange(7).flip(0).expand(2, 7)),
    ),
    B(
        "seq2seq-embeds-no-decoder-inputs",
        GROUP,
        "BART called with inputs_embeds and no decoder inputs, which it makes from input_ids (was a ValueError from "
        "transformers)",
        af.ConfigError,
        ("no decoder inputs", "from input_ids", "decoder_input_ids"),
        _lm_call("bart", input_ids=None, decoder_input_ids=None, inputs_embeds=torch.zeros(2, 7, 32)),
    ),
    B(
        "seq2seq-encoder-outputs-tensor",
        GROUP,
        "T5 given encoder_outputs=<a tensor>, not the encoder's output or a tuple (was an IndexError from "
        "transformers)",
        af.ConfigError,
        ("encoder_outputs", "Tensor", "BaseModelOutput", "(hidden,)"),
        _lm_call("t5", encoder_outputs=torch.zeros(2, 7, 32)),
    ),
    B(
        "seq2seq-encoder-outputs-other-batch",
        GROUP,
        "BART given encoder_outputs of 3 rows with input_ids of 2 (was an IndexError from transformers)",
        af.ConfigError,
        ("encoder_outputs", "(3, 7)", "(2, 7)"),
        _lm_call("bart", encoder_outputs=(torch.zeros(3, 7, 32),)),
    ),
    B(
        "seq2seq-encoder-outputs-float64",
        GROUP,
        "T5 given float64 encoder_outputs, its weights float32 (was a RuntimeError from torch in the cross-attention)",
        af.ConfigError,
        ("encoder_outputs", "torch.float64", "weights are torch.float32"),
        _lm_call("t5", encoder_outputs=(torch.zeros(2, 7, 32, dtype=torch.float64),)),
    ),
    B(
        "seq2seq-encoder-outputs-nan",
        GROUP,
        "BART given encoder_outputs holding NaN (was every logit NaN, without a word)",
        af.ConfigError,
        ("encoder_outputs", "NaN or infinite"),
        _lm_call("bart", encoder_outputs=(torch.full((2, 7, 32), math.nan),)),
    ),
    # options of a language model's call
    B(
        "lm-logits-to-keep-string",
        GROUP,
        "logits_to_keep='x' to Llama, not an int or a 1-D tensor of positions (was a TypeError from torch)",
        af.ConfigError,
        ("logits_to_keep='x'", "str", "1-D integer tensor"),
        _lm_call("llama", logits_to_keep="x"),
    ),
    B(
        "lm-logits-to-keep-2d",
        GROUP,
        "logits_to_keep=torch.tensor([[0, 3]]), a 2-D tensor, to GPT-2 (was silently accepted)",
        af.ConfigError,
        ("logits_to_keep", "(1, 2)", "1-D"),
        _lm_call("gpt2", logits_to_keep=torch.tensor([[0, 3]])),
    ),
    B(
        "lm-logits-to-keep-outside",
        GROUP,
        "logits_to_keep=torch.tensor([0, 30]) for 7 positions, Llama (was an IndexError from torch)",
        af.ConfigError,
        ("logits_to_keep", "[30]", "7 positions"),
        _lm_call("llama", logits_to_keep=torch.tensor([0, 30])),
    ),
    B(
        "lm-logits-to-keep-negative",
        GROUP,
        "logits_to_keep=-1 (was every position's logits but the first, without a word)",
        af.ConfigError,
        ("logits_to_keep=-1", "negative", "N >= 0"),
        _lm_call("gpt2", logits_to_keep=-1),
    ),
    B(
        "lm-logits-to-keep-with-labels",
        GROUP,
        "Llama given labels and logits_to_keep=1, which keeps one position's logits for 7 labels per row (was a "
        "ValueError from cross_entropy: 'Expected input batch_size (2) to match target batch_size (14)')",
        af.ConfigError,
        ("logits_to_keep=1 with labels", "every position", "drop logits_to_keep"),
        _lm_call("llama", labels=tiny_decoder_inputs("llama")["input_ids"], logits_to_keep=1),
    ),
    B(
        "lm-use-cache-string",
        GROUP,
        "model(**batch, use_cache='no') (was a cache built and returned: 'no' is truthy)",
        af.ConfigError,
        ("use_cache='no'", "str", "true or false"),
        _lm_call("llama", use_cache="no"),
    ),
    # generate()
    B(
        "generate-use-cache-string",
        GROUP,
        "generate(use_cache='no') (was generated with the cache: 'no' is truthy)",
        af.ConfigError,
        ("use_cache='no'", "str", "true or false"),
        generating(use_cache="no"),
    ),
    B(
        "generate-return-dict-string",
        GROUP,
        "generate(return_dict_in_generate='no') (was a GenerateOutput returned, not the token ids: 'no' is truthy)",
        af.ConfigError,
        ("return_dict_in_generate='no'", "str", "true or false"),
        generating(return_dict_in_generate="no"),
    ),
    B(
        "generate-logits-to-keep-string",
        GROUP,
        "generate(logits_to_keep='x') (was a TypeError from torch at the first step)",
        af.ConfigError,
        ("logits_to_keep='x'", "str", "1-D integer tensor"),
        generating("llama", logits_to_keep="x"),
    ),
    B(
        "generate-encoder-outputs-tensor",
        GROUP,
        "BART generate(encoder_outputs=<a tensor>) (was an IndexError from transformers)",
        af.ConfigError,
        ("encoder_outputs", "Tensor", "BaseModelOutput"),
        generating("bart", encoder_outputs=torch.zeros(2, 7, 32)),
    ),
    B(
        "generate-ids-float",
        GROUP,
        "generate(input_ids=<float tensor>) (was a RuntimeError from torch)",
        af.ConfigError,
        ("input_ids", "torch.float32", "integer"),
        generating(input_ids=torch.full((2, 7), 7.0), attention_mask=None),
    ),
    B(
        "generate-ids-1d",
        GROUP,
        "generate(input_ids=<1-D tensor>) (was an IndexError from transformers)",
        af.ConfigError,
        ("input_ids", "(7,)", "unsqueeze(0)"),
        generating(input_ids=torch.full((7,), 7), attention_mask=None),
    ),
    B(
        "generate-ids-empty",
        GROUP,
        "generate(input_ids of shape (2, 0)) (was an IndexError from transformers)",
        af.ConfigError,
        ("input_ids", "(2, 0)", "empty"),
        generating(input_ids=torch.zeros(2, 0, dtype=torch.long), attention_mask=None),
    ),
    B(
        "generate-ids-out-of-vocab",
        GROUP,
        "generate() with an input id of 100, vocabulary 100, Llama (was an IndexError from torch)",
        af.ConfigError,
        ("input_ids", "[100]", "0..99"),
        generating("llama", input_ids=torch.full((2, 7), 100)),
    ),
    B(
        "generate-ids-list",
        GROUP,
        "generate(input_ids=[[...]]) a list (was an AttributeError from transformers)",
        af.ConfigError,
        ("input_ids", "list", "torch.Tensor"),
        generating(input_ids=[[7] * 7] * 2, attention_mask=None),
    ),
    B(
        "generate-mask-shape",
        GROUP,
        "generate() with an attention_mask (2, 5) for input_ids (2, 7) (was a RuntimeError from torch)",
        af.ConfigError,
        ("attention_mask", "(2, 5)", "(2, 7)"),
        generating(attention_mask=torch.ones(2, 5, dtype=torch.long)),
    ),
    B(
        "generate-mask-one-row",
        GROUP,
        "generate() with an attention_mask of 1 row for 2 prompts, BART (was broadcast silently: row 1 generated "
        "with row 0's mask)",
        af.ConfigError,
        ("attention_mask", "(1, 7)", "(2, 7)"),
        generating("bart", attention_mask=torch.ones(1, 7, dtype=torch.long)),
    ),
    B(
        "generate-mask-two",
        GROUP,
        "generate() with an attention_mask holding 2 (was silently accepted)",
        af.ConfigError,
        ("attention_mask", "[2]", "only 0 and 1"),
        generating(attention_mask=torch.full((2, 7), 2)),
    ),
    B(
        "generate-mask-empty-row",
        GROUP,
        "generate() with an all-zero attention_mask row (was tokens generated from padding alone)",
        af.ConfigError,
        ("attention_mask", "rows [1]", "no token"),
        generating("t5", attention_mask=torch.tensor([[1] * 7, [0] * 7])),
    ),
    B(
        "generate-embeds-nan",
        GROUP,
        "generate(inputs_embeds=<NaN>) (was every generated token 0, without a word)",
        af.ConfigError,
        ("inputs_embeds", "NaN"),
        generating("llama", input_ids=None, inputs_embeds=torch.full((2, 7, 32), math.nan)),
    ),
    B(
        "generate-embeds-width",
        GROUP,
        "generate(inputs_embeds of width 16, hidden 32) (was a RuntimeError from torch)",
        af.ConfigError,
        ("inputs_embeds", "(2, 7, 16)", "32"),
        generating(input_ids=None, inputs_embeds=torch.zeros(2, 7, 16)),
    ),
    B(
        "generate-embeds-float64",
        GROUP,
        "generate(float64 inputs_embeds) for a float32 model (was a RuntimeError from torch)",
        af.ConfigError,
        ("inputs_embeds", "torch.float64", "torch.float32"),
        generating("llama", input_ids=None, inputs_embeds=torch.zeros(2, 7, 32, dtype=torch.float64)),
    ),
    B(
        "generate-decoder-ids-out-of-vocab",
        GROUP,
        "T5 generate() with decoder_input_ids holding 100 (was an IndexError from torch)",
        af.ConfigError,
        ("decoder_input_ids", "[100]", "0..99"),
        generating("t5", decoder_input_ids=torch.full((2, 1), 100)),
    ),
    B(
        "generate-prompt-too-long",
        GROUP,
        "generate() with a 70-token prompt, GPT-2 of 64 positions (was an IndexError from torch)",
        af.ConfigError,
        ("prompts have 70 tokens", "64"),
        generating(input_ids=torch.full((2, 70), 7), attention_mask=None),
    ),
    B(
        "generate-past-positions",
        GROUP,
        "generate() of a 60-token prompt with max_new_tokens=10, GPT-2 of 64 positions (was an IndexError "
        "mid-generation)",
        af.ConfigError,
        ("70 tokens", "max_new_tokens=10", "64", "at most 4"),
        generating(input_ids=torch.full((2, 60), 7), attention_mask=None, max_new_tokens=10),
    ),
    B(
        "generate-seq2seq-past-positions",
        GROUP,
        "BART generate() with max_new_tokens=80, 64 positions (was an IndexError mid-generation)",
        af.ConfigError,
        ("81 tokens", "max_new_tokens=80", "64"),
        generating("bart", decoder_input_ids=None, max_new_tokens=80),
    ),
    B(
        "generate-max-length-past-positions",
        GROUP,
        "generate(max_length=100), GPT-2 of 64 positions (was an IndexError mid-generation)",
        af.ConfigError,
        ("max_length=100", "64"),
        generating(max_new_tokens=None, max_length=100),
    ),
    B(
        "generate-max-new-tokens-zero",
        GROUP,
        "generate(max_new_tokens=0) (was a ValueError from transformers)",
        af.ConfigError,
        ("generate()", "max_new_tokens", "greater than 0"),
        generating(max_new_tokens=0),
    ),
    B(
        "generate-keyword-typo",
        GROUP,
        "generate(max_new_token=2), a typo (was a ValueError from transformers)",
        af.ConfigError,
        ("generate()", "max_new_token", "not used"),
        generating(max_new_token=2),
    ),
    B(
        "generate-head-names",
        GROUP,
        "generate(head_names=[...]) (was a ValueError from transformers naming model_kwargs)",
        af.ConfigError,
        ("head_names", "language-model head", "adapter_names"),
        generating(head_names=["h", "h"]),
    ),
    B(
        "generate-more-sequences-than-beams",
        GROUP,
        "generate(num_beams=2, num_return_sequences=3) (was a ValueError from transformers)",
        af.ConfigError,
        ("generate()", "num_return_sequences", "num_beams"),
        generating(num_beams=2, num_return_sequences=3),
    ),
    B(
        "generate-unloaded-train-mode",
        GROUP,
        "unload(), model.train(), then generate() (was the plain model generating, without a word)",
        af.ModelUnloadedError,
        ("unloaded",),
        generating(unload=True),
    ),
    # masks of an attention pattern, not of padding
    B(
        "lm-attention-mask-4d",
        GROUP,
        "Llama given a 4-D float attention_mask [batch, 1, query, key], as transformers takes one (was refused as "
        "a shape mismatch that did not say what to pass instead)",
        af.ConfigError,
        ("attention_mask", "(2, 1, 7, 7)", "4-D mask", "custom attention pattern", "padding mask", "(2, 7)"),
        _lm_call("llama", attention_mask=torch.zeros(2, 1, 7, 7)),
    ),
    B(
        "generate-attention-mask-4d",
        GROUP,
        "generate() given a 4-D bool attention_mask [batch, 1, query, key]",
        af.ConfigError,
        ("attention_mask", "(2, 1, 7, 7)", "4-D mask", "padding mask", "(2, 7)"),
        generating("llama", attention_mask=torch.ones(2, 1, 7, 7, dtype=torch.bool).tril()),
    ),
    B(
        "forward-attention-mask-3d",
        GROUP,
        "a BERT call given a 3-D attention_mask [batch, query, key]",
        af.ConfigError,
        ("attention_mask", "(2, 7, 7)", "3-D mask", "padding mask", "(2, 7)"),
        _call(_headed, attention_mask=torch.ones(2, 7, 7, dtype=torch.long)),
    ),
)
