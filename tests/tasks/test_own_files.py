"""Users' own CSV/JSONL files: what a spreadsheet or pandas writes must load as written, never silently changed."""

from __future__ import annotations

import json
import warnings

import pytest

from adapterfusion.tasks import TaskDataWarning, TaskError, TaskSpec, instruction_task, load_task_data
from task_data import train_and_dev


def _spec(tmp_path, name: str, text: str, **fields) -> TaskSpec:
    """A task whose train and validation file is `name`, holding `text`."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    options = {"name": "own", "kind": "single", "text_fields": ("text",), "label_names": ("neg", "pos"), **fields}
    return TaskSpec(**options, data_files=train_and_dev(path))


def test_csv_cells_are_read_as_the_text_they_hold(tmp_path) -> None:
    """pandas reads "007" as 7, "NA" and "null" as missing and "True" as a bool; a CSV cell is text."""
    csv = "text,label\n007,pos\nNA,neg\nnull,pos\nTrue,neg\n"
    data, _ = load_task_data(_spec(tmp_path, "d.csv", csv))
    assert data["validation"]["text"] == ["007", "NA", "null", "True"]
    (tmp_path / "qa.csv").write_text("prompt,answer\ncode?,007\nprice?,1.50\n", encoding="utf-8")
    spec = instruction_task("qa", train_and_dev(tmp_path / "qa.csv"))
    data, _ = load_task_data(spec)
    assert data["train"]["answer"] == ["007", "1.50"]


def test_csv_labels_written_as_floats_by_pandas_map_to_their_ids(tmp_path) -> None:
    csv = "text,label\na,1.0\nb,0.0\nc,1\n"
    data, _ = load_task_data(_spec(tmp_path, "d.csv", csv))
    assert data["train"]["label"] == [1, 0, 1]


def test_numeric_label_names_that_are_not_their_own_ids_are_refused() -> None:
    """label_names ("1", ..., "5") read a raw "1" as id 1 (the name "2") and both "4" and "5" as id 4."""
    with pytest.raises(TaskError, match=r"ambiguous.*label_values=\['1', '2', '3', '4', '5'\]"):
        TaskSpec(name="stars", kind="single", text_fields=("text",), label_names=("1", "2", "3", "4", "5"))
    spec = TaskSpec(
        name="stars", kind="single", text_fields=("text",), label_names=("1", "2", "3"), label_values=("1", "2", "3")
    )
    assert spec.label_lookup() == {"1": 0, "2": 1, "3": 2}
    TaskSpec(name="mc", kind="single", text_fields=("text",), label_names=("0", "1"))  # names that are their ids


def test_a_json_nan_label_is_a_missing_label(tmp_path) -> None:
    rows = '{"text": "a", "label": NaN}\n{"text": "b", "label": 1}\n{"text": "c", "label": 0}\n'
    with pytest.raises(TaskError, match="row 0: no gold label"):
        load_task_data(_spec(tmp_path, "d.jsonl", rows))
    data, info = load_task_data(_spec(tmp_path, "d.jsonl", rows, drop_unlabelled=True))
    assert data["train"]["label"] == [1, 0] and info.splits[0].dropped_unlabelled == 1


def test_rows_without_any_text_are_refused(tmp_path) -> None:
    rows = "".join(json.dumps(r) + "\n" for r in ({"text": "a", "label": 1}, {"text": "  ", "label": 0}))
    with pytest.raises(TaskError, match=r"row 1: field\(s\) \['text'\] hold no text"):
        load_task_data(_spec(tmp_path, "d.jsonl", rows))


def test_a_class_missing_from_train_is_noted_and_warned(tmp_path) -> None:
    """One class alone trains a constant predictor without a word; the run's data record now says so."""
    spec = _spec(tmp_path, "d.csv", "text,label\na,pos\nb,pos\n")
    with pytest.warns(TaskDataWarning, match=r"no example of label\(s\) \['neg'\].*constant answer"):
        _, info = load_task_data(spec)
    assert any("['neg']" in note for note in info.notes) and "note: the train split" in info.describe()
    both = _spec(tmp_path, "e.csv", "text,label\na,pos\nb,neg\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", TaskDataWarning)
        assert load_task_data(both)[1].notes == ()
