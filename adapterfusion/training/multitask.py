"""MT-A (Stickland & Murray 2019, the "MT-A" rows of AdapterFusion): N tasks trained in one run, the encoder
fine-tuned jointly with one Pfeiffer adapter and one head per task, and `fusion-mt-a` on top of the result.

Each optimizer step draws ONE task with annealed size-proportional sampling (training/sampling.py:
p_i ∝ N_i^alpha, alpha = 1.0 → 0.2 linearly over the planned epochs, once per epoch as in Stickland &
Murray; an early-stopped run ends above 0.2), activates that task's adapter and head and trains on a batch of that
task. It runs in the loop every setup runs in (training/loop.py `fit`, the HF Trainer), fed by
training/task_batches.py: the task sequence is drawn in step order from a seeded sampler as the steps come, so each
step's batches are a function of the step alone and an interrupted run resumes from its last checkpoint
(`resume=True`) to the uninterrupted run's result. An "epoch" is ceil(sum_i N_i / (batch_size · grad_accumulation))
steps; after each one every task's dev metrics are measured (evaluation.py), the checkpoint with the best mean over
tasks of each task's metric_for_best is restored at the end, and `patience` epochs without a better mean stop the
run.

Run folder `<output_dir>/mt-a/mt-a/seed-<seed>/` (one MT-A run per output folder and seed; config.json says
which tasks it trained):

    config.json, metrics.json, progress.json
    checkpoints/              the Trainer's (trainable weights: encoder, adapters, heads), removed after a
                              successful run unless TrainingConfig.keep_checkpoints
    encoder/                  the fine-tuned encoder (save_pretrained of the unwrapped model) + tokenizer,
                              and mt_a.json: the base encoder, seed, tasks and run folder it came from
    tasks/<task>/adapter/     model.save_adapter
    tasks/<task>/head/        model.save_head
    tasks/<task>/config.json  encoder/task/setup/seed, so AdapterStore.put can take the folder

With a store, each task's adapter + head go in as setup "mt-a", keyed by the BASE encoder like ST-A entries.
Fusion w/ MT-A then runs on the MT-A encoder:

    mt = train_multitask(["mnli", "sst2", "rte"], seed=42, store=store)
    train("rte", "fusion-mt-a", seed=42, encoder=mt.encoder_dir, store=store, setup_options={"sources": ["mnli"]})

`fusion-mt-a` (training/setups.py) reads encoder/mt_a.json to find the base encoder and seed under which the store
holds the MT-A adapters, checks that those entries came from this very run, and is otherwise fusion-st-a.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from torch.utils.data import DataLoader

from adapterfusion._validation import short_repr
from adapterfusion.adapters.config import AdapterConfig
from adapterfusion.encoder_identity import encoder_files
from adapterfusion.encoder_limits import check_max_length
from adapterfusion.encoders import default_pooling
from adapterfusion.errors import ConfigError
from adapterfusion.file_digests import files_sha256
from adapterfusion.heads.pooling import resolve_pooling
from adapterfusion.io.atomic import atomic_write_json
from adapterfusion.run_layout import CONFIG_FILE, MT_A_TASKS_DIR
from adapterfusion.scoring import predict, score
from adapterfusion.tasks.collator import TaskCollator
from adapterfusion.tasks.encoding import encode_task, encoded_sha256
from adapterfusion.tasks.loading import check_data_dir, check_max_examples, load_task_data
from adapterfusion.tasks.registry import resolve_task
from adapterfusion.tasks.spec import TaskSpec, piece_name
from adapterfusion.training.callbacks import StepEpochProgressCallback
from adapterfusion.training.config import TrainingConfig
from adapterfusion.training.errors import RunQualityWarning, TrainingError
from adapterfusion.training.hardware import (
    bfloat16_warning,
    check_precision,
    check_report_to,
    check_trainable_precision,
    launched_distributed,
)
from adapterfusion.training.loop import (
    LoopData,
    TrainingOutcome,
    check_dev_split,
    fit,
    resolve_metric,
    untrained_warning,
)
from adapterfusion.training.resume import resume_point
from adapterfusion.training.run import ENCODER_DIR, Run, RunFolder, remove_run_entry, save_encoder, training_config_for
from adapterfusion.training.run_files import RUN_FORMAT_VERSION
from adapterfusion.training.run_state import claimed_run
from adapterfusion.training.sampling import AnnealedSchedule, StepTasks, TaskSampler, check_schedule
from adapterfusion.training.setups import (
    MARKER_FILE,
    MT_A,
    _check_reduction_factor,
    check_bottleneck,
    check_piece_names,
    check_pooling_option,
    head_config_for,
    read_mt_a_marker,
)
from adapterfusion.training.store import AdapterStore, as_store, check_entry_encoder, encoder_key
from adapterfusion.training.task_batches import TaskBatches, TaskStepCallback, ready_batch
from adapterfusion.training.tokenizer_files import tokenizer_files
from adapterfusion.training.trainer import Evaluator
from adapterfusion.training.vocabulary import check_tokenizer_vocabulary

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

__all__ = ["MARKER_FILE", "MT_A", "MultiTaskResult", "read_mt_a_marker", "train_multitask"]

# What makes a checkpoint belong to an MT-A run: the same tasks, seed, encoder, pieces, sampling, data (its files'
# bytes too) and training.
MT_A_RESUME_KEYS = (
    "tasks",
    "task_specs",
    "seed",
    "encoder_key",
    "adapter",
    "pooling",
    "sampling",
    "training",
    "data",
    "data_files",
    "encoded_sha256",
)


@dataclass
class MultiTaskResult(RunFolder):
    """What one MT-A run produced. `metrics[task]` are the best epoch's dev metrics of each task; `mean_metric`
    the mean over tasks of each task's metric_for_best at that epoch; `task_counts` how often each task was drawn."""

    tasks: list[str]
    seed: int
    run_dir: Path
    metrics: dict[str, dict[str, float]]
    mean_metric: float
    epoch_metrics: list[dict[str, Any]]
    task_counts: dict[str, int]
    train_seconds: float
    wall_seconds: float
    encoder_dir: Path
    pieces: dict[str, dict[str, Path]] = field(default_factory=dict)
    store_paths: dict[str, Path] = field(default_factory=dict)
    model: Any = field(default=None, repr=False)  # the AdaptedModel at the best epoch


