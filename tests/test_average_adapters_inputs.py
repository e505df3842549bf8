"""average_adapters (blocks.py) with unusual inputs: adapters cast by hand to other dtypes, weights that do not sum
to 1 or are negative, one adapter, and refusals that must leave the model holding exactly what it held.

The rule under test: the sum runs in float64 whatever each adapter's dtype, and the new adapter is cast once to the
encoder's dtype. Expected values are computed here element by element with math.fsum (an exactly rounded sum), not
with the code under test."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
import torch

import adapterfusion as af
from tiny_models import randomise, tiny_encoder
from tolerances import assert_close

CONFIG = af.AdapterConfig.pfeiffer(reduction_factor=4)


def _model(dtype: torch.dtype = torch.float64, names: str = "abc") -> af.AdaptedModel:
    """A tiny BERT in `dtype` with random adapters of one config, named by the letters of `names`."""
    model = af.wrap(tiny_encoder("bert").to(dtype))
    for name in names:
        model.add_adapter(name, CONFIG)
        with torch.no_grad():
            randomise(torch.nn.ModuleList(site.adapters[name] for site in model.sites_with_adapter(name)), std=0.3)
    return model


def _cast(model: af.AdaptedModel, name: str, **to: object) -> None:
    for site in model.sites_with_adapter(name):
        site.adapters[name].to(**to)


def _by_hand(site: Any, names: Sequence[str], weights: Sequence[float], key: str) -> torch.Tensor:
    """sum_i w_i * x_i per element in float64, exactly rounded (math.fsum), from the adapters as they are held."""
    values = [site.adapters[n].state_dict()[key].double().flatten().tolist() for n in names]
    flat = [math.fsum(w * column[i] for w, column in zip(weights, values, strict=True)) for i in range(len(values[0]))]
    return torch.tensor(flat, dtype=torch.float64).reshape(site.adapters[names[0]].state_dict()[key].shape)


def _contents(model: af.AdaptedModel) -> tuple:
    """What the model holds: its adapters' names, configs and every weight."""
    weights = {
        (site.key, name, key): value.clone()
        for site in model.sites
        for name in site.adapters
        for key, value in site.adapters[name].state_dict().items()
    }
    return list(model.adapter_names), dict(model.adapter_configs), weights


def _unchanged(before: tuple, after: tuple) -> bool:
    """Same names, configs and weights: bit for bit, NaN where NaN was, meta (no values) where meta was."""
    if before[:2] != after[:2] or before[2].keys() != after[2].keys():
        return False
    for key, old in before[2].items():
        new = after[2][key]
        if (old.is_meta, old.dtype, old.shape) != (new.is_meta, new.dtype, new.shape):
            return False
        if not old.is_meta and not torch.equal(old.nan_to_num(nan=7.0), new.nan_to_num(nan=7.0)):
            return False
    return True


@pytest.mark.parametrize(
    "weights, normalize, expected",
    [
        ([0.2, 0.3, 0.5], True, [0.2, 0.3, 0.5]),
        ([2.0, 3.0, 5.0], True, [0.2, 0.3, 0.5]),  # do not sum to 1: scaled
        ([2.0, 3.0, 5.0], False, [2.0, 3.0, 5.0]),  # kept as given (task arithmetic)
        ([1.5, -0.25, -0.25], True, [1.5, -0.25, -0.25]),  # negative: extrapolation, allowed
    ],
)
def test_the_average_in_float64_is_the_hand_computed_sum(weights, normalize, expected):
    model = _model()
    model.average_adapters("avg", ["a", "b", "c"], weights=weights, normalize_weights=normalize)
    for site in model.sites_with_adapter("avg"):
        for key, value in site.adapters["avg"].state_dict().items():
            assert value.dtype == torch.float64
            assert_close(value, _by_hand(site, "abc", expected, key), label=f"{site.key} {key}")


