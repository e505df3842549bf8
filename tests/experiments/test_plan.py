"""The job graph: stable ids, stage-1 adapters before the fusions that fuse them, same seed; MT-A once per seed."""

from pathlib import Path

import pytest

from adapterfusion.experiments import ExperimentSpec, ExperimentSpecError, Job, plan_jobs, topological_order
from adapterfusion.experiments.plan import config_hashes

# Job hashes of a small st-a + fusion-st-a spec, recorded when the head pooling became part of every job's options
# (the shipped MiniLM resolves to mean pooling), before a job's hash covered its dependencies' hashes.
HASHES = {"st-a-rf16/rte/seed-1": "acfb9234625fc01a", "fusion-st-a/rte/seed-1": "3558cb645cf8c95a"}


def test_ids_order_and_dependencies():
    spec = ExperimentSpec.from_dict(
        {
            "name": "x",
            "tasks": ["rte", "cb"],
            "seeds": [1, 2],
            "output_dir": "/tmp/x",
            "setups": ["fusion-st-a", "head", {"name": "st-a", "reduction_factors": [2, 16]}],
            "fusion": {"cb": ["rte"]},
        }
    )
    jobs = plan_jobs(spec)
    ids = [j.id for j in jobs]
    assert len(ids) == len(set(ids)) == 2 * 2 * 4
    assert ids[:6] == [
        "st-a-rf2/rte/seed-1",
        "st-a-rf2/cb/seed-1",
        "st-a-rf16/rte/seed-1",
        "st-a-rf16/cb/seed-1",
        "head/rte/seed-1",
        "head/cb/seed-1",
    ]
    by_id = {j.id: j for j in jobs}
    assert by_id["fusion-st-a/rte/seed-2"].depends_on == ("st-a-rf16/rte/seed-2", "st-a-rf16/cb/seed-2")
    assert by_id["fusion-st-a/cb/seed-1"].depends_on == ("st-a-rf16/rte/seed-1", "st-a-rf16/cb/seed-1")
    assert by_id["fusion-st-a/rte/seed-2"].options["sources"] == ["rte", "cb"]
    assert by_id["fusion-st-a/rte/seed-2"].options["adapter_seed"] == 2
    assert by_id["fusion-st-a/rte/seed-2"].store_variant == "st-a-rf16" == by_id["st-a-rf16/cb/seed-2"].store_variant
    assert by_id["head/rte/seed-1"].store_variant is None
    for position, job in enumerate(jobs):
        assert all(ids.index(d) < position for d in job.depends_on)
    assert [j.id for j in plan_jobs(spec)] == ids  # stable


@pytest.mark.parametrize("extra", [{"fusion": {"cb": ["cb"], "rte": ["rte", "cb"]}}, {"tasks": ["cb"]}])
def test_a_fusion_of_the_targets_own_adapter_alone_is_refused(extra):
    """A fusion of one adapter has an attention of 1.0 everywhere: ST-A with a trained value matrix, not a fusion."""
    data = {"name": "x", "tasks": ["rte", "cb"], "seeds": [1], "output_dir": "/tmp/x"}
    spec = ExperimentSpec.from_dict({**data, "setups": ["st-a", "fusion-st-a"], **extra})
    with pytest.raises(ExperimentSpecError, match=r"the fusion-st-a run of '(cb|rte)' would fuse its own adapter"):
        plan_jobs(spec)


def test_topological_order_reorders_and_rejects_cycles_and_unknown_dependencies():
    a, b = Job("a", "v", "head", "rte", 1, depends_on=("b",)), Job("b", "v", "head", "rte", 1)
    assert [j.id for j in topological_order([a, b])] == ["b", "a"]
    with pytest.raises(ExperimentSpecError, match="cycle"):
        topological_order([a, Job("b", "v", "head", "rte", 1, depends_on=("a",))])
    with pytest.raises(ExperimentSpecError, match="does not plan"):
        topological_order([a])


def _restricted(**extra):
    data = {
        "name": "x",
        "tasks": ["rte", "cb", "sick"],
        "seeds": [1],
        "output_dir": "/tmp/x",
        "setups": [{"name": "head", "tasks": ["rte", "cb"]}, "st-a", {"name": "fusion-st-a", "tasks": ["rte"]}],
        "fusion": {"rte": ["sick", "cb"]},
    }
    data.update(extra)
    return ExperimentSpec.from_dict(data)


def test_a_setup_entry_with_tasks_runs_only_on_them_and_task_training_applies_last():
    spec = _restricted(training={"epochs": 2}, task_training={"cb": {"epochs": 10, "patience": 3}})
    jobs = {j.id: j for j in plan_jobs(spec)}
    assert sorted(jobs) == sorted(
        [
            "st-a-rf16/rte/seed-1",
            "st-a-rf16/cb/seed-1",
            "st-a-rf16/sick/seed-1",
            "head/rte/seed-1",
            "head/cb/seed-1",
            "fusion-st-a/rte/seed-1",
        ]
    )
    assert jobs["fusion-st-a/rte/seed-1"].depends_on == (
        "st-a-rf16/sick/seed-1",
        "st-a-rf16/cb/seed-1",
        "st-a-rf16/rte/seed-1",
    )
    assert jobs["head/cb/seed-1"].training == {"epochs": 10, "patience": 3}
    assert jobs["st-a-rf16/rte/seed-1"].training == {"epochs": 2}
    assert jobs["head/cb/seed-1"].config_hash(spec) != jobs["head/rte/seed-1"].config_hash(spec)


