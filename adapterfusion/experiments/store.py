"""The results store of one experiment: a SQLite database `<output_dir>/experiment.db` (WAL mode) holding every
job's state and metrics. The lock that keeps a second runner off the same output dir is experiments/runner_lock.py.

Jobs move queued -> running -> done | failed; a job whose dependency failed is `blocked` (with the reason). Every
transition is one transaction, so a runner killed at any moment leaves each job in exactly one state; a job found
`running` by the next runner was interrupted (killed, or stopped with Ctrl-C) and is re-run from scratch; until
then `status` shows it as interrupted (runner_gone). Only the runner's parent process writes.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapterfusion.experiments.errors import ExperimentError, ResultsStoreError, SpecMismatchError
from adapterfusion.experiments.plan import config_hashes
from adapterfusion.experiments.runner_lock import LOCK_FILE as LOCK_FILE  # where the runner finds it
from adapterfusion.experiments.runner_lock import RunnerLock
from adapterfusion.io.documents import as_written, changed_keys
from adapterfusion.io.paths import as_path, describe

if TYPE_CHECKING:
    from adapterfusion.experiments.plan import Job
    from adapterfusion.experiments.spec import ExperimentSpec

DB_FILE = "experiment.db"
STORE_FORMAT_VERSION = 1
STATES = ("queued", "running", "done", "failed", "blocked")

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    position INTEGER NOT NULL,
    variant TEXT NOT NULL,
    setup TEXT NOT NULL,
    task TEXT NOT NULL,
    seed INTEGER NOT NULL,
    depends_on TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ({", ".join(repr(s) for s in STATES)})),
    attempts INTEGER NOT NULL DEFAULT 0,
    started_at REAL,
    finished_at REAL,
    run_dir TEXT,
    metrics TEXT,
    error TEXT
);
"""


@functools.cache
def schema_columns() -> dict[str, frozenset[str]]:
    """What a results database must hold: each table of _SCHEMA and its columns, read from the schema itself (an
    in-memory database made by it) when a store is first opened, not at import. A file with tables of these names but
    other columns (another program's `jobs`) is no results store, and would fail at its first query."""
    with contextlib.closing(sqlite3.connect(":memory:")) as db:
        db.executescript(_SCHEMA)
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {table: frozenset(row[1] for row in db.execute(f"PRAGMA table_info({table})")) for table in tables}


@dataclass(frozen=True)
class JobRecord:
    """One row of the jobs table; `metrics` is the run's metrics.json content once done."""

    id: str
    position: int
    variant: str
    setup: str
    task: str
    seed: int
    depends_on: tuple[str, ...]
    config_hash: str
    state: str
    attempts: int
    started_at: float | None
    finished_at: float | None
    run_dir: str | None
    metrics: dict[str, Any] | None
    error: str | None

    @property
    def seconds(self) -> float | None:
        return None if self.started_at is None or self.finished_at is None else self.finished_at - self.started_at

    def task_metrics(self) -> dict[str, dict[str, Any]]:
        """Task -> a one-task metrics record (`metric_for_best`, `best`): the job's own metrics for a one-task job;
        for a multi-task job (an MT-A metrics.json lists its `tasks`) one record per task, so tables have a cell
        per task."""
        if not self.metrics:
            return {}
        tasks = self.metrics.get("tasks")
        if not isinstance(tasks, list):
            return {self.task: self.metrics}
        metric, best = self.metrics.get("metric_for_best") or {}, self.metrics.get("best") or {}
        return {task: {"metric_for_best": metric.get(task), "best": best.get(task) or {}} for task in tasks}


_AS_WRITTEN = {"variants": "setups or training (the variants they make)"}  # a recorded key -> the file's words


def _what_changed(recorded: str | None, current: Mapping[str, Any]) -> str:
    """', which differs in <keys>': the experiment file's top-level keys whose values differ from the spec the
    output dir recorded ('' where it recorded none, or nothing differs at that level)."""
    try:
        before = json.loads(recorded) if recorded else None
    except ValueError:
        return ""
    if not isinstance(before, dict):
        return ""
    keys = changed_keys(before, as_written(current))
    shown = [_AS_WRITTEN.get(key, key) for key in keys]
    return f", which differs in {', '.join(shown)}" if keys else ""


