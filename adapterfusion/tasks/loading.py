"""`load_task_data`: a task's train/validation(/test) splits as a checked `datasets.DatasetDict`, plus a record of
where every split came from (Hub, local file, or a seeded carve-out) so that reports can say so.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from adapterfusion.io.paths import describe
from adapterfusion.tasks.carving import CarveOut, carve_indices, subsample_indices
from adapterfusion.tasks.checks import check_split, gold_twin_warning
from adapterfusion.tasks.errors import TaskDataWarning, TaskError
from adapterfusion.tasks.files import EXTENSIONS, find_split_file, read_data_file
from adapterfusion.tasks.registry import resolve_task
from adapterfusion.tasks.spec import ROLES, TaskSpec

ENV_DATA_DIR = "ADAPTERFUSION_DATA_DIR"
SOURCES = ("auto", "hub", "local")


@dataclass(frozen=True)
class SplitOrigin:
    """Where one returned split came from and how many rows it kept."""

    role: str
    source: str  # "hub", "local" or "carved"
    split_name: str  # the split's name at its source, e.g. "validation_matched"
    location: str  # file path or "hub:<path>[/<config>]"
    rows_available: int  # after checking (and any carve-out), before max_examples
    num_rows: int
    dropped_unlabelled: int = 0


@dataclass(frozen=True)
class TaskDataInfo:
    """Provenance of a loaded task: the source, every split's origin, and the carve-out if one was made."""

    task: str
    source: str  # "hub", "local" (a data folder) or "files" (the task's own data_files)
    location: str
    seed: int
    splits: tuple[SplitOrigin, ...]
    carve_out: CarveOut | None = None
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # the notes a result must carry (also in `notes`): data that trains a poor model

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for result files."""
        return {
            "task": self.task,
            "source": self.source,
            "location": self.location,
            "seed": self.seed,
            "splits": {s.role: asdict(s) for s in self.splits},
            "carve_out": self.carve_out.to_dict() if self.carve_out else None,
            "notes": list(self.notes),
        }

    def local_files(self) -> tuple[str, ...]:
        """The files its splits were read from (absolute paths, each once), none for the Hub: a run records their
        digests, so that the experiment runner can tell that the data was edited since."""
        if self.source == "hub":
            return ()
        return tuple(dict.fromkeys(os.path.abspath(split.location) for split in self.splits))

    def describe(self) -> str:
        """One line per fact, for a report's data section."""
        lines = [f"{self.task}: {self.source} ({self.location})"]
        lines += [
            f"  {s.role}: {s.num_rows} of {s.rows_available} rows from {s.source} split {s.split_name!r}"
            for s in self.splits
        ]
        if self.carve_out:
            lines.append(f"  carve-out: {self.carve_out.describe()}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


class TaskData(NamedTuple):
    """What `load_task_data` returns; unpacks as `splits, info = load_task_data(...)`."""

    splits: Any  # datasets.DatasetDict
    info: TaskDataInfo


# -- raw split sources --------------------------------------------------------------------------------


class _Raw(NamedTuple):
    dataset: Any
    split_name: str
    location: str


def _choose_source(spec: TaskSpec, data_dir: str | os.PathLike | None, source: str) -> tuple[str, str]:
    """(kind, location): an explicit data_dir wins, then the task's own data_files, then $ADAPTERFUSION_DATA_DIR
    (if it holds this task), then the Hub."""
    if source not in SOURCES:
        raise TaskError(f"source={source!r} is unknown; use one of {list(SOURCES)}.")
    env_dir = os.environ.get(ENV_DATA_DIR)
    if source == "hub":
        return "hub", _hub_name(spec)
    if data_dir is not None:
        return "local", str(data_dir)
    if spec.data_files:
        return "files", "data_files"
    if env_dir and (source == "local" or (Path(env_dir) / spec.name).is_dir()):
        return "local", env_dir
    if source == "local":
        raise TaskError(
            f"task {spec.name!r}: source='local' but no data folder was given; pass data_dir=... or set {ENV_DATA_DIR}."
        )
    return "hub", _hub_name(spec)


def _hub_name(spec: TaskSpec) -> str:
    return f"hub:{spec.hub_path}" + (f"/{spec.hub_config}" if spec.hub_config else "")


def _hub_splits(spec: TaskSpec, location: str, cache_dir: str | None) -> dict[str, _Raw]:
    """Labelled Hub splits of the task (this needs network access or a warm `datasets` cache)."""
    if not spec.hub_path:
        raise TaskError(
            f"task {spec.name!r} has no Hub copy; pass data_dir=... (a folder with {spec.name}/<split>.jsonl.gz), "
            f"set {ENV_DATA_DIR}, or give the task data_files."
        )
    import datasets

    try:
        loaded = datasets.load_dataset(spec.hub_path, spec.hub_config, revision=spec.hub_revision, cache_dir=cache_dir)
    except Exception as err:  # network, auth and missing-config errors all mean "not available from the Hub"
        env_dir = os.environ.get(ENV_DATA_DIR)
        fix = (  # set, it was passed over for lacking this task's folder: "set it" would send the user in a circle
            f"{ENV_DATA_DIR}={env_dir!r} is set but holds no {spec.name}/ folder, so the Hub was tried; put "
            f"{spec.name}/<split>.jsonl.gz files there, or pass data_dir=... a folder that has them"
            if env_dir
            else f"Offline, pass data_dir=... or set {ENV_DATA_DIR} to a folder with {spec.name}/<split>.jsonl.gz files"
        )
        raise TaskError(f"task {spec.name!r}: could not load {location} ({type(err).__name__}: {err}). {fix}.") from err
    raw = {}
    for role in spec.hub_splits:
        name = spec.split_name(role)
        if name is None:
            continue
        if name not in loaded:
            carve = (  # a Hub dataset of one train split (instruction data often is) needs no validation split
                " or set validation_split=None, and the validation split is carved from train"
                if role == "validation" and "train" in spec.hub_splits
                else ""
            )
            raise TaskError(
                f"task {spec.name!r}: {location} has no split {name!r} (it has {list(loaded)}); fix the task's "
                f"{role}_split{carve}."
            )
        raw[role] = _Raw(loaded[name], name, f"{location}[{name}]")
    return raw


def _local_splits(spec: TaskSpec, location: str, cache_dir: str | None) -> dict[str, _Raw]:
    """Split files in `<location>/<task>/`, found by the task's split name or else by the role name."""
    task_dir = Path(location) / spec.name
    check_data_dir(location)
    if not task_dir.is_dir():
        raise TaskError(
            f"task {spec.name!r}: data folder {str(task_dir)!r} does not exist; create it with "
            f"<split>{EXTENSIONS[0]} files or point data_dir/{ENV_DATA_DIR} elsewhere."
        )
    found = {}
    for role in ROLES:
        stems = list(dict.fromkeys(s for s in (spec.split_name(role), role) if s))
        path = find_split_file(task_dir, stems)
        if path is not None:
            found[role] = path
    _check_distinct_files(spec, found)
    raw = {
        role: _Raw(read_data_file(path, cache_dir), path.name.split(".")[0], str(path)) for role, path in found.items()
    }
    if not raw:
        wanted = list(dict.fromkeys(s for r in ROLES for s in (spec.split_name(r), r) if s))  # train first
        raise TaskError(
            f"task {spec.name!r}: no split files in {str(task_dir)!r}; expected e.g. {wanted[0]}{EXTENSIONS[0]} "
            f"(split names {wanted}, extensions {list(EXTENSIONS)})."
        )
    return raw


def _file_splits(spec: TaskSpec, location: str, cache_dir: str | None) -> dict[str, _Raw]:
    """The task's own `data_files` (role -> path), less its extra dev splits' (tasks/extra_dev.py reads those)."""
    _check_distinct_files(spec, {role: Path(path) for role, path in spec.data_files})
    return {
        role: _Raw(read_data_file(path, cache_dir), role, str(path)) for role, path in spec.data_files if role in ROLES
    }


def _check_distinct_files(spec: TaskSpec, files: Mapping[str, Path]) -> None:
    """One file serving two roles (train and validation, through the same name or a link) would select and score
    on the training rows: refused rather than reported as a dev result."""
    seen: dict[Path, str] = {}
    for role, path in files.items():
        key = path.resolve() if path.exists() else path.absolute()
        if key in seen:
            raise TaskError(
                f"task {spec.name!r}: the {seen[key]} and {role} splits are the same file ({str(path)!r}), so "
                f"{role} scores would be measured on the {seen[key]} rows; give a held-out {role} file, or leave "
                f"{role} out (a missing validation split is carved from train)."
            )
        seen[key] = role


_READERS = {"hub": _hub_splits, "local": _local_splits, "files": _file_splits}


# -- assembling the splits ----------------------------------------------------------------------------


def _carve_note(spec: TaskSpec, kind: str, location: str, carve_out: CarveOut | None, absent: list[str]) -> list[str]:
    """A warning where a carve-out stands in for a split the task has (its Hub copy ships it) but the local files
    lack: a train file missing from a data folder would otherwise train on most of the validation file in silence."""
    if carve_out is None or kind == "hub" or not absent:
        return []
    note = f"no {' or '.join(absent)} file in {location} although the task has that split; {carve_out.describe()}"
    warnings.warn(f"task {spec.name!r}: {note}", TaskDataWarning, stacklevel=3)
    return [note]


def _carve(splits: dict[str, Any], origins: dict[str, SplitOrigin], fraction: float, seed: int) -> CarveOut | None:
    """Make missing train/validation splits from what exists, in place; None when nothing was missing."""
    if "train" in splits and "validation" in splits:
        return None
    carved: tuple[str, ...]
    if "train" in splits:
        source_role, carved = "train", ("validation",)
    else:
        source_role, carved = ("validation" if "validation" in splits else "test"), ("train", "validation")
    source = splits.pop(source_role)
    origin = origins.pop(source_role)
    train_idx, validation_idx = carve_indices(len(source), fraction, seed)
    for role, idx in (("train", train_idx), ("validation", validation_idx)):
        splits[role] = source.select(idx)
        origins[role] = replace(origin, role=role, source="carved", rows_available=len(idx), num_rows=len(idx))
    return CarveOut(
        source_split=origin.split_name,
        source_size=len(source),
        fraction=fraction,
        seed=seed,
        train_size=len(train_idx),
        validation_size=len(validation_idx),
        carved_roles=carved,
    )


def check_data_dir(data_dir: str | os.PathLike | None) -> None:
    """A data folder that is given must be a folder: said before any run folder is written, and in those words
    rather than as '<file>/<task> does not exist'."""
    if data_dir is not None and not os.fspath(data_dir):  # Path('') is the working folder
        raise TaskError(
            f"data_dir='' is not a path; give the folder that holds <task>/<split>{EXTENSIONS[0]} files, or leave "
            f"data_dir out (None: the task's own files, ${ENV_DATA_DIR}, or the Hub)."
        )
    if data_dir is None or Path(data_dir).is_dir():
        return
    found = describe(data_dir)
    state = "does not exist" if found == "nothing" else f"is {found}, not a folder"
    raise TaskError(
        f"the data folder {str(data_dir)!r} {state}; point data_dir/{ENV_DATA_DIR} at the folder that holds "
        f"<task>/<split>{EXTENSIONS[0]} files."
    )


def check_max_examples(max_examples: Any) -> None:
    """TaskError unless `max_examples` is None, an integer >= 1, or a mapping of split role to such integers: 0
    would train or score on no examples."""
    counts = max_examples.items() if isinstance(max_examples, Mapping) else [("", max_examples)]
    for role, count in counts:
        if role and role not in ROLES:
            raise TaskError(f"max_examples has unknown split role {role!r}; use {list(ROLES)}.")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            where = f"max_examples[{role!r}]" if role else "max_examples"
            raise TaskError(f"{where}={count!r} must be an integer >= 1 (or None: every example)")


def _limit_for(max_examples: int | Mapping[str, int] | None, role: str) -> int | None:
    check_max_examples(max_examples)
    return max_examples.get(role) if isinstance(max_examples, Mapping) else max_examples


def _missing_classes(spec: TaskSpec, train: Any) -> list[str]:
    """A note (and a TaskDataWarning) when a classification task's train split has no example of some label: a
    model cannot learn to predict it, and one class alone trains a constant predictor. Nothing is refused: a small
    subsample may miss a rare class on purpose."""
    if train is None or spec.kind not in ("single", "pair") or spec.regression or len(train) == 0:
        return []
    present = set(train.unique("label"))
    missing = [name for index, name in enumerate(spec.label_names) if index not in present]
    if not missing:
        return []
    note = (
        f"the train split has no example of label(s) {missing} ({len(present)} of {len(spec.label_names)} classes "
        f"in {len(train)} rows): the model cannot learn to predict them"
        + ("; with one class alone it learns a constant answer" if len(present) == 1 else "")
    )
    warnings.warn(f"task {spec.name!r}: {note}", TaskDataWarning, stacklevel=3)
    return [note]


def load_task_data(
    task: str | TaskSpec,
    data_dir: str | os.PathLike | None = None,
    seed: int = 42,
    *,
    source: str = "auto",
    carve_fraction: float = 0.2,
    max_examples: int | Mapping[str, int] | None = None,
    cache_dir: str | None = None,
) -> TaskData:
    """Load, check and (if needed) carve a task's splits.

    Source: `data_dir` (a folder of `<task>/<split>.jsonl.gz` files) if given, else the task's own data_files,
    else $ADAPTERFUSION_DATA_DIR if it holds the task, else the Hub (`source` forces "hub" or "local").
    A missing train or validation split is carved from what exists with `carve_fraction` going to validation,
    seeded by `seed`; `max_examples` (per split, or a role -> count mapping) keeps a seeded random subset.
    Every split has an integer "label" column (a ClassLabel with the task's label names).
    """
    import datasets

    spec = resolve_task(task)
    kind, location = _choose_source(spec, data_dir, source)
    splits: dict[str, Any] = {}
    origins: dict[str, SplitOrigin] = {}
    notes: list[str] = []
    twins: dict[str, tuple[int, ...]] = {}
    for role, raw in _READERS[kind](spec, location, cache_dir).items():
        checked = check_split(spec, raw.dataset, raw.location, role)
        twins[raw.location] = checked.gold_twins
        if checked.dataset is None:
            notes.append(f"{role} split {raw.location} has no gold labels and was left out")
            continue
        if checked.dropped_unlabelled:
            notes.append(f"{checked.dropped_unlabelled} rows without a gold label dropped from {raw.location}")
        splits[role] = checked.dataset
        origins[role] = SplitOrigin(
            role=role,
            source="hub" if kind == "hub" else "local",
            split_name=raw.split_name,
            location=raw.location,
            rows_available=len(checked.dataset),
            num_rows=len(checked.dataset),
            dropped_unlabelled=checked.dropped_unlabelled,
        )
    if not splits:
        raise TaskError(f"task {spec.name!r}: no labelled split found at {location}; add a train or validation file.")
    absent = [role for role in spec.hub_splits if role not in splits]  # before the carve-out fills them in
    carve_out = _carve(splits, origins, carve_fraction, seed)
    warned = _carve_note(spec, kind, location, carve_out, absent)
    for role in list(splits):
        limit = _limit_for(max_examples, role)
        if limit is not None:
            splits[role] = splits[role].select(subsample_indices(len(splits[role]), limit, seed, ROLES.index(role)))
            origins[role] = replace(origins[role], num_rows=len(splits[role]))
    warned += _missing_classes(spec, splits.get("train"))
    notes += warned
    # one warning for the whole load, noted with the data rather than carried by each run's result
    if (twinned := gold_twin_warning(twins)) is not None:
        warnings.warn(f"task {spec.name!r}: {twinned}", TaskDataWarning, stacklevel=2)
        notes.append(twinned)
    ordered = [r for r in ROLES if r in splits]
    info = TaskDataInfo(
        task=spec.name,
        source=kind,
        location=location,
        seed=seed,
        splits=tuple(origins[r] for r in ordered),
        carve_out=carve_out,
        notes=tuple(notes),
        warnings=tuple(warned),
    )
    return TaskData(datasets.DatasetDict({r: splits[r] for r in ordered}), info)
