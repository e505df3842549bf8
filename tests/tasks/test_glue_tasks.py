"""Houlsby's GLUE tasks (issue #27): CoLA's Matthews correlation, STS-B's regression scored by Spearman and Pearson,
QNLI, MNLI's second (mismatched) dev set; regression labels, label names in a user's file, and head/task mismatches.
Metrics are checked against hand-computed values and slow, obvious implementations written here."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch

from adapterfusion.tasks import (
    TaskCollator,
    TaskError,
    TaskSpec,
    compute_metrics,
    get_task,
    list_tasks,
    load_task_data,
    matthews_correlation,
    pearson,
    spearman,
)
from adapterfusion.tasks.extra_dev import extra_dev_label, load_extra_dev_splits
from adapterfusion.tasks.metrics import dev_metrics
from task_data import train_and_dev


def _slow_matthews(preds, gold) -> float:
    """Gorodkin's R_K as the covariance of one-hot class indicators, summed over classes, with Python loops."""
    classes = sorted(set(preds) | set(gold))
    n = len(preds)

    def cov(a, b):
        total = 0.0
        for k in classes:
            xa = [1.0 if v == k else 0.0 for v in a]
            xb = [1.0 if v == k else 0.0 for v in b]
            ma, mb = sum(xa) / n, sum(xb) / n
            total += sum((p - ma) * (q - mb) for p, q in zip(xa, xb, strict=True))
        return total

    denom = math.sqrt(cov(preds, preds) * cov(gold, gold))
    return cov(preds, gold) / denom if denom else 0.0


def _slow_spearman(x, y) -> float:
    def ranks(values):
        return [
            sum(1 for w in values if w < v) + (sum(1 for w in values if w == v) + 1) / 2 for v in values
        ]  # average rank of ties, 1-based

    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


