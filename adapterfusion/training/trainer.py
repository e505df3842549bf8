"""One training run with the HuggingFace Trainer, adapted to AdaptedModel.

What differs from a stock Trainer, and why:
  * the loss is the model's own `.loss`, which already holds the fusion V-regulariser of the same step;
  * AdamW groups exclude biases, LayerNorm weights and fusion V matrices from weight decay (V is pulled
    towards identity by its own regulariser, not towards zero); V is found through the model's sites;
  * checkpoints hold only the trainable parameters (`trainable.safetensors`, by parameter name, so shared
    tensors are no problem) and the best checkpoint is restored from that file;
  * evaluation returns the head's logits and the labels only, not every hidden state;
  * a NaN/inf loss stops the run with TrainingError;
  * a callback sets the fusion temperature step before every optimisation step.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from torch import nn
from transformers import EarlyStoppingCallback, Trainer, TrainerCallback, TrainingArguments

from adapterfusion.io.atomic import atomic_write_bytes
from adapterfusion.tasks.collator import TaskCollator
from adapterfusion.tasks.metrics import dev_metrics
from adapterfusion.tasks.spec import TaskSpec
from adapterfusion.training.config import TrainingConfig
from adapterfusion.training.errors import SlowPrecisionWarning, TrainingError
from adapterfusion.training.fast_dropout import fast_dropout
from adapterfusion.training.hardware import cpu_has_native_bf16
from adapterfusion.training.progress import RunProgress, write_progress

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

TRAINABLE_FILE = "trainable.safetensors"


def fusion_value_parameters(model: AdaptedModel) -> list[nn.Parameter]:
    """Every fusion layer's V matrix, found through the model's sites."""
    return [fusion.value.weight for site in model.sites for fusion in site.fusions.values() if fusion.value is not None]


def parameter_groups(model: AdaptedModel, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups over the trainable parameters: no decay for biases and other 1-D tensors, LayerNorm
    weights, and fusion V matrices; `weight_decay` for the rest. Empty groups are left out."""
    no_decay = {id(p) for p in fusion_value_parameters(model)}
    no_decay |= {id(p) for module in model.modules() if isinstance(module, nn.LayerNorm) for p in module.parameters()}
    trainable = [p for p in model.parameters() if p.requires_grad]
    no_decay |= {id(p) for p in trainable if p.ndim < 2}
    groups = [
        {"params": [p for p in trainable if id(p) not in no_decay], "weight_decay": weight_decay},
        {"params": [p for p in trainable if id(p) in no_decay], "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]


class FusionStepCallback(TrainerCallback):
    """Feeds the global step to the fusion temperature schedule (a pure function of the step)."""

    def __init__(self, model: AdaptedModel) -> None:
        self.model = model

    def on_step_begin(self, args, state, control, **kwargs):
        self.model.set_fusion_step(state.global_step)


class ProgressFileCallback(TrainerCallback):
    """Writes the run's progress.json (training/progress.py) at each epoch's start and end, so a runner in another
    process can show the running job's epoch."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.epochs_ended = 0

    def _write(self, state, epoch: int, phase: str) -> None:
        if not state.is_world_process_zero:  # every rank of a distributed run is at the same place
            return
        write_progress(
            self.run_dir,
            RunProgress(
                epoch, max(1, int(state.num_train_epochs or 1)), state.global_step, state.max_steps, phase, time.time()
            ),
        )

    def on_epoch_begin(self, args, state, control, **kwargs):
        self._write(state, round(state.epoch or 0) + 1, "training")

    def on_epoch_end(self, args, state, control, **kwargs):
        self.epochs_ended += 1
        self._write(state, max(1, math.ceil((state.epoch or 0) - 1e-9)), "evaluating")  # max_steps may end it early

    def on_train_end(self, args, state, control, **kwargs):
        if not self.epochs_ended:  # resumed from its last epoch's checkpoint: no epoch ran, still say where it ended
            self.on_epoch_end(args, state, control, **kwargs)


def _checkpoints_newest_first(checkpoint_dir: str | os.PathLike) -> list[Path]:
    steps = [
        (int(p.name.rpartition("-")[2]), p)
        for p in Path(checkpoint_dir).glob("checkpoint-*")
        if p.name.rpartition("-")[2].isdigit()
    ]
    return [checkpoint for _, checkpoint in sorted(steps, reverse=True)]


def _finite_weights(checkpoint: Path) -> bool:
    """Whether the checkpoint's trainable weights load and are all finite."""
    try:
        tensors = load_file(str(checkpoint / TRAINABLE_FILE))
    except (OSError, SafetensorError):
        return False
    return all(torch.isfinite(t).all() for t in tensors.values())


def last_good_checkpoint(checkpoint_dir: str | os.PathLike) -> Path | None:
    """The newest `checkpoint-<step>` in `checkpoint_dir` whose saved weights are all finite: where to go back to
    after a NaN/inf loss (a checkpoint saved after the weights blew up is no good)."""
    return next((c for c in _checkpoints_newest_first(checkpoint_dir) if _finite_weights(c)), None)


# What HF's _save_checkpoint writes besides our trainable weights; trainer_state.json comes last, after the others.
RESUME_FILES = ("optimizer.pt", "scheduler.pt", "trainer_state.json")


def _complete(checkpoint: Path) -> bool:
    """Whether a resume from `checkpoint` restores everything: weights, optimizer and scheduler state, RNG state
    (one file, or one per rank) and a readable trainer state. A kill mid-save or mid-rotation leaves some out."""
    if not all((checkpoint / name).is_file() for name in RESUME_FILES):
        return False
    if not any(checkpoint.glob("rng_state*.pth")):
        return False
    try:
        json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return True


def resumable_checkpoint(checkpoint_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint with finite weights in `checkpoint_dir` (None if there is none): where an
    interrupted run continues."""
    return next((c for c in _checkpoints_newest_first(checkpoint_dir) if _complete(c) and _finite_weights(c)), None)


def non_finite_loss_message(loss: float, task_loss: float | None, state, args: TrainingArguments) -> str:
    """Why the run stopped, where, the likely causes and what is left to go back to."""
    epochs = "" if state.epoch is None else f"{state.epoch:.2f} epochs done; "
    fp16 = " (fp16 is on: try bf16=True or fp16=False)" if args.fp16 else ""
    good = last_good_checkpoint(args.output_dir)
    kept = (
        f"The last good checkpoint is {good} and is kept"
        if good is not None
        else f"No checkpoint was saved before this step (they are saved at the end of each epoch in {args.output_dir})"
    )
    return (
        f"training stopped: the loss became {loss} in training step {state.global_step + 1} ({epochs}task loss "
        f"{task_loss}). "
        f"Likely causes: learning_rate={args.learning_rate:g} too high, fp16 overflow{fp16}, or a bad batch. "
        f"{kept}; no metrics.json or trained pieces were written for this run."
    )


class AdaptedTrainer(Trainer):
    """transformers.Trainer for AdaptedModel (see the module docstring for what it changes)."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs)
        loss = outputs.loss
        if loss is None:
            raise TrainingError("the model returned no loss: the batch has no 'labels' or no head is active")
        if not torch.isfinite(loss.detach()).all():
            task_loss = None if outputs.task_loss is None else outputs.task_loss.item()
            raise TrainingError(non_finite_loss_message(loss.item(), task_loss, self.state, self.args))
        return (loss, outputs) if return_outputs else loss

    def create_optimizer(self, model=None):
        if self.optimizer is None:
            groups = parameter_groups(model if model is not None else self.model, self.args.weight_decay)
            self.optimizer = torch.optim.AdamW(
                groups,
                lr=self.args.learning_rate,
                betas=(self.args.adam_beta1, self.args.adam_beta2),
                eps=self.args.adam_epsilon,
            )
        return self.optimizer

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        inputs = self._prepare_inputs(inputs)
        labels = inputs.get("labels")
        with torch.no_grad():
            outputs = model(**inputs)
        loss = outputs.task_loss.detach() if outputs.task_loss is not None else None
        if prediction_loss_only:
            return loss, None, None
        return loss, outputs.logits.detach(), labels

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if not self.args.should_save:
            return
        os.makedirs(output_dir, exist_ok=True)
        tensors = {name: p.detach().cpu().contiguous() for name, p in self.model.named_parameters() if p.requires_grad}
        weights = safetensors_bytes(tensors, metadata={"format": "pt"})
        atomic_write_bytes(os.path.join(output_dir, TRAINABLE_FILE), weights)  # a kill never leaves half a checkpoint
        torch.save(self.args, os.path.join(output_dir, "training_args.bin"))

    def _restore(self, checkpoint: str | os.PathLike) -> None:
        path = Path(checkpoint) / TRAINABLE_FILE
        if not path.is_file():
            raise TrainingError(
                f"checkpoint {checkpoint} has no {TRAINABLE_FILE}; it was not written by AdaptedTrainer"
            )
        saved = load_file(str(path))
        parameters = dict(self.model.named_parameters())
        unknown = sorted(set(saved) - set(parameters))
        if unknown:
            raise TrainingError(f"checkpoint {checkpoint} holds parameters this model lacks: {unknown[:5]}")
        with torch.no_grad():
            for name, tensor in saved.items():
                parameters[name].copy_(tensor)

    def _load_best_model(self) -> None:
        self._restore(self.state.best_model_checkpoint)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: nn.Module | None = None) -> None:
        self._restore(resume_from_checkpoint)


@contextlib.contextmanager
def checkpointed_activations(model: nn.Module, enabled: bool = True) -> Iterator[None]:
    """Gradient checkpointing of the wrapped HF encoder's layers while the block runs (TrainingConfig
    .gradient_checkpointing): each layer, its adapter sites included, runs again in the backward pass instead of
    keeping its activations. Non-reentrant, so frozen inputs need not require grad and the replayed RNG gives the same
    dropout masks, hence the same gradients. A model without an encoder (a head on cached features) has nothing to
    checkpoint."""
    from transformers import PreTrainedModel

    encoder = getattr(model, "model", None)
    if not enabled or not isinstance(encoder, PreTrainedModel):
        yield
        return
    if not encoder.supports_gradient_checkpointing:
        raise TrainingError(
            f"gradient_checkpointing=True: {type(encoder).__name__} does not support gradient "
            "checkpointing in this transformers version; set gradient_checkpointing=False"
        )
    had_input_hook = hasattr(encoder, "_require_grads_hook")
    kwargs = {"use_reentrant": False}
    if hasattr(encoder, "activation_checkpointing_enable"):  # transformers >= 5.x; the old names warn there
        encoder.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        encoder.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    try:
        yield
    finally:
        (getattr(encoder, "activation_checkpointing_disable", None) or encoder.gradient_checkpointing_disable)()
        if not had_input_hook and hasattr(encoder, "_require_grads_hook"):
            encoder.disable_input_require_grads()  # the enable call added it; leave the model as it was


@functools.lru_cache(maxsize=1)
def compile_problem() -> str | None:
    """Why torch.compile cannot work here (None if it can): TorchInductor compiles a two-op function, which on
    CPU needs a working C++ compiler. Checked once per process."""
    try:
        torch.compile(lambda x: torch.relu(x) * 2.0 + 1.0)(torch.ones(8))
    except Exception as err:  # noqa: BLE001 - any compiler failure means the same to the user
        return f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
    return None


@dataclass
class TrainingOutcome:
    """What `fit` measured: per-epoch and best-checkpoint dev metrics, training losses, wall time."""

    epoch_metrics: list[dict[str, float]]
    best_metrics: dict[str, float]
    train_losses: list[dict[str, float]]
    train_seconds: float
    global_step: int
    best_checkpoint: str | None
    stopped_early: bool


def launched_distributed() -> bool:
    """True under `torchrun` / `accelerate launch` with more than one process (they set WORLD_SIZE)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def is_main_process() -> bool:
    """False on the non-zero ranks of a distributed launch: they train in step with rank 0 but write no files."""
    return int(os.environ.get("RANK", "0")) == 0


LENGTH_COLUMN = "length"


def _length_grouping(enabled: bool) -> dict[str, Any]:
    """The TrainingArguments keywords for length-grouped batches: `train_sampling_strategy` since transformers 5.x,
    `group_by_length` before."""
    import inspect

    parameters = inspect.signature(TrainingArguments).parameters
    if not enabled:
        return {}
    if "train_sampling_strategy" in parameters:
        return {"train_sampling_strategy": "group_by_length", "length_column_name": LENGTH_COLUMN}
    return {"group_by_length": True, "length_column_name": LENGTH_COLUMN}


def _longest(ids) -> int:
    """Tokens of an example's longest sequence (its choices', for multiple choice)."""
    return max(len(s) for s in ids) if ids and isinstance(ids[0], list) else len(ids)


def with_lengths(dataset):
    """`dataset` with a length column (tokens of the longest sequence of each example, choices included)."""
    return dataset.add_column(LENGTH_COLUMN, [_longest(ids) for ids in dataset["input_ids"]])


def sorted_by_length(dataset):
    """`dataset` in ascending token length (a stable order): evaluation batches, padded to their longest example,
    then pad little (on RTE's dev set 40 % fewer token positions at batch 64). Dev metrics do not depend on order."""
    lengths = [_longest(ids) for ids in dataset["input_ids"]]
    return dataset.select(sorted(range(len(lengths)), key=lengths.__getitem__))


def eval_metrics(logged: dict[str, Any]) -> dict[str, float]:
    """The dev metrics of one logged evaluation, without HF's "eval_" prefix (non-numbers and other keys dropped)."""
    return {
        k.removeprefix("eval_"): float(v)
        for k, v in logged.items()
        if k.startswith("eval_") and isinstance(v, (int, float))
    }


def best_epoch_metrics(state) -> dict[str, float] | None:
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


def check_precision(config: TrainingConfig) -> None:
    """fp16 trains in half precision with a loss scaler on CUDA; on a CPU the HF Trainer accepts the flag and the
    run is not what was asked for, so it is refused here (bf16 runs on CPUs). bf16 on an x86 CPU without native
    bf16 runs, but far slower than fp32, so the user is warned."""
    if config.fp16 and not torch.cuda.is_available():
        raise TrainingError(
            "fp16=True needs a CUDA GPU, and none is visible here (the run would be on the CPU); "
            "use bf16=True (CPUs run bfloat16) or no mixed precision"
        )
    if config.bf16 and not torch.cuda.is_available() and cpu_has_native_bf16() is False:
        warnings.warn(
            "bf16=True on a CPU without AVX512_BF16 or AMX: its bfloat16 matmuls run on a slow path, measured "
            "20-25x slower than fp32 on a 2-core AVX2 machine (benchmarks/README.md); set bf16=False here",
            SlowPrecisionWarning,
            stacklevel=3,
        )


def training_arguments(config: TrainingConfig, output_dir: Path, metric: str) -> TrainingArguments:
    return TrainingArguments(
        **_length_grouping(config.group_by_length),
        output_dir=str(output_dir),
        # Without CUDA, accelerate runs DDP (gloo) only when told it is on CPU; otherwise each rank trains alone.
        # bf16 without CUDA must be told too: HF refuses it unless use_cpu, and then autocasts on the CPU.
        use_cpu=(launched_distributed() or config.bf16) and not torch.cuda.is_available(),
        learning_rate=config.learning_rate,
        num_train_epochs=config.epochs,
        max_steps=config.max_steps if config.max_steps is not None else -1,
        per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=config.eval_batch_size or config.batch_size,
        gradient_accumulation_steps=config.grad_accumulation,
        warmup_steps=config.warmup_ratio,  # a float in [0, 1) is a ratio of the total steps
        lr_scheduler_type="linear",
        weight_decay=config.weight_decay,
        adam_epsilon=config.adam_epsilon,
        max_grad_norm=config.max_grad_norm,
        eval_strategy="epoch",
        save_strategy="epoch",
        save_total_limit=config.save_total_limit,
        restore_callback_states_from_checkpoint=True,  # a resumed run keeps early stopping's patience count
        load_best_model_at_end=True,
        metric_for_best_model=metric,
        greater_is_better=True,
        logging_strategy="steps",
        logging_steps=config.logging_steps,
        seed=config.seed,
        data_seed=config.seed,
        fp16=config.fp16,
        bf16=config.bf16,
        torch_compile=config.torch_compile,
        report_to=[] if config.report_to == "none" else config.report_to,
        remove_unused_columns=False,
        label_names=["labels"],
        dataloader_num_workers=config.dataloader_workers,
        dataloader_pin_memory=torch.cuda.is_available(),
    )


def resolve_metric(task: TaskSpec, config: TrainingConfig) -> str:
    metric = config.metric_for_best or task.metrics[0]
    if metric not in task.metrics:
        raise TrainingError(
            f"metric_for_best={metric!r} is not a metric of task {task.name!r}; it has {list(task.metrics)}"
        )
    return metric


def fit(
    model: AdaptedModel,
    task: TaskSpec,
    train_dataset,
    eval_dataset,
    tokenizer,
    config: TrainingConfig,
    checkpoint_dir: Path,
    progress_dir: Path | None = None,
    collator=None,
    resume_from: Path | None = None,
    extra_callbacks: Sequence[TrainerCallback] = (),
) -> tuple[AdaptedTrainer, TrainingOutcome]:
    """Train the model's trainable parameters; at the end the best checkpoint's weights are in the model.
    With `progress_dir`, its progress.json follows the epochs. `collator` defaults to TaskCollator(tokenizer)
    (cached-feature training passes its own, and its datasets have no token lengths to group by). `resume_from`
    (a checkpoint of this run, see resumable_checkpoint) continues it: our _restore loads the trainable weights,
    HF the optimizer, scheduler, RNG, trainer and callback states, and the resumed epochs see the same batches."""
    metric = resolve_metric(task, config)
    if config.torch_compile and (problem := compile_problem()) is not None:
        raise TrainingError(
            f"torch_compile=True, but torch.compile fails on this machine ({problem}); on CPU "
            "TorchInductor needs a C++ compiler (e.g. apt-get install g++); or set torch_compile=False"
        )
    callbacks: list[TrainerCallback] = [FusionStepCallback(model), *extra_callbacks]
    if progress_dir is not None:
        callbacks.append(ProgressFileCallback(progress_dir))
    if config.patience is not None:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=config.patience))
    grouped = config.group_by_length and collator is None
    if grouped:
        train_dataset = with_lengths(train_dataset)
    if collator is None and eval_dataset is not None:  # dynamic padding: similar lengths side by side pad least
        eval_dataset = sorted_by_length(eval_dataset)
    trainer = AdaptedTrainer(
        model=model,
        args=training_arguments(config.replace(group_by_length=grouped), checkpoint_dir, metric),
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=collator if collator is not None else TaskCollator(tokenizer),
        compute_metrics=lambda prediction: dev_metrics(task, prediction.predictions, prediction.label_ids),
        callbacks=callbacks,
    )
    start = time.perf_counter()
    with checkpointed_activations(model, config.gradient_checkpointing), fast_dropout(config.fast_dropout):
        trainer.train(resume_from_checkpoint=None if resume_from is None else str(resume_from))
    seconds = time.perf_counter() - start
    history = list(trainer.state.log_history)
    best = best_epoch_metrics(trainer.state)
    if best is None:
        best = eval_metrics(trainer.evaluate())
    epochs = [
        {k.removeprefix("eval_"): float(v) for k, v in entry.items() if isinstance(v, (int, float))}
        for entry in history
        if any(k.startswith("eval_") for k in entry)
    ]
    losses = [
        {"step": entry["step"], "epoch": entry.get("epoch"), "loss": entry["loss"]}
        for entry in history
        if "loss" in entry and "eval_loss" not in entry
    ]
    for entry in losses:
        if not math.isfinite(entry["loss"]):
            raise TrainingError(f"training loss became {entry['loss']} at step {entry['step']}")
    planned = trainer.state.max_steps
    outcome = TrainingOutcome(
        epoch_metrics=epochs,
        best_metrics=best,
        train_losses=losses,
        train_seconds=seconds,
        global_step=trainer.state.global_step,
        best_checkpoint=trainer.state.best_model_checkpoint,
        stopped_early=trainer.state.global_step < planned,
    )
    return trainer, outcome
