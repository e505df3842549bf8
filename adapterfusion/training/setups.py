"""The named training setups of the papers: each prepares an AdaptedModel for one task and says what trains.

A setup is a small function `prepare(model, context) -> SetupPlan`; it only calls the model's own API
(add_adapter, add_head, train_adapter, ...) plus, for top-k and LayerNorm-only tuning, picks encoder
parameters through the architecture table. Register another with `register_setup`. MT-A is the one setup without
a `prepare`: it trains several tasks in one run, so `train_multitask` (training/multitask.py) runs it, and
`train(task, "mt-a")` is refused as its options resolve. Every setup of the table below is registered here, so
`list_setups()` does not depend on which modules were imported.

| name | trains | paper |
|---|---|---|
| head | classifier only, encoder frozen | AdapterFusion "Head" |
| full | encoder + head | "Full" |
| st-a | Pfeiffer adapter + head (option reduction_factor: 2/16/64, default 16; init_std, default 1e-2; init) | "ST-A" |
| st-a-houlsby | Houlsby adapters (+ LayerNorm copies unless train_layer_norm: false) + head | "ST-A Houlsby" |
| top-k | the top k encoder layers + head (option k, default 1) | Houlsby "variable fine-tuning" |
| layernorm-only | every LayerNorm of the encoder + head (a model with RMSNorms only is refused) | Houlsby §3.6 |
| fusion-st-a | fused stored ST-A adapters + head (options: see _fusion_st_a) | "Fusion w/ ST-A" |

A generation task (instruction data, tasks/instruction.py) trains the wrapped language model's own head and loss, so
its setups add no head of ours: st-a, st-a-houlsby and fusion-st-a train the adapter or fusion alone, full, top-k and
layernorm-only the language model's weights; head, which would train nothing, is refused.
| mt-a | encoder + one adapter and head per task, all tasks in one run: `train_multitask`, not `train` | "MT-A" |
| fusion-mt-a | fusion-st-a over stored MT-A adapters, on the MT-A encoder (its mt_a.json) | "Fusion w/ MT-A" |
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from adapterfusion._validation import check_bool, check_mapping, check_name, is_finite_number, short_repr
from adapterfusion.adapters.config import INITS, AdapterConfig, bottleneck_problem
from adapterfusion.encoder_limits import encoder_config
from adapterfusion.errors import ConfigError, RunFileError
from adapterfusion.fusion.config import resolve_fusion_config
from adapterfusion.heads.config import (
    ClassificationHead,
    HeadConfig,
    MultipleChoiceHead,
    QuestionAnsweringHead,
    RegressionHead,
    TokenClassificationHead,
)
from adapterfusion.heads.pooling import resolve_pooling
from adapterfusion.injection.architectures import layer_count
from adapterfusion.run_layout import MT_A_MARKER_FILE
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.registry import get_task
from adapterfusion.tasks.spec import TaskSpec, piece_name, suggest
from adapterfusion.training.adapter_subsets import check_subset_size
from adapterfusion.training.config import MAX_SEED
from adapterfusion.training.errors import TrainingError
from adapterfusion.training.run import run_dir_for
from adapterfusion.training.run_files import read_json
from adapterfusion.training.run_state import RunState, run_state, unfinished_fix
from adapterfusion.training.store import ENTRY_FILE, MT_A, ZOO_SETUP, resolve_zoo, zoo_seed

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel
    from adapterfusion.training.store import AdapterStore

LAYERNORM_ONLY = "layernorm-only"
MARKER_FILE = MT_A_MARKER_FILE


@dataclass(frozen=True)
class SetupContext:
    """What a setup may use besides the model: the task, its resolved options, the seed, the adapter store."""

    task: TaskSpec
    options: Mapping[str, Any]
    seed: int
    encoder: str
    store: AdapterStore | None = None


@dataclass
class SetupPlan:
    """What a prepared model trains and which pieces the run saves: `adapters`, `fusion` and `head` with
    model.save_*; `save_encoder` for setups that change encoder weights (saved with save_pretrained);
    `fused_adapters`: adapter name -> AdapterStore.adapter_record of each stored adapter a fusion loaded. `head` is
    None for a generation task, which the language model's own head scores."""

    head: str | None
    trainable: list[nn.Parameter]
    adapters: tuple[str, ...] = ()
    fusion: str | None = None
    save_encoder: bool = False
    notes: list[str] = field(default_factory=list)
    head_only: bool = False  # nothing below the head trains, so its input features can be computed once
    fused_adapters: dict[str, dict[str, str]] = field(default_factory=dict)
    adapter_subset: int | None = None  # fusion training fuses this many adapters per step (training/adapter_subsets.py)
    always_fused: tuple[str, ...] = ()  # ... of which these every step: the target task's own adapter


