"""Evaluation of trained runs: `evaluate_run(run_dir, split)` rebuilds a run's model (training/rebuild.py),
reloads the split exactly as the run saw its data (same source, seed, carve-out and subsample), and scores it
with the task's metrics. On the validation split it gives the numbers of the run's own metrics.json.

`predict` and `score` (scoring.py, below the training recipes, which score dev sets with them) are the parts other
analyses reuse (pruning evaluates two fusions on one batch list); `load_run_split` and `run_batches` give them a
rebuilt run's data.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from adapterfusion._validation import short_repr
from adapterfusion.answer_scoring import score_generation
from adapterfusion.errors import ConfigError, RunFileError
from adapterfusion.file_digests import first_changed
from adapterfusion.io.paths import as_path
from adapterfusion.run_layout import CONFIG_FILE
from adapterfusion.scoring import Predictions, predict, score
from adapterfusion.tasks.collator import TaskCollator
from adapterfusion.tasks.encoding import encode_task, encoded_sha256
from adapterfusion.tasks.loading import load_task_data
from adapterfusion.tasks.metrics import undefined_metric_notes
from adapterfusion.tasks.spec import ROLES, TaskSpec
from adapterfusion.training.rebuild import RebuiltRun, rebuild_run

__all__ = [
    "Predictions",
    "eval_batch_size",
    "evaluate_run",
    "load_run_split",
    "predict",
    "recorded_limits",
    "run_batches",
    "score",
]


RECORDED_SOURCES = ("hub", "local", "files")  # where a run's data came from (TaskDataInfo.source)


def recorded_limits(data_info: Mapping[str, Any]) -> dict[str, int] | None:
    """The per-split max_examples a run used, read back from its config.json "data" record."""
    splits = data_info.get("splits", {})
    limits: dict[str, int] = {}
    for role, split in splits.items() if isinstance(splits, Mapping) else [("", splits)]:
        num_rows, available = (
            (split.get("num_rows"), split.get("rows_available")) if isinstance(split, Mapping) else (None, None)
        )
        if not (isinstance(num_rows, int) and isinstance(available, int)) or isinstance(num_rows, bool):
            raise RunFileError(
                f"the run's {CONFIG_FILE} records its splits' sizes as {short_repr(splits)}, not {{split: "
                "{num_rows: <int>, rows_available: <int>}}, so the rows it was scored on cannot be read back: the run "
                "folder is damaged; pass max_examples= (--max-examples) to score a subset of your choosing, or train "
                "the run again"
            )
        if num_rows < available:
            limits[role] = num_rows
    return limits or None


def run_record(run: RebuiltRun, key: str, what: str, fix: str = "train the run again") -> Mapping[str, Any]:
    """The mapping the run's config.json holds under `key` (what it says: `what`); a record without it, or with
    another value there (edited by hand, or damaged) is a RunFileError that says so and what to do."""
    value = run.config.get(key)
    if not isinstance(value, Mapping):
        found = "no" if value is None else f"{short_repr(value)} as its"
        raise RunFileError(
            f"{run.run_dir / CONFIG_FILE} holds {found} {key!r} record ({what}), so the run cannot be scored as it "
            f"ran: the run folder is damaged; {fix}"
        )
    return value


def check_same_data(recorded: object, read: Sequence[str]) -> None:
    """Refuse to score a run on its own data files when one of them holds other bytes than when it ran: its numbers
    would not be the run's, with nothing to tell (a run recorded before runs kept the digests is not checked)."""
    if not isinstance(recorded, Mapping):
        return
    changed = first_changed({path: recorded[path] for path in read if path in recorded})
    if changed is not None:
        path, now = changed
        raise ConfigError(
            f"the run's data file {path} changed since it ran (sha256 {str(recorded[path])[:12]} then, "
            f"{now[:12]} now), so its scores here would not be the run's; restore the file, or pass --data-dir "
            "(data_dir=) to score the run on the data there as other data"
        )


