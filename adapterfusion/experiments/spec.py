"""`ExperimentSpec`: an experiment file (YAML or JSON) read into a frozen, validated description of
tasks × setup variants × seeds. Every mistake raises ExperimentSpecError naming its key path and the allowed values.

    name: paper-small
    encoder: null                  # a folder or Hub id; null = the shipped MiniLM; default-decoder = shipped SmolLM2
    tasks: [rte, cb]
    seeds: [1, 2, 3]
    data_dir: ../shared/data       # relative paths are relative to this file
    output_dir: results/paper-small
    max_examples: {train: 2000, validation: 500}
    training: {max_steps: 200}     # TrainingConfig overrides for every setup
    task_training:                 # TrainingConfig overrides for every job on one task (applied last)
      cb: {epochs: 10}
    setups:
      - {name: head, tasks: [rte]}                                          # head runs on rte only
      - {name: st-a, reduction_factors: [2, 16, 64], learning_rate: 1.0e-4} # three variants: st-a-rf2, ...
      - {name: fusion-st-a, adapter_reduction_factor: 16}                   # fuses the st-a-rf16 adapters
      - {name: mt-a, tasks: [rte, cb]}                                      # one MT-A run per seed on rte and cb
      - fusion-mt-a                                                         # fuses that seed's MT-A adapters
    fusion:                        # target -> source tasks; default: every task of the experiment
      rte: [cb, rte]

A setup entry is a registered setup's name, or a mapping with `name` plus TrainingConfig fields and setup options
(overrides for that setup only). Setups with a `reduction_factor` option (st-a, st-a-houlsby) get variant ids
`<setup>-rf<R>`; `reduction_factors` expands one entry into one variant per value. A fusion setup fuses the adapters
of one stage-1 variant (`adapter_setup`, `adapter_reduction_factor` or a swept variant's id as `adapter_variant`;
default st-a with rf 16), trained with the same
seed, of the source tasks listed under `fusion`. A setup entry's `tasks` restricts it to some of the experiment's
tasks (e.g. fusion runs only for the target tasks, while st-a trains an adapter on every source); without it a setup
runs on every task. Training settings merge in this order, later winning: `training`, the setup entry,
`task_training[<task>]`.

`mt-a` trains all its tasks (the entry's `tasks`, default all) in one run per seed (option `reduction_factor`,
default 16; `task_training` does not apply, as that run has no single task). `fusion-mt-a` fuses the adapters of
the MT-A run of its seed on the encoder that run fine-tuned, so its `fusion` sources must be MT-A tasks.

`zoo: shipped` (or `zoo: <folder of an AdapterStore>`) takes every fusion source but the target from a pretrained
zoo (adapterfusion/zoo: one adapter per task for the shipped MiniLM), so stage 1 is not repeated: a fusion job then
depends only on its target's own st-a job, and a source the zoo lacks is an error when the jobs are planned.
Every setup entry takes `pooling` (mean, cls, ...; default: the encoder's own, mean for sentence-transformers
models such as the shipped MiniLM, see adapterfusion/heads/pooling.py) for the heads it trains.

A setup entry's `sweep` (experiments/sweep.py) lists values of training settings or setup options and expands into
one variant per combination (`st-a-houlsby-rf12-lr3e-4-ep20`); the top-level `select` names report rows that keep,
per task and seed, the best dev variant of a sweep (experiments/selection.py; not part of the spec hash, as it
changes no result). `task_files` lists task descriptions (JSON/YAML, relative to this file) that `tasks` may name.
`analyses` lists Houlsby et al.'s §3.6 analyses (experiments/analyses.py: span-ablation, init-scale, adapter-size),
which add span-ablation jobs and report tables and figures; not part of the spec hash either.

The record a runner writes as `<output_dir>/experiment.json` is read as an experiment file too, so `adapterfusion
run <output_dir>/experiment.json` repeats or resumes the experiment: it holds the resolved `variants` in place of
`setups` (record.py reads what is its own).

This module holds the spec and the parse of its top-level keys; the pieces live beside it: spec_checks.py (the
checks and error wording they share), variants.py (SetupVariant and the `setups` entries), task_settings.py
(`task_files`, `fusion`, `task_training`), encoder_checks.py (`encoder`, pooling and what its config refuses) and
record.py (a runner's record).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapterfusion._validation import check_name
from adapterfusion.defaults import named_encoder
from adapterfusion.errors import ConfigError
from adapterfusion.experiments.analyses import ANALYSES_KEY, parse_analyses
from adapterfusion.experiments.encoder_checks import (
    check_architecture_fit,
    check_bottlenecks,
    check_generation_tokenizer,
    check_gradient_checkpointing,
    check_layernorm_only,
    check_max_lengths,
    check_top_k,
    check_weights_dtype,
    parse_encoder,
    resolve_poolings,
)
from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.experiments.paths import relative_to_experiment_file
from adapterfusion.experiments.record import check_record, is_record, recorded_entries, recorded_select, recorded_tasks
from adapterfusion.experiments.spec_checks import (
    TRAINING_FIELDS,
    absolute_path,
    checked_training,
    fail,
    no_duplicates,
    number_as_text,
    reject_unknown,
    resolve_path,
    string_list,
    task_name,
)
from adapterfusion.experiments.sweep import parse_select
from adapterfusion.experiments.task_settings import (
    check_generation_pooling,
    check_generation_setups,
    check_metrics_for_best,
    parse_fusion,
    parse_task_files,
    parse_task_training,
)
from adapterfusion.experiments.variants import Entry, SetupVariant, fused_variants, setup_entries
from adapterfusion.io.documents import read_document
from adapterfusion.io.paths import check_readable_file, user_path
from adapterfusion.tasks.spec import ROLES
from adapterfusion.training.config import MAX_SEED, SEED_RANGE_REASON
from adapterfusion.training.resume import without_free_settings
from adapterfusion.training.store import SHIPPED

SPEC_FORMAT_VERSION = 1
TOP_LEVEL_KEYS = (
    "name",
    "description",
    "encoder",
    "tasks",
    "setups",
    "seeds",
    "fusion",
    "zoo",
    "data_dir",
    "output_dir",
    "max_examples",
    "training",
    "task_training",
    "select",
    "task_files",
    "analyses",
    "format_version",
)
# A runner's record of an experiment (runner.SPEC_FILE): the file's keys with `variants` and `task_specs`, as
# recorded_dict writes them, in place of the `setups`, `training` and `task_files` they were resolved from.
RECORD_KEYS = (
    *(key for key in TOP_LEVEL_KEYS if key not in ("setups", "training", "task_files")),
    "variants",
    "task_specs",
    "spec_hash",
    "source",
)
DEFAULT_SEEDS = (42,)


@dataclass(frozen=True)
class ExperimentSpec:
    """A validated experiment. `fusion` maps every task to the sources its fusion runs fuse (target included)
    when the experiment has a fusion setup, else it is empty. `encoder` None means the shipped default."""

    name: str
    tasks: tuple[str, ...]
    variants: tuple[SetupVariant, ...]
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    encoder: str | None = None
    fusion: dict[str, tuple[str, ...]] = field(default_factory=dict)
    data_dir: str | None = None
    output_dir: str = "outputs"
    max_examples: int | dict[str, int] | None = None
    description: str = ""
    source: str | None = None  # the file it was read from, if any
    task_training: dict[str, dict[str, Any]] = field(default_factory=dict)
    zoo: str | None = None  # 'shipped' or an AdapterStore folder: where fusions take every source but the target
    select: dict[str, dict[str, Any]] = field(default_factory=dict)  # report rows chosen on dev (sweep.py)
    task_specs: dict[str, dict[str, Any]] = field(default_factory=dict)  # tasks of its task_files, as TaskSpec dicts
    analyses: tuple[dict[str, Any], ...] = ()  # Houlsby §3.6 analyses (experiments/analyses.py)

    def job_training(self, variant: SetupVariant, task: str) -> dict[str, Any]:
        """The TrainingConfig overrides of one (variant, task) job: the variant's, then the task's (not for a
        multi-task variant, whose one run trains every task)."""
        if variant.is_multitask:
            return dict(variant.training)
        return {**variant.training, **self.task_training.get(task, {})}

    def variant(self, variant_id: str) -> SetupVariant:
        for variant in self.variants:
            if variant.id == variant_id:
                return variant
        raise ExperimentSpecError(
            f"no setup variant {variant_id!r}; the experiment has {[v.id for v in self.variants]}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": SPEC_FORMAT_VERSION,
            "name": self.name,
            "description": self.description,
            "encoder": self.encoder,
            "tasks": list(self.tasks),
            "seeds": list(self.seeds),
            "variants": [v.to_dict() for v in self.variants],
            "fusion": {t: list(s) for t, s in self.fusion.items()},
            "data_dir": self.data_dir,
            "output_dir": self.output_dir,
            "max_examples": self.max_examples,
            **({"task_training": self.task_training} if self.task_training else {}),
            **({"zoo": self.zoo} if self.zoo is not None else {}),
            # a list, so that the rows keep the file's order where the spec is stored with sorted keys
            **({"select": [{"name": name, **rule} for name, rule in self.select.items()]} if self.select else {}),
            **({"task_specs": json.loads(json.dumps(self.task_specs))} if self.task_specs else {}),  # a copy
            **({ANALYSES_KEY: json.loads(json.dumps(self.analyses))} if self.analyses else {}),
        }

    def recorded_dict(self) -> dict[str, Any]:
        """to_dict with its paths (data_dir, output_dir, a local encoder or zoo folder) relative to the experiment
        file's folder, as the file writes them: what an output dir records, the same in every clone."""
        data = self.to_dict()
        for key in ("data_dir", "output_dir", "encoder", "zoo"):
            if key in data:
                data[key] = relative_to_experiment_file(data[key], self.source)
        if "task_specs" in data:  # a user task's own files, as its description does
            data["task_specs"] = {
                name: {
                    **task,
                    "data_files": {
                        role: relative_to_experiment_file(path, self.source)
                        for role, path in task["data_files"].items()
                    },
                }
                for name, task in data["task_specs"].items()
            }
        return data

    def spec_hash(self, absolute_paths: bool = False, free_settings: bool = False) -> str:
        """A digest of everything that decides results (not the output dir, the description or the file's path),
        with paths relative to the experiment file (recorded_dict), so that a clone elsewhere is the same experiment:
        an output dir records it, and refuses a different experiment. absolute_paths: the digest older versions
        recorded, of the absolute paths. Settings that change how runs are logged or kept, not their results
        (training/resume.py FREE_ON_RESUME), do not count; free_settings=True: the digest recorded while they did."""
        data = self.to_dict() if absolute_paths else self.recorded_dict()
        ignored = ("output_dir", "description", "select", ANALYSES_KEY)  # select: report; analyses: own job hashes
        data = {k: v for k, v in data.items() if k not in ignored}
        if not free_settings:
            data["variants"] = [{**v, "training": without_free_settings(v["training"])} for v in data["variants"]]
            task_training = {t: without_free_settings(s) for t, s in data.pop("task_training", {}).items()}
            if any(task_training.values()):  # a task left with nothing to change counts as none, as in to_dict
                data["task_training"] = {task: settings for task, settings in task_training.items() if settings}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf-8")).hexdigest()[:16]

    @classmethod
    def from_dict(
        cls, data: Any, base_dir: str | os.PathLike | None = None, source: str | None = None
    ) -> ExperimentSpec:
        """Validate an experiment mapping; relative paths resolve against `base_dir` (default: the working dir), for
        a runner's record the folder it lies in."""
        return _parse(data, Path(base_dir) if base_dir is not None else Path.cwd(), source)

    @classmethod
    def load(cls, path: str | os.PathLike) -> ExperimentSpec:
        """Read a .yaml/.yml or .json experiment file (UTF-8; a key given twice in one mapping is an error)."""
        path = Path(path)
        check_readable_file(
            path, "give the path of a .yaml or .json experiment file", "experiment file", ExperimentSpecError
        )
        # UTF-8; a key given twice, nesting too deep and aliases expanding past MAX_DOCUMENT_VALUES are refused
        data = read_document(path, ExperimentSpecError)
        if is_record(data):  # its `source` is relative to the output dir as the runner named it, links unresolved
            return _check_record_place(_parse(data, Path(os.path.abspath(path)).parent, None), path)
        return _parse(data, path.resolve().parent, str(path.resolve()))


