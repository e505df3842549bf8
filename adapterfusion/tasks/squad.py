"""Extractive question answering (TaskSpec kind "extractive_qa", e.g. SQuAD v1.1): check the rows, encode each
question with its context in overlapping windows, and turn a QuestionAnsweringHead's logits back into answer texts
and SQuAD's scores.

Encoding (BERT's SQuAD recipe): the question, cut to at most half of max_length tokens, is paired with windows of
the context that overlap by `doc_stride` tokens (max_length // 3: 128 for 384), so a long context is read whole. Each
window is one feature with the answer's start and end token, or both at 0 ([CLS]) when the answer does not lie
wholly inside it; training uses the first gold answer. Every feature keeps what scoring needs: its example's index,
the context, the gold answers, and each token's character offsets in the context (NOT_CONTEXT for the question,
special tokens and padding).

Decoding: per example, the best valid span over all its windows (heads/question_answering.best_span: start <= end,
at most MAX_ANSWER_TOKENS tokens, context tokens only, the highest start + end logit), cut out of the context by its
offsets; then exact match and F1 against every gold answer (tasks/qa_metrics.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from adapterfusion.heads.question_answering import MAX_ANSWER_TOKENS, NOT_CONTEXT, best_span
from adapterfusion.tasks import fields
from adapterfusion.tasks.errors import TaskError, refuse_nan_outputs
from adapterfusion.tasks.metric_inputs import as_array
from adapterfusion.tasks.qa_metrics import squad_scores
from adapterfusion.tasks.spec import TaskSpec

START_COLUMN, END_COLUMN = "start_positions", "end_positions"  # the collator stacks them into labels [batch, 2]
EXAMPLE_COLUMN = "example_index"
OFFSETS_COLUMN = "context_offsets"
CONTEXT_COLUMN = "context_text"
GOLD_COLUMN = "gold_answers"
_CUT_COLUMN = "question_cut"
QA_METRICS = ("exact_match", "f1")  # what squad_scores gives


def doc_stride(max_length: int) -> int:
    """Tokens shared by two neighbouring windows of a context: a third of the window, BERT's 128 of 384."""
    return max_length // 3


def answers_of(value: Any) -> tuple[list[Any], list[Any]]:
    """(texts, starts) of one row's answers in the Hub's layout {"text": [...], "answer_start": [...]}."""
    if not isinstance(value, Mapping):
        return [], []
    texts, starts = value.get("text"), value.get("answer_start")
    return (list(texts) if isinstance(texts, (list, tuple)) else [texts]), (
        list(starts) if isinstance(starts, (list, tuple)) else [starts]
    )


# ---- checking ---------------------------------------------------------------------------------------------------
def _check_row(spec: TaskSpec, question: Any, context: Any, answers: Any, where: str) -> bool:
    """Raise on a malformed row; False for a row without any gold answer."""
    for name, value in zip(spec.text_fields, (question, context), strict=True):
        if not isinstance(value, str):
            raise TaskError(f"{where}: field {name!r} is {value!r}, not text; fill it in or drop the row.")
    if not isinstance(answers, Mapping):
        raise TaskError(
            f"{where}: field {spec.label_field!r} is {answers!r}; it must hold the answers as "
            "{'text': [...], 'answer_start': [...]} (the Hub's squad layout)."
        )
    texts, starts = answers_of(answers)
    if len(texts) != len(starts):
        raise TaskError(f"{where}: {len(texts)} answer texts but {len(starts)} answer_start values; give one each.")
    for text, start in zip(texts, starts, strict=True):
        if not isinstance(text, str) or not text.strip():
            raise TaskError(f"{where}: answer {text!r} is not a non-empty text.")
        if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= len(context) - len(text):
            raise TaskError(
                f"{where}: answer {text!r} starts at {start!r}, which does not place it inside the context of "
                f"{len(context)} characters; answer_start is the answer's first character in the context."
            )
        first, end = _answer_chars(text, start)  # what training reads: the answer without its outer whitespace
        if context[first:end] != text.strip():
            raise TaskError(f"{where}: {_misplaced(context, text, start)}")
    return bool(texts)


