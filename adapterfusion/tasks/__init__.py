"""Tasks: what a task is (`TaskSpec`; `instruction_task` for prompt + answer data), the registry of the paper's
tasks, loading and checking their data, tokenising it for a model, and scoring predictions."""

from adapterfusion.tasks.carving import CarveOut, carve_indices, subsample_indices
from adapterfusion.tasks.collator import TaskCollator
from adapterfusion.tasks.encoding import EncodedTask, TruncationReport, encode_task, segments
from adapterfusion.tasks.errors import TaskDataWarning, TaskError
from adapterfusion.tasks.loading import ENV_DATA_DIR, SplitOrigin, TaskData, TaskDataInfo, load_task_data
from adapterfusion.tasks.metrics import accuracy, compute_metrics, f1, matthews_correlation, pearson, spearman
from adapterfusion.tasks.registry import (
    get_task,
    list_tasks,
    load_task_file,
    register_task,
    resolve_task,
    task_from_dict,
)
from adapterfusion.tasks.spec import TaskSpec, instruction_task

__all__ = [
    "ENV_DATA_DIR",
    "CarveOut",
    "EncodedTask",
    "SplitOrigin",
    "TaskCollator",
    "TaskData",
    "TaskDataInfo",
    "TaskDataWarning",
    "TaskError",
    "TaskSpec",
    "TruncationReport",
    "accuracy",
    "carve_indices",
    "compute_metrics",
    "encode_task",
    "f1",
    "get_task",
    "instruction_task",
    "list_tasks",
    "load_task_data",
    "load_task_file",
    "matthews_correlation",
    "pearson",
    "register_task",
    "resolve_task",
    "segments",
    "spearman",
    "subsample_indices",
    "task_from_dict",
]