@dataclass(frozen=True)
class Setup:
    """A named setup: how it prepares a model for one task (`recipe`; None for a setup that trains several tasks
    in one run, which `train` refuses), its options with their defaults, and what its runs leave."""

    name: str
    recipe: Callable[[AdaptedModel, SetupContext], SetupPlan] | None
    options: Mapping[str, Any]  # option name -> default
    description: str
    stores_adapter: bool = False  # a run's adapter + head may go into an AdapterStore (stage 1)
    check_options: Callable[[Mapping[str, Any]], None] | None = None  # refuses bad option values before any work
    # refuses, from the encoder's config alone (no weights read), an encoder the setup cannot train with these options
    check_encoder: Callable[[Mapping[str, Any], str], None] | None = None

    def _multitask_refusal(self) -> TrainingError:
        return TrainingError(
            f"{self.name} trains all its tasks in one run: call train_multitask([task, ...]) instead of "
            f"train(task, {self.name!r})"
        )

    def prepare(self, model: AdaptedModel, context: SetupContext) -> SetupPlan:
        """The model prepared for `context.task`: what trains and which pieces the run saves."""
        if self.recipe is None:
            raise self._multitask_refusal()
        return self.recipe(model, context)

    def resolve_options(self, given: Mapping[str, Any] | None) -> dict[str, Any]:
        if self.recipe is None:  # before any check of earlier runs or any work
            raise self._multitask_refusal()
        given = check_mapping(given, "setup_options", "{'reduction_factor': 16}")
        unknown = sorted(set(given) - set(self.options), key=str)
        if unknown:
            raise TrainingError(
                f"setup {self.name!r} has no option {unknown[0]!r}.{suggest(str(unknown[0]), list(self.options))} "
                f"Its options are {dict(self.options) or 'none'}"
            )
        options = {**self.options, **given}
        check_pooling_option(options.get("pooling"))
        if self.check_options is not None:
            self.check_options(options)
        return options


SETUPS: dict[str, Setup] = {}


def register_setup(setup: Setup, overwrite: bool = False) -> Setup:
    """Add `setup` to the registry, checked now rather than when a run first calls its parts (overwrite='no' was
    truthy and replaced a built-in setup; a recipe that is no function failed as the first run prepared its model)."""
    if not isinstance(setup, Setup):
        raise TrainingError(
            f"register_setup takes a Setup, got {type(setup).__name__} {short_repr(setup)}; wrap the recipe: "
            "register_setup(Setup(name, recipe, options, description))"
        )
    check_name(setup.name, "setup")  # it names run folders and store entries
    if setup.name in SETUPS and not check_bool(overwrite, "overwrite"):
        raise TrainingError(f"a setup named {setup.name!r} is registered; pass overwrite=True to replace it")
    if setup.recipe is None and setup.name != MT_A:  # a recipe-less setup is refused by train(), told to use MT-A's
        raise TrainingError(f"setup {setup.name!r} has no recipe; give a function recipe(model, context) -> SetupPlan")
    parts = {"recipe": setup.recipe, "check_options": setup.check_options, "check_encoder": setup.check_encoder}
    for part, value in parts.items():
        if value is not None and not callable(value):
            raise TrainingError(
                f"setup {setup.name!r}: {part}={short_repr(value)} has type {type(value).__name__}; expected a "
                f"function{'' if part == 'recipe' else ' (or None)'}"
            )
    if not isinstance(setup.options, Mapping) or not all(isinstance(key, str) for key in setup.options):
        raise TrainingError(
            f"setup {setup.name!r}: options={short_repr(setup.options)} must map each option name to its default, "
            "e.g. {'reduction_factor': 16}"
        )
    check_bool(setup.stores_adapter, "stores_adapter")
    SETUPS[setup.name] = setup
    return setup


def get_setup(name: str) -> Setup:
    if not isinstance(name, str):  # a list was a TypeError (unhashable) from the registry's lookup
        raise TrainingError(
            f"setup={short_repr(name)} has type {type(name).__name__}; give one setup's name: "
            f"one of {', '.join(SETUPS)}"
        )
    if name not in SETUPS:
        raise TrainingError(
            f"unknown setup {name!r}.{suggest(str(name), list(SETUPS))} Known setups: {', '.join(SETUPS)}"
        )
    return SETUPS[name]


