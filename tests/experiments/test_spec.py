"""Every mistake in an experiment file names its key path and what is allowed."""

import json

import pytest

from adapterfusion.errors import ConfigError, TrainingError
from adapterfusion.experiments import ExperimentSpec, ExperimentSpecError, plan_jobs
from adapterfusion.tasks import instruction_task
from adapterfusion.training.multitask import train_multitask

BASE = {"name": "x", "tasks": ["rte", "cb"], "setups": ["head", "st-a", "fusion-st-a"], "output_dir": "/tmp/x"}


def spec(**changes):
    return ExperimentSpec.from_dict({**BASE, **changes})


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(tasks=["rte", "rtee"]), r"tasks\[1\]: unknown task 'rtee'. Did you mean 'rte'\? Known tasks: .*mnli"),
        (dict(tasks=["rte", "rte"]), r"tasks\[1\]: duplicate 'rte'"),
        (
            dict(setups=["head", "st-a", {"name": "st-a", "learning_rate": -1}]),
            r"setups\[2\].learning_rate: learning_rate=-1",
        ),
        (
            dict(setups=["head", "hed"]),
            r"setups\[1\].name: unknown setup 'hed'. Did you mean 'head'\? Known setups: head",
        ),
        (dict(setups=["head", "head"]), r"setups\[1\]: duplicate setup variant 'head' \(also from setups\[0\]\)"),
        (
            dict(setups=[{"name": "st-a", "reduction_factors": [16, 0]}]),
            r"setups\[0\].reduction_factors\[1\]: must be a positive",
        ),
        (
            dict(setups=[{"name": "head", "reduction_factors": [2]}]),
            r"setups\[0\].reduction_factors: unknown key.*Allowed keys: name, id",
        ),
        (dict(setups=[{"name": "st-a", "seed": 3}]), r"setups\[0\].seed: unknown key. \('seed' is set by 'seeds'\)"),
        (dict(seeds=[1, "2"]), r"seeds\[1\]: seed '2' must be an integer"),
        (dict(seeds=[1, 1]), r"seeds\[1\]: duplicate 1"),
        (dict(sedes=[1]), r"sedes: unknown key. Did you mean 'seeds'\? Allowed keys: name"),
        (dict(training={"max_step": 3}), r"training.max_step: unknown key. Did you mean 'max_steps'\?"),
        (dict(max_examples={"dev": 3}), r"max_examples.dev: unknown key.*train, validation, test"),
        (
            dict(setups=["head", "fusion-st-a"]),
            r"setups\[1\]: fusion-st-a fuses st-a adapters, but setups has no st-a entry; add '- st-a'",
        ),
        (
            dict(setups=[{"name": "st-a", "reduction_factors": [2, 64]}, "fusion-st-a"]),
            r"setups\[1\].adapter_reduction_factor: no st-a variant with reduction factor 16",
        ),
        (dict(fusion={"mnli": ["rte"]}), r"fusion.mnli: 'mnli' is not one of the experiment's tasks"),
        (dict(setups=["head"], fusion={"rte": ["cb"]}), r"fusion: given, but setups has no fusion setup"),
        (
            dict(setups=["head", "fusion-mt-a"]),
            r"setups\[1\]: fusion-mt-a fuses mt-a adapters, but setups has no mt-a entry; add '- mt-a'",
        ),
        (dict(setups=[{"name": "mt-a", "reduction_factors": [2, 16]}]), r"setups\[0\].reduction_factors: unknown key"),
        (dict(setups=[{"name": "mt-a", "reduction_factor": 0}]), r"setups\[0\].reduction_factor: must be a positive"),
        (dict(setups=[{"name": "mt-a", "fp16": True}]), r"setups\[0\].fp16: mt-a trains without loss scaling.*bf16"),
        (
            dict(setups=[{"name": "mt-a", "torch_compile": True}]),
            r"setups\[0\].torch_compile: mt-a's own training loop",
        ),
        (
            dict(setups=["st-a", "mt-a", {"name": "fusion-st-a", "adapter_setup": "mt-a"}]),
            r"setups\[2\].adapter_setup: 'mt-a' is not a stage-1 adapter setup of fusion-st-a "
            r"\(fusion-mt-a fuses mt-a adapters\)",
        ),
    ],
)
def test_each_mistake_names_its_key(changes, match):
    with pytest.raises(ExperimentSpecError, match=match):
        spec(**changes)


def test_errors_are_config_errors_and_missing_keys_are_named():
    with pytest.raises(ConfigError, match="setups: missing"):
        ExperimentSpec.from_dict({"name": "x", "tasks": ["rte"]})


def test_fusion_of_a_source_outside_the_experiment_names_what_to_add():
    with pytest.raises(
        ExperimentSpecError, match=r"fusion.rte: .*fuses \['mnli'\].*no st-a-rf16 adapter.*add \['mnli'\] to tasks"
    ):
        plan_jobs(spec(fusion={"rte": ["mnli"]}))


