"""Bad-input cases at one boundary, what reads a trained model back: pruning fused adapters, the fusion analyses and
heatmaps, recording fusion attentions, and the zoo's adapters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import torch

import adapterfusion as af
import adapterfusion.zoo
from adapterfusion.analysis import FusionActivation, average_activations, load_fusion_activation
from adapterfusion.experiments.figures import plot_run_fusion_attention
from adapterfusion.pruning import compare_pruned, select_adapters, time_fusions
from adapterfusion.scoring import predict, score
from adapterfusion.tasks import get_task
from adapterfusion.training.adapter_subsets import AdapterSubsetCallback, check_subset_size
from adapterfusion.training.errors import TrainingError
from adapterfusion.zoo import ZooError, load_zoo_adapter, zoo_tasks
from cases_pipelines_analysis import _activation, _compared, _fused
from cases_save_targets import _store
from catalogue import Action, BadInput, ModelTouched
from tiny_models import tiny_encoder, tiny_inputs

B = BadInput
GROUP = "analysis and pruning"
RECORD = {"format_version": 1, "fusion": "f", "adapters": ["a", "b"], "layers": [0, 1], "tokens": 4}


def _labelled() -> list[dict[str, torch.Tensor]]:
    return [{**tiny_inputs(batch=2, seed=seed), "labels": torch.tensor([0, 1])} for seed in (1, 2)]


def _compared_generator(folder: Path) -> Action:
    """compare_pruned with the dev batches as a generator, which the activation pass used to use up."""
    model = _fused()
    model.activate(fusion="f", head="h")

    def action() -> str:
        result = compare_pruned(model, "f", get_task("rte"), (batch for batch in _labelled()), keep=2)
        return f"kept {len(result.kept)} of 3, scored on {result.examples} examples"

    return action


def _compared_empty(folder: Path) -> Action:
    model = _fused()
    model.activate(fusion="f", head="h")
    return lambda: compare_pruned(model, "f", get_task("rte"), [], keep=1)


def _timed(fusions: Any, batches: Any) -> Action:
    """time_fusions(<_fused() with a fusion g over a and b too>, fusions, batches, 'h', repeats=1)."""
    model = _fused()
    model.add_fusion("g", ["a", "b"])
    return lambda: time_fusions(model, fusions, batches, "h", repeats=1)


def _overwrite_failing(folder: Path) -> Action:
    """compare_pruned(..., keep=2, overwrite=True) over an earlier prune's f_pruned (keep=1), failing in its scoring
    (a label 7 for a two-class head): the earlier f_pruned must be there as it was."""
    model = _fused()
    model.activate(fusion="f", head="h")
    compare_pruned(model, "f", get_task("rte"), _labelled(), keep=1)
    earlier = model.fusion_setup("f_pruned").adapters
    bad = _labelled()
    bad[1]["labels"] = torch.tensor([1, 7])

    def action() -> Any:
        try:
            return compare_pruned(model, "f", get_task("rte"), bad, keep=2, overwrite=True)
        finally:
            if model.fusion_setup("f_pruned").adapters != earlier:
                raise ModelTouched(f"f_pruned {earlier} was replaced: {model.fusion_setup('f_pruned').adapters}")

    return action


def _compared_skipping(folder: Path) -> Action:
    """compare_pruned on a model run with skip_layers=[0] (AdapterDrop), its fusion's weights moved off their init."""
    model = _fused()
    with torch.no_grad():
        for parameter in model.fusion_parameters("f"):
            parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(0)))
    model.activate(fusion="f", head="h", skip_layers=[0])
    own = score(get_task("rte"), predict(model, _labelled()))["loss"]

    def action() -> str:
        before = compare_pruned(model, "f", get_task("rte"), _labelled(), keep=2, repeats=1).before.metrics["loss"]
        return f"'before' is the model's own loss: {abs(before - own) < 1e-6}"

    return action


def _scalearn_unused(folder: Path) -> Action:
    """compare_pruned(...).to_dict() on a ScaLearn fusion whose scales are all 0."""
    model = _fused(af.FusionConfig.scalearn())
    model.activate(fusion="f", head="h")
    with torch.no_grad():
        for site in model.sites_with_fusion("f"):
            site.fusions["f"].scales.zero_()
    return lambda: compare_pruned(model, "f", get_task("rte"), _labelled(), keep=1).to_dict()


