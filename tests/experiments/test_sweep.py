"""Sweeps in experiment files (issue #27): lists of learning_rate / epochs / adapter size expand into one variant per
combination with stable, readable ids; `select` rules are checked; the job count shows before a run and more than
1,000 jobs need --yes; experiment files without a sweep keep their spec hash."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from adapterfusion.cli import main
from adapterfusion.experiments import ExperimentSpec, plan_jobs
from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.experiments.plan import jobs_per_variant
from adapterfusion.experiments.sweep import MAX_JOBS_WITHOUT_CONFIRMATION, number_text, setting_label, sweep_id

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HOULSBY_SWEEP = {"reduction_factor": [96, 12, 3], "learning_rate": [3.0e-5, 3.0e-4, 3.0e-3], "epochs": [3, 20]}


def _spec(setups, tasks=("rte", "cb"), **extra) -> ExperimentSpec:
    return ExperimentSpec.from_dict({"name": "sweep", "tasks": list(tasks), "setups": setups, **extra})


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (3e-4, "3e-4"),
        (3.0e-5, "3e-5"),
        (2.5e-5, "2.5e-5"),
        (16, "16"),
        (0.5, "0.5"),
        (1e-2, "1e-2"),
        (0.05, "5e-2"),
        (0.1, "0.1"),
        (True, "true"),
    ],
)
def test_values_are_written_short(value, text):
    assert number_text(value) == text


def test_a_sweep_expands_into_one_variant_per_combination_with_readable_ids():
    spec = _spec([{"name": "st-a-houlsby", "batch_size": 8, "sweep": HOULSBY_SWEEP}], seeds=[1, 2])
    assert len(spec.variants) == 18
    expected = [
        f"st-a-houlsby-rf{rf}-lr{lr}-ep{ep}"
        for rf, lr, ep in itertools.product(["96", "12", "3"], ["3e-5", "3e-4", "3e-3"], ["3", "20"])
    ]
    assert [v.id for v in spec.variants] == expected
    first = spec.variants[0]
    assert first.options["reduction_factor"] == 96
    assert first.training == {"batch_size": 8, "epochs": 3, "learning_rate": 3.0e-5}
    assert first.sweep == {
        "group": "st-a-houlsby",
        "settings": {"reduction_factor": 96, "learning_rate": 3.0e-5, "epochs": 3},
    }
    jobs = plan_jobs(spec)
    assert len(jobs) == 18 * 2 * 2 and set(jobs_per_variant(jobs).values()) == {4}
    written_order = _spec([{"name": "st-a-houlsby", "sweep": dict(reversed(list(HOULSBY_SWEEP.items())))}])
    assert [v.id for v in written_order.variants] == expected  # the key order is fixed, not the file's


def test_sweep_of_a_setup_without_reduction_factor_and_an_entry_id():
    spec = _spec(
        [
            {"name": "full", "id": "ft", "sweep": {"learning_rate": [2e-5, 5e-5]}},
            {"name": "st-a", "reduction_factors": [16, 64], "sweep": {"warmup_ratio": [0.0, 0.1]}},
        ]
    )
    assert [v.id for v in spec.variants] == [
        "ft-lr2e-5",
        "ft-lr5e-5",
        "st-a-rf16-warmup_ratio0",
        "st-a-rf16-warmup_ratio0_1",
        "st-a-rf64-warmup_ratio0",
        "st-a-rf64-warmup_ratio0_1",
    ]
    assert spec.variants[0].sweep["group"] == "ft" and spec.variants[2].sweep["group"] == "st-a"
    assert sweep_id("x", {"learning_rate": 1e-3}) == "x-lr1e-3" and setting_label("epochs", 20) == "ep20"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "full", "sweep": {"reduction_factor": [2, 4]}}, r"setups\[0\].sweep.reduction_factor: cannot be"),
        ({"name": "st-a", "sweep": {"learning_rate": []}}, "must be a non-empty list"),
        ({"name": "st-a", "sweep": {"learning_rate": [1e-3, 0.001]}}, r"learning_rate\[1\]: 0.001 repeats 0.001"),
        ({"name": "st-a", "learning_rate": 1e-3, "sweep": {"learning_rate": [1e-4]}}, "is set by the entry too"),
        ({"name": "st-a", "reduction_factors": [2], "sweep": {"reduction_factor": [4]}}, "give it in one place"),
        ({"name": "st-a", "sweep": {"epochs": [0, 3]}}, r"setups\[0\].sweep.*epochs"),
        ({"name": "st-a", "sweep": {"reduction_factor": [-1]}}, "must be a positive number"),
        ({"name": "st-a", "sweep": [1e-3]}, "must map settings to lists of values"),
        ({"name": "fusion-st-a", "sweep": {"learning_rate": [1e-3]}}, "unknown key"),
        ({"name": "st-a", "sweep": {1: [1, 2], "epochs": [1, 2]}}, r"sweep.1: cannot be swept here"),
        ({"name": "st-a", "sweep": {"report_to": ["none", "tensorboard"]}}, "not what it trains"),
        ({"name": "st-a", "sweep": {"lr": [1e-3, 1e-2]}}, "'lr' is how variant ids write learning_rate"),
    ],
)
def test_bad_sweeps_name_the_key(entry, message):
    setups = [entry] if entry["name"] != "fusion-st-a" else ["st-a", entry]
    with pytest.raises(ExperimentSpecError, match=message):
        _spec(setups)


def test_select_rules_are_checked_and_leave_the_spec_hash_alone():
    setups = [{"name": "st-a-houlsby", "sweep": HOULSBY_SWEEP}, {"name": "full", "sweep": {"learning_rate": [2e-5]}}]
    select = {"Adapters (8-256)": "st-a-houlsby", "Adapters (64)": {"sweep": "st-a-houlsby", "reduction_factor": 12}}
    spec = _spec(setups, select=select)
    assert spec.select == {
        "Adapters (8-256)": {"sweep": "st-a-houlsby"},
        "Adapters (64)": {"sweep": "st-a-houlsby", "reduction_factor": 12},
    }
    assert spec.spec_hash() == _spec(setups).spec_hash()  # a report option: adding it re-runs nothing
    assert spec.to_dict()["select"] == [{"name": name, **rule} for name, rule in spec.select.items()]  # in order
    for bad, message in [
        ({"x": "nope"}, r"select.x.sweep: no sweep called 'nope'.*\['full', 'st-a-houlsby'\]"),
        ({"x": {"sweep": "full", "epochs": 3}}, r"select.x.epochs: is not swept by 'full'"),
        ({"x": {"sweep": "st-a-houlsby", "reduction_factor": 7}}, r"7 is not one of the swept values \[96, 12, 3\]"),
        ({"x": {"reduction_factor": 12}}, "mapping with 'sweep'"),
        ([], "must map a row name"),
        ({"x": {"sweep": ["full"]}}, r"no sweep called \['full'\]"),
        ({"x": {"sweep": "st-a-houlsby", "epochs": True}}, r"True is not one of the swept values \[3, 20\]"),
        ({"a|b": "full"}, "would break the table"),
        (
            {"x": "st-a-houlsby-rf12-lr3e-5-ep3"},
            r"write \{sweep: st-a-houlsby, reduction_factor: 12, learning_rate: 3e-05, epochs: 3\}",
        ),
    ]:
        with pytest.raises(ExperimentSpecError, match=message):
            _spec(setups, select=bad)


# The spec hashes of the example files before sweeps existed (computed at the commit before issue #27's): an output
# dir records its spec's hash, so a changed hash would make every existing results folder refuse its own file.
HASHES_BEFORE_SWEEPS = {
    "decoder-smollm2": "bc1688b27d6ddc3e",
    "minilm-rte-cb": "fe848c22910e2cb1",
    "paper-minilm-quick": "d830704bd7ec4499",
    "paper-minilm-subset": "07c23ce3c8c31f9f",
    "paper-minilm": "dfca57b350edfc24",
    "paper-small": "812c0ca68d2b9136",
    "zoo-minilm": "f181ffb141d163fb",
}


@pytest.mark.parametrize("name", sorted(HASHES_BEFORE_SWEEPS))
def test_experiment_files_without_a_sweep_keep_their_hash_and_variants(name):
    spec = ExperimentSpec.load(EXAMPLES / f"{name}.yaml")
    assert spec.spec_hash() == HASHES_BEFORE_SWEEPS[name]
    assert all("sweep" not in v for v in spec.to_dict()["variants"])
    assert "select" not in spec.to_dict() and "task_specs" not in spec.to_dict()
    if name == "paper-minilm":  # the README's main job: also what its committed results folder recorded
        recorded = json.loads((EXAMPLES / "results" / name / "experiment.json").read_text())
        assert spec.spec_hash() == recorded["spec_hash"]


def test_plan_shows_the_job_count_and_run_wants_yes_above_1000(tmp_path, capsys):
    small = tmp_path / "small.json"
    small.write_text(
        json.dumps({"name": "small", "tasks": ["rte"], "setups": [{"name": "st-a", "sweep": {"epochs": [1, 2]}}]})
    )
    assert main(["plan", str(small)]) == 0
    out = capsys.readouterr().out
    assert "st-a-rf16-ep1  1" in out and "2 jobs: 1 tasks, 2 setup variants, 1 seeds" in out
    limited = tmp_path / "limited.json"  # a setup limited to one task: 3 jobs, not the grid's 2 x 2 x 1
    limited.write_text(
        json.dumps({"name": "l", "tasks": ["rte", "cb"], "setups": ["st-a", {"name": "head", "tasks": ["cb"]}]})
    )
    assert main(["plan", str(limited)]) == 0
    assert "3 jobs: 2 tasks, 2 setup variants, 1 seeds (setups limited to some of the tasks)" in capsys.readouterr().out
    big = tmp_path / "big.json"
    seeds = list(range(1, 21))
    sweep = {**HOULSBY_SWEEP, "warmup_ratio": [0.0, 0.1]}  # 36 variants x 2 tasks x 20 seeds = 1,440 jobs
    big.write_text(
        json.dumps(
            {
                "name": "big",
                "tasks": ["rte", "cb"],
                "seeds": seeds,
                "output_dir": str(tmp_path / "out"),
                "setups": [{"name": "st-a", "sweep": sweep}],
            }
        )
    )
    assert main(["plan", str(big)]) == 0
    out = capsys.readouterr().out
    assert "1440 jobs" in out and f"more than {MAX_JOBS_WITHOUT_CONFIRMATION} jobs" in out and "--yes" in out
    assert main(["run", str(big), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "1440 jobs, more than 1000" in err and "--yes" in err
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_houlsby_glue_example_job_count():
    spec = ExperimentSpec.load(EXAMPLES / "houlsby-glue.yaml")
    jobs = plan_jobs(spec)
    adapters = [v for v in spec.variants if v.setup == "st-a-houlsby"]
    assert len(adapters) == 18  # sizes {8, 64, 256} x learning rates {3e-5, 3e-4, 3e-3} x epochs {3, 20}
    assert len(spec.tasks) == 8 and "mnli" in spec.tasks and "wnli" not in spec.tasks
    assert len(jobs) == len(spec.variants) * len(spec.tasks) * len(spec.seeds)
    assert set(spec.select) == {"Full fine-tuning", "Adapters (8-256)", "Adapters (64)"}
    assert spec.select["Adapters (64)"]["reduction_factor"] == 12  # 768 / 64
    assert len(jobs) <= MAX_JOBS_WITHOUT_CONFIRMATION


def test_a_fusion_of_a_swept_stage1_names_the_variant_it_fuses():
    """Several st-a variants of reduction factor 16 (a learning-rate sweep): the first was fused, unasked."""
    swept = {"name": "st-a", "sweep": {"learning_rate": [1e-3, 2e-3]}}
    with pytest.raises(ExperimentSpecError, match=r"2 variants have reduction factor 16 .*'adapter_variant: <id>'"):
        _spec([swept, "fusion-st-a"])
    spec = _spec([swept, {"name": "fusion-st-a", "adapter_variant": "st-a-rf16-lr2e-3"}])
    assert spec.variants[-1].adapter_variant == "st-a-rf16-lr2e-3"
    assert spec.variants[-1].id == "fusion-st-a-st-a-rf16-lr2e-3"
    both = {"name": "fusion-st-a", "adapter_variant": "st-a-rf16-lr2e-3", "adapter_reduction_factor": 16}
    with pytest.raises(ExperimentSpecError, match="drop adapter_reduction_factor"):
        _spec([swept, both])


def test_two_entries_cannot_share_a_sweep_name():
    setups = [
        {"name": "st-a", "sweep": {"init_std": [1e-3, 1e-2]}},
        {"name": "st-a", "reduction_factors": [8], **{"sweep": {"learning_rate": [1e-3, 2e-3]}}},
    ]
    with pytest.raises(ExperimentSpecError, match=r"setups\[1\].sweep: is called 'st-a'"):
        _spec(setups)
    setups[1]["id"] = "other"
    assert {v.sweep["group"] for v in _spec(setups).variants} == {"st-a", "other"}


def test_a_sweep_undone_on_one_task_is_refused():
    """task_training is applied last, and max_steps sets a run's length in place of its epochs: either made every
    variant of a sweep train alike, under ids that name other settings."""
    swept = {"name": "head", "sweep": {"learning_rate": [1e-3, 2e-3]}}
    with pytest.raises(ExperimentSpecError, match=r"task_training.cb.learning_rate: sweep 'head' sweeps learning_rate"):
        _spec([swept], task_training={"cb": {"learning_rate": 5e-3}})
    assert len(_spec([swept], task_training={"cb": {"warmup_ratio": 0.1}}).variants) == 2  # another setting: kept
    epochs = {"name": "head", "sweep": {"epochs": [1, 2]}}
    with pytest.raises(ExperimentSpecError, match=r"task_training.cb.max_steps: sweep 'head' sweeps epochs"):
        _spec([epochs], task_training={"cb": {"max_steps": 5}})
    with pytest.raises(
        ExperimentSpecError, match=r"setups\[0\].sweep.epochs: max_steps=5 .from the entry or `training`"
    ):
        _spec([epochs], training={"max_steps": 5})
