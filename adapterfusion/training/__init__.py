"""Training recipes: named setups (head, full, st-a, st-a-houlsby, top-k, layernorm-only, fusion-st-a) run with
the HuggingFace Trainer, an AdapterStore that hands stage-1 adapters to stage 2, and `train()` for one run.

    from adapterfusion.training import AdapterStore, train
    store = AdapterStore("adapters")
    for task in ("mnli", "rte"):
        train(task, "st-a", seed=42, store=store)
    result = train("rte", "fusion-st-a", store=store, setup_options={"sources": ["mnli"]})
"""
from adapterfusion.training.api import RunResult, run_dir_for, train
from adapterfusion.training.config import TrainingConfig
from adapterfusion.training.errors import TrainingError
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
from adapterfusion.training.trainer import AdaptedTrainer, FusionStepCallback, fusion_value_parameters, parameter_groups

__all__ = [
    "SETUPS", "AdaptedTrainer", "AdapterStore", "FusionStepCallback", "RunResult", "Setup", "SetupContext",
    "SetupPlan", "TrainingConfig", "TrainingError", "encoder_key", "fusion_value_parameters", "get_setup",
    "head_config_for", "list_setups", "parameter_groups", "register_setup", "run_dir_for", "train",
]
