"""Bad-input cases at one boundary, metrics and scoring: compute_metrics and the per-kind metric functions
(classification, regression, multiple choice, tagging, QA) fed ragged, empty, mistyped or non-finite predictions and
references."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from datasets import Dataset

import adapterfusion as af
from adapterfusion.answer_scoring import score_answers
from adapterfusion.errors import ConfigError
from adapterfusion.heads.question_answering import NOT_CONTEXT
from adapterfusion.scoring import Predictions, score
from adapterfusion.tasks import TaskError, TaskSpec, accuracy, compute_metrics, instruction_task, pearson
from adapterfusion.tasks.metrics import dev_metrics
from adapterfusion.tasks.qa_metrics import squad_scores
from adapterfusion.tasks.squad import score_qa
from adapterfusion.tasks.tagging_metrics import entity_scores
from catalogue import Action, BadInput, own_file
from span_task_data import PERSON_TAGGER
from tiny_decoders import tiny_decoder

B = BadInput
GROUP = "metrics"
NAN = math.nan
NER = PERSON_TAGGER  # tags O, B-PER, I-PER
PAIR = TaskSpec(name="pair", kind="single", text_fields=("text",), label_names=("no", "yes"))
SCORES = TaskSpec(
    name="scores", kind="single", text_fields=("text",), label_names=(), regression=True, metrics=("pearson",)
)


def _call(function: Callable[..., Any], *args: Any) -> Callable[[Path], Action]:
    return lambda folder: lambda: function(*args)


def _reported(function: Callable[..., Any], *args: Any) -> Callable[[Path], Action]:
    """The action's report line: the metrics `function(*args)` gives (a case of a documented value, not an error)."""
    return lambda folder: lambda: f"scored: {function(*args)}"


def _answers(labels: list[list[float]] | None) -> Callable[[Path], Action]:
    """score_answers of a tiny GPT-2 (vocabulary 100) on one batch of 4 input tokens with `labels` (None: none)."""

    def prepare(folder: Path) -> Action:
        model = af.wrap(tiny_decoder("gpt2"))
        ids = torch.tensor([[1, 2, 3, 4]])
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if labels is not None:
            batch["labels"] = torch.tensor(labels)
        return lambda: score_answers(model, [batch], 2, 0)

    return prepare


def _qa(score: Callable[[Dataset, np.ndarray], Any]) -> Callable[[Path], Action]:
    """`score(features, logits)` of two QA features of 4 tokens over 'The cat sat' and logits picking 'cat', 'sat'."""

    def prepare(folder: Path) -> Action:
        offsets = [[NOT_CONTEXT, NOT_CONTEXT], [0, 3], [4, 7], [8, 11]]
        features = Dataset.from_dict(
            {
                "example_index": [0, 1],
                "context_offsets": [offsets, offsets],
                "context_text": ["The cat sat", "The cat sat"],
                "gold_answers": [["cat"], ["sat"]],
            }
        )
        logits = np.zeros((2, 4, 2))
        logits[0, 2], logits[1, 3] = 5.0, 5.0
        return lambda: score(features, logits)

    return prepare


