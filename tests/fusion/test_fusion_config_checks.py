"""FusionConfig refuses settings that would be ignored or overflow, and still loads the configs saved before it did."""

from __future__ import annotations

import json

import pytest

import adapterfusion as af
from tiny_models import tiny_encoder


@pytest.mark.parametrize(
    "settings",
    [
        {"temperature_steps": 20},
        {"temperature_start": 10.0},
        {"value": False, "value_init_noise": 0.1},
        {"regularization": False, "regularization_weight": 0.5},
    ],
)
def test_an_option_its_switch_leaves_without_effect_is_refused(settings):
    with pytest.raises(af.ConfigError, match="has no effect with .*=False"):
        af.FusionConfig(**settings)
    with pytest.raises(af.ConfigError, match="has no effect"):  # a dict from setup options or an experiment file
        af.FusionConfig.from_dict(settings)


def test_a_saved_config_with_an_ignored_option_still_loads_as_what_it_computed(tmp_path):
    """A fusion_config.json written before the check (it has format_version) loads with the no-op option at its
    default: the fusion computes what it computed when it was saved."""
    model = af.wrap(tiny_encoder("bert"))
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_fusion("f", ["a", "b"], af.FusionConfig.static())
    path = model.save_fusion("f", tmp_path / "f")
    config_file = path / "fusion_config.json"
    document = json.loads(config_file.read_text())
    document["config"].update(value_init_noise=0.5, temperature_steps=7)
    config_file.write_text(json.dumps(document))
    model.delete_fusion("f")
    model.load_fusion(path)
    assert model.fusion_setup("f").config == af.FusionConfig.static()


@pytest.mark.parametrize("field", ["value_init_noise", "regularization_weight"])
def test_values_that_overflow_the_fusion_are_refused(field):
    with pytest.raises(af.ConfigError, match=rf"{field}=1e\+30 must be a number in \[0, 10000\)"):
        af.FusionConfig(**{field: 1e30})


def test_temperature_start_below_one_and_steps_past_any_float():
    with pytest.raises(af.ConfigError, match="temperature_start=0.5 must be a number >= 1"):
        af.FusionConfig(temperature=True, temperature_start=0.5)
    config = af.FusionConfig(temperature=True, temperature_start=3.0, temperature_steps=4)
    assert [config.temperature_at(step) for step in (0, 2, 4, 10**400)] == [3.0, 1.5, 1.0, 1.0]
    for step in (-1, 1.5, "2", True):
        with pytest.raises(af.ConfigError, match="fusion step"):
            config.temperature_at(step)
