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
from adapterfusion.experiments.spec_checks import fail
from adapterfusion.io.paths import user_path
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
    ids = [ablation_variant(a) for a in out if a["kind"] == SPAN_ABLATION]
    for k, variant_id in enumerate(ids):
        if variant_id in ids[:k]:
            raise fail(ANALYSES_KEY, f"two span-ablation entries ablate the same adapters ({variant_id}); merge them")
    return tuple(out)


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
            folder = user_path(zoo)
            folder = folder if folder.is_absolute() else (base_dir / folder).resolve()
            if not folder.is_dir():
                raise fail(f"{path}.zoo", f"{str(folder)!r} is not a folder; give {SHIPPED!r} or a store folder")
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
        if line not in ids:
            raise fail(f"{path}.lines[{j}]", f"{line!r} is not a setup variant of this experiment; choose from {ids}")
    return {"kind": ADAPTER_SIZE, "sweep": entry["sweep"], "lines": list(lines)}