def test_adapters_of_mixed_dtypes_are_summed_in_float64_and_cast_once_to_the_encoders_dtype():
    """a float32, b bfloat16, c float64 in a float32 encoder: the result is float32 and equals the float64 sum
    rounded once (the old sum multiplied b by its weight in bfloat16: off by ~4e-4). The sources keep their dtypes."""
    model = _model(torch.float32)
    _cast(model, "b", dtype=torch.bfloat16)
    _cast(model, "c", dtype=torch.float64)
    model.average_adapters("avg", {"a": 0.2, "b": 0.3, "c": 0.5})
    site = model.sites_with_adapter("avg")[0]
    assert site.adapters["b"].up.weight.dtype == torch.bfloat16 and site.adapters["c"].up.weight.dtype == torch.float64
    for site in model.sites_with_adapter("avg"):
        for key, value in site.adapters["avg"].state_dict().items():
            assert value.dtype == torch.float32
            assert torch.equal(value, _by_hand(site, "abc", [0.2, 0.3, 0.5], key).float()), key
    assert "adapter 'avg'" not in model.pieces_of_other_dtype()


def test_dyadic_weights_over_bfloat16_adapters_are_exact():
    """bfloat16 values times 1/4 and 3/4 are exact in float64, so a float64 encoder's average equals the hand sum."""
    model = _model(names="ab")
    _cast(model, "a", dtype=torch.bfloat16)
    _cast(model, "b", dtype=torch.bfloat16)
    model.average_adapters("avg", ["a", "b"], weights=[1, 3])
    for site in model.sites_with_adapter("avg"):
        for key, value in site.adapters["avg"].state_dict().items():
            assert torch.equal(value, _by_hand(site, "ab", [0.25, 0.75], key)), key


def test_one_adapter_is_copied_in_the_encoders_dtype():
    model = _model(torch.float32, names="a")
    _cast(model, "a", dtype=torch.float64)
    model.average_adapters("copy", ["a"])
    for site in model.sites_with_adapter("copy"):
        for key, value in site.adapters["copy"].state_dict().items():
            assert value.dtype == torch.float32 and torch.equal(value, site.adapters["a"].state_dict()[key].float())


def _meta(model: af.AdaptedModel) -> None:
    _cast(model, "b", device="meta")


def _nan(model: af.AdaptedModel) -> None:
    with torch.no_grad():
        model.sites_with_adapter("c")[-1].adapters["c"].up.bias[3] = float("nan")


def _huge(model: af.AdaptedModel) -> None:
    _cast(model, "c", dtype=torch.float64)
    with torch.no_grad():
        model.sites_with_adapter("c")[0].adapters["c"].down.weight[0, 0] = 1e300


@pytest.mark.parametrize(
    "spoil, call, words",
    [
        (None, dict(adapters=[]), "name at least one"),
        # a set's order follows string hashing: which adapter got which weight changed from run to run
        (None, dict(adapters={"a", "b"}, weights=[0.9, 0.1]), "is a set, whose order is not fixed"),
        (None, dict(adapters=frozenset("ab")), "is a frozenset, whose order is not fixed"),
        (None, dict(adapters=["a", "b"], weights=[float("nan"), 1.0]), "one finite number per adapter"),
        (None, dict(adapters=["a", "b"], weights=[1.0, -1.0]), "sum to 0"),
        (None, dict(adapters=["a", "b"], name="c"), "an adapter named 'c' already exists"),
        (None, dict(adapters=["a", "zz"]), "zz"),
        (None, dict(adapters=["a", "b"], name="has.dot"), "has.dot"),
        (_meta, dict(adapters=["a", "b"]), "adapter 'b' is on the meta device"),
        (_nan, dict(adapters=["a", "c"]), "adapter 'c' holds 1 NaN or infinite value(s) in up.bias"),
        (_huge, dict(adapters=["a", "c"]), "overflows the encoder's float32"),
    ],
)
def test_refusals_leave_the_model_as_it_was(spoil, call, words):
    model = _model(torch.float32)
    if spoil is not None:
        spoil(model)
    before = _contents(model)
    name = call.pop("name", "avg")
    with pytest.raises(af.AdapterFusionError) as refused:
        model.average_adapters(name, **call)
    assert words in str(refused.value)
    assert _unchanged(before, _contents(model))


def test_overwriting_an_existing_name_replaces_it_only_when_the_average_succeeds():
    model = _model(torch.float32, names="abcd")
    _nan(model)
    before = _contents(model)
    with pytest.raises(af.ConfigError, match="NaN"):
        model.average_adapters("d", ["a", "c"], overwrite=True)
    assert _unchanged(before, _contents(model))
    model.average_adapters("d", ["a", "b"], overwrite=True)
    site = model.sites_with_adapter("d")[0]
    assert torch.equal(site.adapters["d"].up.weight, _by_hand(site, "ab", [0.5, 0.5], "up.weight").float())
