"""`SetupVariant`: one column of an experiment's results, and how an experiment file's `setups` entries resolve
into them: a registered setup's options and TrainingConfig overrides, one variant per reduction factor
(`st-a-rf16`) or per combination of a `sweep` (experiments/sweep.py), and for a fusion the stage-1 variant whose
adapters it fuses (its entry's `adapter_variant`, or the one of `adapter_reduction_factor`). A runner's record
lists the resolved variants, which record.py checks as setup entries too.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from adapterfusion._validation import check_bool, check_int, check_name
from adapterfusion.errors import ConfigError
from adapterfusion.experiments.spec_checks import (
    OWNED,
    TRAINING_FIELDS,
    case_clash,
    checked_training,
    experiment_task,
    fail,
    first_repeat,
    no_duplicates,
    positive_number,
    reject_unknown,
    setup_name,
    string_list,
)
from adapterfusion.experiments.sweep import SWEEP_KEY, sweep_combinations, sweep_id
from adapterfusion.fusion.config import resolve_fusion_config
from adapterfusion.io.paths import check_name_length
from adapterfusion.training.errors import TrainingError
from adapterfusion.training.multitask import MT_A, single_task_refusal
from adapterfusion.training.setups import check_adapter_setup, check_init, check_init_std, get_setup

DEFAULT_REDUCTION_FACTOR = 16
# Setup options checked when the file is read, by the checks the setups apply (training/setups.py), so that a bad
# value fails no job once the model has loaded (nor a fusion once its stage-1 adapters trained). The bounds that
# depend on the experiment are checked where it is known: top-k's k against the encoder's layers
# (encoder_checks.check_top_k), adapter_subset against the fused adapters (spec._check_adapter_subsets).
_OPTION_CHECKS: dict[str, Callable[[Any], Any]] = {
    "train_layer_norm": lambda value: check_bool(value, "train_layer_norm"),
    "init_std": check_init_std,
    "init": check_init,
    "k": lambda value: check_int(value, "k", minimum=1),
    "adapter_subset": lambda value: check_int(value, "adapter_subset", minimum=1),
}
# MT-A trains all its tasks in one run (train_multitask: one job per seed, plan.MULTITASK_KIND), with these options;
# fusion-mt-a fuses that run's adapters on the encoder it fine-tuned.
MULTITASK_OPTIONS = {MT_A: {"reduction_factor": DEFAULT_REDUCTION_FACTOR, "pooling": None}}
MULTITASK_FUSION = "fusion-mt-a"


@dataclass(frozen=True)
class SetupVariant:
    """One column of the results: a registered setup with its options and TrainingConfig overrides.
    `adapter_variant` (fusion setups only) is the id of the stage-1 variant whose adapters it fuses; `tasks`, when
    set, are the only tasks it runs on."""

    id: str
    setup: str
    options: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    adapter_variant: str | None = None
    tasks: tuple[str, ...] | None = None
    sweep: dict[str, Any] | None = None  # {"group": entry id or setup, "settings": the swept values}: sweep.py

    def runs_on(self, task: str) -> bool:
        return self.tasks is None or task in self.tasks

    @property
    def is_stage1(self) -> bool:
        """Its runs put an adapter into an AdapterStore for fusions to use."""
        return get_setup(self.setup).stores_adapter

    @property
    def is_fusion(self) -> bool:
        return "sources" in get_setup(self.setup).options

    @property
    def is_multitask(self) -> bool:
        """One run trains all its tasks (MT-A), so it is one job per seed, not one per task."""
        return self.setup in MULTITASK_OPTIONS

    @property
    def fused_setup(self) -> str | None:
        """The stage-1 setup whose adapters this fusion variant fuses (None if it is no fusion)."""
        if not self.is_fusion:
            return None
        if self.setup == MULTITASK_FUSION:
            return MT_A
        return self.options.get("adapter_setup", get_setup(self.setup).options["adapter_setup"])

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "setup": self.setup,
            "options": dict(self.options),
            "training": dict(self.training),
            "adapter_variant": self.adapter_variant,
        }
        if self.tasks is not None:  # only when set, so experiments without it keep their spec hash
            out["tasks"] = list(self.tasks)
        if self.sweep is not None:  # likewise
            out["sweep"] = {"group": self.sweep["group"], "settings": dict(self.sweep["settings"])}
        return out


# A setup entry's variant with the entry's index in its list and the entry itself (a mapping) as the file gives it.
Entry = tuple[int, SetupVariant, Any]


def setup_option_defaults(setup: str) -> Mapping[str, Any]:
    return MULTITASK_OPTIONS[setup] if setup in MULTITASK_OPTIONS else get_setup(setup).options


def _rf_label(value: float) -> str:
    """'rf16', 'rf0_5': a variant id is a module key and a folder name, so '.' (and '+' of 1e+20) become '_'."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"rf{value:g}")


