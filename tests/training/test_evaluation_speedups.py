"""Two savings of fit() that must not change a run's numbers: the dev set is evaluated in ascending token length
(batches pad little), and a run's best metrics are read from the evaluation logged at the best checkpoint instead
of evaluating the restored weights again. That the recorded best metrics equal an independent re-evaluation of the
saved run, in the dev set's own order, is checked by test_run_evaluation.py."""

from types import SimpleNamespace

from datasets import Dataset

from adapterfusion.training.batching import sorted_by_length
from adapterfusion.training.loop import best_epoch_metrics


def test_sorted_by_length_is_a_stable_ascending_permutation():
    rows = {"input_ids": [[1, 2, 3], [1], [4, 5], [6], [7, 8, 9, 10]], "labels": [0, 1, 2, 3, 4]}
    ordered = sorted_by_length(Dataset.from_dict(rows))
    assert ordered["labels"] == [1, 3, 2, 0, 4]  # ties keep their order: label 1 before label 3
    assert [len(ids) for ids in ordered["input_ids"]] == [1, 1, 2, 3, 4]


def test_sorted_by_length_uses_the_longest_choice_of_multiple_choice_examples():
    rows = {"input_ids": [[[1, 2, 3, 4], [1]], [[1, 2], [1, 2]], [[1], [1, 2, 3]]], "labels": [0, 1, 2]}
    assert sorted_by_length(Dataset.from_dict(rows))["labels"] == [1, 2, 0]


def _state(best_checkpoint, history):
    return SimpleNamespace(best_model_checkpoint=best_checkpoint, log_history=history)


HISTORY = [
    {"loss": 0.7, "step": 2, "epoch": 0.5},
    {"eval_accuracy": 0.50, "eval_loss": 0.69, "epoch": 1.0, "step": 4},
    {"eval_accuracy": 0.75, "eval_loss": 0.60, "epoch": 2.0, "step": 8},
    {"eval_accuracy": 0.70, "eval_loss": 0.62, "epoch": 3.0, "step": 12},
    {"train_runtime": 3.0, "step": 12, "epoch": 3.0},
]


def test_best_epoch_metrics_are_the_evaluation_logged_at_the_best_checkpoint():
    assert best_epoch_metrics(_state("/runs/x/checkpoint-8", HISTORY)) == {"accuracy": 0.75, "loss": 0.60}


def test_best_epoch_metrics_are_none_when_no_logged_evaluation_matches():
    assert best_epoch_metrics(_state(None, HISTORY)) is None
    assert best_epoch_metrics(_state("/runs/x/checkpoint-6", HISTORY)) is None
    assert best_epoch_metrics(_state("/runs/x/final", HISTORY)) is None
