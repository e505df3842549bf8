"""Loading, checking, carving and subsampling task data, from the offline copy and from generated files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adapterfusion.tasks import (
    TaskDataWarning,
    TaskError,
    TaskSpec,
    get_task,
    list_tasks,
    load_task_data,
    task_from_dict,
)

# qqp is in the paper but has no offline copy (see shared/data/README.md), nor have Houlsby's cola, stsb and qnli;
# sick-r reads SICK's rows from its own folder, which the demo pack has (tests/tasks/test_glue_tasks.py loads it).
NOT_LOCAL = {"qqp", "cola", "stsb", "qnli", "sick-r"}
CARVED = {"mnli", "boolq", "scitail", "cosmos_qa", "hellaswag", "snli", "imdb"}
NOT_LOCAL |= {"squad", "conll2003"}  # issue #25's span tasks: test_squad*.py and test_conll*.py write their files


@pytest.mark.parametrize("name", sorted(set(list_tasks())))
def test_every_task_loads_from_the_offline_copy(name, data_dir):
    if name in NOT_LOCAL:
        pytest.skip(f"{name} has no offline copy in {data_dir}")
    spec = get_task(name)
    splits, info = load_task_data(name, data_dir, max_examples=8)
    assert {"train", "validation"} <= set(splits)
    for role, dataset in splits.items():
        assert 1 <= len(dataset) <= 8
        labels = dataset["label"]
        assert all(0 <= y < spec.num_labels for y in labels), role
        assert dataset.features["label"].names == list(spec.label_names)
    assert (info.carve_out is not None) == (name in CARVED)
    assert info.to_dict()["task"] == name


def test_carve_out_is_recorded_deterministic_and_disjoint(data_dir):
    first = load_task_data("mnli", data_dir, seed=3)
    again = load_task_data("mnli", data_dir, seed=3)
    other = load_task_data("mnli", data_dir, seed=4)
    carve = first.info.carve_out
    assert (carve.source_split, carve.source_size, carve.seed, carve.fraction) == ("validation_matched", 9815, 3, 0.2)
    assert (carve.train_size, carve.validation_size) == (7852, 1963)
    assert "carved from 'validation_matched'" in first.info.describe()
    key = lambda ds: [p + "|" + h for p, h in zip(ds["premise"], ds["hypothesis"], strict=True)]  # noqa: E731
    train, val = key(first.splits["train"]), key(first.splits["validation"])
    assert train == key(again.splits["train"]) and val == key(again.splits["validation"])
    assert train != key(other.splits["train"])
    assert not set(train) & set(val)
    assert len(train) + len(val) == 9815


def test_carve_fraction_is_configurable_and_validated(data_dir):
    splits, info = load_task_data("scitail", data_dir, carve_fraction=0.5)
    assert info.carve_out.source_split == "test" and "test" not in splits
    assert abs(len(splits["train"]) - len(splits["validation"])) <= 1
    with pytest.raises(TaskError, match="strictly between 0 and 1"):
        load_task_data("scitail", data_dir, carve_fraction=1.0)


def test_imdb_gets_validation_from_train_and_keeps_test(data_dir):
    splits, info = load_task_data("imdb", data_dir, max_examples={"train": 5, "validation": 5, "test": 5})
    assert info.carve_out.carved_roles == ("validation",) and info.carve_out.source_split == "train"
    assert {s.role: s.source for s in info.splits} == {"train": "carved", "validation": "carved", "test": "local"}
    assert [len(splits[r]) for r in ("train", "validation", "test")] == [5, 5, 5]


def test_max_examples_is_seeded(demo_data_dir):
    a = load_task_data("rte", demo_data_dir, seed=1, max_examples=10).splits["train"]["sentence1"]
    b = load_task_data("rte", demo_data_dir, seed=1, max_examples=10).splits["train"]["sentence1"]
    c = load_task_data("rte", demo_data_dir, seed=2, max_examples=10).splits["train"]["sentence1"]
    assert a == b and a != c
    with pytest.raises(TaskError, match="max_examples=0"):
        load_task_data("rte", demo_data_dir, max_examples=0)


def test_env_var_selects_the_local_folder(demo_data_dir, monkeypatch):
    monkeypatch.setenv("ADAPTERFUSION_DATA_DIR", str(demo_data_dir))
    info = load_task_data("cb", max_examples=4).info
    assert info.source == "local" and info.location == str(demo_data_dir)


@pytest.mark.parametrize(
    ("name", "field", "mapping"),
    [
        ("winogrande", "answer", {"1": 0, "2": 1}),
        ("social_i_qa", "label", {"1": 0, "2": 1, "3": 2}),
        ("commonsense_qa", "answerKey", {k: i for i, k in enumerate("ABCDE")}),
        ("cb", "label", {0: 0, 1: 1, 2: 2}),
    ],
)
def test_raw_labels_become_zero_based_ids(name, field, mapping, data_dir, raw_rows):
    rows = raw_rows(data_dir / name / "validation.jsonl.gz")
    splits, _ = load_task_data(name, data_dir)
    assert splits["validation"]["label"] == [mapping[r[field]] for r in rows]


# -- the Hub path, with `datasets.load_dataset` replaced by a local fake ------------------------------


def test_hub_source_uses_task_split_names_and_skips_unlabelled_splits(monkeypatch):
    import datasets

    rows = [{"premise": f"p{i}", "hypothesis": f"h{i}", "label": i % 3} for i in range(12)]
    fake = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(rows),
            "validation_matched": datasets.Dataset.from_list(rows[:6]),
            "test_matched": datasets.Dataset.from_list([{**r, "label": -1} for r in rows[:3]]),
        }
    )
    calls = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: calls.append((a, k)) or fake)
    splits, info = load_task_data("mnli")
    assert calls[0][0] == ("nyu-mll/glue", "mnli")
    assert set(splits) == {"train", "validation"} and info.source == "hub" and info.carve_out is None
    assert info.splits[1].split_name == "validation_matched"
    assert info.local_files() == ()  # nothing on disk for a run to record the digest of


def test_hub_failure_says_how_to_work_offline(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(TaskError, match="ADAPTERFUSION_DATA_DIR"):
        load_task_data("rte")
    with pytest.raises(TaskError, match="has no Hub copy"):
        load_task_data("ukp_argument")


def test_hub_failure_with_the_data_folder_set_but_lacking_the_task_says_so(monkeypatch, tmp_path):
    """It told the user to set ADAPTERFUSION_DATA_DIR, which was set (to a folder without rte/)."""
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    monkeypatch.setenv("ADAPTERFUSION_DATA_DIR", str(tmp_path))
    with pytest.raises(TaskError, match=r"ADAPTERFUSION_DATA_DIR='.*' is set but holds no rte/ folder"):
        load_task_data("rte")


# -- user tasks ---------------------------------------------------------------------------------------


def test_user_task_from_csv_and_jsonl(tmp_path, write_jsonl):
    (tmp_path / "train.csv").write_text("review,stars\n" + "".join(f"text {i},{1 + i % 2}\n" for i in range(20)))
    write_jsonl(tmp_path / "dev.jsonl", [{"review": f"dev {i}", "stars": 1 + i % 2} for i in range(6)])
    spec = task_from_dict(
        {
            "name": "stars",
            "kind": "single",
            "text_fields": ["review"],
            "label_field": "stars",
            "label_names": ["one", "two"],
            "label_values": [1, 2],
            "data_files": {"train": "train.csv", "validation": "dev.jsonl"},
        },
        base_dir=tmp_path,
    )
    splits, info = load_task_data(spec)
    assert info.source == "files" and len(splits["train"]) == 20 and len(splits["validation"]) == 6
    assert splits["train"]["label"][:4] == [0, 1, 0, 1] and splits["validation"]["label"][:2] == [0, 1]


def test_local_files_are_the_files_read_each_once(tmp_path, demo_data_dir, write_jsonl):
    """What a run records the digests of: each split's file as an absolute path, a file carved into two splits once."""
    info = load_task_data("rte", demo_data_dir, max_examples=4).info
    assert info.local_files() == tuple(str(demo_data_dir / "rte" / f"{s}.jsonl.gz") for s in ("train", "validation"))
    write_jsonl(tmp_path / "train.jsonl", [{"text": f"t {i}", "label": i % 2} for i in range(20)])
    own = {"name": "own", "kind": "single", "text_fields": ["text"], "label_names": ["a", "b"]}
    spec = task_from_dict({**own, "data_files": {"train": "train.jsonl"}}, base_dir=tmp_path)
    with pytest.warns(TaskDataWarning, match="validation carved from 'train'"):
        info = load_task_data(spec).info
    assert info.carve_out is not None and info.local_files() == (str(tmp_path / "train.jsonl"),)