def _variant_tasks(value: Any, tasks: tuple[str, ...], path: str) -> tuple[str, ...]:
    chosen = string_list(value, path)
    for j, task in enumerate(chosen):
        experiment_task(task, tasks, f"{path}[{j}]")
    no_duplicates(chosen, path)
    return tuple(chosen)


def setup_entries(
    raw: Any, global_training: dict[str, Any], tasks: tuple[str, ...], key: str = "setups"
) -> list[Entry]:
    """Each entry's variants (fusion variants still without adapter_variant) with their index and raw entry; `key`
    is the list's name in error messages (a record's `variants` are checked as entries too)."""
    out: list[Entry] = []
    groups: dict[str, tuple[int, Any]] = {}  # each sweep's name -> its first entry's index, setup and swept keys
    for i, entry in enumerate(string_list(raw, key)):
        path = f"{key}[{i}]"
        entry = {"name": entry} if isinstance(entry, str) else entry
        if not isinstance(entry, Mapping):
            raise fail(path, f"must be a setup name or a mapping with 'name', got {entry!r}")
        name = setup_name(entry.get("name"), f"{path}.name")
        recipe = get_setup(name)
        multitask = name in MULTITASK_OPTIONS
        defaults = setup_option_defaults(name)
        options = [o for o in defaults if o not in OWNED]
        has_rf = "reduction_factor" in defaults and not multitask  # one multi-task run per seed: no rf variants
        fusion = "sources" in recipe.options
        extra = (
            ["name", "id", "tasks"]
            + (["reduction_factors"] if has_rf else [])
            + (["adapter_reduction_factor", "adapter_variant"] if fusion else [SWEEP_KEY] if not multitask else [])
        )
        reject_unknown(entry, extra + options + list(TRAINING_FIELDS), path)
        given_options = {k: v for k, v in entry.items() if k in options}
        training = {**global_training, **{k: v for k, v in entry.items() if k in TRAINING_FIELDS}}
        training = checked_training(training, name, path)
        only = _variant_tasks(entry["tasks"], tasks, f"{path}.tasks") if "tasks" in entry else None
        if "adapter_reduction_factor" in entry:
            positive_number(entry["adapter_reduction_factor"], f"{path}.adapter_reduction_factor")
            if "adapter_variant" in entry:
                raise fail(f"{path}.adapter_variant", "names the fused variant; drop adapter_reduction_factor")
        if fusion and "adapter_setup" in given_options:
            try:
                check_adapter_setup(given_options["adapter_setup"])
            except TrainingError as err:
                raise fail(f"{path}.adapter_setup", str(err)) from None
        if fusion and given_options.get("fusion_config") is not None:  # e.g. 'dynamic', 'scalearn' or a dict
            try:
                resolve_fusion_config(given_options["fusion_config"])
            except ConfigError as err:
                raise fail(f"{path}.fusion_config", str(err)) from None
        if multitask and training.get("fp16"):
            raise fail(f"{path}.fp16", f"{name} trains without loss scaling, so fp16 would diverge; use bf16: true")
        for switch in ("gradient_checkpointing", "torch_compile"):
            if multitask and training.get(switch):
                raise fail(f"{path}.{switch}", f"{name}'s own training loop does not support it; set it to false")
        start = len(out)
        if has_rf:
            if "reduction_factors" in entry and "reduction_factor" in entry:
                raise fail(f"{path}.reduction_factors", "give either reduction_factor or reduction_factors, not both")
            factors = entry.get(
                "reduction_factors", [entry.get("reduction_factor", recipe.options["reduction_factor"])]
            )
            factors = string_list(factors, f"{path}.reduction_factors")
            for j, rf in enumerate(factors):
                positive_number(rf, f"{path}.reduction_factors[{j}]")
            no_duplicates(factors, f"{path}.reduction_factors")
            if "id" in entry and len(factors) > 1:
                raise fail(f"{path}.id", "an id names one variant; drop it or give one reduction factor")
            for rf in factors:
                variant_id = entry.get("id", f"{name}-{_rf_label(rf)}")
                out.append(
                    (
                        i,
                        SetupVariant(variant_id, name, {**given_options, "reduction_factor": rf}, training, tasks=only),
                        entry,
                    )
                )
        elif multitask:
            runs_on = tasks if only is None else only
            if len(runs_on) < 2 and key == "setups":  # a record's runs were made before mt-a refused one task
                raise fail(f"{path}.tasks" if only is not None else path, single_task_refusal(runs_on))
            rf = given_options.get("reduction_factor", defaults["reduction_factor"])
            positive_number(rf, f"{path}.reduction_factor")
            out.append(
                (
                    i,
                    SetupVariant(entry.get("id", name), name, {**defaults, **given_options}, training, tasks=only),
                    entry,
                )
            )
        else:
            out.append((i, SetupVariant(entry.get("id", name), name, given_options, training, tasks=only), entry))
        if SWEEP_KEY in entry:
            group = entry.get("id", name)
            swept = (name, frozenset(entry[SWEEP_KEY]) if isinstance(entry[SWEEP_KEY], Mapping) else None)
            # `select` and `analyses` take every variant of a sweep's name: one name over two setups, or over other
            # settings, would be chosen among or plotted as one sweep (one setup's sweep split by `tasks` is one).
            if group in groups and groups[group][1] != swept:
                raise fail(
                    f"{path}.{SWEEP_KEY}",
                    f"is called {group!r} (its entry's id or setup name), as {key}[{groups[group][0]}]'s sweep of "
                    "another setup or other settings is; `select` and `analyses` name a sweep by it: give one of them "
                    "another 'id'",
                )
            groups.setdefault(group, (i, swept))
            out[start:] = _swept(i, entry, out[start:], options, has_rf)
    for i, variant, _ in out:
        _check_variant_id(variant.id, f"{key}[{i}].id")
        for option, check in _OPTION_CHECKS.items():  # what a job would refuse once the model is loaded
            if variant.options.get(option) is not None:
                try:
                    check(variant.options[option])
                except (ConfigError, TrainingError) as err:
                    raise fail(f"{key}[{i}].{option}", str(err)) from None
    ids = [variant.id for _, variant, _ in out]
    repeat = first_repeat(ids)
    if repeat is not None:
        (i, variant, _), (first, other, _) = out[repeat[0]], out[repeat[1]]
        if variant.id == other.id:
            raise fail(
                f"{key}[{i}]",
                f"duplicate setup variant {variant.id!r} (also from {key}[{first}]); give one of them an 'id'",
            )
        raise fail(f"{key}[{i}].id", case_clash(variant.id, other.id, f"from {key}[{first}]"))
    return out


