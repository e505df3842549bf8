"""Fusion training on a random subset of adapters per step (training/adapter_subsets.py): the draw always holds
the target's adapter and is a pure function of (seed, step); each training step sees exactly the drawn subset
while evaluation sees every adapter; bad sizes are clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adapterfusion.fusion.config import FusionConfig, FusionSetup
from adapterfusion.training import AdapterStore, TrainingError, train
from adapterfusion.training.adapter_subsets import AdapterSubsetCallback, check_subset_size, draw_subset

NAMES = ("mnli", "sst2", "sick", "rte", "cb", "mrpc")


def test_draws_keep_the_target_differ_by_step_and_repeat_for_the_same_seed_and_step():
    draws = [draw_subset(NAMES, 3, ["rte"], seed=1, step=step) for step in range(200)]
    assert all(len(d) == 3 and "rte" in d and d == [n for n in NAMES if n in d] for d in draws)
    assert len({tuple(d) for d in draws}) == 10  # all C(5, 2) pairs of the others turn up
    assert draws == [draw_subset(NAMES, 3, ["rte"], seed=1, step=step) for step in range(200)]
    assert draws != [draw_subset(NAMES, 3, ["rte"], seed=2, step=step) for step in range(200)]


@pytest.mark.parametrize("size", [0, 7, 2.5, True, "3"])
def test_bad_subset_sizes_are_clear_errors(size):
    with pytest.raises(TrainingError, match="adapter_subset=.*whole number from 1 to the 6 fused adapters"):
        check_subset_size(size, NAMES)


def test_a_subset_of_all_adapters_is_no_subset():
    assert check_subset_size(None, NAMES) is None and check_subset_size(6, NAMES) is None
    assert check_subset_size(2, NAMES) == 2


@pytest.mark.slow
def test_training_steps_see_the_drawn_subset_and_evaluation_sees_all(
    tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch
):
    store = AdapterStore(tmp_path / "store")
    sources = ["sst2", "sick", "mnli"]
    for task in ["rte", *sources]:
        train(
            task,
            "st-a",
            seed=1,
            encoder=tiny_encoder_dir,
            data_dir=demo_data_dir,
            output_dir=tmp_path / "stage1",
            store=store,
            training_config={"max_steps": 1, "batch_size": 4, "max_length": 32},
            max_examples={"train": 8, "validation": 8},
        )
    seen = []
    real_forward = None

    def recording_forward(self, *args, **kwargs):
        site = next(iter(self.sites_with_fusion("fusion_rte")))
        kept = site.state.fusion_masks.get("fusion_rte")
        seen.append((self.training, None if kept is None else list(kept)))
        return real_forward(self, *args, **kwargs)

    import adapterfusion.model as model_module

    real_forward = model_module.AdaptedModel.forward
    monkeypatch.setattr(model_module.AdaptedModel, "forward", recording_forward)
    result = train(
        "rte",
        "fusion-st-a",
        seed=5,
        encoder=tiny_encoder_dir,
        data_dir=demo_data_dir,
        output_dir=tmp_path / "stage2",
        store=store,
        training_config={"epochs": 2, "batch_size": 4, "max_length": 32, "patience": None},
        max_examples={"train": 16, "validation": 8},
        setup_options={"sources": sources, "adapter_subset": 2, "adapter_seed": 1},
    )
    names = ("sst2", "sick", "mnli", "rte")
    training = [kept for is_training, kept in seen if is_training]
    evaluation = [kept for is_training, kept in seen if not is_training]
    assert len(training) == 8  # 16 examples, batch 4, 2 epochs
    assert training == [draw_subset(names, 2, ["rte"], seed=5, step=step) for step in range(8)]
    assert evaluation and all(kept is None for kept in evaluation)
    config = json.loads((result.run_dir / "config.json").read_text())
    assert config["setup_options"]["adapter_subset"] == 2
    assert any("fuses 2 of the 4 adapters" in note for note in config["plan_notes"])


def test_callback_clears_the_mask_when_training_ends():
    class Model:
        mask = "unset"

        def fusion_setup(self, name):
            return FusionSetup(FusionConfig(), NAMES)

        def set_fusion_mask(self, fusion, keep):
            self.mask = keep

    model = Model()
    callback = AdapterSubsetCallback(model, "f", 2, ["rte"], seed=1)
    state = type("State", (), {"global_step": 3})()
    callback.on_step_begin(None, state, None)
    assert model.mask == draw_subset(NAMES, 2, ["rte"], 1, 3)
    callback.on_train_end(None, state, None)
    assert model.mask is None


def test_adapters_always_drawn_must_be_fused_and_fit_the_subset():
    """One not fused was dropped from every draw (each step fused fewer than `size`); more than `size` failed in
    random.sample at the first step. A numpy integer size is a whole number."""
    with pytest.raises(TrainingError, match=r"always include \['zz'\], which names \['zz'\], not fused by it"):
        draw_subset(NAMES, 3, ["zz"], seed=1, step=0)
    with pytest.raises(TrainingError, match="is not 2 or fewer distinct names"):
        draw_subset(NAMES, 2, ["rte", "cb", "sst2"], seed=1, step=0)
    with pytest.raises(TrainingError, match="adapter_subset=9"):
        draw_subset(NAMES, 9, ["rte"], seed=1, step=0)
    assert check_subset_size(np.int64(2), NAMES) == 2