def test_restrictions_and_task_training_are_validated_with_their_key_path():
    with pytest.raises(
        ExperimentSpecError, match=r"setups\[0\]\.tasks\[1\].*'mnli' is not one of the experiment's tasks"
    ):
        _restricted(setups=[{"name": "head", "tasks": ["rte", "mnli"]}])
    with pytest.raises(ExperimentSpecError, match=r"setups\[0\]\.tasks\[1\]: duplicate"):
        _restricted(setups=[{"name": "head", "tasks": ["rte", "rte"]}])
    with pytest.raises(ExperimentSpecError, match=r"task_training\.cb\.epoch: unknown key"):
        _restricted(task_training={"cb": {"epoch": 3}})
    with pytest.raises(ExperimentSpecError, match=r"task_training\.qqp.*not one of the experiment's tasks"):
        _restricted(task_training={"qqp": {"epochs": 3}})
    with pytest.raises(ExperimentSpecError, match=r"task_training\.cb"):
        _restricted(task_training={"cb": {"epochs": -1}})
    spec = _restricted(setups=[{"name": "st-a", "tasks": ["rte", "cb"]}, {"name": "fusion-st-a", "tasks": ["rte"]}])
    with pytest.raises(ExperimentSpecError, match=r"fusion\.rte.*fuses \['sick'\].*no st-a-rf16 adapter"):
        plan_jobs(spec)


def test_specs_without_the_new_keys_keep_their_hash():
    data = {"name": "x", "tasks": ["rte"], "setups": ["head"], "output_dir": "/tmp/x"}
    assert "task_training" not in ExperimentSpec.from_dict(data).to_dict()
    assert "tasks" not in ExperimentSpec.from_dict(data).to_dict()["variants"][0]


def _multitask(**extra):
    data = {
        "name": "x",
        "tasks": ["rte", "cb", "sick"],
        "seeds": [1, 2],
        "output_dir": "/tmp/x",
        "setups": [
            "head",
            {"name": "mt-a", "tasks": ["rte", "cb"], "learning_rate": 3e-4},
            {"name": "fusion-mt-a", "tasks": ["rte"]},
        ],
        "fusion": {"rte": ["cb"]},
        "task_training": {"rte": {"epochs": 4}},
    }
    data.update(extra)
    return ExperimentSpec.from_dict(data)


def test_mt_a_is_one_job_per_seed_and_fusion_mt_a_runs_on_its_encoder():
    spec = _multitask()
    assert [v.id for v in spec.variants] == ["head", "mt-a", "fusion-mt-a"]
    assert spec.variant("fusion-mt-a").adapter_variant == "mt-a"
    jobs = plan_jobs(spec)
    ids = [j.id for j in jobs]
    assert ids == [
        "mt-a/all/seed-1",
        "head/rte/seed-1",
        "head/cb/seed-1",
        "head/sick/seed-1",
        "fusion-mt-a/rte/seed-1",
        "mt-a/all/seed-2",
        "head/rte/seed-2",
        "head/cb/seed-2",
        "head/sick/seed-2",
        "fusion-mt-a/rte/seed-2",
    ]
    by_id = {j.id: j for j in jobs}
    mt = by_id["mt-a/all/seed-2"]
    assert (mt.kind, mt.task, mt.setup, mt.store_variant, mt.depends_on) == ("multitask", "all", "mt-a", "mt-a", ())
    assert mt.options == {"reduction_factor": 16, "pooling": "mean", "tasks": ["rte", "cb"]}  # the shipped MiniLM's
    assert mt.training == {"learning_rate": 3e-4}  # task_training is per task; the MT-A run has none of its own
    assert mt.run_dir("/o") == Path("/o/runs/mt-a/mt-a/mt-a/seed-2")  # where train_multitask writes its run
    fusion = by_id["fusion-mt-a/rte/seed-2"]
    assert fusion.kind == "single" and fusion.depends_on == ("mt-a/all/seed-2",)
    assert fusion.options == {"sources": ["cb", "rte"], "adapter_seed": 2, "pooling": "mean"}
    assert fusion.store_variant == "mt-a" and fusion.training == {"epochs": 4}
    assert fusion.encoder_dir("/o") == mt.run_dir("/o") / "encoder"
    assert by_id["head/rte/seed-1"].kind == "single" and by_id["head/rte/seed-1"].encoder_dir("/o") is None
    assert mt.config_hash(spec) != by_id["mt-a/all/seed-1"].config_hash(spec)
    changed = {
        j.id: j
        for j in plan_jobs(
            _multitask(setups=[{"name": "mt-a", "reduction_factor": 2}, "fusion-mt-a"], fusion={"rte": ["cb", "sick"]})
        )
    }
    assert changed["mt-a/all/seed-1"].options == {
        "reduction_factor": 2,
        "pooling": "mean",
        "tasks": ["rte", "cb", "sick"],
    }
    assert changed["mt-a/all/seed-1"].config_hash(spec) != by_id["mt-a/all/seed-1"].config_hash(spec)


