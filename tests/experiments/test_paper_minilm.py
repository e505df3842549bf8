"""examples/paper-minilm.yaml (the README's first command) validates, plans Head / Full / ST-A / Fusion w/ ST-A on
RTE, CB and MRPC over 3 seeds, fuses each target's own adapter with the shipped zoo's 11 others (so no source
adapter is trained again), pools as the shipped encoder does, and loads its targets offline from the demo pack."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapterfusion.cli import build_parser
from adapterfusion.demo import demo_data_dir
from adapterfusion.experiments.plan import job_id, plan_jobs
from adapterfusion.experiments.spec import load_spec
from adapterfusion.tasks.loading import load_task_data
from adapterfusion.zoo import SHIPPED, zoo_tasks

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ("rte", "cb", "mrpc")

pytest.importorskip("yaml")


@pytest.fixture(scope="module")
def spec():
    return load_spec(ROOT / "examples" / "paper-minilm.yaml")


def test_the_readmes_first_command_runs_this_example_into_the_committed_results(spec):
    """The README's first code block, as the CLI parses it: `run` of this file, whose results folder is the one the
    README points at and the repository commits (examples/results/paper-minilm/)."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    line = next(line for line in block.splitlines() if "bin/adapterfusion " in line)
    command = line.split("bin/adapterfusion ", 1)[1].split("#", 1)[0].split()
    args = build_parser().parse_args(command)
    assert args.command == "run" and (ROOT / args.experiment).resolve() == (ROOT / "examples/paper-minilm.yaml")
    assert load_spec(ROOT / args.experiment).to_dict() == spec.to_dict()
    results = Path(spec.output_dir)
    assert results == ROOT / "examples" / "results" / "paper-minilm"
    assert (results / "experiment.json").is_file() and (results / "report" / "tables.md").is_file()
    assert "examples/results/paper-minilm/report/" in readme


def test_the_main_job_plans_four_setups_three_seeds_and_zoo_fusions(spec):
    assert spec.tasks == TARGETS and list(spec.seeds) == [1, 2, 3] and spec.zoo == SHIPPED
    assert Path(spec.data_dir) == demo_data_dir() and spec.encoder is None
    assert [v.id for v in spec.variants] == ["head", "full", "st-a-rf16", "fusion-st-a"]
    jobs = plan_jobs(spec)
    assert len(jobs) == 4 * len(TARGETS) * 3
    for job in jobs:
        assert job.options["pooling"] == "mean"  # the shipped sentence-transformers encoder's own pooling
        if job.variant == "fusion-st-a":
            assert list(job.depends_on) == [job_id("st-a-rf16", job.task, job.seed)]
            sources = set(spec.fusion[job.task]) - {job.task}  # the target's own adapter is always fused
            assert len(sources) == 11 and sources <= set(zoo_tasks())
        else:
            assert job.depends_on == ()
        epochs = job.training["epochs"]
        assert epochs == (8 if job.task == "cb" else {"full": 2}.get(job.variant, 4))


@pytest.mark.parametrize("task", TARGETS)
def test_targets_load_from_the_pack_with_the_example_sizes(spec, task):
    splits, info = load_task_data(task, data_dir=demo_data_dir(), seed=1, max_examples=spec.max_examples)
    assert len(splits["train"]) == min(500, {"rte": 2490, "cb": 250, "mrpc": 3667}[task])
    assert len(splits["validation"]) == {"rte": 277, "cb": 56, "mrpc": 408}[task]  # the full dev sets
    assert info.carve_out is None


def test_the_quick_variant_is_the_main_job_with_half_the_training():
    quick = load_spec(ROOT / "examples" / "paper-minilm-quick.yaml")
    main = load_spec(ROOT / "examples" / "paper-minilm.yaml")
    assert (quick.tasks, quick.seeds, quick.zoo, quick.fusion) == (main.tasks, main.seeds, main.zoo, main.fusion)
    assert quick.max_examples == {"train": 250} and main.max_examples == {"train": 500}
    rates = {job.variant: job.training["learning_rate"] for job in plan_jobs(main)}
    for job in plan_jobs(quick):
        assert job.training["learning_rate"] == rates[job.variant]  # only the amount of training differs
        assert job.training["epochs"] == {"full": 2}.get(job.variant, 3)
