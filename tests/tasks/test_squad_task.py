"""The `squad` task from a user's own files (SQuAD JSON, JSON lines): checking, encoding into windows with a document
stride, decoding answers back to characters, and training it (ST-A and fusion) with evaluation giving its metrics."""

from __future__ import annotations

import json

import numpy as np
import pytest
import transformers

import adapterfusion as af
from adapterfusion.evaluation import evaluate_run
from adapterfusion.scoring import Predictions, padded_concat, score
from adapterfusion.tasks import (
    TaskCollator,
    TaskError,
    TaskSpec,
    compute_metrics,
    encode_task,
    get_task,
    load_task_data,
)
from adapterfusion.tasks.squad import doc_stride, predicted_answers, score_qa
from adapterfusion.training import AdapterStore, train
from span_task_data import squad_examples, write_squad_json

MAX_LENGTH = 48  # short, so the long paragraphs are read in several windows


@pytest.fixture(scope="module")
def squad_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_squad_json(root / "squad" / "train.json", squad_examples(36))
    write_squad_json(root / "squad" / "validation.json", squad_examples(12, start=36, several_answers=True))
    return root


@pytest.fixture(scope="module")
def tokenizer():
    return transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())


def test_the_builtin_task_keeps_the_hub_path():
    spec = get_task("squad")
    assert (spec.hub_path, spec.kind, spec.metrics, spec.max_length) == (
        "rajpurkar/squad",
        "extractive_qa",
        ("f1", "exact_match"),
        384,
    )
    assert TaskSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_squad_json_and_json_lines_load_alike(squad_dir, tmp_path, write_jsonl):
    splits, info = load_task_data("squad", squad_dir)
    assert {role: len(d) for role, d in splits.items()} == {"train": 36, "validation": 12}
    row = splits["validation"][0]  # the nested file's row in the Hub's layout, with its two gold answers
    assert row["answers"]["text"] == ["2102", "in 2102"] and row["question"].startswith("When was")
    for text, start in zip(row["answers"]["text"], row["answers"]["answer_start"], strict=True):
        assert row["context"][start : start + len(text)] == text
    rows = squad_examples(5)
    files = {
        "train": str(write_jsonl(tmp_path / "t.jsonl", rows)),
        "validation": str(squad_dir / "squad" / "validation.json"),
    }
    spec = TaskSpec.from_dict({**get_task("squad").to_dict(), "name": "my_qa", "hub_path": None, "data_files": files})
    mine, _ = load_task_data(spec)
    assert mine["train"]["answers"] == [r["answers"] for r in rows] and len(mine["validation"]) == 12


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        ({"text": ["x"], "answer_start": [10_000]}, "does not place it inside the context"),
        ({"text": ["x"], "answer_start": [0]}, "where the context reads 'T'; the text is nowhere in the context"),
        ({"text": ["Omar Field"], "answer_start": [0]}, "the text stands at character \\[45\\]"),
        ({"text": ["x", "y"], "answer_start": [0]}, "2 answer texts but 1 answer_start"),
        ({"text": [""], "answer_start": [0]}, "not a non-empty text"),
        ("Paris", "it must hold the answers as"),
        ({"text": [], "answer_start": []}, "row 1: no gold answer"),
    ],
)
def test_bad_rows_are_refused_with_the_row_and_the_fix(tmp_path, write_jsonl, answers, message):
    rows = squad_examples(3)
    rows[1]["answers"] = answers
    spec = TaskSpec(
        name="qa",
        kind="extractive_qa",
        text_fields=("question", "context"),
        label_field="answers",
        data_files={"train": str(write_jsonl(tmp_path / "t.jsonl", rows))},
    )
    with pytest.raises(TaskError, match=message):
        load_task_data(spec)


def test_spec_rules_for_extractive_qa():
    with pytest.raises(TaskError, match="exactly 2"):
        TaskSpec(name="q", kind="extractive_qa", text_fields=("context",), label_field="answers")
    with pytest.raises(TaskError, match="no label_names"):
        TaskSpec(name="q", kind="extractive_qa", text_fields=("q", "c"), label_names=("a", "b"))
    with pytest.raises(TaskError, match="metric 'accuracy' is unknown"):
        TaskSpec(name="q", kind="extractive_qa", text_fields=("q", "c"), metrics=("accuracy",))