def list_setups() -> list[str]:
    return list(SETUPS)


def head_config_for(task: TaskSpec, pooling: str = "cls") -> HeadConfig:
    """ClassificationHead for single/pair tasks, RegressionHead for a regression task, MultipleChoiceHead for
    multiple choice; labels from the task."""
    if task.regression:
        return RegressionHead(pooling=pooling)
    if task.is_multiple_choice:
        return MultipleChoiceHead(num_labels=task.num_labels, pooling=pooling)
    if task.is_extractive_qa:  # per-token heads pool nothing
        return QuestionAnsweringHead()
    if task.is_token_classification:
        return TokenClassificationHead(num_labels=task.num_labels, labels=tuple(task.label_names))
    return ClassificationHead(num_labels=task.num_labels, labels=tuple(task.label_names), pooling=pooling)


def check_pooling_option(pooling: Any) -> None:
    """A head's pooling option, refused before the encoder and the data load ('maxx' was refused as the head was
    added, leaving the run's empty folders); None (the encoder's own) is resolved once the encoder is known."""
    if pooling is not None:
        try:
            resolve_pooling(pooling, None)
        except ConfigError as err:
            raise TrainingError(str(err)) from None


def check_head_options(options: Mapping[str, Any], task: TaskSpec) -> None:
    """Refuse a head option for a generation task, before any work: it has no head of ours (the language model's own
    head predicts each answer token), so `pooling` would be accepted and have no effect on the run it names."""
    pooling = options.get("pooling")
    if task.is_generation and pooling is not None:
        raise TrainingError(
            f"setup option pooling={pooling!r} chooses how a classification head pools the tokens, but task "
            f"{task.name!r} is a generation task, which adds no head (the language model's own head predicts each "
            "answer token); leave pooling out"
        )


def _add_head(model: AdaptedModel, context: SetupContext) -> str | None:
    """A fresh head for the task, pooling as the `pooling` option says (None: the encoder's own, see
    heads/pooling.py; a decoder's is its last non-padding token). None for a generation task: the language model's
    own head predicts its answers."""
    if context.task.is_generation:
        return None
    name = piece_name(context.task)
    pooling = context.options.get("pooling")
    try:
        # The wrapped model knows whether it is a decoder (also for a Hub id that the experiment spec could not read).
        pooling = resolve_pooling(pooling, context.encoder, "last" if model.architecture.pools_last_token else None)
    except ConfigError as err:
        raise TrainingError(str(err)) from None
    model.add_head(name, head_config_for(context.task, pooling), overwrite=True)
    return name


def _head_parameters(model: AdaptedModel, head: str | None) -> list[nn.Parameter]:
    return list(model.heads[head].parameters()) if head is not None else []


def _freeze_all_but_head(model: AdaptedModel, head: str | None) -> None:
    """model.train_head(head); without a head (a generation task) everything frozen and no head active."""
    if head is not None:
        model.train_head(head)
        return
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    model.activate(adapter=model.active_adapter, fusion=model.active_fusion, skip_layers=model.skip_layers)


def _check_reduction_factor(value: Any) -> float:
    if not is_finite_number(value) or value <= 0:
        raise TrainingError(f"reduction_factor={value!r} must be a positive number (the paper uses 2, 16 or 64)")
    return float(value)


def check_bottleneck(reduction_factor: Any, encoder: str | os.PathLike) -> None:
    """A reduction factor that leaves no bottleneck for the encoder's hidden size (or widens it past reason),
    refused from the encoder's config before any run folder is made or data loaded: it had been refused as the
    adapter was added, after both the encoder and every task's data had loaded, leaving the run's empty folders.
    Silent when the config cannot be read without the network: adding the adapter refuses it then."""
    hidden = getattr(encoder_config(encoder), "hidden_size", None)
    if not isinstance(hidden, int) or isinstance(hidden, bool):
        return
    problem = bottleneck_problem(_check_reduction_factor(reduction_factor), hidden)
    if problem is not None:
        raise TrainingError(f"{problem} (encoder {os.fspath(encoder)!r})")


def check_adapter_options(options: Mapping[str, Any]) -> None:
    """st-a's options, refused before the encoder and the data load rather than when the adapter is added."""
    _check_reduction_factor(options["reduction_factor"])
    if options.get("init_std") is not None:
        check_init_std(options["init_std"])
    if options.get("init") is not None:
        check_init(options["init"])
    if options.get("train_layer_norm") is not None:
        check_bool(options["train_layer_norm"], "train_layer_norm")


