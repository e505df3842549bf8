"""What an experiment file says of its tasks beyond their names: the tasks of its own (`task_files`, registered so
that `tasks` and `fusion` may name them), each target's fusion sources (`fusion`), the TrainingConfig overrides of
one task (`task_training`), and the setups a generation task refuses (they train a classification head).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from adapterfusion.experiments.spec_checks import (
    TRAINING_FIELDS,
    checked_training,
    experiment_task,
    fail,
    no_duplicates,
    reject_unknown,
    resolve_path,
    string_list,
    task_name,
)
from adapterfusion.experiments.variants import SetupVariant
from adapterfusion.tasks.builtin import BUILTIN_TASKS
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.registry import get_task, load_task_file, register_task
from adapterfusion.tasks.spec import GENERATION, TaskSpec
from adapterfusion.training.multitask import MT_A
from adapterfusion.training.setups import get_setup, list_setups

BUILTIN_TASK_NAMES = frozenset(task.name for task in BUILTIN_TASKS)
# Setups that train a classification head of their own, which a generation task (scored by the language model's own
# head) has no use for: refused when the file is read, not in every job at run time.
_HEADED_SETUPS = ("head", MT_A)


def parse_task_files(value: Any, base_dir: Path) -> dict[str, dict[str, Any]]:
    """Register the tasks described in `task_files` (JSON/YAML task descriptions, relative to the experiment file),
    so that `tasks` may name them: name -> the task's TaskSpec dict, which the jobs carry to their workers."""
    if value is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    described: dict[str, int] = {}  # task name -> the index of the file that describes it
    for i, raw in enumerate(string_list(value, "task_files")):
        path = resolve_path(raw, f"task_files[{i}]", base_dir)
        try:
            task = load_task_file(str(path), register=False)
        except TaskError as err:
            raise fail(f"task_files[{i}]", str(err)) from None
        if task.name in described:  # the later description would silently replace the earlier one
            raise fail(
                f"task_files[{i}]",
                f"{path} describes task {task.name!r}, which task_files[{described[task.name]}] describes already; "
                "give each task one description (list a file once, or rename one of the tasks)",
            )
        try:
            register_user_task(task)
        except TaskError as err:
            raise fail(f"task_files[{i}]", str(err)) from None
        described[task.name] = i
        out[task.name] = task.to_dict()
    return out


def register_user_task(task: TaskSpec) -> TaskSpec:
    """Register a task of the experiment's own, so that `tasks` and `fusion` may name it."""
    if task.name in BUILTIN_TASK_NAMES:
        raise TaskError(f"it describes {task.name!r}, a built-in task; give the task another name")
    return register_task(task, overwrite=True)  # the same file read again (a re-run) replaces its own entry


def parse_fusion(
    raw: Any, tasks: tuple[str, ...], variants: Sequence[SetupVariant], recorded: bool = False
) -> dict[str, tuple[str, ...]]:
    """`fusion`: every task's fusion sources, the target included (default: all the tasks), when the experiment has
    a fusion setup; else nothing. A target no fusion variant runs on is refused (its sources would be ignored),
    except in a runner's record, which lists every task's."""
    fusions = [v for v in variants if v.is_fusion]
    if raw is not None and not fusions:
        fusion_setups = [s for s in list_setups() if "sources" in get_setup(s).options]
        raise fail("fusion", f"given, but setups has no fusion setup; add one of {', '.join(fusion_setups)}")
    if not fusions:
        return {}
    raw = {} if raw is None else raw
    if not isinstance(raw, Mapping):
        raise fail("fusion", f"must map a target task to its source tasks, e.g. {{rte: [mnli, rte]}}; got {raw!r}")
    for target in raw:
        experiment_task(target, tasks, f"fusion.{target}")
        if not recorded and not any(v.runs_on(target) for v in fusions):
            runs = "; ".join(f"{v.id} runs on {', '.join(v.tasks or ())}" for v in fusions)
            raise fail(
                f"fusion.{target}",
                f"no fusion setup runs on {target!r} ({runs}), so these sources would be ignored; add {target!r} to "
                f"a fusion entry's tasks, or drop fusion.{target}",
            )
    out: dict[str, tuple[str, ...]] = {}
    for target in tasks:
        path = f"fusion.{target}"
        sources = raw.get(target, "all")
        sources = list(tasks) if sources == "all" else string_list(sources, path)
        for j, source in enumerate(sources):
            task_name(source, f"{path}[{j}]")
        no_duplicates(sources, path)
        out[target] = tuple(dict.fromkeys([*sources, target]))  # the target's own adapter is always fused
    return out


