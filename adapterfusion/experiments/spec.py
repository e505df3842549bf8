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
      - {name: st-a, reduction_factors: [2, 16, 64], learning_rate: 1e-4}   # three variants: st-a-rf2, ...
      - {name: fusion-st-a, adapter_reduction_factor: 16}                   # fuses the st-a-rf16 adapters
      - {name: mt-a, tasks: [rte, cb]}                                      # one MT-A run per seed on rte and cb
      - fusion-mt-a                                                         # fuses that seed's MT-A adapters
    fusion:                        # target -> source tasks; default: every task of the experiment
      rte: [cb, rte]

A setup entry is a registered setup's name, or a mapping with `name` plus TrainingConfig fields and setup options
(overrides for that setup only). Setups with a `reduction_factor` option (st-a, st-a-houlsby) get variant ids
`<setup>-rf<R>`; `reduction_factors` expands one entry into one variant per value. A fusion setup fuses the adapters
of one stage-1 variant (`adapter_setup`, `adapter_reduction_factor`; default st-a with rf 16), trained with the same
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

The record a runner writes as `<output_dir>/experiment.json` (recorded_dict, plus `spec_hash` and `source`: the
experiment file's path relative to the record's folder) is read as an experiment file too, so `adapterfusion run
<output_dir>/experiment.json` repeats or resumes the experiment. It holds the resolved `variants` and `task_specs` in
place of `setups`, `training` and `task_files`, and its paths are relative to the folder of the file named by `source`
(a record without one holds absolute paths). Each variant is checked as a setup entry would be; `spec_hash` is only
checked to be a digest, as an output dir refuses a different experiment itself (store.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapterfusion._validation import check_name
from adapterfusion.defaults import DEFAULT_DECODER, default_decoder_gguf, default_encoder_path, named_encoder
from adapterfusion.encoder_limits import check_max_length
from adapterfusion.encoders import check_encoder, default_pooling
from adapterfusion.errors import AdapterFusionError, ConfigError, DefaultModelMissingError
from adapterfusion.experiments.analyses import ANALYSES_KEY, parse_analyses
from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.experiments.paths import relative_to_experiment_file
from adapterfusion.experiments.sweep import SELECT_KEY, SWEEP_KEY, parse_select, sweep_combinations, sweep_id
from adapterfusion.fusion.config import resolve_fusion_config
from adapterfusion.heads.pooling import resolve_pooling
from adapterfusion.io.documents import read_document
from adapterfusion.io.paths import check_readable_file
from adapterfusion.tasks.builtin import BUILTIN_TASKS
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.registry import list_tasks, load_task_file, register_task
from adapterfusion.tasks.spec import GENERATION, ROLES, TaskSpec, suggest
from adapterfusion.training.config import MAX_SEED, SEED_RANGE_REASON, TrainingConfig
from adapterfusion.training.errors import TrainingError
from adapterfusion.training.multitask import MT_A
from adapterfusion.training.setups import LAYERNORM_ONLY, check_layer_norms, get_setup, list_setups
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
_VARIANT_KEYS = ("id", "setup", "options", "training", "adapter_variant", "tasks", "sweep")  # SetupVariant.to_dict
_MISSING = object()
DEFAULT_SEEDS = (42,)
BUILTIN_TASK_NAMES = frozenset(task.name for task in BUILTIN_TASKS)
DEFAULT_REDUCTION_FACTOR = 16
# Per-run settings the experiment owns: the seed comes from `seeds`, the fusion's sources from `fusion`, and the
# fused adapters' seed is the fusion run's own seed (so each seed is an independent replicate of both stages).
_OWNED = {"seed": "seeds", "sources": "fusion", "adapter_seed": "seeds", "zoo": "zoo"}
# MT-A trains all its tasks in one run (train_multitask: one job per seed, plan.MULTITASK_KIND), with these options;
# fusion-mt-a fuses that run's adapters on the encoder it fine-tuned.
MULTITASK_OPTIONS = {MT_A: {"reduction_factor": DEFAULT_REDUCTION_FACTOR, "pooling": None}}
MULTITASK_FUSION = "fusion-mt-a"
_TRAINING_FIELDS = tuple(f.name for f in dataclasses.fields(TrainingConfig) if f.name != "seed")


@dataclass(frozen=True)
class SetupVariant:
    """One column of the results: a registered setup with its options and TrainingConfig overrides.
    `adapter_variant` (fusion setups only) is the id of the stage-1 variant whose adapters it fuses; `tasks`, when
    set, are the only tasks it runs on."""

    id: str
    setup: str
    options: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    adapter_variant: str | None = None
    tasks: tuple[str, ...] | None = None
    sweep: dict[str, Any] | None = None  # {"group": entry id or setup, "settings": the swept values}: sweep.py

    def runs_on(self, task: str) -> bool:
        return self.tasks is None or task in self.tasks

    @property
    def is_stage1(self) -> bool:
        """Its runs put an adapter into an AdapterStore for fusions to use."""
        return get_setup(self.setup).stores_adapter

    @property
    def is_fusion(self) -> bool:
        return "sources" in get_setup(self.setup).options

    @property
    def is_multitask(self) -> bool:
        """One run trains all its tasks (MT-A), so it is one job per seed, not one per task."""
        return self.setup in MULTITASK_OPTIONS

    @property
    def fused_setup(self) -> str | None:
        """The stage-1 setup whose adapters this fusion variant fuses (None if it is no fusion)."""
        if not self.is_fusion:
            return None
        if self.setup == MULTITASK_FUSION:
            return MT_A
        return self.options.get("adapter_setup", get_setup(self.setup).options["adapter_setup"])

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "setup": self.setup,
            "options": dict(self.options),
            "training": dict(self.training),
            "adapter_variant": self.adapter_variant,
        }
        if self.tasks is not None:  # only when set, so experiments without it keep their spec hash
            out["tasks"] = list(self.tasks)
        if self.sweep is not None:  # likewise
            out["sweep"] = {"group": self.sweep["group"], "settings": dict(self.sweep["settings"])}
        return out


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

    def spec_hash(self, absolute_paths: bool = False) -> str:
        """A digest of everything that decides results (not the output dir, the description or the file's path),
        with paths relative to the experiment file (recorded_dict), so that a clone elsewhere is the same experiment:
        an output dir records it, and refuses a different experiment. absolute_paths: the digest older versions
        recorded, of the absolute paths."""
        data = self.to_dict() if absolute_paths else self.recorded_dict()
        ignored = ("output_dir", "description", "select", ANALYSES_KEY)  # select: report; analyses: own job hashes
        data = {k: v for k, v in data.items() if k not in ignored}
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
        data = read_document(path, ExperimentSpecError)  # UTF-8, and a key given twice is refused
        if _is_record(data):  # its `source` is relative to the output dir as the runner named it, links unresolved
            return _parse(data, Path(os.path.abspath(path)).parent, None)
        return _parse(data, path.resolve().parent, str(path.resolve()))


