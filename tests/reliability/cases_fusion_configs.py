"""Bad-input cases at one boundary, how adapters are composed and trained together: FusionConfig and ScaLearn settings,
add_fusion and train_fusion arguments, and MT-A's tasks, sampling and heads."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import adapterfusion as af
import adapterfusion.training
from adapterfusion.demo import demo_data_dir
from adapterfusion.errors import ConfigError, NameNotFoundError, RunFileError
from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.fusion import add_fusion_subset
from adapterfusion.tasks import TaskSpec
from adapterfusion.training import AnnealedSchedule, TaskSampler, TrainingError, sampling_probabilities
from adapterfusion.training.setups import SETUPS, Setup, register_setup
from catalogue import (
    TINY_RUN,
    Action,
    BadInput,
    adapters_a_and_b,
    encoder_folder,
    experiment,
    left_no_run_folder,
    multitask_in_folder,
    train_on_damaged,
)

B = BadInput
GROUP = "fusion configs"


def _fused_logits(config: Callable[[], af.FusionConfig]) -> Callable[[Path], Action]:
    """add_fusion('f', ['a', 'b'], config()) on a tiny BERT, then the logits of its forward, which must be finite."""

    def prepare(folder: Path) -> Action:
        model = adapters_a_and_b("h")

        def action() -> Any:
            model.add_fusion("f", ["a", "b"], config())
            model.activate(fusion="f", head="h")
            logits = model(input_ids=torch.tensor([[1, 2, 3, 4]])).logits
            loss = model.fusion_regularization("f")
            return f"logits finite: {bool(logits.isfinite().all())}; regularization {float(loss):g}"

        return action

    return prepare


def _fusion_run(setup: str = "fusion-st-a", marker: Any = None, **options: Any) -> Callable[[Path], Action]:
    """train('rte', setup, setup_options={'sources': ['cb'], **options}) on a saved tiny BERT with an empty store;
    `marker`, if given, is written as the encoder's mt_a.json (JSON)."""

    def prepare(folder: Path) -> Action:
        encoder = encoder_folder(folder)
        if marker is not None:
            (encoder / "mt_a.json").write_text(json.dumps(marker))
        return lambda: af.training.train(
            "rte",
            setup,
            encoder=encoder,
            output_dir=folder / "runs",
            store=folder / "store",
            data_dir=demo_data_dir(),
            max_examples=16,
            training_config=TINY_RUN,
            setup_options={"sources": ["cb"], **options},
        )

    return prepare


def _multitask(tasks: list[Any], **kwargs: Any) -> Callable[[Path], Action]:
    """train_multitask(tasks, **kwargs) for one step on a saved tiny BERT and 16 demo examples of each split."""
    return multitask_in_folder(tasks, max_examples=16, **kwargs)


def _temperature_at_step(step: int) -> Callable[[Path], Action]:
    """A fusion with a temperature schedule, the model's fusion step set to `step`, then a forward."""

    def prepare(folder: Path) -> Action:
        model = adapters_a_and_b("h")
        model.add_fusion("f", ["a", "b"], af.FusionConfig(temperature=True, temperature_steps=10))
        model.activate(fusion="f", head="h")

        def action() -> str:
            model.set_fusion_step(step)
            logits = model(input_ids=torch.tensor([[1, 2, 3, 4]])).logits
            return f"logits finite: {bool(logits.isfinite().all())}"

        return action

    return prepare


def _registering(setup: Callable[[], Setup], **kwargs: Any) -> Callable[[Path], Action]:
    """register_setup(setup(), **kwargs), the registry put back as it was afterwards whatever happened."""

    def action() -> Any:
        before = dict(SETUPS)
        try:
            return register_setup(setup(), **kwargs)
        finally:
            SETUPS.clear()
            SETUPS.update(before)

    return lambda folder: action


def _own_task(name: str) -> TaskSpec:
    return TaskSpec(name=name, kind="single", text_fields=["text"], label_names=["neg", "pos"])


def _draws(schedule: AnnealedSchedule) -> Callable[[Path], Action]:
    """TaskSampler over tasks of 3 and 5 examples, 3 planned epochs of one step, drawing every step's task."""

    def action() -> str:
        sampler = TaskSampler([3, 5], steps_per_epoch=1, epochs=3, seed=0, schedule=schedule)
        return f"tasks drawn: {[sampler.draw(step) for step in range(3)]}; last p = {sampler.probabilities(2)}"

    return lambda folder: action


def _fused_model_lookup(lookup: Callable[[af.AdaptedModel], Any]) -> Callable[[Path], Action]:
    """`lookup` of a tiny BERT with adapters a and b and fusion f over them (a bad name had been an empty list)."""

    def prepare(folder: Path) -> Action:
        model = adapters_a_and_b("h")
        model.add_fusion("f", ["a", "b"])
        return lambda: f"found {len(lookup(model))}"

    return prepare


