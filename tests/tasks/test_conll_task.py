"""The `conll2003` task from a user's own files (CoNLL text in IOB1, JSON lines of tag names or ids): reading,
checking, encoding with tags on first sub-tokens, the metrics from a head's padded logits, and training it (ST-A and
fusion) with evaluation giving its entity F1."""

from __future__ import annotations

import json

import numpy as np
import pytest
import transformers

import adapterfusion as af
from adapterfusion.evaluation import evaluate_run
from adapterfusion.heads.token_classification import IGNORE_INDEX
from adapterfusion.tasks import (
    TaskCollator,
    TaskError,
    TaskSpec,
    compute_metrics,
    encode_task,
    get_task,
    load_task_data,
)
from adapterfusion.tasks.metrics import dev_metrics
from adapterfusion.training import AdapterStore, train
from span_task_data import conll_sentences, write_conll
from task_data import train_and_dev

TAGS = get_task("conll2003").label_names


@pytest.fixture(scope="module")
def conll_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_conll(root / "conll2003" / "train.txt", conll_sentences(30))
    write_conll(root / "conll2003" / "validation.txt", conll_sentences(10, start=30))
    return root


@pytest.fixture(scope="module")
def tokenizer():
    return transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())


def test_the_builtin_task_keeps_the_hub_path_and_tag_order():
    spec = get_task("conll2003")
    assert spec.hub_path == "eriktks/conll2003" and spec.kind == "token_classification"
    assert TAGS == ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
    assert spec.metrics[0] == "f1"
    assert TaskSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_conll_text_in_iob1_is_read_as_iob2_tag_ids(conll_dir):
    splits, info = load_task_data("conll2003", conll_dir)
    assert {role: len(d) for role, d in splits.items()} == {"train": 30, "validation": 10}
    first = splits["train"][0]  # "Ada Brook visited Hanoi Perth for Acme Corp ." with Perth B-LOC in IOB1
    assert first["tokens"] == ["Ada", "Brook", "visited", "Hanoi", "Perth", "for", "Acme", "Corp", "."]
    assert first["ner_tags"] == ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "O", "B-ORG", "I-ORG", "O"]
    assert [TAGS[i] for i in first["label"]] == first["ner_tags"]
    assert splits["train"].features["label"].feature.names == list(TAGS)


def test_json_lines_with_tag_names_or_hub_ids_load_alike(tmp_path, write_jsonl):
    names = [{"tokens": ["Ada", "left"], "ner_tags": ["B-PER", "O"]}]
    ids = [{"tokens": ["Ada", "left"], "ner_tags": [1, 0]}]
    for rows in (names, ids):
        path = write_jsonl(tmp_path / "rows.jsonl", rows)
        spec = TaskSpec.from_dict(
            {**get_task("conll2003").to_dict(), "name": "mine", "data_files": train_and_dev(path)}
        )
        assert load_task_data(spec).splits["train"]["label"] == [[1, 0]]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"tokens": ["Ada", "left"], "ner_tags": ["B-PER"]}, "2 words but 1 tags"),
        ({"tokens": ["Ada"], "ner_tags": ["B-PERSON"]}, "tag 'B-PERSON' is not one of the task's tags"),
        ({"tokens": ["Ada"], "ner_tags": [9]}, "tag 9 is not one of"),
        ({"tokens": [], "ner_tags": []}, "non-empty list of words"),
        ({"tokens": "Ada left", "ner_tags": ["O"]}, "non-empty list of words"),
    ],
)
def test_bad_rows_are_refused_with_the_row_and_the_fix(tmp_path, write_jsonl, row, message):
    path = write_jsonl(tmp_path / "rows.jsonl", [{"tokens": ["x"], "ner_tags": ["O"]}, row])
    spec = TaskSpec.from_dict({**get_task("conll2003").to_dict(), "name": "mine", "data_files": {"train": str(path)}})
    with pytest.raises(TaskError, match=f"row 1: {message}" if "words but" in message else message):
        load_task_data(spec)


