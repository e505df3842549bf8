"""The registry of built-in tasks and user tasks from files."""

from __future__ import annotations

import json
import re

import pytest

from adapterfusion.tasks import TaskError, TaskSpec, get_task, list_tasks, load_task_file, register_task, registry

PAPER_TASKS = {
    "mnli",
    "qqp",
    "sst2",
    "winogrande",
    "imdb",
    "hellaswag",
    "social_i_qa",
    "cosmos_qa",
    "scitail",
    "ukp_argument",
    "commonsense_qa",
    "boolq",
    "mrpc",
    "sick",
    "rte",
    "cb",
}


@pytest.fixture
def clean_registry(monkeypatch):
    """Let a test register tasks without leaking them into other tests."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def test_paper_tasks_and_snli_are_registered():
    assert PAPER_TASKS | {"snli"} <= set(list_tasks())
    assert sum(get_task(t).is_multiple_choice for t in PAPER_TASKS) == 5


def test_known_facts_about_builtin_tasks():
    assert get_task("mnli").validation_split == "validation_matched"
    assert get_task("imdb").max_length == 512 and get_task("imdb").validation_split is None
    assert get_task("mrpc").metrics == ("accuracy", "f1") and get_task("qqp").metrics == ("accuracy", "f1")
    assert (get_task("winogrande").hub_path, get_task("winogrande").hub_config) == (
        "allenai/winogrande",
        "winogrande_l",
    )
    assert get_task("ukp_argument").hub_path is None


def test_typo_lists_known_tasks_and_suggests():
    with pytest.raises(TaskError) as info:
        get_task("mrcp")
    assert "Did you mean 'mrpc'" in str(info.value) and "rte" in str(info.value)


@pytest.mark.parametrize(
    ("given", "hint"),
    [
        ("own.yaml", "load_task_file(path)"),
        ({"name": "own"}, "task_from_dict(...)"),
        ("mrcp", "Did you mean"),
        ("RTE", "case-sensitive"),
    ],
)
def test_a_description_where_a_name_belongs_is_told_how_to_read_it(given, hint):
    with pytest.raises(TaskError, match=re.escape(hint)):
        get_task(given)


def test_register_refuses_duplicates_unless_overwrite(clean_registry):
    spec = TaskSpec(name="rte", kind="single", text_fields=("s",), label_names=("a", "b"))
    with pytest.raises(TaskError, match="already registered; pass overwrite=True"):
        register_task(spec)
    with pytest.raises(TaskError, match="overwrite='no' must be True or False"):  # 'no' is true: it replaced rte
        register_task(spec, overwrite="no")
    assert get_task("rte").kind == "pair"
    register_task(spec, overwrite=True)
    assert get_task("rte").kind == "single"


def test_load_task_file_json_resolves_paths_relative_to_the_file(tmp_path, clean_registry):
    desc = {
        "name": "mytask",
        "kind": "single",
        "text_fields": ["text"],
        "label_names": ["bad", "good"],
        "data_files": {"train": "data/train.csv"},
    }
    path = tmp_path / "mytask.json"
    path.write_text(json.dumps(desc))
    spec = load_task_file(path)
    assert get_task("mytask") is spec
    assert dict(spec.data_files)["train"] == str(tmp_path / "data" / "train.csv")


def test_load_task_file_yaml(tmp_path, clean_registry):
    pytest.importorskip("yaml")
    path = tmp_path / "t.yaml"
    path.write_text("name: yt\nkind: pair\ntext_fields: [a, b]\nlabel_names: [x, y]\n")
    assert load_task_file(path, register=False).text_fields == ("a", "b")
    assert "yt" not in list_tasks()


def test_load_task_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TaskError, match="is not valid JSON"):
        load_task_file(bad)
    with pytest.raises(TaskError, match="does not exist"):
        load_task_file(tmp_path / "missing.json")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"name": "w", "kind": "single", "text_fields": ["t"], "labels": ["a", "b"]}))
    with pytest.raises(TaskError, match="wrong.json.*unknown key"):
        load_task_file(wrong)