@dataclass
class TaskData:
    """The tasks of one MT-A run, encoded: their train and dev sets and what loading and encoding recorded."""

    specs: list[TaskSpec]
    train_sets: list[Any]
    dev_sets: list[Any]
    infos: list[dict[str, Any]]
    truncations: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)  # data that trains a poor model, "<task>: <note>"
    data_files: dict[str, str] = field(default_factory=dict)  # path -> sha256 of every local file read
    encoded: dict[str, dict[str, str]] = field(default_factory=dict)  # task -> split -> encoded_sha256

    @property
    def names(self) -> list[str]:
        return [spec.name for spec in self.specs]

    @property
    def sizes(self) -> list[int]:
        return [len(dataset) for dataset in self.train_sets]


@dataclass(frozen=True)
class StepPlan:
    """How many optimizer steps MT-A takes and which task each trains (drawn in step order from the seeded sampler as
    the steps come, so the same in a resumed run); `sampler` gives each step's alpha and task probabilities."""

    steps_per_epoch: int
    total_steps: int
    sampler: TaskSampler
    step_tasks: StepTasks

    @property
    def planned_epochs(self) -> int:
        return math.ceil(self.total_steps / self.steps_per_epoch)

    def epoch(self, step: int) -> float:
        return step / self.steps_per_epoch


