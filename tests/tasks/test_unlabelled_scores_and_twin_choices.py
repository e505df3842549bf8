"""Two kinds of rows that used to load and score in silence. A regression label of -100 (the ignore index) marks a row
without a gold score, and so does -1 where every row of the split has it (GLUE's STS-B test split; a single -1 is a
real score, on a scale such as [-1, 1]): a test split of them is left out, a train or validation row with one is
refused (or dropped with drop_unlabelled), and the metrics refuse such gold scores. A multiple-choice row whose gold
choice has a twin (the same text at another index; CommonsenseQA and Social IQa hold some) is kept, with one
TaskDataWarning per load that counts them."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from adapterfusion.tasks import TaskDataWarning, TaskError, TaskSpec, compute_metrics, load_task_data
from task_data import write_jsonl


def _regression(folder: Path, drop_unlabelled: bool = False, **splits: list[Any]) -> TaskSpec:
    files = {
        role: str(write_jsonl(folder / f"{role}.jsonl", [{"text": f"t {i}", "label": s} for i, s in enumerate(v)]))
        for role, v in splits.items()
    }
    return TaskSpec(
        name="scores",
        kind="single",
        text_fields=("text",),
        regression=True,
        drop_unlabelled=drop_unlabelled,
        data_files=files,
    )


@pytest.mark.parametrize("mark", [-100, -100.0, "-100", "-100.0"])
def test_a_train_row_scored_minus_100_is_refused_as_unlabelled(tmp_path, mark) -> None:
    spec = _regression(tmp_path, train=[0.5, mark, 2.0], validation=[1.0, 2.0, 3.0])
    with pytest.raises(TaskError) as caught:
        load_task_data(spec)
    message = str(caught.value)
    assert "row 1: no gold label" in message and "is the ignore index" in message
    assert "set drop_unlabelled=True" in message


def test_minus_one_is_a_real_score_unless_the_whole_split_has_it(tmp_path) -> None:
    spec = _regression(tmp_path, train=[0.5, -1, 1.0, -0.5], validation=[1.0, -1.0])  # a polarity scale in [-1, 1]
    splits, _ = load_task_data(spec)
    assert splits["train"]["label"] == [0.5, -1.0, 1.0, -0.5] and splits["validation"]["label"] == [1.0, -1.0]
    hidden = _regression(tmp_path / "hidden", train=[0.5, 1.0], validation=[-1, -1, -1])
    with pytest.raises(TaskError, match="row 0: no gold label .*GLUE's mark of hidden test scores"):
        load_task_data(hidden)


def test_marked_rows_are_dropped_with_drop_unlabelled_and_a_test_split_of_them_is_left_out(tmp_path) -> None:
    spec = _regression(tmp_path, drop_unlabelled=True, train=[0.5, -100, 2.0, -1], validation=[1.0, 2.0], test=[-1, -1])
    splits, info = load_task_data(spec)
    assert list(splits) == ["train", "validation"]
    assert splits["train"]["label"] == [0.5, 2.0, -1.0]  # -1 among scores is a score: only -100 means "none"
    assert any("test split" in note and "no gold labels" in note for note in info.notes)


def test_the_metrics_refuse_marked_gold_scores(tmp_path) -> None:
    spec = _regression(tmp_path, train=[1.0, 2.0])
    scores = np.array([1.0, 2.0, 3.0])
    with pytest.raises(TaskError, match=r"gold score -100 of example 2 \(1 such\) marks an example without"):
        compute_metrics(spec, scores, np.array([1.0, 2.0, -100.0]))
    with pytest.raises(TaskError, match=r"\(3 such\) marks an example without .*GLUE's hidden test scores"):
        compute_metrics(spec, scores, np.array([-1.0, -1.0, -1.0]))
    assert compute_metrics(spec, scores, np.array([1.0, 2.0, -1.0]))["spearman"] == pytest.approx(-0.5)


def _choices(folder: Path, rows: list[dict[str, Any]]) -> TaskSpec:
    files = {role: str(write_jsonl(folder / f"{role}.jsonl", rows)) for role in ("train", "validation")}
    return TaskSpec(
        name="colours",
        kind="multiple_choice",
        text_fields=("q",),
        choice_fields=("a", "b", "c"),
        label_names=("a", "b", "c"),
        data_files=files,
    )


def _load_warnings(task: TaskSpec | str, data_dir: Path | None = None) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_task_data(task, data_dir)
    return [str(w.message) for w in caught if issubclass(w.category, TaskDataWarning)]


def test_a_gold_choice_with_a_twin_is_kept_with_one_warning_per_load(tmp_path) -> None:
    rows = [
        {"q": "sky", "a": "blue", "b": "green", "c": "green", "label": 0},  # a twin, but not of the gold choice
        {"q": "sea", "a": "red", "b": "Blue", "c": " blue ", "label": 1},
        {"q": "sun", "a": "yellow", "b": "yellow", "c": "red", "label": 0},
    ]
    found = _load_warnings(_choices(tmp_path, rows))
    assert len(found) == 1
    assert found[0].startswith("task 'colours': 4 multiple-choice row(s) have a gold choice whose text another")
    assert f"2 in {tmp_path / 'train.jsonl'} (first: row 1)" in found[0]
    info = load_task_data(_choices(tmp_path / "x", rows)).info  # noted with the data, not carried by each result
    assert info.warnings == () and sum("gold choice whose text" in note for note in info.notes) == 1
    assert _load_warnings(_choices(tmp_path / "none", rows[:1])) == []


@pytest.mark.parametrize(("task", "count"), [("commonsense_qa", 48), ("social_i_qa", 8)])
def test_the_real_datasets_twins_are_counted(data_dir, task, count) -> None:
    found = _load_warnings(task, data_dir)
    assert len(found) == 1 and f": {count} multiple-choice row(s)" in found[0]