def _check_record_place(spec: ExperimentSpec, record: Path) -> ExperimentSpec:
    """A record is its output dir's: read from elsewhere (the folder moved or copied, or reached by its real path
    where the experiment named it through a link) its relative paths lead to another output dir, and the runner
    would start the experiment over there. Refused instead."""
    here = record.resolve().parent
    if Path(spec.output_dir).resolve() == here:
        return spec
    raise ExperimentSpecError(
        f"{record} records an experiment whose output_dir leads to {spec.output_dir} (its paths are relative to "
        f"its experiment file, {spec.source or 'none recorded'}), not to the folder it lies in ({here}): the folder "
        "was moved or copied, or reached through another path than the experiment's (a link). Run it through the "
        "path the experiment named, or run the experiment file; nothing was run."
    )


def load_spec(spec_or_path: ExperimentSpec | Mapping[str, Any] | str | os.PathLike) -> ExperimentSpec:
    """An ExperimentSpec as is, a mapping validated, or a file path loaded."""
    if isinstance(spec_or_path, ExperimentSpec):
        return spec_or_path
    if isinstance(spec_or_path, Mapping):
        return ExperimentSpec.from_dict(spec_or_path)
    return ExperimentSpec.load(spec_or_path)


def _check_adapter_subsets(variants: Sequence[SetupVariant], fusion: Mapping[str, Sequence[str]]) -> None:
    """A fusion variant's adapter_subset must not exceed the adapters some target's fusion fuses: refused when the
    file is read, not after the stage-1 jobs ran (each of its fusion jobs failed then)."""
    for variant in variants:
        size = variant.options.get("adapter_subset")
        if not variant.is_fusion or isinstance(size, bool) or not isinstance(size, int):
            continue  # null: all of them; a value of another type setup_entries refused
        for target, fused in fusion.items():
            if variant.runs_on(target) and size > len(fused):
                raise fail(
                    f"{variant.id}.adapter_subset",
                    f"{size} is more adapters than the {len(fused)} the fusion of {target!r} fuses "
                    f"({', '.join(fused)}); give at most {len(fused)}, or null to fuse all of them in every step",
                )


