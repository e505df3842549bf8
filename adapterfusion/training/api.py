"""`train(task, setup, seed)`: one run of one setup on one task, from encoder folder to saved pieces.

The run folder `<output_dir>/<task>/<setup>/seed-<seed>/` (training/run.py) holds config.json, metrics.json and
the trained pieces: adapter/, fusion/, head/ (each saved with the model's save_*), or encoder/ (save_pretrained of
the unwrapped encoder, with the tokenizer) for setups that change encoder weights. Trainer checkpoints live in
checkpoints/ and are removed after a successful run unless TrainingConfig.keep_checkpoints is set.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapterfusion.analysis.fusion_attention import FUSION_ATTENTION_FILE, mean_fusion_attention
from adapterfusion.encoder_identity import encoder_files, encoder_identity
from adapterfusion.encoder_limits import check_max_length
from adapterfusion.file_digests import files_sha256
from adapterfusion.io.atomic import atomic_write_json
from adapterfusion.io.paths import check_writable_folder
from adapterfusion.tasks.collator import TaskCollator
from adapterfusion.tasks.encoding import encode_task, encoded_sha256
from adapterfusion.tasks.instruction import check_instruction_tokenizer
from adapterfusion.tasks.loading import check_data_dir, check_max_examples, load_task_data
from adapterfusion.tasks.metrics import collapse_warning
from adapterfusion.tasks.registry import resolve_task
from adapterfusion.tasks.spec import TaskSpec
from adapterfusion.training.adapter_subsets import AdapterSubsetCallback
from adapterfusion.training.checkpoints import checkpoint_step
from adapterfusion.training.config import TrainingConfig
from adapterfusion.training.errors import RunQualityWarning, TrainingError
from adapterfusion.training.extra_dev import score_extra_dev
from adapterfusion.training.feature_cache import HeadOnFeatures, cached_head_training_set, stack_features
from adapterfusion.training.hardware import (
    bfloat16_warning,
    check_precision,
    check_report_to,
    check_trainable_precision,
    is_main_process,
    training_device,
)
from adapterfusion.training.loop import (
    check_dev_split,
    fit,
    instruction_task_data,
    resolve_metric,
    single_task_data,
    untrained_warning,
)
from adapterfusion.training.qa_loop import qa_task_data
from adapterfusion.training.resume import resume_point
from adapterfusion.training.run import (
    ENCODER_DIR,
    Run,
    RunFolder,
    jsonable,
    remove_run_entry,
    save_encoder,
    training_config_for,
)
from adapterfusion.training.run_state import claimed_run, options_changed
from adapterfusion.training.setups import (
    SetupContext,
    check_fusion_sources,
    check_head_options,
    check_source_runs,
    get_setup,
)
from adapterfusion.training.store import AdapterStore, as_store, check_entry_encoder, encoder_key
from adapterfusion.training.tokenizer_files import tokenizer_files
from adapterfusion.training.vocabulary import check_tokenizer_vocabulary


@dataclass
class RunResult(RunFolder):
    """What one run produced; `metrics` are the best checkpoint's dev metrics (e.g. {"accuracy": 0.71, ...})."""

    task: str
    setup: str
    seed: int
    run_dir: Path
    metrics: dict[str, float]
    epoch_metrics: list[dict[str, float]]
    train_seconds: float
    wall_seconds: float
    pieces: dict[str, Path] = field(default_factory=dict)
    store_path: Path | None = None
    model: Any = field(default=None, repr=False)  # the trained AdaptedModel (best checkpoint), for inspection


def check_carve_matches_adapter(info: Any, options: Mapping[str, Any], seed: int) -> None:
    """A fusion whose target's data is carved by seed (one split cut into train and validation) must fuse the
    target adapter trained on this seed's carve: another seed's train split overlaps this run's validation split (for
    MNLI in the demo data, 491 of 600 validation rows), so the fusion would be scored on its adapter's training rows."""
    adapter_seed = options.get("adapter_seed")
    carve = info.carve_out
    if adapter_seed is None or carve is None or carve.seed != seed or adapter_seed == seed:
        return  # no carve, or one that does not follow the run's seed: the adapter saw the same train split
    raise TrainingError(
        f"adapter_seed={adapter_seed}: task {info.task!r} has no separate validation split, so each seed carves its "
        f"own ({carve.describe()}); the target's adapter of seed {adapter_seed} was trained on rows of this run's "
        f"validation split (seed {seed}), which would score the fusion on its adapter's training data. Fuse the "
        f"adapter of seed {seed} (leave adapter_seed out), or run the fusion with seed {adapter_seed}"
    )