def _misplaced(context: str, text: str, start: int) -> str:
    """Why an answer whose answer_start does not point at its text is refused (training would learn the characters
    found there, scoring would not know), and where the text does stand, if it does."""
    core, lead = text.strip(), len(text) - len(text.lstrip())
    found = [i - lead for i in range(len(context) - len(core) + 1) if context.startswith(core, i)]
    where = (
        f"the text stands at character {found[:5]}"
        if found
        else "the text is nowhere in the context (check its spelling)"
    )
    return (
        f"answer {text!r} has answer_start {start}, where the context reads "
        f"{context[start : start + len(text)]!r}; {where}. answer_start must be the character offset of the "
        "answer text in the context (0-based, in characters, not bytes or tokens)."
    )


def check_qa_split(spec: TaskSpec, dataset: Any, origin: str, role: str) -> tuple[Any, int]:
    """(the split, rows dropped): every row checked; a row without an answer is dropped with drop_unlabelled, else
    refused (a test split without any answer is left out: None)."""
    columns = fields.required_columns(spec)
    unanswered: list[int] = []
    offset = 0
    for batch in dataset.select_columns(columns).iter(batch_size=10_000):
        questions, contexts = fields.text_columns(batch, spec)
        answers = fields.field_values(batch, spec.label_field)
        for i, row in enumerate(zip(questions, contexts, answers, strict=True)):
            if not _check_row(spec, *row, where=f"task {spec.name!r}, {origin}, row {offset + i}"):
                unanswered.append(offset + i)
        offset += len(questions)
    if unanswered and role == "test" and len(unanswered) == len(dataset):
        return None, len(dataset)
    if unanswered and not spec.drop_unlabelled:
        raise TaskError(
            f"task {spec.name!r}, {origin}, row {unanswered[0]}: no gold answer ({len(unanswered)} such rows); "
            "SQuAD v1.1 questions all have one: remove them or set drop_unlabelled=True."
        )
    if unanswered:
        dataset = dataset.select(sorted(set(range(len(dataset))) - set(unanswered)))
    return dataset, len(unanswered)


# ---- encoding ---------------------------------------------------------------------------------------------------
def _cut_questions(questions: list[str], tokenizer: Any, budget: int) -> tuple[list[str], list[bool]]:
    """Questions longer than `budget` tokens cut after their budget-th token (rare: SQuAD's longest is ~60)."""
    encoded = tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    cut, flags = [], []
    for question, offsets in zip(questions, encoded["offset_mapping"], strict=True):
        flags.append(len(offsets) > budget)
        cut.append(question[: offsets[budget - 1][1]] if len(offsets) > budget else question)
    return cut, flags


def _answer_chars(text: str, start: int) -> tuple[int, int]:
    """The answer's characters [start, end) without the whitespace some gold answers carry at either end, which no
    token covers (it would stretch the span by a token)."""
    lead = len(text) - len(text.lstrip())
    return start + lead, start + len(text.rstrip())


def _answer_tokens(
    offsets: Sequence[Sequence[int]], context_tokens: list[int], start: int, end: int
) -> list[int] | None:
    """[start token, end token] of the answer's characters [start, end) in this window, or [0, 0] when the window
    does not hold all of it (or no context token: a context of only whitespace); None when the window holds it but
    no token covers any of its characters (the tokenizer dropped them all: a zero-width or control character)."""
    if not context_tokens:
        return [0, 0]
    first, last = context_tokens[0], context_tokens[-1]
    if offsets[first][0] > start or offsets[last][1] < end:
        return [0, 0]
    if not any(offsets[i][0] < end and offsets[i][1] > start for i in context_tokens):
        return None  # the nearest tokens around it would be trained on as the answer
    start_token = max(i for i in context_tokens if offsets[i][0] <= start)
    end_token = min(i for i in context_tokens if offsets[i][1] >= end)
    return [start_token, max(end_token, start_token)]


