"""Sweeps in an experiment file: a setup entry's `sweep` lists several values of any training setting or setup
option and expands into one variant per combination; the top-level `select` names groups of those variants, of which
the report keeps, per task and seed, the one with the best dev score (experiments/selection.py).

    setups:
      - name: st-a-houlsby
        sweep: {reduction_factor: [96, 12, 3], learning_rate: [3.0e-5, 3.0e-4, 3.0e-3], epochs: [3, 20]}
    select:
      Adapters (8-256): st-a-houlsby                                 # every variant of that sweep
      Adapters (64): {sweep: st-a-houlsby, reduction_factor: 12}     # those with one setting fixed

Variant ids are `<entry id or setup>[-rf<R>]-<key><value>...` in a fixed key order (reduction factor, learning rate,
epochs, then the others by name), e.g. `st-a-houlsby-rf12-lr3e-4-ep20`: the same file always gives the same ids,
and an id says its settings. Values are written short: 3e-4, not 0.0003.

A sweep's name (its entry's id or setup name) is its own: `select` and `analyses` read every variant of that name.
Settings that change how a run is logged, kept or computed but not what it trains (logging_steps, ...) are not
swept: their variants would train the same model. One entry expands into at most MAX_SWEEP_VARIANTS variants,
counted before any is made.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.experiments.spec_checks import fail, number_as_text
from adapterfusion.training.resume import FREE_ON_RESUME

SWEEP_KEY = "sweep"
SELECT_KEY = "select"
_ORDER = ("reduction_factor", "learning_rate", "epochs")  # the keys whose values lead a variant id, in this order
_LABELS = {"reduction_factor": "rf", "learning_rate": "lr", "epochs": "ep"}
MAX_JOBS_WITHOUT_CONFIRMATION = 1000
MAX_SWEEP_VARIANTS = 10_000  # one entry's combinations: ~10 s to expand and check; every one is a job per task and seed
_TABLE_BREAKERS = ("|", "\n", "\r")  # a select row's name in a Markdown table cell


def number_text(value: Any) -> str:
    """A setting's value as a variant id writes it: 3e-4, 2.5e-5, 1e-2, 16, 0.5, true."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value != 0 and (abs(value) < 0.1 or abs(value) >= 1e5):
        mantissa, exponent = f"{value:.6e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def setting_label(key: str, value: Any) -> str:
    """One swept setting in a variant id: rf12, lr3e-4, ep20, warmup_ratio0_1 ('.' and '+' become '_')."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{_LABELS.get(key, key)}{number_text(value)}")


def ordered_keys(settings: Iterable[str]) -> list[str]:
    """Swept keys in the order ids write them: reduction factor, learning rate, epochs, then the others by name."""
    return sorted(settings, key=lambda k: (_ORDER.index(k) if k in _ORDER else len(_ORDER), k))


def sweep_combinations(raw: Any, allowed: Sequence[str], given: Mapping[str, Any], path: str) -> list[dict[str, Any]]:
    """The settings of each variant a `sweep` mapping expands into, in a stable order (the first key varies
    slowest). `allowed`: the keys this setup can sweep; `given`: the entry's other keys, which must not set a swept
    key too."""
    if not isinstance(raw, Mapping) or not raw:
        raise fail(path, f"must map settings to lists of values, e.g. {{learning_rate: [3.0e-4, 3.0e-3]}}; got {raw!r}")
    for key in raw:  # YAML reads `1:` or `null:` as a number or None, which cannot be ordered among names
        if not isinstance(key, str) or key not in allowed:
            shown = [k for k in allowed if k not in FREE_ON_RESUME]
            full = {label: name for name, label in _LABELS.items()}.get(key)  # as variant ids write it: lr3e-4
            hint = f" ({key!r} is how variant ids write {full}: sweep {full})" if full in shown else ""
            raise fail(f"{path}.{key}", f"cannot be swept here{hint}; sweepable keys: {', '.join(shown)}")
        if key in FREE_ON_RESUME:
            raise fail(
                f"{path}.{key}",
                "changes how a run is logged, kept or computed, not what it trains, so each of its variants would "
                f"train the same model; set {key} in the entry or in `training` instead",
            )
    keys = ordered_keys(raw)
    for key in keys:
        if key in given:
            raise fail(f"{path}.{key}", f"is set by the entry too ({key}: {given[key]!r}); give it in one place")
        values = raw[key]
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise fail(f"{path}.{key}", f"must be a non-empty list of values, got {values!r}")
        first: dict[str, int] = {}  # each value's label in a variant id -> the first value written so
        for i, value in enumerate(values):
            label = setting_label(key, value)
            j = first.setdefault(label, i)
            if j != i and same_setting(values[j], value):
                raise fail(f"{path}.{key}[{i}]", f"{value!r} repeats {values[j]!r}")
            if j != i:
                raise fail(
                    f"{path}.{key}[{i}]",
                    f"{value!r} and {values[j]!r} would both name their variants '{label}' (ids write a number to 7 "
                    "significant digits, and a '.' or '+' as '_'); sweep values that differ there",
                )
    count = math.prod(len(raw[k]) for k in keys)
    if count > MAX_SWEEP_VARIANTS:  # counted before they are made: tens of millions took hours to expand and check
        sizes = " × ".join(f"{len(raw[k])} {k}" for k in keys)
        raise fail(
            path,
            f"expands into {count:,} variants ({sizes}), more than the {MAX_SWEEP_VARIANTS:,} a sweep may have; sweep "
            f"fewer values (an experiment of more than {MAX_JOBS_WITHOUT_CONFIRMATION:,} jobs already needs --yes)",
        )
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(list(raw[k]) for k in keys))]


def sweep_id(base: str, settings: Mapping[str, Any]) -> str:
    """The id of one swept variant: the base, then each swept setting in the sweep's key order."""
    return "-".join([base, *(setting_label(k, v) for k, v in settings.items())])