CASES: tuple[BadInput, ...] = (
    B(
        "fusion-value-init-noise-huge",
        GROUP,
        "add_fusion('f', ['a', 'b'], FusionConfig(value_init_noise=1e30)) (accepted: every logit NaN, the "
        "regularisation inf)",
        ConfigError,
        ("value_init_noise=1e+30", "[0, 10000)", "overflow"),
        _fused_logits(lambda: af.FusionConfig(value_init_noise=1e30)),
    ),
    B(
        "fusion-regularization-weight-huge",
        GROUP,
        "add_fusion('f', ['a', 'b'], FusionConfig(regularization_weight=1e308)) (accepted: the V regularisation, part "
        "of every training loss, was inf from the first step)",
        ConfigError,
        ("regularization_weight=1e+308", "[0, 10000)"),
        _fused_logits(lambda: af.FusionConfig(regularization_weight=1e308)),
    ),
    B(
        "fusion-temperature-start-below-one",
        GROUP,
        "FusionConfig(temperature=True, temperature_start=0.5) (accepted: T = max(0.5 * ..., 1) = 1 at every step, "
        "no temperature at all)",
        ConfigError,
        ("temperature_start=0.5", ">= 1"),
        _fused_logits(lambda: af.FusionConfig(temperature=True, temperature_start=0.5)),
    ),
    B(
        "fusion-temperature-steps-without-temperature",
        GROUP,
        "train('rte', 'fusion-st-a', setup_options={'fusion_config': {'temperature_steps': 20}}), no temperature: "
        "true (accepted: trained at T = 1, the setting ignored without a word)",
        ConfigError,
        ("temperature_steps=20", "no effect with temperature=False", "set temperature=True"),
        _fusion_run(fusion_config={"temperature_steps": 20}),
    ),
    B(
        "fusion-static-value-option",
        GROUP,
        "FusionConfig.static(value_init_noise=0.1): an option of the value matrix a static fusion has not (ignored "
        "without a word)",
        ConfigError,
        ("value_init_noise=0.1", "value=False", "leave it out"),
        lambda folder: lambda: af.FusionConfig.static(value_init_noise=0.1),
    ),
    B(
        "fusion-temperature-at-not-a-step",
        GROUP,
        "FusionConfig(temperature=True).temperature_at('10') (a TypeError from the division; step -1 gave a "
        "temperature above its start)",
        ConfigError,
        ("fusion step='10'", "an integer >= 0"),
        lambda folder: lambda: af.FusionConfig(temperature=True).temperature_at("10"),
    ),
    B(
        "fusion-step-past-float",
        GROUP,
        "set_fusion_step(10**400), then a forward of a fusion with a temperature schedule (not an error; was an "
        "OverflowError from the schedule: integer division result too large for a float)",
        None,
        (),
        _temperature_at_step(10**400),
    ),
    B(
        "experiment-fusion-temperature-steps-alone",
        GROUP,
        "setups: [st-a, {name: fusion-st-a, fusion_config: {temperature_steps: 20}}] (accepted: every fusion ran "
        "without its temperature)",
        ExperimentSpecError,
        ("setups[1].fusion_config", "temperature_steps=20", "set temperature=True"),
        experiment(encoder=None, setups=["st-a", {"name": "fusion-st-a", "fusion_config": {"temperature_steps": 20}}]),
        cli=True,
    ),
    B(
        "fusion-adapter-setup-stores-no-adapter",
        GROUP,
        "train('rte', 'fusion-st-a', setup_options={'sources': ['cb'], 'adapter_setup': 'head'}) (told to train "
        "train('cb', 'head', store=...) first, which stores no adapter)",
        TrainingError,
        ("'head' is not a stage-1 adapter setup", "st-a, st-a-houlsby"),
        _fusion_run(adapter_setup="head"),
    ),
    B(
        "fusion-adapter-setup-a-list",
        GROUP,
        "train('rte', 'fusion-st-a', setup_options={'sources': ['cb'], 'adapter_setup': ['st-a']}) (told that the "
        "store entry setup ['st-a'] cannot be a folder name)",
        TrainingError,
        ("adapter_setup=['st-a'] has type list", "st-a, st-a-houlsby"),
        _fusion_run(adapter_setup=["st-a"]),
    ),
    B(
        "experiment-fusion-adapter-setup-a-list",
        GROUP,
        "setups: [st-a, {name: fusion-st-a, adapter_setup: [st-a]}] (a TypeError: unhashable type: 'list')",
        ExperimentSpecError,
        ("setups[1].adapter_setup", "has type list", "st-a, st-a-houlsby"),
        experiment(encoder=None, setups=["st-a", {"name": "fusion-st-a", "adapter_setup": ["st-a"]}]),
        cli=True,
    ),
    B(
        "fusion-mt-a-marker-empty",
        GROUP,
        "train('rte', 'fusion-mt-a', encoder=<an encoder whose mt_a.json holds {}>) (a KeyError 'tasks' once the "
        "encoder had loaded; a JSON list: a TypeError)",
        RunFileError,
        ("mt_a.json records no 'base_encoder'", "damaged", "train_multitask"),
        _fusion_run("fusion-mt-a", marker={}),
    ),
    B(
        "train-setup-a-list",
        GROUP,
        "train('rte', ['st-a']) (a TypeError: unhashable type: 'list')",
        TrainingError,
        ("setup=['st-a'] has type list", "one setup's name"),
        lambda folder: lambda: af.training.train("rte", ["st-a"], output_dir=folder / "runs"),
    ),
    B(
        "register-setup-overwrite-string",
        GROUP,
        "register_setup(Setup('st-a', ...), overwrite='no') (taken as true: the built-in st-a was replaced)",
        ConfigError,
        ("overwrite='no' has type str", "true or false"),
        _registering(lambda: Setup("st-a", lambda model, context: None, {}, "mine"), overwrite="no"),
    ),
    B(
        "register-setup-recipe-a-name",
        GROUP,
        "register_setup(Setup('mine', 'st-a', {}, 'my setup')) (accepted; a TypeError 'str' object is not callable "
        "once the first run had loaded its encoder)",
        TrainingError,
        ("recipe='st-a' has type str", "expected a function"),
        _registering(lambda: Setup("mine", "st-a", {}, "my setup")),  # type: ignore[arg-type]
    ),
    B(
        "train-pooling-misspelt",
        GROUP,
        "train('rte', 'st-a', setup_options={'pooling': 'maxx'}, encoder=<a folder not made yet>) (refused only once "
        "the encoder and the data had loaded, leaving the run's empty folders; here: told the encoder is missing)",
        TrainingError,
        ("pooling='maxx' is not supported", "cls, mean, last"),
        lambda folder: (
            lambda: af.training.train(
                "rte", "st-a", encoder=folder / "later", output_dir=folder / "runs", setup_options={"pooling": "maxx"}
            )
        ),
    ),
    B(
        "mt-a-pooling-misspelt",
        GROUP,
        "train_multitask(['rte', 'cb'], pooling='maxx', encoder=<a folder not made yet>) (refused only once the run "
        "folder was claimed and the encoder read; here: told the encoder is missing)",
        TrainingError,
        ("pooling='maxx' is not supported", "cls, mean, last"),
        lambda folder: (
            lambda: af.training.train_multitask(
                ["rte", "cb"], encoder=folder / "later", output_dir=folder / "runs", pooling="maxx"
            )
        ),
    ),
    B(
        "mt-a-schedule-a-dict",
        GROUP,
        "train_multitask(['rte', 'cb'], schedule={'start': 1.0}) (an AttributeError once both tasks' data had loaded "
        "and the run folder was written)",
        TrainingError,
        ("schedule={'start': 1.0} has type dict", "AnnealedSchedule(start=1.0, end=0.2)"),
        _multitask(["rte", "cb"], schedule={"start": 1.0}),
    ),
    B(
        "mt-a-tasks-with-one-piece-name",
        GROUP,
        "train_multitask([TaskSpec 'my.task', TaskSpec 'my_task']) (told the tasks 'name a task twice')",
        TrainingError,
        ("['my.task', 'my_task'] would both name their adapter and head 'my_task'", "rename one"),
        _multitask([_own_task("my.task"), _own_task("my_task")]),
    ),
    B(
        "mt-a-schedule-too-far-apart",
        GROUP,
        "AnnealedSchedule(start=1e308, end=-1e308) (accepted: alpha -inf in the last epoch, then numpy's ValueError "
        "'probabilities contain NaN' as the steps were drawn)",
        TrainingError,
        ("start=1e+308 and end=-1e+308", "too far apart"),
        lambda folder: lambda: AnnealedSchedule(start=1e308, end=-1e308),
    ),
    B(
        "mt-a-alpha-hugely-negative",
        GROUP,
        "TaskSampler([3, 5], ..., schedule=AnnealedSchedule(start=1.0, end=-1e308)) drawing each step (not an error; "
        "was numpy's ValueError 'probabilities contain NaN': N^alpha was 0 / 0)",
        None,
        (),
        _draws(AnnealedSchedule(start=1.0, end=-1e308)),
    ),
    B(
        "mt-a-task-size-past-float",
        GROUP,
        "sampling_probabilities([10**400, 5], 1.0) (not an error; was an OverflowError: int too large to convert to "
        "float)",
        None,
        (),
        lambda folder: lambda: f"p = {sampling_probabilities([10**400, 5], 1.0)}",
    ),
    B(
        "mt-a-sampler-seed-negative",
        GROUP,
        "TaskSampler([3, 5], 2, 2, seed=-1) (numpy's ValueError: expected non-negative integer)",
        TrainingError,
        ("seed=-1", "0..4294967295"),
        lambda folder: lambda: TaskSampler([3, 5], 2, 2, seed=-1),
    ),
    B(
        "mt-a-sampler-size-a-fraction",
        GROUP,
        "TaskSampler([3.7, 5], 2, 2, seed=0) (taken as 3 examples without a word)",
        TrainingError,
        ("task sizes [3.7, 5]", "positive example counts", "3.7 is none"),
        lambda folder: lambda: TaskSampler([3.7, 5], 2, 2, seed=0),
    ),
    B(
        "fusion-parameters-unknown-name",
        GROUP,
        "model.fusion_parameters('zz'), no fusion of that name (an empty list: nothing to train, no error)",
        NameNotFoundError,
        ("no fusion named 'zz' is loaded", "loaded fusions: ['f']"),
        _fused_model_lookup(lambda model: model.fusion_parameters("zz")),
    ),
    B(
        "fusion-parameters-of-an-adapter",
        GROUP,
        "model.fusion_parameters('a'), 'a' an adapter (an empty list, as for any unknown name)",
        NameNotFoundError,
        ("'a' is a loaded adapter, not a fusion", "activate(adapter='a')"),
        _fused_model_lookup(lambda model: model.fusion_parameters("a")),
    ),
    B(
        "adapter-parameters-of-a-fusion",
        GROUP,
        "model.adapter_parameters('f'), 'f' a fusion (an empty list; sites_with_adapter and fusion_layers alike)",
        NameNotFoundError,
        ("'f' is a loaded fusion, not an adapter", "activate(fusion='f')"),
        _fused_model_lookup(lambda model: model.adapter_parameters("f")),
    ),
    B(
        "fusion-subset-of-plain-model",
        GROUP,
        "add_fusion_subset(<the plain BertModel, not wrapped>, 'f', ['a'], 'g') (an AttributeError: 'BertModel' "
        "object has no attribute 'require')",
        ConfigError,
        ("add_fusion_subset takes a wrapped model", "got a BertModel", "af.wrap"),
        lambda folder: lambda: add_fusion_subset(adapters_a_and_b("h").model, "f", ["a"], "g"),
    ),
    B(
        "mt-a-reduction-factor-no-bottleneck",
        GROUP,
        "train_multitask(['rte', 'cb'], reduction_factor=1000) on a tiny BERT of hidden size 32 (refused only once "
        "both tasks' data had loaded, leaving the run's empty folders)",
        TrainingError,
        ("reduction_factor 1000.0 leaves no bottleneck for hidden size 32", "at most 32", "encoder '"),
        left_no_run_folder(_multitask(["rte", "cb"], reduction_factor=1000)),
    ),
    B(
        "st-a-reduction-factor-no-bottleneck",
        GROUP,
        "train('rte', 'st-a', setup_options={'reduction_factor': 1000}) on a tiny BERT of hidden size 32 (refused "
        "only once the encoder and the data had loaded, leaving the run's empty folders)",
        TrainingError,
        ("reduction_factor 1000.0 leaves no bottleneck for hidden size 32", "at most 32", "encoder '"),
        left_no_run_folder(train_on_damaged(lambda path: None, reduction_factor=1000)),
    ),
    B(
        "mt-a-one-task",
        GROUP,
        "train_multitask(['rte']) (trained: one adapter with the whole encoder, reported as MT-A, no multi-task "
        "training)",
        TrainingError,
        ("mt-a trains several tasks jointly", "['rte'] names one", "use st-a"),
        left_no_run_folder(_multitask(["rte"])),
    ),
    B(
        "experiment-mt-a-one-task",
        GROUP,
        "tasks: [rte], setups: [mt-a] (accepted: an MT-A job over rte alone)",
        ExperimentSpecError,
        ("setups[0]: mt-a trains several tasks jointly", "['rte'] names one", "use st-a"),
        experiment(encoder=None, tasks=["rte"], setups=["mt-a"]),
        cli=True,
    ),
    B(
        "experiment-mt-a-tasks-one",
        GROUP,
        "tasks: [rte, cb], setups: [{name: mt-a, tasks: [cb]}] (accepted: an MT-A job over cb alone)",
        ExperimentSpecError,
        ("setups[0].tasks: mt-a trains several tasks jointly", "['cb'] names one", "use st-a"),
        experiment(encoder=None, setups=[{"name": "mt-a", "tasks": ["cb"]}]),
        cli=True,
    ),
)
