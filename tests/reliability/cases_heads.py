"""Bad-input cases at one boundary, prediction heads and span tasks: classification, regression, multiple-choice,
tagging and question-answering heads given odd labels, shapes, settings or data."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from datasets import Dataset
from transformers import AutoTokenizer

import adapterfusion as af
from adapterfusion.errors import ConfigError
from adapterfusion.heads import PredictionHead
from adapterfusion.heads.question_answering import NOT_CONTEXT, best_span
from adapterfusion.tasks import TaskError, encode_task, load_task_data
from adapterfusion.tasks.collator import TaskCollator
from adapterfusion.tasks.squad import score_qa
from adapterfusion.tasks.tagging_metrics import entity_scores, iob1_to_iob2
from catalogue import Action, BadInput
from span_task_data import squad_examples, squad_task_file
from tiny_models import tiny_encoder, tiny_inputs

B = BadInput
GROUP = "heads"
INF = math.inf


# ---- helpers -------------------------------------------------------------------------------------------------------
def _call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[[Path], Action]:
    return lambda folder: lambda: function(*args, **kwargs)


def _forward(head: Callable[[], af.HeadConfig], labels: torch.Tensor, **inputs: Any) -> Callable[[Path], Action]:
    """model(**tiny_inputs(), labels=labels) (inputs override tiny_inputs) on a tiny BERT whose active head 'h' is
    built by `head`: the head's config is made inside the action, where a refused one is part of the case."""

    def prepare(folder: Path) -> Action:
        model = af.wrap(tiny_encoder("bert"))
        batch = {**tiny_inputs(), **inputs}

        def act() -> Any:
            model.add_head("h", head())
            model.activate(head="h")
            return model(**batch, labels=labels).loss

        return act

    return prepare


class _Tokenizer:
    """What TaskCollator reads of a tokenizer."""

    pad_token_id = 0
    padding_side = "right"


def _collate(*features: dict[str, Any]) -> Callable[[Path], Action]:
    return _call(TaskCollator(_Tokenizer()), list(features))


def _squad_answer(context: str, answer: str) -> Callable[[Path], Action]:
    """A SQuAD-layout file of three questions whose second has `context` and the one answer `answer` (placed where
    it stands), loaded and encoded with the shipped MiniLM's tokenizer."""

    def prepare(folder: Path) -> Action:
        rows = squad_examples(3)
        rows[1].update(context=context, answers={"text": [answer], "answer_start": [context.index(answer)]})
        spec = squad_task_file(folder / "train.jsonl", rows)
        tokenizer = AutoTokenizer.from_pretrained(af.default_encoder_path())
        return lambda: encode_task(spec, load_task_data(spec).splits, tokenizer, 64)

    return prepare


def _half_regression(folder: Path) -> Action:
    """A float16 model with a regression head, given targets of 1000 (a price, a count)."""
    model = af.wrap(tiny_encoder("bert"))
    model.add_head("h", af.RegressionHead())
    model.activate(head="h")
    model.to(torch.float16)
    return lambda: f"loss finite: {bool(torch.isfinite(model(**tiny_inputs(), labels=torch.tensor([1e3, 1.0])).loss))}"


def _cls_left_padded(folder: Path) -> Action:
    """A cls-pooling head's logits for a left-padded row (two padding positions first), against its layers on the
    row's first real token."""
    model = af.wrap(tiny_encoder("bert"))
    model.add_head("h", af.ClassificationHead(pooling="cls"))
    head = model.get_head("h").eval()
    hidden, mask = torch.rand(1, 5, 32), torch.tensor([[0, 0, 1, 1, 1]])

    def act() -> str:
        with torch.no_grad():
            same = torch.allclose(head(hidden, mask), head.layers(hidden[:, 2]))
        return f"pooled the first real token: {same}"

    return act


_OFFSETS = np.array([[NOT_CONTEXT, NOT_CONTEXT], [0, 3], [4, 7], [NOT_CONTEXT, NOT_CONTEXT]])


def _qa_scored_with(metrics: Any) -> Callable[[Path], Action]:
    """score_qa(<one QA feature whose logits pick 'cat'>, logits, metrics)."""

    def prepare(folder: Path) -> Action:
        features = Dataset.from_dict(
            {
                "example_index": [0],
                "context_offsets": [_OFFSETS.tolist()],
                "context_text": ["The cat sat"],
                "gold_answers": [["cat"]],
            }
        )
        logits = np.zeros((1, 4, 2))
        logits[0, 2] = 5.0
        return lambda: score_qa(features, logits, metrics)

    return prepare


def _routed_tagging(labels: torch.Tensor) -> Callable[[Path], Action]:
    """model(**tiny_inputs(), head_names=['h1', 'h2'], labels=labels) on a tiny BERT with two tagging heads."""

    def prepare(folder: Path) -> Action:
        model = af.wrap(tiny_encoder("bert"))
        for name in ("h1", "h2"):
            model.add_head(name, af.TokenClassificationHead(num_labels=3))
        return lambda: model(**tiny_inputs(), head_names=["h1", "h2"], labels=labels).loss

    return prepare