def _record(values: Any) -> Action:
    """load_fusion_activation of a fusion_attention.json over adapters a, b at layers 0, 1 holding `values`."""

    def prepare(folder: Path) -> Action:
        (folder / "fusion_attention.json").write_text(json.dumps({**RECORD, "values": values}))
        return lambda: load_fusion_activation(folder)

    return prepare


def _averaged_with_lists(folder: Path) -> Action:
    """The mean of a record built with lists (adapters, layers) and the same record read back (tuples)."""
    (folder / "fusion_attention.json").write_text(json.dumps({**RECORD, "values": [[0.5, 0.5], [0.2, 0.8]]}))
    built = FusionActivation("f", ["a", "b"], [0, 1], np.array([[0.4, 0.6], [0.3, 0.7]]), 4)
    return lambda: f"mean of a: {average_activations([built, load_fusion_activation(folder)]).values[:, 0].tolist()}"


def _manifest(document: Any) -> Action:
    """zoo_tasks() with the shipped manifest read as `document` (a damaged install)."""

    def action() -> Any:
        with mock.patch.object(adapterfusion.zoo, "zoo_manifest", return_value=document):
            return zoo_tasks()

    return action


def _zoo_loaded(task: Any, **options: Any) -> Action:
    """load_zoo_adapter(<tiny BERT>, task, zoo=<a store with rte and cb entries for 'org/enc'>, encoder='org/enc')."""

    def prepare(folder: Path) -> Action:
        store, model = _store(folder), af.wrap(tiny_encoder("bert"))
        return lambda: f"loaded as {load_zoo_adapter(model, task, zoo=store, encoder='org/enc', **options)!r}"

    return prepare


def _subsets_always(always: list[str]) -> Action:
    model = _fused()
    return lambda: AdapterSubsetCallback(model, "f", 2, always, seed=1)