def load_spec(spec_or_path: ExperimentSpec | Mapping[str, Any] | str | os.PathLike) -> ExperimentSpec:
    """An ExperimentSpec as is, a mapping validated, or a file path loaded."""
    if isinstance(spec_or_path, ExperimentSpec):
        return spec_or_path
    if isinstance(spec_or_path, Mapping):
        return ExperimentSpec.from_dict(spec_or_path)
    return ExperimentSpec.load(spec_or_path)


# ---- parsing -----------------------------------------------------------------------------------------------
def _fail(path: str, message: str) -> ExperimentSpecError:
    return ExperimentSpecError(f"{path}: {message}" if path else message)


def _reject_unknown(data: Mapping[str, Any], allowed: Sequence[str], path: str) -> None:
    for key in data:
        if key not in allowed:
            where = f"{path}.{key}" if path else str(key)
            hint = f" ({key!r} is set by {_OWNED[key]!r})" if key in _OWNED else suggest(str(key), list(allowed))
            raise _fail(where, f"unknown key.{hint} Allowed keys: {', '.join(allowed)}")


def _task_name(value: Any, path: str) -> str:
    known = list_tasks()
    if value not in known:
        raise _fail(path, f"unknown task {value!r}.{suggest(str(value), known)} Known tasks: {', '.join(known)}")
    return value


def _string_list(value: Any, path: str) -> list[Any]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise _fail(path, f"must be a non-empty list, got {value!r}")
    return list(value)


def _no_duplicates(values: Sequence[Any], path: str) -> None:
    for i, value in enumerate(values):
        if value in values[:i]:
            raise _fail(f"{path}[{i}]", f"duplicate {value!r} (also at {path}[{values.index(value)}])")


def _resolve_path(value: Any, path: str, base_dir: Path) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise _fail(path, f"must be a path (a string), got {value!r}")
    return str(_absolute(Path(value).expanduser(), base_dir))


def _absolute(path: Path, base_dir: Path) -> Path:
    """`path` relative to the experiment file's folder, made absolute without following symbolic links: a clone
    whose ../shared is a link records the same relative paths (and spec hash) as one where it is a folder."""
    return path if path.is_absolute() else Path(os.path.normpath(base_dir / path))


def _encoder(value: Any, base_dir: Path) -> str | None:
    if value is None:
        return None
    if value == DEFAULT_DECODER:  # kept by name, so the spec is the same on every machine (runner.py resolves it)
        try:
            default_decoder_gguf()
        except AdapterFusionError as err:
            raise _fail("encoder", str(err)) from None
        return value
    if not isinstance(value, str) or not value:
        raise _fail(
            "encoder", f"must be an encoder folder or a Hub id (a string), or null for the shipped one; got {value!r}"
        )
    try:  # a mistyped path or a folder with no model or tokenizer is refused here, not per job
        local = check_encoder(value, base_dir)
    except AdapterFusionError as err:  # a Hub id is looked up once, when the experiment runs (runner.py)
        raise _fail("encoder", str(err)) from None
    return str(local) if local is not None else value