def single_task_refusal(tasks: Sequence[str]) -> str:
    """Why MT-A refuses fewer than two tasks: over one it is no multi-task training but an adapter trained with the
    whole encoder, reported as MT-A beside the paper's MT-A rows, and its fusion-mt-a fuses one adapter."""
    shown = f"{list(tasks)} names one" if tasks else "names none"
    example = f"train({tasks[0]!r}, 'st-a')" if tasks else "train(task, 'st-a')"
    return (
        f"mt-a trains several tasks jointly (one adapter and head each, on an encoder all of them fine-tune); tasks "
        f"{shown}: for one task use st-a ({example}), or give mt-a two or more tasks"
    )


def _resolve_specs(tasks: Sequence[str | TaskSpec]) -> list[TaskSpec]:
    if isinstance(tasks, (str, TaskSpec)) or not isinstance(tasks, Sequence) or not tasks:
        raise TrainingError(f"tasks={tasks!r} must be a non-empty list of task names, e.g. ['mnli', 'rte']")
    specs = [resolve_task(task) for task in tasks]
    generation = [spec.name for spec in specs if spec.is_generation]
    if generation:
        raise TrainingError(
            f"mt-a trains one classification head per task; {generation} are generation tasks, which the language "
            "model's own head scores: train them with st-a (one adapter each) and fuse those with fusion-st-a"
        )
    check_piece_names([spec.name for spec in specs], "mt-a tasks")  # MT-A trains each task once
    if len(specs) < 2:
        raise TrainingError(single_task_refusal([spec.name for spec in specs]))
    return specs


def _check_config(config: TrainingConfig) -> None:
    """What MT-A refuses of a TrainingConfig that train() accepts."""
    if launched_distributed():
        raise TrainingError(
            "mt-a: a distributed launch (torchrun / accelerate launch) would train a different task on each rank in "
            "the same step; run train_multitask in one process"
        )
    if config.max_steps is not None and config.max_steps * config.grad_accumulation > sys.maxsize:
        # MT-A feeds the Trainer one item per micro-batch: len() of more items than an index holds was an OverflowError
        raise TrainingError(
            f"mt-a: max_steps={config.max_steps} times grad_accumulation={config.grad_accumulation} is more "
            f"micro-batches than a run can count (at most {sys.maxsize}); lower max_steps (with patience set, early "
            "stopping ends a long run sooner) or grad_accumulation"
        )
    switches = [name for name in ("fp16", "gradient_checkpointing", "torch_compile") if getattr(config, name)]
    if switches:
        raise TrainingError(
            f"mt-a: {', '.join(switches)} is not supported for MT-A (none of fp16, gradient_checkpointing and "
            "torch_compile is tested with a task switch at every step); set it to False (bf16 works)"
        )


def _check_max_examples(max_examples: Any, names: list[str]) -> None:
    """One max_examples for every task. A dict keyed by task names, as data_dir may be, was told 'unknown split role
    'rte'', as if the task were a misspelt split."""
    keyed = [key for key in max_examples if key in names] if isinstance(max_examples, Mapping) else []
    if keyed:
        raise TrainingError(
            f"max_examples={short_repr(dict(max_examples))} is keyed by the tasks {keyed}; MT-A takes one max_examples "
            "for every task: a number, or a dict by split ({'train': 500, 'validation': 200}). To train on fewer "
            "examples of one task, give that task its own data files"
        )
    check_max_examples(max_examples)


def _check_decoder_pooling(pooling: str | None, encoder: str) -> None:
    """pooling='cls' on a decoder, refused from its config before the run folder is claimed and every task's data
    loaded: the first head added refused it only then (a ConfigError), leaving the run's empty folders."""
    if pooling == "cls" and default_pooling(encoder) == "last":
        raise TrainingError(
            f"mt-a: pooling='cls' reads the first token, which in a decoder ({encoder}) has seen no other token; "
            "pass pooling='last' (the last non-padding token, as transformers' *ForSequenceClassification models do) "
            "or pooling='mean', or leave pooling out (a decoder's heads read its last token)"
        )