def _check_variant_id(variant_id: str, path: str) -> None:
    """A variant id names folders (runs/<id>, adapters/<id>): a plain name the file system takes, refused here rather
    than once the runner has bound its store."""
    try:
        check_name(variant_id, "setup variant")
        check_name_length(variant_id, "setup variant id")
    except ConfigError as err:
        raise fail(path, str(err)) from None


def _swept(i: int, entry: Mapping[str, Any], bases: list[Entry], options: list[str], has_rf: bool) -> list[Entry]:
    """The variants of a setup entry with a `sweep`, one per combination of its values (experiments/sweep.py)."""
    path = f"setups[{i}].{SWEEP_KEY}"
    if has_rf and "reduction_factors" in entry and "reduction_factor" in (entry[SWEEP_KEY] or {}):
        raise fail(path, "sweeps reduction_factor, and the entry gives reduction_factors too; give it in one place")
    given = {k: v for k, v in entry.items() if k not in ("name", "id", "tasks", SWEEP_KEY)}
    allowed = [*options, *(["reduction_factor"] if has_rf else []), *TRAINING_FIELDS]
    combos = sweep_combinations(entry[SWEEP_KEY], list(dict.fromkeys(allowed)), given, path)
    group = entry.get("id", entry["name"])
    out = []
    for _, base, raw in bases:
        if "epochs" in combos[0] and base.training.get("max_steps") is not None:
            raise fail(
                f"{path}.epochs",
                f"max_steps={base.training['max_steps']} (from the entry or `training`) sets each run's length in "
                "place of its epochs, so every variant of this sweep would train alike; drop max_steps, or sweep "
                "max_steps instead",
            )
        for settings in combos:
            training = {k: v for k, v in settings.items() if k in TRAINING_FIELDS}
            chosen = {k: v for k, v in settings.items() if k not in TRAINING_FIELDS}
            if "reduction_factor" in chosen:
                positive_number(chosen["reduction_factor"], f"{path}.reduction_factor")
            variant = dataclasses.replace(
                base,
                id=sweep_id(group if "reduction_factor" in settings else base.id, settings),
                options={**base.options, **chosen},
                training=checked_training({**base.training, **training}, base.setup, path),
                sweep={"group": group, "settings": dict(settings)},
            )
            out.append((i, variant, raw))
    return out


