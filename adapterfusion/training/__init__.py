"""Training recipes: named setups (head, full, st-a, st-a-houlsby, top-k, layernorm-only, fusion-st-a, fusion-mt-a)
run with the HuggingFace Trainer, an AdapterStore that hands stage-1 adapters to stage 2, `train()` for one run,
and `train_multitask()` for MT-A (all tasks in one run, annealed task sampling; see training/multitask.py).

    from adapterfusion.training import AdapterStore, train
    store = AdapterStore("adapters")
    for task in ("mnli", "rte"):
        train(task, "st-a", seed=42, store=store)
    result = train("rte", "fusion-st-a", store=store, setup_options={"sources": ["mnli"]})
"""

from adapterfusion.training.api import RunResult, train
from adapterfusion.training.callbacks import FusionStepCallback
from adapterfusion.training.config import TrainingConfig
from adapterfusion.training.errors import (
    RunFileError,
    RunQualityWarning,
    SlowPrecisionWarning,
    StartOverWarning,
    TrainingError,
)
from adapterfusion.training.multitask import MultiTaskResult, train_multitask
from adapterfusion.training.optimizer import fusion_value_parameters, parameter_groups
from adapterfusion.training.run import run_dir_for
from adapterfusion.training.sampling import AnnealedSchedule, TaskSampler, annealed_alpha, sampling_probabilities
from adapterfusion.training.setups import (
    SETUPS,
    Setup,
    SetupContext,
    SetupPlan,
    get_setup,
    head_config_for,
    list_setups,
    register_setup,
)
from adapterfusion.training.store import AdapterStore, encoder_key
from adapterfusion.training.trainer import AdaptedTrainer

__all__ = [
    "SETUPS",
    "AdaptedTrainer",
    "AdapterStore",
    "AnnealedSchedule",
    "FusionStepCallback",
    "MultiTaskResult",
    "RunResult",
    "TaskSampler",
    "annealed_alpha",
    "sampling_probabilities",
    "train_multitask",
    "Setup",
    "SetupContext",
    "RunFileError",
    "RunQualityWarning",
    "SlowPrecisionWarning",
    "StartOverWarning",
    "SetupPlan",
    "TrainingConfig",
    "TrainingError",
    "encoder_key",
    "fusion_value_parameters",
    "get_setup",
    "head_config_for",
    "list_setups",
    "parameter_groups",
    "register_setup",
    "run_dir_for",
    "train",
]
