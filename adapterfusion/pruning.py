"""Pruning a trained fusion down to its most-activated adapters, and what that changes (Pfeiffer et al. 2021
§8.2; Rücklé et al. 2021, AdapterDrop: most adapters of a fusion can be pruned with no loss).

`select_adapters` ranks adapters by their mean fusion activation (over layers and real dev tokens; for a ScaLearn
fusion the mean magnitude of its scales) and keeps the top k, or the fewest whose share of the total activation
reaches `mass`; ties (shares equal to TIE_DECIMALS decimals)
go to the target task's own adapter, then to the adapter the fusion lists first. `compare_pruned` builds the pruned
fusion beside the full one (fusion/subset.py: the same Q/K/V, only the kept adapters run), evaluates both on the
same batches and times them side by side. `prune_fusion` does all of it for a fusion run folder. A module above
the training recipes, beside evaluation.py, since it rebuilds runs and adds a fusion; analysis/ keeps the read-only
measurements that training itself records (fusion_attention.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from adapterfusion._validation import (
    check_bool,
    check_mapping,
    check_names,
    check_piece_name,
    is_finite_number,
    plain_scalar,
    short_repr,
)
from adapterfusion.analysis.fusion_attention import mean_fusion_attention
from adapterfusion.errors import ConfigError, PieceExistsError
from adapterfusion.evaluation import check_count, check_run_dir, load_run_split, run_batches
from adapterfusion.forward_inputs.batches import check_batch, check_batches
from adapterfusion.fusion.scalearn import ScaLearnLayer
from adapterfusion.fusion.subset import add_fusion_subset
from adapterfusion.io.atomic import atomic_write_json, replace_folder, write_new_folder
from adapterfusion.io.paths import check_writable_folder
from adapterfusion.run_layout import CONFIG_FILE, ENTRY_FILE
from adapterfusion.scoring import predict, score
from adapterfusion.serialization.pieces import check_piece_folder
from adapterfusion.tasks.spec import TaskSpec, piece_name
from adapterfusion.training.rebuild import rebuild_run

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

PRUNING_FILE = "pruning.json"
_OUTPUT_NAMES = frozenset({"fusion", "head", PRUNING_FILE})  # what an --output holds: prune writes it whole
SOURCE_KEY = "source_run"  # in an --output's pruning.json: the resolved run folder it was pruned from, its owner
# Activations are means of float32 softmax weights in [0, 1]: digits below 1e-6 are rounding, which must not
# decide between adapters, so ranking compares their shares of the total at 6 decimals.
TIE_DECIMALS = 6


@dataclass(frozen=True)
class FusionFigures:
    """One side of the comparison: a fusion, its adapters, its dev metrics and its eval forward time."""

    fusion: str
    adapters: tuple[str, ...]
    metrics: dict[str, float]
    ms_per_batch: float


@dataclass(frozen=True)
class PruningResult:
    """Before (the trained fusion) and after (its pruned copy), on the same dev batches. `activation` is each
    adapter's mean fusion weight, averaged over layers and dev tokens, in the fusion's order; `target_adapter`
    the adapter ranked first among equals (the target task's own), if any."""

    criterion: str  # "keep=2" or "mass=0.9"
    activation: dict[str, float]
    metric: str
    before: FusionFigures
    after: FusionFigures
    examples: int
    timed_batches: int
    repeats: int
    run_dir: str | None = None
    output: str | None = None
    target_adapter: str | None = None

    @property
    def kept(self) -> tuple[str, ...]:
        return self.after.adapters

    @property
    def dropped(self) -> tuple[str, ...]:
        return tuple(a for a in self.before.adapters if a not in self.after.adapters)

    @property
    def kept_share(self) -> float:
        """The kept adapters' share of the total activation."""
        return sum(self.activation[name] for name in self.kept) / sum(self.activation.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "kept": list(self.kept),
            "dropped": list(self.dropped),
            "kept_share": self.kept_share,
        }


def _holds_our_result(folder: Path) -> bool:
    """Whether `folder`'s pruning.json is one prune_fusion wrote (a regular file holding a PruningResult)."""
    return _records(folder / PRUNING_FILE, ("before", "after", "kept", "dropped"))


def _pruned_from(folder: Path) -> Path | None:
    """The run folder (resolved) whose prune wrote `folder`: the `source_run` its pruning.json records; None if
    it holds no pruning.json of ours, or one written before prune recorded its source."""
    if not _holds_our_result(folder):
        return None
    source = json.loads((folder / PRUNING_FILE).read_text(encoding="utf-8")).get(SOURCE_KEY)
    return Path(source) if isinstance(source, str) and source else None


def _check_output(output: str | os.PathLike, run_dir: Path) -> Path:
    """`output` if prune may write its fusion/, head/ and pruning.json there: a new or empty folder, or one an earlier
    prune of this same run wrote (its pruning.json names the run). Any other folder that holds something is
    refused: another run folder or an AdapterStore entry holds trained pieces of the same kinds, which would be
    replaced, and a prune of another run is that run's result."""
    if Path(output).resolve() == run_dir.resolve():
        raise ConfigError(
            f"output={str(output)!r} is the run folder itself; the pruned fusion would replace the "
            "trained one there. Choose another folder"
        )
    path = check_writable_folder(output, "output", writes=(PRUNING_FILE,), ours=_holds_our_result, built_aside=True)
    _check_not_inside_pieces(path, run_dir)
    held = sorted(entry.name for entry in path.iterdir()) if path.is_dir() else []
    if held and _pruned_from(path) != run_dir.resolve():
        shown = ", ".join(repr(name) for name in held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
        raise ConfigError(
            f"output={str(output)!r} already holds {shown} and is not an earlier prune output of {str(run_dir)!r} "
            f"(whose {PRUNING_FILE} names that run); writing the pruned fusion and head there would replace what "
            "another run, an AdapterStore entry or another prune saved, which we did not write there. Choose "
            "another folder: a new or empty one"
        )
    extra = [name for name in held if name not in _OUTPUT_NAMES]
    if extra:  # the new output replaces the old folder whole
        raise ConfigError(
            f"output={str(output)!r}, an earlier prune output of this run, also holds {', '.join(map(repr, extra))}, "
            "which prune did not write and a new prune would remove; move it out first, or choose another folder"
        )
    for kind in ("fusion", "head"):  # nothing we did not write is overwritten there: not a piece's files either
        check_piece_folder(path / kind, kind)
    return path


def _check_not_inside_pieces(path: Path, run_dir: Path) -> None:
    """Refuse an output that is the current folder or holds it (the output is renamed into place), or lies below a
    run folder or an AdapterStore entry: a re-run empties its run folder, and files added to a stored adapter change
    its digest, so every fusion run trained on it counts as stale."""
    resolved = path.resolve()
    if Path.cwd().resolve().is_relative_to(resolved):
        raise ConfigError(
            f"output={str(path)!r} is the current folder or holds it; the pruned output is built beside the folder "
            "and renamed into place, so give a folder below it, e.g. ./pruned"
        )
    for folder in resolved.parents:
        store_entry = _records(folder / ENTRY_FILE, ("encoder", "task", "setup", "seed"))
        if store_entry or folder == run_dir.resolve() or _records(folder / CONFIG_FILE, _RUN_KEYS):
            what = "an AdapterStore entry" if store_entry else "a run folder"
            raise ConfigError(
                f"output={str(path)!r} is inside {what}, {str(folder)!r}: a re-run or a store update would remove "
                "it, and files added there change what the experiment recorded. Choose a folder outside it"
            )


_RUN_KEYS = ("format_version", "task", "setup", "seed", "training")  # what every train() run's config.json holds


def _records(path: Path, keys: Sequence[str]) -> bool:
    """Whether `path` is a JSON object holding all of `keys`: a record train() or the store wrote, not a file of
    the same name that a project keeps (a model's config.json)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return False
    return isinstance(document, dict) and all(key in document for key in keys)


def check_criterion(keep: int | None, mass: float | None, count: int | None = None) -> tuple[int | None, float | None]:
    """Exactly one of keep (an integer in 1..count; count None: not yet known) and mass (a share in (0, 1]), returned
    as a plain int and float: a numpy integer or float, or a 0-d tensor, was refused as 'not a positive integer' or
    'not in (0, 1]' although it was one."""
    keep, mass = cast(Any, plain_scalar(keep)), cast(Any, plain_scalar(mass))
    if (keep is None) == (mass is None):
        raise ConfigError(
            "choose what to keep with exactly one of keep=K (the K most-activated adapters) and "
            "mass=M (the fewest adapters holding share M of the activation); "
            f"got keep={keep!r}, mass={mass!r}"
        )
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
        raise ConfigError(f"keep={keep!r} must be a positive integer: how many of the fusion's adapters to keep")
    if keep is not None and count is not None and keep > count:
        raise ConfigError(f"keep={keep!r}: the fusion has {count} adapters, so keep must be an integer in 1..{count}")
    if mass is not None and (isinstance(mass, bool) or not isinstance(mass, (int, float)) or not 0 < mass <= 1):
        raise ConfigError(
            f"mass={mass!r} must lie in (0, 1]: the share of the total fusion activation the kept "
            "adapters must reach, e.g. 0.9"
        )
    return keep, mass


def select_adapters(
    activation: Mapping[str, float],
    keep: int | None = None,
    mass: float | None = None,
    target_adapter: str | None = None,
) -> tuple[str, ...]:
    """The adapters to keep, in `activation`'s order: the `keep` most activated, or the fewest most activated
    whose activation reaches `mass` of the total. Activations equal to TIE_DECIMALS decimals tie; a tie goes to
    `target_adapter` (the target task's own adapter, which a near-uniform fusion must not lose to the order it
    happens to be listed in), then to the adapter listed first."""
    activation = check_mapping(activation, "select_adapters(activation)", "{'a': 0.6, 'b': 0.4}")
    names = list(activation)
    if not names:
        raise ConfigError(
            "select_adapters got no adapter activations; pass {adapter: activation} of the fusion's adapters"
        )
    bad = {name: value for name, value in activation.items() if not (is_finite_number(value) and value >= 0)}
    if bad:  # a NaN never reaches a mass and sorts anywhere: every adapter would be kept, or any
        raise ConfigError(
            f"select_adapters: the activations {bad} are not finite numbers >= 0 (a mean softmax weight or scale "
            "magnitude); the fusion's outputs are not finite, or these are not activations: measure them again"
        )
    keep, mass = check_criterion(keep, mass, len(names))
    if not sum(activation.values()):  # every adapter ties at 0, and the kept share is 0 / 0
        raise ConfigError(
            f"select_adapters: every adapter's activation is 0 ({activation}), so there is nothing to rank them by "
            "(a ScaLearn fusion whose scales are all 0 uses none of them); train the fusion first, or choose the "
            "adapters yourself with add_fusion_subset"
        )
    if target_adapter is not None and (not isinstance(target_adapter, str) or target_adapter not in activation):
        raise ConfigError(
            f"target_adapter={target_adapter!r} is not one of the fusion's adapters {names}: "
            "pass one of them, or None for no preference"
        )
    # Shares of the total, not the raw values: a softmax fusion's sum to 1 anyway, but a ScaLearn fusion's small
    # scales (1e-8) all rounded to 0 and tied, and fell under the absolute 1e-9 of the mass, so the adapter listed
    # first was kept whatever its size.
    total = sum(activation.values())
    shares = {name: value / total for name, value in activation.items()}
    ranked = sorted(names, key=lambda name: (-round(shares[name], TIE_DECIMALS), name != target_adapter))
    if keep is not None:
        chosen = set(ranked[:keep])
    else:
        assert mass is not None  # check_criterion: exactly one of keep and mass
        running, chosen = 0.0, set()
        for name in ranked:
            chosen.add(name)
            running += shares[name]
            if running >= mass - 1e-9:  # mass=1.0 must not fail on rounding
                break
    return tuple(name for name in names if name in chosen)


def time_fusions(
    model: AdaptedModel,
    fusions: Sequence[str],
    batches: Sequence[Mapping[str, torch.Tensor]],
    head: str | None,
    repeats: int = 3,
    skip_layers: Iterable[int] = (),
) -> dict[str, float]:
    """Median milliseconds per batch of each fusion's eval forward (with `skip_layers` skipped, AdapterDrop). All in
    one process inside `inference_cache()`, interleaved (each round times every fusion once, alternating the order),
    after one untimed warm-up round, so load changes hit every fusion alike. Leaves the last timed fusion active."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ConfigError(f"repeats={repeats!r} must be a positive integer")
    fusions = check_names(fusions, "fusions")  # 'fg' was timed as fusions 'f' and 'g'
    if not fusions:
        raise ConfigError(
            "time_fusions got no fusions to time; pass the names of loaded fusions, e.g. ['f', 'f_pruned']"
        )
    for fusion in fusions:  # before the warm-up round, not after the first fusion's
        model.require("fusion", fusion)
    batches = _listed(batches, "time_fusions")
    device = next(model.parameters()).device
    inputs = [{k: v.to(device) for k, v in batch.items() if k != "labels" and hasattr(v, "to")} for batch in batches]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times: dict[str, list[float]] = {fusion: [] for fusion in fusions}
    was_training = model.training
    model.eval()
    try:
        with model.inference_cache():
            for round_ in range(repeats + 1):
                for fusion in fusions if round_ % 2 else list(reversed(fusions)):
                    model.activate(fusion=fusion, head=head, skip_layers=skip_layers)
                    sync()
                    start = time.perf_counter()
                    for batch in inputs:
                        model(**batch)
                    sync()
                    if round_:
                        times[fusion].append((time.perf_counter() - start) * 1000 / len(inputs))
    finally:
        model.train(was_training)
    return {fusion: statistics.median(values) for fusion, values in times.items()}


def compare_pruned(
    model: AdaptedModel,
    fusion: str,
    task: TaskSpec,
    batches: Sequence[Mapping[str, torch.Tensor]],
    keep: int | None = None,
    mass: float | None = None,
    head: str | None = None,
    pruned_name: str | None = None,
    metric: str | None = None,
    repeats: int = 3,
    timing_batches: int = 4,
    target_adapter: str | None = None,
    bf16: bool = False,
    overwrite: bool = False,
) -> PruningResult:
    """Prune fusion `fusion` of `model` by its activation on `batches` (labelled dev batches), add the pruned
    fusion as `pruned_name` (default `<fusion>_pruned`), and evaluate and time both. The model's activation is
    restored afterwards; the pruned fusion stays in the model. `target_adapter` wins ties (select_adapters).
    `bf16`: score under bfloat16 autocast, as a run trained with it scored its dev set. `overwrite`: replace a
    fusion the model already has under `pruned_name` (an earlier prune's); without it that is refused. Both fusions
    run with the model's skip_layers (AdapterDrop), as the activation they are ranked by was measured."""
    model.require("fusion", fusion)
    if not isinstance(task, TaskSpec):
        raise ConfigError(
            f"compare_pruned(task={short_repr(task)}) has type {type(task).__name__}; pass the TaskSpec whose metrics "
            "score the dev batches, e.g. get_task('rte') (adapterfusion.tasks)"
        )
    _check_scored_task(task)
    keep, mass = check_criterion(keep, mass, len(model.fusion_setup(fusion).adapters))
    check_bool(bf16, "bf16")
    check_count(timing_batches, "timing_batches", "dev batches per timing round")
    check_count(repeats, "repeats", "timing rounds, the median taken")  # before the pruned fusion is added
    check_bool(overwrite, "overwrite")
    if metric is not None and metric not in task.metrics:  # PruningResult.metric names the figure to compare
        raise ConfigError(
            f"metric={short_repr(metric)} is not one of task {task.name!r}'s metrics {list(task.metrics)}; pass one "
            "of them, or leave it out for the first"
        )
    head = head if head is not None else model.active_head
    if head is None:  # the dev metric is the head's: without one the forwards fail after the fusion was added
        raise ConfigError(
            f"compare_pruned scores fusion {fusion!r} with a head, and none is given or active; pass head= one of the "
            f"loaded heads {model.head_names or '(none: add_head() or load_head() one first)'}"
        )
    model.require("head", head)
    pruned_name = pruned_name if pruned_name is not None else f"{fusion}_pruned"  # '' is a bad name, not the default
    check_piece_name(pruned_name, "fusion")
    if pruned_name == fusion:
        raise ConfigError(f"pruned_name={pruned_name!r} would replace the fusion being pruned; choose another name")
    if pruned_name in model.fusion_names and not overwrite:  # before the dev forwards, not after
        raise PieceExistsError(
            f"the model already has a fusion {pruned_name!r}; pass pruned_name= another name, or overwrite=True to "
            "replace it with the pruned one",
            pruned_name,
        )
    batches = _listed(batches, "compare_pruned")
    shares = _shares(model, fusion, batches, head)
    unlabelled = [index for index, batch in enumerate(batches) if isinstance(batch, Mapping) and "labels" not in batch]
    if unlabelled:  # the scores compare predictions with labels: else a count mismatch deep in scoring
        raise ConfigError(
            f"compare_pruned scores both fusions on labelled dev batches, and batches {unlabelled[:5]} hold no "
            "'labels'; pass the dev batches with their labels (as run_batches makes them)"
        )
    # the fusion overwrite=True replaces: put back if the comparison fails (it was lost, the new subset left there)
    replaced = model.export_piece("fusion", pruned_name) if pruned_name in model.fusion_names else None
    pruned = add_fusion_subset(
        model, fusion, select_adapters(shares, keep, mass, target_adapter), pruned_name, overwrite=overwrite
    )
    skip = model.skip_layers  # activate() without them ran every layer: 'before' was not what the model scores
    try:
        with model.activated(fusion=fusion, head=head, skip_layers=skip):  # what ran before runs again afterwards
            metrics = {}
            for name in (fusion, pruned):
                model.activate(fusion=name, head=head, skip_layers=skip)
                metrics[name] = score(task, predict(model, batches, bf16=bf16))
            timed = list(batches[:timing_batches])
            ms = time_fusions(model, (fusion, pruned), timed, head, repeats, skip)
    except BaseException:  # a failed comparison leaves the model's fusions as they were
        if replaced is None:
            model.delete_fusion(pruned)
        else:
            model.install_piece(replaced, overwrite=True)
        raise
    figures = [
        FusionFigures(name, model.fusion_setup(name).adapters, metrics[name], ms[name]) for name in (fusion, pruned)
    ]
    return PruningResult(
        criterion=f"keep={keep}" if keep is not None else f"mass={mass}",
        activation=shares,
        metric=metric or task.metrics[0],
        before=figures[0],
        after=figures[1],
        examples=sum(len(b["input_ids"]) for b in batches),
        timed_batches=len(timed),
        repeats=repeats,
        target_adapter=target_adapter,
    )


def _listed(batches: Sequence[Mapping[str, torch.Tensor]], caller: str) -> list[Mapping[str, torch.Tensor]]:
    """The dev batches as a list of mappings: every fusion runs on them, and a generator or iterator was used up by
    the first pass (compare_pruned's scoring then found 'no batches (the split is empty)'), one batch given alone
    was iterated as its keys."""
    check_batches(batches, caller)
    try:
        listed = list(batches)
    except TypeError:
        listed = []
    if not listed:
        raise ConfigError(
            f"{caller} runs the fusions on dev batches, and got {short_repr(batches)}, no batch; pass the labelled dev "
            "batches as a list [batch, ...] (as run_batches makes them)"
        )
    for batch in listed:
        check_batch(batch, caller)
    return listed


def _shares(
    model: AdaptedModel, fusion: str, batches: Sequence[Mapping[str, torch.Tensor]], head: str | None
) -> dict[str, float]:
    """How much each fused adapter counts in `fusion`: its mean softmax weight over layers and real dev tokens; for a
    ScaLearn fusion, whose scales are signed and unnormalised (a large negative scale is a large effect, and a mean
    of signed scales can hide it), the mean magnitude of its scales over the sites that run and their dimensions."""
    adapters = model.fusion_setup(fusion).adapters
    if model.fusion_setup(fusion).config.is_scalearn:
        scales = [
            cast(ScaLearnLayer, site.fusions[fusion]).scales.detach()
            for site in model.sites_with_fusion(fusion)
            if site.layer_index not in model.skip_layers
        ]
        if not scales:
            raise ConfigError(f"every site of ScaLearn fusion {fusion!r} is in skip_layers: nothing to rank")
        magnitude = torch.stack([site_scales.abs().mean(dim=-1) for site_scales in scales]).mean(dim=0)
        return {name: float(value) for name, value in zip(adapters, magnitude.tolist(), strict=True)}
    activation = mean_fusion_attention(model, fusion, batches, head=head)
    return {name: float(value) for name, value in zip(activation.adapters, activation.values.mean(axis=0), strict=True)}


def _check_scored_task(task: TaskSpec) -> None:
    """Pruning scores the fusion's head on dev batches; an extractive QA task's metrics need its answers decoded
    from the windows of each context (training/qa_loop.py), which this comparison does not do."""
    if task.is_extractive_qa:
        raise ConfigError(
            f"prune compares a fusion's dev metric before and after, and task {task.name!r} is extractive QA, whose "
            "exact match and F1 come from answers decoded across the windows of each context: pruning extractive QA "
            "fusions is not supported yet (record the fusion's attention with analyze-fusion instead)"
        )


def prune_fusion(
    run_dir: str | os.PathLike,
    keep: int | None = None,
    mass: float | None = None,
    data_dir: str | os.PathLike | None = None,
    max_examples: int | None = None,
    batch_size: int | None = None,
    store: str | os.PathLike | None = None,
    device: str | None = None,
    repeats: int = 3,
    timing_batches: int = 4,
    output: str | os.PathLike | None = None,
) -> PruningResult:
    """`compare_pruned` on a fusion run folder (fusion-st-a, fusion-mt-a) and its dev split as the run saw it
    (or `data_dir` / a `max_examples` subset). Ties go to the run's task's own adapter. `output`: a folder for the
    pruned fusion (fusion/), the run's head (head/) and pruning.json; load it with load_adapter for each kept
    adapter, then load_fusion, load_head."""
    keep, mass = check_criterion(keep, mass)
    check_count(repeats, "repeats", "timing rounds, the median taken")
    check_count(timing_batches, "timing_batches", "dev batches per timing round")
    check_count(batch_size, "batch_size", "examples per evaluation batch")
    check_count(max_examples, "max_examples", "a seeded subset of the split")
    run_dir = Path(run_dir)
    earlier = False  # output: an earlier prune output of this run, which the new one replaces
    if output is not None:  # the output first: a wrong --output is said whatever the run folder holds
        output = _check_output(output, run_dir)
        earlier = output.is_dir() and any(output.iterdir())
    check_run_dir(run_dir)
    run = rebuild_run(run_dir, store=store, device=device)
    if run.fusion is None:
        raise ConfigError(
            f"prune needs a fusion run (fusion-st-a or fusion-mt-a); {run_dir} is a {run.setup!r} run "
            f"of task {run.task.name!r}, which has no fusion to prune"
        )
    if run.head is None:
        raise ConfigError(
            f"prune compares a fusion's head metric before and after; {run_dir} trained the generation task "
            f"{run.task.name!r}, which has no head of ours: pruning generation fusions is not supported yet"
        )
    _check_scored_task(run.task)
    keep, mass = check_criterion(keep, mass, len(run.model.fusion_setup(run.fusion).adapters))  # before the data
    batches = run_batches(run, load_run_split(run, "validation", data_dir, max_examples), batch_size)
    own = piece_name(run.task)
    result = compare_pruned(
        run.model,
        run.fusion,
        run.task,
        batches,
        keep=keep,
        mass=mass,
        head=run.head,
        metric=run.config["training"].get("metric_for_best"),
        repeats=repeats,
        timing_batches=timing_batches,
        target_adapter=own if own in run.model.fusion_setup(run.fusion).adapters else None,
        bf16=run.bf16,
    )
    result = dataclasses.replace(result, run_dir=str(run_dir), output=str(output) if output is not None else None)
    if output is not None:
        _write_output(
            output, run_dir, earlier, run.model, run.head, {**result.to_dict(), SOURCE_KEY: str(run_dir.resolve())}
        )
    return result


def _write_output(
    output: Path, run_dir: Path, earlier: bool, model: AdaptedModel, head: str, record: dict[str, Any]
) -> None:
    """Build the output whole beside it, then rename it into place: a crash leaves the old or the new one. It was
    checked minutes ago (_check_output), before the evaluation: a folder new or empty then must still be (whatever
    appeared there meanwhile is kept), and an earlier prune output of this run is checked again just before it is
    replaced."""
    fusion = record["after"]["fusion"]

    def write(folder: Path) -> None:
        model.save_fusion(fusion, folder / "fusion")
        model.save_head(head, folder / "head")
        atomic_write_json(folder / PRUNING_FILE, record)
        if earlier:
            _check_output(output, run_dir)

    final = Path(output).resolve()
    if earlier:
        replace_folder(final, write)
    else:
        fix = "Prune again into a new or empty folder, or into an earlier prune output of this run"
        write_new_folder(final, write, "output", "the prune", fix)