CASES: tuple[BadInput, ...] = (
    B(
        "pruning-compare-bf16-not-bool",
        GROUP,
        "compare_pruned(..., bf16='yes') (a TypeError from torch.autocast after the activation pass, with 'f_pruned' "
        "added)",
        af.ConfigError,
        ("bf16='yes'", "expected true or false"),
        _compared(bf16="yes"),
    ),
    B(
        "pruning-compare-pruned-name-empty",
        GROUP,
        "compare_pruned(..., pruned_name='') (taken as no name: the pruned fusion was added as 'f_pruned')",
        af.ConfigError,
        ("invalid fusion name ''",),
        _compared(pruned_name=""),
    ),
    B(
        "pruning-compare-batches-generator",
        GROUP,
        "compare_pruned(model, 'f', rte, (batch for batch in dev), keep=2) (not an error; the activation pass used the "
        "generator up, and scoring said 'no batches to evaluate (the split is empty)')",
        None,
        ("kept 2 of 3", "scored on 4 examples"),
        _compared_generator,
    ),
    B(
        "pruning-compare-batches-empty",
        GROUP,
        "compare_pruned(model, 'f', rte, [], keep=1) (said 'no fusion attention was recorded', naming three causes)",
        af.ConfigError,
        ("compare_pruned runs the fusions on dev batches", "no batch"),
        _compared_empty,
    ),
    B(
        "pruning-time-fusions-one-string",
        GROUP,
        "time_fusions(model, 'fg', batches, 'h') with fusions f and g loaded (the string was iterated: f and g were "
        "timed, as if asked for)",
        af.NameNotFoundError,
        ("no fusion named 'fg' is loaded", "['f', 'g']"),
        lambda folder: _timed("fg", _labelled()),
    ),
    B(
        "pruning-time-one-batch",
        GROUP,
        "time_fusions(model, ['f'], batch, 'h'): one batch, not a list of them (an AttributeError: 'str' object has no "
        "attribute 'items')",
        af.ConfigError,
        ("time_fusions takes an iterable of batches", "got one batch"),
        lambda folder: _timed(["f"], _labelled()[0]),
    ),
    B(
        "pruning-compare-overwrite-fails",
        GROUP,
        "compare_pruned(..., overwrite=True) over an earlier prune's f_pruned, failing in its scoring (a label 7 for a "
        "two-class head) (the earlier f_pruned was lost: the new subset was left in its place)",
        af.ConfigError,
        ("labels [7] are not class ids of head 'h'",),
        _overwrite_failing,
    ),
    B(
        "pruning-select-tiny-activations",
        GROUP,
        "select_adapters({'a': 1e-10, 'b': 2e-10}, mass=0.6), a ScaLearn fusion's scales near 0 (not an error; kept "
        "('a',), the least used: every value rounded to 0 and tied, and reached the mass within an absolute 1e-9)",
        None,
        ("('b',)",),
        lambda folder: lambda: select_adapters({"a": 1e-10, "b": 2e-10}, mass=0.6),
    ),
    B(
        "pruning-compare-skip-layers",
        GROUP,
        "compare_pruned(...) on a model activated with skip_layers=[0] (AdapterDrop) (not an error; both fusions were "
        "scored with every layer run, so 'before' was not the model's own score, while the ranking skipped layer 0)",
        None,
        ("'before' is the model's own loss: True",),
        _compared_skipping,
    ),
    B(
        "pruning-select-keep-numpy-int",
        GROUP,
        "select_adapters({'a': 0.2, 'b': 0.5, 'c': 0.3}, keep=np.int64(2)) (not an error; was refused as 'keep=2 must "
        "be a positive integer')",
        None,
        ("('b', 'c')",),
        lambda folder: lambda: select_adapters({"a": 0.2, "b": 0.5, "c": 0.3}, keep=np.int64(2)),
    ),
    B(
        "pruning-scalearn-scales-all-zero",
        GROUP,
        "compare_pruned(...).to_dict() on a ScaLearn fusion whose scales are all 0 (kept the first adapter on a tie of "
        "zeros, then a ZeroDivisionError from kept_share)",
        af.ConfigError,
        ("every adapter's activation is 0", "nothing to rank"),
        _scalearn_unused,
    ),
    B(
        "analysis-activation-info-overrides-record",
        GROUP,
        "FusionActivation(..., info={'values': [[1, 0]], 'fusion': 'g'}) (accepted; to_dict wrote info's values and "
        "fusion over the record's own)",
        af.ConfigError,
        ("info holds ['fusion', 'values']", "record's own fields"),
        lambda folder: lambda: _activation(info={"values": [[1, 0]], "fusion": "g"}).to_dict(),
    ),
    B(
        "analysis-heatmap-tex-in-adapter-name",
        GROUP,
        "plot_run_fusion_attention(FusionActivation('f', ('$\\\\frac$', 'b'), ...), 'h.png') (a ValueError from "
        "matplotlib's TeX parser while drawing; '$x$' was drawn as math)",
        af.ConfigError,
        ("names fusion or adapter '$\\\\frac$'", "letters, digits"),
        lambda folder: lambda: plot_run_fusion_attention(_activation(adapters=("$\\frac$", "b")), folder / "h.png"),
    ),
    B(
        "analysis-activation-complex-values",
        GROUP,
        "FusionActivation('f', ('a', 'b'), (0, 1), <complex array>, 3) (accepted: its table printed '0.500+0.000j')",
        af.ConfigError,
        ("not a [layers, adapters] array of numbers", "complex128"),
        lambda folder: lambda: _activation(values=np.array([[0.5, 0.5], [0.2, 1j]])),
    ),
    B(
        "analysis-activation-numpy-layers-json",
        GROUP,
        "json.dumps(FusionActivation('f', ('a', 'b'), (np.int64(0), np.int64(1)), ...).to_dict()) (not an error; was "
        "a TypeError 'Object of type int64 is not JSON serializable')",
        None,
        ('"layers": [0, 1]',),
        lambda folder: lambda: json.dumps(_activation(layers=(np.int64(0), np.int64(1))).to_dict()),
    ),
    B(
        "analysis-average-list-and-read-record",
        GROUP,
        "average_activations([FusionActivation('f', ['a', 'b'], [0, 1], ...), <the same layout read from a file>]) "
        "(not an error; was refused: 'cannot average over adapters ['a', 'b'] and ['a', 'b']')",
        None,
        ("mean of a: [0.45",),
        _averaged_with_lists,
    ),
    B(
        "analysis-record-null-value",
        GROUP,
        "load_fusion_activation(<fusion_attention.json whose values hold a null>) (read as NaN without a word)",
        af.SerializationError,
        ("not a fusion activation record", "found NoneType None"),
        _record([[None, 0.5], [0.2, 0.8]]),
    ),
    B(
        "analysis-record-string-value",
        GROUP,
        "load_fusion_activation(<fusion_attention.json whose values hold the string '0.5'>) (read as 0.5)",
        af.SerializationError,
        ("not a fusion activation record", "found str '0.5'"),
        _record([["0.5", 0.5], [0.2, 0.8]]),
    ),
    B(
        "analysis-record-values-other-shape",
        GROUP,
        "load_fusion_activation(<a record of 2 layers and 2 adapters whose values are 4 rows of 1>) (reshaped to 2 x 2 "
        "without a word: other numbers in each cell)",
        af.SerializationError,
        ("values have shape (4, 1), expected (2 layers, 2 adapters)",),
        _record([[0.5], [0.5], [0.2], [0.8]]),
    ),
    B(
        "zoo-tasks-manifest-without-tasks",
        GROUP,
        "zoo_tasks() with a shipped manifest.json holding no 'tasks' (a KeyError 'tasks')",
        ZooError,
        ("holds no 'tasks' object", "reinstall adapterfusion"),
        lambda folder: _manifest({"name": "zoo"}),
    ),
    B(
        "zoo-tasks-manifest-tasks-string",
        GROUP,
        "zoo_tasks() with a shipped manifest.json whose 'tasks' is the string 'rte' (listed ['e', 'r', 't'])",
        ZooError,
        ("holds no 'tasks' object", "reinstall adapterfusion"),
        lambda folder: _manifest({"tasks": "rte"}),
    ),
    B(
        "zoo-task-not-a-name",
        GROUP,
        "load_zoo_adapter(model, 5, zoo=<store>) (said 'store entry task 5 cannot be a folder name')",
        ZooError,
        ("task=5 has type int", "zoo_tasks()"),
        _zoo_loaded(5),
    ),
    B(
        "zoo-task-spec",
        GROUP,
        "load_zoo_adapter(model, get_task('rte'), zoo=<store>) (not an error; was refused: 'store entry task "
        "TaskSpec(...) cannot be a folder name')",
        None,
        ("loaded as 'rte'",),
        _zoo_loaded(get_task("rte")),
    ),
    B(
        "zoo-adapter-name-empty",
        GROUP,
        "load_zoo_adapter(model, 'rte', name='', zoo=<store>) (taken as no name: loaded as 'rte')",
        af.ConfigError,
        ("invalid adapter name ''",),
        _zoo_loaded("rte", name=""),
    ),
    B(
        "subsets-always-not-fused",
        GROUP,
        "AdapterSubsetCallback(model, 'f', 2, always=['z'], seed=1) with 'z' not among f's adapters (accepted: every "
        "step fused 1 adapter, not 2)",
        TrainingError,
        ("always include ['z']", "not fused by it"),
        lambda folder: _subsets_always(["z"]),
    ),
    B(
        "subsets-always-more-than-size",
        GROUP,
        "AdapterSubsetCallback(model, 'f', 2, always=['a', 'b', 'c'], seed=1) (a ValueError 'Sample larger than "
        "population' from random.sample at the first training step)",
        TrainingError,
        ("always include ['a', 'b', 'c']", "is not 2 or fewer"),
        lambda folder: lambda: _subsets_always(["a", "b", "c"])().on_step_begin(None, mock.Mock(global_step=0), None),
    ),
    B(
        "subsets-size-numpy-int",
        GROUP,
        "check_subset_size(np.int64(2), ['a', 'b', 'c']) (not an error; was refused: 'adapter_subset=2 must be a "
        "whole number')",
        None,
        ("2",),
        lambda folder: lambda: check_subset_size(np.int64(2), ["a", "b", "c"]),
    ),
)