def parse_select(raw: Any, variants: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """`select`: row name -> {"sweep": group, <swept key>: fixed value, ...}, checked against the variants' sweeps
    (each variant's `sweep` record: {"group", "settings"}). A plain string names a whole group."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not raw:
        raise fail(SELECT_KEY, f"must map a row name to a sweep (its entry's id or setup name); got {raw!r}")
    groups: dict[str, list[dict[str, Any]]] = {}
    for variant in variants:
        if variant.sweep is not None:
            groups.setdefault(variant.sweep["group"], []).append(variant.sweep["settings"])
    out: dict[str, dict[str, Any]] = {}
    for name, rule in raw.items():
        path = f"{SELECT_KEY}.{name}"
        if not isinstance(name, str) or not name.strip():
            raise fail(path, "a row name must be non-empty text")
        if any(mark in name for mark in _TABLE_BREAKERS):
            raise fail(
                path,
                f"a row name is a cell of report/tables.md, where '|' and line breaks would break the table; got "
                f"{name!r}: rename the row",
            )
        rule = {SWEEP_KEY: rule} if isinstance(rule, str) else rule
        if not isinstance(rule, Mapping) or SWEEP_KEY not in rule:
            raise fail(path, f"must be a sweep's name or a mapping with 'sweep' (and settings to fix); got {rule!r}")
        group = rule[SWEEP_KEY]
        if not isinstance(group, str) or group not in groups:
            hint = _variant_hint(group, variants)
            raise fail(
                f"{path}.sweep", f"no sweep called {group!r}; the experiment's sweeps are {sorted(groups)}{hint}"
            )
        fixed = {k: v for k, v in rule.items() if k != SWEEP_KEY}
        swept = groups[group][0]
        for key, value in fixed.items():
            if key not in swept:
                raise fail(f"{path}.{key}", f"is not swept by {group!r}; it sweeps {list(swept)}")
            if not any(same_setting(settings[key], value) for settings in groups[group]):
                choices = list(dict.fromkeys(settings[key] for settings in groups[group]))
                raise fail(
                    f"{path}.{key}", f"{value!r} is not one of the swept values {choices}{number_as_text(value)}"
                )
        out[name] = {SWEEP_KEY: group, **fixed}
    return out


def _variant_hint(name: Any, variants: Sequence[Any]) -> str:
    """What a `select` rule naming a setup variant, not a sweep, means to say: a row chooses among a sweep's
    variants, so one variant is that sweep with every setting fixed."""
    variant = next((v for v in variants if isinstance(name, str) and v.id == name), None)
    if variant is None:
        return ""
    if variant.sweep is None:
        return f"; {name!r} is a setup variant with no sweep, and a row chooses among a sweep's variants"
    rule = ", ".join(
        [f"sweep: {variant.sweep['group']}", *(f"{k}: {v!r}" for k, v in variant.sweep["settings"].items())]
    )
    return f"; {name!r} is one variant of sweep {variant.sweep['group']!r}: to report it alone, write {{{rule}}}"


def same_setting(swept: Any, fixed: Any) -> bool:
    """A fixed value of a `select` rule matches a swept one: equal, and a switch only a switch (True == 1 in Python,
    but `epochs: true` names no variant of `epochs: [1, 2]`)."""
    return isinstance(swept, bool) == isinstance(fixed, bool) and swept == fixed


def check_job_count(count: int, yes: bool) -> None:
    """More than MAX_JOBS_WITHOUT_CONFIRMATION jobs run only when confirmed (`--yes`): a sweep multiplies quickly."""
    if count > MAX_JOBS_WITHOUT_CONFIRMATION and not yes:
        raise ExperimentSpecError(
            f"the experiment plans {count} jobs, more than {MAX_JOBS_WITHOUT_CONFIRMATION}; check the sweep with "
            "`adapterfusion plan`, then run it with --yes to confirm"
        )