def test_user_multiple_choice_task_with_list_choices(tmp_path, write_jsonl):
    rows = [{"q": f"question {i}", "opts": ["a", "b", "c"], "gold": "abc"[i % 3]} for i in range(9)]
    write_jsonl(tmp_path / "mc" / "train.jsonl.gz", rows, gz=True)
    spec = TaskSpec(
        name="mc",
        kind="multiple_choice",
        text_fields=("q",),
        choice_fields=("opts",),
        label_field="gold",
        label_names=("a", "b", "c"),
        label_values=("a", "b", "c"),
    )
    splits, info = load_task_data(spec, tmp_path)
    assert info.carve_out.source_split == "train" and splits["train"]["label"]


# -- bad inputs: each names task, file/row and the fix --------------------------------------------------

PAIR = TaskSpec(name="toy", kind="pair", text_fields=("a", "b"), label_names=("no", "yes"))
GOOD = [{"a": f"x{i}", "b": f"y{i}", "label": i % 2} for i in range(6)]


@pytest.fixture
def folder(tmp_path, write_jsonl):
    """folder(**{split: rows}) -> a data folder holding toy/<split>.jsonl."""

    def make(**files):
        for split, rows in files.items():
            write_jsonl(tmp_path / "toy" / f"{split}.jsonl", rows)
        return tmp_path

    return make


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"a": "x", "c": "y", "label": 0}], r"missing field\(s\) \['b'\].*the file has"),
        ([*GOOD, {"a": "x", "b": "y", "label": 7}], r"row 6: label 7 in field 'label' is not one of \['0', '1'\]"),
        ([*GOOD, {"a": None, "b": "y", "label": 0}], r"row 6: field 'a' is missing or empty"),
        ([*GOOD, {"a": "x", "b": "y", "label": -1}], r"row 6: no gold label .*drop_unlabelled=True"),
    ],
)
def test_bad_rows_raise_task_error_with_row_and_fix(folder, rows, message):
    data = folder(train=rows, validation=GOOD)
    with pytest.raises(TaskError, match=message) as info:
        load_task_data(PAIR, data)
    assert "task 'toy'" in str(info.value) and "train.jsonl" in str(info.value)


