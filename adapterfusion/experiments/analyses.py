"""The `analyses` of an experiment file: Houlsby et al. 2019's §3.6 (Fig. 6) as parts of an experiment, each giving
a table and a figure in the report (experiments/analysis_report.py, analysis_figures.py).

    analyses:
      - {kind: span-ablation, variant: st-a-rf16}   # this experiment's trained st-a-rf16 adapters
      - {kind: span-ablation, zoo: shipped}         # the zoo's adapters for the experiment's tasks (or a store folder)
      - {kind: init-scale, sweep: st-a-init}        # a sweep over init_std: dev score against the std (log x)
      - {kind: adapter-size, sweep: st-a-size, lines: [head, full]}   # dev score against the bottleneck size

span-ablation evaluates each trained adapter on its task's dev set with the adapter removed from every contiguous
span of layers [i, j] (the model's skip_layers): one job per task and seed (per task for a zoo, whose adapters have
one seed), after the job that trained the adapter (experiments/span_ablation.py). Optional: `tasks` (a subset of
the experiment's), `max_examples` (dev examples per evaluation, a seeded subset; default the experiment's),
`batch_size` (default the trained run's; 64 for a zoo) and, for a zoo only, `max_length` (default 128): a trained
run's adapters are scored on its dev split as that run encoded it, so a max_length there would be ignored. A
generation task is refused: the language model's own head scores it, so there is no head to score the ablated model
with; it is refused rather than left out, so that the report never lacks a task the file asked for without saying
why.
init-scale and adapter-size read the sweep's finished runs; they train nothing of their own.

Analyses are not part of the spec hash: they change no training result, and the span-ablation jobs carry their own
config hashes, so adding one to a finished experiment runs only its new jobs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from adapterfusion._validation import is_finite_number, short_repr
from adapterfusion.errors import ConfigError
from adapterfusion.experiments.spec_checks import fail, resolve_path
from adapterfusion.io.paths import check_name_length, user_path
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.registry import get_task
from adapterfusion.tasks.spec import GENERATION

ANALYSES_KEY = "analyses"
SPAN_ABLATION = "span-ablation"
INIT_SCALE = "init-scale"
ADAPTER_SIZE = "adapter-size"
KINDS = (SPAN_ABLATION, INIT_SCALE, ADAPTER_SIZE)
_KEYS = {
    SPAN_ABLATION: ("kind", "variant", "zoo", "tasks", "max_examples", "max_length", "batch_size"),
    INIT_SCALE: ("kind", "sweep"),
    ADAPTER_SIZE: ("kind", "sweep", "lines"),
}
SHIPPED = "shipped"
_COUNTS = {  # a span-ablation's optional integer settings
    "max_examples": "dev examples per evaluation, a seeded subset",
    "max_length": "tokens per input of a zoo's dev examples; default 128",
    "batch_size": "examples per evaluation batch; default the run's eval batch size, 64 for a zoo",
}
ABLATION_PREFIX = "span-ablation-"  # a span-ablation job's variant: span-ablation-<variant> or span-ablation-zoo


def ablation_variant(analysis: Mapping[str, Any]) -> str:
    """The variant id of a span-ablation's jobs: span-ablation-<adapters' variant>, or span-ablation-zoo."""
    return ABLATION_PREFIX + (analysis["variant"] if "variant" in analysis else "zoo")


def parse_analyses(raw: Any, variants: Sequence[Any], tasks: Sequence[str], base_dir: Path) -> tuple[dict, ...]:
    """Validate the `analyses` list against the experiment's variants (SetupVariant) and tasks; each analysis as a
    plain mapping (its kind and settings, a zoo folder made absolute), in the file's order."""
    if raw is None:
        return ()
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence) or not raw:
        raise fail(ANALYSES_KEY, f"must be a non-empty list of analyses ({', '.join(KINDS)}); got {raw!r}")
    out: list[dict[str, Any]] = []
    for i, entry in enumerate(raw):
        path = f"{ANALYSES_KEY}[{i}]"
        if not isinstance(entry, Mapping) or entry.get("kind") not in KINDS:
            got = entry.get("kind") if isinstance(entry, Mapping) else entry
            raise fail(path, f"needs a 'kind', one of {', '.join(KINDS)}; got {got!r}")
        kind = entry["kind"]
        unknown = [k for k in entry if k not in _KEYS[kind]]
        if unknown:
            raise fail(f"{path}.{unknown[0]}", f"unknown key for {kind}; allowed: {', '.join(_KEYS[kind])}")
        parse = {SPAN_ABLATION: _span_ablation, INIT_SCALE: _init_scale, ADAPTER_SIZE: _adapter_size}[kind]
        out.append(parse(entry, variants, tasks, base_dir, path))
    ablations = [a for a in out if a["kind"] == SPAN_ABLATION]
    ids = [ablation_variant(a) for a in ablations]
    setups = {v.id: v for v in variants}
    for k, (variant_id, ablation) in enumerate(zip(ids, ablations, strict=True)):
        if variant_id in ids[:k]:
            raise fail(ANALYSES_KEY, f"two span-ablation entries ablate the same adapters ({variant_id}); merge them")
        # Its jobs' folder runs/<id>/, made once its adapters have trained, and the report's files of each task
        # (analysis_report.ablation_table, analysis_figures): refused now rather than at either time.
        names = {variant_id: "the span-ablation jobs' folder"}
        for task in ablation["tasks"]:
            names[f"{variant_id}_{task}.csv"] = "the span-ablation's table"
            if len(ablations) > 1:
                names[f"span_ablation_{variant_id}_{task}.png"] = "the span-ablation's figure"
        for name, what in names.items():
            try:
                check_name_length(name, what)
            except ConfigError as err:
                raise fail(ANALYSES_KEY, f"{err}: give the ablated variant a shorter 'id'") from None
        if variant_id in setups:  # one job id and one run folder for two jobs: the ablation would overwrite the run
            raise fail(
                ANALYSES_KEY,
                f"the span-ablation jobs are called {variant_id!r}, as the {setups[variant_id].setup} variant of "
                f"setups is; give that entry another 'id' (the {ABLATION_PREFIX}... names are the analyses' jobs)",
            )
    swept = [(a["kind"], a["sweep"]) for a in out if "sweep" in a]
    for k, (kind, group) in enumerate(swept):
        if (kind, group) in swept[:k]:
            raise fail(ANALYSES_KEY, f"two {kind} entries read the same sweep ({group}); merge them")
    for analysis in out:  # the report's figure and table files, named after the sweep when there are several
        if "sweep" in analysis:
            try:
                check_name_length(sweep_analysis_name(analysis, out) + ".png", f"the {analysis['kind']} figure")
            except ConfigError as err:
                raise fail(
                    ANALYSES_KEY, f"{err}: give the sweep {short_repr(analysis['sweep'])} a shorter 'id'"
                ) from None
    return tuple(out)


