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