def test_drop_unlabelled_drops_and_records(folder):
    data = folder(train=[*GOOD, {"a": "x", "b": "y", "label": -1}], validation=GOOD)
    spec = TaskSpec.from_dict({**PAIR.to_dict(), "drop_unlabelled": True})
    splits, info = load_task_data(spec, data)
    assert len(splits["train"]) == 6 and info.splits[0].dropped_unlabelled == 1


@pytest.mark.parametrize("role", ["train", "validation"])
def test_drop_unlabelled_refuses_to_leave_a_split_empty(folder, role):
    """Every row without a label (a label_field naming the wrong column, say): the split came back empty and
    training failed in datasets with "Column 'truncated' doesn't exist"."""
    unlabelled = [{**r, "label": -1} for r in GOOD]
    data = folder(**{"train": GOOD, "validation": GOOD, role: unlabelled})
    spec = TaskSpec.from_dict({**PAIR.to_dict(), "drop_unlabelled": True})
    with pytest.raises(TaskError, match=rf"none of the 6 rows of the {role} split has a gold label in field 'label'"):
        load_task_data(spec, data)


@pytest.mark.parametrize("test_rows", [[{**r, "label": -1} for r in GOOD], [{"a": "x", "b": "y"}]])
def test_unlabelled_test_split_is_left_out_with_a_note(folder, test_rows):
    data = folder(train=GOOD, validation=GOOD, test=test_rows)
    splits, info = load_task_data(PAIR, data)
    assert "test" not in splits and "no gold labels" in info.notes[0]


