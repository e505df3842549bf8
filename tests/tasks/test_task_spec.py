"""TaskSpec validation and serialisation."""

from __future__ import annotations

import json

import pytest

from adapterfusion.tasks import TaskError, TaskSpec, get_task, instruction_task, list_tasks

PAIR = dict(name="toy", kind="pair", text_fields=("a", "b"), label_names=("no", "yes"))


def test_roundtrip_every_builtin_through_json():
    for name in list_tasks():
        spec = get_task(name)
        again = TaskSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
        assert again == spec
        assert spec.to_dict()["format_version"] == 1


def test_lists_and_dict_are_coerced_to_hashable_tuples():
    spec = TaskSpec(**{**PAIR, "text_fields": ["a", "b"], "data_files": {"train": "t.csv"}})
    assert spec.text_fields == ("a", "b") and spec.data_files == (("train", "t.csv"),)
    hash(spec)


def test_label_lookup_matches_strings_and_ints():
    spec = get_task("winogrande")
    assert spec.label_lookup() == {"1": 0, "2": 1}
    assert get_task("rte").label_lookup() == {"0": 0, "1": 1}


def test_multiple_choice_num_choices_derived_from_names_or_names_from_count():
    assert get_task("commonsense_qa").num_choices == 5
    spec = TaskSpec(name="mc", kind="multiple_choice", text_fields=("q",), choice_fields=("opts",), num_choices=3)
    assert spec.label_names == ("0", "1", "2") and spec.num_labels == 3


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "bad name!"}, "task name 'bad name!' is invalid"),
        ({"kind": "pairs"}, "Did you mean 'pair'"),
        ({"text_fields": ("a",)}, "needs exactly 2 text field(s)"),
        ({"label_names": ("only",)}, "at least 2 distinct names"),
        ({"label_values": ("x",)}, "one raw value per label name"),
        ({"label_values": (" ", "1")}, "must be distinct and not blank"),
        # refused since: a split named for two roles (the Hub read dev scores off the train rows), a split name that
        # leads outside the task's folder, a field path with a blank part, a blank of spaces only
        ({"validation_split": "train"}, "the train and validation splits are both named 'train'"),
        ({"train_split": "../secret"}, "split name '../secret' is invalid"),
        ({"extra_dev_splits": ("a/b",)}, "split name 'a/b' is invalid"),
        ({"text_fields": ("a", "x.")}, "have a blank part"),
        ({"label_values": ("yes", "no")}, "lists the label names ['no', 'yes'] in another order"),
        ({"text_fields": ("label", "b"), "label_field": "gold"}, "field 'label' is an input"),
        ({"metrics": ("acuracy",)}, "Did you mean 'accuracy'"),
        ({"metrics": ("f1",), "label_names": ("a", "b", "c")}, "binary F1"),
        ({"positive_label": 5}, "positive_label=5"),
        ({"max_length": 2}, "max_length=2"),
        ({"choice_fields": ("x",)}, "multiple_choice' only"),
        ({"train_split": None, "validation_split": None}, "all None"),
        ({"hub_splits": ("dev",)}, "unknown split role(s) ['dev']"),
        # a field, label or metric named twice was accepted: a pair of a text with itself, two labels that read alike
        ({"text_fields": ("a", "a")}, "text_fields=['a', 'a'] names ['a'] more than once"),
        ({"label_names": ("yes", "yes ")}, "differ only in spaces"),
        ({"label_names": ("", "yes")}, "a blank name"),
        ({"metrics": ("accuracy", "accuracy")}, "lists ['accuracy'] more than once"),
    ],
)
def test_invalid_specs_name_the_problem(changes, message):
    with pytest.raises(TaskError) as info:
        TaskSpec(**{**PAIR, **changes})
    assert message in str(info.value)


def test_multiple_choice_choice_fields_must_match_count():
    with pytest.raises(TaskError, match="one list-valued field or one field per choice"):
        TaskSpec(name="mc", kind="multiple_choice", text_fields=("q",), choice_fields=("a", "b"), num_choices=3)


def test_from_dict_rejects_unknown_and_missing_keys():
    with pytest.raises(TaskError, match="Did you mean 'text_fields'"):
        TaskSpec.from_dict({**PAIR, "text_field": ["a", "b"]})
    with pytest.raises(TaskError, match=r"required key\(s\) \['kind'\]"):
        TaskSpec.from_dict({"name": "x", "text_fields": ["a"]})
    with pytest.raises(TaskError, match="format_version=9"):
        TaskSpec.from_dict({**PAIR, "format_version": 9})


def test_choice_fields_named_twice_are_refused():
    """One field per choice, one of them named twice: a three-way choice of which two options are always equal."""
    with pytest.raises(TaskError, match=r"choice_fields=\['a', 'b', 'a'\] names \['a'\] more than once"):
        TaskSpec(name="mc", kind="multiple_choice", text_fields=("q",), choice_fields=("a", "b", "a"), num_choices=3)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"kind": "single"}, r"sets \['kind'\] itself"),
        ({"text_fields": ("q",)}, r"sets \['text_fields'\] itself"),
        ({"data_files": ["train.csv"]}, "must map split roles to files"),  # a ValueError from dict()
        ({"blank": " "}, "choice_fields, blank and num_choices are for kind='multiple_choice' only"),
    ],
)
def test_instruction_task_refuses_the_fields_it_sets_and_unmapped_files(options, message):
    with pytest.raises(TaskError, match=message):
        instruction_task("answers", **options)


def test_a_blank_of_spaces_and_yaml_booleans_are_named():
    with pytest.raises(TaskError, match="must be a visible placeholder"):
        TaskSpec(name="mc", kind="multiple_choice", text_fields=("q",), choice_fields=("c",), num_choices=2, blank=" ")
    with pytest.raises(TaskError, match="YAML file reads unquoted yes/no"):
        TaskSpec(**{**PAIR, "label_names": [True, False]})


def test_tags_without_entity_prefixes_are_scored_by_accuracy_only():
    tags = {"name": "pos", "kind": "token_classification", "text_fields": ("tokens",), "label_names": ("NOUN", "VERB")}
    with pytest.raises(TaskError, match=r"tag 'NOUN' is neither .* give metrics=\['accuracy'\]"):
        TaskSpec(**tags)
    assert TaskSpec(**tags, metrics=("accuracy",)).metrics == ("accuracy",)