def _zoo(value: Any, base_dir: Path) -> str | None:
    """None, 'shipped' (the package's adapter zoo) or an AdapterStore folder (relative to the file)."""
    if value is None or value == SHIPPED:
        return value
    if not isinstance(value, str) or not value:
        raise _fail(
            "zoo", f"must be {SHIPPED!r} (the adapters shipped in the package) or an AdapterStore folder; got {value!r}"
        )
    folder = _absolute(Path(value).expanduser(), base_dir)
    if not folder.is_dir():
        raise _fail(
            "zoo",
            f"{str(folder)!r} is not a folder; give {SHIPPED!r} or the folder of an AdapterStore "
            "(e.g. <experiment output>/adapters/st-a-rf16)",
        )
    return str(folder)


def _task_files(value: Any, base_dir: Path) -> dict[str, dict[str, Any]]:
    """Register the tasks described in `task_files` (JSON/YAML task descriptions, relative to the experiment file),
    so that `tasks` may name them: name -> the task's TaskSpec dict, which the jobs carry to their workers."""
    if value is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for i, raw in enumerate(_string_list(value, "task_files")):
        path = _resolve_path(raw, f"task_files[{i}]", base_dir)
        try:
            task = _register_user_task(load_task_file(str(path), register=False))
        except TaskError as err:
            raise _fail(f"task_files[{i}]", str(err)) from None
        out[task.name] = task.to_dict()
    return out


def _register_user_task(task: TaskSpec) -> TaskSpec:
    """Register a task of the experiment's own, so that `tasks` and `fusion` may name it."""
    if task.name in BUILTIN_TASK_NAMES:
        raise TaskError(f"it describes {task.name!r}, a built-in task; give the task another name")
    return register_task(task, overwrite=True)  # the same file read again (a re-run) replaces its own entry


# ---- a runner's record (<output_dir>/experiment.json) read back -----------------------------------------------------
def _is_record(data: Any) -> bool:
    """Whether `data` is a runner's record of an experiment (its resolved `variants`), not an experiment file."""
    return isinstance(data, Mapping) and "variants" in data


def _record_origin(data: Mapping[str, Any], record_dir: Path) -> tuple[Path, str | None]:
    """The folder a record's relative paths start from, and the experiment file it records: `source`, relative to
    the record's folder. A record of an experiment given as a mapping has no source, and absolute paths."""
    source = data.get("source")
    if source is None:
        return record_dir, None
    if not isinstance(source, str) or not source:
        raise _fail(
            "source",
            "must be the path of the experiment file this record was run from, relative to the record's folder (as "
            f"the runner writes it), or null; got {source!r}",
        )
    original = _absolute(Path(source).expanduser(), record_dir)
    return original.parent, str(original)


