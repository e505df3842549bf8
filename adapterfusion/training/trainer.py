"""The HuggingFace Trainer as every run uses it, changed through its public hooks only.

What differs from a stock Trainer, and why:
  * it trains `TrainableWeights(model)` (training/checkpoints.py): checkpoints hold only the trainable parameters,
    and the Trainer's own resume and best-checkpoint loading restore them through the public `load_state_dict`;
    `save_model` writes them atomically;
  * `compute_loss`: the loss is the model's own `.loss`, which already holds the fusion V-regulariser of the same
    step, and a NaN/inf loss stops the run with TrainingError, saying which checkpoint is still good;
  * `create_optimizer`: AdamW groups without weight decay for biases, LayerNorm weights and fusion V matrices
    (training/optimizer.py);
  * `prediction_step` returns the head's logits and the labels only, not every hidden state;
  * `evaluate` is replaced by an `evaluator` where a run scores more than one dev set (MT-A scores every task with
    its own adapter and head and selects on their mean); its metrics are logged and passed to the callbacks (early
    stopping, best checkpoint) as the stock evaluation's are.

transformers' `trainer` module loads the whole training stack (datasets, accelerate, torch.distributed, sympy:
about 2 s), and every `adapterfusion` command imports this module through the CLI. So `Trainer` is imported when
the first AdaptedTrainer is made: until then the class is a plain mixin of our hooks, and `__new__` builds (once) its
subclass that also derives from `transformers.Trainer`. The callbacks' and arguments' modules are light and load at
once.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from transformers import TrainerState, TrainingArguments

from adapterfusion.tasks.instruction import IGNORE_INDEX
from adapterfusion.tasks.spec import LOWER_IS_BETTER
from adapterfusion.training.batching import length_grouping
from adapterfusion.training.checkpoints import TrainableWeights, last_good_checkpoint
from adapterfusion.training.config import TrainingConfig
from adapterfusion.training.errors import TrainingError
from adapterfusion.training.hardware import launched_distributed, training_device
from adapterfusion.training.optimizer import parameter_groups

if TYPE_CHECKING:
    from transformers import Trainer as _TrainerBase
else:
    _TrainerBase = object  # transformers.Trainer joins the bases in _with_trainer, when the first trainer is made

Evaluator = Callable[[], dict[str, float]]


def non_finite_loss_message(loss: float, task_loss: float | None, state: TrainerState, args: TrainingArguments) -> str:
    """Why the run stopped, where, the likely causes and what is left to go back to."""
    epochs = "" if state.epoch is None else f"{state.epoch:.2f} epochs done; "
    fp16 = " (fp16 is on: try bf16=True or fp16=False)" if args.fp16 else ""
    good = last_good_checkpoint(args.output_dir or ".")
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


_WITH_TRAINER: dict[type, type] = {}


def _with_trainer(cls: type) -> type:
    """`cls` (AdaptedTrainer or a subclass) with transformers.Trainer as its next base, made once per class."""
    from transformers import Trainer

    if issubclass(cls, Trainer):
        return cls
    if cls not in _WITH_TRAINER:
        namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
        _WITH_TRAINER[cls] = type(cls.__name__, (cls, Trainer), namespace)
    return _WITH_TRAINER[cls]


class AdaptedTrainer(_TrainerBase):
    """transformers.Trainer for AdaptedModel (see the module docstring for what it changes). `evaluator`, if given,
    replaces the evaluation: it scores the model as it is and returns metrics without the "eval_" prefix."""

    def __new__(cls, *args: Any, **kwargs: Any) -> AdaptedTrainer:
        return object.__new__(_with_trainer(cls))

    def __init__(self, model: nn.Module, *args: Any, evaluator: Evaluator | None = None, **kwargs: Any) -> None:
        view = model if isinstance(model, TrainableWeights) else TrainableWeights(model)
        # transformers.Trainer sets model.config.use_cache to its argument (False) on any model with a config, which
        # an AdaptedModel has (its wrapped model's): the wrapped model would keep it after training, and save it.
        wrapped_config: Any = getattr(getattr(view.model, "model", None), "config", None)
        use_cache = getattr(wrapped_config, "use_cache", None)
        super().__init__(view, *args, **kwargs)
        if use_cache is not None:
            wrapped_config.use_cache = use_cache
        self.evaluator = evaluator
        self._window_tokens = 0  # answer tokens in the optimizer step's micro-batches (a language model's own loss)

    def _answer_targets(self, batch: dict[str, Any]) -> torch.Tensor | None:
        """The tokens a language model's own loss averages over (its labels, shifted on a decoder), or None where the
        loss is a head's, per example."""
        model, labels = self.trained_model, batch.get("labels")
        if getattr(model, "active_head", "") is not None or not isinstance(labels, torch.Tensor) or labels.dim() != 2:
            return None
        causal = getattr(getattr(model, "architecture", None), "causal", False)
        return labels[..., 1:] if causal else labels

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> Any:
        """The optimizer step's micro-batches; counts their answer tokens, so that compute_loss weighs each micro-batch
        by its tokens: with gradient accumulation the step's loss is then the mean over all its answer tokens, as one
        batch of them gives (the mean of micro-batch means weighed micro-batches of few tokens up)."""
        samples, items = super().get_batch_samples(epoch_iterator, num_batches, device)
        targets = [self._answer_targets(batch) for batch in samples]
        self._window_tokens = sum(int((t != IGNORE_INDEX).sum()) for t in targets if t is not None)
        return samples, items

    @property
    def trained_model(self) -> nn.Module:
        """The model being trained (the Trainer holds its TrainableWeights view)."""
        view = self.model
        assert isinstance(view, TrainableWeights)
        return view.model

    def compute_loss(
        self, model: nn.Module, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        outputs = model(**inputs)
        loss = outputs.loss
        if loss is None:
            raise TrainingError("the model returned no loss: the batch has no 'labels' or no head is active")
        targets = self._answer_targets(inputs) if getattr(model, "training", False) else None
        if targets is not None and self._window_tokens and outputs.task_loss is not None:
            # the Trainer divides each micro-batch's loss by the step's micro-batch count: this micro-batch's share of
            # the step's answer tokens, times that count, leaves its token-weighted share of the step's mean
            steps = getattr(self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps)
            weight = (targets != IGNORE_INDEX).sum() * (steps / self._window_tokens)  # a tensor: no device sync
            loss = outputs.task_loss * weight + (loss - outputs.task_loss)  # the fusion regularisation as before
        if not torch.isfinite(loss.detach()).all():
            task_loss = None if outputs.task_loss is None else outputs.task_loss.item()
            raise TrainingError(non_finite_loss_message(loss.item(), task_loss, self.state, self.args))
        return (loss, outputs) if return_outputs else loss

    def create_optimizer(self, model: nn.Module | None = None) -> torch.optim.Optimizer:
        if self.optimizer is None:
            groups = parameter_groups(self.trained_model, self.args.weight_decay)  # type: ignore[arg-type]
            self.optimizer = torch.optim.AdamW(
                groups,
                lr=self.args.learning_rate,
                betas=(self.args.adam_beta1, self.args.adam_beta2),
                eps=self.args.adam_epsilon,
            )
        return self.optimizer

    def prediction_step(
        self, model: nn.Module, inputs: dict[str, Any], prediction_loss_only: bool, ignore_keys: list[str] | None = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        device = self.args.device
        inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        labels = inputs.get("labels")
        with torch.no_grad():
            outputs = model(**inputs)
        loss = outputs.task_loss.detach() if outputs.task_loss is not None else None
        if prediction_loss_only:
            return loss, None, None
        return loss, outputs.logits.detach(), labels

    def evaluate(
        self, eval_dataset: Any = None, ignore_keys: list[str] | None = None, metric_key_prefix: str = "eval"
    ) -> dict[str, float]:
        if self.evaluator is None:
            return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        metrics = {f"{metric_key_prefix}_{name}": value for name, value in self.evaluator().items()}
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """The trainable weights (TrainableWeights.save) and the training arguments, as a checkpoint holds them."""
        if not self.args.should_save:
            return
        folder = Path(output_dir or self.args.output_dir or ".")
        folder.mkdir(parents=True, exist_ok=True)
        view = self.model
        assert isinstance(view, TrainableWeights)
        view.save(folder)
        torch.save(self.args, os.path.join(folder, "training_args.bin"))


def training_arguments(config: TrainingConfig, output_dir: Path, metric: str, **overrides: Any) -> TrainingArguments:
    """The TrainingArguments of a run of `config` that selects its best checkpoint by dev `metric`; `overrides`
    replace single arguments (MT-A counts its epochs in steps and feeds ready-made batches)."""
    on_cpu = training_device().type == "cpu"
    arguments: dict[str, Any] = dict(
        **length_grouping(config.group_by_length),
        output_dir=str(output_dir),
        # Without CUDA, accelerate runs DDP (gloo) only when told it is on CPU; otherwise each rank trains alone.
        # bf16 without CUDA must be told too: HF refuses it unless use_cpu, and then autocasts on the CPU.
        use_cpu=(launched_distributed() or config.bf16) and on_cpu,
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
        greater_is_better=metric not in LOWER_IS_BETTER,
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
        dataloader_pin_memory=not on_cpu,
    )
    return TrainingArguments(**{**arguments, **overrides})
