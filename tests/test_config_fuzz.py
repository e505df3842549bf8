"""Property-based: config loaders turn any JSON-like input into a valid config or our own error, never a
TypeError/KeyError from inside; a config that loads saves to JSON and loads back equal."""

from __future__ import annotations

import fractions
import json
import math
import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import adapterfusion as af
import adapterfusion.tasks
from adapterfusion.heads import head_config_from_dict
from adapterfusion.tasks import TaskSpec

# Deterministic in CI (a red build must be reproducible); FUZZ_EXAMPLES=5000 explores further locally.
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
fuzz = settings(max_examples=EXAMPLES, deadline=None, derandomize="FUZZ_EXAMPLES" not in os.environ)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 600) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _mutations(valid: dict) -> st.SearchStrategy:
    """Valid dicts with keys dropped, values replaced by random JSON, or unknown keys added."""
    keys = sorted(valid)
    return st.builds(
        lambda drop, replace, extra: {**{k: v for k, v in valid.items() if k not in drop}, **replace, **extra},
        st.sets(st.sampled_from(keys), max_size=3),
        st.dictionaries(st.sampled_from(keys), json_values, max_size=3),
        st.dictionaries(st.text(max_size=5), json_values, max_size=1),
    )


def _non_finite(valid: dict) -> st.SearchStrategy:
    """Valid dicts with one numeric value (bools aside) replaced by NaN or an infinity."""
    keys = sorted(k for k, v in valid.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
    return st.builds(
        lambda key, value: {**valid, key: value},
        st.sampled_from(keys),
        st.sampled_from([math.nan, math.inf, -math.inf]),
    )


def _scalars(value) -> list:
    """Every value that is not a dict or list inside `value`, at any depth."""
    if isinstance(value, dict):
        return [n for v in value.values() for n in _scalars(v)]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in _scalars(v)]
    return [value]


def _numbers(value) -> list[float]:
    return [n for n in _scalars(value) if isinstance(n, float)]


def _loads_or_refuses(loader, data) -> None:
    """A config that loads holds no NaN or infinity (they used to load without a word, e.g. "scaling": NaN), and
    round-trips: its to_dict() loads back to an equal config with the same to_dict(), and to_dict() is JSON (what
    the config files hold)."""
    try:
        config = loader(data)
    except af.AdapterFusionError:
        return
    saved = config.to_dict()
    assert all(math.isfinite(n) for n in _numbers(saved)), config
    again = loader(json.loads(json.dumps(saved, allow_nan=False)))
    assert again == config and again.to_dict() == saved, (config, again)


@fuzz
@given(
    st.one_of(
        json_values,
        _mutations(af.AdapterConfig.houlsby().to_dict()),
        _mutations(af.AdapterConfig.pfeiffer(reduction_factor={"default": 16, "2": 8}).to_dict()),
        _non_finite(af.AdapterConfig.houlsby().to_dict()),
    )
)
def test_adapter_config_loader(data) -> None:
    _loads_or_refuses(af.AdapterConfig.from_dict, data)


@fuzz
@given(
    st.one_of(
        json_values,
        _mutations(af.FusionConfig.dynamic(temperature=True).to_dict()),
        _non_finite(af.FusionConfig.dynamic(temperature=True).to_dict()),
    )
)
def test_fusion_config_loader(data) -> None:
    _loads_or_refuses(af.FusionConfig.from_dict, data)


@fuzz
@given(
    st.one_of(
        json_values,
        _mutations(af.ClassificationHead(num_labels=2, labels=("a", "b")).to_dict()),
        _mutations(af.MultipleChoiceHead().to_dict()),
        _non_finite(af.ClassificationHead(num_labels=2, labels=("a", "b")).to_dict()),
    )
)
def test_head_config_loader(data) -> None:
    _loads_or_refuses(head_config_from_dict, data)


@fuzz
@given(
    st.one_of(
        json_values,
        _mutations(af.tasks.get_task("rte").to_dict()),
        _mutations(af.tasks.get_task("commonsense_qa").to_dict()),
    )
)
def test_task_spec_loader(data) -> None:
    _loads_or_refuses(TaskSpec.from_dict, data)


