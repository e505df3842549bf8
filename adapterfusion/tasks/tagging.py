"""Token classification (TaskSpec kind "token_classification", e.g. CoNLL-2003 named entities): check the rows and
turn their tags into ids, encode the words with each word's tag on its first sub-token, and score a
TokenClassificationHead's logits at those positions with the entity-level metrics of tasks/tagging_metrics.py.

A word's tag may be written as its id (the Hub's conll2003 holds ids), its name (CoNLL's text files, JSON-lines
files of names) or the task's label value. Words cut off by max_length are not scored (the truncation report counts
the sentences that lost words).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from adapterfusion.heads.token_classification import IGNORE_INDEX, is_whole, word_labels_to_tokens
from adapterfusion.tasks import fields
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.spec import TaskSpec
from adapterfusion.tasks.tagging_metrics import entity_scores

LABEL_COLUMN = "label"  # as tasks/checks.py names it: one tag id per word here
_CUT_COLUMN = "words_cut"


def tag_lookup(spec: TaskSpec) -> dict[str, int]:
    """Raw tag (as a string) -> id: the task's label values (or the ids themselves), and each label name."""
    lookup = spec.label_lookup()
    return {**{name: i for i, name in enumerate(spec.label_names)}, **lookup}


def _tag_key(raw: Any) -> str:
    return str(int(raw)) if isinstance(raw, float) and raw.is_integer() else str(raw)


def check_tagging_split(spec: TaskSpec, dataset: Any, origin: str, role: str) -> tuple[Any, int]:
    """(the split with a "label" column of tag ids per word, rows dropped): words must be a non-empty list of texts
    and tags one known tag per word."""
    import datasets

    lookup = tag_lookup(spec)
    columns = fields.required_columns(spec)
    offset, ids = 0, []
    for batch in dataset.select_columns(columns).iter(batch_size=10_000):
        words, tags = fields.text_columns(batch, spec)[0], fields.field_values(batch, spec.label_field)
        for i, (row_words, row_tags) in enumerate(zip(words, tags, strict=True)):
            where = f"task {spec.name!r}, {origin}, row {offset + i}"
            if not isinstance(row_words, list) or not row_words or not all(isinstance(w, str) for w in row_words):
                raise TaskError(
                    f"{where}: field {spec.text_fields[0]!r} is {row_words!r}; it must be a non-empty list of words "
                    "(texts), one tag each."
                )
            if not isinstance(row_tags, list) or len(row_tags) != len(row_words):
                count = len(row_tags) if isinstance(row_tags, list) else f"no list ({row_tags!r})"
                raise TaskError(f"{where}: {len(row_words)} words but {count} tags in {spec.label_field!r}.")
            unknown = [tag for tag in row_tags if _tag_key(tag) not in lookup]
            if unknown:
                raise TaskError(
                    f"{where}: tag {unknown[0]!r} is not one of the task's tags {list(spec.label_names)} (or their "
                    f"ids 0..{spec.num_labels - 1}); fix the row or the task's label_names."
                )
            ids.append([lookup[_tag_key(tag)] for tag in row_tags])
        offset += len(words)
    if LABEL_COLUMN in dataset.column_names:
        dataset = dataset.remove_columns(LABEL_COLUMN)
    feature = datasets.Sequence(datasets.ClassLabel(names=list(spec.label_names)))
    return dataset.add_column(LABEL_COLUMN, ids, feature=feature), 0


def _encode_tagging_batch(
    batch: Mapping[str, list], indices: list[int], spec: TaskSpec, tokenizer: Any, max_length: int, split: str
) -> dict:
    words = fields.text_columns(batch, spec)[0]
    encoded = tokenizer(words, is_split_into_words=True, truncation=True, max_length=max_length, verbose=False)
    labels, cut = [], []
    outside = spec.label_names.index("O") if "O" in spec.label_names else None  # the tag of no entity
    for i, tags in enumerate(batch[LABEL_COLUMN]):
        word_ids = encoded.word_ids(i)
        where = f"task {spec.name!r}, split {split!r}, row {indices[i]}"
        full = len(encoded["input_ids"][i]) >= max_length
        _refuse_dropped_words(where, words[i], tags, word_ids, not full, tokenizer, outside)
        labels.append(word_labels_to_tokens(word_ids, tags))
        cut.append(len({w for w in word_ids if w is not None}) < len(tags))
    return {**dict(encoded), "labels": labels, _CUT_COLUMN: cut}