def parse_task_training(
    raw: Any, tasks: tuple[str, ...], variants: Sequence[SetupVariant], recorded: bool = False
) -> dict[str, dict[str, Any]]:
    """Per-task TrainingConfig overrides, each checked with every setup that runs on that task; overrides of a task
    that no single-task setup trains (MT-A's one run has no single task) would be ignored, so they are refused
    (though not in a runner's record, which keeps what an older version accepted)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise fail(
            "task_training", f"must map a task to TrainingConfig overrides, e.g. {{cb: {{epochs: 10}}}}; got {raw!r}"
        )
    out: dict[str, dict[str, Any]] = {}
    for task, overrides in raw.items():
        path = f"task_training.{task}"
        experiment_task(task, tasks, path)
        if not isinstance(overrides, Mapping):
            raise fail(path, f"must be a mapping of TrainingConfig fields, got {overrides!r}")
        reject_unknown(overrides, TRAINING_FIELDS, path)
        applied = [variant for variant in variants if variant.runs_on(task) and not variant.is_multitask]
        for variant in applied:
            checked_training({**variant.training, **overrides}, variant.setup, path)
            if variant.sweep is not None and not recorded:
                _check_sweep_kept(overrides, variant, task, path)
        if not applied and not recorded:
            multitask = [variant.id for variant in variants if variant.is_multitask and variant.runs_on(task)]
            if multitask:
                why = f"{', '.join(multitask)} trains all its tasks in one run, which task_training does not apply to"
                fix = f"set them in the {multitask[0]} entry"
            else:
                why, fix = "no setup entry's tasks include it", f"add {task!r} to a setup entry's tasks"
            raise fail(
                path,
                f"no setup trains {task!r} on its own ({why}), so these overrides would be ignored; {fix}, or "
                "drop them",
            )
        out[str(task)] = dict(overrides)
    return out


def _check_sweep_kept(overrides: Mapping[str, Any], variant: SetupVariant, task: str, path: str) -> None:
    """Refuse a task's override that undoes a sweep on that task: task_training is applied last, so every variant of
    the sweep would train alike there, under ids that name settings it did not train with."""
    sweep = variant.sweep or {"group": None, "settings": {}}
    undone = [key for key in overrides if key in sweep["settings"] and sweep["settings"][key] != overrides[key]]
    if "epochs" in sweep["settings"] and overrides.get("max_steps") is not None:
        undone.append("max_steps")  # a run's length in place of its epochs
    if undone:
        key = undone[0]
        raise fail(
            f"{path}.{key}",
            f"sweep {sweep['group']!r} sweeps {'epochs' if key == 'max_steps' else key}, and this override would "
            f"train each of its variants on {task!r} with {key}={overrides[key]!r}: alike, under ids that name other "
            f"settings; drop it, or give {task!r} a setup entry of its own (tasks: [{task}]) with its own id and sweep",
        )


def check_generation_setups(
    variants: Sequence[SetupVariant], tasks: tuple[str, ...], task_specs: Mapping[str, Mapping[str, Any]]
) -> None:
    """A setup that trains a head of its own, refused on the generation tasks it would run on."""
    generation = [task for task in tasks if task_specs.get(task, {}).get("kind") == GENERATION]
    for variant in variants:
        if variant.setup in _HEADED_SETUPS:
            clashing = [task for task in generation if variant.runs_on(task)]
            if clashing:
                raise fail(
                    f"setups ({variant.id})",
                    f"{variant.setup} trains a classification head of its own, but {clashing} are generation tasks, "
                    "which the language model's own head scores; give the entry 'tasks:' without them, or train "
                    "them with st-a and fusion-st-a",
                )


def check_generation_pooling(
    variants: Sequence[SetupVariant],
    entries: Sequence[tuple[int, SetupVariant, Mapping[str, Any]]],
    tasks: tuple[str, ...],
    task_specs: Mapping[str, Mapping[str, Any]],
) -> None:
    """A `pooling` given in a setup entry (or its sweep) that runs on generation tasks only, refused: those tasks have
    no head of ours to pool for (the language model's own head predicts each answer token), so it would choose
    nothing. On an entry that also runs on other tasks it is their heads' pooling (plan.train_options leaves it out
    of the generation jobs). Not for a runner's record, whose variants carry the pooling the spec spelled out."""
    generation = {task for task in tasks if task_specs.get(task, {}).get("kind") == GENERATION}
    if not generation:
        return
    for variant, (i, _, entry) in zip(variants, entries, strict=True):
        sweep = entry.get("sweep")
        given = "pooling" in entry or (isinstance(sweep, Mapping) and "pooling" in sweep)
        runs_on = [task for task in tasks if variant.runs_on(task)]
        if given and runs_on and set(runs_on) <= generation:
            raise fail(
                f"setups[{i}].pooling",
                f"chooses how a classification head pools the tokens, but {variant.id} runs on generation tasks only "
                f"({runs_on}), which add no head (the language model's own head predicts each answer token), so it "
                "would be ignored; leave pooling out",
            )


def check_metrics_for_best(
    variants: Sequence[SetupVariant],
    entries: Sequence[tuple[int, SetupVariant, Mapping[str, Any]]],
    tasks: tuple[str, ...],
    task_training: Mapping[str, Mapping[str, Any]],
    key: str = "setups",
) -> None:
    """A metric_for_best that a task it applies to does not score, refused when the file is read (each job would
    fail at its start, once per seed), naming where it was set: task_training, the setup entry, or training. So are
    two variants of one task that select on different metrics: the report puts their dev scores in one row (and
    `select` and Table 2 compare them), which holds one metric."""
    chosen: dict[str, tuple[str, str]] = {}  # task -> (metric, variant id) of its first variant
    for variant, (i, _, entry) in zip(variants, entries, strict=True):
        for task in tasks:
            if not variant.runs_on(task):
                continue
            own = task_training.get(task, {})
            metric = own.get("metric_for_best", variant.training.get("metric_for_best"))
            where = (
                f"task_training.{task}"
                if "metric_for_best" in own
                else f"{key}[{i}]"
                if "metric_for_best" in entry or "metric_for_best" in (entry.get("sweep") or {})
                else "training"
            )
            try:
                known = get_task(task).metrics
            except TaskError:  # an unknown task is the tasks check's to refuse
                continue
            if metric is not None and metric not in known:
                raise fail(
                    f"{where}.metric_for_best",
                    f"{metric!r} is not a metric of task {task!r} (setup variant {variant.id!r}); it has {list(known)}",
                )
            metric = metric or known[0]
            first, first_variant = chosen.setdefault(task, (metric, variant.id))
            if metric != first:
                raise fail(
                    f"{where}.metric_for_best",
                    f"setup variant {variant.id!r} selects on {metric!r} for task {task!r}, but {first_variant!r} "
                    f"on {first!r}; the report compares a task's variants on one metric, so give them one "
                    f"metric_for_best (e.g. in task_training.{task})",
                )
