import json
import re

import pytest

from adapterfusion.errors import ConfigError
from adapterfusion.training import TrainingConfig


def test_round_trip_and_paper_defaults():
    config = TrainingConfig.for_setup("fusion-st-a", max_steps=7)
    assert (config.learning_rate, config.epochs, config.batch_size, config.warmup_ratio) == (5e-5, 10, 32, 0.1)
    assert TrainingConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert config.to_dict()["format_version"] == 1
    assert TrainingConfig.for_setup("st-a").learning_rate == 1e-4
    assert TrainingConfig.for_setup("full").learning_rate == 2e-5


@pytest.mark.parametrize(
    "bad",
    [
        dict(batch_size=0),
        dict(learning_rate=-1),
        dict(patience=0),
        dict(fp16=True, bf16=True),
        dict(report_to="slack"),
        dict(warmup_ratio=1.5),
        dict(max_length=4),
        dict(gradient_checkpointing="yes"),
        dict(torch_compile=1),
    ],
)
def test_rejects_bad_values(bad):
    with pytest.raises(ConfigError):
        TrainingConfig(**bad)


def test_rejects_unknown_keys_and_versions():
    with pytest.raises(ConfigError, match="lr"):
        TrainingConfig.from_dict({"lr": 1})
    with pytest.raises(ConfigError, match="format_version"):
        TrainingConfig.from_dict({"format_version": 99})


def test_a_refusal_names_the_field_first_and_says_how_to_switch_off_early_stopping():
    """The CLI names its option for the field that starts the message (`patience=0` -> `--patience 0`)."""
    with pytest.raises(ConfigError, match=r"^patience=0 must be an integer >= 1 or None \(None: no early stopping\)$"):
        TrainingConfig(patience=0)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"seed": 5}, "training_config={'seed': 5} disagrees with the run's seed=3"),
        (TrainingConfig(seed=5), "TrainingConfig(seed=5) disagrees with the run's seed=3"),
    ],
)
def test_a_training_config_seed_that_disagrees_with_the_run_seed_is_refused(given, message):
    """The seed in a training config was replaced by train()'s seed (default 42) without a word: another seed."""
    from adapterfusion.training.run import training_config_for

    with pytest.raises(ConfigError, match=re.escape(message)):
        training_config_for("st-a", given, 3)
    assert training_config_for("st-a", {"seed": 3}, 3).seed == 3
    assert training_config_for("st-a", TrainingConfig(), 3).seed == 3  # a config that set no seed takes the run's


@pytest.mark.parametrize(
    ("metric", "why"),
    [
        ("perplexity", "it is exp(answer_loss), so it would choose the checkpoint answer_loss chooses"),
        ("loss", "the dev loss is recorded beside the task's metrics, not one of them"),
        ("eval_loss", "the dev loss is recorded beside the task's metrics"),
        ("top_prediction_share", "it is a diagnostic recorded beside the task's metrics"),
    ],
)
def test_a_number_recorded_beside_the_metrics_cannot_select_a_checkpoint(metric, why):
    """Every dev number a run records is a metric some task can list (tasks/spec.py), or one of these: refused with
    why and with the metrics that can be chosen, per kind of task."""
    from adapterfusion.tasks.spec import CLASSIFICATION_METRICS, GENERATION_METRICS, REGRESSION_METRICS

    with pytest.raises(ConfigError) as caught:
        TrainingConfig(metric_for_best=metric)
    message = str(caught.value)
    assert message.startswith(f"metric_for_best={metric!r} cannot select a checkpoint: ") and why in message
    for names in (CLASSIFICATION_METRICS, REGRESSION_METRICS, GENERATION_METRICS):
        assert ", ".join(names) in message
    with pytest.raises(ConfigError, match=r"without the Trainer's 'eval_' prefix, metric_for_best='spearman'$"):
        TrainingConfig(metric_for_best="eval_spearman")
    from adapterfusion.training.config import SELECTABLE_METRICS

    for names in SELECTABLE_METRICS.values():  # every metric a task can list selects (if its task lists it)
        assert [TrainingConfig(metric_for_best=name).metric_for_best for name in names] == list(names)
