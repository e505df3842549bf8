"""Tokenise a loaded task for a model: single texts, text pairs, or one (context, choice) pair per choice.

Multiple choice: every example becomes `num_choices` pairs, so its input_ids are [num_choices, seq].
WinoGrande-style blanks follow the WinoGrande authors' RoBERTa baseline: the first segment is the sentence up to
the blank, the second is the option followed by the rest of the sentence ("Ian volunteered ... because",
"Dennis despised eating intestine.").

Encoding runs through `Dataset.map(batched=True)`, so `datasets` caches it next to the data's Arrow files.
Truncation is counted per example (an MC example counts once if any of its choices was cut).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from adapterfusion._validation import short_repr
from adapterfusion.tasks import fields
from adapterfusion.tasks.checks import check_label_column, check_rows
from adapterfusion.tasks.collator import TaskCollator
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.instruction import ANSWER_CUT_COLUMN, PROMPT_CUT_COLUMN, encode_instruction_batch
from adapterfusion.tasks.registry import resolve_task
from adapterfusion.tasks.spec import LABEL_COLUMN, TaskSpec
from adapterfusion.tasks.squad import encode_qa_split
from adapterfusion.tasks.tagging import encode_tagging_split

__all__ = [
    "EncodedTask",
    "TaskCollator",
    "TruncationReport",
    "encode_task",
    "encoded_sha256",
    "effective_max_length",
    "segments",
]

TRUNCATED_COLUMN = PROMPT_CUT_COLUMN
_HUGE_MODEL_MAX = 1_000_000  # tokenizers without a limit report ~1e30 as model_max_length
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TruncationReport:
    """How many examples per split lost tokens to `max_length` (so a report can flag a too-short limit);
    `answers_cut`: of those, a generation task's examples whose answer lost tokens (tasks/instruction.py)."""

    task: str
    max_length: int
    truncated: Mapping[str, int]
    totals: Mapping[str, int]
    answers_cut: Mapping[str, int] = field(default_factory=dict)

    @property
    def any_truncated(self) -> bool:
        return any(self.truncated.values())

    def describe(self) -> str:
        parts = [f"{role} {self.truncated[role]}/{self.totals[role]}" for role in self.totals]
        cut = [f"{role} {n}" for role, n in self.answers_cut.items() if n]
        answers = f"; answers cut: {', '.join(cut)}" if cut else ""
        return f"{self.task}: truncated to {self.max_length} tokens: " + ", ".join(parts) + answers

    def answers_cut_warning(self) -> str | None:
        """What a generation task's answers cut by max_length cost (None if none was): the model never sees their
        end token, so it never learns to stop them, and exact_match cannot match those rows."""
        if not any(self.answers_cut.values()):
            return None
        return (
            f"{self.describe()}: answers longer than max_length lost their end, so the model never learns to stop "
            "them; raise max_length to at least the longest answer's tokens + 2"
        )

    def to_dict(self) -> dict[str, Any]:
        out = {
            "task": self.task,
            "max_length": self.max_length,
            "truncated": dict(self.truncated),
            "totals": dict(self.totals),
        }
        return {**out, "answers_cut": dict(self.answers_cut)} if self.answers_cut else out


class EncodedTask(NamedTuple):
    """What `encode_task` returns; unpacks as `encoded, truncation = encode_task(...)`."""

    splits: Any  # datasets.DatasetDict
    truncation: TruncationReport


def _fill_blank(context: str, option: str, blank: str) -> tuple[str, str]:
    """(sentence up to the blank, option + rest of the sentence), as in the WinoGrande baseline."""
    cut = context.index(blank)
    return context[:cut].strip(), f"{option} {context[cut + len(blank) :].strip()}".strip()


def segments(batch: Mapping[str, list], spec: TaskSpec) -> tuple[list[str], list[str] | None]:
    """The tokenizer's first and second segments, flattened; MC rows contribute num_choices entries each."""
    if spec.kind == "single":
        return fields.text_columns(batch, spec)[0], None
    if spec.kind == "pair":
        first, second = fields.text_columns(batch, spec)
        return first, second
    firsts, seconds = [], []
    for context, choices in zip(fields.contexts(batch, spec), fields.choice_lists(batch, spec), strict=True):
        for choice in choices:
            a, b = _fill_blank(context, choice, spec.blank) if spec.blank else (context, choice)
            firsts.append(a)
            seconds.append(b)
    return firsts, seconds


