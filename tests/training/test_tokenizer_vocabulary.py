"""A token added to a decoder's tokenizer without resizing its embeddings (a new pad or end token) is refused before
the data loads, by the token it is; a tokenizer within the embeddings, or an encoder whose config cannot be read
offline, passes. The digest of encoded splits that resuming compares tells tokenizers apart, not chunkings."""

from __future__ import annotations

import datasets
import pytest
import transformers

import adapterfusion as af
from adapterfusion.tasks import encode_task, instruction_task
from adapterfusion.tasks.encoding import encoded_sha256
from adapterfusion.training import TrainingError
from adapterfusion.training.vocabulary import check_tokenizer_vocabulary
from tiny_decoders import tiny_decoder


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    folder = tmp_path_factory.mktemp("vocabulary") / "llama"
    tiny_decoder("llama", vocab_size=tokenizer.vocab_size).save_pretrained(folder)
    return folder


def _tokenizer(**added: str):
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    if added:
        tokenizer.add_special_tokens(added)
    return tokenizer


@pytest.mark.parametrize(
    ("added", "generation", "named"),
    [
        ({"pad_token": "<pad>"}, False, "the pad token, '<pad>', has the id 30522"),
        ({"eos_token": "<eos>"}, True, "the end token of every answer, '<eos>', has the id 30522"),
    ],
)
def test_a_token_past_the_embeddings_is_refused_by_what_it_is(llama_dir, added, generation, named) -> None:
    with pytest.raises(TrainingError, match=named) as refused:
        check_tokenizer_vocabulary(_tokenizer(**added), llama_dir, generation)
    assert "vocabulary of 30522 token ids" in str(refused.value) and "resize_token_embeddings" in str(refused.value)


def test_tokens_within_the_embeddings_and_unreadable_configs_pass(llama_dir, tmp_path) -> None:
    check_tokenizer_vocabulary(_tokenizer(), llama_dir, generation=True)
    check_tokenizer_vocabulary(_tokenizer(eos_token="<eos>"), llama_dir, generation=False)  # no answers to end
    check_tokenizer_vocabulary(_tokenizer(pad_token="<pad>"), tmp_path / "no-model-here")  # nothing to judge by


def test_the_encoded_digest_follows_the_tokens_not_the_chunks() -> None:
    spec = instruction_task("answers")
    rows = datasets.Dataset.from_dict({"prompt": [f"what is {i} ?" for i in range(5)], "answer": ["a"] * 5})
    shipped = _tokenizer()
    first, _ = encode_task(spec, rows, shipped)
    again, _ = encode_task(
        spec, datasets.concatenate_datasets([rows.select(range(2)), rows.select(range(2, 5))]), shipped
    )
    assert encoded_sha256(first) == encoded_sha256(again)
    shipped.eos_token = "[CLS]"  # another end token: other labels from the same rows
    other, _ = encode_task(spec, rows, shipped)
    assert encoded_sha256(other) != encoded_sha256(first)
    assert encoded_sha256(first.select([1, 0, 2, 3, 4])) != encoded_sha256(first)
