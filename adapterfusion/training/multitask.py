"""MT-A (Stickland & Murray 2019, the "MT-A" rows of AdapterFusion): N tasks trained in one run, the encoder
fine-tuned jointly with one Pfeiffer adapter and one head per task, and `fusion-mt-a` on top of the result.

Each optimizer step draws ONE task with annealed size-proportional sampling (training/sampling.py:
p_i ∝ N_i^alpha, alpha = 1.0 → 0.2 linearly over the planned epochs, once per epoch as in Stickland &
Murray; an early-stopped run ends above 0.2), activates that task's adapter and head and
trains on a batch of that task. The HF Trainer cannot switch tasks per step, so this is a short hand-written
loop over the existing pieces: TrainingConfig, AdamW with `parameter_groups` (no decay for biases/LayerNorm),
linear warm-up/decay, NaN/inf loss → TrainingError. An "epoch" is ceil(sum_i N_i / (batch_size ·
grad_accumulation)) steps; after each one every task's dev metric is measured, the trainable weights of the
best mean dev metric (over tasks) are kept in memory and restored at the end, and `patience` epochs without a
better mean stop the run.

Run folder `<output_dir>/mt-a/mt-a/seed-<seed>/` (one MT-A run per output folder and seed; config.json says
which tasks it trained):

    config.json, metrics.json
    encoder/                  the fine-tuned encoder (save_pretrained of the unwrapped model) + tokenizer,
                              and mt_a.json: the base encoder, seed, tasks and run folder it came from
    tasks/<task>/adapter/     model.save_adapter
    tasks/<task>/head/        model.save_head
    tasks/<task>/config.json  encoder/task/setup/seed, so AdapterStore.put can take the folder

With a store, each task's adapter + head go in as setup "mt-a", keyed by the BASE encoder like ST-A entries.
Fusion w/ MT-A then runs on the MT-A encoder:

    mt = train_multitask(["mnli", "sst2", "rte"], seed=42, store=store)
    train("rte", "fusion-mt-a", seed=42, encoder=mt.encoder_dir, store=store, setup_options={"sources": ["mnli"]})

`fusion-mt-a` reads encoder/mt_a.json to find the base encoder and seed under which the store holds the MT-A
adapters, checks that those entries came from this very run, and is otherwise fusion-st-a.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch

from adapterfusion.adapters.config import AdapterConfig
from adapterfusion.encoder_limits import check_max_length
from adapterfusion.errors import ConfigError
from adapterfusion.evaluation import predict, score
from adapterfusion.heads.pooling import resolve_pooling
from adapterfusion.io.atomic import atomic_write_json
from adapterfusion.tasks.collator import TaskCollator
from adapterfusion.tasks.encoding import encode_task
from adapterfusion.tasks.loading import check_data_dir, check_max_examples, load_task_data
from adapterfusion.tasks.registry import resolve_task
from adapterfusion.tasks.spec import TaskSpec
from adapterfusion.training.config import TrainingConfig
from adapterfusion.training.errors import TrainingError
from adapterfusion.training.fast_dropout import fast_dropout
from adapterfusion.training.progress import RunProgress, write_progress
from adapterfusion.training.run import ENCODER_DIR, Run, RunFolder, save_encoder, training_config_for
from adapterfusion.training.run_files import RUN_FORMAT_VERSION, read_json
from adapterfusion.training.run_state import claimed_run
from adapterfusion.training.sampling import AnnealedSchedule, TaskSampler
from adapterfusion.training.setups import (
    Setup,
    SetupContext,
    SetupPlan,
    _check_reduction_factor,
    _fusion_st_a,
    check_fusion_options,
    head_config_for,
    piece_name,
    register_setup,
)
from adapterfusion.training.store import ENTRY_FILE, AdapterStore, as_store, encoder_key
from adapterfusion.training.trainer import check_precision, parameter_groups, resolve_metric

MT_A = "mt-a"
MARKER_FILE = "mt_a.json"


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


def _resolve_specs(tasks: Sequence[str | TaskSpec]) -> list[TaskSpec]:
    if isinstance(tasks, (str, TaskSpec)) or not isinstance(tasks, Sequence) or not tasks:
        raise TrainingError(f"tasks={tasks!r} must be a non-empty list of task names, e.g. ['mnli', 'rte']")
    specs = [resolve_task(task) for task in tasks]
    names = [piece_name(spec) for spec in specs]
    if len(set(names)) != len(names):
        raise TrainingError(f"tasks {[s.name for s in specs]} name a task twice; MT-A trains each task once")
    return specs


def _batches(dataset, batch_size: int, collator: TaskCollator, seed: int) -> Iterator[dict[str, torch.Tensor]]:
    """Endless shuffled batches of one task: a new seeded permutation each pass over its training data."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=batch_size, shuffle=True, generator=generator, collate_fn=collator
        )
        yield from loader