def _encoded(squad_dir, tokenizer, role="validation"):
    splits, _ = load_task_data("squad", squad_dir)
    encoded, report = encode_task("squad", splits, tokenizer, MAX_LENGTH)
    return splits[role], encoded[role], report


def test_long_contexts_become_overlapping_windows_whose_labels_cut_out_the_answer(squad_dir, tokenizer):
    raw, features, report = _encoded(squad_dir, tokenizer)
    assert report.totals == {"train": 36, "validation": 12} and not report.any_truncated
    windows = np.bincount(features["example_index"])
    assert windows.max() > 1 and windows.min() == 1 and len(features) == windows.sum()
    answered = set()
    for feature in features:
        start, end = feature["start_positions"], feature["end_positions"]
        offsets = feature["context_offsets"]
        example = raw[feature["example_index"]]
        if start == 0:  # this window does not hold the whole answer
            assert end == 0
            continue
        answered.add(feature["example_index"])
        text = example["context"][offsets[start][0] : offsets[end][1]]
        assert text == example["answers"]["text"][0]  # the labels point at exactly the first gold answer
    assert answered == set(range(len(raw)))  # each answer lies whole in at least one window (it is short)
    # neighbouring windows of one context share doc_stride tokens
    first, second = [f for f in features if windows[f["example_index"]] > 1][:2]
    assert first["example_index"] == second["example_index"]

    def context(feature):
        return [t for t, o in zip(feature["input_ids"], feature["context_offsets"], strict=True) if o[0] != -1]

    shared = doc_stride(MAX_LENGTH)
    assert context(first)[-shared:] == context(second)[:shared]


def test_answers_decode_from_logits_to_characters_and_score(squad_dir, tokenizer):
    raw, features, _ = _encoded(squad_dir, tokenizer)
    width = max(len(ids) for ids in features["input_ids"])
    logits = np.zeros((len(features), width, 2))
    for row, feature in enumerate(features):  # an oracle: high logits on each window's labelled answer
        if feature["start_positions"]:
            logits[row, feature["start_positions"], 0] = logits[row, feature["end_positions"], 1] = 10.0
    examples, answers = predicted_answers(features, logits)
    assert examples == list(range(12))
    assert answers == [row["answers"]["text"][0] for row in raw]
    assert score_qa(features, logits) == {"exact_match": 1.0, "f1": 1.0}
    # the order of the features does not matter, nor does the padding of the logits past each window
    order = np.arange(len(features))[::-1]
    assert score_qa(features.select(order), np.pad(logits[order], [(0, 0), (0, 5), (0, 0)], constant_values=-100)) == {
        "exact_match": 1.0,
        "f1": 1.0,
    }
    shifted = logits.copy()
    for row, feature in enumerate(features):  # one token too far: the year alone becomes "2102 by"
        if feature["start_positions"] and feature["example_index"] == 0:
            shifted[row, :, 1] = 0.0
            shifted[row, feature["end_positions"] + 1, 1] = 10.0
    assert predicted_answers(features, shifted)[1][0] == raw[0]["answers"]["text"][0] + " by"
    scores = score_qa(features, shifted)
    assert scores["exact_match"] == pytest.approx(11 / 12)
    assert scores["f1"] == pytest.approx((11 + 2 / 3) / 12)  # "2102 by" vs "2102": P 1/2, R 1 (vs "in 2102": 1/2)


def test_the_collator_stacks_start_and_end_into_labels(squad_dir, tokenizer):
    _, features, _ = _encoded(squad_dir, tokenizer, "train")
    batch = TaskCollator(tokenizer)([features[i] for i in range(3)])
    assert batch["labels"].tolist() == [
        [features[i]["start_positions"], features[i]["end_positions"]] for i in range(3)
    ]
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels"}