def _data_dirs(
    specs: list[TaskSpec], data_dir: str | os.PathLike | Mapping[str, str | os.PathLike | None] | None
) -> dict[str, str | os.PathLike | None]:
    """Each task's data folder (None: its own source), checked before any run folder is written."""
    names = [spec.name for spec in specs]
    if isinstance(data_dir, Mapping):
        unknown = sorted(set(map(str, data_dir)) - set(names))
        if unknown:
            raise TrainingError(
                f"data_dir names {unknown}, which are not among the tasks {names}; key it by the tasks' names"
            )
        folders = {name: data_dir.get(name) for name in names}
    else:
        folders = dict.fromkeys(names, data_dir)
    for name, folder in folders.items():
        if folder is not None and not isinstance(folder, (str, os.PathLike)):
            raise TrainingError(f"data_dir[{name!r}]={folder!r} must be a folder path or None (the task's own source)")
        check_data_dir(folder)
    return folders


def _load_tasks(
    specs: list[TaskSpec],
    data_dirs: Mapping[str, str | os.PathLike | None],
    seed: int,
    max_examples: Any,
    tokenizer: Any,
    max_length: int | None,
    metrics: list[str],
) -> TaskData:
    data = TaskData(specs, [], [], [], [])
    for spec, metric in zip(specs, metrics, strict=True):
        splits, info = load_task_data(spec, data_dirs[spec.name], seed, max_examples=max_examples)
        missing = [split for split in ("train", "validation") if split not in splits]
        if missing:
            raise TrainingError(
                f"task {spec.name!r} loaded no {missing} split; MT-A trains on train and stops early on validation"
            )
        check_dev_split(spec, splits["validation"], metric)  # the mean of every task's metric selects
        encoded, truncation = encode_task(spec, splits, tokenizer, max_length)
        data.train_sets.append(encoded["train"])
        data.dev_sets.append(encoded["validation"])
        data.infos.append(info.to_dict())
        data.data_files.update(files_sha256(info.local_files()))
        data.encoded[spec.name] = {role: encoded_sha256(encoded[role]) for role in ("train", "validation")}
        data.warnings += [f"{spec.name}: {warning}" for warning in info.warnings]
        data.truncations.append(truncation.to_dict())
    return data


def _add_pieces(model: AdaptedModel, names: list[str], specs: list[TaskSpec], adapter: AdapterConfig, pooling: str):
    """One adapter and head per task, all trainable with the encoder. One optimizer covers them all; a step's
    backward reaches only the active task's pieces, and AdamW skips (and does not decay) parameters whose grad is
    None."""
    for name, spec in zip(names, specs, strict=True):
        model.add_head(name, head_config_for(spec, pooling))
        model.add_adapter(name, adapter)
    model.train_adapter(names[0], head=names[0], train_encoder=True)
    for name in names[1:]:
        for parameter in model.adapter_parameters(name) + list(model.heads[name].parameters()):
            parameter.requires_grad_(True)


def _step_plan(sizes: list[int], config: TrainingConfig, seed: int, schedule: AnnealedSchedule) -> StepPlan:
    steps_per_epoch = max(1, math.ceil(sum(sizes) / (config.batch_size * config.grad_accumulation)))
    total_steps = config.max_steps or max(1, math.ceil(config.epochs * steps_per_epoch))
    sampler = TaskSampler(sizes, steps_per_epoch, math.ceil(total_steps / steps_per_epoch), seed, schedule)
    return StepPlan(steps_per_epoch, total_steps, sampler, StepTasks.sampled(sampler, total_steps))


