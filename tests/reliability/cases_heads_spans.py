"""Bad-input cases at one boundary, task heads and their data: the label helpers of the QA and tagging heads, span
(SQuAD) rows, and the scoring of QA, tagging and classification outputs."""

from __future__ import annotations

import json
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
from adapterfusion.heads.question_answering import NOT_CONTEXT
from adapterfusion.tasks import TaskError, TaskSpec, compute_metrics, encode_task, load_task_data
from adapterfusion.tasks.qa_metrics import squad_scores
from adapterfusion.tasks.squad import score_qa
from adapterfusion.tasks.tagging import word_tags
from catalogue import Action, BadInput
from span_task_data import PERSON_TAGGER, squad_examples, squad_task_file

B = BadInput
NAN = math.nan
NER = PERSON_TAGGER
CHOICE = TaskSpec(name="choice", kind="multiple_choice", text_fields=("q",), choice_fields=("choices",), num_choices=3)
PAIR = TaskSpec(name="pair", kind="single", text_fields=("text",), label_names=("no", "yes"))


# ---- helpers -------------------------------------------------------------------------------------------------------
def _call(function: Callable[..., Any], *args: Any) -> Callable[[Path], Action]:
    return lambda folder: lambda: function(*args)


def _squad_row(answers: Callable[[dict], None]) -> Callable[[Path], Action]:
    """A SQuAD-layout JSON-lines file of three questions whose second row's answers are changed by `answers`,
    loaded as an extractive QA task."""

    def prepare(folder: Path) -> Action:
        rows = squad_examples(3)
        answers(rows[1]["answers"])
        spec = squad_task_file(folder / "train.jsonl", rows)
        return lambda: load_task_data(spec)

    return prepare


def _tagging_word(word: str) -> Callable[[Path], Action]:
    """A tagging file whose second sentence holds `word`, tagged B-PER, between two names; loaded and encoded with
    the shipped MiniLM's tokenizer."""

    def prepare(folder: Path) -> Action:
        rows = [
            {"tokens": ["the", "town"], "ner_tags": [0, 0]},
            {"tokens": ["Ada", word, "Brook"], "ner_tags": [1, 1, 2]},
        ]
        path = folder / "train.jsonl"
        path.write_text("\n".join(json.dumps(row) for row in rows * 3) + "\n")
        spec = TaskSpec.from_dict({**NER.to_dict(), "data_files": {"train": str(path)}})
        tokenizer = AutoTokenizer.from_pretrained(af.default_encoder_path())
        return lambda: encode_task(spec, load_task_data(spec).splits, tokenizer, 32)

    return prepare


def _qa_features_nan(folder: Path) -> Action:
    """Two QA features of one context with NaN start/end logits: score_qa must not decode a span from them."""
    offsets = [[NOT_CONTEXT, NOT_CONTEXT], [0, 3], [4, 9], [NOT_CONTEXT, NOT_CONTEXT]]
    features = Dataset.from_dict(
        {
            "example_index": [0, 1],
            "context_offsets": [offsets, offsets],
            "context_text": ["The cat sat", "The cat sat"],
            "gold_answers": [["The"], ["The"]],
        }
    )
    return lambda: score_qa(features, np.full((2, 4, 2), NAN))