def train(
    task: str | TaskSpec,
    setup: str,
    seed: int = 42,
    encoder: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    output_dir: str | os.PathLike = "runs",
    store: AdapterStore | str | os.PathLike | None = None,
    training_config: TrainingConfig | Mapping[str, Any] | None = None,
    setup_options: Mapping[str, Any] | None = None,
    max_examples: int | Mapping[str, int] | None = None,
    overwrite: bool = False,
    resume: bool = False,
) -> RunResult:
    """Train `setup` (see adapterfusion.training.setups) on `task` with `seed`.

    encoder: a HuggingFace encoder folder or Hub id (default: the shipped MiniLM). training_config: a
    TrainingConfig, or a dict of overrides of the setup's paper defaults (TrainingConfig.for_setup).
    store: where stage-1 adapters go (st-a, st-a-houlsby runs are added to it) and where fusion-st-a reads them.
    overwrite: replace an earlier run of the same task, setup and seed (its run folder and store entry). Without it
    (the default, as the CLI's without --overwrite) a finished run or an existing store entry is refused before any
    work, with how to reuse it; the experiment runner, which owns its output dir, passes overwrite=True.
    resume: continue an interrupted run of the same settings from the newest complete checkpoint in its
    checkpoints/ folder, with the optimizer, scheduler, RNG and trainer state saved there (the result equals an
    uninterrupted run's); without such a checkpoint the run starts from the beginning (a StartOverWarning names
    the checkpoints it could not continue from, which are removed). A resume may change the settings that do not
    change what the run trains (resume.FREE_ON_RESUME: logging, checkpoint keeping, gradient checkpointing). A finished
    run is not resumed (it is refused as above).
    """
    spec = resolve_task(task)
    recipe = get_setup(setup)
    options = recipe.resolve_options(setup_options)
    check_fusion_sources(options, spec)
    check_head_options(options, spec)
    config = training_config_for(setup, training_config, seed)
    metric = resolve_metric(spec, config)  # a misspelt metric_for_best is said now, not once the data is loaded
    check_precision(config)
    check_report_to(config)
    check_max_examples(max_examples)
    check_data_dir(data_dir)
    run = Run.open(output_dir, spec.name, setup, seed, encoder, writes=is_main_process())
    check_max_length(config.max_length, run.encoder)  # before any file is written or data loaded
    if recipe.check_encoder is not None:  # e.g. top-k's k against the encoder's layer count
        recipe.check_encoder(options, run.encoder)
    run_dir, store = run.run_dir, as_store(store)
    keyed = store is not None and recipe.stores_adapter
    if store is not None and keyed and run.writes:  # before training, not when its adapter is put there
        check_writable_folder(store.root, "store")
    entries = [store.path(run.encoder, spec.name, setup, seed)] if store is not None and keyed else []
    check_source_runs(options, spec.name, seed, run.encoder, store, Path(output_dir))
    changed = options_changed(run_dir, jsonable(options))
    what = f"{spec.name}/{setup} seed {seed}"
    with claimed_run(run_dir, entries, what, overwrite, resume, run.writes, changed):
        tokenizer = run.begin()
        if spec.is_generation:  # no end token or a broken chat template: said before the data loads
            check_instruction_tokenizer(spec, tokenizer)
        check_tokenizer_vocabulary(tokenizer, run.encoder, spec.is_generation)
        data, info = load_task_data(spec, data_dir, seed, max_examples=max_examples)
        if "validation" not in data:
            raise TrainingError(f"task {spec.name!r} loaded no validation split; early stopping needs one")
        check_carve_matches_adapter(info, options, seed)
        check_dev_split(spec, data["validation"], metric)
        encoded, truncation = encode_task(spec, data, tokenizer, config.max_length)
        model = run.wrapped_encoder(language_model=spec.is_generation)
        check_generation_model(spec, model, run.encoder)
        for entry in (entry for entry in entries if entry.exists()):  # another encoder's adapter in its place:
            check_entry_encoder(entry, run.encoder, encoder_identity(model), run_dir)  # refused before any is replaced
        context = SetupContext(task=spec, options=options, seed=seed, encoder=run.encoder, store=store)
        plan = recipe.prepare(model, context)
        check_trainable_precision(plan.trainable, run.encoder)

        run_config = {
            "task": spec.name,
            "task_spec": spec.to_dict(),
            "setup": setup,
            "setup_options": jsonable(options),
            "seed": seed,
            "encoder": run.encoder,
            "encoder_key": encoder_key(run.encoder),
            # the store refuses its adapter for an encoder of other weights
            "encoder_identity": encoder_identity(model),
            # its weight files, which the experiment runner compares without loading the model (experiments/stale.py)
            "encoder_files": encoder_files(run.source),
            # and its tokenizer files: an edited tokenizer gives other tokens (experiments/stale.py)
            "tokenizer_files": tokenizer_files(run.source),
            # where a fusion's adapters are reloaded from
            "store": str(store.root.resolve()) if store is not None else None,
            "training": config.to_dict(),
            "data": info.to_dict(),
            "data_files": files_sha256(info.local_files()),  # the bytes it read: an edited file is other data
            # the tokens it trains on: an edited tokenizer (vocabulary, end token, chat template) gives other ones
            "encoded_sha256": {role: encoded_sha256(encoded[role]) for role in ("train", "validation")},
            "truncation": truncation.to_dict(),
            "plan_notes": plan.notes,
        }
        if plan.fused_adapters:  # exactly which stored adapters this fusion is trained on (rebuild_run checks them)
            run_config["fused_adapters"] = plan.fused_adapters
        resume_from = resume_point(run_dir, run_config) if resume else None
        # the runner's re-run of an interrupted job (overwrite and resume) keeps what it resumes; a resume that found
        # nothing to continue from removes the incomplete checkpoints it passed over (they would outlive the new ones)
        if overwrite or resume:
            run.start_over(keep_checkpoints=resume_from is not None)
        run.write_config(run_config)

        if (
            plan.head_only and plan.head is not None and config.cache_features
        ):  # the frozen encoder runs once, not once per epoch
            model.to(training_device())
            cached = cached_head_training_set(
                model,
                plan.head,
                {r: encoded[r] for r in ("train", "validation")},
                tokenizer,
                config.eval_batch_size or config.batch_size,
            )
            trained: Any = HeadOnFeatures(model.get_head(plan.head))
            data = single_task_data(spec, cached["train"], cached["validation"], tokenizer, config, stack_features)
        elif spec.is_extractive_qa:  # dev metrics of answers decoded from the windows (training/qa_loop.py)
            trained = model
            data = qa_task_data(spec, encoded["train"], encoded["validation"], tokenizer, config)
        elif spec.is_generation:
            trained = model
            data = instruction_task_data(spec, encoded["train"], encoded["validation"], tokenizer, config, model)
        else:
            trained = model
            data = single_task_data(spec, encoded["train"], encoded["validation"], tokenizer, config)
        subsets = (
            []
            if plan.adapter_subset is None or plan.fusion is None
            else [AdapterSubsetCallback(model, plan.fusion, plan.adapter_subset, plan.always_fused, seed)]
        )
        trainer, outcome = fit(
            trained,
            data,
            config,
            run_dir / "checkpoints",
            progress_dir=run_dir,
            resume_from=resume_from,
            extra_callbacks=subsets,
        )
        del trainer
        if plan.fusion is not None:  # the best checkpoint's temperature for what is scored and saved from here on
            model.set_fusion_step(scored_fusion_step(outcome.best_checkpoint, model.state.fusion_step))
        extra_dev, extra_dev_notes = score_extra_dev(model, spec, tokenizer, config, data_dir, seed, max_examples)

        def result(wall_seconds: float, pieces: dict[str, Path], store_path: Path | None) -> RunResult:
            return RunResult(
                task=spec.name,
                setup=setup,
                seed=seed,
                run_dir=run_dir,
                metrics=outcome.best_metrics,
                epoch_metrics=outcome.epoch_metrics,
                train_seconds=outcome.train_seconds,
                wall_seconds=wall_seconds,
                pieces=pieces,
                store_path=store_path,
                model=model,
            )

        if not run.writes:
            return result(time.perf_counter() - run.started, {}, None)
        report = model.parameter_report()
        pieces = _save_pieces(model, plan, tokenizer, run_dir)
        if plan.fusion is not None:
            pieces["fusion_attention"] = _save_fusion_attention(
                model,
                plan,
                encoded["validation"],
                tokenizer,
                config,
                run_dir,
                {"task": spec.name, "setup": setup, "seed": seed, "split": "validation"},
            )
        metrics = {
            "task": spec.name,
            "setup": setup,
            "seed": seed,
            "metric_for_best": metric,
            "best": outcome.best_metrics,
            "epochs": outcome.epoch_metrics,
            "train_losses": outcome.train_losses,
            "train_seconds": outcome.train_seconds,
            "global_step": outcome.global_step,
            "fusion_step": model.state.fusion_step if plan.fusion is not None else None,
            "stopped_early": outcome.stopped_early,
            "resumed_from": None if resume_from is None else str(resume_from.relative_to(run_dir)),
            "warnings": [
                *info.warnings,
                *run_warnings(
                    outcome.best_metrics,
                    len(encoded["validation"]),
                    untrained_warning(config, outcome.max_steps),
                    truncation.answers_cut_warning(),  # in the log as the data was encoded; here in metrics.json too
                    bfloat16_warning(plan.trainable, run.encoder),
                ),
            ],
            "parameters": {
                "trainable": sum(p.numel() for p in plan.trainable),
                "total": report.total,
                "encoder": report.encoder_total,
                "per_piece": [
                    {"piece": r.piece, "kind": r.kind, "total": r.total, "trainable": r.trainable} for r in report.rows
                ],
            },
            "pieces": {kind: str(path.relative_to(run_dir)) for kind, path in pieces.items()},
        }
        if extra_dev or extra_dev_notes:  # a task with further dev sets (MNLI mismatched): scored, never selecting
            metrics.update(extra_dev=extra_dev, extra_dev_notes=extra_dev_notes)
        stored = None
        if store is not None and recipe.stores_adapter:
            stored = store.put(run_dir, overwrite=True)
            metrics["store_path"] = str(stored)
        if not config.keep_checkpoints:
            remove_run_entry(run_dir, "checkpoints", ignore_errors=True)
        written = run.write_metrics(metrics)
        return result(written["wall_seconds"], pieces, stored)