def _task_evaluator(
    model: AdaptedModel,
    names: list[str],
    data: TaskData,
    metrics: list[str],
    collator: TaskCollator,
    config: TrainingConfig,
) -> Evaluator:
    """Every task's dev metrics (and mean dev loss) with its own adapter and head active, scored as every run is
    (evaluation.py), as "<task>/<metric>", and "mean": the mean over tasks of each task's metric_for_best. The batches
    come from a DataLoader in order: its iterator draws a seed from the global RNG, which the dropout of later steps
    depends on, in an uninterrupted and a resumed run alike (the checkpoint saves the RNG after the evaluation)."""
    batch_size = config.eval_batch_size or config.batch_size

    def evaluate() -> dict[str, float]:
        scores: dict[str, float] = {}
        for name, spec, dataset in zip(names, data.specs, data.dev_sets, strict=True):
            model.activate(adapter=name, head=name)
            batches = DataLoader(dataset, batch_size=batch_size, collate_fn=collator)
            predicted = predict(model, batches, config.bf16)
            scores.update({f"{spec.name}/{k}": v for k, v in score(spec, predicted, dataset).items()})  # QA: features
        mean = float(np.mean([scores[f"{spec.name}/{m}"] for spec, m in zip(data.specs, metrics, strict=True)]))
        return {"mean": mean, **scores}

    return evaluate


def _loop_data(
    model: AdaptedModel,
    names: list[str],
    data: TaskData,
    plan: StepPlan,
    metrics: list[str],
    collator: TaskCollator,
    config: TrainingConfig,
) -> LoopData:
    """MT-A as the loop takes it: one ready batch per item in the planned task order, epochs of a fixed number of
    steps (evaluated and checkpointed at each end, and at the last step), the step's task activated before it."""
    steps = plan.steps_per_epoch
    return LoopData(
        train=TaskBatches(
            data.train_sets, plan.step_tasks, config.batch_size, config.grad_accumulation, collator, config.seed
        ),
        eval=dict(zip(data.names, data.dev_sets, strict=True)),  # scored by the evaluator, not the Trainer
        collator=ready_batch,
        metric="mean",
        evaluator=_task_evaluator(model, names, data, metrics, collator, config),
        arguments={
            "per_device_train_batch_size": 1,  # each item is a whole batch of one task
            "train_sampling_strategy": "sequential",
            "max_steps": plan.total_steps,
            "eval_strategy": "steps",
            "eval_steps": steps,
            "save_strategy": "steps",
            "save_steps": steps,
        },
        callbacks=[TaskStepCallback(model, names, plan.step_tasks)],
        progress=functools.partial(StepEpochProgressCallback, steps_per_epoch=steps),
    )


def _epochs(outcome: TrainingOutcome, plan: StepPlan, tasks: list[str]) -> list[dict[str, Any]]:
    """Each evaluation of the run: its epoch, step and alpha, the mean and every task's dev metrics."""
    return [
        {
            "epoch": plan.epoch(int(entry["step"])),
            "step": int(entry["step"]),
            "alpha": plan.sampler.alpha(int(entry["step"]) - 1),
            "mean": entry["mean"],
            "tasks": {task: _task_metrics(entry, task) for task in tasks},
        }
        for entry in outcome.epoch_metrics
    ]


def _task_metrics(logged: Mapping[str, float], task: str) -> dict[str, float]:
    return {key.partition("/")[2]: value for key, value in logged.items() if key.partition("/")[0] == task}


def _train_losses(outcome: TrainingOutcome, plan: StepPlan, tasks: list[str]) -> list[dict[str, Any]]:
    """The logged training losses with the epoch in MT-A's steps, the task of the logged step and its alpha."""
    return [
        {
            "step": entry["step"],
            "epoch": plan.epoch(entry["step"]),
            "loss": entry["loss"],
            "task": tasks[plan.step_tasks[entry["step"] - 1]],
            "alpha": plan.sampler.alpha(entry["step"] - 1),
        }
        for entry in outcome.train_losses
    ]


def _best_epoch(epochs: list[dict[str, Any]], outcome: TrainingOutcome) -> dict[str, Any]:
    """The evaluation whose weights the run ends with (the best checkpoint's; the last without one)."""
    step = None if outcome.best_checkpoint is None else int(outcome.best_checkpoint.rpartition("-")[2])
    return next((epoch for epoch in epochs if epoch["step"] == step), epochs[-1])


