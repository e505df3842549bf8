"""The one training loop of every setup: `fit` runs the HuggingFace Trainer (training/trainer.py) on `LoopData`.

Why the HF Trainer and not a hand-written loop: it already does what a run needs and our tests pin — gradient
accumulation, mixed precision with loss scaling, torch.compile, DDP under torchrun/accelerate, length-grouped
batches, logging integrations, and checkpoints that resume bit-exactly (optimizer, scheduler, RNG, early-stopping
state). What our setups need beyond it fits its public hooks (see trainer.py and checkpoints.py), so the setups differ
only in the `LoopData` they hand to `fit`:

  * a single-task setup (`single_task_data`): the task's encoded train and dev sets, the Trainer's batching and
    epochs, its evaluation scored by `dev_metrics`;
  * a generation task (`instruction_task_data`): the same, right-padded, with the model's own LM loss on the answer
    tokens and an evaluator that scores the dev set batch by batch (answer_scoring.score_answers);
  * MT-A (training/multitask.py): ready-made batches, each of one task, in the order the task sampler drew them
    (training/task_batches.py); epochs of a fixed number of steps; a callback that activates the step's task; and an
    evaluator that scores every task and selects on the mean.

NaN/inf losses, progress.json, early stopping, best-checkpoint selection and restoring, the fusion step, gradient
checkpointing, fast dropout, checkpoints and resume are therefore written once, here and in the modules it wires.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader
from transformers import EarlyStoppingCallback, TrainerCallback, TrainerState

from adapterfusion.answer_scoring import score_generation
from adapterfusion.io.paths import check_writable_folder
from adapterfusion.tasks.collator import TaskCollator
from adapterfusion.tasks.metrics import LABEL_KINDS, constant_metric_reason, dev_metrics
from adapterfusion.tasks.spec import TaskSpec, suggest
from adapterfusion.training.batching import sorted_by_length, with_lengths
from adapterfusion.training.callbacks import BestCheckpointInRun, FusionStepCallback, ProgressFileCallback
from adapterfusion.training.checkpoints import adopt_legacy_weights, best_checkpoint_name, check_checkpoint_fits
from adapterfusion.training.config import TrainingConfig
from adapterfusion.training.errors import TrainingError
from adapterfusion.training.fast_dropout import fast_dropout
from adapterfusion.training.gradient_checkpointing import checkpointed_activations
from adapterfusion.training.hardware import check_compile
from adapterfusion.training.trainer import AdaptedTrainer, Evaluator, training_arguments


@dataclass
class LoopData:
    """What a setup hands the loop: the training data and its collator, how the dev sets are scored (`metric` names
    the score that selects the best checkpoint), and what the setup changes of the Trainer's arguments and
    callbacks. `progress` makes the callback that keeps progress.json."""

    train: Any
    eval: Any
    collator: Callable[[list[Any]], Any]
    metric: str
    compute_metrics: Callable[[Any], dict[str, float]] | None = None
    evaluator: Evaluator | None = None
    group_by_length: bool = False
    arguments: Mapping[str, Any] = field(default_factory=dict)
    callbacks: Sequence[TrainerCallback] = ()
    progress: Callable[[Path], TrainerCallback] = ProgressFileCallback


@dataclass
class TrainingOutcome:
    """What `fit` measured: per-epoch and best-checkpoint dev metrics, training losses, wall time."""

    epoch_metrics: list[dict[str, float]]
    best_metrics: dict[str, float]
    train_losses: list[dict[str, Any]]
    train_seconds: float
    global_step: int
    max_steps: int
    best_checkpoint: str | None
    stopped_early: bool


def resolve_metric(task: TaskSpec, config: TrainingConfig) -> str:
    """The dev metric that selects a run's best checkpoint: config.metric_for_best, else the task's first metric."""
    metric = config.metric_for_best or task.metrics[0]
    if metric not in task.metrics:
        raise TrainingError(
            f"metric_for_best={metric!r} is not a metric of task {task.name!r}; it has {list(task.metrics)}."
            f"{suggest(metric, task.metrics)} Set metric_for_best to one of them, or leave it out (None: the task's "
            f"first metric, {task.metrics[0]!r})"
        )
    return metric


def untrained_warning(config: TrainingConfig, steps: int) -> str | None:
    """Why a run of `steps` optimizer steps trained nothing, or None: the linear warm-up starts at learning rate 0,
    so a run of a single step with any warm-up leaves every weight as it was (and reports the untrained model)."""
    if steps != 1 or config.warmup_ratio == 0:
        return None
    return (
        f"the run took 1 optimizer step, which the learning-rate warm-up (warmup_ratio={config.warmup_ratio:g}) runs "
        "at learning rate 0, so nothing was trained; set warmup_ratio=0, or train more steps (max_steps, epochs, or "
        "a smaller batch_size)"
    )


def check_dev_split(task: TaskSpec, dev: Any, metric: str) -> None:
    """Before training: refuse a validation split on which the selecting `metric` has one value (or none) whatever
    the model predicts; every evaluation would tie, or be NaN, and the run's result would say nothing."""
    if task.kind not in LABEL_KINDS:
        return
    labels = dev["label"]
    reason = constant_metric_reason(task, metric, labels)
    if reason is None:
        return
    others = [m for m in task.metrics if m != metric and constant_metric_reason(task, m, labels) is None]
    instead = (
        f", or set metric_for_best to {others[0]!r}"
        if others
        else " (a regression task has no metric but the correlations)"
        if task.regression
        else ", or add 'accuracy' to the task's metrics and set metric_for_best='accuracy'"
    )
    raise TrainingError(
        f"task {task.name!r}: the validation split cannot select a checkpoint by {metric!r}: {reason}. Give a "
        f"validation split with varied labels (more rows, or a larger max_examples['validation']){instead}"
    )