def test_matthews_by_hand_and_against_a_slow_implementation():
    preds, gold = [1, 1, 0, 0, 1, 0], [1, 0, 0, 1, 1, 0]  # tp 2, fp 1, fn 1, tn 2: (2*2 - 1*1) / sqrt(3^4) = 1/3
    assert matthews_correlation(preds, gold) == pytest.approx(1 / 3)
    assert matthews_correlation(gold, gold) == pytest.approx(1.0)
    assert matthews_correlation([1 - g for g in gold], gold) == pytest.approx(-1.0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        k = int(rng.integers(2, 5))
        p, g = rng.integers(0, k, 30).tolist(), rng.integers(0, k, 30).tolist()
        assert matthews_correlation(p, g) == pytest.approx(_slow_matthews(p, g))
    logits = np.array([[2.0, 0.1], [0.1, 3.0], [0.5, 0.4]])  # arg-maxed like accuracy's input
    assert matthews_correlation(logits, [0, 1, 1]) == pytest.approx(_slow_matthews([0, 1, 0], [0, 1, 1]))


def test_constant_prediction_gives_matthews_0_and_undefined_correlation():
    assert matthews_correlation([1, 1, 1, 1], [0, 1, 0, 1]) == 0.0
    assert matthews_correlation([0, 1, 0, 1], [1, 1, 1, 1]) == 0.0
    assert math.isnan(pearson([2.5] * 4, [0.0, 1.0, 2.0, 3.0]))
    assert math.isnan(spearman([2.5] * 4, [0.0, 1.0, 2.0, 3.0]))
    scores = compute_metrics("stsb", np.full(4, 2.5), np.array([0.0, 1.0, 2.0, 3.0]))
    assert set(scores) == {"spearman", "pearson"} and all(math.isnan(v) for v in scores.values())
    assert dev_metrics("stsb", np.full(4, 2.5), np.array([0.0, 1.0, 2.0, 3.0]))["top_prediction_share"] == 1.0
    assert compute_metrics("cola", [1, 1, 1, 1], [0, 1, 0, 1]) == {"matthews_correlation": 0.0, "accuracy": 0.5}


def test_stsb_scores_are_spearman_then_pearson():
    rng = np.random.default_rng(1)
    gold = rng.uniform(0, 5, 40).round(1)  # rounded: ties, which Spearman averages
    pred = gold + rng.normal(0, 1, 40)
    scores = compute_metrics("stsb", pred.astype(np.float32), gold)
    assert list(scores) == ["spearman", "pearson"]
    assert scores["spearman"] == pytest.approx(_slow_spearman(pred.tolist(), gold.tolist()))
    assert scores["pearson"] == pytest.approx(np.corrcoef(pred.astype(np.float32), gold)[0, 1], rel=1e-6)
    assert compute_metrics("stsb", pred[:, None], gold) == pytest.approx(scores)  # a RegressionHead's [n, 1]
    broken = pred.copy()
    broken[3] = np.nan  # ranked last, it gave a finite Spearman (1.0 for a perfect rest) while Pearson said nan
    assert all(math.isnan(value) for value in compute_metrics("stsb", broken, gold).values())


def test_a_head_of_the_other_kind_is_refused_naming_both():
    with pytest.raises(TaskError, match=r"'stsb' is a regression task.*shape \[4, 3\].*classification head"):
        compute_metrics("stsb", np.zeros((4, 3)), np.array([1.0, 2.0, 3.0, 4.0]))
    with pytest.raises(TaskError, match=r"'cola' is a classification task \(2 labels\).*regression head"):
        compute_metrics("cola", np.array([0.2, 0.7, 1.4]), np.array([0, 1, 1]))


def test_builtin_glue_tasks():
    assert {"cola", "stsb", "qnli", "mnli", "sick-r"} <= set(list_tasks())
    assert "wnli" not in list_tasks()  # left out, as Houlsby et al. leave it out
    cola, stsb, qnli, mnli = (get_task(n) for n in ("cola", "stsb", "qnli", "mnli"))
    assert (cola.kind, cola.metrics[0], cola.hub_path, cola.hub_config) == (
        "single",
        "matthews_correlation",
        "nyu-mll/glue",
        "cola",
    )
    assert (stsb.kind, stsb.regression, stsb.metrics, stsb.num_labels, stsb.label_names) == (
        "pair",
        True,
        ("spearman", "pearson"),
        1,
        (),
    )
    assert (qnli.text_fields, qnli.label_names) == (("question", "sentence"), ("entailment", "not_entailment"))
    assert (mnli.validation_split, mnli.extra_dev_splits) == ("validation_matched", ("validation_mismatched",))
    assert extra_dev_label("mnli", "validation_mismatched") == "mnli mismatched"
    for spec in (cola, stsb, mnli):
        assert TaskSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    rte = get_task("rte").to_dict()  # older tasks' descriptions, and the run configs recording them, are unchanged
    assert "regression" not in rte and "extra_dev_splits" not in rte


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"label_names": ("low", "high")}, "regression task has no label_names"),
        ({"metrics": ("accuracy",)}, "metric 'accuracy' is unknown for a 'pair' task"),
        ({"kind": "multiple_choice", "text_fields": ("q",), "choice_fields": ("c",)}, "regression=True is for"),
        ({"extra_dev_splits": ("validation",)}, "extra_dev_splits"),
        ({"regression": "yes"}, "regression='yes' must be bool"),
    ],
)
def test_regression_spec_validation(changes, message):
    base = dict(name="sts", kind="pair", text_fields=("a", "b"), regression=True)
    with pytest.raises(TaskError, match=message):
        TaskSpec(**{**base, **changes})


def _stsb_rows(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {"sentence1": f"a man plays {i}", "sentence2": f"someone plays {i % 5}", "label": float(s), "idx": i}
        for i, s in enumerate(rng.uniform(0, 5, n).round(2))
    ]


def test_stsb_from_local_files_keeps_real_scores(tmp_path, write_jsonl):
    write_jsonl(tmp_path / "stsb" / "train.jsonl", _stsb_rows(30, 0))
    rows = _stsb_rows(12, 1)
    rows[3]["label"] = "4.25"  # a numeric string counts (a CSV might hold one)
    write_jsonl(tmp_path / "stsb" / "validation.jsonl", rows)
    splits, _ = load_task_data("stsb", tmp_path)
    assert splits["train"].features["label"].dtype == "float32"
    assert splits["validation"]["label"][3] == pytest.approx(4.25)
    assert splits["train"]["label"] == pytest.approx([r["label"] for r in _stsb_rows(30, 0)])
    batch = TaskCollator(_FakeTokenizer())([{"input_ids": [1, 2], "label": 2.5}, {"input_ids": [3], "label": 0.5}])
    assert batch["labels"].dtype == torch.float32 and batch["labels"].tolist() == [2.5, 0.5]