def _tokenize(tokenizer, first: list[str], second: list[str] | None, max_length: int) -> tuple[dict, list[bool]]:
    """Tokenise without truncation to learn true lengths, then re-tokenise only the too-long inputs, truncated."""
    encoded = dict(tokenizer(first, second, truncation=False, verbose=False))
    too_long = [i for i, ids in enumerate(encoded["input_ids"]) if len(ids) > max_length]
    if too_long:
        cut = tokenizer(
            [first[i] for i in too_long],
            [second[i] for i in too_long] if second else None,
            truncation=True,
            max_length=max_length,
        )
        for key, values in encoded.items():
            for j, i in enumerate(too_long):
                values[i] = cut[key][j]
    flags = [False] * len(first)
    for i in too_long:
        flags[i] = True
    return encoded, flags


def _encode_batch(
    batch: Mapping[str, list], indices: list[int], spec: TaskSpec, tokenizer, max_length: int, split: str
) -> dict[str, list]:
    # load_task_data checked these rows; a split handed in otherwise (Dataset.from_list) reached the tokenizer (a
    # ValueError of its own for a None text), or was misread: "ab" as the choices "a" and "b", three choices grouped
    # by two into the wrong examples (an ArrowInvalid)
    check_rows(spec, batch, indices[0] if indices else 0, f"split {split!r}")
    first, second = segments(batch, spec)
    encoded, flags = _tokenize(tokenizer, first, second, max_length)
    group = 1
    if spec.is_multiple_choice:
        assert spec.num_choices is not None  # TaskSpec sets it for every multiple-choice task
        group = spec.num_choices
    if group == 1:
        return {**encoded, TRUNCATED_COLUMN: flags}
    grouped = {key: [values[i : i + group] for i in range(0, len(values), group)] for key, values in encoded.items()}
    grouped[TRUNCATED_COLUMN] = [any(flags[i : i + group]) for i in range(0, len(flags), group)]
    return grouped


def effective_max_length(spec: TaskSpec, tokenizer, max_length: int | None = None) -> int:
    """The requested (or task default) max length, capped at what the tokenizer's model accepts."""
    wanted = spec.max_length if max_length is None else max_length
    if not isinstance(wanted, int) or wanted < 8:
        raise TaskError(f"task {spec.name!r}: max_length={wanted!r} must be an integer >= 8.")
    model_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(model_max, int) and 0 < model_max < 8:  # every example would be cut to it, said only in the report
        raise TaskError(
            f"task {spec.name!r}: the tokenizer's model_max_length={model_max} caps max_length={wanted} below the 8 "
            "tokens an input needs at least; set tokenizer.model_max_length to what the model takes (its "
            "max_position_embeddings) and save the tokenizer"
        )
    if isinstance(model_max, int) and 0 < model_max < _HUGE_MODEL_MAX:
        return min(wanted, model_max)
    return wanted


def _check_arguments(spec: TaskSpec, data: Any, tokenizer: Any, num_proc: Any) -> None:
    """What encode_task is handed, refused in its terms rather than by datasets or the tokenizer."""
    import datasets

    if not isinstance(data, (datasets.Dataset, datasets.DatasetDict)):
        raise TaskError(
            f"task {spec.name!r}: the data to encode is a {type(data).__name__}; pass what load_task_data returns (a "
            "datasets.DatasetDict of splits), or one datasets.Dataset (datasets.Dataset.from_list(rows))"
        )
    if not callable(tokenizer):
        raise TaskError(
            f"task {spec.name!r}: tokenizer={short_repr(tokenizer)} is not a tokenizer; pass one, e.g. "
            "transformers.AutoTokenizer.from_pretrained(<the model's folder>)"
        )
    if num_proc is not None and (isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 0):
        raise TaskError(
            f"num_proc={short_repr(num_proc)} must be a number of worker processes (an integer >= 1), or None (or 0) "
            "to encode in this process"
        )


def _check_split(spec: TaskSpec, role: str, dataset: Any) -> None:
    """A split with rows and the columns the task reads (the label's is checked before)."""
    missing = [c for c in dict.fromkeys(map(fields.top_level, spec.text_fields)) if c not in dataset.column_names]
    if missing:
        raise TaskError(
            f"task {spec.name!r}, split {role!r}: no {missing} column (it has {dataset.column_names}); name the "
            "columns as the task's text_fields do, or load the data with load_task_data, which says which is missing"
        )
    if len(dataset) == 0:  # its encoding would have no columns at all
        raise TaskError(f"task {spec.name!r}, split {role!r} has no rows to encode; give it rows or leave it out")


