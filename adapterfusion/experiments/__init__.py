"""Experiments: one file of tasks × setups × seeds, planned into a job graph (stage-1 adapters before the fusions
that need them), run resumably on an executor, with every job's state and metrics in a SQLite results store.

    from adapterfusion.experiments import run_experiment
    summary = run_experiment("examples/paper-small.yaml", executor="process", workers=2)
"""

from adapterfusion.experiments.errors import (
    ExperimentError,
    ExperimentSpecError,
    OutputDirLockedError,
    ResultsStoreError,
    SpecMismatchError,
)
from adapterfusion.experiments.executors import EXECUTORS, Executor, InProcessExecutor, ProcessExecutor, make_executor
from adapterfusion.experiments.jobs import JobPayload, execute_job
from adapterfusion.experiments.plan import Job, job_id, plan_jobs, topological_order
from adapterfusion.experiments.ray_executor import RayExecutor  # imports ray only when built
from adapterfusion.experiments.report import build_report
from adapterfusion.experiments.report_files import write_report
from adapterfusion.experiments.runner import ExperimentSummary, run_experiment
from adapterfusion.experiments.spec import ExperimentSpec, load_spec
from adapterfusion.experiments.store import JobRecord, ResultsStore, RunnerLock
from adapterfusion.experiments.variants import SetupVariant

__all__ = [
    "EXECUTORS",
    "build_report",
    "write_report",
    "Executor",
    "ExperimentError",
    "ExperimentSpec",
    "ExperimentSpecError",
    "ExperimentSummary",
    "InProcessExecutor",
    "Job",
    "JobPayload",
    "JobRecord",
    "OutputDirLockedError",
    "ProcessExecutor",
    "RayExecutor",
    "ResultsStore",
    "ResultsStoreError",
    "RunnerLock",
    "SetupVariant",
    "SpecMismatchError",
    "execute_job",
    "job_id",
    "load_spec",
    "make_executor",
    "plan_jobs",
    "run_experiment",
    "topological_order",
]