def _evaluate(
    model, names: list[str], specs: list[TaskSpec], dev_sets: list, collator: TaskCollator, batch_size: int, bf16: bool
) -> dict[str, dict[str, float]]:
    """Every task's dev metrics (and mean dev loss) with its own adapter and head active, scored as every run is
    (evaluation.py). The batches come from a DataLoader in order: its iterator draws a seed from the global RNG,
    which the dropout of later epochs depends on, so the same seed gives the same run as before."""
    results = {}
    for name, spec, dataset in zip(names, specs, dev_sets, strict=True):
        model.activate(adapter=name, head=name)
        batches = torch.utils.data.DataLoader(dataset, batch_size=batch_size, collate_fn=collator)
        results[spec.name] = score(spec, predict(model, batches, bf16=bf16))
    return results


def _save_task_pieces(
    model, name: str, spec: TaskSpec, encoder: str, seed: int, run_dir: Path, encoder_dir: Path
) -> dict[str, Path]:
    task_dir = run_dir / "tasks" / spec.name
    atomic_write_json(
        task_dir / "config.json",
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


def _save_encoder(model, tokenizer, encoder_dir: Path, adapter_dirs: Mapping[str, Path]) -> None:
    """The fine-tuned encoder through run.save_encoder, which takes a model without adapters: the adapters
    (already on disk) are taken off for the save and loaded back bit-identically."""
    active = (model.active_adapter, model.active_head)
    for name in adapter_dirs:
        model.delete_adapter(name)
    save_encoder(model, tokenizer, encoder_dir)
    for name, directory in adapter_dirs.items():
        model.load_adapter(directory, name=name)
    model.activate(adapter=active[0], head=active[1])


def train_multitask(
    tasks: Sequence[str | TaskSpec],
    seed: int = 42,
    encoder: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    output_dir: str | os.PathLike = "runs",
    store: AdapterStore | str | os.PathLike | None = None,
    training_config: TrainingConfig | Mapping[str, Any] | None = None,
    max_examples: int | Mapping[str, int] | None = None,
    reduction_factor: float = 16,
    schedule: AnnealedSchedule | None = None,
    pooling: str | None = None,
    overwrite: bool = False,
) -> MultiTaskResult:
    """Train MT-A on `tasks` (see the module docstring). training_config: a TrainingConfig or overrides of
    TrainingConfig.for_setup("mt-a") (lr 1e-4); `epochs` counts MT-A epochs (sum of task sizes / batch size
    steps); `metric_for_best`, if set, must be a metric of every task. max_examples applies to every task.
    pooling: the heads' pooling (None: the encoder's own, see heads/pooling.py). overwrite: replace an earlier
    MT-A run of the same seed in `output_dir` and its store entries; without it they are refused before any work."""
    from tqdm.auto import tqdm
    from transformers import get_linear_schedule_with_warmup

    specs = _resolve_specs(tasks)
    names = [piece_name(spec) for spec in specs]
    config = training_config_for(MT_A, training_config, seed)
    if config.fp16:
        raise TrainingError("mt-a: fp16 needs loss scaling, which the MT-A loop does not do; use bf16=True or neither")
    check_max_examples(max_examples)
    check_data_dir(data_dir)
    check_precision(config)  # fp16 is refused above; this warns of bf16 on a CPU without native bf16
    if config.gradient_checkpointing or config.torch_compile:
        raise TrainingError(
            "mt-a: the MT-A loop supports neither gradient_checkpointing nor torch_compile (the "
            "Trainer-based setups do); set both to False"
        )
    metrics_for_best = [resolve_metric(spec, config) for spec in specs]
    adapter_config = AdapterConfig.pfeiffer(reduction_factor=_check_reduction_factor(reduction_factor))
    schedule = schedule or AnnealedSchedule()
    run = Run.open(output_dir, MT_A, MT_A, seed, encoder)
    check_max_length(config.max_length, run.encoder)
    run_dir, encoder, encoder_dir, store = run.run_dir, run.encoder, run.run_dir / ENCODER_DIR, as_store(store)
    entries = [store.path(encoder, spec.name, MT_A, seed) for spec in specs] if store is not None else []
    with claimed_run(run_dir, entries, f"{MT_A} seed {seed} of {[s.name for s in specs]}", overwrite, False):
        try:
            pooling = resolve_pooling(pooling, encoder)
        except ConfigError as err:
            raise TrainingError(str(err)) from None

        tokenizer = run.begin()
        train_sets, dev_sets, infos, truncations = [], [], [], []
        for spec in specs:
            data, info = load_task_data(spec, data_dir, seed, max_examples=max_examples)
            missing = [split for split in ("train", "validation") if split not in data]
            if missing:
                raise TrainingError(
                    f"task {spec.name!r} loaded no {missing} split; MT-A trains on train and stops early on validation"
                )
            encoded, truncation = encode_task(spec, data, tokenizer, config.max_length)
            train_sets.append(encoded["train"])
            dev_sets.append(encoded["validation"])
            infos.append(info.to_dict())
            truncations.append(truncation.to_dict())
        sizes = [len(dataset) for dataset in train_sets]

        model = run.wrapped_encoder()
        for name, spec in zip(names, specs, strict=True):
            model.add_head(name, head_config_for(spec, pooling))
            model.add_adapter(name, adapter_config)
        # One optimizer over the encoder and every task's adapter and head; a step's backward reaches only the
        # active task's pieces, and AdamW skips (and does not decay) parameters whose grad is None.
        model.train_adapter(names[0], head=names[0], train_encoder=True)
        for name in names[1:]:
            for parameter in model.adapter_parameters(name) + list(model.heads[name].parameters()):
                parameter.requires_grad_(True)
        trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model.to(device)
        autocast = {"device_type": device.type, "dtype": torch.bfloat16, "enabled": config.bf16}  # training steps

        steps_per_epoch = max(1, math.ceil(sum(sizes) / (config.batch_size * config.grad_accumulation)))
        total_steps = config.max_steps or max(1, math.ceil(config.epochs * steps_per_epoch))
        optimizer = torch.optim.AdamW(
            parameter_groups(model, config.weight_decay), lr=config.learning_rate, eps=config.adam_epsilon
        )
        scheduler = get_linear_schedule_with_warmup(
            optimizer, math.ceil(config.warmup_ratio * total_steps), total_steps
        )
        planned_epochs = math.ceil(total_steps / steps_per_epoch)
        sampler = TaskSampler(sizes, steps_per_epoch, planned_epochs, seed, schedule)
        collator = TaskCollator(tokenizer)
        streams = [_batches(dataset, config.batch_size, collator, seed + i) for i, dataset in enumerate(train_sets)]
        eval_batch_size = config.eval_batch_size or config.batch_size

        if overwrite:  # the earlier run's end marker goes now: a crash from here on must not leave it looking finished
            run.metrics_path.unlink(missing_ok=True)
        run.write_config(
            {
                "setup": MT_A,
                "tasks": [s.name for s in specs],
                "task_specs": [s.to_dict() for s in specs],
                "sizes": dict(zip([s.name for s in specs], sizes, strict=True)),
                "seed": seed,
                "encoder": encoder,
                "encoder_key": encoder_key(encoder),
                "adapter": adapter_config.to_dict(),
                "pooling": pooling,
                "sampling": {
                    **schedule.to_dict(),
                    "total_steps": total_steps,
                    "steps_per_epoch": steps_per_epoch,
                    "planned_epochs": planned_epochs,
                    "epoch": "ceil(sum of task train sizes / (batch_size * grad_accumulation)) optimizer steps",
                },
                "metric_for_best": dict(zip([s.name for s in specs], metrics_for_best, strict=True)),
                "selection": "best mean over tasks of each task's metric_for_best on its dev set",
                "training": config.to_dict(),
                "data": infos,
                "truncation": truncations,
            }
        )

        epochs: list[dict[str, Any]] = []
        losses: list[dict[str, Any]] = []
        window: list[float] = []
        best_mean, best_state, best_epoch, bad_epochs, stopped_early = -math.inf, None, None, 0, False
        expected = np.zeros(len(specs))
        step = 0
        start = time.perf_counter()
        progress = tqdm(total=total_steps, desc=f"mt-a ({len(specs)} tasks)", leave=False)
        with fast_dropout(config.fast_dropout):  # the whole loop: a checkpointed forward is recomputed in backward
            for step in range(1, total_steps + 1):
                if (step - 1) % steps_per_epoch == 0:  # an epoch begins: progress.json for live displays
                    write_progress(
                        run_dir,
                        RunProgress(
                            (step - 1) // steps_per_epoch + 1,
                            planned_epochs,
                            step - 1,
                            total_steps,
                            "training",
                            time.time(),
                        ),
                    )
                expected += sampler.probabilities(step - 1)
                index = sampler.draw(step - 1)
                model.train()
                model.activate(adapter=names[index], head=names[index])
                step_loss = 0.0
                for _ in range(config.grad_accumulation):
                    batch = {k: v.to(device) for k, v in next(streams[index]).items()}
                    with torch.autocast(**autocast):
                        loss = model(**batch).loss
                    if not torch.isfinite(loss.detach()):
                        raise TrainingError(
                            f"loss is {loss.item()} at step {step} (task {specs[index].name!r}); lower "
                            "learning_rate, turn bf16 off or check the data"
                        )
                    (loss / config.grad_accumulation).backward()
                    step_loss += loss.item() / config.grad_accumulation
                if config.max_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(list(trainable.values()), config.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                window.append(step_loss)
                progress.update(1)
                progress.set_postfix(task=specs[index].name, loss=f"{step_loss:.4f}")
                if step % config.logging_steps == 0 or step == total_steps:
                    losses.append(
                        {
                            "step": step,
                            "epoch": step / steps_per_epoch,
                            "loss": sum(window) / len(window),
                            "task": specs[index].name,
                            "alpha": sampler.alpha(step - 1),
                        }
                    )
                    window = []
                if step % steps_per_epoch and step != total_steps:
                    continue
                write_progress(
                    run_dir,
                    RunProgress(
                        math.ceil(step / steps_per_epoch), planned_epochs, step, total_steps, "evaluating", time.time()
                    ),
                )
                scores = _evaluate(model, names, specs, dev_sets, collator, eval_batch_size, config.bf16)
                mean = float(np.mean([scores[s.name][m] for s, m in zip(specs, metrics_for_best, strict=True)]))
                epochs.append(
                    {
                        "epoch": step / steps_per_epoch,
                        "step": step,
                        "alpha": sampler.alpha(step - 1),
                        "mean": mean,
                        "tasks": scores,
                    }
                )
                if mean > best_mean:
                    best_mean, best_epoch, bad_epochs = mean, len(epochs) - 1, 0
                    best_state = {n: p.detach().to("cpu", copy=True) for n, p in trainable.items()}
                else:
                    bad_epochs += 1
                    if config.patience is not None and bad_epochs >= config.patience:
                        stopped_early = step < total_steps
                        break
        progress.close()
        train_seconds = time.perf_counter() - start
        with torch.no_grad():
            for n, p in trainable.items():
                p.copy_(best_state[n])
        model.activate(adapter=names[0], head=names[0])
        model.eval()  # as after its last evaluation

        pieces = {
            spec.name: _save_task_pieces(model, name, spec, encoder, seed, run_dir, encoder_dir)
            for name, spec in zip(names, specs, strict=True)
        }
        _save_encoder(
            model,
            tokenizer,
            encoder_dir,
            {name: pieces[spec.name]["adapter"] for name, spec in zip(names, specs, strict=True)},
        )
        atomic_write_json(
            encoder_dir / MARKER_FILE,
            {
                "format_version": RUN_FORMAT_VERSION,
                "base_encoder": encoder,
                "base_encoder_key": encoder_key(encoder),
                "seed": seed,
                "tasks": [s.name for s in specs],
                "run_dir": str(run_dir.resolve()),
            },
        )
        store_paths = (
            {spec.name: store.put(pieces[spec.name]["dir"].resolve(), overwrite=True) for spec in specs}
            if store
            else {}
        )

        task_names = [s.name for s in specs]
        best = {
            name: {k: v for k, v in epochs[best_epoch]["tasks"][name].items() if k != "loss"} for name in task_names
        }
        report = model.parameter_report()
        metrics = run.write_metrics(
            {
                "setup": MT_A,
                "tasks": task_names,
                "seed": seed,
                "metric_for_best": dict(zip(task_names, metrics_for_best, strict=True)),
                "best": best,
                "best_mean": best_mean,
                "best_epoch": epochs[best_epoch]["epoch"],
                "epochs": epochs,
                "train_losses": losses,
                "task_counts": dict(zip(task_names, sampler.counts, strict=True)),
                "expected_task_counts": dict(zip(task_names, expected.tolist(), strict=True)),
                "train_seconds": train_seconds,
                "global_step": step,
                "total_steps": total_steps,
                "steps_per_epoch": steps_per_epoch,
                "stopped_early": stopped_early,
                "parameters": {
                    "trainable": sum(p.numel() for p in trainable.values()),
                    "total": report.total,
                    "encoder": report.encoder_total,
                },
                "pieces": {
                    "encoder": "encoder",
                    **{t: {k: str(v.relative_to(run_dir)) for k, v in p.items()} for t, p in pieces.items()},
                },
                "store_paths": {t: str(p) for t, p in store_paths.items()},
            }
        )
        return MultiTaskResult(
            tasks=task_names,
            seed=seed,
            run_dir=run_dir,
            metrics=best,
            mean_metric=best_mean,
            epoch_metrics=epochs,
            task_counts=metrics["task_counts"],
            train_seconds=train_seconds,
            wall_seconds=metrics["wall_seconds"],
            encoder_dir=encoder_dir,
            pieces=pieces,
            store_paths=store_paths,
            model=model,
        )


# ---- the setups ------------------------------------------------------------------------------------------
def read_mt_a_marker(encoder: str | os.PathLike) -> dict[str, Any]:
    """The mt_a.json an MT-A run writes beside its fine-tuned encoder (base encoder, seed, tasks, run folder)."""
    marker = Path(encoder) / MARKER_FILE
    if not marker.is_file():
        raise TrainingError(
            f"fusion-mt-a runs on the encoder an MT-A run fine-tuned; {encoder} has no {MARKER_FILE}. Pass "
            "encoder=<mt-a run>/encoder (MultiTaskResult.encoder_dir), after train_multitask(..., store=store)"
        )
    return read_json(marker, "train the MT-A run again (train_multitask) to write its encoder/ anew")


def _fusion_mt_a(model, context: SetupContext) -> SetupPlan:
    """fusion-st-a over the MT-A adapters, on the MT-A encoder (context.encoder); the store entries are keyed by
    the base encoder and must come from the run that wrote this encoder."""
    if context.store is None:
        raise TrainingError(
            "fusion-mt-a needs store=AdapterStore(...) holding the MT-A adapters (train_multitask(..., store=store))"
        )
    marker = read_mt_a_marker(context.encoder)
    sources = context.options["sources"]
    if isinstance(sources, str) or not isinstance(sources, Sequence):
        raise TrainingError(f"fusion-mt-a: sources={sources!r} must be a list of task names")
    wanted = list(dict.fromkeys([*sources, context.task.name]))
    outside = [task for task in wanted if task not in marker["tasks"]]
    if outside:
        raise TrainingError(f"fusion-mt-a: the MT-A run {marker['run_dir']} trained {marker['tasks']}, not {outside}")
    seed = marker["seed"] if context.options["adapter_seed"] is None else context.options["adapter_seed"]
    for task in wanted:
        entry = context.store.path(marker["base_encoder"], task, MT_A, seed) / ENTRY_FILE
        source = (
            read_json(entry, "put the MT-A run's adapters into the store again").get("source")
            if entry.is_file()
            else None
        )
        if source is not None and Path(source).resolve().parent.parent != Path(marker["run_dir"]):
            raise TrainingError(
                f"fusion-mt-a: the store's MT-A adapter of {task!r} (seed {seed}) came from {source}, not from the "
                f"run {marker['run_dir']} that fine-tuned {context.encoder}; put that run's adapters in the store"
            )
    options = {**context.options, "adapter_setup": MT_A, "adapter_seed": seed}
    plan = _fusion_st_a(model, dataclasses.replace(context, encoder=marker["base_encoder"], options=options))
    plan.notes.append(f"on the MT-A encoder {context.encoder} (run {marker['run_dir']})")
    return plan


def _mt_a_single(*_: object) -> NoReturn:
    """train(task, 'mt-a') is refused as it resolves its options, before any check of earlier runs or any work."""
    raise TrainingError(
        "mt-a trains all its tasks in one run: call train_multitask([task, ...]) instead of train(task, 'mt-a')"
    )


register_setup(
    Setup(
        MT_A,
        _mt_a_single,
        {},
        "multi-task adapters + jointly fine-tuned encoder (train_multitask)",
        stores_adapter=True,
        check_options=_mt_a_single,
    ),
    overwrite=True,
)
register_setup(
    Setup(
        "fusion-mt-a",
        _fusion_mt_a,
        {"sources": (), "adapter_seed": None, "fusion_config": None, "pooling": None},
        "AdapterFusion over MT-A adapters, on the MT-A encoder",
        check_options=check_fusion_options,
    ),
    overwrite=True,
)