CASES: tuple[BadInput, ...] = (
    # tagging: one list of tags per sentence, of its own length
    B(
        "metrics-tagging-sentences-of-own-lengths",
        GROUP,
        "compute_metrics(ner, [[0, 1], [0, 1, 2]], [[0, 1], [0, 1, 2]]): one list per sentence, of two lengths "
        "(ValueError from numpy: 'inhomogeneous shape')",
        None,
        ("scored:", "'f1': 1.0", "'accuracy': 1.0"),
        _reported(compute_metrics, NER, [[0, 1], [0, 1, 2]], [[0, 1], [0, 1, 2]]),
    ),
    B(
        "metrics-tagging-sentence-lengths-differ",
        GROUP,
        "compute_metrics(ner, [[0, 1, 1], [0, 1, 2]], [[0, 1], [0, 1, 2]]): sentence 0 has three predicted tags for "
        "two labels (ValueError from numpy: 'inhomogeneous shape')",
        TaskError,
        ("sentence 0", "predictions of shape [3] for labels of shape [2]"),
        _call(compute_metrics, NER, [[0, 1, 1], [0, 1, 2]], [[0, 1], [0, 1, 2]]),
    ),
    B(
        "metrics-tagging-predicted-id-beyond-tags",
        GROUP,
        "compute_metrics(ner, [[5, 1]], [[0, 1]]): predicted tag id 5 of a 3-tag task (printed as 'O', it was scored "
        "a right tag: accuracy 1.0)",
        TaskError,
        ("3 labels ['O', 'B-PER', 'I-PER']", "predicted id 5"),
        _call(compute_metrics, NER, np.array([[5, 1]]), np.array([[0, 1]])),
    ),
    B(
        "metrics-tagging-logits-too-wide",
        GROUP,
        "compute_metrics(ner, <logits of 7 tags per token>, labels) (a head built for another tag set: scored in "
        "silence, accuracy 0.5)",
        TaskError,
        ("3 labels", "logits of 7 outputs per token", "a head built for this task"),
        _call(compute_metrics, NER, np.zeros((1, 2, 7)), np.array([[0, 1]])),
    ),
    B(
        "metrics-tagging-flat-tag-list",
        GROUP,
        "compute_metrics(ner, [0, 1], [0, 1]): one flat list of tag ids, not one list per sentence",
        TaskError,
        ("sentence 0 is the single value 0", "one list (or row) of tag ids per sentence"),
        _call(compute_metrics, NER, [0, 1], [0, 1]),
    ),
    B(
        "metrics-tagging-every-label-ignored",
        GROUP,
        "compute_metrics(ner, [[0, 1]], [[-100, -100]]): no token carries a tag (told 'the evaluation split is empty')",
        TaskError,
        ("all 2 tagging labels are -100", "first token its tag id"),
        _call(compute_metrics, NER, [[0, 1]], [[-100, -100]]),
    ),
    B(
        "metrics-entity-scores-tag-ids",
        GROUP,
        "entity_scores([[1, 0]], [[1, 0]]): tag ids where tag names belong (AttributeError: 'int' has no 'partition')",
        TaskError,
        ("tag 1 (of type int) is not a tag name", "word_tags"),
        _call(entity_scores, [[1, 0]], [[1, 0]]),
    ),
    B(
        "metrics-entity-scores-flat-sentence",
        GROUP,
        "entity_scores(['B-PER', 'O'], ['B-PER', 'O']): one sentence not wrapped in a list (read as sentences of "
        "one-letter tags: \"tag 'B' is neither 'O' nor a prefix\")",
        TaskError,
        ("predicted sentence 0 is 'B-PER'", "one list per sentence"),
        _call(entity_scores, ["B-PER", "O"], ["B-PER", "O"]),
    ),
    # classification: one check, asked in order (shape, dtype, finiteness, whole ids, range)
    B(
        "metrics-class-nan-ids",
        GROUP,
        "compute_metrics(<2-label task>, [nan, 1.0], [0, 1]): 1-D outputs holding NaN (told it was a regression "
        "head's output)",
        TaskError,
        ("outputs hold NaN (1 of 2 examples)",),
        _call(compute_metrics, PAIR, np.array([NAN, 1.0]), np.array([0, 1])),
    ),
    B(
        "metrics-class-inf-ids",
        GROUP,
        "compute_metrics(<2-label task>, [inf, 1.0], [0, 1]) (OverflowError: cannot convert float infinity to integer)",
        TaskError,
        ("predictions hold infinite values", "not ids"),
        _call(compute_metrics, PAIR, np.array([math.inf, 1.0]), np.array([0, 1])),
    ),
    B(
        "metrics-class-label-names",
        GROUP,
        "compute_metrics(<2-label task>, [1, 0], ['yes', 'no']): label names where ids belong (numpy "
        "UFuncTypeError: ufunc 'less' did not contain a loop)",
        TaskError,
        ("the labels", "dtype <U3", "not numbers", "label_names"),
        _call(compute_metrics, PAIR, [1, 0], ["yes", "no"]),
    ),
    B(
        "metrics-class-bool-predictions",
        GROUP,
        "compute_metrics(<2-label task>, [True, False], [0, 1]): thresholded outputs of dtype bool (scored as ids "
        "in silence)",
        TaskError,
        ("the predictions", "dtype bool", ".astype(int)"),
        _call(compute_metrics, PAIR, np.array([True, False]), np.array([0, 1])),
    ),
    B(
        "metrics-class-object-predictions",
        GROUP,
        "compute_metrics(<2-label task>, array([1, None], dtype=object), [1, 0]) (TypeError: '<' not supported "
        "between 'NoneType' and 'int')",
        TaskError,
        ("dtype object", "None, of type NoneType", "not numbers"),
        _call(compute_metrics, PAIR, np.array([1, None], dtype=object), np.array([1, 0])),
    ),
    B(
        "metrics-class-predictions-none",
        GROUP,
        "compute_metrics(<2-label task>, None, [1, 0]) (told '1 predictions but 2 labels')",
        TaskError,
        ("the predictions: None, not an array",),
        _call(compute_metrics, PAIR, None, [1, 0]),
    ),
    B(
        "metrics-class-fractional-labels",
        GROUP,
        "compute_metrics(<2-label task>, [1, 0], [1.0, 0.5]): a label that is no class id (scored as a miss: "
        "accuracy 0.5)",
        TaskError,
        ("label", "0.5", "is not a class id"),
        _call(compute_metrics, PAIR, [1, 0], [1.0, 0.5]),
    ),
    B(
        "metrics-class-labels-two-columns",
        GROUP,
        "compute_metrics(<2-label task>, [0, 1, 0, 1], [[0, 1], [0, 1]]): labels of shape [2, 2] (flattened to four "
        "labels and scored: accuracy 1.0)",
        TaskError,
        ("labels of shape [2, 2]", "one class id each"),
        _call(compute_metrics, PAIR, [0, 1, 0, 1], [[0, 1], [0, 1]]),
    ),
    B(
        "metrics-class-per-token-logits",
        GROUP,
        "compute_metrics(<2-label task>, <logits [2, 1, 2]>, [0, 1]): a per-token head's outputs (told '4 "
        "predictions but 2 labels')",
        TaskError,
        ("predictions of shape [2, 1, 2]", "per-token outputs", "logits [examples, labels]"),
        _call(compute_metrics, PAIR, np.zeros((2, 1, 2)), np.array([0, 1])),
    ),
    B(
        "metrics-class-ragged-logits",
        GROUP,
        "compute_metrics(<2-label task>, [[0.1, 0.9], [0.9]], [1, 0]): a row of logits one short (ValueError from "
        "numpy: 'inhomogeneous shape')",
        TaskError,
        ("row [1] has shape [1] where row [0] has [2]", "rows of different lengths"),
        _call(compute_metrics, PAIR, [[0.1, 0.9], [0.9]], [1, 0]),
    ),
    B(
        "metrics-class-unlabelled-examples",
        GROUP,
        "compute_metrics(<2-label task>, [1, 0], [1, -1]): an example without a gold label (GLUE's hidden test "
        "label -1; told to 'pass label ids, not raw labels')",
        TaskError,
        ("label -1 is outside 0..1", "without a gold label", "score only labelled examples"),
        _call(compute_metrics, PAIR, [1, 0], [1, -1]),
    ),
    B(
        "metrics-accuracy-one-column-logits",
        GROUP,
        "accuracy([[0.7], [0.2]], [1, 0]): a regression head's [n, 1] scores as logits (argmax read class 0 for "
        "every example: accuracy 0.5)",
        TaskError,
        ("predictions of shape [2, 1]", "one output per example", "not class logits"),
        _call(accuracy, np.array([[0.7], [0.2]]), [1, 0]),
    ),
    B(
        "metrics-class-bf16-tensor",
        GROUP,
        "compute_metrics(<2-label task>, <bfloat16 logits tensor>, tensor([1, 0])) (TypeError: Got unsupported "
        "ScalarType BFloat16)",
        None,
        ("scored:", "'accuracy': 1.0"),
        _reported(
            compute_metrics, PAIR, torch.tensor([[0.1, 0.9], [0.9, 0.1]], dtype=torch.bfloat16), torch.tensor([1, 0])
        ),
    ),
    # regression
    B(
        "metrics-regression-nan-gold",
        GROUP,
        "compute_metrics(<regression task>, [1.0, 2.0, 3.0], [1.0, nan, 2.0]): a gold score missing (Pearson NaN "
        "in the report, without a word)",
        TaskError,
        ("gold score nan of example 1 is not a number", "score only examples with a gold score"),
        _call(compute_metrics, SCORES, [1.0, 2.0, 3.0], [1.0, NAN, 2.0]),
    ),
    B(
        "metrics-regression-huge-scores",
        GROUP,
        "pearson([1e200, -1e200, 1e200], [2, 1, 3]) (its squares overflowed: a correlation of 0.0 and a numpy "
        "RuntimeWarning, where it is 0.866)",
        None,
        ("scored: 0.866",),
        _reported(lambda x, y: round(pearson(x, y), 3), [1e200, -1e200, 1e200], [2.0, 1.0, 3.0]),
    ),
    B(
        "metrics-regression-text-scores",
        GROUP,
        "compute_metrics(<regression task>, ['a', 'b'], [2.0, 1.0]) (ValueError: could not convert string to float)",
        TaskError,
        ("the predictions", "not numbers"),
        _call(compute_metrics, SCORES, ["a", "b"], [2.0, 1.0]),
    ),
    B(
        "metrics-dev-tagging-sentences-of-own-lengths",
        GROUP,
        "dev_metrics(ner, <one list per sentence, of two lengths>) (ValueError from numpy in top_tag_share)",
        None,
        ("scored:", "'top_prediction_share'"),
        _reported(dev_metrics, NER, [[0, 1], [0, 1, 2]], [[0, 1], [0, 1, 2]]),
    ),
    # the other kinds, and predictions without labels
    B(
        "metrics-generation-task",
        GROUP,
        "compute_metrics(instruction_task('alpaca'), <logits [2, 2]>, [0, 1]) (told the task 'has 0 labels []' and "
        "to score 'a head built for this task')",
        TaskError,
        ("generates its answers", "score_generation"),
        _call(compute_metrics, instruction_task("alpaca"), np.zeros((2, 2)), np.array([0, 1])),
    ),
    B(
        "metrics-score-without-labels",
        GROUP,
        "score(<2-label task>, Predictions(<logits [2, 2]>, labels=<empty>, loss=None)): batches predicted without "
        "labels (told '2 predictions but 0 labels')",
        ConfigError,
        ("no gold labels", "the batches held no 'labels'"),
        _call(score, PAIR, Predictions(np.zeros((2, 2)), np.empty(0, dtype=np.int64), None)),
    ),
    # a generation task's answer tokens
    B(
        "metrics-answers-without-labels",
        GROUP,
        "score_answers(<tiny GPT-2>, [<batch without 'labels'>], 2, 0) (KeyError: 'labels')",
        ConfigError,
        ("batch 0 holds no 'labels'", "per-token answer labels"),
        _answers(labels=None),
    ),
    B(
        "metrics-answers-label-minus-one",
        GROUP,
        "score_answers(<tiny GPT-2>, [<batch whose labels hold -1 off the answer>], 2, 0) (IndexError from torch: "
        "'Target -1 is out of bounds')",
        ConfigError,
        ("batch 0 has label -1", "neither a token id of the model's 100 nor -100"),
        _answers(labels=[[-100, -1, 3, 4]]),
    ),
    B(
        "metrics-answers-labels-longer-than-inputs",
        GROUP,
        "score_answers(<tiny GPT-2>, [<4 input tokens, 5 labels>], 2, 0) (IndexError from torch: 'The shape of the "
        "mask [1, 5] ... does not match')",
        ConfigError,
        ("labels of shape [1, 5] for input_ids of shape [1, 4]", "one label per input token"),
        _answers(labels=[[-100, -100, 3, 4, 5]]),
    ),
    B(
        "metrics-answers-float-labels",
        GROUP,
        "score_answers(<tiny GPT-2>, [<labels of dtype float32>], 2, 0) (RuntimeError from torch: 'expected target "
        "dtype to be Long')",
        ConfigError,
        ("'labels' of dtype torch.float32", "token ids"),
        _answers(labels=[[-100.0, -100.0, 3.0, 4.0]]),
    ),
    # QA answers
    B(
        "metrics-squad-predictions-one-text",
        GROUP,
        "squad_scores('abc', [['a'], ['b'], ['c']]): the predictions as one text (scored per character: exact match "
        "1.0)",
        TaskError,
        ("the predicted answers are 'abc'", "one text per question"),
        _call(squad_scores, "abc", [["a"], ["b"], ["c"]]),
    ),
    B(
        "metrics-squad-predictions-dict",
        GROUP,
        "squad_scores({'q1': 'Paris'}, [['Paris']]): the official script's {question id: answer} (its keys were "
        "scored as the answers: exact match 0.0)",
        TaskError,
        ("the predicted answers are a dict", "in the order of the questions"),
        _call(squad_scores, {"q1": "Paris"}, [["Paris"]]),
    ),
    B(
        "metrics-qa-features-without-gold",
        GROUP,
        "score_qa(<features without their 'gold_answers' column>, logits) (ValueError from datasets: \"Column "
        "'gold_answers' doesn't exist\")",
        TaskError,
        ("the features have no ['gold_answers'] columns", "encode_task"),
        _qa(lambda features, logits: score_qa(features.remove_columns("gold_answers"), logits)),
    ),
    B(
        "metrics-qa-logits-shorter-than-features",
        GROUP,
        "score_qa(<features of 4 tokens>, <logits of 3 positions>) (decoded from the first 3 tokens, the rest of "
        "each context never read)",
        TaskError,
        ("feature 0 has 4 tokens but the logits cover 3 positions", "in their order"),
        _qa(lambda features, logits: score_qa(features, logits[:, :3])),
    ),
    B(
        "metrics-qa-features-dict",
        GROUP,
        "score_qa(<a dict of feature columns>, logits) (AttributeError: 'dict' object has no attribute 'column_names')",
        TaskError,
        ("the features are a dict", "datasets.Dataset"),
        _qa(lambda features, logits: score_qa(features.to_dict(), logits)),
    ),
    B(
        "metrics-qa-unknown-metric",
        GROUP,
        "score_qa(features, logits, metrics=['accuracy']) (KeyError: 'accuracy')",
        TaskError,
        ("QA metrics ['accuracy'] are unknown", "['exact_match', 'f1']"),
        _qa(lambda features, logits: score_qa(features, logits, ["accuracy"])),
    ),
    # multiple choice: a row whose choices cannot be told apart
    B(
        "metrics-choice-all-identical",
        GROUP,
        "a multiple-choice row whose choices are all 'same' (loaded: its label arbitrary, scored right only as "
        "choice 0)",
        TaskError,
        ("row 0", "all 2 choices", "are the same text 'same'", "drop the row"),
        own_file(
            "mc.jsonl",
            '{"q": "q?", "options": ["same", " Same"], "label": 1}\n{"q": "r?", "options": ["x", "y"], "label": 1}\n',
            kind="multiple_choice",
            text_fields=["q"],
            choice_fields=["options"],
            num_choices=2,
        ),
    ),
)