def test_reduction_factors_expand_into_variants_and_defaults_resolve(tmp_path):
    s = spec(
        setups=["head", {"name": "st-a", "reduction_factors": [2, 16, 64], "learning_rate": 3e-4}, "fusion-st-a"],
        seeds=[1, 2],
        training={"max_steps": 5},
    )
    assert [v.id for v in s.variants] == ["head", "st-a-rf2", "st-a-rf16", "st-a-rf64", "fusion-st-a"]
    assert s.variant("st-a-rf2").training == {"max_steps": 5, "learning_rate": 3e-4}
    assert s.variant("fusion-st-a").adapter_variant == "st-a-rf16"
    assert s.fusion == {"rte": ("rte", "cb"), "cb": ("rte", "cb")}
    other = spec(
        setups=[{"name": "st-a", "reduction_factors": [2, 64]}, {"name": "fusion-st-a", "adapter_reduction_factor": 2}]
    )
    assert [v.id for v in other.variants] == ["st-a-rf2", "st-a-rf64", "fusion-st-a-st-a-rf2"]
    assert s.spec_hash() != spec(seeds=[1]).spec_hash()
    assert spec().spec_hash() == spec(output_dir="/elsewhere").spec_hash()


def test_yaml_and_json_files_resolve_paths_against_the_file(tmp_path):
    (tmp_path / "exp.yaml").write_text("name: y\ntasks: [rte]\nsetups: [head]\nseeds: 3\noutput_dir: out\n")
    loaded = ExperimentSpec.load(tmp_path / "exp.yaml")
    assert loaded.seeds == (3,) and loaded.output_dir == str(tmp_path / "out") and loaded.encoder is None
    (tmp_path / "exp.json").write_text(json.dumps({**BASE, "output_dir": "o", "data_dir": "d"}))
    assert ExperimentSpec.load(tmp_path / "exp.json").data_dir == str(tmp_path / "d")
    (tmp_path / "bad.yaml").write_text("name: [\n")
    with pytest.raises(ExperimentSpecError, match="not valid YAML"):
        ExperimentSpec.load(tmp_path / "bad.yaml")


def test_fractional_reduction_factors_get_valid_variant_ids():
    # 'st-a-rf0.5' is no valid module key or folder name: the error used to blame an id the user never wrote
    s = spec(
        setups=[
            {"name": "st-a", "reduction_factors": [0.5, 2.5, 16]},
            {"name": "fusion-st-a", "adapter_reduction_factor": 0.5},
        ]
    )
    assert [v.id for v in s.variants] == ["st-a-rf0_5", "st-a-rf2_5", "st-a-rf16", "fusion-st-a-st-a-rf0_5"]
    assert s.variant("st-a-rf0_5").options["reduction_factor"] == 0.5
    assert {job.id for job in plan_jobs(s)} >= {"st-a-rf0_5/rte/seed-42", "fusion-st-a-st-a-rf0_5/cb/seed-42"}


def test_a_data_dir_reached_through_a_link_is_recorded_as_the_file_writes_it(tmp_path):
    """CI clones with ../shared beside them, a link or a folder: the recorded paths and the spec hash must not
    depend on which (a hash that followed the link would make every committed results folder refuse its file)."""
    (tmp_path / "real" / "data").mkdir(parents=True)
    hashes = []
    for clone, shared_is_link in (("a", True), ("b", False)):
        (tmp_path / clone / "repo").mkdir(parents=True)
        if shared_is_link:
            (tmp_path / clone / "shared").symlink_to(tmp_path / "real")
        else:
            (tmp_path / clone / "shared" / "data").mkdir(parents=True)
        file = tmp_path / clone / "repo" / "x.json"
        file.write_text(json.dumps({"name": "x", "tasks": ["rte"], "data_dir": "../shared/data", "setups": ["st-a"]}))
        loaded = ExperimentSpec.load(file)
        assert loaded.recorded_dict()["data_dir"] == "../shared/data"
        hashes.append(loaded.spec_hash())
    assert hashes[0] == hashes[1]


@pytest.mark.parametrize("setups", [["head"], ["mt-a"], [{"name": "mt-a", "tasks": ["rte", "answers"]}]])
def test_setups_with_a_head_of_their_own_refuse_generation_tasks_when_the_file_is_read(tmp_path, setups):
    """head and mt-a train a classifier; on an instruction (generation) task every job failed at run time, mt-a's
    with 'num_labels=0'. Refused up front, naming the tasks; the same entry limited to other tasks is accepted."""
    (tmp_path / "answers.json").write_text(json.dumps(instruction_task("answers", data_files={}).to_dict()))
    with pytest.raises(ExperimentSpecError, match=r"\['answers'\] are generation tasks"):
        spec(tasks=["rte", "answers"], setups=setups, task_files=[str(tmp_path / "answers.json")])
    limited = [{"name": "mt-a", "tasks": ["rte", "cb"]}, "st-a"]
    spec(tasks=["rte", "cb", "answers"], setups=limited, task_files=[str(tmp_path / "answers.json")])


def test_mt_a_refuses_a_generation_task_before_loading_anything(tmp_path):
    with pytest.raises(TrainingError, match="generation tasks"):
        train_multitask(["rte", instruction_task("answers", data_files={})], output_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []
