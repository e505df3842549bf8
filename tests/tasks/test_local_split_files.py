"""A data folder that lacks a split the task has: a folder where the split's file should be is refused, and a
carve-out standing in for a missing train file is said aloud (it was recorded in the run's config only)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from adapterfusion.tasks.errors import TaskDataWarning, TaskError
from adapterfusion.tasks.loading import load_task_data


def _validation_only(demo_data_dir: Path, tmp_path: Path) -> Path:
    (tmp_path / "rte").mkdir()
    shutil.copy(demo_data_dir / "rte" / "validation.jsonl.gz", tmp_path / "rte")
    return tmp_path


def test_a_missing_train_file_is_carved_with_a_warning_naming_it(demo_data_dir, tmp_path):
    folder = _validation_only(demo_data_dir, tmp_path)
    with pytest.warns(TaskDataWarning, match=r"no train file in .* although the task has that split; train and valid"):
        data = load_task_data("rte", folder, 1)
    assert data.info.carve_out is not None and any("no train file" in note for note in data.info.notes)


def test_a_folder_named_as_a_split_file_is_refused(demo_data_dir, tmp_path):
    folder = _validation_only(demo_data_dir, tmp_path)
    (folder / "rte" / "train.jsonl.gz").mkdir()
    with pytest.raises(TaskError, match=r"train\.jsonl\.gz is a folder, not a data file"):
        load_task_data("rte", folder, 1)
