"""Bad-input cases at one boundary, tasks users define: TaskSpec fields, register_task, task description files,
label maps, instruction templates and verbalised labels for decoders."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import datasets
import transformers

import adapterfusion as af
from adapterfusion.tasks import (
    TaskError,
    TaskSpec,
    encode_task,
    instruction_task,
    load_task_data,
    load_task_file,
    registry,
)
from catalogue import Action, BadInput
from task_data import train_and_dev, write_jsonl

B = BadInput
GROUP = "task definitions"

_OWN = {"name": "own", "kind": "single", "text_fields": ("text",), "label_names": ("neg", "pos")}


def _spec(**changes: Any) -> Callable[[Path], Action]:
    """The action TaskSpec(<a single-text task with `changes`>)."""
    return lambda folder: lambda: TaskSpec(**{**_OWN, **changes})


def _polarity(**changes: Any) -> Callable[[Path], Action]:
    """load_task_data of a task with `changes` over files whose labels are -1 and 1; the action returns the label
    ids of the train split and how many rows were dropped."""

    def prepare(folder: Path) -> Action:
        rows = [{"text": "bad", "label": -1}, {"text": "good", "label": 1}, {"text": "awful", "label": -1}]
        files = train_and_dev(write_jsonl(folder / "train.jsonl", rows))
        spec = TaskSpec(**{**_OWN, "drop_unlabelled": True, "data_files": files, **changes})

        def action() -> str:
            data, info = load_task_data(spec)
            return f"train labels {list(data['train']['label'])}, {info.splits[0].dropped_unlabelled} rows dropped"

        return action

    return prepare


def _split_outside_task_folder(folder: Path) -> Action:
    """A data folder whose task folder holds validation.jsonl, with a train file beside (not in) the task folder."""
    rows = [{"text": "good", "label": "pos"}, {"text": "bad", "label": "neg"}]
    write_jsonl(folder / "data" / "own" / "validation.jsonl", rows)
    write_jsonl(folder / "data" / "secret.jsonl", rows)
    return lambda: load_task_data(TaskSpec(**{**_OWN, "train_split": "../secret"}), data_dir=folder / "data")


def _register_overwrite_text(folder: Path) -> Action:
    """register_task(<a task named rte>, overwrite='no'), in a copy of the registry."""

    def action() -> Any:
        with mock.patch.dict(registry._REGISTRY):
            return registry.register_task(TaskSpec(**{**_OWN, "name": "rte"}), overwrite="no")  # type: ignore[arg-type]

    return action


def _encode_rows(task: str | TaskSpec, rows: list[dict[str, Any]]) -> Callable[[Path], Action]:
    """encode_task(task, Dataset.from_list(rows), <the shipped MiniLM's tokenizer>): rows that no load checked."""

    def prepare(folder: Path) -> Action:
        tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
        return lambda: encode_task(task, datasets.Dataset.from_list(rows), tokenizer)

    return prepare


def _blank_twice(folder: Path) -> Action:
    rows = [
        {"q": "He _ the _ dog", "c": ["fed", "saw"], "label": 0},
        {"q": "She _ it", "c": ["ate", "saw"], "label": 1},
    ]
    files = train_and_dev(write_jsonl(folder / "mc.jsonl", rows))
    fields = {"text_fields": ("q",), "choice_fields": ("c",), "num_choices": 2, "blank": "_"}
    return lambda: load_task_data(TaskSpec(name="own", kind="multiple_choice", data_files=files, **fields))


def _home_data_file(folder: Path) -> Action:
    path = folder / "own.json"
    path.write_text(json.dumps({**_OWN, "data_files": {"train": "~/reviews/train.csv"}}), encoding="utf-8")

    def action() -> str:
        train = dict(load_task_file(path, register=False).data_files)["train"]
        where = "the home folder" if train == str(Path.home() / "reviews" / "train.csv") else "elsewhere"
        return f"data_files train '~/reviews/train.csv' read from {where}"

    return action


def _yaml_yes_no(folder: Path) -> Action:
    path = folder / "own.yaml"
    path.write_text("name: own\nkind: single\ntext_fields: [text]\nlabel_names: [yes, no]\n", encoding="utf-8")
    return lambda: load_task_file(path, register=False)


def _yaml_yes_no_values(folder: Path) -> Action:
    path = folder / "own.yaml"
    text = "name: own\nkind: single\ntext_fields: [text]\nlabel_names: [agree, disagree]\nlabel_values: [yes, no]\n"
    path.write_text(text, encoding="utf-8")
    return lambda: load_task_file(path, register=False)


CASES: tuple[BadInput, ...] = (
    B(
        "task-label-names-minus-one",
        GROUP,
        "a polarity task, label_names ('-1', '1') and drop_unlabelled=True, over files labelled -1 and 1 (every -1 "
        "row was read as GLUE's 'no gold label' and dropped: a whole class gone, or refused without drop_unlabelled)",
        None,
        ("train labels [0, 1, 0]", "0 rows dropped"),
        _polarity(label_names=("-1", "1")),
    ),
    B(
        "task-label-values-minus-one",
        GROUP,
        "TaskSpec(label_names=('neg', 'pos'), label_values=(-1, 1)) over files labelled -1 and 1 (was refused: "
        "label_values 'must not use' -1, so no description could read such files)",
        None,
        ("train labels [0, 1, 0]", "0 rows dropped"),
        _polarity(label_values=(-1, 1)),
    ),
    B(
        "task-split-named-for-two-roles",
        GROUP,
        "TaskSpec(hub_path=..., train_split='train', validation_split='train') (accepted: from the Hub both roles "
        "read the same split, so dev scores were measured on the training rows)",
        TaskError,
        ("train and validation splits are both named 'train'", "validation_split=None"),
        _spec(hub_path="someone/reviews", validation_split="train"),
    ),
    B(
        "task-split-name-leads-outside",
        GROUP,
        "TaskSpec(train_split='../secret') loaded from a data folder (read <data_dir>/secret.jsonl, outside the "
        "task's folder)",
        TaskError,
        ("split name '../secret' is invalid", "letters, digits"),
        _split_outside_task_folder,
    ),
    B(
        "task-multiple-choice-blank-space",
        GROUP,
        "TaskSpec(kind='multiple_choice', blank=' ') (accepted: every context holds a space, so each was cut at its "
        "first one and the choice put there)",
        TaskError,
        ("blank=' '", "visible placeholder"),
        lambda folder: (
            lambda: TaskSpec(
                name="own", kind="multiple_choice", text_fields=("q",), choice_fields=("c",), num_choices=2, blank=" "
            )
        ),
    ),
    B(
        "task-field-path-blank-part",
        GROUP,
        "TaskSpec(text_fields=('review.',)) (accepted; every row then 'missing or empty': a dotted path's key '')",
        TaskError,
        ("['review.']", "blank part", "dotted path"),
        _spec(text_fields=("review.",)),
    ),
    B(
        "instruction-task-kind-option",
        GROUP,
        "instruction_task('answers', kind='single') (TypeError: TaskSpec() got multiple values for 'kind')",
        TaskError,
        ("sets ['kind'] itself", "prompt_field="),
        lambda folder: lambda: instruction_task("answers", kind="single"),
    ),
    B(
        "instruction-task-data-files-list",
        GROUP,
        "instruction_task('answers', data_files=['train.jsonl']) (ValueError from dict(): 'dictionary update "
        "sequence element #0 has length 11')",
        TaskError,
        ("data_files=['train.jsonl']", "must map split roles to files"),
        lambda folder: lambda: instruction_task("answers", data_files=["train.jsonl"]),  # type: ignore[arg-type]
    ),
    B(
        "register-task-overwrite-text",
        GROUP,
        "register_task(<a task named 'rte'>, overwrite='no') (the text is true: built-in rte was replaced)",
        TaskError,
        ("overwrite='no'", "True or False"),
        _register_overwrite_text,
    ),
    B(
        "task-from-dict-base-dir-number",
        GROUP,
        "task_from_dict(<description with data_files>, base_dir=5) (TypeError from pathlib)",
        TaskError,
        ("base_dir=5", "folder path"),
        lambda folder: (
            lambda: registry.task_from_dict(
                {**_OWN, "data_files": {"train": "train.csv"}},
                base_dir=5,  # type: ignore[arg-type]
            )
        ),
    ),
    B(
        "task-file-yaml-yes-no-labels",
        GROUP,
        "load_task_file(own.yaml) with label_names: [yes, no] (told label_names=[True, False] must be strings, "
        "values the file never wrote)",
        TaskError,
        ("label_names=[True, False]", "yes/no", "quote them"),
        _yaml_yes_no,
    ),
    B(
        "encode-hand-made-text-none",
        GROUP,
        "encode_task('sst2', Dataset.from_list(rows)) where row 1's sentence is None (ValueError from the "
        "tokenizer: 'text input must be of type str ...')",
        TaskError,
        ("split 'data', row 1", "field 'sentence' is missing or empty"),
        _encode_rows("sst2", [{"sentence": "fine", "label": 1}, {"sentence": None, "label": 0}]),
    ),
    B(
        "encode-hand-made-five-choices-of-four",
        GROUP,
        "encode_task('hellaswag', Dataset.from_list(rows)) with 5 endings where the task has 4 (ArrowInvalid: "
        "'Column 1 named input_ids expected length 1 but got length 2', the choices grouped by 4 across rows)",
        TaskError,
        ("row 0", "expected 4 choices in ['endings'], found 5"),
        _encode_rows("hellaswag", [{"ctx": "a", "endings": ["v", "w", "x", "y", "z"], "label": 0}]),
    ),
    B(
        "encode-hand-made-choices-a-string",
        GROUP,
        "encode_task('hellaswag', Dataset.from_list(rows)) whose endings are the string 'wxyz' (encoded in silence "
        "as the four choices 'w', 'x', 'y', 'z')",
        TaskError,
        ("row 0", "found no list ('wxyz')"),
        _encode_rows("hellaswag", [{"ctx": "a", "endings": "wxyz", "label": 0}]),
    ),
    B(
        "task-description-file-as-name",
        GROUP,
        "load_task_data('own.json'), the path of a task description where a task's name belongs (told only "
        "'unknown task' and the built-in list)",
        TaskError,
        ("unknown task 'own.json'", "load_task_file(path)"),
        lambda folder: lambda: load_task_data("own.json"),
    ),
    B(
        "task-name-other-case",
        GROUP,
        "load_task_data('RTE') (told 'unknown task' and the list, with no hint: the spelling hint compared case too)",
        TaskError,
        ("unknown task 'RTE'", "case-sensitive", "did you mean 'rte'"),
        lambda folder: lambda: load_task_data("RTE"),
    ),
    B(
        "task-blank-twice-in-context",
        GROUP,
        "a multiple-choice row 'He _ the _ dog' of a task with blank='_' (each choice filled the first blank; the "
        "second was read as written, in silence)",
        TaskError,
        ("row 0", "holds the blank '_' 2 times", "fix the row"),
        _blank_twice,
    ),
    B(
        "task-label-values-names-reordered",
        GROUP,
        "TaskSpec(label_names=('neg', 'pos'), label_values=('pos', 'neg')) (accepted: every file's 'pos' read as "
        "label 'neg' and 'neg' as 'pos', all labels swapped in silence)",
        TaskError,
        ("label_values=['pos', 'neg']", "in another order", "label_names order"),
        _spec(label_values=("pos", "neg")),
    ),
    B(
        "task-text-field-named-label",
        GROUP,
        "TaskSpec(text_fields=('label',), label_field='gold') (accepted: loading wrote the label ids over the texts "
        "of column 'label', and encode_task failed in the tokenizer on the ids)",
        TaskError,
        ("field 'label' is an input", "label_field='gold'", "rename the 'label' column"),
        _spec(text_fields=("label",), label_field="gold"),
    ),
    B(
        "task-tagging-pos-tags-entity-metrics",
        GROUP,
        "TaskSpec(kind='token_classification', label_names=('NOUN', 'VERB')) with the default entity metrics "
        "(accepted; a whole run trained, then its first scoring failed: tag 'NOUN' is neither 'O' nor a prefix)",
        TaskError,
        ("tag 'NOUN'", "score entities", "metrics=['accuracy']"),
        lambda folder: (
            lambda: TaskSpec(
                name="pos", kind="token_classification", text_fields=("tokens",), label_names=("NOUN", "VERB")
            )
        ),
    ),
    B(
        "task-file-data-files-home",
        GROUP,
        "load_task_file(own.json) whose data_files give '~/reviews/train.csv' (read as a folder named '~' beside "
        "the description file)",
        None,
        ("the home folder",),
        _home_data_file,
    ),
    B(
        "encode-hand-made-label-out-of-range",
        GROUP,
        "encode_task('sst2', Dataset.from_list(rows)) whose row 1 has label 7 of a 2-label task (encoded in silence; "
        "the model's loss failed on it in training, an IndexError, or a device-side assert on a GPU)",
        TaskError,
        ("split 'data', row 1", "label 7 is not a label id 0..1", "load_task_data"),
        _encode_rows("sst2", [{"sentence": "fine", "label": 1}, {"sentence": "bad", "label": 7}]),
    ),
    B(
        "encode-hand-made-label-minus-one",
        GROUP,
        "encode_task('sst2', Dataset.from_list(rows)) whose row 0 has label -1, GLUE's 'no gold label' (encoded in "
        "silence as a class id; the model's loss failed on it in training)",
        TaskError,
        ("row 0", "label -1 marks no gold label", "drop the row", "drop_unlabelled=True"),
        _encode_rows("sst2", [{"sentence": "fine", "label": -1}, {"sentence": "bad", "label": 0}]),
    ),
    B(
        "encode-hand-made-score-nan",
        GROUP,
        "encode_task('stsb', Dataset.from_list(rows)) whose row 1's score is NaN (encoded in silence; refused only "
        "by the collator, mid-training, as 'example 1 of the batch')",
        TaskError,
        ("split 'data', row 1", "label nan marks no gold score"),
        _encode_rows(
            "stsb",
            [
                {"sentence1": "a", "sentence2": "b", "label": 3.5},
                {"sentence1": "c", "sentence2": "d", "label": float("nan")},
            ],
        ),
    ),
    B(
        "encode-hand-made-tag-out-of-range",
        GROUP,
        "encode_task(<tagging task of 3 tags>, Dataset.from_list(rows)) whose tags are [0, 9] (encoded in silence; "
        "the model's loss failed on tag 9 in training)",
        TaskError,
        ("row 0", "label [0, 9] holds tag 9", "not a label id 0..2"),
        _encode_rows(
            TaskSpec(name="tags", kind="token_classification", text_fields=("words",), label_names=("O", "B-X", "I-X")),
            [{"words": ["a", "b"], "label": [0, 9]}],
        ),
    ),
    B(
        "task-file-yaml-yes-no-label-values",
        GROUP,
        "load_task_file(own.yaml) with label_values: [yes, no] (accepted as [True, False]; every row of a file "
        "labelled 'yes'/'no' was then refused as an unknown label, the values told as ['True', 'False'])",
        TaskError,
        ("label_values=[True, False]", "holds booleans", "quote them ('yes', 'no')"),
        _yaml_yes_no_values,
    ),
    B(
        "task-positive-label-unused-kind",
        GROUP,
        "instruction_task('answers', positive_label=0) (accepted and never read: only binary F1 of a single or "
        "pair classification task uses it)",
        TaskError,
        ("positive_label=0", "kind 'generation'", "only 'single' and 'pair' classification tasks"),
        lambda folder: lambda: instruction_task("answers", positive_label=0),
    ),
    B(
        "encode-hand-made-answer-float",
        GROUP,
        "encode_task(<generation task>, Dataset.from_list(rows)) whose answer is 2.5 (encoded as the text '2.5', "
        "where load_task_data refuses the same row as not text)",
        TaskError,
        ("split 'data', row 0", "the answer in field 'answer' is 2.5 (of type float), not text"),
        _encode_rows(instruction_task("answers"), [{"prompt": "q", "answer": 2.5}]),
    ),
)