def scored_fusion_step(best_checkpoint: str | None, last: int) -> int:
    """The fusion step (temperature schedule) the best checkpoint was scored at: the callback sets the step before
    each optimizer step, so the evaluation after step N ran at N - 1; `last` without a checkpoint to go by."""
    step = checkpoint_step(best_checkpoint) if best_checkpoint else None
    return step - 1 if step else last


def check_generation_model(spec: TaskSpec, model: Any, encoder: str) -> None:
    """A generation task trains a decoder's language model (its answers follow its prompts in one sequence)."""
    if spec.is_generation and not model.architecture.causal:
        kind = "an encoder-decoder" if getattr(model.model.config, "is_encoder_decoder", False) else "an encoder"
        raise TrainingError(
            f"task {spec.name!r} is a generation task, which trains a decoder's language model on prompt + answer; "
            f"{encoder} is {kind} ({type(model.model).__name__}). Use a decoder (e.g. af.default_decoder_path())"
        )


def run_warnings(best_metrics: Mapping[str, float], num_dev_examples: int, *found_before: str | None) -> list[str]:
    """What a user must know about a run's result (a constant predictor, and `found_before`: e.g. a run that trained
    nothing), also sent to the warnings module."""
    found = [w for w in [*found_before, collapse_warning(dict(best_metrics), num_dev_examples)] if w is not None]
    for message in found:
        warnings.warn(message, RunQualityWarning, stacklevel=3)
    return found