def test_a_conll_line_without_a_tag_is_refused(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "train.conll").write_text("Ada NNP I-NP B-PER\nleft\n", encoding="utf-8")
    spec = TaskSpec.from_dict({**get_task("conll2003").to_dict(), "name": "mine"})
    with pytest.raises(TaskError, match="line 2: 'left' has no tag"):
        load_task_data(spec, tmp_path)


def test_encoding_puts_each_tag_on_the_first_sub_token(conll_dir, tokenizer):
    splits, _ = load_task_data("conll2003", conll_dir)
    encoded, report = encode_task("conll2003", splits, tokenizer, 64)
    assert not report.any_truncated
    for raw, feature in zip(splits["validation"], encoded["validation"], strict=True):
        labels = feature["labels"]
        assert len(labels) == len(feature["input_ids"])
        assert [t for t in labels if t != IGNORE_INDEX] == raw["label"]
        words = tokenizer(raw["tokens"], is_split_into_words=True).word_ids()
        assert [i for i, t in enumerate(labels) if t != IGNORE_INDEX] == [
            words.index(w) for w in range(len(raw["tokens"]))
        ]
    cut, report = encode_task("conll2003", splits, tokenizer, 8)
    assert report.truncated["train"] == 30  # every sentence has more than 6 words' tokens
    batch = TaskCollator(tokenizer)([encoded["train"][i] for i in range(4)])
    assert batch["labels"].shape == batch["input_ids"].shape
    assert (batch["labels"][batch["attention_mask"] == 0] == IGNORE_INDEX).all()


def test_metrics_from_padded_logits_by_hand():
    gold = np.full((2, 6), IGNORE_INDEX)
    gold[0, 1:4] = [1, 2, 0]  # B-PER I-PER O
    gold[1, 1:3] = [5, 0]  # B-LOC O
    logits = np.full((2, 6, 9), -100.0)  # the Trainer pads logits past a batch's length with -100
    for row, token, tag in [(0, 1, 1), (0, 2, 2), (0, 3, 0), (1, 1, 3), (1, 2, 0)]:  # LOC mistaken for ORG
        logits[row, token] = 0.0
        logits[row, token, tag] = 1.0
    scores = compute_metrics("conll2003", logits, gold)
    assert scores == {"f1": 0.5, "precision": 0.5, "recall": 0.5, "accuracy": 0.8}
    recorded = dev_metrics("conll2003", logits, gold)
    assert recorded["top_prediction_share"] == pytest.approx(2 / 5)  # "O" on 2 of the 5 words


def test_train_st_a_and_fusion_and_evaluate(conll_dir, tiny_encoder_dir, demo_data_dir, tmp_path):
    store = AdapterStore(tmp_path / "store")
    config = {"epochs": 2, "batch_size": 8, "learning_rate": 1e-3, "max_length": 64}
    common = dict(encoder=tiny_encoder_dir, data_dir=conll_dir, output_dir=tmp_path / "runs", training_config=config)
    single = train("conll2003", "st-a", seed=1, store=store, **common)
    assert set(single.metrics) >= {"f1", "precision", "recall", "accuracy", "top_prediction_share", "loss"}
    evaluated = evaluate_run(single.run_dir)["metrics"]
    for name in ("f1", "accuracy"):
        assert evaluated[name] == pytest.approx(single.metrics[name])
    source = dict(common, data_dir=demo_data_dir, training_config=dict(config, max_steps=2))  # a second adapter
    train("rte", "st-a", seed=1, store=store, max_examples={"train": 16, "validation": 16}, **source)
    options = {"sources": ["rte", "conll2003"]}  # a fusion of the target's adapter alone is refused
    fused = train("conll2003", "fusion-st-a", seed=1, store=store, setup_options=options, **common)
    assert evaluate_run(fused.run_dir)["metrics"]["f1"] == pytest.approx(fused.metrics["f1"])
    head = train("conll2003", "head", seed=1, **common)  # a per-token head trains on the encoder's token outputs
    assert "f1" in head.metrics