def _recorded_tasks(value: Any, base_dir: Path) -> dict[str, dict[str, Any]]:
    """A record's `task_specs` (name -> TaskSpec dict, data files relative to the experiment file), registered as
    their task_files were."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _fail("task_specs", f"must map a task name to its task description, got {value!r}")
    out: dict[str, dict[str, Any]] = {}
    for name, raw in value.items():
        try:
            if not isinstance(raw, Mapping):
                raise TaskError(f"must be a task description (a mapping), got {raw!r}")
            files = raw.get("data_files")
            if isinstance(files, Mapping):  # made absolute as the task file's own paths were, without links followed
                files = {
                    role: str(_absolute(Path(f), base_dir)) if isinstance(f, str) else f for role, f in files.items()
                }
                raw = {**raw, "data_files": files}
            task = TaskSpec.from_dict(raw)
            if task.name != name:
                raise TaskError(f"describes a task named {task.name!r}; a task is listed under its own name")
            task = _register_user_task(task)
        except TaskError as err:
            raise _fail(f"task_specs.{name}", str(err)) from None
        out[task.name] = task.to_dict()
    return out


def _recorded_entries(raw: Any, tasks: tuple[str, ...]) -> list[tuple[int, SetupVariant, Any]]:
    """A record's `variants`, each checked as the setup entry that gives exactly it (its id, options and merged
    training), then given the `sweep` and `adapter_variant` it records, which are checked against the others."""
    setups = list_setups()
    given: list[Mapping[str, Any]] = []
    entries: list[dict[str, Any]] = []
    for i, variant in enumerate(_string_list(raw, "variants")):
        path = f"variants[{i}]"
        if not isinstance(variant, Mapping):
            raise _fail(path, f"must be a setup variant as the runner records it ({', '.join(_VARIANT_KEYS)})")
        _reject_unknown(variant, _VARIANT_KEYS, path)
        for key in ("id", "setup"):
            if key not in variant:
                raise _fail(f"{path}.{key}", "missing")
        if variant["setup"] not in setups:
            raise _fail(
                f"{path}.setup",
                f"unknown setup {variant['setup']!r}.{suggest(str(variant['setup']), setups)} "
                f"Known setups: {', '.join(setups)}",
            )
        parts = {key: variant.get(key) or {} for key in ("options", "training")}
        for key, part in parts.items():
            if not isinstance(part, Mapping):
                raise _fail(f"{path}.{key}", f"must be a mapping, got {part!r}")
        # The zoo is the experiment's (top-level `zoo`), written into each fusion-st-a variant as it is read.
        options = {k: v for k, v in parts["options"].items() if k != "zoo"}
        entry = {"name": variant["setup"], "id": variant["id"], **options, **parts["training"]}
        if variant.get("tasks") is not None:
            entry["tasks"] = variant["tasks"]
        given.append(variant)
        entries.append(entry)
    out = _setup_entries(entries, {}, tasks, key="variants")
    stage1 = {v.id: v for _, v, _ in out if v.is_stage1}
    for k, ((i, variant, entry), recorded) in enumerate(zip(out, given, strict=True)):
        path = f"variants[{i}]"
        adapter_variant = recorded.get("adapter_variant")
        if variant.is_fusion:
            fused = stage1.get(adapter_variant) if isinstance(adapter_variant, str) else None
            if fused is None or fused.setup != variant.fused_setup:
                choices = [v.id for v in stage1.values() if v.setup == variant.fused_setup]
                raise _fail(
                    f"{path}.adapter_variant",
                    f"{adapter_variant!r} is not a {variant.fused_setup} variant of this record; choose one of "
                    f"{choices}",
                )
        elif adapter_variant is not None:
            raise _fail(f"{path}.adapter_variant", f"only a fusion variant fuses adapters; {variant.id} is none")
        sweep = _recorded_sweep(recorded.get("sweep"), variant, path)
        out[k] = (i, dataclasses.replace(variant, adapter_variant=adapter_variant, sweep=sweep), entry)
    return out


def _recorded_sweep(value: Any, variant: SetupVariant, path: str) -> dict[str, Any] | None:
    """A recorded variant's `sweep` ({"group", "settings"}), whose settings must be the variant's own values."""
    if value is None:
        return None
    path = f"{path}.{SWEEP_KEY}"
    if variant.is_fusion or variant.is_multitask:
        raise _fail(path, f"{variant.setup} variants are not swept")
    if (
        not isinstance(value, Mapping)
        or set(value) != {"group", "settings"}
        or not isinstance(value["group"], str)
        or not isinstance(value["settings"], Mapping)
        or not value["settings"]
    ):
        raise _fail(path, f"must be {{group: <its sweep>, settings: {{<swept key>: <value>}}}}, got {value!r}")
    own = {**variant.options, **variant.training}
    for key, setting in value["settings"].items():
        if own.get(key, _MISSING) != setting:
            raise _fail(f"{path}.settings.{key}", f"{setting!r}, but the variant's {key} is {own.get(key)!r}")
    return {"group": value["group"], "settings": dict(value["settings"])}


def _recorded_select(value: Any) -> Any:
    """A record's `select` (a list of rows, {name, sweep, ...}, in the file's order) as the file's mapping."""
    if value is None or isinstance(value, Mapping):  # a mapping, as the file has it, is taken as it is
        return value
    rows = _string_list(value, SELECT_KEY)
    if not all(isinstance(row, Mapping) and isinstance(row.get("name"), str) for row in rows):
        raise _fail(SELECT_KEY, f"must be a list of rows {{name: <row>, sweep: <sweep>, ...}}, got {value!r}")
    _no_duplicates([row["name"] for row in rows], SELECT_KEY)
    return {row["name"]: {k: v for k, v in row.items() if k != "name"} for row in rows}


def _seeds(value: Any) -> tuple[int, ...]:
    seeds = [value] if isinstance(value, int) and not isinstance(value, bool) else _string_list(value, "seeds")
    for i, seed in enumerate(seeds):
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
            raise _fail(f"seeds[{i}]", f"seed {seed!r} must be an integer in 0..{MAX_SEED}{SEED_RANGE_REASON}")
    _no_duplicates(seeds, "seeds")
    return tuple(seeds)


def _max_examples(value: Any) -> int | dict[str, int] | None:
    def count(v: Any, path: str) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise _fail(path, f"must be an integer >= 1, got {v!r}")
        return v

    if value is None or isinstance(value, int) and not isinstance(value, bool):
        return None if value is None else count(value, "max_examples")
    if not isinstance(value, Mapping):
        raise _fail(
            "max_examples",
            f"must be an integer or a mapping of split role ({', '.join(ROLES)}) to integer; got {value!r}",
        )
    _reject_unknown(value, ROLES, "max_examples")
    return {role: count(v, f"max_examples.{role}") for role, v in value.items()}


def _training(overrides: Mapping[str, Any], setup: str, path: str) -> dict[str, Any]:
    """Check each TrainingConfig override on its own (so the error names its key), then all together."""
    for key, value in overrides.items():
        try:
            TrainingConfig.for_setup(setup, **{key: value})
        except (ConfigError, TypeError) as err:
            raise _fail(f"{path}.{key}" if path else key, str(err)) from None
    try:
        TrainingConfig.for_setup(setup, **overrides)
    except (ConfigError, TypeError) as err:
        raise _fail(path or "training", str(err)) from None
    return dict(overrides)