def test_fusion_mt_a_fuses_only_mt_a_tasks():
    with pytest.raises(
        ExperimentSpecError, match=r"fusion\.rte: .*fuses \['sick'\].*no mt-a adapter.*mt-a entry's tasks"
    ):
        plan_jobs(_multitask(fusion={"rte": ["sick"]}))
    with pytest.raises(
        ExperimentSpecError,
        match=r"fusion\.sick: .*fuses \['sick'\].*no mt-a adapter.*leave it out "
        r"of the fusion-mt-a entry's tasks",
    ):
        plan_jobs(
            _multitask(
                setups=[{"name": "mt-a", "tasks": ["rte", "cb"]}, "fusion-mt-a"], fusion={"rte": ["cb"], "cb": ["rte"]}
            )
        )  # sick is a fusion target, not an MT-A task


def test_single_task_jobs_keep_their_config_hash():
    """Results on disk were recorded under these hashes; a change would re-run them, so it must be deliberate. (The
    fusion job this experiment also planned fused rte's adapter alone, which is refused since: its hash is kept in
    HASHES as a record only.)"""
    spec = ExperimentSpec.from_dict(
        {
            "name": "x",
            "tasks": ["rte"],
            "seeds": [1],
            "output_dir": "/tmp/x",
            "setups": ["st-a"],
            "training": {"max_steps": 2},
        }
    )
    assert {j.id: j.config_hash(spec) for j in plan_jobs(spec)} == {
        "st-a-rf16/rte/seed-1": HASHES["st-a-rf16/rte/seed-1"]
    }
    assert config_hashes(spec, plan_jobs(spec))["st-a-rf16/rte/seed-1"] == HASHES["st-a-rf16/rte/seed-1"]


def test_a_jobs_hash_covers_its_dependencies_settings_transitively():
    base = {"name": "x", "tasks": ["rte", "sst2"], "seeds": [1], "output_dir": "/tmp/x"}
    spec = ExperimentSpec.from_dict({**base, "setups": ["head", "st-a", "fusion-st-a"]})
    changed = ExperimentSpec.from_dict(
        {**base, "setups": ["head", {"name": "st-a", "learning_rate": 5e-3}, "fusion-st-a"]}
    )
    before, after = config_hashes(spec, plan_jobs(spec)), config_hashes(changed, plan_jobs(changed))
    fusions = [i for i in before if i.startswith("fusion-st-a/")]
    assert sorted(i for i in before if before[i] != after[i]) == sorted(
        ["st-a-rf16/rte/seed-1", "st-a-rf16/sst2/seed-1", *fusions]
    )
    assert {j.id: j.options for j in plan_jobs(spec) if j.id in fusions} == {
        j.id: j.options for j in plan_jobs(changed) if j.id in fusions
    }  # the fusions' own settings are the same

    chain = [
        Job("a", "v", "head", "rte", 1, training={"learning_rate": 1.0}),
        Job("b", "v", "head", "rte", 1, depends_on=("a",)),
        Job("c", "v", "head", "rte", 1, depends_on=("b",)),
    ]
    moved = [Job("a", "v", "head", "rte", 1, training={"learning_rate": 2.0}), *chain[1:]]
    one, two = config_hashes(spec, chain), config_hashes(spec, moved)
    assert one["a"] != two["a"] and one["b"] != two["b"] and one["c"] != two["c"]
    with pytest.raises(ExperimentSpecError, match=r"job c: no config hash given for its dependencies \['b'\]"):
        chain[2].config_hash(spec, {"a": one["a"]})


def test_pooling_is_spelled_out_and_part_of_the_job_hash():
    """Unset pooling resolves to the encoder's own (mean for the shipped MiniLM), so an old run made with [CLS]
    pooling is not mistaken for one made with mean pooling."""

    def hashes(**entry):
        spec = ExperimentSpec.from_dict(
            {
                "name": "x",
                "tasks": ["rte"],
                "seeds": [1],
                "output_dir": "/tmp/x",
                "setups": [{"name": "st-a", **entry}, {"name": "head", **entry}],
            }
        )
        assert all(v.options["pooling"] == entry.get("pooling", "mean") for v in spec.variants)
        return {j.id: j.config_hash(spec) for j in plan_jobs(spec)}

    assert hashes() == hashes(pooling="mean")
    assert set(hashes().values()).isdisjoint(hashes(pooling="cls").values())
    with pytest.raises(ExperimentSpecError, match=r"setups\[0\]\.pooling: pooling='max' is not supported"):
        hashes(pooling="max")