def check_results_dir(output_dir: str | os.PathLike) -> Path:
    """`output_dir` as a Path ('~/out' as the experiment file wrote it) if it holds an experiment's results, else an
    ExperimentError saying what it is instead: missing, a file (the experiment file itself), a folder without, or no
    path at all (a NUL in it). The path is quoted, so a newline in it cannot split the one-line error."""
    path = as_path(output_dir, "output_dir", ExperimentError)
    if (path / DB_FILE).is_file():
        return path
    found, shown = describe(path), repr(str(path))
    if found == "nothing":
        raise ExperimentError(f"{shown} does not exist; give an experiment's output_dir")
    if found == "a folder":
        raise ExperimentError(f"{shown} holds no experiment results ({DB_FILE} is missing)")
    raise ExperimentError(
        f"{shown} is {found}, not an experiment's output dir; give the output_dir the experiment file names (the "
        "folder `adapterfusion run` prints at the end)"
    )


class ResultsStore:
    """Job states and metrics of the experiment in `output_dir`. Open read-only for `status`."""

    def __init__(self, output_dir: str | os.PathLike, readonly: bool = False) -> None:
        self.output_dir = (
            check_results_dir(output_dir) if readonly else as_path(output_dir, "output_dir", ExperimentError)
        )
        self.path = self.output_dir / DB_FILE
        self._readonly = readonly
        if not readonly:
            self.output_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._db = (
                self._connect_readonly() if readonly else sqlite3.connect(self.path, timeout=30, isolation_level=None)
            )
            self._check(readonly)  # before anything is written: a damaged or foreign file is refused, never reused
            if not readonly:  # explicit transactions (isolation_level=None)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                self._db.executescript(_SCHEMA)
        except sqlite3.Error as err:
            raise ResultsStoreError(self._damaged(f"SQLite: {err}", readonly)) from None
        self._db.row_factory = sqlite3.Row

    def _connect_readonly(self) -> sqlite3.Connection:
        """A read-only connection. A WAL database needs its -shm index beside it, which SQLite cannot create in a
        read-only folder; with no -wal file the main file holds every committed change, so it is then read as
        immutable instead."""
        uri = self.path.resolve().as_uri()
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=30)
        try:
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError:
            db.close()
            if os.access(self.output_dir, os.W_OK):
                raise
        wal = self.path.with_name(self.path.name + "-wal")
        if wal.exists():
            raise ResultsStoreError(
                f"{self.path}: its last runner stopped before merging {wal.name} into it, and SQLite can read that "
                f"file only in a folder it may write to, which {self.output_dir} is not; copy the folder (with "
                f"{wal.name}) somewhere writable and run the command there"
            )
        return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True)

    def _check(self, readonly: bool) -> None:
        """Refuse a damaged file, and one that is a SQLite database of something else."""
        problems = [row[0] for row in self._db.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise ResultsStoreError(self._damaged("; ".join(problems[:3]), readonly))
        tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            if readonly:
                raise ResultsStoreError(
                    f"{self.path} holds no results yet (a runner was stopped while creating it); "
                    f"`adapterfusion run` the experiment to fill it"
                )
            return
        foreign = f"tables {sorted(tables)}" if not set(schema_columns()) <= tables else self._lacking_columns()
        if foreign:
            raise ResultsStoreError(
                f"{self.path} is a SQLite database of something else ({foreign}), not an experiment's results; "
                "choose another output_dir, or move that file away"
            )

    def _lacking_columns(self) -> str:
        """'' if every table of the schema has its columns, else which lack which: another program's database may
        have tables named `meta` and `jobs` too."""
        lacking = []
        for table, columns in schema_columns().items():
            missing = columns - {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
            if missing:
                lacking.append(f"its table {table!r} has no column {', '.join(sorted(missing))}")
        return "; ".join(lacking)

    def _damaged(self, detail: str, readonly: bool) -> str:
        """The message for a results database that cannot be read."""
        refused = "" if readonly else "; the runner leaves it as it is rather than start over on top of it"
        if _unreadable(self.path):
            return (  # a permission problem, not damage: moving the file aside would throw every result away
                f"{self.path} cannot be read by this user ({detail}); give it (and its folder) read permission, or "
                "run as the user who owns it"
            )
        return (
            f"{self.path} cannot be read as an experiment's results ({detail}){refused}. If it is damaged, move "
            f"it aside (e.g. to {self.path.name}.damaged) and run the experiment again, which re-runs every job "
            "(or restore the file from a backup)"
        )

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One write transaction, committed at the end or rolled back. A full disk (at a statement or at COMMIT)
        becomes an ExperimentError: SQLite rolls the change back, so what was committed before is intact."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as error:  # locked past the wait: nothing begun, nothing to roll back
            raise self._failed(error, "record a change in") from None
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException as error:
            if self._db.in_transaction:
                try:
                    self._db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # SQLite already rolled it back
            if isinstance(error, sqlite3.OperationalError) and _disk_full(error):
                raise ExperimentError(
                    f"could not record a change in {self.path}: the disk is full ({error}). The change was rolled "
                    "back and everything recorded before it is intact; free some space and run the same command "
                    "again to resume"
                ) from None
            if isinstance(error, sqlite3.Error):
                raise self._failed(error, "record a change in") from None
            raise

    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        """The rows of one query; a SQLite error (a lock held past the 30 s wait, a disk I/O error, damage found
        only now) as a ResultsStoreError naming the file and what to do, not a raw sqlite3 traceback."""
        try:
            return self._db.execute(sql, tuple(params)).fetchall()
        except sqlite3.Error as error:
            raise self._failed(error, "read") from None

    def _failed(self, error: sqlite3.Error, action: str) -> ResultsStoreError:
        if "locked" in str(error) or "busy" in str(error):
            return ResultsStoreError(
                f"could not {action} {self.path}: another process held it locked for over 30 s ({error}); nothing "
                "was changed. Wait for that process (another `adapterfusion run` of this experiment, or a program "
                "that opened the file) to finish, then run the command again"
            )
        return ResultsStoreError(self._damaged(f"SQLite: {error}", self._readonly))

    def _transaction(self, sql: str, params: Iterable[Any] = ()) -> int:
        """One statement in its own write transaction; returns how many rows it changed."""
        with self._writing():
            return self._db.execute(sql, tuple(params)).rowcount

    # ---- experiment metadata ---------------------------------------------------------------------------------
    def meta(self) -> dict[str, str]:
        return {row["key"]: row["value"] for row in self._rows("SELECT key, value FROM meta")}

    def recorded_spec(self) -> dict[str, Any]:
        """The experiment as bind recorded it (ExperimentSpec.to_dict), {} before any bind; a record that is no JSON
        object (the file was edited or damaged) is a ResultsStoreError, not a report of nothing."""
        text = self.meta().get("spec")
        if not text:
            return {}
        return _decoded(text, dict, self.path, "the recorded experiment (meta 'spec')")

    def bind(self, spec: ExperimentSpec, jobs: list[Job], force: bool = False) -> list[str]:
        """Record `spec` as this output dir's experiment and add its jobs, in one transaction. An output dir of a
        different spec is refused unless `force`; then jobs whose configuration changed go back to queued (a job's
        configuration includes its dependencies', so a fusion goes back with the adapters it fuses), and jobs the
        new plan lacks are dropped from the table (their run dirs stay). Returns the ids of the reset jobs."""
        meta = self.meta()
        spec_hash = spec.spec_hash()
        hashes = config_hashes(spec, jobs)
        older = config_hashes(spec, jobs, absolute_paths=True)  # what older runners recorded, at the same place
        # what runners recorded before a job's hash covered its own task's description: the same job only while
        # the experiment (whose spec hash always covered the descriptions) is unchanged
        untasked = config_hashes(spec, jobs, task_specs=False) if meta.get("spec_hash") == spec_hash else {}
        # what runners recorded while logging and checkpoint-keeping settings counted (resume.FREE_ON_RESUME)
        all_settings = config_hashes(spec, jobs, free_settings=True)
        # an older runner hashed the absolute paths: the same experiment, still at the same place
        same = (None, spec_hash, spec.spec_hash(absolute_paths=True), spec.spec_hash(free_settings=True))
        if meta.get("spec_hash") not in same and not force:
            raise SpecMismatchError(
                f"{self.output_dir} holds results of experiment {meta.get('name')!r} (spec {meta['spec_hash']}), "
                f"not of this spec {spec.name!r} ({spec_hash}){_what_changed(meta.get('spec'), spec.to_dict())}; "
                "choose another output_dir, or pass --force (force=True) to reuse it: jobs whose settings changed "
                "are re-run, the others are kept"
            )
        now = time.time()
        reset: list[str] = []
        with self._writing():
            values = {
                "name": spec.name,
                "spec_hash": spec_hash,
                "spec": json.dumps(spec.to_dict(), sort_keys=True),
                "source": spec.source or "",
                "format_version": str(STORE_FORMAT_VERSION),
                "updated_at": str(now),
            }
            if "created_at" not in meta:
                values["created_at"] = str(now)
            self._db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", values.items())
            existing = {
                row["id"]: row
                for row in self._db.execute("SELECT id, config_hash, state, started_at, finished_at FROM jobs")
            }
            for position, job in enumerate(jobs):  # topologically ordered: a job's dependencies are decided first
                config_hash = hashes[job.id]
                if job.id not in existing:
                    self._db.execute(
                        "INSERT INTO jobs (id, position, variant, setup, task, seed, depends_on, config_hash, state) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'queued')",
                        (
                            job.id,
                            position,
                            job.variant,
                            job.setup,
                            job.task,
                            job.seed,
                            json.dumps(job.depends_on),
                            config_hash,
                        ),
                    )
                    continue
                recorded = existing[job.id]["config_hash"]
                earlier = (config_hash, older[job.id], untasked.get(job.id), all_settings[job.id])
                keep = recorded in earlier or _upgradable(job, spec, existing, reset)
                if not keep:
                    reset.append(job.id)
                self._db.execute(
                    "UPDATE jobs SET position = ?, depends_on = ?, config_hash = ?, "
                    "state = CASE WHEN ? THEN state ELSE 'queued' END, "
                    "metrics = CASE WHEN ? THEN metrics ELSE NULL END WHERE id = ?",
                    (position, json.dumps(job.depends_on), config_hash, keep, keep, job.id),
                )
            planned = {job.id for job in jobs}
            self._db.executemany("DELETE FROM jobs WHERE id = ?", [(i,) for i in existing if i not in planned])
        return reset

    # ---- jobs --------------------------------------------------------------------------------------------------
    def jobs(self, ids: Iterable[str] | None = None) -> list[JobRecord]:
        rows = self._rows("SELECT * FROM jobs ORDER BY position")
        wanted = None if ids is None else set(ids)
        return [_record(row, self.path) for row in rows if wanted is None or row["id"] in wanted]

    def job(self, job_id: str) -> JobRecord:
        row = next(iter(self._rows("SELECT * FROM jobs WHERE id = ?", (job_id,))), None)
        if row is None:
            raise ExperimentError(f"no job {job_id!r} in {self.path}")
        return _record(row, self.path)

    def states(self) -> dict[str, str]:
        return {row["id"]: row["state"] for row in self._rows("SELECT id, state FROM jobs")}

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(STATES, 0)
        for row in self._rows("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state"):
            counts[row["state"]] = row["n"]
        return counts

    def runner_gone(self) -> bool:
        """Whether no live runner holds this output dir, so that the jobs recorded `running` were interrupted (their
        runner was killed, stopped with Ctrl-C, or the machine rebooted); a runner on another host counts as live."""
        return RunnerLock(self.output_dir).holder() is None

    def requeue(self, ids: list[str]) -> None:
        """Jobs to run again though done (their inputs changed on disk: experiments/stale.py); results cleared."""
        with self._writing():
            self._db.executemany("UPDATE jobs SET state = 'queued', metrics = NULL WHERE id = ?", [(i,) for i in ids])

    def requeue_unfinished(self) -> list[str]:
        """Jobs a killed runner left running, and failed or blocked jobs, go back to queued for this run."""
        ids = [row["id"] for row in self._rows("SELECT id FROM jobs WHERE state IN ('running', 'failed', 'blocked')")]
        self._transaction("UPDATE jobs SET state = 'queued' WHERE state IN ('running', 'failed', 'blocked')")
        return ids

    def mark_running(self, job_id: str, run_dir: str) -> None:
        changed = self._transaction(
            "UPDATE jobs SET state = 'running', attempts = attempts + 1, started_at = ?, finished_at = NULL, "
            "run_dir = ?, metrics = NULL, error = NULL WHERE id = ? AND state = 'queued'",
            (time.time(), run_dir, job_id),
        )
        if changed != 1:
            raise ExperimentError(f"job {job_id!r} is not queued; cannot start it")

    def mark_done(self, job_id: str, metrics: dict[str, Any]) -> None:
        self._finish(job_id, "done", json.dumps(metrics, sort_keys=True), None)

    def mark_failed(self, job_id: str, error: str) -> None:
        self._finish(job_id, "failed", None, error)

    def mark_blocked(self, job_id: str, reason: str) -> None:
        self._transaction(
            "UPDATE jobs SET state = 'blocked', error = ?, finished_at = ? WHERE id = ? AND state = 'queued'",
            (reason, time.time(), job_id),
        )

    def _finish(self, job_id: str, state: str, metrics: str | None, error: str | None) -> None:
        changed = self._transaction(
            "UPDATE jobs SET state = ?, finished_at = ?, metrics = ?, error = ? WHERE id = ? AND state = 'running'",
            (state, time.time(), metrics, error, job_id),
        )
        if changed != 1:
            raise ExperimentError(f"job {job_id!r} is not running; cannot mark it {state}")


def _disk_full(error: sqlite3.OperationalError) -> bool:
    # sqlite3.SQLITE_FULL (13, SQLite's own code) exists from Python 3.11 on.
    full = getattr(sqlite3, "SQLITE_FULL", 13)
    return getattr(error, "sqlite_errorcode", None) == full or "disk is full" in str(error)


def _upgradable(job: Job, spec: ExperimentSpec, existing: dict[str, sqlite3.Row], reset: list[str]) -> bool:
    """Whether a job recorded by an older runner, under the hash that named its dependencies by id only, may keep
    its result: only when every dependency is done, kept by this bind, and finished before the job started (a
    dependency re-run since means the job used its old output)."""
    row = existing[job.id]
    if (
        not job.depends_on
        or row["config_hash"] != job.config_hash(spec, absolute_paths=True)
        or row["started_at"] is None
    ):
        return False
    deps = [existing.get(d) for d in job.depends_on]
    return all(
        dep is not None
        and dep["id"] not in reset
        and dep["state"] == "done"
        and dep["finished_at"] is not None
        and dep["finished_at"] <= row["started_at"]
        for dep in deps
    )


_JSON_KINDS: dict[type, str] = {dict: "object", list: "list"}


def _decoded(text: str, kind: type, path: Path, what: str) -> Any:
    """`text`, a JSON value of type `kind` (dict or list) the store wrote; else a ResultsStoreError naming `what`: a
    raw JSON error (or a list where an object is due) would end `status` and `report` with a traceback."""
    try:
        value = json.loads(text)
    except ValueError as err:
        value, problem = None, f"is not JSON ({err})"
    else:
        problem = f"is a JSON {_JSON_KINDS.get(type(value), type(value).__name__)}, not a JSON {_JSON_KINDS[kind]}"
    if isinstance(value, kind):
        return value
    raise ResultsStoreError(
        f"{path}: {what} {problem}; the file was edited or damaged. Move it aside (e.g. to {path.name}.damaged) and "
        "run the experiment again, which re-runs every job (or restore the file from a backup)"
    )


def _record(row: sqlite3.Row, path: Path) -> JobRecord:
    job = f"of job {row['id']!r}"
    metrics = row["metrics"]
    return JobRecord(
        id=row["id"],
        position=row["position"],
        variant=row["variant"],
        setup=row["setup"],
        task=row["task"],
        seed=row["seed"],
        depends_on=tuple(_decoded(row["depends_on"], list, path, f"the depends_on {job}")),
        config_hash=row["config_hash"],
        state=row["state"],
        attempts=row["attempts"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        run_dir=row["run_dir"],
        metrics=_decoded(metrics, dict, path, f"the metrics {job}") if metrics else None,
        error=row["error"],
    )


def _unreadable(path: Path) -> bool:
    """Whether opening `path` for reading is refused by its permissions (the process's, capabilities included)."""
    try:
        with open(path, "rb"):
            return False
    except PermissionError:
        return True
    except OSError:
        return False
