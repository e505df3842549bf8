"""Labels of splits handed to encode_task without load_task_data (Dataset.from_list) are held to what a load makes
of them: class ids and finite scores; and the task-description rules on label_values booleans, positive_label and
generation answers agree between loading and encoding."""

from __future__ import annotations

import datasets
import pytest

from adapterfusion.tasks import TaskError, TaskSpec, encode_task, instruction_task, load_task_data

POLARITY = TaskSpec(
    name="polarity", kind="single", text_fields=("sentence",), label_names=("neg", "pos"), label_values=(-1, 1)
)


def _rows(labels: list, *, pair: bool = False) -> datasets.Dataset:
    texts = {"sentence1": "a", "sentence2": "b"} if pair else {"sentence": "a"}
    return datasets.Dataset.from_list([{**texts, "label": label} for label in labels])


@pytest.mark.parametrize(
    ("task", "labels", "refusal"),
    [
        (
            "sst2",
            ["negative", "positive"],
            r"row 0: label 'negative' is how a file writes label 'negative', not its id; .* write 0",
        ),
        ("sst2", [1.0, 0.0], r"row 0: label 1.0 is a float, where a class id is an integer; write 1"),
        ("sst2", [0, None], r"row 1: label None marks no gold label"),
        (POLARITY, [1, -1], r"row 1: label -1 is how a file writes label 'neg', not its id; .* write 0"),
        ("stsb", [3.0, -100], r"row 1: label -100.0 marks no gold score"),
        ("stsb", [3.0, float("inf")], r"row 1: label inf is not a finite number"),
        ("stsb", ["3.5"], r"row 0: label '3.5' is not a finite number"),
        ("stsb", [-1.0, -1.0], r"every row's label is -1, GLUE's mark of hidden test scores"),
    ],
)
def test_a_hand_made_label_that_is_no_id_or_score_is_refused(tokenizer, task, labels, refusal) -> None:
    pair = task == "stsb"
    with pytest.raises(TaskError, match=refusal):
        encode_task(task, _rows(labels, pair=pair), tokenizer)


TAGS = TaskSpec(name="tags", kind="token_classification", text_fields=("words",), label_names=("O", "B-X", "I-X"))


@pytest.mark.parametrize(
    ("rows", "refusal"),
    [
        ([{"words": ["a", "b"], "label": [0, 1, 2]}], r"row 0: label \[0, 1, 2\] gives 3 tags for 2 words"),
        ([{"words": ["a", "b"], "label": [0, -1]}], r"holds tag -1, no tag id 0..2 .* give every word its tag"),
        ([{"words": ["a", "b"], "label": ["O", "B-X"]}], r"holds tag 'O', which is how a file writes label 'O'"),
        ([{"words": ["a", "b"]}], r"split 'data': no 'label' column"),
    ],
)
def test_hand_made_tags_are_held_to_one_id_per_word(tokenizer, rows, refusal) -> None:
    with pytest.raises(TaskError, match=refusal):
        encode_task(TAGS, datasets.Dataset.from_list(rows), tokenizer)


@pytest.mark.parametrize(("task", "labels"), [("sst2", [0, 1, 1]), ("stsb", [-1.0, 4.5, 0])])
def test_ids_and_scores_encode_as_they_are(tokenizer, task, labels) -> None:
    encoded, _ = encode_task(task, _rows(labels, pair=task == "stsb"), tokenizer)
    assert list(encoded["label"]) == labels


def test_a_loaded_split_passes_the_label_check(tokenizer, tmp_path, write_jsonl) -> None:
    rows = [{"sentence": "bad", "label": -1}, {"sentence": "good", "label": 1}]
    files = {
        "train": str(write_jsonl(tmp_path / "t.jsonl", rows)),
        "validation": str(write_jsonl(tmp_path / "v.jsonl", rows)),
    }
    spec = TaskSpec.from_dict({**POLARITY.to_dict(), "data_files": files})
    encoded, _ = encode_task(spec, load_task_data(spec).splits, tokenizer)
    assert list(encoded["train"]["label"]) == [0, 1]


@pytest.mark.parametrize("values", [(True, False), ["yes", False]])
def test_booleans_among_label_values_are_refused(values) -> None:
    with pytest.raises(TaskError, match=r"holds booleans.*quote them \('yes', 'no'\).*'False', 'True'"):
        TaskSpec(name="own", kind="single", text_fields=("t",), label_names=("a", "b"), label_values=values)


@pytest.mark.parametrize(
    ("fields", "kind"),
    [
        ({"kind": "single", "text_fields": ("t",), "regression": True}, "a regression task"),
        ({"kind": "multiple_choice", "text_fields": ("t",), "choice_fields": ("c",), "num_choices": 2}, "'multiple"),
        ({"kind": "extractive_qa", "text_fields": ("q", "c"), "label_field": "answers"}, "'extractive_qa'"),
        ({"kind": "token_classification", "text_fields": ("w",), "label_names": ("O", "B-X")}, "'token_classif"),
    ],
)
def test_positive_label_is_refused_where_no_metric_reads_it(fields, kind) -> None:
    with pytest.raises(TaskError, match=rf"positive_label=0 is unused by .*{kind}"):
        TaskSpec(name="own", positive_label=0, **fields)


def test_descriptions_that_record_the_default_positive_label_still_load() -> None:
    spec = instruction_task("answers")
    assert TaskSpec.from_dict(spec.to_dict()) == spec
    assert TaskSpec(name="own", kind="single", text_fields=("t",), label_names=("a", "b"), positive_label=0)


def test_loading_and_encoding_refuse_a_float_answer_alike(tokenizer, tmp_path, write_jsonl) -> None:
    rows = [{"prompt": "q", "answer": 2.5}, {"prompt": "r", "answer": 3.5}]
    files = {
        "train": str(write_jsonl(tmp_path / "t.jsonl", rows)),
        "validation": str(write_jsonl(tmp_path / "v.jsonl", rows)),
    }
    spec = instruction_task("answers", data_files=files)
    refusal = r"row 0: the answer in field 'answer' is 2.5 \(of type float\), not text"
    with pytest.raises(TaskError, match=refusal):
        load_task_data(spec)
    with pytest.raises(TaskError, match=refusal):
        encode_task(spec, datasets.Dataset.from_list(rows), tokenizer)
