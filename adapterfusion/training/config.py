"""`TrainingConfig`: the optimisation knobs of one run, a frozen dataclass with a JSON round trip.

Every setup starts from the paper's values (`TrainingConfig.for_setup`): AdamW with linear decay after a 10 %
warm-up (Houlsby et al. 2019), early stopping on the task's first dev metric.

| setup | lr | max epochs | source |
|---|---:|---:|---|
| st-a, st-a-houlsby | 1e-4 | 30 | AdapterFusion §4 / A.1 |
| fusion-st-a, fusion-mt-a | 5e-5 | 10 | AdapterFusion §4 |
| mt-a | 1e-4 | 30 | AdapterFusion §4 (MT-A fine-tunes the encoder with one adapter per task) |
| full, top-k | 2e-5 | 3 | BERT's fine-tuning recipe (Devlin et al. 2019: 2-4 epochs); AdapterFusion's Full baseline |
| layernorm-only | 1e-3 | 20 | our choice: a few thousand LayerNorm parameters need adapter-like or larger steps |
| head | 1e-3 | 20 | our choice: a linear probe on a frozen encoder converges slowly at 1e-4 |
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapterfusion._validation import FLOAT32_MAX, is_finite_number, short_repr, versioned_fields
from adapterfusion.errors import ConfigError
from adapterfusion.tasks.spec import (
    CLASSIFICATION_METRICS,
    GENERATION_METRICS,
    QA_METRICS,
    REGRESSION_METRICS,
    TAGGING_METRICS,
    suggest,
)

TRAINING_CONFIG_FORMAT_VERSION = 1
REPORT_TARGETS = ("none", "tensorboard", "mlflow", "wandb", "all")
MAX_SEED = 2**32 - 1
SEED_RANGE_REASON = " (numpy's and torch's seeding, which transformers.set_seed calls, take 32-bit seeds)"
MIN_MAX_LENGTH = 8  # the shortest max_length (tokens per input) a run takes

_SETUP_DEFAULTS: dict[str, dict[str, Any]] = {
    "head": dict(learning_rate=1e-3, epochs=20),
    "full": dict(learning_rate=2e-5, epochs=3),
    "top-k": dict(learning_rate=2e-5, epochs=3),
    "layernorm-only": dict(learning_rate=1e-3, epochs=20),
    "st-a": dict(learning_rate=1e-4, epochs=30),
    "st-a-houlsby": dict(learning_rate=1e-4, epochs=30),
    "fusion-st-a": dict(learning_rate=5e-5, epochs=10),
    "mt-a": dict(learning_rate=1e-4, epochs=30),
    "fusion-mt-a": dict(learning_rate=5e-5, epochs=10),
}


def _positive_int(
    value: Any, field: str, allow_none: bool = False, minimum: int = 1, maximum: int | None = None, why: str = ""
) -> None:
    if value is None and allow_none:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
        bound = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise ConfigError(
            f"{field}={short_repr(value)} must be an integer {bound}" + (" or None" if allow_none else "") + why
        )
    if maximum is None and value > sys.maxsize:  # a count beyond any index: islice and range fail steps in
        raise ConfigError(
            f"{field}={short_repr(value)} is a count beyond the largest Python can index ({sys.maxsize}); give a "
            "realistic number" + why
        )


# The optimizer's settings become float32 inside torch's Adam: a larger one fails there, after every check passed.
_FLOAT32_MAX = FLOAT32_MAX
# Each data-loading worker is a process of its own: a count past this starts more processes than any machine has
# cores for (10**6 would fork until the machine stops).
MAX_DATALOADER_WORKERS = 1024
_WORKERS_REASON = " (each worker is a process; 0 loads in the training process, a few per GPU is usual)"
# float32's smallest normal number: a smaller adam_epsilon is 0 (or a subnormal that hardware may flush to 0) where
# Adam adds it to a float32 denominator, so a parameter whose gradients are all 0 so far (an adapter's down-projection
# while its up-projection is still 0) gets 0/0 = NaN, and the run stops on a NaN loss that blames the learning rate.
_FLOAT32_TINY = 1.1754943508222875e-38
_EPSILON_REASON = (
    " (the lower bound is float32's smallest normal number: a smaller epsilon is 0 in the optimizer's float32 "
    "arithmetic, where it keeps Adam's update from dividing 0 by 0; the default is 1e-8)"
)


# What metric_for_best may name: a metric of the run's task (its `metrics`), one of these per kind of task.
SELECTABLE_METRICS = {
    "classification": CLASSIFICATION_METRICS,
    "regression": REGRESSION_METRICS,
    "generation": GENERATION_METRICS,
    "extractive QA": QA_METRICS,
    "tagging": TAGGING_METRICS,
}
# Numbers a run records on its dev set beside its task's metrics that select no checkpoint: why, and what instead.
_RECORDED_ONLY = {
    "perplexity": (
        "it is recorded beside a generation task's metrics, but it is exp(answer_loss), so it would choose the "
        "checkpoint answer_loss chooses: set metric_for_best='answer_loss' (lower is better)"
    ),
    "loss": (
        "the dev loss is recorded beside the task's metrics, not one of them; a generation task selects on its "
        "answer_loss (lower is better), the others on a metric of theirs"
    ),
    "top_prediction_share": (
        "it is a diagnostic recorded beside the task's metrics (the share of the most often predicted class), not a "
        "score"
    ),
}


def _check_metric_for_best(metric: Any) -> None:
    """metric_for_best names a metric a task can list; the numbers recorded beside them are refused, saying which
    can be chosen (whether the run's task lists it is asked when the task is known: training/loop.py)."""
    if metric is None:
        return
    choices = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in SELECTABLE_METRICS.items())
    if not isinstance(metric, str) or not metric:
        raise ConfigError(
            f"metric_for_best={short_repr(metric)} must be a metric name such as 'accuracy' (a metric of the run's "
            f"task: {choices})"
        )
    why = _RECORDED_ONLY.get(metric.removeprefix("eval_"))
    if why is not None:
        raise ConfigError(
            f"metric_for_best={metric!r} cannot select a checkpoint: {why}. A metric of the run's task can ({choices})"
        )
    if metric.startswith("eval_"):
        raise ConfigError(
            f"metric_for_best={metric!r}: name the metric without the Trainer's 'eval_' prefix, "
            f"metric_for_best={metric.removeprefix('eval_')!r}"
        )


