"""One job of an experiment, from the worker's side: the `JobPayload` the runner builds (plain, picklable values)
and `execute_job`, the entry point every executor's workers call. A job writes only its own run dir (and, for
stage 1, its own AdapterStore entry) and its job.log there; the runner's process alone writes the results DB.

| kind | what the job runs |
|---|---|
| single | adapterfusion.training.train of one task, setup and seed |
| multitask | adapterfusion.training.train_multitask of all the job's tasks in one run |
| span-ablation | experiments/span_ablation.py: a trained adapter evaluated with every span of layers removed |
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapterfusion.experiments.analyses import SPAN_ABLATION
from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.experiments.plan import MULTITASK_KIND, SINGLE_KIND
from adapterfusion.experiments.span_ablation import run_ablation_job
from adapterfusion.experiments.writers import registered_writer
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.files import EXTENSIONS
from adapterfusion.tasks.loading import ENV_DATA_DIR, check_data_dir
from adapterfusion.tasks.registry import register_task
from adapterfusion.tasks.spec import TaskSpec
from adapterfusion.training.api import train
from adapterfusion.training.multitask import train_multitask
from adapterfusion.training.run_files import METRICS_FILE, read_run_json
from adapterfusion.training.store import AdapterStore

JOB_LOG = "job.log"
_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@dataclass(frozen=True)
class JobPayload:
    """Everything a worker needs to run one job (plain, picklable values): `kind` "single" runs
    adapterfusion.training.train, "multitask" train_multitask with `options` as its keyword arguments. `resume`:
    a job continues from its run dir's newest complete checkpoint, if any (train / train_multitask(resume=True))."""

    job_id: str
    task: str
    setup: str
    seed: int
    output_dir: str  # passed to train(); the run dir is inside it
    run_dir: str
    encoder: str | None = None
    data_dir: str | None = None
    store_dir: str | None = None
    training: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    max_examples: int | dict[str, int] | None = None
    kind: str = SINGLE_KIND
    experiment_dir: str | None = None  # the worker registers there as a writer (experiments/writers.py)
    resume: bool = False
    # The experiment's own tasks (its task_files: name -> TaskSpec dict), which a worker cannot look up: registered
    # before the job runs, as the job's task, a fusion's source or an MT-A task may be one of them.
    task_specs: dict[str, dict[str, Any]] = field(default_factory=dict)


def payload_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Setup options as plain JSON-able values (tuples -> lists) for pickling and logging."""
    return json.loads(json.dumps(dict(options)))


class _OncePerRecord(logging.Filter):
    """Lets each record through once. The job's handler sits on the root logger and on library loggers that may
    not propagate to it (transformers turns propagation off when first imported), so a record that does propagate
    would otherwise be written twice."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_job_log_filter", None) == id(self):
            return False
        record._job_log_filter = id(self)
        return True


@contextlib.contextmanager
def capture_logs(log_file: Path) -> Iterator[None]:
    """Send the job's logging (root, transformers, warnings) and its stdout/stderr to its own file. The HF Trainer
    then prints its loss lines instead of drawing tqdm bars (it draws them only when transformers.training_args
    logs at WARNING or below), so nothing interleaves with the runner's progress display."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    stream = open(log_file, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed in finally
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(_LOG_FORMAT))
    handler.setLevel(logging.INFO)
    handler.addFilter(_OncePerRecord())
    loggers = [logging.getLogger(), logging.getLogger("transformers"), logging.getLogger("adapterfusion")]
    args_logger, own_logger = logging.getLogger("transformers.training_args"), logging.getLogger(__name__)
    saved_levels = args_logger.level, own_logger.level
    for logger in loggers:
        logger.addHandler(handler)
    args_logger.setLevel(logging.ERROR)
    own_logger.setLevel(logging.INFO)
    logging.captureWarnings(True)
    try:
        with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
            yield
    finally:
        logging.captureWarnings(False)
        args_logger.setLevel(saved_levels[0])
        own_logger.setLevel(saved_levels[1])
        for logger in loggers:
            logger.removeHandler(handler)
        stream.close()


def data_dir_for(payload: JobPayload, task: str) -> str | None:
    """The data folder `task` loads from in this job: none for an experiment task with its own data_files, which
    then win over the experiment's data_dir (that serves the other tasks; loading.load_task_data would otherwise
    prefer the folder), in single-task and multi-task jobs alike."""
    return None if payload.task_specs.get(task, {}).get("data_files") else payload.data_dir


def check_data_folders(data_dir: str | None, tasks: Sequence[str], task_specs: Mapping[str, Mapping[str, Any]]) -> None:
    """The experiment's data_dir must be a folder holding <task>/ for every task that reads from it (data_dir_for):
    said once, before the runner writes its output dir, not by every job at its start. Without a data_dir, a
    $ADAPTERFUSION_DATA_DIR that is set must be a folder: each task reads it only if it holds the task's folder, so
    a mistyped one was passed over for the Hub without a word."""
    readers = [t for t in tasks if not task_specs.get(t, {}).get("data_files")]  # tasks without files of their own
    if data_dir is None:
        env_dir = os.environ.get(ENV_DATA_DIR)
        try:
            check_data_dir((env_dir or None) if readers else None)  # "" reads as unset
        except TaskError as err:
            raise ExperimentSpecError(f"${ENV_DATA_DIR}={env_dir!r}: {err} Or unset it. Nothing was run.") from None
        return
    try:
        check_data_dir(data_dir)
    except TaskError as err:
        raise ExperimentSpecError(f"data_dir: {err} Nothing was run.") from None
    missing = [t for t in readers if not (Path(data_dir) / t).is_dir()]
    if missing:
        held = sorted(p.name for p in Path(data_dir).iterdir() if p.is_dir())[:20]
        raise ExperimentSpecError(
            f"data_dir: {data_dir!r} holds no folder for task(s) {missing} (its folders: {held or 'none'}), so their "
            f"jobs would find no data; each task reads <data_dir>/<task>/<split>{EXTENSIONS[0]}: point data_dir at "
            "the folder that holds them, or give the task its own data_files. Nothing was run."
        )


def _train_single(payload: JobPayload) -> Path:
    """train() of the job's one task; returns the run dir it wrote."""
    logging.getLogger(__name__).info(
        "job %s: train(%r, %r, seed=%d) pid %d", payload.job_id, payload.task, payload.setup, payload.seed, os.getpid()
    )
    result = train(
        payload.task,
        payload.setup,
        seed=payload.seed,
        encoder=payload.encoder,
        data_dir=data_dir_for(payload, payload.task),
        output_dir=payload.output_dir,
        store=AdapterStore(payload.store_dir) if payload.store_dir else None,
        training_config=payload.training,
        setup_options=payload.options,
        max_examples=payload.max_examples,
        overwrite=True,  # the runner owns the run dir: it emptied it (checkpoints kept for a resume) before the job
        resume=payload.resume,
    )
    return Path(result.run_dir)


