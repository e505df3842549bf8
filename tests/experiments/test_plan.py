"""The job graph: stable ids, stage-1 adapters before the fusions that fuse them, same seed."""
import pytest

from adapterfusion.experiments import ExperimentSpec, ExperimentSpecError, Job, plan_jobs, topological_order


def test_ids_order_and_dependencies():
    spec = ExperimentSpec.from_dict({"name": "x", "tasks": ["rte", "cb"], "seeds": [1, 2], "output_dir": "/tmp/x",
                                     "setups": ["fusion-st-a", "head", {"name": "st-a", "reduction_factors": [2, 16]}],
                                     "fusion": {"cb": ["cb"]}})
    jobs = plan_jobs(spec)
    ids = [j.id for j in jobs]
    assert len(ids) == len(set(ids)) == 2 * 2 * 4
    assert ids[:6] == ["st-a-rf2/rte/seed-1", "st-a-rf2/cb/seed-1", "st-a-rf16/rte/seed-1", "st-a-rf16/cb/seed-1",
                       "head/rte/seed-1", "head/cb/seed-1"]
    by_id = {j.id: j for j in jobs}
    assert by_id["fusion-st-a/rte/seed-2"].depends_on == ("st-a-rf16/rte/seed-2", "st-a-rf16/cb/seed-2")
    assert by_id["fusion-st-a/cb/seed-1"].depends_on == ("st-a-rf16/cb/seed-1",)
    assert by_id["fusion-st-a/rte/seed-2"].options["sources"] == ["rte", "cb"]
    assert by_id["fusion-st-a/rte/seed-2"].options["adapter_seed"] == 2
    assert by_id["fusion-st-a/rte/seed-2"].store_variant == "st-a-rf16" == by_id["st-a-rf16/cb/seed-2"].store_variant
    assert by_id["head/rte/seed-1"].store_variant is None
    for position, job in enumerate(jobs):
        assert all(ids.index(d) < position for d in job.depends_on)
    assert [j.id for j in plan_jobs(spec)] == ids  # stable


def test_topological_order_reorders_and_rejects_cycles_and_unknown_dependencies():
    a, b = Job("a", "v", "head", "rte", 1, depends_on=("b",)), Job("b", "v", "head", "rte", 1)
    assert [j.id for j in topological_order([a, b])] == ["b", "a"]
    with pytest.raises(ExperimentSpecError, match="cycle"):
        topological_order([a, Job("b", "v", "head", "rte", 1, depends_on=("a",))])
    with pytest.raises(ExperimentSpecError, match="does not plan"):
        topological_order([a])


def _restricted(**extra):
    data = {"name": "x", "tasks": ["rte", "cb", "sick"], "seeds": [1], "output_dir": "/tmp/x",
            "setups": [{"name": "head", "tasks": ["rte", "cb"]}, "st-a", {"name": "fusion-st-a", "tasks": ["rte"]}],
            "fusion": {"rte": ["sick", "cb"]}}
    data.update(extra)
    return ExperimentSpec.from_dict(data)


def test_a_setup_entry_with_tasks_runs_only_on_them_and_task_training_applies_last():
    spec = _restricted(training={"epochs": 2}, task_training={"cb": {"epochs": 10, "patience": 3}})
    jobs = {j.id: j for j in plan_jobs(spec)}
    assert sorted(jobs) == sorted(["st-a-rf16/rte/seed-1", "st-a-rf16/cb/seed-1", "st-a-rf16/sick/seed-1",
                                   "head/rte/seed-1", "head/cb/seed-1", "fusion-st-a/rte/seed-1"])
    assert jobs["fusion-st-a/rte/seed-1"].depends_on == ("st-a-rf16/sick/seed-1", "st-a-rf16/cb/seed-1",
                                                         "st-a-rf16/rte/seed-1")
    assert jobs["head/cb/seed-1"].training == {"epochs": 10, "patience": 3}
    assert jobs["st-a-rf16/rte/seed-1"].training == {"epochs": 2}
    assert jobs["head/cb/seed-1"].config_hash(spec) != jobs["head/rte/seed-1"].config_hash(spec)


def test_restrictions_and_task_training_are_validated_with_their_key_path():
    with pytest.raises(ExperimentSpecError, match=r"setups\[0\]\.tasks\[1\].*'mnli' is not one of the experiment's tasks"):
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