def _rf_label(value: float) -> str:
    """'rf16', 'rf0_5': a variant id is a module key and a folder name, so '.' (and '+' of 1e+20) become '_'."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"rf{value:g}")


def _positive_number(value: Any, path: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise _fail(path, f"must be a positive number (the paper uses 2, 16 or 64), got {value!r}")
    return value


def _variant_tasks(value: Any, tasks: tuple[str, ...], path: str) -> tuple[str, ...]:
    chosen = _string_list(value, path)
    for j, task in enumerate(chosen):
        if task not in tasks:
            raise _fail(
                f"{path}[{j}]",
                f"{task!r} is not one of the experiment's tasks ({', '.join(tasks)}).{suggest(str(task), list(tasks))}",
            )
    _no_duplicates(chosen, path)
    return tuple(chosen)


def _setup_entries(
    raw: Any, global_training: dict[str, Any], tasks: tuple[str, ...], key: str = "setups"
) -> list[tuple[int, SetupVariant, Any]]:
    """Each entry's variants (fusion variants still without adapter_variant) with their index and raw entry; `key`
    is the list's name in error messages (a record's `variants` are checked as entries too)."""
    setups = list_setups()
    out: list[tuple[int, SetupVariant, Any]] = []
    for i, entry in enumerate(_string_list(raw, key)):
        path = f"{key}[{i}]"
        entry = {"name": entry} if isinstance(entry, str) else entry
        if not isinstance(entry, Mapping):
            raise _fail(path, f"must be a setup name or a mapping with 'name', got {entry!r}")
        name = entry.get("name")
        if name not in setups:
            raise _fail(
                f"{path}.name", f"unknown setup {name!r}.{suggest(str(name), setups)} Known setups: {', '.join(setups)}"
            )
        recipe = get_setup(name)
        multitask = name in MULTITASK_OPTIONS
        defaults = _setup_option_defaults(name)
        options = [o for o in defaults if o not in _OWNED]
        has_rf = "reduction_factor" in defaults and not multitask  # one multi-task run per seed: no rf variants
        fusion = "sources" in recipe.options
        extra = (
            ["name", "id", "tasks"]
            + (["reduction_factors"] if has_rf else [])
            + (["adapter_reduction_factor"] if fusion else [SWEEP_KEY] if not multitask else [])
        )
        _reject_unknown(entry, extra + options + list(_TRAINING_FIELDS), path)
        given_options = {k: v for k, v in entry.items() if k in options}
        training = {**global_training, **{k: v for k, v in entry.items() if k in _TRAINING_FIELDS}}
        training = _training(training, name, path)
        only = _variant_tasks(entry["tasks"], tasks, f"{path}.tasks") if "tasks" in entry else None
        if "adapter_reduction_factor" in entry:
            _positive_number(entry["adapter_reduction_factor"], f"{path}.adapter_reduction_factor")
        if fusion and "adapter_setup" in given_options:
            stage1 = [s for s in setups if get_setup(s).stores_adapter and s not in MULTITASK_OPTIONS]
            if given_options["adapter_setup"] not in stage1:
                multitask_setup = given_options["adapter_setup"] in MULTITASK_OPTIONS
                hint = f" ({MULTITASK_FUSION} fuses {MT_A} adapters)" if multitask_setup else ""
                raise _fail(
                    f"{path}.adapter_setup",
                    f"{given_options['adapter_setup']!r} is not a stage-1 adapter "
                    f"setup of {name}{hint}; choose one of {', '.join(stage1)}",
                )
        if fusion and given_options.get("fusion_config") is not None:  # e.g. 'dynamic', 'scalearn' or a dict
            try:
                resolve_fusion_config(given_options["fusion_config"])
            except ConfigError as err:
                raise _fail(f"{path}.fusion_config", str(err)) from None
        if multitask and training.get("fp16"):
            raise _fail(f"{path}.fp16", f"{name} trains without loss scaling, so fp16 would diverge; use bf16: true")
        for switch in ("gradient_checkpointing", "torch_compile"):
            if multitask and training.get(switch):
                raise _fail(f"{path}.{switch}", f"{name}'s own training loop does not support it; set it to false")
        start = len(out)
        if has_rf:
            if "reduction_factors" in entry and "reduction_factor" in entry:
                raise _fail(f"{path}.reduction_factors", "give either reduction_factor or reduction_factors, not both")
            factors = entry.get(
                "reduction_factors", [entry.get("reduction_factor", recipe.options["reduction_factor"])]
            )
            factors = _string_list(factors, f"{path}.reduction_factors")
            for j, rf in enumerate(factors):
                _positive_number(rf, f"{path}.reduction_factors[{j}]")
            _no_duplicates(factors, f"{path}.reduction_factors")
            if "id" in entry and len(factors) > 1:
                raise _fail(f"{path}.id", "an id names one variant; drop it or give one reduction factor")
            for rf in factors:
                variant_id = entry.get("id", f"{name}-{_rf_label(rf)}")
                out.append(
                    (
                        i,
                        SetupVariant(variant_id, name, {**given_options, "reduction_factor": rf}, training, tasks=only),
                        entry,
                    )
                )
        elif multitask:
            rf = given_options.get("reduction_factor", defaults["reduction_factor"])
            _positive_number(rf, f"{path}.reduction_factor")
            out.append(
                (
                    i,
                    SetupVariant(entry.get("id", name), name, {**defaults, **given_options}, training, tasks=only),
                    entry,
                )
            )
        else:
            out.append((i, SetupVariant(entry.get("id", name), name, given_options, training, tasks=only), entry))
        if SWEEP_KEY in entry:
            out[start:] = _swept(i, entry, out[start:], options, has_rf)
    for i, variant, _ in out:
        try:
            check_name(variant.id, "setup variant")
        except ConfigError as err:
            raise _fail(f"{key}[{i}].id", str(err)) from None
    ids = [variant.id for _, variant, _ in out]
    for k, (i, variant, _) in enumerate(out):
        if variant.id in ids[:k]:
            first = out[ids.index(variant.id)][0]
            raise _fail(
                f"{key}[{i}]",
                f"duplicate setup variant {variant.id!r} (also from {key}[{first}]); give one of them an 'id'",
            )
    return out


def _swept(
    i: int, entry: Mapping[str, Any], bases: list[tuple[int, SetupVariant, Any]], options: list[str], has_rf: bool
) -> list[tuple[int, SetupVariant, Any]]:
    """The variants of a setup entry with a `sweep`, one per combination of its values (experiments/sweep.py)."""
    path = f"setups[{i}].{SWEEP_KEY}"
    if has_rf and "reduction_factors" in entry and "reduction_factor" in (entry[SWEEP_KEY] or {}):
        raise _fail(path, "sweeps reduction_factor, and the entry gives reduction_factors too; give it in one place")
    given = {k: v for k, v in entry.items() if k not in ("name", "id", "tasks", SWEEP_KEY)}
    allowed = [*options, *(["reduction_factor"] if has_rf else []), *_TRAINING_FIELDS]
    combos = sweep_combinations(entry[SWEEP_KEY], list(dict.fromkeys(allowed)), given, path)
    group = entry.get("id", entry["name"])
    out = []
    for _, base, raw in bases:
        for settings in combos:
            training = {k: v for k, v in settings.items() if k in _TRAINING_FIELDS}
            chosen = {k: v for k, v in settings.items() if k not in _TRAINING_FIELDS}
            if "reduction_factor" in chosen:
                _positive_number(chosen["reduction_factor"], f"{path}.reduction_factor")
            variant = dataclasses.replace(
                base,
                id=sweep_id(group if "reduction_factor" in settings else base.id, settings),
                options={**base.options, **chosen},
                training=_training({**base.training, **training}, base.setup, path),
                sweep={"group": group, "settings": dict(settings)},
            )
            out.append((i, variant, raw))
    return out


def _adapter_variant(i: int, variant: SetupVariant, entry: Mapping[str, Any], stage1: list[SetupVariant]) -> str:
    """The stage-1 variant a fusion fuses: its fused_setup (fusion-st-a: adapter_setup, default st-a) with
    adapter_reduction_factor (default: the only one, else 16)."""
    adapter_setup = variant.fused_setup
    candidates = [v for v in stage1 if v.setup == adapter_setup]
    if not candidates:
        raise _fail(
            f"setups[{i}]",
            f"{variant.setup} fuses {adapter_setup} adapters, but setups has no "
            f"{adapter_setup} entry; add '- {adapter_setup}' to setups",
        )
    wanted = entry.get("adapter_reduction_factor")
    if wanted is None and len(candidates) == 1:
        return candidates[0].id
    rf = DEFAULT_REDUCTION_FACTOR if wanted is None else wanted
    for candidate in candidates:
        if candidate.options.get("reduction_factor") == rf:
            return candidate.id
    have = [c.options.get("reduction_factor") for c in candidates]
    raise _fail(
        f"setups[{i}].adapter_reduction_factor",
        f"no {adapter_setup} variant with reduction factor {rf!r}; the experiment trains {have}: "
        f"choose one, or add {rf!r} to that entry's reduction_factors",
    )


def _fusion(raw: Any, tasks: tuple[str, ...], has_fusion: bool) -> dict[str, tuple[str, ...]]:
    if raw is not None and not has_fusion:
        fusion_setups = [s for s in list_setups() if "sources" in get_setup(s).options]
        raise _fail("fusion", f"given, but setups has no fusion setup; add one of {', '.join(fusion_setups)}")
    if not has_fusion:
        return {}
    raw = {} if raw is None else raw
    if not isinstance(raw, Mapping):
        raise _fail("fusion", f"must map a target task to its source tasks, e.g. {{rte: [mnli, rte]}}; got {raw!r}")
    for target in raw:
        if target not in tasks:
            raise _fail(
                f"fusion.{target}",
                f"{target!r} is not one of the experiment's tasks "
                f"({', '.join(tasks)}).{suggest(str(target), list(tasks))}",
            )
    out: dict[str, tuple[str, ...]] = {}
    for target in tasks:
        path = f"fusion.{target}"
        sources = raw.get(target, "all")
        sources = list(tasks) if sources == "all" else _string_list(sources, path)
        for j, source in enumerate(sources):
            _task_name(source, f"{path}[{j}]")
        _no_duplicates(sources, path)
        out[target] = tuple(dict.fromkeys([*sources, target]))  # the target's own adapter is always fused
    return out


def _task_training(raw: Any, tasks: tuple[str, ...], variants: Sequence[SetupVariant]) -> dict[str, dict[str, Any]]:
    """Per-task TrainingConfig overrides, each checked with every setup that runs on that task."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise _fail(
            "task_training", f"must map a task to TrainingConfig overrides, e.g. {{cb: {{epochs: 10}}}}; got {raw!r}"
        )
    out: dict[str, dict[str, Any]] = {}
    for task, overrides in raw.items():
        path = f"task_training.{task}"
        if task not in tasks:
            raise _fail(
                path,
                f"{task!r} is not one of the experiment's tasks ({', '.join(tasks)}).{suggest(str(task), list(tasks))}",
            )
        if not isinstance(overrides, Mapping):
            raise _fail(path, f"must be a mapping of TrainingConfig fields, got {overrides!r}")
        _reject_unknown(overrides, _TRAINING_FIELDS, path)
        for variant in variants:
            if variant.runs_on(task) and not variant.is_multitask:
                _training({**variant.training, **overrides}, variant.setup, path)
        out[str(task)] = dict(overrides)
    return out