class _FakeTokenizer:
    pad_token_id = 0


def test_a_score_that_is_no_number_is_refused(tmp_path, write_jsonl):
    rows = _stsb_rows(8, 0)
    rows[5]["label"] = "high"
    write_jsonl(tmp_path / "stsb" / "train.jsonl", rows)
    with pytest.raises(TaskError, match=r"row 5: label 'high' in field 'label' is not a number"):
        load_task_data("stsb", tmp_path)


def test_label_names_in_a_users_file_are_read_and_other_strings_listed(tmp_path):
    spec = dict(name="acceptability", kind="single", text_fields=("text",), label_names=("bad", "good"))
    good = tmp_path / "good.csv"
    good.write_text("text,label\n" + "".join(f"s{i},{('bad', 'good')[i % 2]}\n" for i in range(10)))
    splits, _ = load_task_data(TaskSpec(**spec, data_files=train_and_dev(good)))
    assert list(splits["train"]["label"]) == [i % 2 for i in range(10)]
    other = tmp_path / "other.csv"
    other.write_text("text,label\n" + "".join(f"s{i},{('no', 'yes', 'maybe')[i % 3]}\n" for i in range(10)))
    with pytest.raises(TaskError) as err:
        load_task_data(TaskSpec(**spec, data_files={"train": str(other)}))
    message = str(err.value)
    assert "row 0: label 'no'" in message and "is not one of ['0', '1'] (or the label names ['bad', 'good'])" in message
    assert "holds 3 distinct labels: ['maybe', 'no', 'yes']" in message


def _mnli_rows(n: int) -> list[dict]:
    return [{"premise": f"p {i}", "hypothesis": f"h {i}", "label": i % 3, "idx": i} for i in range(n)]


def test_mnli_mismatched_dev_set_is_loaded_beside_the_matched_one(tmp_path, write_jsonl):
    for split, n in (("train", 20), ("validation_matched", 9), ("validation_mismatched", 12)):
        write_jsonl(tmp_path / "mnli" / f"{split}.jsonl", _mnli_rows(n))
    splits, _ = load_task_data("mnli", tmp_path)
    assert len(splits["validation"]) == 9 and "validation_mismatched" not in splits  # the main dev set selects
    extra = load_extra_dev_splits("mnli", tmp_path, max_examples={"validation": 5})
    assert list(extra.splits) == ["validation_mismatched"] and extra.notes == ()
    assert len(extra.splits["validation_mismatched"]) == 5
    assert set(extra.splits["validation_mismatched"]["label"]) <= {0, 1, 2}
    (tmp_path / "mnli" / "validation_mismatched.jsonl").unlink()
    missing = load_extra_dev_splits("mnli", tmp_path)
    assert missing.splits == {} and "validation_mismatched" in missing.notes[0] and "has none" in missing.notes[0]
    assert load_extra_dev_splits("rte", tmp_path) == ({}, ())


def test_a_task_of_its_own_files_names_its_extra_dev_split_file_in_data_files(tmp_path, write_jsonl):
    """data_files may name each extra dev split's file under that split's name; it is scored after training but
    never loaded as a main split. Without an entry the split is left out with a note saying which key to add."""
    files = {}
    for key, n in (("train", 20), ("validation", 9), ("mismatched", 12)):
        files[key] = str(tmp_path / f"{key}.jsonl")
        write_jsonl(tmp_path / f"{key}.jsonl", _mnli_rows(n))
    base = dict(name="my_nli", kind="pair", text_fields=("premise", "hypothesis"), label_names=("e", "n", "c"))
    spec = TaskSpec(**base, data_files=files, extra_dev_splits=("mismatched",))
    splits, _ = load_task_data(spec)
    assert sorted(splits) == ["train", "validation"] and len(splits["validation"]) == 9
    extra = load_extra_dev_splits(spec, max_examples={"validation": 5})
    assert list(extra.splits) == ["mismatched"] and extra.notes == ()
    assert len(extra.splits["mismatched"]) == 5 and set(extra.splits["mismatched"]["label"]) <= {0, 1, 2}
    without = TaskSpec(**base, data_files={k: v for k, v in files.items() if k != "mismatched"},
                       extra_dev_splits=("mismatched",))  # fmt: skip
    missing = load_extra_dev_splits(without)
    assert missing.splits == {} and "data_files give no file for it (key 'mismatched')" in missing.notes[0]
    with pytest.raises(TaskError, match=r"unknown split role\(s\) \['other'\]; use .* or an extra dev split"):
        TaskSpec(**base, data_files={**files, "other": files["mismatched"]}, extra_dev_splits=("mismatched",))


