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


def _hub_of_train_only(folder: Path) -> Action:
    """load_task_data of a generation task from a Hub dataset (replaced here) that has a train split alone, as
    instruction datasets often do."""
    from adapterfusion.tasks import instruction_task

    rows = {"prompt": ["2+2=", "3+3="], "answer": ["4", "6"]}
    loaded = datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)})

    def action() -> object:
        with mock.patch.object(datasets, "load_dataset", lambda *args, **kwargs: loaded):
            return load_task_data(instruction_task("alpaca", hub_path="someone/alpaca"))

    return action


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
        "generation-json-list-item-not-object",
        GROUP,
        "JSON file of one list whose second item is a string, not a row object (was 'could not be parsed as JSON "
        "(DatasetGenerationError: An error occurred while generating the dataset)', naming no item)",
        TaskError,
        ("train.json'", "item 1 of the list (row 1)", "a JSON string, not an object", "one JSON list of objects"),
        own_file("train.json", '[{"prompt": "2+2=", "answer": "4"}, "3+3= 6"]', **GENERATION),
    ),
    B(
        "generation-json-data-key-rows",
        GROUP,
        "JSON file {'data': [<one object per example>]} (was read as SQuAD: 'article 0 has no paragraphs list', and "
        "no word of how to give rows)",
        TaskError,
        ("train.json'", "article 0 has no 'paragraphs' list", "is read as SQuAD", "write that list alone as the file"),
        own_file("train.json", '{"data": [{"prompt": "2+2=", "answer": "4"}]}', **GENERATION),
    ),
    B(
        "generation-csv-semicolons",
        GROUP,
        "CSV file separated by semicolons, as a spreadsheet in many locales saves it (was: the file has one field "
        "prompt;answer, and 'Did you mean' it twice: rename the task's fields to the header line)",
        TaskError,
        ("train.csv", "missing field(s) ['prompt', 'answer']", "separated by semicolons", "comma-separated CSV"),
        own_file("train.csv", "prompt;answer\n2+2=;4\n", **GENERATION),
    ),
    B(
        "generation-hub-train-split-only",
        GROUP,
        "generation task from a Hub dataset with a train split alone (was 'fix the task's validation_split', with "
        "no word that None carves one from train)",
        TaskError,
        ("has no split 'validation'", "it has ['train']", "validation_split=None", "carved from train"),
        _hub_of_train_only,
    ),
    B(
        "generation-txt-read-as-conll",
        GROUP,
        "tab-separated prompt and answer in a .txt file (was: the file has id, tokens and ner_tags, the columns of "
        "CoNLL, as which it was read, not the file's)",
        TaskError,
        ("train.txt", "missing field(s) ['prompt', 'answer']", "read as CoNLL text", "CSV, JSON or JSON lines files"),
        own_file("train.txt", "2+2=\t4\n", **GENERATION),
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
    B(
        "choice-blank",
        GROUP,
        "a multiple-choice row whose second choice is '' (was trained on as the context with an empty second text, "
        "a choice no text told apart)",
        TaskError,
        ("row 0", "choice(s) [1] of ['x', '']", "hold no text", "fill in the missing choice"),
        own_file(
            "mc.jsonl",
            '{"q": "q?", "options": ["x", ""], "label": 0}\n{"q": "r?", "options": ["x", "y"], "label": 1}\n',
            kind="multiple_choice",
            text_fields=["q"],
            choice_fields=["options"],
            num_choices=2,
        ),
    ),
)