def _resolve_poolings(
    variants: Sequence[SetupVariant],
    entries: Sequence[tuple[int, SetupVariant, Any]],
    encoder: str | None,
    key: str = "setups",
) -> list[SetupVariant]:
    """Every variant with a `pooling` option gets it spelled out (the entry's, else the encoder's own: mean for the
    shipped MiniLM, see heads/pooling.py), so job hashes and the saved spec say which pooling each run used."""
    if encoder is None:
        try:
            encoder = str(default_encoder_path())
        except DefaultModelMissingError:
            encoder = None
    out = []
    for variant, (i, _, _) in zip(variants, entries, strict=True):
        if "pooling" not in variant.options and "pooling" not in _setup_option_defaults(variant.setup):
            out.append(variant)
            continue
        try:
            pooling = resolve_pooling(variant.options.get("pooling"), encoder, default_pooling(encoder))
        except ConfigError as err:
            raise _fail(f"{key}[{i}].pooling", str(err)) from None
        out.append(dataclasses.replace(variant, options={**variant.options, "pooling": pooling}))
    return out


def _check_max_lengths(
    global_training: Mapping[str, Any],
    entries: Sequence[tuple[int, SetupVariant, Any]],
    task_training: Mapping[str, Mapping[str, Any]],
    encoder: str | None,
    key: str = "setups",
) -> None:
    """A max_length above the encoder's positions, refused here when its config can be read without the network
    (else the job refuses it before training: training/api.py)."""
    try:
        checked = encoder if encoder is not None else str(default_encoder_path())
    except DefaultModelMissingError:
        return
    sources = [
        ("training", global_training),
        *((f"{key}[{i}]", entry) for i, _, entry in entries),
        *((f"task_training.{task}", overrides) for task, overrides in task_training.items()),
    ]
    for path, overrides in sources:
        if "max_length" in overrides:
            try:
                check_max_length(overrides["max_length"], checked)
            except ConfigError as err:
                raise _fail(f"{path}.max_length", str(err)) from None