@pytest.mark.parametrize(
    ("make", "plain"),
    [
        (
            lambda: af.FusionConfig.scalearn(scale_init=np.float32(2.0), scale_dropout=np.float64(0.25)),
            lambda: af.FusionConfig.scalearn(scale_init=2.0, scale_dropout=0.25),
        ),
        (
            lambda: af.FusionConfig.dynamic(
                regularization_weight=np.float32(0.5), temperature=np.bool_(True), temperature_steps=np.int64(7)
            ),
            lambda: af.FusionConfig.dynamic(regularization_weight=0.5, temperature=True, temperature_steps=7),
        ),
        (
            lambda: af.AdapterConfig.pfeiffer(
                scaling=np.float32(0.5), ln_before=np.bool_(True), init_std=torch.tensor(0.25), leave_out=[np.int64(1)]
            ),
            lambda: af.AdapterConfig.pfeiffer(scaling=0.5, ln_before=True, init_std=0.25, leave_out=[1]),
        ),
        (
            lambda: af.AdapterConfig.houlsby(
                skip_before_ln_after=torch.tensor(False), scaling=fractions.Fraction(1, 4)
            ),
            lambda: af.AdapterConfig.houlsby(skip_before_ln_after=False, scaling=0.25),
        ),
        (
            lambda: af.ClassificationHead(num_labels=np.int64(3), layers=torch.tensor(1), dropout=np.float32(0.5)),
            lambda: af.ClassificationHead(num_labels=3, layers=1, dropout=0.5),
        ),
    ],
)
def test_numpy_and_torch_scalars_become_plain_numbers(make, plain) -> None:
    """np.float32(2.0) passed every check and was kept as it was, so saving the config (save_fusion,
    save_pretrained) failed in json; np.bool_ was refused as 'type bool'. Each becomes the plain number or bool."""
    config, expected = make(), plain()
    assert config == expected and json.dumps(config.to_dict()) == json.dumps(expected.to_dict())
    assert all(type(v) in (bool, int, float, str, type(None)) for v in _scalars(config.to_dict()))


@pytest.mark.parametrize("value", [2**70, -(2**70)])
def test_an_integer_past_int64_in_a_float_option_is_that_float(value):
    """AdapterConfig(scaling=2**70) and FusionConfig(value_init_noise=2**70) were raw OverflowErrors in the first
    product with a tensor (torch takes a Python int as int64): the config keeps the float the value is."""
    from tiny_models import tiny_encoder

    adapter = af.AdapterConfig.pfeiffer(reduction_factor=4, scaling=value)
    assert adapter.scaling == float(value) and isinstance(adapter.scaling, float)
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", adapter)
    model.add_adapter("b", "pfeiffer")
    model.activate("a")
    assert model(input_ids=torch.tensor([[1, 2, 3]])).last_hidden_state.isfinite().all()  # up starts at zero
    if value > 0:  # past FusionConfig's limit: its V or its loss term would overflow (every logit NaN)
        with pytest.raises(af.ConfigError, match="value_init_noise"):
            af.FusionConfig.dynamic(value_init_noise=value)
        fusion = af.FusionConfig.dynamic(value_init_noise=2, regularization_weight=2)
        assert isinstance(fusion.value_init_noise, float) and isinstance(fusion.regularization_weight, float)
        model.add_fusion("f", ["a", "b"], fusion)
        assert af.FusionConfig.from_dict(fusion.to_dict()) == fusion


def test_messages_about_integers_past_pythons_digit_limit_are_still_made():
    """repr(10**5000) raises (Python refuses int -> str past 4300 digits), so a refusal whose message showed the value
    was a raw ValueError telling the user to call sys.set_int_max_str_digits(); short_repr describes it by size."""
    from adapterfusion._validation import short_repr
    from adapterfusion.serving import ServeConfig
    from adapterfusion.training import TrainingConfig
    from tiny_models import tiny_encoder

    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a")
    model.add_adapter("b")
    huge = 10**5000
    assert short_repr(huge) == "<an integer of about 5001 digits>" and short_repr(-huge).startswith("-<an integer")
    assert short_repr(list(range(10**6))).endswith("...]")  # a long container is cut before repr walks all of it
    # inside a container too (repr of the list raises as well), and an item whose repr fails
    assert short_repr(["a", [huge]]) == "['a', [<an integer of about 5001 digits>]]"
    assert short_repr({"w": huge}) == "{'w': <an integer of about 5001 digits>}"

    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    assert short_repr([1, Broken()]).startswith("[1, <Broken")
    for make in (
        lambda: af.ClassificationHead(num_labels=huge),
        lambda: af.AdapterConfig.pfeiffer(leave_out=huge),
        lambda: af.AdapterConfig.pfeiffer(positions=huge),
        lambda: TrainingConfig(bf16=huge),
        lambda: ServeConfig(max_inputs=huge),
        lambda: model.add_fusion("f", ["a", huge]),
        lambda: af.average_adapters(model, "c", ["a", "b"], weights=[huge, 1]),
        lambda: TaskSpec(name="t", kind="single", text_fields=("text",), label_names=("a", "b"), positive_label=huge),
    ):
        with pytest.raises(af.AdapterFusionError, match="an integer of about 5001 digits"):
            make()