def _encode_qa_batch(
    batch: Mapping[str, list], indices: list[int], spec: TaskSpec, tokenizer: Any, max_length: int, split: str
) -> dict[str, list]:
    questions, contexts = fields.text_columns(batch, spec)
    answers = [answers_of(value) for value in fields.field_values(batch, spec.label_field)]
    questions, cut = _cut_questions(questions, tokenizer, max_length // 2)
    windows = tokenizer(
        questions,
        contexts,
        truncation="only_second",
        max_length=max_length,
        stride=doc_stride(max_length),
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        verbose=False,
    )
    out: dict[str, list] = {key: [] for key in windows if key not in ("offset_mapping", "overflow_to_sample_mapping")}
    out.update(
        {
            START_COLUMN: [],
            END_COLUMN: [],
            EXAMPLE_COLUMN: [],
            OFFSETS_COLUMN: [],
            CONTEXT_COLUMN: [],
            GOLD_COLUMN: [],
            _CUT_COLUMN: [],
        }
    )
    mapping, seen = windows["overflow_to_sample_mapping"], set()
    for feature, row in enumerate(mapping):
        for key in out:
            if key in windows:
                out[key].append(windows[key][feature])
        sequence = windows.sequence_ids(feature)
        context_tokens = [i for i, s in enumerate(sequence) if s == 1]
        offsets = [
            list(o) if s == 1 else [NOT_CONTEXT, NOT_CONTEXT]
            for o, s in zip(windows["offset_mapping"][feature], sequence, strict=True)
        ]
        texts, starts = answers[row]
        span = _answer_tokens(offsets, context_tokens, *_answer_chars(texts[0], starts[0])) if texts else [0, 0]
        if span is None:
            raise TaskError(
                f"task {spec.name!r}, split {split!r}, row {indices[row]}: answer {texts[0]!r} (answer_start "
                f"{starts[0]}) has no token for the tokenizer {type(tokenizer).__name__}, which drops every character "
                "of it, so the tokens around it would be trained on as the answer; give the answer's visible text, "
                "or drop the row."
            )
        start, end = span
        out[START_COLUMN].append(start)
        out[END_COLUMN].append(end)
        out[EXAMPLE_COLUMN].append(indices[row])
        out[OFFSETS_COLUMN].append(offsets)
        out[CONTEXT_COLUMN].append(contexts[row])
        out[GOLD_COLUMN].append(list(texts))
        out[_CUT_COLUMN].append(cut[row] and row not in seen)  # counted once per example
        seen.add(row)
    return out


def check_qa_tokenizer(spec: TaskSpec, tokenizer: Any, max_length: int) -> None:
    """A fast tokenizer (offsets) and a max_length with room for a context window beside a cut question."""
    if getattr(tokenizer, "padding_side", "right") == "left":
        raise TaskError(
            f"task {spec.name!r}: extractive QA reads answer positions from the start of each window, so it needs "
            "right padding; set tokenizer.padding_side = 'right'."
        )
    if not getattr(tokenizer, "is_fast", False):
        raise TaskError(
            f"task {spec.name!r}: extractive QA maps answers to characters through token offsets, which only fast "
            "tokenizers give; load the tokenizer with AutoTokenizer.from_pretrained(..., use_fast=True)."
        )
    room = max_length - max_length // 2 - tokenizer.num_special_tokens_to_add(pair=True)
    if room <= doc_stride(max_length):
        raise TaskError(
            f"task {spec.name!r}: max_length={max_length} leaves {room} tokens of context beside the question, "
            f"not more than the {doc_stride(max_length)} tokens windows share; use max_length >= 32 (SQuAD: 384)."
        )


def encode_qa_split(
    spec: TaskSpec, dataset: Any, tokenizer: Any, max_length: int, role: str, num_proc: int | None
) -> tuple[Any, int, int]:
    """(features, examples whose question was cut, examples) of one split; several features per long context."""
    check_qa_tokenizer(spec, tokenizer, max_length)
    mapped = dataset.map(
        _encode_qa_batch,
        batched=True,
        with_indices=True,
        remove_columns=dataset.column_names,
        num_proc=num_proc,
        fn_kwargs={"spec": spec, "tokenizer": tokenizer, "max_length": max_length, "split": role},
        desc=f"{spec.name}/{role}: tokenising into windows",
    )
    cut = int(sum(mapped[_CUT_COLUMN]))
    return mapped.remove_columns(_CUT_COLUMN), cut, len(dataset)


# ---- decoding and scoring ---------------------------------------------------------------------------------------
def qa_needs_features(spec: TaskSpec) -> TaskError:
    """The error of scoring QA logits without the features they came from."""
    return TaskError(
        f"task {spec.name!r} is extractive QA: its answers are decoded from the logits with the encoded features' "
        "offsets and contexts; score them with adapterfusion.tasks.squad.score_qa(features, logits), or "
        "adapterfusion.scoring.score(task, predictions, features)."
    )


def predicted_answers(
    features: Any, logits: np.ndarray, max_answer_tokens: int = MAX_ANSWER_TOKENS
) -> tuple[list[int], list[str]]:
    """(example indices, answer texts): each example's best span over its windows. `logits` [features, seq, 2] in
    the order of `features` (a split encoded by encode_qa_split, any order or subset of its rows)."""
    _check_features(features, (EXAMPLE_COLUMN, OFFSETS_COLUMN, CONTEXT_COLUMN))
    pair = isinstance(logits, (tuple, list)) and len(logits) == 2 and len(features) != 2
    logits = as_array(logits, "the QA logits")  # torch tensors (bf16 too) and lists of them; ragged rows refused
    refuse_nan_outputs(logits, "extractive QA")
    if logits.ndim != 3 or logits.shape[-1] != 2 or len(logits) != len(features):
        hint = " (a (start_logits, end_logits) pair: np.stack((start, end), axis=-1) them)" if pair else ""
        raise TaskError(
            f"QA logits of shape {list(logits.shape)} for {len(features)} features; expected [features, seq, 2] "
            f"from a QuestionAnsweringHead{hint}."
        )
    best: dict[int, tuple[float, str]] = {}
    columns = features.select_columns([EXAMPLE_COLUMN, OFFSETS_COLUMN, CONTEXT_COLUMN])
    for row, feature in enumerate(columns):
        if len(feature[OFFSETS_COLUMN]) > logits.shape[1]:  # best_span would read only the tokens the logits cover
            raise TaskError(
                f"feature {row} has {len(feature[OFFSETS_COLUMN])} tokens but the logits cover {logits.shape[1]} "
                "positions: they come from other inputs; pass the logits of these features, in their order."
            )
        span = best_span(logits[row, :, 0], logits[row, :, 1], np.asarray(feature[OFFSETS_COLUMN]), max_answer_tokens)
        example = feature[EXAMPLE_COLUMN]
        if span is not None and (example not in best or span.score > best[example][0]):
            best[example] = (span.score, feature[CONTEXT_COLUMN][span.char_start : span.char_end])
        best.setdefault(example, (-np.inf, ""))
    order = sorted(best)
    return order, [best[example][1] for example in order]


def _check_features(features: Any, columns: Sequence[str]) -> None:
    """The encoded split (a datasets.Dataset) with the columns QA scoring reads."""
    if not hasattr(features, "column_names"):
        raise TaskError(
            f"the features are a {type(features).__name__}; pass the encoded split (a datasets.Dataset from "
            "encode_task of an 'extractive_qa' task) the logits were computed from."
        )
    missing = [c for c in columns if c not in features.column_names]
    if missing:
        raise TaskError(
            f"the features have no {missing} columns: QA answers are decoded from a split encoded by encode_task "
            "for an 'extractive_qa' task, in the order the logits were computed."
        )


def score_qa(features: Any, logits: np.ndarray, metrics: Sequence[str] | None = None) -> dict[str, float]:
    """SQuAD's exact match and F1 (fractions) of the decoded answers against every gold answer, per example."""
    _check_features(features, (GOLD_COLUMN,))
    if isinstance(metrics, str):  # read letter by letter: "f1" was the unknown metrics ['f', '1']
        raise TaskError(f"QA metrics={metrics!r} is one text; pass a list of metric names, e.g. [{metrics!r}].")
    unknown = [name for name in metrics or () if name not in QA_METRICS]
    if unknown:
        raise TaskError(f"QA metrics {unknown} are unknown; extractive QA is scored with {list(QA_METRICS)}.")
    examples, answers = predicted_answers(features, logits)
    gold: dict[int, list[str]] = {}
    for example, texts in zip(features[EXAMPLE_COLUMN], features[GOLD_COLUMN], strict=True):
        gold.setdefault(example, texts)
    scores = squad_scores(answers, [gold[example] for example in examples])
    return {name: scores[name] for name in (metrics or scores)}
