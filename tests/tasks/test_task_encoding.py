"""Tokenising tasks (single, pair, multiple choice), truncation counting and dynamic padding."""

from __future__ import annotations

import re

import datasets
import pytest
import torch

from adapterfusion.tasks import TaskCollator, TaskError, encode_task, get_task, load_task_data, segments
from adapterfusion.tasks.encoding import effective_max_length

MC_TASKS = ["winogrande", "hellaswag", "social_i_qa", "cosmos_qa", "commonsense_qa"]


@pytest.mark.parametrize("name", MC_TASKS)
def test_multiple_choice_encodes_to_choices_by_seq(name, data_dir, tokenizer):
    spec = get_task(name)
    splits, _ = load_task_data(name, data_dir, max_examples=4)
    encoded, report = encode_task(name, splits, tokenizer)
    example = encoded["train"][0]
    assert len(example["input_ids"]) == spec.num_choices
    assert all(len(ids) <= spec.max_length for ids in example["input_ids"])
    batch = TaskCollator(tokenizer)([encoded["train"][i] for i in range(4)])
    assert batch["input_ids"].shape[:2] == (4, spec.num_choices)
    assert batch["input_ids"].shape == batch["attention_mask"].shape == batch["token_type_ids"].shape
    assert batch["labels"].tolist() == encoded["train"]["label"][:4]
    assert set(report.totals) == {"train", "validation"}


def test_winogrande_option_fills_the_blank_as_in_the_baseline():
    batch = {
        "sentence": ["Ian ate because _ despised it.", "It was _'s car."],
        "option1": ["Ian", "Ann"],
        "option2": ["Dennis", "Bob"],
        "answer": ["2", "1"],
    }
    first, second = segments(batch, get_task("winogrande"))
    assert first == ["Ian ate because", "Ian ate because", "It was", "It was"]
    assert second == ["Ian despised it.", "Dennis despised it.", "Ann 's car.", "Bob 's car."]


def test_mc_contexts_join_context_and_question():
    batch = {
        "context": ["Kai ran."],
        "question": ["Why?"],
        "answerA": ["a"],
        "answerB": ["b"],
        "answerC": ["c"],
        "label": ["1"],
    }
    first, second = segments(batch, get_task("social_i_qa"))
    assert first == ["Kai ran. Why?"] * 3 and second == ["a", "b", "c"]


def test_pair_task_has_two_segments(demo_data_dir, tokenizer):
    splits, _ = load_task_data("rte", demo_data_dir, max_examples=3)
    encoded, _ = encode_task("rte", splits, tokenizer)
    row = encoded["validation"][0]
    assert set(encoded["validation"].column_names) == {"input_ids", "token_type_ids", "attention_mask", "label"}
    assert 0 in row["token_type_ids"] and 1 in row["token_type_ids"]


def _toy(texts, labels):
    return datasets.Dataset.from_dict({"sentence": texts, "label": labels})


def test_truncation_is_counted_against_untruncated_lengths(tokenizer):
    texts = ["short one", "word " * 40, "a b c", "token " * 100]
    encoded, report = encode_task("sst2", _toy(texts, [0, 1, 0, 1]), tokenizer, max_length=16)
    full = [len(ids) for ids in tokenizer(texts)["input_ids"]]
    assert report.truncated == {"data": sum(n > 16 for n in full)} == {"data": 2}
    assert [len(ids) for ids in encoded["input_ids"]] == [min(n, 16) for n in full]
    assert encoded[1]["input_ids"][-1] == tokenizer.sep_token_id
    assert "2/4" in report.describe()


def test_multiple_choice_example_counts_once_when_any_choice_is_cut(tokenizer):
    ds = datasets.Dataset.from_dict(
        {"ctx": ["start"], "endings": [["x", "long " * 50, "y", "long " * 60]], "label": [0]}
    )
    _, report = encode_task("hellaswag", ds, tokenizer, max_length=16)
    assert report.truncated == {"data": 1}


def test_max_length_is_capped_by_the_model_and_validated(tokenizer):
    assert effective_max_length(get_task("imdb"), tokenizer, 4096) == tokenizer.model_max_length
    with pytest.raises(TaskError, match="max_length=4 must be an integer >= 8"):
        effective_max_length(get_task("rte"), tokenizer, 4)


def test_encode_needs_checked_labels(tokenizer):
    ds = datasets.Dataset.from_dict({"sentence": ["a"], "stars": [1]})
    with pytest.raises(TaskError, match="no 'label' column; load the data with load_task_data"):
        encode_task("sst2", ds, tokenizer)


def test_encoding_is_cached_by_datasets(demo_data_dir, tokenizer):
    splits, _ = load_task_data("cb", demo_data_dir, max_examples=5)
    first, _ = encode_task("cb", splits, tokenizer)
    second, _ = encode_task("cb", splits, tokenizer)
    assert first["train"].cache_files and first["train"].cache_files == second["train"].cache_files


# -- collator -------------------------------------------------------------------------------------------


def test_collator_pads_dynamically_with_pad_id_and_zero_mask(tokenizer):
    features = [
        {"input_ids": [101, 5, 102], "token_type_ids": [0, 0, 0], "label": 1},
        {"input_ids": [101, 102], "token_type_ids": [0, 0], "label": 0},
    ]
    batch = TaskCollator(tokenizer)(features)
    pad = tokenizer.pad_token_id
    assert batch["input_ids"].tolist() == [[101, 5, 102], [101, 102, pad]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].dtype == torch.long and batch["labels"].tolist() == [1, 0]


def test_collator_multiple_choice_left_padding_and_multiple_of(tokenizer):
    class LeftTokenizer:
        pad_token_id, pad_token_type_id, padding_side = 9, 0, "left"

    features = [{"input_ids": [[1, 2], [1, 2, 3]], "labels": 1}, {"input_ids": [[4], [5]], "labels": 0}]
    batch = TaskCollator(LeftTokenizer(), pad_to_multiple_of=4)(features)
    assert batch["input_ids"].shape == (2, 2, 4)
    assert batch["input_ids"][0, 0].tolist() == [9, 9, 1, 2]
    assert batch["attention_mask"][1, 1].tolist() == [0, 0, 0, 1]
    assert "token_type_ids" not in batch


def test_collator_rejects_mixed_choice_counts(tokenizer):
    with pytest.raises(TaskError, match="different numbers of choices"):
        TaskCollator(tokenizer)([{"input_ids": [[1], [2]]}, {"input_ids": [[1], [2], [3]]}])


@pytest.mark.parametrize(
    ("task", "row", "message"),
    [
        # each was a ValueError from the tokenizer, an ArrowInvalid, or a string read as one choice per letter
        ("sst2", {"sentence": None, "label": 0}, "row 1: field 'sentence' is missing or empty"),
        ("hellaswag", {"ctx": "a", "endings": ["w", "x", "y", "z", "v"], "label": 0}, "expected 4 choices"),
        ("hellaswag", {"ctx": "a", "endings": "wxyz", "label": 0}, "found no list ('wxyz')"),
    ],
)
def test_hand_made_rows_are_checked_as_load_task_data_checks_them(tokenizer, task, row, message):
    good = {"sentence": "fine", "label": 1} if task == "sst2" else {**row, "endings": ["w", "x", "y", "z"]}
    rows = [good, row] if task == "sst2" else [row]
    with pytest.raises(TaskError, match=re.escape(message)):
        encode_task(task, datasets.Dataset.from_list(rows), tokenizer)