def check_init_std(value: Any) -> float:
    if not is_finite_number(value) or not value > 0:  # also an int too large for a float (10**400)
        raise TrainingError(
            f"init_std={short_repr(value)} must be a positive number (the adapter's init std; default 1e-2)"
        )
    return float(value)


def check_init(value: Any) -> str:
    """An adapter's init kind (AdapterConfig.init): zero_up starts every adapter as the identity, which a decoder's
    large residual stream needs for a new adapter to leave the model's answers as they were (README, Decoders)."""
    if not isinstance(value, str) or value not in INITS:
        raise TrainingError(
            f"init={short_repr(value)} must be one of {list(INITS)} (the adapter's initialisation; default "
            f"{AdapterConfig.init!r})"
        )
    return value


# ---- the setups ------------------------------------------------------------------------------------------
def _head(model: AdaptedModel, context: SetupContext) -> SetupPlan:
    head = _add_head(model, context)
    if head is None:
        raise TrainingError(
            f"setup 'head' trains a classifier on a frozen encoder; {context.task.name!r} is a generation task, "
            "which the language model's own head scores: train it with st-a, fusion-st-a or full"
        )
    model.train_head(head)
    pooled = not model.get_head(head).config.per_token  # a per-token head's features are not one vector per input
    return SetupPlan(head=head, trainable=list(model.heads[head].parameters()), head_only=pooled)


def _full(model: AdaptedModel, context: SetupContext) -> SetupPlan:
    head = _add_head(model, context)
    _freeze_all_but_head(model, head)
    for parameter in model.encoder_parameters():
        parameter.requires_grad_(True)
    return SetupPlan(head=head, trainable=model.encoder_parameters() + _head_parameters(model, head), save_encoder=True)


def _adapter_setup(preset: Callable[..., AdapterConfig]) -> Callable[[AdaptedModel, SetupContext], SetupPlan]:
    def prepare(model: AdaptedModel, context: SetupContext) -> SetupPlan:
        head = _add_head(model, context)
        name = piece_name(context.task)
        init_std = context.options.get("init_std")  # None: AdapterConfig's default (Houlsby §3.6 sweeps it)
        init = context.options.get("init")  # None: AdapterConfig's default
        layer_norm = context.options.get("train_layer_norm")  # None: the preset's (Houlsby's copies trained)
        config = preset(
            reduction_factor=_check_reduction_factor(context.options["reduction_factor"]),
            **({} if init_std is None else {"init_std": check_init_std(init_std)}),
            **({} if init is None else {"init": check_init(init)}),
            **({} if layer_norm is None else {"train_layer_norm": check_bool(layer_norm, "train_layer_norm")}),
        )
        model.add_adapter(name, config)
        model.train_adapter(name, head=head)
        trainable = [p for p in model.parameters() if p.requires_grad]
        return SetupPlan(head=head, trainable=trainable, adapters=(name,))

    return prepare


def check_top_k_options(options: Mapping[str, Any]) -> None:
    """top-k's k, refused before the encoder and the data load where no encoder has layers enough (its upper
    bound, the encoder's layer count, is checked once the encoder is loaded)."""
    k = options["k"]
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise TrainingError(f"top-k: k={k!r} must be an integer >= 1 (how many of the encoder's top layers train)")


def check_top_k_layers(options: Mapping[str, Any], encoder: str | os.PathLike) -> None:
    """k above the encoder's layer count (from its config, when it can be read without the network), refused before
    the data loads; the recipe checks it again against the loaded model's layers."""
    config = encoder_config(encoder)
    layers = layer_count(config) if config is not None else None
    if layers is not None and options["k"] > layers:
        raise TrainingError(
            f"top-k: k={options['k']!r} must be an integer in 1..{layers} (the layer count of encoder "
            f"{os.fspath(encoder)!r})"
        )


def _top_k(model: AdaptedModel, context: SetupContext) -> SetupPlan:
    k = context.options["k"]
    layers = model.encoder_layers()
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= len(layers):
        raise TrainingError(f"top-k: k={k!r} must be an integer in 1..{len(layers)} (this encoder's layer count)")
    head = _add_head(model, context)
    _freeze_all_but_head(model, head)
    top = [p for layer in layers[len(layers) - k :] for p in layer.parameters()]
    for parameter in top:
        parameter.requires_grad_(True)
    return SetupPlan(head=head, trainable=top + _head_parameters(model, head), save_encoder=True)