CASES: tuple[BadInput, ...] = (
    # the label helpers of the span heads: QA start/end positions and word tags on tokens
    B(
        "heads-qa-labels-counts-differ",
        "heads and spans",
        "af.qa_labels(torch.tensor([1, 2]), torch.tensor([2])): two starts, one end (RuntimeError from torch.stack)",
        ConfigError,
        ("2 start_positions but 1 end_positions", "one start and one end per example"),
        _call(af.qa_labels, torch.tensor([1, 2]), torch.tensor([2])),
    ),
    B(
        "heads-qa-labels-fractional",
        "heads and spans",
        "af.qa_labels(torch.tensor([1.5]), torch.tensor([2.0])) (was truncated to token 1 by .long() without a word)",
        ConfigError,
        ("start_positions must be whole token indices", "1.5"),
        _call(af.qa_labels, torch.tensor([1.5]), torch.tensor([2.0])),
    ),
    B(
        "heads-qa-labels-list-of-text",
        "heads and spans",
        "af.qa_labels(['1', '2'], [2, 3]): positions given as strings (AttributeError: 'list' has no 'reshape')",
        ConfigError,
        ("start_positions=['1', '2']", "not token indices"),
        _call(af.qa_labels, ["1", "2"], [2, 3]),
    ),
    B(
        "heads-word-labels-fewer-tags-than-words",
        "heads and spans",
        "af.word_labels_to_tokens([None, 0, 1, 2, None], [1, 2]): tokens of three words, tags for two (IndexError)",
        ConfigError,
        ("word 2", "words 0..1 only (2 tags)", "one tag per word"),
        _call(af.word_labels_to_tokens, [None, 0, 1, 2, None], [1, 2]),
    ),
    B(
        "heads-word-labels-tag-names",
        "heads and spans",
        "af.word_labels_to_tokens([None, 0, None], ['B-PER']): a tag name, not its id (ValueError from int())",
        ConfigError,
        ("tag 'B-PER' is not a tag id", "map tag names to their ids"),
        _call(af.word_labels_to_tokens, [None, 0, None], ["B-PER"]),
    ),
    B(
        "heads-word-labels-fractional-tag",
        "heads and spans",
        "af.word_labels_to_tokens([None, 0, 1, None], [1, 1.7]) (1.7 was trained on as tag 1 without a word)",
        ConfigError,
        ("tag 1.7 is not a tag id",),
        _call(af.word_labels_to_tokens, [None, 0, 1, None], [1, 1.7]),
    ),
    # span (SQuAD) rows
    B(
        "squad-answer-start-off-its-text",
        "heads and spans",
        "SQuAD row whose answer_start points two characters past its answer text, still inside the context (was "
        "trained on the characters found there, 'ar Field. ', as the answer)",
        TaskError,
        ("row 1", "answer 'Omar Field' has answer_start 47", "'ar Field. '", "stands at character [45]"),
        _squad_row(lambda answers: answers["answer_start"].__setitem__(0, answers["answer_start"][0] + 2)),
    ),
    B(
        "squad-answer-start-text-absent",
        "heads and spans",
        "SQuAD row whose answer text 'Omar Fjeld' is nowhere in the context (answer_start inside it: trained on "
        "whatever stood there, scored against a text the model can never give)",
        TaskError,
        ("row 1", "nowhere in the context", "character offset of the answer text"),
        _squad_row(lambda answers: answers["text"].__setitem__(0, "Omar Fjeld")),
    ),
    B(
        "tagging-word-without-tokens",
        "heads and spans",
        "tagging row ['Ada', '\\u200b', 'Brook'] whose zero-width word is tagged B-PER (the tokenizer drops it: its "
        "tag was neither trained on nor scored, and the sentence was reported as cut by max_length)",
        TaskError,
        ("row", "word 1 ('\\u200b') has no token", "remove the word and its tag"),
        _tagging_word("\u200b"),
    ),
    # scoring: gold answers, tag ids, model outputs that hold NaN
    B(
        "squad-scores-gold-bare-string",
        "heads and spans",
        "squad_scores(['a'], ['abc']): one gold answer as a bare string (read as the answers 'a', 'b', 'c': exact "
        "match 1.0)",
        TaskError,
        ("gold answers 'abc' must be a list of texts", "[answer]"),
        _call(squad_scores, ["a"], ["abc"]),
    ),
    B(
        "squad-scores-prediction-none",
        "heads and spans",
        "squad_scores([None], [['a']]): a missing predicted answer (AttributeError: 'NoneType' has no 'lower')",
        TaskError,
        ("question 0", "predicted answer None is not a text"),
        _call(squad_scores, [None], [["a"]]),
    ),
    B(
        "tagging-word-tags-negative-id",
        "heads and spans",
        "word_tags(ner, [0, -1]) (printed the last tag, 'I-PER', for id -1; an id past the end was an IndexError)",
        TaskError,
        ("tag id -1", "0..2", "'I-PER'"),
        _call(word_tags, NER, [0, -1]),
    ),
    B(
        "tagging-metrics-fractional-predictions",
        "heads and spans",
        "compute_metrics(ner, [[0.5, 1.0, 2.0]], labels): tag predictions that are not ids (TypeError: tuple "
        "indices must be integers)",
        TaskError,
        ("tagging predictions of dtype float64", "not tag ids"),
        _call(compute_metrics, NER, np.array([[0.5, 1.0, 2.0]]), np.array([[-100, 1, 2]])),
    ),
    B(
        "tagging-metrics-nan-logits",
        "heads and spans",
        "compute_metrics(ner, <NaN logits [1, 3, 3]>, labels) (scored as 'O' everywhere: F1 0.0, without a word)",
        TaskError,
        ("tagging", "outputs hold NaN (1 of 1 examples)", "evaluate in float32"),
        _call(compute_metrics, NER, np.full((1, 3, 3), NAN), np.array([[-100, 1, 2]])),
    ),
    B(
        "scoring-classification-nan-logits",
        "heads and spans",
        "compute_metrics(<2-label task>, <NaN logits [2, 2]>, [0, 1]) (argmax read NaN as class 0: accuracy 0.5)",
        TaskError,
        ("outputs hold NaN (2 of 2 examples)", "torch.isfinite"),
        _call(compute_metrics, PAIR, np.full((2, 2), NAN), np.array([0, 1])),
    ),
    B(
        "scoring-choice-logits-too-wide",
        "heads and spans",
        "compute_metrics(<3-choice task>, <logits of 4 choices per example>, [0, 1]) (a choice that does not exist was "
        "scored as a plain miss: accuracy 0.5)",
        TaskError,
        ("3 labels", "logits of 4 outputs per example", "a head built for this task"),
        _call(compute_metrics, CHOICE, np.array([[0, 0, 0, 5.0], [0, 5.0, 0, 0]]), np.array([0, 1])),
    ),
    B(
        "scoring-classification-id-beyond-labels",
        "heads and spans",
        "compute_metrics(<2-label task>, predicted ids [2, 1], [0, 1]) (id 2, no label of the task, scored as a miss)",
        TaskError,
        ("2 labels ['no', 'yes']", "predicted id 2"),
        _call(compute_metrics, PAIR, np.array([2, 1]), np.array([0, 1])),
    ),
    B(
        "scoring-qa-nan-logits",
        "heads and spans",
        "score_qa(features, <NaN start/end logits>) (decoded the first context token as every answer)",
        TaskError,
        ("extractive QA", "outputs hold NaN (2 of 2 examples)"),
        _qa_features_nan,
    ),
)