def test_a_too_short_max_length_or_slow_tokenizer_is_refused(squad_dir, tokenizer):
    splits, _ = load_task_data("squad", squad_dir)
    with pytest.raises(TaskError, match="max_length=16 leaves"):
        encode_task("squad", splits, tokenizer, 16)
    with pytest.raises(TaskError, match="needs right padding"):
        left = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path(), padding_side="left")
        encode_task("squad", splits, left, MAX_LENGTH)


def test_train_st_a_and_fusion_and_evaluate(squad_dir, tiny_encoder_dir, demo_data_dir, tmp_path):
    store = AdapterStore(tmp_path / "store")
    config = {"epochs": 2, "batch_size": 8, "learning_rate": 1e-3, "max_length": MAX_LENGTH}
    common = dict(encoder=tiny_encoder_dir, data_dir=squad_dir, output_dir=tmp_path / "runs", training_config=config)
    single = train("squad", "st-a", seed=1, store=store, **common)
    assert set(single.metrics) >= {"f1", "exact_match", "loss"}
    assert 0.0 <= single.metrics["exact_match"] <= single.metrics["f1"] <= 1.0
    evaluated = evaluate_run(single.run_dir)
    assert evaluated["metrics"]["f1"] == pytest.approx(single.metrics["f1"])
    assert evaluated["metrics"]["exact_match"] == pytest.approx(single.metrics["exact_match"])
    assert evaluated["examples"] > 12  # windows, not questions
    source = dict(common, data_dir=demo_data_dir, training_config=dict(config, max_steps=2))  # a second adapter
    train("rte", "st-a", seed=1, store=store, max_examples={"train": 16, "validation": 16}, **source)
    options = {"sources": ["rte", "squad"]}  # a fusion of the target's adapter alone is refused
    fused = train("squad", "fusion-st-a", seed=1, store=store, setup_options=options, **common)
    assert (fused.run_dir / "fusion").is_dir() and (fused.run_dir / "head").is_dir()
    assert evaluate_run(fused.run_dir)["metrics"]["f1"] == pytest.approx(fused.metrics["f1"])


def test_qa_logits_cannot_be_scored_without_their_features():
    logits = np.zeros((2, 5, 2))
    with pytest.raises(TaskError, match="decoded from the logits with the encoded features"):
        score(get_task("squad"), Predictions(logits, np.zeros((2, 2), dtype=np.int64), None))
    with pytest.raises(TaskError, match="score_qa"):
        compute_metrics("squad", logits, np.zeros((2, 2)))
    # batches of per-token outputs padded to different lengths join as the HF Trainer joins them
    joined = padded_concat([np.ones((1, 3, 2)), np.ones((2, 5, 2))], -100.0)
    assert joined.shape == (3, 5, 2) and (joined[0, 3:] == -100).all() and (joined[1:] == 1).all()
    same = [np.ones((2, 3)), np.zeros((1, 3))]
    assert np.array_equal(padded_concat(same, -100.0), np.concatenate(same))  # pooled heads: unchanged


def test_whitespace_around_a_gold_answer_does_not_stretch_its_tokens(tmp_path, write_jsonl, tokenizer):
    rows = squad_examples(2)
    padded = [dict(row) for row in rows]
    for row in padded:  # the same answers with the spaces around them in the context
        text, start = row["answers"]["text"][0], row["answers"]["answer_start"][0]
        row["answers"] = {"text": [f" {text} "], "answer_start": [start - 1]}
    encoded = []
    for name, data in (("plain", rows), ("padded", padded)):
        path = write_jsonl(tmp_path / f"{name}.jsonl", data)
        spec = TaskSpec.from_dict({**get_task("squad").to_dict(), "name": name, "data_files": {"train": str(path)}})
        features = encode_task(spec, load_task_data(spec).splits, tokenizer, MAX_LENGTH).splits["train"]
        encoded.append([(f["start_positions"], f["end_positions"]) for f in features])
    assert encoded[0] == encoded[1] and all(start > 0 for start, _ in encoded[0])