def sweep_analysis_name(analysis: Mapping[str, Any], analyses: Sequence[Mapping[str, Any]]) -> str:
    """The name of an init-scale or adapter-size analysis's table and figure: init_scale, adapter_size, or with its
    sweep's name when the experiment has several of its kind (which would otherwise write one file twice)."""
    name = analysis["kind"].replace("-", "_")
    several = sum(1 for other in analyses if other.get("kind") == analysis["kind"]) > 1
    return f"{name}_{analysis['sweep']}" if several else name


def _span_ablation(
    entry: Mapping[str, Any], variants: Sequence[Any], tasks: Sequence[str], base_dir: Path, path: str
) -> dict[str, Any]:
    if ("variant" in entry) == ("zoo" in entry):
        raise fail(path, "give either 'variant' (a stage-1 setup variant of this experiment) or 'zoo', not both")
    out: dict[str, Any] = {"kind": SPAN_ABLATION}
    if "variant" in entry:
        stage1 = [v.id for v in variants if v.is_stage1 and not v.is_multitask]
        if entry["variant"] not in stage1:
            raise fail(
                f"{path}.variant",
                f"{entry['variant']!r} is not a single-task adapter variant of this experiment; choose one of {stage1}",
            )
        out["variant"] = entry["variant"]
        runs_on = next(v for v in variants if v.id == entry["variant"]).runs_on
    else:
        zoo = entry["zoo"]
        if not isinstance(zoo, str) or not zoo:
            raise fail(f"{path}.zoo", f"must be {SHIPPED!r} or the folder of an AdapterStore; got {zoo!r}")
        if zoo != SHIPPED:
            resolve_path(zoo, f"{path}.zoo", base_dir)  # refuses a control character (a null byte: a ValueError)
            folder = user_path(zoo)
            try:
                folder = folder if folder.is_absolute() else (base_dir / folder).resolve()
                found = folder.is_dir()
            except OSError:  # a name longer than the file system takes: the CLI's 'room left on its disk'
                found = False
            if not found:
                raise fail(
                    f"{path}.zoo", f"{short_repr(str(folder))} is not a folder; give {SHIPPED!r} or a store folder"
                )
            zoo = str(folder)
        out["zoo"] = zoo

        def runs_on(task: str) -> bool:
            return True

    chosen = list(tasks)
    if "tasks" in entry:
        given = entry["tasks"]
        if isinstance(given, (str, bytes)) or not isinstance(given, Sequence) or not given:
            raise fail(f"{path}.tasks", f"must be a non-empty list of the experiment's tasks; got {given!r}")
        for j, task in enumerate(given):
            if task not in tasks:
                raise fail(f"{path}.tasks[{j}]", f"{task!r} is not one of the experiment's tasks ({', '.join(tasks)})")
        chosen = list(dict.fromkeys(given))
    not_trained = [t for t in chosen if not runs_on(t)]
    if not_trained:
        raise fail(f"{path}.tasks", f"{out.get('variant')} trains no adapter for {not_trained}; leave them out")
    generation = [t for t in chosen if _is_generation(t)]
    if generation:
        raise fail(
            f"{path}.tasks",
            f"{generation} are generation tasks, which have no head to score the ablated model with (the language "
            "model's own head scores them); give 'tasks:' without them",
        )
    out["tasks"] = chosen
    for key, what in _COUNTS.items():
        if key in entry:
            count = entry[key]
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise fail(f"{path}.{key}", f"must be an integer >= 1 ({what}); got {count!r}")
            out[key] = count
    if "variant" in entry and "max_length" in entry:
        raise fail(
            f"{path}.max_length",
            f"applies to a zoo's adapters only: {entry['variant']}'s adapters are scored on each run's dev split as "
            "that run encoded it (the max_length it trained with), so this one would be ignored; drop it, or set "
            "max_length in that setup's training",
        )
    return out