def check_same_encoding(recorded: object, split: str, dataset: Any) -> None:
    """Refuse to score a run on its own split when that split encodes to other tokens than when it ran, from the same
    files: the encoder's tokenizer (vocabulary, special tokens, chat template) was edited since, so the model would
    be scored on inputs it never saw, under the run's name. Only what the run recorded is compared (its train and
    validation splits; a run of an older version recorded none)."""
    then = recorded.get(split) if isinstance(recorded, Mapping) else None
    if not isinstance(then, str):
        return
    now = encoded_sha256(dataset)
    if now != then:
        raise ConfigError(
            f"the run's {split} split encodes to other tokens now than when it ran (encoded sha256 {then[:12]} "
            f"then, {now[:12]} now), from the same data files: the encoder's tokenizer (its vocabulary, special "
            "tokens or chat template) was edited since, or another adapterfusion version encodes them, so its scores "
            "here would not be the run's; restore the tokenizer files the run trained with, or pass --data-dir "
            "(data_dir=) to score the run with the tokenizer as it is now, as on other data"
        )


def load_run_split(
    run: RebuiltRun,
    split: str = "validation",
    data_dir: str | os.PathLike | None = None,
    max_examples: int | None = None,
    task: TaskSpec | None = None,
):
    """`split` of the run's task, tokenised for its model: by default the run's own data source and subsample
    (seeded with the run's seed), else `data_dir` and/or a seeded subset of `max_examples` rows. `task`: another
    task's split, read from the same source with the run's tokenizer, length and seed (the run's subsample, made
    for its own task, does not apply), as a transfer check scores a source adapter on a target."""
    if split not in ROLES:
        raise ConfigError(f"split={split!r} is not a split role; use one of {list(ROLES)}")
    own_data = data_dir is None and task is None  # the files the run read, not others the caller names
    own_subsample = max_examples is None and task is None  # the run's own split, subsampled as it was
    other = "pass --data-dir and --max-examples (data_dir=, max_examples=) to score it on data of your choosing"
    data_info = (
        run_record(run, "data", "where its data came from", f"{other}, or train the run again")
        if data_dir is None or own_subsample
        else {}
    )
    if (
        data_dir is None and data_info.get("source") not in RECORDED_SOURCES
    ):  # else a local run's data is read from the Hub
        raise RunFileError(
            f"{run.run_dir / CONFIG_FILE} records its data's source as {short_repr(data_info.get('source'))}, not "
            f"one of {list(RECORDED_SOURCES)}: the run folder is damaged; {other}, or train the run again"
        )
    if data_dir is None and data_info.get("source") == "local":
        data_dir = data_info.get("location")
        if not isinstance(data_dir, str):
            raise RunFileError(
                f"{run.run_dir / CONFIG_FILE} records local data at {short_repr(data_dir)}, not a folder's path: the "
                f"run folder is damaged; {other}, or train the run again"
            )
    limits = recorded_limits(data_info) if own_subsample else max_examples
    task = run.task if task is None else task
    data, info = load_task_data(task, data_dir, run.seed, max_examples=limits)
    if own_data:
        check_same_data(run.config.get("data_files"), info.local_files())
    if split not in data:
        raise ConfigError(
            f"task {task.name!r} has no labelled {split!r} split at "
            f"{data_dir or data_info.get('location')} "
            f"(it has {list(data)}); choose another --split or pass --data-dir"
        )
    training = run_record(run, "training", "its training settings")
    encoded, _ = encode_task(task, type(data)({split: data[split]}), run.tokenizer, training.get("max_length"))
    if own_data and own_subsample:  # the run's own rows: they must also be its own tokens
        check_same_encoding(run.config.get("encoded_sha256"), split, encoded[split])
    return encoded[split]