# Setups that train a classification head of their own, which a generation task (scored by the language model's own
# head) has no use for: refused when the file is read, not in every job at run time.
_HEADED_SETUPS = ("head", MT_A)


def _check_generation_setups(
    variants: Sequence[SetupVariant], tasks: tuple[str, ...], task_specs: Mapping[str, Mapping[str, Any]]
) -> None:
    generation = [task for task in tasks if task_specs.get(task, {}).get("kind") == GENERATION]
    for variant in variants:
        if variant.setup in _HEADED_SETUPS:
            clashing = [task for task in generation if variant.runs_on(task)]
            if clashing:
                raise _fail(
                    f"setups ({variant.id})",
                    f"{variant.setup} trains a classification head of its own, but {clashing} are generation tasks, "
                    "which the language model's own head scores; give the entry 'tasks:' without them, or train "
                    "them with st-a and fusion-st-a",
                )


def _check_layer_norms(
    variants: Sequence[SetupVariant], entries: Sequence[tuple[int, SetupVariant, Any]], encoder: str | None, key: str
) -> None:
    """layernorm-only on an encoder without torch.nn.LayerNorm (RMSNorm decoders: SmolLM2, Llama, Qwen, ...) is
    refused here, from the encoder's config, not by every job at run time (the jobs still refuse an encoder whose
    config cannot be read without the network). The shipped MiniLM (encoder null) has LayerNorms."""
    first = next(
        (i for variant, (i, _, _) in zip(variants, entries, strict=True) if variant.setup == LAYERNORM_ONLY), None
    )
    if first is None or encoder is None:
        return
    try:
        check_layer_norms(encoder)
    except TrainingError as err:
        raise _fail(f"{key}[{first}]", str(err)) from None


def _setup_option_defaults(setup: str) -> Mapping[str, Any]:
    return MULTITASK_OPTIONS[setup] if setup in MULTITASK_OPTIONS else get_setup(setup).options