def missing_layer_norms(model: nn.Module) -> str | None:
    """Why layernorm-only cannot train `model`: it has no torch.nn.LayerNorm. An RMSNorm (Llama-style decoders such
    as SmolLM2, Mistral, Qwen, Gemma; T5) is none: it has no bias and does not centre, so Houlsby's baseline is not
    defined for it. None when the model has LayerNorms."""
    if any(isinstance(module, nn.LayerNorm) for module in model.modules()):
        return None
    norms = sorted({type(module).__name__ for module in model.modules() if "norm" in type(module).__name__.lower()})
    found = f" (its norms are {', '.join(norms)}, which it does not train)" if norms else ""
    return (
        f"{LAYERNORM_ONLY}: {type(model).__name__} has no torch.nn.LayerNorm modules to train{found}; use it with an "
        "encoder that has LayerNorms (BERT-style encoders, GPT-2), or train this model with st-a, top-k or full"
    )


def check_layer_norms(encoder: str | os.PathLike) -> None:
    """Refuse layernorm-only for `encoder` before any work, from its config alone: its modules are built on the meta
    device, so no weights are read. Silent when the config cannot be read without the network, or the model cannot
    be built from it here: the run refuses it once it has loaded the model."""
    from transformers import AutoModel

    config = encoder_config(encoder)
    if config is None:
        return
    try:
        with torch.device("meta"):
            skeleton = AutoModel.from_config(config)
    except Exception:  # noqa: BLE001 - e.g. remote code; the run loads the model itself and checks it then
        return
    reason = missing_layer_norms(skeleton)
    if reason is not None:
        raise TrainingError(f"{reason} (encoder {os.fspath(encoder)!r})")


def _layernorm_only(model: AdaptedModel, context: SetupContext) -> SetupPlan:
    head = _add_head(model, context)
    _freeze_all_but_head(model, head)
    reason = missing_layer_norms(model.model)
    if reason is not None:
        raise TrainingError(reason)
    norms = [p for module in model.model.modules() if isinstance(module, nn.LayerNorm) for p in module.parameters()]
    for parameter in norms:
        parameter.requires_grad_(True)
    return SetupPlan(head=head, trainable=norms + _head_parameters(model, head), save_encoder=True)


def stage1_setups() -> list[str]:
    """The registered setups a fusion-st-a can fuse the adapters of: each run stores one task's adapter (MT-A's
    adapters, all from one run, are fusion-mt-a's)."""
    return [name for name, setup in SETUPS.items() if setup.stores_adapter and setup.recipe is not None]


def check_adapter_setup(value: Any, registered: bool = True) -> str:
    """fusion-st-a's adapter_setup: a stage-1 setup's name (stage1_setups), refused before any work; it had been
    looked up as a store folder ('head': "train it first: train('cb', 'head', ...)", which stores nothing; a list:
    "cannot be a folder name"). registered=False lets pass a name no setup of this process has: a finished run is
    rebuilt where the setup its adapters came from may not be registered."""
    stage1 = stage1_setups()
    if isinstance(value, str) and (value in stage1 or (not registered and value not in SETUPS)):
        return value
    if not isinstance(value, str):
        raise TrainingError(
            f"adapter_setup={short_repr(value)} has type {type(value).__name__}; set adapter_setup to the name of a "
            f"stage-1 adapter setup of fusion-st-a: one of {', '.join(stage1)}"
        )
    if value == MT_A:
        hint = f" (fusion-mt-a fuses {MT_A} adapters)"
    else:
        hint = " (its runs store no adapter)" if value in SETUPS else " (no setup of that name is registered)"
    known = "" if value in SETUPS else suggest(value, stage1)
    raise TrainingError(
        f"{value!r} is not a stage-1 adapter setup of fusion-st-a{hint}; set adapter_setup to one of "
        f"{', '.join(stage1)}" + (f".{known}" if known else "")
    )