def _results(
    model: AdaptedModel,
    data: TaskData,
    plan: StepPlan,
    outcome: TrainingOutcome,
    metrics: list[str],
    seed: int,
    run_dir: Path,
    pieces: Mapping[str, Mapping[str, Path]],
    store_paths: Mapping[str, Path],
) -> dict[str, Any]:
    """What metrics.json records of an MT-A run: each evaluation, the best one (its dev metrics without the loss),
    the training losses, how often each task was drawn and expected to be, the parameters and the saved pieces."""
    epochs = _epochs(outcome, plan, data.names)
    best_epoch = _best_epoch(epochs, outcome)
    counts = np.bincount(np.asarray(plan.step_tasks[: outcome.global_step], dtype=np.int64), minlength=len(data.specs))
    expected = sum((plan.sampler.probabilities(step) for step in range(outcome.global_step)), np.zeros(len(counts)))
    report = model.parameter_report()
    return {
        "setup": MT_A,
        "tasks": data.names,
        "seed": seed,
        "metric_for_best": dict(zip(data.names, metrics, strict=True)),
        "best": {task: {k: v for k, v in best_epoch["tasks"][task].items() if k != "loss"} for task in data.names},
        "best_mean": best_epoch["mean"],
        "best_epoch": best_epoch["epoch"],
        "epochs": epochs,
        "train_losses": _train_losses(outcome, plan, data.names),
        "task_counts": dict(zip(data.names, counts.tolist(), strict=True)),
        "expected_task_counts": dict(zip(data.names, expected.tolist(), strict=True)),
        "train_seconds": outcome.train_seconds,
        "global_step": outcome.global_step,
        "total_steps": plan.total_steps,
        "steps_per_epoch": plan.steps_per_epoch,
        "stopped_early": outcome.stopped_early,
        "warnings": data.warnings,
        "parameters": {
            "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "total": report.total,
            "encoder": report.encoder_total,
        },
        "pieces": {
            "encoder": ENCODER_DIR,
            **{t: {k: str(v.relative_to(run_dir)) for k, v in p.items()} for t, p in pieces.items()},
        },
        "store_paths": {t: str(p) for t, p in store_paths.items()},
    }


def _task_dir(run_dir: Path, task: str) -> Path:
    """Where an MT-A run saves one task's adapter and head (the folder its store entry is put from)."""
    return run_dir / MT_A_TASKS_DIR / task


def _save_task_pieces(
    model: AdaptedModel, name: str, spec: TaskSpec, encoder: str, seed: int, run_dir: Path, encoder_dir: Path
) -> dict[str, Path]:
    task_dir = _task_dir(run_dir, spec.name)
    atomic_write_json(
        task_dir / CONFIG_FILE,
        {
            "format_version": RUN_FORMAT_VERSION,
            "encoder": encoder,
            "task": spec.name,
            "setup": MT_A,
            "seed": seed,
            "mt_a_run": str(run_dir),
            "mt_a_encoder": str(encoder_dir),
        },
    )
    return {
        "dir": task_dir,
        "adapter": Path(model.save_adapter(name, task_dir / "adapter")),
        "head": Path(model.save_head(name, task_dir / "head")),
    }


def _save_encoder(model: AdaptedModel, tokenizer: Any, encoder_dir: Path, adapter_dirs: Mapping[str, Path]) -> None:
    """The fine-tuned encoder through run.save_encoder, which takes a model without adapters: the adapters
    (already on disk) are taken off for the save and loaded back bit-identically."""
    active = (model.active_adapter, model.active_head)
    for name in adapter_dirs:
        model.delete_adapter(name)
    save_encoder(model, tokenizer, encoder_dir)
    for name, directory in adapter_dirs.items():
        model.load_adapter(directory, name=name)
    model.activate(adapter=active[0], head=active[1])