def single_task_data(
    task: TaskSpec, train: Any, dev: Any, tokenizer: Any, config: TrainingConfig, collator: Any = None
) -> LoopData:
    """One task's encoded splits as the loop takes them. `collator` defaults to TaskCollator(tokenizer) with
    dynamic padding: training batches grouped by length when config.group_by_length, dev examples in ascending
    length. Cached-feature training passes its own collator; its datasets have no token lengths."""
    grouped = config.group_by_length and collator is None
    return LoopData(
        train=with_lengths(train) if grouped else train,
        eval=sorted_by_length(dev) if collator is None and dev is not None else dev,
        collator=collator if collator is not None else TaskCollator(tokenizer),
        metric=resolve_metric(task, config),
        compute_metrics=lambda prediction: dev_metrics(task, prediction.predictions, prediction.label_ids),
        group_by_length=grouped,
    )


def instruction_task_data(
    task: TaskSpec, train: Any, dev: Any, tokenizer: Any, config: TrainingConfig, model: Any
) -> LoopData:
    """A generation task's encoded splits as the loop takes them: batches right-padded (each row's positions start
    at 0), the loss the wrapped language model's own, and dev metrics from `score_answers` in place of the Trainer's
    evaluation, which would gather every batch's [rows, seq, vocab] logits. Exact match generates, so it is scored
    only when the task lists it among its metrics."""
    grouped = config.group_by_length
    collator = TaskCollator(tokenizer, padding_side="right")
    dev_set = sorted_by_length(dev)
    batch_size = config.eval_batch_size or config.batch_size

    def evaluate() -> dict[str, float]:
        batches = DataLoader(dev_set, batch_size=batch_size, collate_fn=collator)
        return score_generation(model, batches, task, tokenizer, bf16=config.bf16)

    return LoopData(
        train=with_lengths(train) if grouped else train,
        eval=dev_set,
        collator=collator,
        metric=resolve_metric(task, config),
        evaluator=evaluate,
        group_by_length=grouped,
    )


def eval_metrics(logged: Mapping[str, Any]) -> dict[str, float]:
    """The dev metrics of one logged evaluation, without HF's "eval_" prefix (non-numbers and other keys dropped)."""
    return {
        k.removeprefix("eval_"): float(v)
        for k, v in logged.items()
        if k.startswith("eval_") and isinstance(v, (int, float))
    }


def best_epoch_metrics(state: TrainerState) -> dict[str, float] | None:
    """The dev metrics logged at the best checkpoint's step (the weights load_best_model_at_end restored), or None
    when no logged evaluation matches it. Spares a second evaluation of the same weights at the end of a run."""
    checkpoint = state.best_model_checkpoint
    if checkpoint is None or not Path(checkpoint).name.startswith("checkpoint-"):
        return None
    step = int(Path(checkpoint).name.removeprefix("checkpoint-"))
    for entry in reversed(state.log_history):
        if entry.get("step") == step and any(k.startswith("eval_") for k in entry):
            return eval_metrics(entry)
    return None