def check_count(value: object, name: str, what: str) -> None:
    """`value` None or a positive integer; else ConfigError naming `name` and what it counts. Checked before a run
    is rebuilt and its data loaded, so a bad setting fails in a second."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(f"{name}={value!r} must be a positive integer ({what})")


def check_run_dir(run_dir: str | os.PathLike) -> None:
    """A run folder that is not there is named as such, not as one without a config.json."""
    path = as_path(run_dir, "run folder")
    if not path.exists():
        raise ConfigError(
            f"run folder {str(path)!r} does not exist; give a run folder written by train(): "
            "<output_dir>/<task>/<setup>/seed-<seed>"
        )


def eval_batch_size(run: RebuiltRun, batch_size: int | None = None) -> int:
    """`batch_size`, else the run's eval batch size (TrainingConfig.eval_batch_size, else batch_size)."""
    if batch_size is not None:
        size: Any = batch_size
    else:
        training = run_record(run, "training", "its training settings", "pass batch_size= (--batch-size)")
        size = training.get("eval_batch_size") or training.get("batch_size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(f"batch_size={size!r} must be a positive integer")
    return size


def run_batches(run: RebuiltRun, dataset, batch_size: int | None = None) -> list[dict[str, torch.Tensor]]:
    """The dataset in order, padded per batch; default batch size the run's eval batch size (the same batches,
    hence the same padding and numbers, as the Trainer's evaluation)."""
    size = eval_batch_size(run, batch_size)
    # A generation task's rows are right-padded, as its training scored them (positions start at 0 in every row).
    collate = (
        TaskCollator(run.tokenizer, padding_side="right") if run.task.is_generation else TaskCollator(run.tokenizer)
    )
    return [
        collate([dataset[i] for i in range(start, min(start + size, len(dataset)))])
        for start in range(0, len(dataset), size)
    ]


def evaluate_run(
    run_dir: str | os.PathLike,
    split: str = "validation",
    data_dir: str | os.PathLike | None = None,
    max_examples: int | None = None,
    batch_size: int | None = None,
    store: str | os.PathLike | None = None,
    device: str | None = None,
) -> dict[str, Any]:
    """Score the trained model of `run_dir` on `split`. Returns a JSON-ready dict: the run's task, setup and
    seed, the split and its size, `metrics` (the task's metrics and loss), `undefined` (the reason each NaN metric
    has no value, only when there is one) and, for the validation split, `recorded` (the same keys from the run's
    metrics.json)."""
    check_count(batch_size, "batch_size", "examples per evaluation batch")
    check_count(max_examples, "max_examples", "a seeded subset of the split")
    check_run_dir(run_dir)
    run = rebuild_run(run_dir, store=store, device=device)
    dataset = load_run_split(run, split, data_dir, max_examples)
    batches = run_batches(run, dataset, batch_size)
    undefined: dict[str, str] = {}
    if run.task.is_generation:  # the language model's own head: answer loss, perplexity, token accuracy
        metrics = score_generation(run.model, batches, run.task, run.tokenizer, bf16=run.bf16)
    else:  # under bf16 autocast where the run trained so: the precision its recorded dev metrics were scored in
        predictions = predict(run.model, batches, bf16=run.bf16)
        metrics = score(run.task, predictions, dataset)  # features decode QA answers
        undefined = undefined_metric_notes(run.task, metrics, predictions.logits, predictions.labels)
    result = {
        "run_dir": str(run.run_dir),
        "task": run.task.name,
        "setup": run.setup,
        "seed": run.seed,
        "split": split,
        "examples": len(dataset),
        "batch_size": eval_batch_size(run, batch_size),
        "metrics": metrics,
    }
    if undefined:  # a NaN metric (e.g. a correlation with constant scores) comes with its reason
        result["undefined"] = undefined
    if split == "validation":
        recorded = run.recorded_metrics()
        result["recorded"] = {k: recorded[k] for k in metrics if k in recorded}
    return result
