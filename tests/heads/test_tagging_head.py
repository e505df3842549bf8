"""TokenClassificationHead: per-token logits, a loss that skips -100 (against a hand computation), the check of its
labels, the alignment of word tags to first sub-tokens, and its use with adapters, fusion and save/load."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

import adapterfusion as af
from adapterfusion.heads.token_classification import IGNORE_INDEX, tagging_loss
from tiny_models import randomise, tiny_encoder, tiny_inputs

TAGS = ("O", "B-PER", "I-PER")


def _model() -> af.AdaptedModel:
    model = af.wrap(tiny_encoder())
    model.add_head("ner", af.TokenClassificationHead(num_labels=3, labels=TAGS, dropout=0.0))
    model.activate(head="ner")
    return model


def _labels() -> torch.Tensor:
    labels = torch.full((2, 7), IGNORE_INDEX)
    labels[0, 1:4] = torch.tensor([1, 2, 0])
    labels[1, 2] = 1
    return labels


def test_config():
    config = af.TokenClassificationHead(num_labels=3, labels=TAGS)
    assert (config.layers, config.output_size, config.per_token) == (1, 3, True)
    assert af.heads.head_config_from_dict(config.to_dict()) == config
    with pytest.raises(af.ConfigError, match="must be 3 strings"):
        af.TokenClassificationHead(num_labels=3, labels=("O", "B-PER"))


def test_the_loss_is_the_mean_cross_entropy_of_the_labelled_tokens_only():
    model = _model()
    inputs, labels = tiny_inputs(batch=2, seq=7), _labels()
    output = model(**inputs, labels=labels)
    assert output.logits.shape == (2, 7, 3)
    log_probs = output.logits.log_softmax(-1)
    gold = [(0, 1, 1), (0, 2, 2), (0, 3, 0), (1, 2, 1)]  # (row, token, tag) of the 4 labelled tokens
    expected = -sum(log_probs[r, t, y] for r, t, y in gold) / 4
    torch.testing.assert_close(output.loss, expected)
    torch.testing.assert_close(tagging_loss(output.logits, labels), expected)
    tagged = labels.clone()
    tagged[1, 4] = 2  # one more labelled token counts: the mean is over 5 now (row 1 is padded at tokens 5 and 6)
    expected = -(sum(log_probs[r, t, y] for r, t, y in gold) + log_probs[1, 4, 2]) / 5
    torch.testing.assert_close(model(**inputs, labels=tagged).loss, expected)


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (torch.zeros(2, 5, dtype=torch.long), r"must be one per token, \(2, 7\)"),
        (torch.full((2, 7), 3), r"tags \[3\] are not ids in 0\.\.2"),
        (torch.full((2, 7), IGNORE_INDEX), "every label of the batch is -100"),
        (torch.tensor([[-100] * 6 + [1], [-100] * 6 + [1]]), "a tag of row 1 is at token 6, which the attention_mask"),
    ],
)
def test_bad_labels_are_refused_with_what_to_pass(labels, message):
    with pytest.raises(af.ConfigError, match=message):
        _model()(**tiny_inputs(batch=2, seq=7), labels=labels)


def test_word_tags_go_to_the_first_sub_token_of_each_word():
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    words = ["Ada", "Brookfieldshire", "visited", "Quito"]
    encoding = tokenizer([words], is_split_into_words=True)
    word_ids = encoding.word_ids(0)
    assert word_ids.count(1) > 1  # the long name is split into several sub-tokens
    labels = af.word_labels_to_tokens(word_ids, [1, 2, 0, 1])
    assert labels[0] == IGNORE_INDEX and labels[-1] == IGNORE_INDEX  # [CLS], [SEP]
    first = [word_ids.index(w) for w in range(4)]
    assert [labels[i] for i in first] == [1, 2, 0, 1]
    assert all(labels[i] == IGNORE_INDEX for i in range(len(labels)) if i not in first)
    # truncation drops the last words' tokens: their tags are simply absent
    cut = tokenizer([words], is_split_into_words=True, truncation=True, max_length=4).word_ids(0)
    assert af.word_labels_to_tokens(cut, [1, 2, 0, 1]) == [IGNORE_INDEX, 1, 2, IGNORE_INDEX]


def test_with_an_adapter_and_with_fusion():
    model = _model()
    for name in ("a", "b"):
        model.add_adapter(name)
    model.train_adapter("a", head="ner")
    model(**tiny_inputs(), labels=_labels()).loss.backward()
    trained = {n for n, p in model.named_parameters() if p.grad is not None}
    assert trained and all(".adapters.a." in n or n.startswith("heads.ner.") for n in trained)
    model.add_fusion("f", ["a", "b"])
    model.train_fusion("f", head="ner")
    output = model(**tiny_inputs(), labels=_labels())
    assert output.logits.shape == (2, 7, 3)
    output.loss.backward()
    assert any(p.grad is not None for p in model.fusion_parameters("f"))


def test_save_and_load_give_the_same_logits(tmp_path):
    model = _model()
    randomise(model.get_head("ner"))
    model.eval()
    inputs = tiny_inputs()
    before = model(**inputs).logits
    model.save_head("ner", tmp_path / "head")
    other = af.wrap(tiny_encoder())
    name = other.load_head(tmp_path / "head", labels=list(TAGS))
    other.activate(head=name)
    other.eval()
    assert other.get_head(name).config == model.get_head("ner").config
    torch.testing.assert_close(other(**inputs).logits, before, rtol=0, atol=0)
    with pytest.raises(af.IncompatibleModelError, match="saved for labels"):
        af.wrap(tiny_encoder()).load_head(tmp_path / "head", labels=["O", "B-LOC", "I-LOC"])


def test_word_tags_may_come_as_a_list_tensor_or_array_but_only_as_ids():
    word_ids = [None, 0, 0, np.int64(1), None]
    expected = [IGNORE_INDEX, 2, IGNORE_INDEX, 0, IGNORE_INDEX]
    for tags in ([2, 0], [2.0, 0.0], torch.tensor([2, 0]), np.array([2, 0])):
        assert af.word_labels_to_tokens(word_ids, tags) == expected
    for tags, message in (
        ([2], "tags for words 0..0 only"),
        (["B-PER", "O"], "tag 'B-PER' is not a tag id"),
        ([2, 0.5], "tag 0.5 is not a tag id"),
        ([True, 0], "tag True is not a tag id"),
        ("20", "must be a list of tag ids"),
    ):
        with pytest.raises(af.ConfigError, match=message):
            af.word_labels_to_tokens(word_ids, tags)
