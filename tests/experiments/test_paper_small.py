"""examples/paper-small.yaml (all six setups on six demo tasks, stage 1 included) validates, plans the jobs it
promises, and every task it names loads offline from the demo data pack shipped inside the package."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from adapterfusion.demo import DEMO_TASKS, demo_data_dir
from adapterfusion.experiments.plan import job_id, plan_jobs
from adapterfusion.experiments.spec import load_spec
from adapterfusion.tasks.loading import load_task_data

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "paper-small.yaml"
TASKS = ("rte", "cb", "mrpc", "sick", "sst2", "mnli")
# (split file, rows) of every file in the pack; scripts/make_demo_data.py builds exactly these.
PACK = {
    "rte": {"train": 2490, "validation": 277},
    "cb": {"train": 250, "validation": 56},
    "mrpc": {"train": 3667, "validation": 408},
    "sick": {"train": 4500, "validation": 500},
    "sst2": {"train": 2000, "validation": 872},
    "mnli": {"validation_matched": 3000},
    "sick-r": {"train": 1000, "validation": 500},  # SICK's rows again, for the regression task (issue #27)
}

pytest.importorskip("yaml")


@pytest.fixture(scope="module")
def spec():
    return load_spec(EXAMPLE)


def test_the_example_validates_and_points_at_the_shipped_pack(spec) -> None:
    assert spec.name == "paper-small"
    assert spec.encoder is None  # the shipped MiniLM
    assert Path(spec.data_dir) == demo_data_dir()
    assert Path(spec.output_dir) == ROOT / "examples" / "results" / "paper-small"
    assert spec.tasks == TASKS == DEMO_TASKS
    assert [v.id for v in spec.variants] == ["head", "full", "st-a-rf16", "fusion-st-a", "mt-a", "fusion-mt-a"]
    assert spec.variant("st-a-rf16").options["reduction_factor"] == 16
    assert spec.variant("fusion-st-a").adapter_variant == "st-a-rf16"
    assert spec.variant("fusion-mt-a").adapter_variant == "mt-a"
    assert spec.variant("fusion-mt-a").tasks == ("rte", "cb")
    assert len(spec.seeds) >= 2
    for target in ("rte", "cb"):
        assert set(spec.fusion[target]) == set(TASKS)


def test_the_example_plans_every_job_with_its_dependencies(spec) -> None:
    jobs = plan_jobs(spec)
    # head, full, st-a and fusion-st-a for every task and seed; per seed one mt-a run and fusion-mt-a on rte and cb.
    assert len(jobs) == len(spec.seeds) * (len(TASKS) * 4 + 1 + 2)
    ids = [job.id for job in jobs]
    assert len(set(ids)) == len(ids)
    position = {job_id_: i for i, job_id_ in enumerate(ids)}
    fusions = [job for job in jobs if job.variant == "fusion-st-a"]
    assert len(fusions) == len(spec.seeds) * len(TASKS)
    for job in fusions:
        expected = {job_id("st-a-rf16", task, job.seed) for task in TASKS}
        assert set(job.depends_on) == expected
        assert all(position[dep] < position[job.id] for dep in job.depends_on)
        assert job.options["adapter_seed"] == job.seed
    for job in jobs:
        if job.variant == "fusion-mt-a":
            assert job.depends_on == (job_id("mt-a", "all", job.seed),)
            assert position[job.depends_on[0]] < position[job.id]
        elif job.variant != "fusion-st-a":
            assert job.depends_on == ()


def test_the_pack_holds_every_file_with_its_row_count() -> None:
    root = demo_data_dir()
    assert (root / "DATA_LICENSES.md").is_file()
    found = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.jsonl.gz"))
    assert found == sorted(f"{task}/{split}.jsonl.gz" for task, splits in PACK.items() for split in splits)
    total = 0
    for task, splits in PACK.items():
        for split, rows in splits.items():
            path = root / task / f"{split}.jsonl.gz"
            total += path.stat().st_size
            with gzip.open(path, "rb") as handle:
                assert sum(1 for line in handle if line.strip()) == rows, path
            assert path.read_bytes()[4:8] == b"\0\0\0\0"  # gzip mtime 0: the build is reproducible
    assert total < 5 * 1024 * 1024
    licences = (root / "DATA_LICENSES.md").read_text(encoding="utf-8")
    for task in PACK:
        assert f"`{task}/`" in licences


def test_package_data_ships_the_pack() -> None:
    """pyproject's package-data globs match every file of the pack (what setuptools puts in the wheel)."""
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["adapterfusion"]
    package = ROOT / "adapterfusion"
    shipped = {p for pattern in patterns for p in package.glob(pattern) if p.is_file()}
    pack = {p for p in demo_data_dir().rglob("*") if p.is_file()}
    assert pack and pack <= shipped


@pytest.mark.parametrize("task", TASKS)
def test_every_task_loads_from_the_pack_with_the_example_sizes(spec, task) -> None:
    splits, info = load_task_data(task, data_dir=demo_data_dir(), seed=spec.seeds[0], max_examples=spec.max_examples)
    assert set(splits) == {"train", "validation"}
    assert info.source == "local"
    for role in ("train", "validation"):
        available = next(s.rows_available for s in info.splits if s.role == role)
        assert len(splits[role]) == min(spec.max_examples[role], available) > 0
        assert len(set(splits[role]["label"])) >= 2
    if task == "mnli":  # no train split in the pack: a recorded, seeded carve-out of validation_matched
        assert info.carve_out is not None and info.carve_out.source_split == "validation_matched"
        assert info.carve_out.source_size == PACK["mnli"]["validation_matched"]
    else:
        assert info.carve_out is None