def _save_pieces(model, plan, tokenizer, run_dir: Path) -> dict[str, Path]:
    """Adapters, fusion and head with the model's own save_*; a changed encoder with save_pretrained."""
    pieces: dict[str, Path] = {}
    if plan.fusion is not None:
        pieces["fusion"] = model.save_fusion(plan.fusion, run_dir / "fusion")
    elif plan.adapters:
        pieces["adapter"] = model.save_adapter(plan.adapters[0], run_dir / "adapter")
    if plan.head is not None:
        pieces["head"] = model.save_head(plan.head, run_dir / "head")
    if plan.save_encoder:
        pieces["encoder"] = save_encoder(model, tokenizer, run_dir / ENCODER_DIR)
    return {kind: Path(path) for kind, path in pieces.items()}


def _save_fusion_attention(
    model, plan, dev_set, tokenizer, config: TrainingConfig, run_dir: Path, info: dict[str, Any]
) -> Path:
    """The trained fusion's mean softmax weight per layer and adapter over the dev set's real tokens (Pfeiffer
    Fig. 4/6), computed with the best checkpoint's weights; the report's heatmaps are drawn from this file."""
    from torch.utils.data import DataLoader

    # right-padded, as training and evaluation run a language model's own forward (its positions count from the
    # first token; a head's pooling reads either side alike)
    collator = TaskCollator(tokenizer, padding_side="right")
    batches = DataLoader(dev_set, batch_size=config.eval_batch_size or config.batch_size, collate_fn=collator)
    activation = mean_fusion_attention(model, plan.fusion, batches, head=plan.head)
    path = run_dir / FUSION_ATTENTION_FILE
    atomic_write_json(path, {**activation.to_dict(), **info})
    return path
