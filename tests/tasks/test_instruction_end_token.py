"""The token that ends every answer of instruction data: appended by the encoding, so it must be a token of the
vocabulary, and the answers must not hold it already."""

from __future__ import annotations

import pytest
import transformers

import adapterfusion as af
from adapterfusion.tasks import TaskError, encode_task, instruction_task, load_task_data
from task_data import write_jsonl


def _data(tmp_path, answers: list[str]):
    """Train rows with `answers`, and validation rows whose last answer is the last of `answers`."""
    rows = [{"prompt": f"what colour is thing {i} ?", "answer": answer} for i, answer in enumerate(answers)]
    files = {
        "train": write_jsonl(tmp_path / "train.jsonl", rows),
        "validation": write_jsonl(tmp_path / "dev.jsonl", rows),
    }
    spec = instruction_task("colours", {role: str(path) for role, path in files.items()})
    return spec, load_task_data(spec).splits


def _tokenizer():
    """The shipped tokenizer, whose sep token [SEP] ends an answer (it has no eos)."""
    return transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())


@pytest.mark.parametrize(
    ("answer", "refusal"),
    [
        ("blue [SEP]", r"row 1: the answer in field 'answer' \('blue \[SEP\]'\) ends with the end token '\[SEP\]'"),
        ("blue [SEP] red", r"row 1: .* holds the end token '\[SEP\]' \(id 102\)"),
    ],
)
def test_an_answer_holding_the_end_token_is_refused_by_its_row(tmp_path, answer: str, refusal: str) -> None:
    """Trained on, the model learnt to stop inside the answer or to write the end twice, and greedy generation, which
    stops at the first end token, could never be the row's answer: exact_match stayed 0 without a word."""
    spec, data = _data(tmp_path, ["blue", answer])
    with pytest.raises(TaskError, match=rf"split 'train', {refusal}.*remove '\[SEP\]' from the answers"):
        encode_task(spec, data, _tokenizer(), 32)


def test_an_end_token_outside_the_vocabulary_is_refused(tmp_path) -> None:
    """eos_token set to text the vocabulary lacks gets the unknown token's id: every answer ended with [UNK]."""
    spec, data = _data(tmp_path, ["blue", "red"])
    tokenizer = _tokenizer()
    tokenizer.eos_token = "</s>"
    assert tokenizer.eos_token_id == tokenizer.unk_token_id
    with pytest.raises(TaskError, match=r"eos token '</s>' .* not in its vocabulary .* unknown token '\[UNK\]'"):
        encode_task(spec, data, tokenizer, 32)
    tokenizer.eos_token = "[SEP]"  # a token of the vocabulary
    encoded, _ = encode_task(spec, data, tokenizer, 32)
    assert encoded["train"][0]["labels"][-1] == tokenizer.sep_token_id
