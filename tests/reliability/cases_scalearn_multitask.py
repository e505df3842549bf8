"""Bad-input cases at one boundary, ScaLearn fusions (FusionConfig(kind='scalearn')) and MT-A (train_multitask, fusion-
mt-a): their configs, training, saving and loading."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers

import adapterfusion as af
import adapterfusion.training
from adapterfusion.demo import demo_data_dir
from adapterfusion.errors import SerializationError
from adapterfusion.training import TaskSampler, TrainingError
from catalogue import (
    TINY_RUN,
    Action,
    BadInput,
    adapters_a_and_b,
    edit_json,
    encoder_folder,
    left_no_run_folder,
    load_into,
    multitask_in_folder,
)
from tiny_decoders import tiny_decoder

B = BadInput
GROUP = "ScaLearn and MT-A"


def _multitask(training: dict[str, Any] | None = None, **kwargs: Any) -> Callable[[Path], Action]:
    """train_multitask(['rte', 'cb'], **kwargs) on a saved tiny BERT and 8 demo examples of each task's splits, with
    TINY_RUN's settings updated by `training`, into a run folder outside the case's folder; a run that finishes is
    reported by its steps and task counts."""

    def prepare(folder: Path) -> Action:
        encoder = encoder_folder(folder)

        def action() -> str:
            with tempfile.TemporaryDirectory() as runs:
                result = af.training.train_multitask(
                    ["rte", "cb"],
                    encoder=encoder,
                    output_dir=runs,
                    data_dir=demo_data_dir(),
                    training_config={**TINY_RUN, **(training or {})},
                    **{"max_examples": 8, **kwargs},
                )
                steps = sum(result.task_counts.values())
                return f"trained {steps} steps ({result.task_counts}) over {len(result.epoch_metrics)} evaluations"

        return action

    return prepare


def _scalearn_model(config: af.FusionConfig) -> af.AdaptedModel:
    """adapters_a_and_b with ScaLearn fusion 'f' over a and b (`config`), its scales drawn at random so that every
    layer's differ."""
    model = adapters_a_and_b("h")
    model.add_fusion("f", ["a", "b"], config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("fusions.f.scales"):
                parameter.copy_(torch.randn(parameter.shape))
    return model


def _per_layer_scales_loaded_as_shared(folder: Path) -> Action:
    """A ScaLearn fusion saved with share_layers=False, its fusion_config.json edited to share_layers=True, loaded
    into a model holding its adapters."""
    saved = _scalearn_model(af.FusionConfig.scalearn()).save_fusion("f", folder / "f")
    edit_json(saved / "fusion_config.json", lambda document: document["config"].update(share_layers=True))
    return load_into(adapters_a_and_b("h"), "fusion", saved)


def _state_dict_with_differing_shared_copies(folder: Path) -> Action:
    """model.load_state_dict(<a ScaLearn++ model's state dict, its layer-1 copy of the shared scales changed>)."""
    state = _scalearn_model(af.FusionConfig.scalearn_plus_plus()).state_dict()
    state["model.encoder.layer.1.output.fusions.f.scales"] += 1.0
    target = adapters_a_and_b("h")
    target.add_fusion("f", ["a", "b"], af.FusionConfig.scalearn_plus_plus())
    return lambda: target.load_state_dict(state)


def _own_state_dict_assigned(folder: Path) -> Action:
    """model.load_state_dict(model.state_dict(), assign=True) on a model with a ScaLearn++ fusion."""
    model = _scalearn_model(af.FusionConfig.scalearn_plus_plus())
    return lambda: model.load_state_dict(model.state_dict(), assign=True)


def _gpt2_folder(folder: Path) -> Path:
    """A tiny GPT-2 saved with the shipped tokenizer."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    tiny_decoder("gpt2", vocab_size=tokenizer.vocab_size).save_pretrained(folder / "gpt2")
    tokenizer.save_pretrained(folder / "gpt2")
    return folder / "gpt2"


def _multitask_on_gpt2(**kwargs: Any) -> Callable[[Path], Action]:
    """train_multitask(['rte', 'cb'], **kwargs) on _gpt2_folder and 8 demo examples of each split, into folder/runs,
    failing as well where the refusal left run folders behind."""
    return left_no_run_folder(multitask_in_folder(["rte", "cb"], encoder_of=_gpt2_folder, max_examples=8, **kwargs))


CASES: tuple[BadInput, ...] = (
    B(
        "mt-a-cls-pooling-on-a-decoder",
        GROUP,
        "train_multitask(['rte', 'cb'], encoder=<a tiny GPT-2>, pooling='cls') (a ConfigError as the first head was "
        "added, once the run folder was claimed and both tasks' data had loaded, leaving the run's empty folders)",
        TrainingError,
        ("pooling='cls' reads the first token", "decoder", "pooling='last'"),
        _multitask_on_gpt2(pooling="cls"),
    ),
    B(
        "scalearn-per-layer-scales-loaded-as-shared",
        GROUP,
        "load_fusion(<a ScaLearn fusion saved with share_layers=False, its fusion_config.json edited to "
        "share_layers=True>) (loaded: every layer took the last layer's scales without a word)",
        SerializationError,
        ("ScaLearn scales of a later layer differ", "share_layers=True", "saved per layer (share_layers=False)"),
        _per_layer_scales_loaded_as_shared,
    ),
    B(
        "scalearn-shared-copies-differ-in-state-dict",
        GROUP,
        "model.load_state_dict(<a ScaLearn++ state dict whose layer-1 copy of the shared scales differs from layer "
        "0's>) (loaded: the one shared set took layer 1's copy at every layer without a word)",
        SerializationError,
        ("at model.encoder.layer.1.output.fusions.f differ", "share_layers=True"),
        _state_dict_with_differing_shared_copies,
    ),
    B(
        "scalearn-shared-scales-load-assign",
        GROUP,
        "model.load_state_dict(model.state_dict(), assign=True) on a ScaLearn++ fusion (loaded: each layer got its own "
        "tensor in place of the one shared set of scales, so they trained apart from then on, without a word)",
        SerializationError,
        ("assign=True", "would no longer be shared", "load without assign=True"),
        _own_state_dict_assigned,
    ),
    B(
        "mt-a-max-steps-far-beyond-early-stopping",
        GROUP,
        "train_multitask(['rte', 'cb'], training_config={'max_steps': 10**12, 'patience': 1}), a long plan that early "
        "stopping ends (not an error; hung before the first step, drawing the task of every one of the 10**12 "
        "planned steps up front, its memory growing without end)",
        None,
        (),
        _multitask({"max_steps": 10**12, "patience": 1, "warmup_ratio": 0}),
    ),
    B(
        "mt-a-max-steps-times-accumulation-past-an-index",
        GROUP,
        "train_multitask(['rte', 'cb'], training_config={'max_steps': 10**15, 'grad_accumulation': 10**5}) (hung "
        "drawing the task of each of the 10**15 steps up front; past that, an OverflowError from transformers: cannot "
        "fit 'int' into an index-sized integer)",
        TrainingError,
        ("max_steps=1000000000000000 times grad_accumulation=100000", "lower max_steps"),
        _multitask({"max_steps": 10**15, "grad_accumulation": 10**5}),
    ),
    B(
        "mt-a-max-examples-by-task",
        GROUP,
        "train_multitask(['rte', 'cb'], max_examples={'rte': 16}), keyed by task as data_dir may be (told "
        "\"max_examples has unknown split role 'rte'\", as if the task were a misspelt split)",
        TrainingError,
        ("keyed by the tasks ['rte']", "one max_examples for every task", "{'train': 500"),
        _multitask(max_examples={"rte": 16}),
    ),
    B(
        "mt-a-sampler-numpy-counts",
        GROUP,
        "TaskSampler([3, 5], steps_per_epoch=np.int64(2), epochs=np.int64(2), seed=0).draw(np.int64(3)) (not an "
        "error; was told 'steps_per_epoch=np.int64(2) must be an integer >= 1', which it is)",
        None,
        (),
        lambda folder: (
            lambda: f"drew task {TaskSampler([3, 5], np.int64(2), np.int64(2), seed=0).draw(np.int64(3))} at step 3"
        ),
    ),
)