def check_fusion_options(options: Mapping[str, Any]) -> None:
    """A fusion's sources must be a list of task names and its adapter_seed a seed, or its stored adapters would be
    looked for under names and seeds no run can have (and the user told to "train it first"); its fusion_config
    must resolve (a preset such as 'dynamic' or 'scalearn', or a FusionConfig dict). Whether each source is a known
    task is asked only before training (check_fusion_sources): a finished run is rebuilt from the adapters its
    config.json names, also those of tasks that no registry of the rebuilding process holds (an experiment's
    task_files)."""
    sources = options["sources"]
    if isinstance(sources, str) or not isinstance(sources, Sequence):
        raise TrainingError(f"fusion sources={sources!r} must be a list of task names")
    for task in sources:
        if not isinstance(task, str):
            raise TrainingError(f"fusion sources={list(sources)!r} must be task names; {task!r} is none")
    repeated = sorted({task for task in sources if list(sources).count(task) > 1})
    if repeated:
        raise TrainingError(f"fusion sources {list(sources)!r} name {repeated} more than once; list each task once")
    if "adapter_setup" in options:  # fusion-st-a's
        check_adapter_setup(options["adapter_setup"], registered=False)
    seed = options.get("adapter_seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
        raise TrainingError(f"adapter_seed={seed!r} must be an integer in 0..{MAX_SEED} (or None: the run's seed)")
    if options.get("fusion_config") is not None:  # a bad preset or field fails here, not when the job runs
        resolve_fusion_config(options["fusion_config"])


def check_piece_names(tasks: Sequence[str], what: str) -> None:
    """Refuse tasks named twice, and tasks whose adapters and heads would share a name: piece_name turns '.' into
    '_', so 'my.task' and 'my_task' were called "a task twice" (MT-A) or loaded one over the other (a fusion)."""
    repeated = sorted({task for task in tasks if list(tasks).count(task) > 1})
    if repeated:
        raise TrainingError(f"{what} {list(tasks)} name a task twice ({repeated}); list each task once")
    by_piece: dict[str, list[str]] = {}
    for task in tasks:
        by_piece.setdefault(piece_name(task), []).append(task)
    clash = next((names for names in by_piece.values() if len(names) > 1), None)
    if clash is not None:
        raise TrainingError(
            f"{what} {list(tasks)}: {clash} would both name their adapter and head {piece_name(clash[0])!r} "
            "(a piece name has '_' where a task name has '.'); rename one of the tasks"
        )


def check_fusion_sources(options: Mapping[str, Any], target: TaskSpec) -> None:
    """Before a fusion trains: each source is a registered task (or the target itself, which may be given as a
    TaskSpec), so that a mistyped source fails now, naming the known tasks, not as a missing store entry; and one
    besides the target at least: a fusion of one adapter has an attention of 1.0 everywhere (ST-A with a trained
    value matrix, reported as a fusion)."""
    # fusion-st-a's options (fusion-mt-a's empty sources mean every task of its MT-A run)
    if "adapter_setup" in options and not set(options.get("sources", ())) - {target.name}:
        raise TrainingError(
            f"the fusion of {target.name!r} would fuse its own adapter alone (sources={list(options['sources'])!r}); "
            "name at least one source task besides the target (CLI: --sources mnli,sst2)"
        )
    if "adapter_setup" in options:
        check_adapter_setup(options["adapter_setup"])
    check_piece_names(list(dict.fromkeys([*options.get("sources", ()), target.name])), "the fusion's tasks")
    for task in options.get("sources", ()):
        if task == target.name:
            continue
        try:
            get_task(task)
        except TaskError as err:  # a task of the user's own is named by its registered name, as the store keys it
            raise TaskError(
                f"fusion source: {err} A task of your own (a TaskSpec, as the target may be) is a source once it is "
                f"registered: call adapterfusion.tasks.register_task(spec) (or load_task_file) before train()"
            ) from None


def check_source_runs(
    options: Mapping[str, Any], target: str, seed: int, encoder: str, store: AdapterStore | None, output_dir: Path
) -> None:
    """Before any work: a fusion's stored adapter that is missing because its run in the same output dir crashed or
    still trains is refused with that reason (AdapterStore.load_into would later say "train it first")."""
    if store is None or "adapter_setup" not in options:  # fusion-st-a's options; fusion-mt-a fuses one MT-A run's
        return
    setup = options["adapter_setup"]
    seed = seed if options.get("adapter_seed") is None else options["adapter_seed"]
    from_store = [target] if options.get("zoo") is not None else [*options["sources"], target]
    for task in dict.fromkeys(from_store):
        if store.has(encoder, task, setup, seed):
            continue
        status = run_state(run_dir_for(output_dir, task, setup, seed))
        if status.state in (RunState.RUNNING, RunState.UNFINISHED):
            raise TrainingError(
                f"the store holds no {task} adapter ({setup}, seed {seed}) to fuse yet: {status.describe()}; "
                f"{unfinished_fix(status)}, then fuse again"
            )


def _fusion_st_a(model: AdaptedModel, context: SetupContext) -> SetupPlan:
    """Stage 2: load the stored stage-1 adapters of `sources` (the target's own is always included), freeze
    them and the encoder, and train a dynamic fusion plus a fresh head for the target task. With option `zoo`
    ('shipped' or an AdapterStore folder) every source but the target comes from that zoo; the target's own
    adapter still comes from `store` with `adapter_seed`. With option `adapter_subset` k each training step fuses the
    target's adapter and k - 1 others drawn at random (training/adapter_subsets.py)."""
    if context.store is None:
        raise TrainingError("fusion-st-a needs store=AdapterStore(...) holding the stage-1 adapters of its sources")
    sources: Sequence[str] = context.options["sources"]
    if isinstance(sources, str) or not isinstance(sources, Sequence):
        raise TrainingError(f"fusion-st-a: sources={sources!r} must be a list of task names")
    target = context.task.name
    ordered = list(dict.fromkeys([*sources, target])) if target not in sources else list(dict.fromkeys(sources))
    adapter_seed = context.options["adapter_seed"]
    adapter_seed = context.seed if adapter_seed is None else adapter_seed
    zoo = context.options.get("zoo")
    names, notes, fused = [], [], {}
    for task in ordered:
        name = piece_name(task)
        if zoo is not None and task != target:  # a pretrained source: the zoo's one adapter for it
            store = resolve_zoo(zoo)
            seed = zoo_seed(store, context.encoder, task)
            names.append(store.load_into(model, task, ZOO_SETUP, seed, encoder=context.encoder, name=name))
            fused[name] = store.adapter_record(context.encoder, task, ZOO_SETUP, seed)
            notes.append(f"{task}: zoo {zoo} ({ZOO_SETUP}, seed {seed})")
        else:
            names.append(
                context.store.load_into(
                    model, task, context.options["adapter_setup"], adapter_seed, encoder=context.encoder, name=name
                )
            )
            fused[name] = context.store.adapter_record(
                context.encoder, task, context.options["adapter_setup"], adapter_seed
            )
            notes.append(f"{task}: the run's store ({context.options['adapter_setup']}, seed {adapter_seed})")
    head = _add_head(model, context)
    fusion = f"fusion_{piece_name(context.task)}"
    model.add_fusion(fusion, names, resolve_fusion_config(context.options["fusion_config"] or "dynamic"))
    model.train_fusion(fusion, head=head)
    subset = check_subset_size(context.options.get("adapter_subset"), names)
    if subset is not None:
        notes.append(f"each training step fuses {subset} of the {len(names)} adapters ({target} always among them)")
    return SetupPlan(
        head=head,
        trainable=model.fusion_parameters(fusion) + _head_parameters(model, head),
        fusion=fusion,
        adapters=tuple(names),
        fused_adapters=fused,
        adapter_subset=subset,
        always_fused=(piece_name(context.task),),
        notes=[f"fused adapters {names}", *notes],
    )


def read_mt_a_marker(encoder: str | os.PathLike) -> dict[str, Any]:
    """The mt_a.json an MT-A run writes beside its fine-tuned encoder (base encoder, seed, tasks, run folder)."""
    marker = Path(encoder) / MARKER_FILE
    if not marker.is_file():
        raise TrainingError(
            f"fusion-mt-a runs on the encoder an MT-A run fine-tuned; {encoder} has no {MARKER_FILE}. Pass "
            "encoder=<mt-a run>/encoder (MultiTaskResult.encoder_dir), after train_multitask(..., store=store)"
        )
    fix = "train the MT-A run again (train_multitask) to write its encoder/ anew"
    data = read_json(marker, fix)
    # what _fusion_mt_a reads: a marker of another shape was a raw KeyError or TypeError once the encoder had loaded
    fields: dict[str, tuple[Callable[[Any], bool], str]] = {
        "base_encoder": (lambda value: isinstance(value, str) and bool(value), "the base encoder's name or folder"),
        "seed": (
            lambda value: isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SEED,
            f"an integer in 0..{MAX_SEED}",
        ),
        "tasks": (
            lambda value: isinstance(value, list) and bool(value) and all(isinstance(t, str) for t in value),
            "a list of task names",
        ),
        "run_dir": (lambda value: isinstance(value, str) and bool(value), "the MT-A run's folder"),
    }
    if not isinstance(data, dict):
        raise RunFileError(f"{marker} holds a JSON {type(data).__name__}, not the object an MT-A run writes; {fix}")
    for name, (valid, expected) in fields.items():
        if name not in data or not valid(data[name]):
            found = f"{name}={short_repr(data[name])}" if name in data else f"no {name!r}"
            raise RunFileError(f"{marker} records {found}, not {expected}: the file is damaged; {fix}")
    return data


def _fusion_mt_a(model: AdaptedModel, context: SetupContext) -> SetupPlan:
    """fusion-st-a over the MT-A adapters, on the MT-A encoder (context.encoder); the store entries are keyed by
    the base encoder and must come from the run that wrote this encoder."""
    if context.store is None:
        raise TrainingError(
            "fusion-mt-a needs store=AdapterStore(...) holding the MT-A adapters (train_multitask(..., store=store))"
        )
    marker = read_mt_a_marker(context.encoder)
    sources = context.options["sources"]
    if isinstance(sources, str) or not isinstance(sources, Sequence):
        raise TrainingError(f"fusion-mt-a: sources={sources!r} must be a list of task names")
    wanted = list(dict.fromkeys([*sources, context.task.name]))
    outside = [task for task in wanted if task not in marker["tasks"]]
    if outside:
        raise TrainingError(f"fusion-mt-a: the MT-A run {marker['run_dir']} trained {marker['tasks']}, not {outside}")
    seed = marker["seed"] if context.options["adapter_seed"] is None else context.options["adapter_seed"]
    for task in wanted:
        entry = context.store.path(marker["base_encoder"], task, MT_A, seed) / ENTRY_FILE
        source = (
            read_json(entry, "put the MT-A run's adapters into the store again").get("source")
            if entry.is_file()
            else None
        )
        if source is not None and Path(source).resolve().parent.parent != Path(marker["run_dir"]):
            raise TrainingError(
                f"fusion-mt-a: the store's MT-A adapter of {task!r} (seed {seed}) came from {source}, not from the "
                f"run {marker['run_dir']} that fine-tuned {context.encoder}; put that run's adapters in the store"
            )
    options = {**context.options, "adapter_setup": MT_A, "adapter_seed": seed}
    plan = _fusion_st_a(model, dataclasses.replace(context, encoder=marker["base_encoder"], options=options))
    plan.notes.append(f"on the MT-A encoder {context.encoder} (run {marker['run_dir']})")
    return plan


for _setup in (
    Setup("head", _head, {"pooling": None}, "frozen encoder, train the classifier only"),
    Setup("full", _full, {"pooling": None}, "fine-tune the whole encoder and the head"),
    Setup(
        "st-a",
        _adapter_setup(AdapterConfig.pfeiffer),
        {"reduction_factor": 16, "pooling": None, "init_std": None, "init": None},
        "single-task Pfeiffer adapter",
        stores_adapter=True,
        check_options=check_adapter_options,
        check_encoder=lambda options, encoder: check_bottleneck(options["reduction_factor"], encoder),
    ),
    Setup(
        "st-a-houlsby",
        _adapter_setup(AdapterConfig.houlsby),
        {"reduction_factor": 16, "pooling": None, "init_std": None, "init": None, "train_layer_norm": None},
        "single-task Houlsby adapters",
        stores_adapter=True,
        check_options=check_adapter_options,
        check_encoder=lambda options, encoder: check_bottleneck(options["reduction_factor"], encoder),
    ),
    Setup(
        "top-k",
        _top_k,
        {"k": 1, "pooling": None},
        "fine-tune the top k encoder layers and the head",
        check_options=check_top_k_options,
        check_encoder=check_top_k_layers,
    ),
    Setup(
        LAYERNORM_ONLY,
        _layernorm_only,
        {"pooling": None},
        "train the encoder's LayerNorm parameters and the head",
        check_encoder=lambda options, encoder: check_layer_norms(encoder),
    ),
    Setup(
        "fusion-st-a",
        _fusion_st_a,
        {
            "sources": (),
            "adapter_setup": "st-a",
            "adapter_seed": None,
            "fusion_config": None,
            "pooling": None,
            "zoo": None,
            "adapter_subset": None,
        },
        "AdapterFusion over stored ST-A adapters",
        check_options=check_fusion_options,
    ),
    Setup(MT_A, None, {}, "multi-task adapters + jointly fine-tuned encoder (train_multitask)", stores_adapter=True),
    Setup(
        "fusion-mt-a",
        _fusion_mt_a,
        {"sources": (), "adapter_seed": None, "fusion_config": None, "pooling": None},
        "AdapterFusion over MT-A adapters, on the MT-A encoder",
        check_options=check_fusion_options,
    ),
):
    register_setup(_setup)