def _swept_settings(variants: Sequence[SetupVariant], entries: Sequence[Entry]) -> list[tuple[int, dict[str, Any]]]:
    """Each swept variant's entry index and resolved training settings, so that the checks of an entry's settings
    (check_max_lengths) see a value the entry gives only in its `sweep`, as they see its own."""
    return [(i, v.training) for v, (i, _, _) in zip(variants, entries, strict=True) if v.sweep is not None]


def _zoo(value: Any, base_dir: Path) -> str | None:
    """None, 'shipped' (the package's adapter zoo) or an AdapterStore folder (relative to the file)."""
    if value is None or value == SHIPPED:
        return value
    if not isinstance(value, str) or not value:
        raise fail(
            "zoo", f"must be {SHIPPED!r} (the adapters shipped in the package) or an AdapterStore folder; got {value!r}"
        )
    folder = absolute_path(user_path(value), base_dir)
    if not folder.is_dir():
        raise fail(
            "zoo",
            f"{str(folder)!r} is not a folder; give {SHIPPED!r} or the folder of an AdapterStore "
            "(e.g. <experiment output>/adapters/st-a-rf16)",
        )
    return str(folder)


def _seeds(value: Any) -> tuple[int, ...]:
    seeds = [value] if isinstance(value, int) and not isinstance(value, bool) else string_list(value, "seeds")
    for i, seed in enumerate(seeds):
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
            raise fail(
                f"seeds[{i}]",
                f"seed {seed!r} must be an integer in 0..{MAX_SEED}{SEED_RANGE_REASON}{number_as_text(seed)}",
            )
    no_duplicates(seeds, "seeds")
    return tuple(seeds)