def _save_outputs(
    model: AdaptedModel, names: list[str], data: TaskData, tokenizer: Any, run: Run, store: AdapterStore | None
) -> tuple[dict[str, dict[str, Path]], dict[str, Path]]:
    """Each task's adapter and head, the fine-tuned encoder with its mt_a.json, and the store entries."""
    run_dir, encoder_dir = run.run_dir, run.run_dir / ENCODER_DIR
    pieces = {
        spec.name: _save_task_pieces(model, name, spec, run.encoder, run.seed, run_dir, encoder_dir)
        for name, spec in zip(names, data.specs, strict=True)
    }
    adapters = {name: pieces[spec.name]["adapter"] for name, spec in zip(names, data.specs, strict=True)}
    _save_encoder(model, tokenizer, encoder_dir, adapters)
    atomic_write_json(
        encoder_dir / MARKER_FILE,
        {
            "format_version": RUN_FORMAT_VERSION,
            "base_encoder": run.encoder,
            "base_encoder_key": encoder_key(run.encoder),
            "seed": run.seed,
            "tasks": data.names,
            "run_dir": str(run_dir.resolve()),
        },
    )
    stored = {task: store.put(pieces[task]["dir"].resolve(), overwrite=True) for task in data.names} if store else {}
    return pieces, stored


def _run_config(
    data: TaskData,
    run: Run,
    adapter: AdapterConfig,
    pooling: str,
    schedule: AnnealedSchedule,
    plan: StepPlan,
    metrics: list[str],
    config: TrainingConfig,
) -> dict[str, Any]:
    return {
        "setup": MT_A,
        "tasks": data.names,
        "task_specs": [s.to_dict() for s in data.specs],
        "sizes": dict(zip(data.names, data.sizes, strict=True)),
        "seed": run.seed,
        "encoder": run.encoder,
        "encoder_key": encoder_key(run.encoder),
        "encoder_files": encoder_files(run.source),
        "tokenizer_files": tokenizer_files(run.source),
        "adapter": adapter.to_dict(),
        "pooling": pooling,
        "sampling": {
            **schedule.to_dict(),
            "total_steps": plan.total_steps,
            "steps_per_epoch": plan.steps_per_epoch,
            "planned_epochs": plan.planned_epochs,
            "epoch": "ceil(sum of task train sizes / (batch_size * grad_accumulation)) optimizer steps",
        },
        "metric_for_best": dict(zip(data.names, metrics, strict=True)),
        "selection": "best mean over tasks of each task's metric_for_best on its dev set",
        "training": config.to_dict(),
        "data": data.infos,
        "data_files": data.data_files,
        "encoded_sha256": data.encoded,
        "truncation": data.truncations,
    }