_TAGGED = torch.full((2, 7), -100.0)
_TAGGED[0, 1] = INF
_TAG_ON_PADDING = torch.full((2, 7), -100)  # tiny_inputs pads row 1 at tokens 5 and 6
_TAG_ON_PADDING[0, 1] = _TAG_ON_PADDING[1, 6] = 2


CASES: tuple[BadInput, ...] = (
    # head configs that can never train, or carry a setting that is never used
    B(
        "heads-regression-several-outputs",
        GROUP,
        "af.RegressionHead(num_labels=3), then a forward with labels [batch] (RuntimeError from mse_loss; labels "
        "[batch, 3] were refused as not one per example, so the head could never train)",
        ConfigError,
        ("num_labels=3", "regression head predicts one real value", "af.ClassificationHead"),
        _forward(lambda: af.RegressionHead(num_labels=3), torch.tensor([0.5, 1.0])),
    ),
    B(
        "heads-tagging-one-tag",
        GROUP,
        "af.TokenClassificationHead(num_labels=1) (accepted: a cross-entropy over one tag is always 0, nothing "
        "learned)",
        ConfigError,
        ("num_labels=1", "token_classification head over one class learns nothing", "at least two tags"),
        _call(af.TokenClassificationHead, num_labels=1),
    ),
    B(
        "heads-per-token-pooling",
        GROUP,
        "af.TokenClassificationHead(num_labels=3, pooling='mean') (accepted, saved and shown, and never used: a "
        "tagging head reads every token)",
        ConfigError,
        ("pooling='mean'", "pools nothing", "leave pooling out"),
        _call(af.TokenClassificationHead, num_labels=3, pooling="mean"),
    ),
    B(
        "heads-num-labels-beyond-memory",
        GROUP,
        "add_head('h', af.ClassificationHead(num_labels=2**31 - 1)) on a hidden size of 32 (RuntimeError from "
        "torch's allocator: 274877906816 bytes; where memory is overcommitted, the process was killed)",
        ConfigError,
        ("num_labels=2147483647", "32 x 2147483647", "check num_labels"),
        lambda folder: lambda: af.wrap(tiny_encoder("bert")).add_head("h", af.ClassificationHead(num_labels=2**31 - 1)),
    ),
    B(
        "heads-cls-pooling-left-padded",
        GROUP,
        "a cls-pooling head on a left-padded row, mask [0, 0, 1, 1, 1] (not an error; it read position 0, a "
        "padding token's output, as the row's [CLS] without a word)",
        None,
        ("pooled the first real token: True",),
        _cls_left_padded,
    ),
    # labels at a head's forward
    B(
        "heads-regression-half-precision-targets",
        GROUP,
        "a float16 model's regression head given targets [1000, 1] (not an error; the squared error, 1e6, is inf in "
        "float16, and so were the loss and, after one step, every weight)",
        None,
        ("loss finite: True",),
        _half_regression,
    ),
    B(
        "heads-choice-one-choice",
        GROUP,
        "a multiple-choice batch of one choice per example [2, 1, 7] with labels [0, 0] (loss 0.0 every step, "
        "without a word: nothing is learned)",
        ConfigError,
        ("1 choice per example", "always 0", "at least 2 choices"),
        _forward(
            af.MultipleChoiceHead,
            torch.tensor([0, 0]),
            input_ids=torch.full((2, 1, 7), 7),
            attention_mask=torch.ones(2, 1, 7, dtype=torch.long),
        ),
    ),
    B(
        "heads-qa-labels-infinite",
        GROUP,
        "a QA head's labels [[inf, 1.0], [0.0, 0.0]] (OverflowError: cannot convert float infinity to integer)",
        ConfigError,
        ("start/end positions must be whole token indices", "inf"),
        _forward(af.QuestionAnsweringHead, torch.tensor([[INF, 1.0], [0.0, 0.0]])),
    ),
    B(
        "heads-tagging-labels-infinite",
        GROUP,
        "a tagging head's float labels holding inf beside -100 (OverflowError: cannot convert float infinity to "
        "integer)",
        ConfigError,
        ("tags must be integer ids", "non-finite"),
        _forward(lambda: af.TokenClassificationHead(num_labels=3), _TAGGED),
    ),
    # labels on padding (tiny_inputs' row 1 is padded at tokens 5 and 6)
    B(
        "heads-tagging-label-on-padding",
        GROUP,
        "a tagging head's labels with a tag on a padding token of row 1 (trained on as on text)",
        ConfigError,
        ("a tag of row 1 is at token 6", "marks as padding", "real tokens only"),
        _forward(lambda: af.TokenClassificationHead(num_labels=3), _TAG_ON_PADDING),
    ),
    B(
        "heads-qa-answer-on-padding",
        GROUP,
        "a QA head's labels [[1, 2], [3, 6]]: row 1's answer ends on a padding token (trained on as on text)",
        ConfigError,
        ("an answer's start or end of row 1 is at token 6", "marks as padding"),
        _forward(af.QuestionAnsweringHead, torch.tensor([[1, 2], [3, 6]])),
    ),
    B(
        "heads-routed-tagging-label-on-padding",
        GROUP,
        "model(**batch, head_names=['h1', 'h2'], labels=...) with two tagging heads and a tag on a padding token of "
        "row 1 (each head's rows were checked without their attention mask)",
        ConfigError,
        ("head 'h2'", "a tag of row 1 is at token 6", "marks as padding"),
        _routed_tagging(_TAG_ON_PADDING),
    ),
    # the label helpers and the decoding of spans
    B(
        "heads-qa-labels-helper-infinite",
        GROUP,
        "af.qa_labels(torch.tensor([inf]), torch.tensor([2.0])) (became start -9223372036854775808 without a word)",
        ConfigError,
        ("start_positions must be whole token indices", "inf"),
        _call(af.qa_labels, torch.tensor([INF]), torch.tensor([2.0])),
    ),
    B(
        "heads-word-labels-word-ids-missing",
        GROUP,
        "af.word_labels_to_tokens(None, [1]): no word_ids, e.g. from a slow tokenizer (TypeError: 'NoneType' is not "
        "iterable)",
        ConfigError,
        ("word_ids=None", "encoding.word_ids(i)"),
        _call(af.word_labels_to_tokens, None, [1]),
    ),
    B(
        "heads-best-span-fractional-width",
        GROUP,
        "best_span(start, end, offsets, max_answer_tokens=2.5) (IndexError: arrays used as indices must be of "
        "integer type; '3' was a TypeError)",
        ConfigError,
        ("max_answer_tokens=2.5", "expected an integer >= 1"),
        _call(best_span, np.zeros(4), np.zeros(4), _OFFSETS, 2.5),
    ),
    B(
        "heads-module-config-dict",
        GROUP,
        "PredictionHead({'kind': 'classification'}, 32): a saved config's dict where a head config goes "
        "(AttributeError: 'dict' object has no attribute 'pooling')",
        ConfigError,
        ("config is a dict", "head_config_from_dict"),
        _call(PredictionHead, {"kind": "classification", "pooling": "cls"}, 32),
    ),
    # span rows and collating span and tagging examples
    B(
        "squad-answer-without-tokens",
        GROUP,
        "SQuAD row whose answer is a zero-width space the tokenizer drops (was trained on the tokens around it, "
        "'ada brook', as the answer)",
        TaskError,
        ("answer '\\u200b'", "has no token", "drops every character of it"),
        _squad_answer("Ada \u200b Brook came.", "\u200b"),
    ),
    B(
        "collate-token-labels-fractional",
        GROUP,
        "a tagging example with labels [0, 1.5, 1] (collated as [0, 1, 1]: 1.5 truncated without a word)",
        TaskError,
        ("labels of row 0", "[0, 1.5, 1]", "fractional"),
        _collate({"input_ids": [5, 6, 7], "labels": [0, 1.5, 1]}),
    ),
    B(
        "collate-token-labels-text",
        GROUP,
        "a tagging example with labels ['3', '0', '-100'] (numpy parsed the texts into tag ids without a word)",
        TaskError,
        ("labels of row 0", "not integer ids"),
        _collate({"input_ids": [5, 6, 7], "labels": ["3", "0", "-100"]}),
    ),
    B(
        "collate-label-beyond-int64",
        GROUP,
        "an example with label=2**70 (TypeError from numpy's isfinite)",
        TaskError,
        ("label=1180591620717411303424", "a label is a class id"),
        _collate({"input_ids": [5, 6, 7], "label": 2**70}),
    ),
    # scoring answers and tag sequences
    B(
        "squad-score-metrics-text",
        GROUP,
        "score_qa(features, logits, 'f1'): one metric name as a bare text (was read letter by letter: 'QA metrics "
        "['f', '1'] are unknown')",
        TaskError,
        ("QA metrics='f1' is one text", "['f1']"),
        _qa_scored_with("f1"),
    ),
    B(
        "tagging-scores-generators",
        GROUP,
        "entity_scores(<a generator of sentences>, gold) (TypeError: object of type 'generator' has no len())",
        None,
        ("f1",),
        lambda folder: lambda: "scored: " + ", ".join(entity_scores((s for s in [["B-PER", "O"]]), [["B-PER", "O"]])),
    ),
    B(
        "tagging-iob-none",
        GROUP,
        "iob1_to_iob2(None) (TypeError: 'NoneType' object is not iterable)",
        TaskError,
        ("tags None", "pass a list of tags"),
        _call(iob1_to_iob2, None),
    ),
)
