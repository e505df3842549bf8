"""Hand-made instruction data and batches are refused by the example and key that are wrong: the collator pads
nothing out of line with its tokens, and encode_task names a missing answer rather than training on the text 'None'."""

from __future__ import annotations

import datasets
import pytest
import torch
import transformers

import adapterfusion as af
from adapterfusion.tasks import TaskCollator, TaskError, encode_task, instruction_task


@pytest.fixture(scope="module")
def tokenizer():
    return transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())


@pytest.mark.parametrize(
    ("features", "options", "refusal"),
    [
        ([{"input_ids": [5, 6], "labels": [-100, 6, 2]}], {}, r"example 0 .*labels has 3 values but input_ids 2"),
        ([{"input_ids": [[5, 6], [7]], "attention_mask": [[1, 1], [1, 1]], "labels": 0}], {}, r"\[2, 2\] values"),
        ([{"input_ids": [5], "labels": [2]}, {"input_ids": [5], "labels": 1}], {}, r"example 1 .* one label, exam"),
        ([{"input_ids": [5], "label": 1}, {"input_ids": [5]}], {}, r"example 1 of the batch lacks \['label'\]"),
        ([{"input_ids": [5], "label": 0.5}, {"input_ids": [5], "label": None}], {}, r"example 1 .* label=None"),
        ([{"input_ids": [5], "label": 1}, {"input_ids": [5], "label": 1.5}], {}, r"example 1 .* label=1.5"),
        ([{"input_ids": ["a", "b"]}], {}, r"input_ids of row 0 of the batch \(\['a', 'b'\]\) are not integers"),
        ([{"input_ids": [5]}], {"padding_side": "middle"}, r"padding_side='middle' is not a padding side"),
        ([{"input_ids": [5]}], {"pad_to_multiple_of": 0}, r"pad_to_multiple_of=0 must be a positive integer"),
    ],
)
def test_a_misaligned_batch_is_refused_by_its_example_and_key(tokenizer, features, options, refusal) -> None:
    with pytest.raises(TaskError, match=refusal):
        TaskCollator(tokenizer, **options)(features)


def test_scores_and_tensor_labels_still_collate(tokenizer) -> None:
    scores = TaskCollator(tokenizer)([{"input_ids": [5], "label": 0.5}, {"input_ids": [5, 6], "label": 2}])
    assert scores["labels"].dtype == torch.float32 and scores["labels"].tolist() == [0.5, 2.0]
    ids = TaskCollator(tokenizer)([{"input_ids": torch.tensor([5, 6]), "label": torch.tensor(1)}])
    assert ids["labels"].tolist() == [1] and ids["input_ids"].tolist() == [[5, 6]]


@pytest.mark.parametrize(
    ("columns", "refusal"),
    [
        ({"prompt": ["q", "r"], "answer": ["a", None]}, r"row 1: the answer in field 'answer' is None"),
        ({"prompt": [1.5, 2.5], "answer": ["a", "b"]}, r"row 0: the prompt in field 'prompt' is 1.5 \(of type float"),
        ({"question": ["q"], "answer": ["a"]}, r"no \['prompt'\] column \(it has \['question', 'answer'\]\)"),
        ({"prompt": [], "answer": []}, r"split 'data' has no rows to encode"),
    ],
)
def test_raw_instruction_rows_are_refused_before_the_tokenizer(tokenizer, columns, refusal) -> None:
    with pytest.raises(TaskError, match=refusal):
        encode_task(instruction_task("answers"), datasets.Dataset.from_dict(columns), tokenizer)


def test_a_numeric_answer_is_written_out(tokenizer) -> None:
    encoded, _ = encode_task(
        instruction_task("answers"), datasets.Dataset.from_dict({"prompt": ["q"], "answer": [7]}), tokenizer
    )
    assert tokenizer.decode([t for t in encoded[0]["labels"] if t != -100], skip_special_tokens=True) == "7"