def train_multitask(
    tasks: Sequence[str | TaskSpec],
    seed: int = 42,
    encoder: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | Mapping[str, str | os.PathLike | None] | None = None,
    output_dir: str | os.PathLike = "runs",
    store: AdapterStore | str | os.PathLike | None = None,
    training_config: TrainingConfig | Mapping[str, Any] | None = None,
    max_examples: int | Mapping[str, int] | None = None,
    reduction_factor: float = 16,
    schedule: AnnealedSchedule | None = None,
    pooling: str | None = None,
    overwrite: bool = False,
    resume: bool = False,
) -> MultiTaskResult:
    """Train MT-A on `tasks` (see the module docstring). training_config: a TrainingConfig or overrides of
    TrainingConfig.for_setup("mt-a") (lr 1e-4); `epochs` counts MT-A epochs (sum of task sizes / batch size
    steps); `metric_for_best`, if set, must be a metric of every task. max_examples applies to every task.
    data_dir: one folder for every task, or a mapping of task name to folder where tasks come from different places
    (a task it leaves out, or maps to None, loads from its own source: its data_files, else the Hub).
    pooling: the heads' pooling (None: the encoder's own, see heads/pooling.py). overwrite: replace an earlier
    MT-A run of the same seed in `output_dir` and its store entries; without it they are refused before any work.
    resume: continue an interrupted run of the same settings from the newest complete checkpoint in its
    checkpoints/ folder, as train(resume=True) does (the result equals an uninterrupted run's)."""
    specs = _resolve_specs(tasks)
    names = [piece_name(spec) for spec in specs]
    config = training_config_for(MT_A, training_config, seed)
    _check_max_examples(max_examples, [spec.name for spec in specs])
    data_dirs = _data_dirs(specs, data_dir)
    check_precision(config)  # refuses fp16 without CUDA; warns of bf16 on a CPU without native bf16
    check_report_to(config)
    _check_config(config)
    metrics = [resolve_metric(spec, config) for spec in specs]
    adapter = AdapterConfig.pfeiffer(reduction_factor=_check_reduction_factor(reduction_factor))
    schedule = check_schedule(schedule)  # before any run folder or data
    check_pooling_option(pooling)
    run = Run.open(output_dir, MT_A, MT_A, seed, encoder)
    check_max_length(config.max_length, run.encoder)
    check_bottleneck(reduction_factor, run.encoder)  # before the run folder is claimed and the data load
    _check_decoder_pooling(pooling, run.encoder)
    run_dir, resolved_store = run.run_dir, as_store(store)
    entries = [resolved_store.path(run.encoder, s.name, MT_A, seed) for s in specs] if resolved_store else []
    with claimed_run(run_dir, entries, f"{MT_A} seed {seed} of {[s.name for s in specs]}", overwrite, resume):
        try:
            heads_pooling = resolve_pooling(pooling, run.encoder, default_pooling(run.encoder))
        except ConfigError as err:
            raise TrainingError(str(err)) from None
        tokenizer = run.begin()
        check_tokenizer_vocabulary(tokenizer, run.encoder)
        data = _load_tasks(specs, data_dirs, seed, max_examples, tokenizer, config.max_length, metrics)
        model = run.wrapped_encoder()
        for entry, spec in zip(entries, specs, strict=False):  # another encoder's: refused before anything is replaced
            check_entry_encoder(entry, run.encoder, None, _task_dir(run_dir, spec.name).resolve())
        _add_pieces(model, names, specs, adapter, heads_pooling)
        trained = [parameter for parameter in model.parameters() if parameter.requires_grad]
        check_trainable_precision(trained, run.encoder)
        plan = _step_plan(data.sizes, config, seed, schedule)
        run_config = _run_config(data, run, adapter, heads_pooling, schedule, plan, metrics, config)
        resume_from = resume_point(run_dir, run_config, MT_A_RESUME_KEYS) if resume else None
        if overwrite or resume:  # as in train(): what it resumes stays, checkpoints it passed over go
            run.start_over(keep_checkpoints=resume_from is not None)
        run.write_config(run_config)

        loop_data = _loop_data(model, names, data, plan, metrics, TaskCollator(tokenizer), config)
        _, outcome = fit(model, loop_data, config, run_dir / "checkpoints", run_dir, resume_from)
        model.activate(adapter=names[0], head=names[0])
        model.eval()  # as after its last evaluation

        pieces, store_paths = _save_outputs(model, names, data, tokenizer, run, resolved_store)
        if not config.keep_checkpoints:
            remove_run_entry(run_dir, "checkpoints", ignore_errors=True)
        for found in (untrained_warning(config, outcome.max_steps), bfloat16_warning(trained, run.encoder)):
            if found is not None:  # recorded in metrics.json and said, as train() does
                data.warnings.append(found)
                warnings.warn(found, RunQualityWarning, stacklevel=2)
        results = _results(model, data, plan, outcome, metrics, seed, run_dir, pieces, store_paths)
        written = run.write_metrics(
            {**results, "resumed_from": None if resume_from is None else str(resume_from.relative_to(run_dir))}
        )
        return MultiTaskResult(
            tasks=data.names,
            seed=seed,
            run_dir=run_dir,
            metrics=written["best"],
            mean_metric=written["best_mean"],
            epoch_metrics=written["epochs"],
            task_counts=written["task_counts"],
            train_seconds=outcome.train_seconds,
            wall_seconds=written["wall_seconds"],
            encoder_dir=run_dir / ENCODER_DIR,
            pieces=pieces,
            store_paths=store_paths,
            model=model,
        )