def _parse(data: Any, base_dir: Path, source: str | None) -> ExperimentSpec:
    if not isinstance(data, Mapping):
        raise _fail(
            "",
            f"an experiment file must hold a mapping of keys ({', '.join(TOP_LEVEL_KEYS)}), got {type(data).__name__}",
        )
    recorded = _is_record(data)
    if recorded:
        if "setups" in data:
            raise _fail(
                "setups",
                "given beside 'variants': an experiment file lists setups, a runner's record (experiment.json) the "
                "variants they resolved to; keep one of them",
            )
        digest = data.get("spec_hash")  # its form only: the output dir's store refuses a different experiment
        if digest is not None and not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{16}", digest)):
            raise _fail("spec_hash", f"must be the 16 hex digits the runner records, got {digest!r}; or leave it out")
        base_dir, source = _record_origin(data, base_dir)
    _reject_unknown(data, RECORD_KEYS if recorded else TOP_LEVEL_KEYS, "")
    version = data.get("format_version", SPEC_FORMAT_VERSION)
    if version != SPEC_FORMAT_VERSION:
        raise _fail("format_version", f"{version!r} is not supported; this version reads {SPEC_FORMAT_VERSION}")
    required = ("name", "tasks", "variants" if recorded else "setups")
    for key in required:
        if key not in data:
            raise _fail(key, f"missing (required keys: {', '.join(required)})")
    name = data["name"]
    try:
        check_name(name, "experiment")
    except ConfigError as err:
        raise _fail("name", str(err)) from None
    description = data.get("description", "")
    if not isinstance(description, str):
        raise _fail("description", f"must be text, got {description!r}")
    task_specs = (
        _recorded_tasks(data.get("task_specs"), base_dir) if recorded else _task_files(data.get("task_files"), base_dir)
    )
    task_list = _string_list(data["tasks"], "tasks")
    for i, task in enumerate(task_list):
        _task_name(task, f"tasks[{i}]")
    _no_duplicates(task_list, "tasks")
    tasks = tuple(task_list)
    global_training = data.get("training") or {}
    if not isinstance(global_training, Mapping):
        raise _fail("training", f"must be a mapping of TrainingConfig fields, got {global_training!r}")
    _reject_unknown(global_training, _TRAINING_FIELDS, "training")
    _training(global_training, "st-a", "training")

    if recorded:
        entries = _recorded_entries(data["variants"], tasks)
    else:
        entries = _setup_entries(data["setups"], dict(global_training), tasks)
    stage1 = [variant for _, variant, _ in entries if variant.is_stage1]
    variants = [
        dataclasses.replace(variant, adapter_variant=_adapter_variant(i, variant, entry, stage1))
        if variant.is_fusion and variant.adapter_variant is None  # a record names it
        else variant
        for i, variant, entry in entries
    ]
    # A fusion's default id is its setup's name; name it after its adapters when it does not fuse st-a-rf16 (or,
    # for fusion-mt-a, the variant called mt-a).
    default_fused = {MULTITASK_FUSION: MT_A}
    variants = [
        dataclasses.replace(v, id=f"{v.setup}-{v.adapter_variant}")
        if v.is_fusion
        and "id" not in entry
        and v.adapter_variant != default_fused.get(v.setup, f"st-a-{_rf_label(DEFAULT_REDUCTION_FACTOR)}")
        else v
        for v, (_, _, entry) in zip(variants, entries, strict=True)
    ]
    ids = [v.id for v in variants]
    if len(set(ids)) != len(ids):
        dup = next(x for x in ids if ids.count(x) > 1)
        raise _fail("setups", f"two fusion entries would both be called {dup!r}; give one of them an 'id'")
    output_dir = _resolve_path(data.get("output_dir", f"outputs/{name}"), "output_dir", base_dir)
    if output_dir is None:
        raise _fail("output_dir", f"must be a path (a string), got null; leave it out for outputs/{name}")
    task_training = _task_training(data.get("task_training"), tasks, variants)
    encoder = _encoder(data.get("encoder"), base_dir)
    local_encoder = named_encoder(encoder)
    key = "variants" if recorded else "setups"
    variants = _resolve_poolings(variants, entries, local_encoder, key)
    _check_generation_setups(variants, tasks, task_specs)
    _check_layer_norms(variants, entries, local_encoder, key)
    _check_max_lengths(global_training, entries, task_training, local_encoder, key)
    zoo = _zoo(data.get("zoo"), base_dir)
    if zoo is not None:
        if not any(v.setup == "fusion-st-a" for v in variants):
            raise _fail("zoo", "given, but setups has no fusion-st-a entry to fuse the zoo's adapters")
        variants = [
            dataclasses.replace(v, options={**v.options, "zoo": zoo}) if v.setup == "fusion-st-a" else v
            for v in variants
        ]
    fusion = data.get("fusion")
    if recorded and fusion == {}:  # what a record holds when the experiment has no fusion setup
        fusion = None
    return ExperimentSpec(
        name=name,
        description=description,
        tasks=tasks,
        task_specs={name: spec for name, spec in task_specs.items() if name in tasks},
        variants=tuple(variants),
        seeds=_seeds(data.get("seeds", list(DEFAULT_SEEDS))),
        encoder=encoder,
        fusion=_fusion(fusion, tasks, any(v.is_fusion for v in variants)),
        data_dir=_resolve_path(data.get("data_dir"), "data_dir", base_dir),
        output_dir=output_dir,
        max_examples=_max_examples(data.get("max_examples")),
        source=source,
        task_training=task_training,
        zoo=zoo,
        select=parse_select(_recorded_select(data.get("select")) if recorded else data.get("select"), variants),
        analyses=parse_analyses(data.get(ANALYSES_KEY), variants, tasks, base_dir),
    )