def _refuse_dropped_words(
    where: str,
    words: list[str],
    tags: list[int],
    word_ids: list[int | None],
    whole: bool,
    tokenizer: Any,
    outside: int | None,
) -> None:
    """A TaskError for a word tagged as part of an entity (any tag but `outside`, the id of 'O') that the tokenizer
    gave no token (blank, zero-width or control characters only): its tag would be neither trained on nor scored, and
    the entity lost. Such a word tagged 'O' carries no entity and passes. Words missing after the last one kept are
    the truncation's when the encoding is full (`whole` False)."""
    kept = {w for w in word_ids if w is not None}
    last = max(kept, default=-1)
    dropped = [w for w in range(len(words)) if w not in kept and (w < last or whole) and tags[w] != outside]
    if dropped:
        raise TaskError(
            f"{where}: word {dropped[0]} ({words[dropped[0]]!r}) has no token for the tokenizer "
            f"{type(tokenizer).__name__} (it drops every character of it), so its tag would be neither trained on "
            f"nor scored ({len(dropped)} such words in the row); remove the word and its tag from the row."
        )


def encode_tagging_split(
    spec: TaskSpec, dataset: Any, tokenizer: Any, max_length: int, role: str, num_proc: int | None
) -> tuple[Any, int, int]:
    """(encoded split, sentences that lost words to max_length, sentences): input_ids and per-token "labels"."""
    if not getattr(tokenizer, "is_fast", False):
        raise TaskError(
            f"task {spec.name!r}: tagging aligns word tags to tokens through word_ids(), which only fast tokenizers "
            "give; load the tokenizer with AutoTokenizer.from_pretrained(..., use_fast=True)."
        )
    mapped = dataset.map(
        _encode_tagging_batch,
        batched=True,
        with_indices=True,  # a word without tokens is named by its row
        remove_columns=dataset.column_names,
        num_proc=num_proc,
        fn_kwargs={"spec": spec, "tokenizer": tokenizer, "max_length": max_length, "split": role},
        desc=f"{spec.name}/{role}: tokenising",
    )
    cut = int(sum(mapped[_CUT_COLUMN]))
    return mapped.remove_columns(_CUT_COLUMN), cut, len(dataset)


def word_predictions(predictions: np.ndarray, labels: np.ndarray) -> tuple[list[list[int]], list[list[int]]]:
    """(predicted, gold) tag ids per sentence at its labelled tokens (labels != IGNORE_INDEX), from tag ids
    [sentences, tokens] as metrics._tag_ids checks them (padded alike, predicted ids arg-maxed and in range where a
    token is labelled)."""
    kept = labels != IGNORE_INDEX
    return [p[k].tolist() for p, k in zip(predictions, kept, strict=True)], [
        g[k].tolist() for g, k in zip(labels, kept, strict=True)
    ]


def tagging_metrics(spec: TaskSpec, predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The task's metrics (entity precision, recall, F1; word accuracy) from checked tag ids (word_predictions)."""
    predicted, gold = word_predictions(predictions, labels)
    if set(spec.metrics) <= {"accuracy"}:  # tags that are not entity chunks (e.g. part of speech)
        words = sum(len(sentence) for sentence in gold)
        if words == 0:
            raise TaskError("no tagged words to score; the evaluation split is empty.")
        right = sum(p == g for ps, gs in zip(predicted, gold, strict=True) for p, g in zip(ps, gs, strict=True))
        return {"accuracy": right / words}
    names = spec.label_names
    scores = entity_scores(
        [[names[t] for t in sentence] for sentence in predicted], [[names[t] for t in sentence] for sentence in gold]
    )
    return {name: scores[name] for name in spec.metrics}


def top_tag_share(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Share of the scored words given the most often predicted tag (1.0: a constant tagger, e.g. all "O"), from
    checked tag ids (word_predictions)."""
    predicted, _ = word_predictions(predictions, labels)
    flat = np.asarray([t for sentence in predicted for t in sentence])
    if flat.size == 0:
        raise TaskError("no tagged words to summarise; the evaluation split is empty.")
    return float(np.unique(flat, return_counts=True)[1].max() / flat.size)


def word_tags(spec: TaskSpec, tag_ids: Sequence[int]) -> list[str]:
    """Tag names of tag ids, e.g. for printing a model's predictions. An id outside 0..num_labels-1 is refused, not
    read from the end of the names (-1 would print the last tag)."""
    ids = np.asarray(tag_ids).reshape(-1).tolist() if not isinstance(tag_ids, list) else tag_ids
    wrong = [t for t in ids if not is_whole(t) or not 0 <= t < spec.num_labels]
    if wrong:
        raise TaskError(
            f"task {spec.name!r}: tag id {wrong[0]!r} is not one of the ids 0..{spec.num_labels - 1} of its tags "
            f"{list(spec.label_names)}; pass the model's predicted ids (argmax over the tags)."
        )
    return [spec.label_names[int(t)] for t in ids]