def fit(
    model: Any,
    data: LoopData,
    config: TrainingConfig,
    checkpoint_dir: Path,
    progress_dir: Path | None = None,
    resume_from: Path | None = None,
    extra_callbacks: Sequence[TrainerCallback] = (),
) -> tuple[AdaptedTrainer, TrainingOutcome]:
    """Train the model's trainable parameters on `data`; at the end the best checkpoint's weights are in the model.
    With `progress_dir`, its progress.json follows the epochs. `resume_from` (a checkpoint of this run, see
    training/resume.py) continues it: the Trainer restores the trainable weights (through TrainableWeights), the
    optimizer, scheduler, RNG, trainer and callback states, and the resumed steps see the same batches."""
    check_compile(config)
    if not any(parameter.requires_grad for parameter in model.parameters()):  # AdamW's raw "empty parameter list"
        raise TrainingError(
            f"nothing to train: no parameter of the {type(model).__name__} requires grad, so the optimizer would have "
            "nothing to step; a setup's recipe must leave the parameters it trains (its SetupPlan.trainable) with "
            "requires_grad=True"
        )
    check_writable_folder(checkpoint_dir, "the run's checkpoints folder", error=TrainingError)
    callbacks: list[TrainerCallback] = [FusionStepCallback(model), *data.callbacks, *extra_callbacks]
    if progress_dir is not None:
        callbacks.append(data.progress(progress_dir))
    if config.patience is not None:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=config.patience))
    if resume_from is not None and (best := best_checkpoint_name(resume_from)) is not None:
        callbacks.append(BestCheckpointInRun(best))
    arguments = training_arguments(
        config.replace(group_by_length=data.group_by_length),
        checkpoint_dir,
        data.metric,
        **{**_eval_batch_within(data, config), **data.arguments},
    )
    trainer = AdaptedTrainer(
        model=model,
        args=arguments,
        train_dataset=data.train,
        eval_dataset=data.eval,
        data_collator=data.collator,
        compute_metrics=data.compute_metrics,
        callbacks=callbacks,
        evaluator=data.evaluator,
    )
    if resume_from is not None:
        adopt_legacy_weights(resume_from)
        check_checkpoint_fits(model, resume_from)
    start = time.perf_counter()
    with checkpointed_activations(model, config.gradient_checkpointing), fast_dropout(config.fast_dropout):
        trainer.train(resume_from_checkpoint=None if resume_from is None else str(resume_from))
    return trainer, _outcome(trainer, time.perf_counter() - start)


def _eval_batch_within(data: LoopData, config: TrainingConfig) -> dict[str, int]:
    """The Trainer's evaluation batch size no larger than the dev set: the same one batch of it, where its evaluation
    would repeat each batch's loss eval_batch_size times (10**15 rows asks for petabytes, a raw allocator error).
    An `evaluator` batches the dev sets itself."""
    size = config.eval_batch_size or config.batch_size
    dev = data.eval
    rows = len(dev) if data.evaluator is None and dev is not None and hasattr(dev, "__len__") else None
    return {"per_device_eval_batch_size": max(1, rows)} if rows is not None and size > rows else {}


def _outcome(trainer: AdaptedTrainer, seconds: float) -> TrainingOutcome:
    history = list(trainer.state.log_history)
    best = best_epoch_metrics(trainer.state)
    if best is None:
        best = eval_metrics(trainer.evaluate())
    epochs = [
        {k.removeprefix("eval_"): float(v) for k, v in entry.items() if isinstance(v, (int, float))}
        for entry in history
        if any(k.startswith("eval_") for k in entry)
    ]
    losses: list[dict[str, Any]] = [
        {"step": entry["step"], "epoch": entry.get("epoch"), "loss": entry["loss"]}
        for entry in history
        if "loss" in entry and "eval_loss" not in entry
    ]
    for entry in losses:
        if not math.isfinite(entry["loss"]):
            raise TrainingError(f"training loss became {entry['loss']} at step {entry['step']}")
    state = trainer.state
    return TrainingOutcome(
        epoch_metrics=epochs,
        best_metrics=best,
        train_losses=losses,
        train_seconds=seconds,
        global_step=state.global_step,
        max_steps=state.max_steps,
        best_checkpoint=state.best_model_checkpoint,
        stopped_early=state.global_step < state.max_steps,
    )