def _number(
    value: Any, field: str, low: float, high: float | None = None, low_open: bool = False, why: str = ""
) -> None:
    ok = isinstance(value, (int, float)) and is_finite_number(value)
    ok = ok and (value > low if low_open else value >= low) and (high is None or value <= high)
    if not ok:
        bound = f"{'>' if low_open else '>='} {low}" + (f" and <= {high:g}" if high is not None else "")
        raise ConfigError(f"{field}={short_repr(value)} must be a finite number {bound}{why}")


# Epochs times steps per epoch is the run's step count, which the Trainer computes in floats: 1e308 epochs overflow
# it (a raw OverflowError once the data is loaded), and far fewer are already a run that never ends.
MAX_EPOCHS = 1e6
_EPOCHS_REASON = (
    " (the most a run may plan; plan about as many epochs as the run needs, not far more: the warm-up (warmup_ratio) "
    "and the learning rate's decay are spread over the planned steps, so a far plan trains at a rate near 0; "
    "patience ends a run sooner once its dev metric stops improving)"
)


@dataclass(frozen=True)
class TrainingConfig:
    """One run's optimisation settings. `epochs` is the maximum: early stopping (`patience` evaluations without
    improvement of `metric_for_best`, None = off) usually ends a run sooner. `max_steps`, when set, is the run's number
    of optimizer steps in place of `epochs` (the HF Trainer's meaning: more steps than the epochs hold train more
    epochs; tests, demos). `metric_for_best` None means the task's first metric. `eval_batch_size` None = batch_size;
    `max_length` None = the task's default. fp16/bf16 are passed to the HF Trainer unchanged. `group_by_length` draws
    training batches of similar lengths (HF's LengthGroupedSampler, still shuffled), so dynamic padding pads little: on
    CPU a step costs about its token count. `cache_features`: where only the head trains (setup "head"), run the frozen
    encoder once and train the head on the cached pooled features (training/feature_cache.py). `gradient_checkpointing`:
    recompute each encoder layer's activations, adapter sites included, in the backward pass instead of keeping them
    (less memory for about one more forward per step; gradients unchanged). `torch_compile`: train a `torch.compile`d
    model (TorchInductor; on CPU it needs a C++ compiler). `fast_dropout`: draw dropout masks with
    `torch.rand(...) >= p` instead of `bernoulli_` while training: the same distribution from the same generator in
    about half the time on CPU; tensors on CUDA keep torch's fused kernels (training/fast_dropout.py)."""

    learning_rate: float = 1e-4
    epochs: float = 30
    batch_size: int = 32
    eval_batch_size: int | None = None
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    adam_epsilon: float = 1e-8
    max_grad_norm: float = 1.0
    patience: int | None = 3
    max_steps: int | None = None
    max_length: int | None = None
    seed: int = 42
    metric_for_best: str | None = None
    grad_accumulation: int = 1
    fp16: bool = False
    bf16: bool = False
    report_to: str = "none"
    save_total_limit: int = 1
    keep_checkpoints: bool = False
    logging_steps: int = 50
    dataloader_workers: int = 0
    group_by_length: bool = False
    cache_features: bool = True
    gradient_checkpointing: bool = False
    torch_compile: bool = False
    fast_dropout: bool = True

    def __post_init__(self) -> None:
        _number(self.learning_rate, "learning_rate", 0.0, _FLOAT32_MAX, low_open=True)  # 0 would train nothing
        _number(self.epochs, "epochs", 0.0, MAX_EPOCHS, low_open=True, why=_EPOCHS_REASON)
        _positive_int(self.batch_size, "batch_size")
        _positive_int(self.eval_batch_size, "eval_batch_size", allow_none=True)
        _number(self.warmup_ratio, "warmup_ratio", 0.0, 0.99)
        _number(self.weight_decay, "weight_decay", 0.0, _FLOAT32_MAX)
        _number(self.adam_epsilon, "adam_epsilon", _FLOAT32_TINY, _FLOAT32_MAX, why=_EPSILON_REASON)
        _number(self.max_grad_norm, "max_grad_norm", 0.0)
        _positive_int(self.patience, "patience", allow_none=True, why=" (None: no early stopping)")
        _positive_int(self.max_steps, "max_steps", allow_none=True)
        _positive_int(self.max_length, "max_length", allow_none=True, minimum=MIN_MAX_LENGTH)
        _positive_int(self.seed, "seed", minimum=0, maximum=MAX_SEED, why=SEED_RANGE_REASON)
        _check_metric_for_best(self.metric_for_best)
        _positive_int(self.grad_accumulation, "grad_accumulation")
        for flag in (
            "fp16",
            "bf16",
            "keep_checkpoints",
            "group_by_length",
            "cache_features",
            "gradient_checkpointing",
            "torch_compile",
            "fast_dropout",
        ):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(f"{flag}={short_repr(getattr(self, flag))} must be true or false")
        if self.fp16 and self.bf16:
            raise ConfigError("fp16 and bf16 are both set; choose one mixed-precision mode")
        if self.report_to not in REPORT_TARGETS:
            raise ConfigError(
                f"report_to={short_repr(self.report_to)} is not allowed; choose one of {list(REPORT_TARGETS)}"
            )
        _positive_int(self.save_total_limit, "save_total_limit")
        _positive_int(self.logging_steps, "logging_steps")
        workers = self.dataloader_workers
        _positive_int(workers, "dataloader_workers", minimum=0, maximum=MAX_DATALOADER_WORKERS, why=_WORKERS_REASON)

    @classmethod
    def for_setup(cls, setup: str, **overrides: Any) -> TrainingConfig:
        """The paper's defaults for a named setup (see the module docstring), with `overrides` applied; a setup
        without a row (one a user registered) gets the class defaults, which are ST-A's."""
        unknown = [key for key in overrides if key not in _FIELDS]
        if unknown:
            raise ConfigError(
                f"training config has no setting {short_repr(unknown[0])}.{suggest(str(unknown[0]), _FIELDS)} "
                f"Known keys: {', '.join(_FIELDS)}"
            )
        return cls(**{**_SETUP_DEFAULTS.get(setup, {}), **overrides})

    def replace(self, **changes: Any) -> TrainingConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {"format_version": TRAINING_CONFIG_FORMAT_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainingConfig:
        return cls(**versioned_fields(data, cls, TRAINING_CONFIG_FORMAT_VERSION, "training config"))


_FIELDS = tuple(f.name for f in dataclasses.fields(TrainingConfig))
