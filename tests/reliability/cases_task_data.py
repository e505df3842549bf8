"""Bad-input cases at one boundary, own task data (tasks/loading.py): rows and files a user's own task data may hold
wrong."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from unittest import mock

import datasets

from adapterfusion.tasks import TaskError, TaskSpec, load_task_data
from catalogue import Action, BadInput, own_file

B = BadInput
GROUP = "datasets"
GENERATION = {"kind": "generation", "text_fields": ["prompt"], "label_field": "answer", "label_names": []}
PAIR = {"kind": "pair", "text_fields": ["a", "b"]}


def _datasets_reworded(prepare: Callable[[Path], Action]) -> Callable[[Path], Action]:
    """`prepare`'s action while `datasets.load_dataset` fails in words of its own: a check that reads those words
    (a file without rows used to be recognised by "corresponds to no data") misses."""

    def load_dataset(*args: object, **kwargs: object) -> None:
        raise ValueError("some other wording in another datasets release")

    def prepared(folder: Path) -> Action:
        action = prepare(folder)

        def reworded() -> object:
            with mock.patch.object(datasets, "load_dataset", load_dataset):
                return action()

        return reworded

    return prepared


def _own_task(**changes: object) -> TaskSpec:
    fields: dict = {"name": "own", "kind": "single", "text_fields": ("text",), "label_names": ("neg", "pos")}
    return TaskSpec(**{**fields, **changes})


def _linked_dev(folder: Path) -> Action:
    """train.csv, and dev.csv a link to it: one file for both roles under two names."""
    (folder / "train.csv").write_text("text,label\na,pos\nb,neg\n", encoding="utf-8")
    (folder / "dev.csv").symlink_to(folder / "train.csv")
    files = {"train": str(folder / "train.csv"), "validation": str(folder / "dev.csv")}
    return lambda: load_task_data(_own_task(data_files=files))


CASES: tuple[BadInput, ...] = (
    B(
        "generation-prompt-blank",
        GROUP,
        "generation (prompt + answer) row whose prompt is '' (was trained on: with no BOS token, nothing predicted the "
        "answer's first token)",
        TaskError,
        ("train.jsonl, row 1", "field 'prompt' is blank", "first token is never trained on", "write the prompt"),
        own_file("train.jsonl", '{"prompt": "2+2=", "answer": "4"}\n{"prompt": "", "answer": "5"}\n', **GENERATION),
    ),
    B(
        "pair-side-blank",
        GROUP,
        "sentence-pair row whose second text is blank (was trained on as half an input: only rows with every text "
        "blank were refused)",
        TaskError,
        ("train.jsonl, row 1", "field(s) ['b'] hold no text", "every one of ['a', 'b']", "fill them in"),
        own_file(
            "train.jsonl", '{"a": "x", "b": "y", "label": "pos"}\n{"a": "x", "b": "  ", "label": "neg"}\n', **PAIR
        ),
    ),
    B(
        "csv-row-ragged",
        GROUP,
        "CSV row with one cell where the header has two (was 'row 1: no gold label', naming the label field)",
        TaskError,
        ("train.csv', line 3 (row 1)", "1 cell(s) where the header has 2 columns", "one cell per column"),
        own_file("train.csv", "text,label\na,pos\nb\nc,neg\n"),
    ),
    B(
        "label-nan-text",
        GROUP,
        "CSV label cell 'NaN', as pandas writes a gap (was 'not one of the labels')",
        TaskError,
        ("train.csv, row 1", "no gold label in field 'label'", "drop_unlabelled=True"),
        own_file("train.csv", "text,label\na,pos\nb,NaN\nc,neg\n"),
    ),
    B(
        "csv-header-only-reworded",
        GROUP,
        "CSV file with a header and no rows, while `datasets` words its failure otherwise (was found only by its "
        "words 'corresponds to no data')",
        TaskError,
        ("train.csv", "has no rows", "at least one example"),
        _datasets_reworded(own_file("train.csv", "text,label\n")),
    ),
    B(
        "text-field-is-label-field",
        GROUP,
        "task whose text_fields names its label_field (every job died inside the tokenizer)",
        TaskError,
        ("field 'label' is both the label field and a text field", "Name the text column"),
        lambda folder: lambda: _own_task(text_fields=("label",)),
    ),
    B(
        "data-files-one-file-twice",
        GROUP,
        "task whose data_files give train.csv for train and validation (dev scores were measured on the training "
        "rows, without a word)",
        TaskError,
        ("data_files names", "for more than one split role", "Leave validation out"),
        lambda folder: lambda: _own_task(data_files={"train": "train.csv", "validation": "train.csv"}),
    ),
    B(
        "data-files-linked-twice",
        GROUP,
        "task whose validation file is a link to its train file (dev scores on the training rows)",
        TaskError,
        ("the train and validation splits are the same file", "give a held-out validation file"),
        _linked_dev,
    ),
    B(
        "data-dir-empty",
        GROUP,
        "load_task_data('rte', data_dir='') (read the working folder's rte/, or said \"data folder 'rte' does not "
        'exist")',
        TaskError,
        ("data_dir='' is not a path", "leave data_dir out"),
        lambda folder: lambda: load_task_data("rte", ""),
    ),
)