def _adapter_variant(i: int, variant: SetupVariant, entry: Mapping[str, Any], stage1: list[SetupVariant]) -> str:
    """The stage-1 variant a fusion fuses: its fused_setup (fusion-st-a: adapter_setup, default st-a) named by
    adapter_variant, or with adapter_reduction_factor (default: the only one, else 16), which must leave one: a sweep
    over another setting gives several variants of one reduction factor, and the first would be taken unasked."""
    adapter_setup = variant.fused_setup
    candidates = [v for v in stage1 if v.setup == adapter_setup]
    if not candidates:
        raise fail(
            f"setups[{i}]",
            f"{variant.setup} fuses {adapter_setup} adapters, but setups has no "
            f"{adapter_setup} entry; add '- {adapter_setup}' to setups",
        )
    ids = [c.id for c in candidates]
    if "adapter_variant" in entry:
        if entry["adapter_variant"] not in ids:
            raise fail(
                f"setups[{i}].adapter_variant",
                f"{entry['adapter_variant']!r} is not a {adapter_setup} variant of this experiment; choose one of "
                f"{ids}",
            )
        return str(entry["adapter_variant"])
    wanted = entry.get("adapter_reduction_factor")
    if wanted is None and len(candidates) == 1:
        return candidates[0].id
    rf = DEFAULT_REDUCTION_FACTOR if wanted is None else wanted
    matching = [c.id for c in candidates if c.options.get("reduction_factor") == rf]
    if len(matching) > 1:
        raise fail(
            f"setups[{i}]",
            f"{variant.setup} fuses one set of {adapter_setup} adapters, and {len(matching)} variants have reduction "
            f"factor {rf!r} ({', '.join(matching)}); name one with 'adapter_variant: <id>' in this entry",
        )
    if matching:
        return matching[0]
    have = [c.options.get("reduction_factor") for c in candidates]
    raise fail(
        f"setups[{i}].adapter_reduction_factor",
        f"no {adapter_setup} variant with reduction factor {rf!r}; the experiment trains {have}: "
        f"choose one, or add {rf!r} to that entry's reduction_factors",
    )


def fused_variants(entries: Sequence[Entry]) -> list[SetupVariant]:
    """The entries' variants, each fusion given the stage-1 variant it fuses (unless a record names it) and, without
    an `id` of its entry, an id that names those adapters when they are not the default ones."""
    stage1 = [variant for _, variant, _ in entries if variant.is_stage1]
    variants = [
        dataclasses.replace(variant, adapter_variant=_adapter_variant(i, variant, entry, stage1))
        if variant.is_fusion and variant.adapter_variant is None  # a record names it
        else variant
        for i, variant, entry in entries
    ]
    # A fusion's default id is its setup's name; name it after its adapters when it does not fuse st-a-rf16 (or,
    # for fusion-mt-a, the variant called mt-a).
    default_fused = {MULTITASK_FUSION: MT_A}
    variants = [
        dataclasses.replace(v, id=f"{v.setup}-{v.adapter_variant}")
        if v.is_fusion
        and "id" not in entry
        and v.adapter_variant != default_fused.get(v.setup, f"st-a-{_rf_label(DEFAULT_REDUCTION_FACTOR)}")
        else v
        for v, (_, _, entry) in zip(variants, entries, strict=True)
    ]
    ids = [v.id for v in variants]
    if len(set(ids)) != len(ids):
        dup = next(x for x in ids if ids.count(x) > 1)
        raise fail("setups", f"two fusion entries would both be called {dup!r}; give one of them an 'id'")
    for (i, _, _), variant in zip(entries, variants, strict=True):
        if variant.is_fusion:  # a fusion's id may be named after its adapters here; the others were checked
            _check_variant_id(variant.id, f"setups[{i}].id")
    repeat = first_repeat(ids)  # only in case now
    if repeat is not None:
        k, twin = repeat
        raise fail(f"setups[{entries[k][0]}].id", case_clash(ids[k], ids[twin], f"from setups[{entries[twin][0]}]"))
    return variants