def _max_examples(value: Any) -> int | dict[str, int] | None:
    def count(v: Any, path: str) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise fail(path, f"must be an integer >= 1, got {v!r}")
        return v

    if value is None or isinstance(value, int) and not isinstance(value, bool):
        return None if value is None else count(value, "max_examples")
    if not isinstance(value, Mapping):
        raise fail(
            "max_examples",
            f"must be an integer or a mapping of split role ({', '.join(ROLES)}) to integer; got {value!r}",
        )
    reject_unknown(value, ROLES, "max_examples")
    return {role: count(v, f"max_examples.{role}") for role, v in value.items()}


def _parse(data: Any, base_dir: Path, source: str | None) -> ExperimentSpec:
    if not isinstance(data, Mapping):
        raise fail(
            "",
            f"an experiment file must hold a mapping of keys ({', '.join(TOP_LEVEL_KEYS)}), got {type(data).__name__}",
        )
    recorded = is_record(data)
    if recorded:
        base_dir, source = check_record(data, base_dir)
    reject_unknown(data, RECORD_KEYS if recorded else TOP_LEVEL_KEYS, "")
    version = data.get("format_version", SPEC_FORMAT_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or version != SPEC_FORMAT_VERSION:  # true == 1
        raise fail("format_version", f"{version!r} is not supported; this version reads {SPEC_FORMAT_VERSION}")
    required = ("name", "tasks", "variants" if recorded else "setups")
    for key in required:
        if key not in data:
            raise fail(key, f"missing (required keys: {', '.join(required)})")
    name = data["name"]
    try:
        check_name(name, "experiment")
    except ConfigError as err:
        raise fail("name", str(err)) from None
    description = data.get("description", "")
    if not isinstance(description, str):
        raise fail("description", f"must be text, got {description!r}")
    task_specs = (
        recorded_tasks(data.get("task_specs"), base_dir)
        if recorded
        else parse_task_files(data.get("task_files"), base_dir)
    )
    task_list = string_list(data["tasks"], "tasks")
    for i, task in enumerate(task_list):
        task_name(task, f"tasks[{i}]")
    no_duplicates(task_list, "tasks", folders=True)
    tasks = tuple(task_list)
    global_training = data.get("training")
    global_training = {} if global_training is None else global_training  # not `or {}`: false, 0 and '' are refused
    if not isinstance(global_training, Mapping):
        raise fail("training", f"must be a mapping of TrainingConfig fields, got {global_training!r}")
    reject_unknown(global_training, TRAINING_FIELDS, "training")
    checked_training(global_training, "st-a", "training")

    if recorded:
        entries = recorded_entries(data["variants"], tasks)
    else:
        entries = setup_entries(data["setups"], dict(global_training), tasks)
    variants = fused_variants(entries)
    output_dir = resolve_path(data.get("output_dir", f"outputs/{name}"), "output_dir", base_dir)
    if output_dir is None:
        raise fail("output_dir", f"must be a path (a string), got null; leave it out for outputs/{name}")
    task_training = parse_task_training(data.get("task_training"), tasks, variants, recorded)
    encoder = parse_encoder(data.get("encoder"), base_dir)
    local_encoder = named_encoder(encoder)
    key = "variants" if recorded else "setups"
    variants = resolve_poolings(variants, entries, local_encoder, key)
    check_generation_setups(variants, tasks, task_specs)
    if not recorded:
        check_generation_pooling(variants, entries, tasks, task_specs)
    check_layernorm_only(variants, entries, local_encoder, key)
    check_architecture_fit(variants, entries, tasks, local_encoder, key)
    check_weights_dtype(local_encoder)
    check_generation_tokenizer(variants, tasks, local_encoder)
    check_bottlenecks(variants, entries, local_encoder, key)
    check_top_k(variants, entries, local_encoder, key)
    check_metrics_for_best(variants, entries, tasks, task_training, key)
    analyses = parse_analyses(data.get(ANALYSES_KEY), variants, tasks, base_dir)
    settings = [
        ("training", global_training),
        *((f"{key}[{i}]", entry) for i, _, entry in entries),
        *((f"{key}[{i}]", swept) for i, swept in _swept_settings(variants, entries)),
        *((f"task_training.{task}", overrides) for task, overrides in task_training.items()),
        *((f"{ANALYSES_KEY}[{i}]", analysis) for i, analysis in enumerate(analyses)),  # a zoo span-ablation's
    ]
    check_max_lengths(settings, local_encoder)
    check_gradient_checkpointing(settings, local_encoder)
    zoo = _zoo(data.get("zoo"), base_dir)
    if zoo is not None:
        if not any(v.setup == "fusion-st-a" for v in variants):
            raise fail("zoo", "given, but setups has no fusion-st-a entry to fuse the zoo's adapters")
        variants = [
            dataclasses.replace(v, options={**v.options, "zoo": zoo}) if v.setup == "fusion-st-a" else v
            for v in variants
        ]
    data_dir = resolve_path(data.get("data_dir"), "data_dir", base_dir)
    fusion = data.get("fusion")
    if recorded and fusion == {}:  # what a record holds when the experiment has no fusion setup
        fusion = None
    fused = parse_fusion(fusion, tasks, variants, recorded)
    _check_adapter_subsets(variants, fused)
    return ExperimentSpec(
        name=name,
        description=description,
        tasks=tasks,
        task_specs={name: spec for name, spec in task_specs.items() if name in tasks},
        variants=tuple(variants),
        seeds=_seeds(data.get("seeds", list(DEFAULT_SEEDS))),
        encoder=encoder,
        fusion=fused,
        data_dir=data_dir,
        output_dir=output_dir,
        max_examples=_max_examples(data.get("max_examples")),
        source=source,
        task_training=task_training,
        zoo=zoo,
        select=parse_select(recorded_select(data.get("select")) if recorded else data.get("select"), variants),
        analyses=analyses,
    )