def _check_gold(spec: TaskSpec, role: str, dataset: Any) -> None:
    """A split's gold column, its input columns and rows, and its labels (a generation task's answers are checked
    row by row as they are encoded)."""
    gold = fields.top_level(spec.label_field) if spec.is_generation else LABEL_COLUMN
    if gold not in dataset.column_names and spec.is_generation:  # was told of labels "converted to ids"
        raise TaskError(
            f"task {spec.name!r}, split {role!r}: no {gold!r} column, which holds each row's answer text (it has "
            f"{dataset.column_names}); name the answers' column in the task (instruction_task(answer_field=...)), "
            "or rename the column"
        )
    if gold not in dataset.column_names:
        raise TaskError(
            f"task {spec.name!r}, split {role!r}: no {gold!r} column; load the data with "
            "load_task_data so labels are checked and converted to ids."
        )
    _check_split(spec, role, dataset)
    if not spec.is_generation:
        check_label_column(spec, dataset, f"split {role!r}")


def encode_task(
    task: str | TaskSpec, data, tokenizer, max_length: int | None = None, num_proc: int | None = None
) -> EncodedTask:
    """Tokenise every split of `data` (a DatasetDict from `load_task_data`, or one Dataset) for `task`.

    Each split keeps only input_ids, attention_mask, token_type_ids (if the tokenizer makes them) and "label"; a
    generation task's splits hold input_ids, attention_mask and per-token "labels" (tasks/instruction.py).
    """
    import datasets

    spec = resolve_task(task)
    _check_arguments(spec, data, tokenizer, num_proc)
    length = effective_max_length(spec, tokenizer, max_length)
    splits = data if isinstance(data, datasets.DatasetDict) else datasets.DatasetDict({"data": data})
    encoded, truncated, totals, answers_cut = {}, {}, {}, {}
    for role, dataset in splits.items():
        if not spec.is_extractive_qa:  # QA's answers are checked as its windows are made
            _check_gold(spec, role, dataset)
        if spec.is_extractive_qa or spec.is_token_classification:  # windows of contexts, tags per token
            encoder = encode_qa_split if spec.is_extractive_qa else encode_tagging_split
            encoded[role], truncated[role], totals[role] = encoder(spec, dataset, tokenizer, length, role, num_proc)
            continue
        drop = dataset.column_names if spec.is_generation else [c for c in dataset.column_names if c != LABEL_COLUMN]
        mapped = dataset.map(
            encode_instruction_batch if spec.is_generation else _encode_batch,
            batched=True,
            with_indices=True,  # a bad row is named by its index
            remove_columns=drop,
            num_proc=num_proc,
            fn_kwargs={"spec": spec, "tokenizer": tokenizer, "max_length": length, "split": role},
            desc=f"{spec.name}/{role}: tokenising",
        )
        truncated[role] = int(sum(mapped[TRUNCATED_COLUMN]))
        totals[role] = len(mapped)
        if spec.is_generation:
            answers_cut[role] = int(sum(mapped[ANSWER_CUT_COLUMN]))
            mapped = mapped.remove_columns(ANSWER_CUT_COLUMN)
        encoded[role] = mapped.remove_columns(TRUNCATED_COLUMN)
    report = TruncationReport(spec.name, length, truncated, totals, answers_cut)
    if (cut := report.answers_cut_warning()) is not None:
        _log.warning("%s", cut)
    elif report.any_truncated:  # warned here, and recorded in each run's config.json by the training recipes
        _log.warning("%s (examples cut / examples); raise max_length to keep more of the text", report.describe())
    result = datasets.DatasetDict(encoded) if isinstance(data, datasets.DatasetDict) else encoded["data"]
    return EncodedTask(result, report)


_DIGEST_BATCH = 65_536  # rows hashed at a time (a fixed size: the digest must not depend on how a split is chunked)


def encoded_sha256(dataset: Any) -> str:
    """sha256 of an encoded split: every column's values, row by row. A run records it beside the sha256 of its data
    files, since the same files give other tokens once the tokenizer is edited (its vocabulary, end token or chat
    template): resuming such a run would finish it on other examples than it started with."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    digest = hashlib.sha256()
    for batch in dataset.with_format("arrow").iter(batch_size=_DIGEST_BATCH):
        for name in sorted(batch.column_names):
            array = batch.column(name).combine_chunks()
            digest.update(f"{name}:{array.type}".encode())
            while pa.types.is_list(array.type) or pa.types.is_large_list(array.type):  # lengths, then the values
                lengths = pc.fill_null(array.value_lengths(), -1)
                digest.update(lengths.to_numpy(zero_copy_only=False).astype(np.int64).tobytes())
                array = array.flatten()
            if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
                digest.update("\0".join(map(str, array.to_pylist())).encode())
            else:
                digest.update(np.ascontiguousarray(array.to_numpy(zero_copy_only=False)).tobytes())
    return digest.hexdigest()