def _train_multitask(payload: JobPayload) -> Path:
    """train_multitask() of all the job's tasks in one run; returns the run dir it wrote."""
    options = dict(payload.options)
    tasks = options.pop("tasks")
    logging.getLogger(__name__).info(
        "job %s: train_multitask(%r, seed=%d, %s) pid %d", payload.job_id, tasks, payload.seed, options, os.getpid()
    )
    result = train_multitask(
        tasks,
        seed=payload.seed,
        encoder=payload.encoder,
        data_dir={task: data_dir_for(payload, task) for task in tasks},
        output_dir=payload.output_dir,
        store=payload.store_dir,
        training_config=payload.training,
        max_examples=payload.max_examples,
        overwrite=True,  # the runner owns the run dir and re-runs a job on purpose
        resume=payload.resume,
        **options,
    )
    return Path(result.run_dir)


def _span_ablation(payload: JobPayload) -> Path:
    """A trained adapter evaluated with each span of layers removed; the result is the run dir's metrics.json."""
    logging.getLogger(__name__).info("job %s: span ablation %s pid %d", payload.job_id, payload.options, os.getpid())
    experiment_dir = payload.experiment_dir or str(Path(payload.output_dir).parent.parent)
    return run_ablation_job(
        payload.options,
        payload.task,
        payload.run_dir,
        experiment_dir,
        encoder=payload.encoder,
        data_dir=data_dir_for(payload, payload.task),
    )


JOB_KINDS: dict[str, Callable[[JobPayload], Path]] = {
    SINGLE_KIND: _train_single,
    MULTITASK_KIND: _train_multitask,
    SPAN_ABLATION: _span_ablation,
}


_runner: int | None = None  # in a process-pool worker: the pid of the runner it works for


def work_for(runner: int) -> None:
    """Mark this process as a pool worker of the runner with pid `runner` (executors.ProcessExecutor's workers)."""
    global _runner
    _runner = runner


def _check_runner() -> None:
    """A pool worker whose runner is gone takes no job: it may have one left in the pool's queue, and the next
    runner, which waited only for the writers registered when it started, would run that job too."""
    if _runner is not None and os.getppid() != _runner:
        os._exit(1)


@contextlib.contextmanager
def _as_writer(payload: JobPayload) -> Iterator[None]:
    """Register as a writer of the experiment's output dir, then check that the runner lives, before writing."""
    with registered_writer(payload.experiment_dir) if payload.experiment_dir else contextlib.nullcontext():
        _check_runner()
        yield


def execute_job(payload: JobPayload) -> dict[str, Any]:
    """Run one job; returns {"ok": True, "metrics": <metrics.json>} or {"ok": False, "error": <traceback text>}.
    A multi-task run's metrics.json holds every task's dev metrics (`best[task]`, `metric_for_best[task]`).
    An Exception is reported, not raised (it would have to pickle across processes); Ctrl-C still propagates."""
    run_dir = Path(payload.run_dir)
    log = logging.getLogger(__name__)
    with _as_writer(payload), capture_logs(run_dir / JOB_LOG), warnings.catch_warnings():
        warnings.simplefilter("default")
        try:
            if payload.kind not in JOB_KINDS:
                raise ExperimentSpecError(
                    f"job {payload.job_id}: unknown kind {payload.kind!r}; known: {', '.join(JOB_KINDS)}"
                )
            for task_spec in payload.task_specs.values():  # replaced as the experiment file's re-reading does
                register_task(TaskSpec.from_dict(task_spec), overwrite=True)
            written = JOB_KINDS[payload.kind](payload)
            if written.resolve() != run_dir.resolve():
                raise RuntimeError(f"the {payload.kind} run wrote {written}, the plan expected {run_dir}")
            metrics = read_run_json(run_dir / METRICS_FILE)
            log.info("job %s done: %s", payload.job_id, metrics.get("best"))
            return {"ok": True, "metrics": metrics}
        except Exception:  # noqa: BLE001 - reported to the runner, which records it and goes on
            error = traceback.format_exc()
            log.error("job %s failed:\n%s", payload.job_id, error)
            return {"ok": False, "error": error}
        finally:
            gc.collect()  # the run's model is gone with its result; free its memory before the next job