def _is_generation(task: str) -> bool:
    try:
        return get_task(task).kind == GENERATION
    except TaskError:  # an unknown task is the tasks check's to refuse
        return False


def _sweep_settings(entry: Mapping[str, Any], variants: Sequence[Any], path: str, key: str) -> list[Any]:
    """The values of `key` over the variants of the entry's sweep, which must sweep it with two or more values."""
    group = entry.get("sweep")
    swept = [v for v in variants if v.sweep is not None and v.sweep["group"] == group]
    if not swept:
        groups = sorted({v.sweep["group"] for v in variants if v.sweep is not None})
        raise fail(f"{path}.sweep", f"no sweep called {group!r}; the experiment's sweeps are {groups}")
    values = list(dict.fromkeys(v.sweep["settings"].get(key) for v in swept))
    if None in values or len(values) < 2:
        raise fail(f"{path}.sweep", f"{group!r} must sweep {key} over two or more values; it sweeps {values}")
    if len(swept) > len(values):  # the table and figure have one point per value: the others would be dropped
        others = sorted({k for v in swept for k in v.sweep["settings"] if k != key})
        why = f"it also sweeps {', '.join(others)}" if others else "its entry gives several reduction_factors"
        raise fail(
            f"{path}.sweep",
            f"{group!r} has {len(swept)} variants for {len(values)} values of {key} ({why}), and the analysis shows "
            f"one dev score per {key}; give it an entry that sweeps {key} alone",
        )
    return values


def _init_scale(
    entry: Mapping[str, Any], variants: Sequence[Any], tasks: Sequence[str], base_dir: Path, path: str
) -> dict[str, Any]:
    for value in _sweep_settings(entry, variants, path, "init_std"):
        if not is_finite_number(value) or value <= 0:
            raise fail(
                f"{path}.sweep", f"init_std {short_repr(value)} must be a positive number (the paper: 1e-7 .. 1)"
            )
    return {"kind": INIT_SCALE, "sweep": entry["sweep"]}


def _adapter_size(
    entry: Mapping[str, Any], variants: Sequence[Any], tasks: Sequence[str], base_dir: Path, path: str
) -> dict[str, Any]:
    _sweep_settings(entry, variants, path, "reduction_factor")
    lines = entry.get("lines", [])
    if isinstance(lines, (str, bytes)) or not isinstance(lines, Sequence):
        raise fail(f"{path}.lines", f"must be a list of setup variant ids (e.g. [head, full]); got {lines!r}")
    ids = [v.id for v in variants]
    for j, line in enumerate(lines):
        if not isinstance(line, str) or line not in ids:
            raise fail(f"{path}.lines[{j}]", f"{line!r} is not a setup variant of this experiment; choose from {ids}")
        if line in lines[:j]:
            raise fail(f"{path}.lines[{j}]", f"{line!r} is listed twice; list each line once")
    return {"kind": ADAPTER_SIZE, "sweep": entry["sweep"], "lines": list(lines)}