def test_empty_file(folder):
    data = folder(validation=GOOD)
    (data / "toy" / "train.jsonl").write_text("")
    with pytest.raises(TaskError, match=r"train.jsonl' is empty"):
        load_task_data(PAIR, data)


def test_missing_folder_and_missing_split_files(tmp_path):
    with pytest.raises(TaskError, match="data folder .*toy' does not exist"):
        load_task_data(PAIR, tmp_path)
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "notes.txt").write_text("x")
    with pytest.raises(TaskError, match="no split files in"):
        load_task_data(PAIR, tmp_path)
    spec = TaskSpec.from_dict({**PAIR.to_dict(), "data_files": {"train": str(tmp_path / "nope.csv")}})
    with pytest.raises(TaskError, match="nope.csv' does not exist"):
        load_task_data(spec)


def test_two_files_for_one_split_is_ambiguous(folder):
    data = folder(train=GOOD, validation=GOOD)
    (data / "toy" / "train.csv").write_text("a,b,label\nx,y,0\n")
    with pytest.raises(TaskError, match="several files for split 'train'"):
        load_task_data(PAIR, data)


def test_multiple_choice_wrong_number_of_choices(tmp_path, write_jsonl):
    spec = get_task("social_i_qa")
    rows = [{"context": "c", "question": "q", "answerA": "a", "answerB": "b", "answerC": "c", "label": "1"}] * 3
    write_jsonl(tmp_path / "social_i_qa" / "train.jsonl", rows)
    write_jsonl(tmp_path / "social_i_qa" / "validation.jsonl", [{**rows[0], "answerC": None}])
    with pytest.raises(TaskError, match=r"validation.jsonl, row 0: choices .* must all be text"):
        load_task_data(spec, tmp_path)
    hs = [{"ctx": "c", "endings": ["a", "b", "c"], "label": "0"}]
    write_jsonl(tmp_path / "hellaswag" / "validation.jsonl", hs)
    with pytest.raises(TaskError, match=r"row 0: expected 4 choices in \['endings'\], found 3"):
        load_task_data("hellaswag", tmp_path)


def test_winogrande_row_without_blank(tmp_path, write_jsonl):
    rows = [{"sentence": "no blank here", "option1": "a", "option2": "b", "answer": "1"}]
    write_jsonl(tmp_path / "winogrande" / "train.jsonl", rows * 4)
    with pytest.raises(TaskError, match="row 0: context has no blank '_'"):
        load_task_data("winogrande", tmp_path)


def test_unknown_source():
    with pytest.raises(TaskError, match="source='web' is unknown"):
        load_task_data("rte", source="web")
    with pytest.raises(TaskError, match="no data folder was given"):
        load_task_data("rte", source="local")


def test_carve_indices_cover_and_are_disjoint():
    from adapterfusion.tasks import carve_indices

    train, val = carve_indices(101, 0.2, seed=0)
    assert len(val) == 20 and len(train) == 81
    assert np.array_equal(np.sort(np.r_[train, val]), np.arange(101))
    again = carve_indices(101, 0.2, seed=0)
    assert np.array_equal(train, again[0]) and np.array_equal(val, again[1])
    with pytest.raises(TaskError, match="at least 2 are needed"):
        carve_indices(1, 0.2, 0)


def test_integral_float_labels_are_the_integers_they_were_written_as(tmp_path):
    # One 1.0 makes Arrow read the whole label column as floats (0 -> 0.0); each row still means its class.
    task_dir = tmp_path / "toy"
    task_dir.mkdir()
    rows = [{"a": f"p {i}", "b": f"h {i}", "label": float(i % 2) if i == 3 else i % 2} for i in range(6)]
    (task_dir / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (task_dir / "validation.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows[:2]))
    spec = TaskSpec(name="toy", kind="pair", text_fields=("a", "b"), label_names=("no", "yes"))
    splits, _ = load_task_data(spec, tmp_path, seed=1)
    assert splits["train"]["label"] == [i % 2 for i in range(6)]