def test_sick_r_is_a_regression_task_on_the_demo_pack(demo_data_dir):
    splits, _ = load_task_data("sick-r", demo_data_dir, max_examples=50)
    scores = splits["validation"]["label"]
    assert all(1.0 <= s <= 5.0 for s in scores) and len(set(scores)) > 5
    assert splits["validation"].features["label"].dtype == "float32"


def test_every_pair_of_constant_and_varied_inputs_in_the_correlations():
    varied, constant = [0.0, 1.0, 3.0], [2.0, 2.0, 2.0]
    for x, y in itertools.product((varied, constant), repeat=2):
        defined = x is varied and y is varied
        assert math.isnan(pearson(x, y)) != defined
        assert math.isnan(spearman(x, y)) != defined


FAST = dict(max_steps=2, batch_size=8, max_length=32, learning_rate=1e-2, logging_steps=1, patience=None)


def test_regression_and_a_second_dev_set_train_end_to_end(tmp_path, tiny_encoder_dir, write_jsonl):
    from adapterfusion.training import train

    write_jsonl(tmp_path / "data" / "stsb" / "train.jsonl", _stsb_rows(24, 0))
    write_jsonl(tmp_path / "data" / "stsb" / "validation.jsonl", _stsb_rows(10, 1))
    for split, n in (("train", 24), ("validation_matched", 9), ("validation_mismatched", 12)):
        write_jsonl(tmp_path / "data" / "mnli" / f"{split}.jsonl", _mnli_rows(n))
    common = dict(seed=1, encoder=tiny_encoder_dir, data_dir=tmp_path / "data", output_dir=tmp_path / "runs")
    sts = train("stsb", "st-a", training_config=FAST, **common)
    assert set(sts.metrics) >= {"spearman", "pearson", "loss", "top_prediction_share"}
    recorded = json.loads((sts.run_dir / "metrics.json").read_text())
    assert recorded["metric_for_best"] == "spearman" and "extra_dev" not in recorded
    assert json.loads((sts.run_dir / "head" / "head_config.json").read_text())["config"]["kind"] == "regression"
    nli = train("mnli", "head", training_config=FAST, **common)
    recorded = json.loads((nli.run_dir / "metrics.json").read_text())
    mismatched = recorded["extra_dev"]["validation_mismatched"]
    assert set(mismatched) >= {"accuracy", "loss"} and recorded["extra_dev_notes"] == []
    assert mismatched["accuracy"] * 12 == pytest.approx(round(mismatched["accuracy"] * 12))  # a share of 12 rows


def test_glue_tasks_and_the_mismatched_dev_set_from_the_hub(monkeypatch):
    import datasets

    calls = []

    def load_dataset(path, config=None, split=None, **kwargs):
        calls.append((path, config, split))
        if config == "stsb":
            train = datasets.Dataset.from_list(_stsb_rows(10, 0))
            return datasets.DatasetDict({"train": train, "validation": datasets.Dataset.from_list(_stsb_rows(6, 1))})
        mismatched = datasets.Dataset.from_list(_mnli_rows(7))
        if split == "validation_mismatched":
            return mismatched
        raise ValueError(f"unexpected split {split!r}")

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    splits, info = load_task_data("stsb", source="hub")
    assert calls[0] == ("nyu-mll/glue", "stsb", None) and info.source == "hub"
    assert splits["validation"]["label"] == pytest.approx([r["label"] for r in _stsb_rows(6, 1)])
    extra = load_extra_dev_splits("mnli", source="hub")
    assert calls[-1] == ("nyu-mll/glue", "mnli", "validation_mismatched")
    assert len(extra.splits["validation_mismatched"]) == 7 and extra.notes == ()
