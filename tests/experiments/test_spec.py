"""Every mistake in an experiment file names its key path and what is allowed."""

import json
import re
from pathlib import Path

import pytest
import transformers

from adapterfusion.defaults import default_encoder_path
from adapterfusion.errors import ConfigError, TrainingError
from adapterfusion.experiments import ExperimentSpec, ExperimentSpecError, plan_jobs, run_experiment
from adapterfusion.experiments.plan import config_hashes
from adapterfusion.experiments.runner import SPEC_FILE, experiment_record
from adapterfusion.tasks import instruction_task
from adapterfusion.training.multitask import train_multitask
from tiny_decoders import tiny_decoder

BASE = {"name": "x", "tasks": ["rte", "cb"], "setups": ["head", "st-a", "fusion-st-a"], "output_dir": "/tmp/x"}


def spec(**changes):
    return ExperimentSpec.from_dict({**BASE, **changes})


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(tasks=["rte", "rtee"]), r"tasks\[1\]: unknown task 'rtee'. Did you mean 'rte'\? Known tasks: .*mnli"),
        (dict(tasks=["rte", "rte"]), r"tasks\[1\]: duplicate 'rte'"),
        (dict(tasks=["rte"], setups=["mt-a"]), r"setups\[0\]: mt-a trains several tasks.*\['rte'\] names one.*st-a"),
        (
            dict(setups=[{"name": "mt-a", "tasks": ["cb"]}, "fusion-mt-a"]),
            r"setups\[0\].tasks: mt-a trains several tasks.*\['cb'\] names one.*st-a",
        ),
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
        (  # NaN, inf and an int beyond any float passed `value <= 0` and failed later
            dict(setups=[{"name": "st-a", "reduction_factors": [16, float("nan")]}]),
            r"setups\[0\].reduction_factors\[1\]: must be a positive number .*got nan",
        ),
        (
            dict(setups=[{"name": "mt-a", "reduction_factor": float("inf")}]),
            r"setups\[0\].reduction_factor: must be a positive number .*got inf",
        ),
        (
            dict(setups=["st-a", {"name": "fusion-st-a", "adapter_reduction_factor": 10**400}]),
            r"setups\[1\].adapter_reduction_factor: must be a positive number .*got 1000.*\.\.\.00$",
        ),
        (dict(setups=[{"name": "mt-a", "fp16": True}]), r"setups\[0\].fp16: mt-a trains without loss scaling.*bf16"),
        (
            dict(setups=[{"name": "mt-a", "torch_compile": True}]),
            r"setups\[0\].torch_compile: mt-a's own training loop",
        ),
        (  # it passed the file's reading and failed as each fusion job, after the stage-1 jobs trained
            dict(setups=["st-a", {"name": "fusion-st-a", "adapter_subset": 9}]),
            r"fusion-st-a.adapter_subset: 9 is more adapters than the \d the fusion of '\w+' fuses .*at most \d",
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
def test_setups_with_a_head_of_their_own_refuse_generation_tasks_when_the_file_is_read(
    tmp_path, setups, tiny_llama_dir
):
    """head and mt-a train a classifier; on an instruction (generation) task every job failed at run time, mt-a's
    with 'num_labels=0'. Refused up front, naming the tasks; the same entry limited to other tasks is accepted (on a
    decoder: st-a on a generation task needs one)."""
    (tmp_path / "answers.json").write_text(json.dumps(instruction_task("answers", data_files={}).to_dict()))
    with pytest.raises(ExperimentSpecError, match=r"\['answers'\] are generation tasks"):
        spec(tasks=["rte", "answers"], setups=setups, task_files=[str(tmp_path / "answers.json")])
    limited = [{"name": "mt-a", "tasks": ["rte", "cb"]}, "st-a"]
    spec(
        tasks=["rte", "cb", "answers"],
        setups=limited,
        task_files=[str(tmp_path / "answers.json")],
        encoder=str(tiny_llama_dir),
    )


def test_mt_a_refuses_a_generation_task_before_loading_anything(tmp_path):
    with pytest.raises(TrainingError, match="generation tasks"):
        train_multitask(["rte", instruction_task("answers", data_files={})], output_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


# ---- the runner's record (<output_dir>/experiment.json) read back as the experiment ---------------------------------
ROOT = Path(__file__).resolve().parents[2]


def _write_record(spec_: ExperimentSpec) -> Path:
    """The record the runner writes into the spec's output dir (runner.experiment_record)."""
    out = Path(spec_.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / SPEC_FILE).write_text(json.dumps(experiment_record(spec_, out), indent=2, sort_keys=True))
    return out / SPEC_FILE


def _reviews_task(folder: Path) -> Path:
    """A task description of the user's own (a text classification task from CSV files beside it)."""
    folder.mkdir(parents=True, exist_ok=True)
    task = {
        "name": "reviews",
        "kind": "single",
        "text_fields": ["text"],
        "label_names": ["negative", "positive"],
        "data_files": {"train": "train.csv", "validation": "dev.csv"},
    }
    (folder / "reviews.json").write_text(json.dumps(task))
    return folder / "reviews.json"


def test_a_record_reads_back_as_the_experiment_it_records(tmp_path):
    """Every kind of entry resolves into the record (rf variants, sweeps and select, a fusion of a chosen rf, a
    ScaLearn fusion, mt-a and fusion-mt-a, a task of task_files, per-task training, an analysis): read back from the
    record alone, the experiment file gone, it is the same experiment, down to its spec hash and job digests."""
    _reviews_task(tmp_path / "tasks")
    file = tmp_path / "examples" / "rich.json"
    file.parent.mkdir()
    file.write_text(
        json.dumps(
            {
                "name": "rich",
                "task_files": ["../tasks/reviews.json"],
                "tasks": ["rte", "cb", "reviews"],
                "seeds": [1, 2],
                "data_dir": "../data",
                "output_dir": "results/rich",
                "max_examples": {"train": 16},
                "training": {"max_steps": 2},
                "task_training": {"cb": {"warmup_ratio": 0.1}},
                "setups": [
                    {"name": "head", "tasks": ["rte", "cb"]},
                    {"name": "st-a", "reduction_factors": [16, 4]},
                    {"name": "st-a-houlsby", "sweep": {"learning_rate": [1e-3, 1e-2], "reduction_factor": [8, 4]}},
                    {"name": "fusion-st-a", "adapter_reduction_factor": 4, "tasks": ["rte"]},
                    {"name": "fusion-st-a", "id": "scalearn", "fusion_config": "scalearn"},
                    "mt-a",
                    {"name": "fusion-mt-a", "tasks": ["cb"]},
                ],
                "fusion": {"rte": ["cb", "reviews"]},
                "select": {
                    "Adapters": "st-a-houlsby",
                    "Adapters (rf 4)": {"sweep": "st-a-houlsby", "reduction_factor": 4},
                },
                "analyses": [{"kind": "span-ablation", "variant": "st-a-rf16", "tasks": ["rte"]}],
            }
        )
    )
    original = ExperimentSpec.load(file)
    record = _write_record(original)
    file.unlink()
    reread = ExperimentSpec.load(record)
    assert reread.to_dict() == original.to_dict() and reread.source == original.source
    assert reread.spec_hash() == original.spec_hash() == json.loads(record.read_text())["spec_hash"]
    assert config_hashes(reread, plan_jobs(reread)) == config_hashes(original, plan_jobs(original))
    assert experiment_record(reread, record.parent) == json.loads(record.read_text())  # rewritten as it was
    moved = tmp_path / "elsewhere" / "results" / "rich"  # paths start from its experiment file's folder (`source`)
    (tmp_path / "examples").rename(tmp_path / "elsewhere")
    assert ExperimentSpec.load(moved / "experiment.json").output_dir == str(moved)


@pytest.mark.parametrize("name", ["paper-minilm", "houlsby-minilm", "houlsby-init-size-minilm", "scalearn-minilm"])
def test_committed_records_read_back_as_their_experiment_files(name):
    """The main job's and other committed results folders' experiment.json (zoo, sweeps and select, analyses,
    ScaLearn fusions) each read back as their experiment file, into their own folder."""
    record = ROOT / "examples" / "results" / name / SPEC_FILE
    reread, original = ExperimentSpec.load(record), ExperimentSpec.load(ROOT / "examples" / f"{name}.yaml")
    assert reread.to_dict() == original.to_dict() and reread.output_dir == str(record.parent)
    assert reread.spec_hash() == json.loads(record.read_text())["spec_hash"]


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda r: r.update(setups=["head"]), r"setups: given beside 'variants'"),
        (lambda r: r.update(training={"max_steps": 2}), r"^training: unknown key.*Allowed keys: .*variants"),
        (lambda r: r.update(source=3), r"source: must be the path of the experiment file"),
        (lambda r: r.update(spec_hash="edited"), r"spec_hash: must be the 16 hex digits"),
        (lambda r: r["variants"][1].update(setup="st-b"), r"variants\[1\].setup: unknown setup 'st-b'"),
        (lambda r: r["variants"][1].update(seed=3), r"variants\[1\].seed: unknown key"),
        (lambda r: r["variants"][1]["options"].update(reduction_factor=0), r"variants\[1\].reduction_factors\[0\]"),
        (lambda r: r["variants"][1]["training"].update(learning_rate=-1), r"variants\[1\].learning_rate: learning_"),
        (lambda r: r["variants"][2].update(adapter_variant="head"), r"variants\[2\].adapter_variant: 'head' is not"),
        (lambda r: r["variants"][0].update(adapter_variant="st-a-rf16"), r"variants\[0\].adapter_variant: only a"),
        (
            lambda r: r["variants"][1].update(sweep={"group": "st-a", "settings": {"reduction_factor": 4}}),
            r"variants\[1\].sweep.settings.reduction_factor: 4, but the variant's reduction_factor is 16",
        ),
        (lambda r: r["task_specs"]["reviews"].update(name="other"), r"task_specs.reviews: describes a task named"),
    ],
)
def test_an_edited_record_is_checked_as_an_experiment_file_is(tmp_path, edit, match):
    _reviews_task(tmp_path)
    file = tmp_path / "x.json"
    file.write_text(
        json.dumps({**BASE, "tasks": ["rte", "reviews"], "task_files": ["reviews.json"], "output_dir": "out"})
    )
    record = json.loads(_write_record(ExperimentSpec.load(file)).read_text())
    edit(record)
    (tmp_path / "out" / SPEC_FILE).write_text(json.dumps(record))
    with pytest.raises(ExperimentSpecError, match=match):
        ExperimentSpec.load(tmp_path / "out" / SPEC_FILE)


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory) -> Path:
    """A tiny random Llama (RMSNorm, no LayerNorm) saved with the shipped tokenizer."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(default_encoder_path())
    path = tmp_path_factory.mktemp("decoders") / "tiny-llama"
    tiny_decoder("llama", vocab_size=tokenizer.vocab_size).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_layernorm_only_on_an_rmsnorm_decoder_is_refused_when_the_file_is_read(
    tmp_path, tiny_llama_dir, tiny_encoder_dir
):
    """Every layernorm-only job on a Llama-style decoder failed at run time ('has no torch.nn.LayerNorm modules');
    the encoder's config tells as much when the file is read (its modules built on the meta device), so the file is
    refused then, naming the entry and its norms, before any job or output dir. An encoder with LayerNorms passes."""
    file = tmp_path / "x.json"
    setups = ["head", {"name": "layernorm-only", "tasks": ["rte"]}]
    file.write_text(json.dumps({**BASE, "encoder": str(tiny_llama_dir), "setups": setups, "output_dir": "out"}))
    match = r"setups\[1\]: layernorm-only: LlamaModel has no torch.nn.LayerNorm modules to train \(its norms are "
    with pytest.raises(ExperimentSpecError, match=match + r"LlamaRMSNorm.*st-a, top-k or full"):
        ExperimentSpec.load(file)
    with pytest.raises(ExperimentSpecError, match=match):
        run_experiment(file, progress=False)
    assert not (tmp_path / "out").exists()
    assert spec(encoder=str(tiny_encoder_dir), setups=setups).variant("layernorm-only").tasks == ("rte",)


def test_top_k_above_the_encoders_layers_is_refused_when_the_file_is_read(tmp_path, tiny_encoder_dir):
    """Every top-k job with k above the encoder's layer count failed once it had loaded the encoder; its config says
    the count (2 for the tiny BERT, 6 for the shipped MiniLM), so the file is refused when read, naming the entry."""
    file = tmp_path / "x.json"
    setups = ["head", {"name": "top-k", "k": 3}]
    file.write_text(json.dumps({**BASE, "encoder": str(tiny_encoder_dir), "setups": setups, "output_dir": "out"}))
    with pytest.raises(
        ExperimentSpecError, match=r"setups\[1\]\.k: top-k trains the top k layers, .* has 2; use k: 1 to 2"
    ):
        ExperimentSpec.load(file)
    assert spec(encoder=str(tiny_encoder_dir), setups=["head", {"name": "top-k", "k": 2}]).variant("top-k")
    assert spec(setups=["head", {"name": "top-k", "k": 6}]).variant("top-k")  # the shipped MiniLM's 6 layers
    with pytest.raises(ExperimentSpecError, match=r"null \(the shipped MiniLM\) has 6"):
        spec(setups=["head", {"name": "top-k", "k": 7}])


def test_a_fusion_on_some_targets_refuses_sources_of_others_but_its_record_reads_back(tmp_path):
    """`fusion: {cb: ...}` where no fusion runs on cb would be ignored, so the file is refused; the runner's record
    lists every task's sources (ExperimentSpec.to_dict), also where no fusion runs, and still reads back."""
    limited = {"setups": ["st-a", {"name": "fusion-st-a", "tasks": ["rte"]}], "output_dir": str(tmp_path / "out")}
    with pytest.raises(ExperimentSpecError, match=r"fusion.cb: no fusion setup runs on 'cb' \(fusion-st-a runs on rte"):
        spec(**limited, fusion={"cb": ["rte"]})
    written = spec(**limited, fusion={"rte": ["cb"]})
    assert set(written.fusion) == {"rte", "cb"}
    again = ExperimentSpec.load(_write_record(written))
    assert again.fusion == written.fusion and again.spec_hash() == written.spec_hash()


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(setups=[{"name": "top-k", "k": True}]), r"setups\[0\].k: k=True has type bool"),
        (dict(setups=[{"name": "top-k", "sweep": {"k": [0, 1]}}]), r"setups\[0\].k: k=0 must be an integer >= 1"),
        (
            dict(setups=["st-a", {"name": "fusion-st-a", "adapter_subset": "two"}]),
            r"setups\[1\].adapter_subset: adapter_subset='two' has type str",
        ),
        (dict(tasks=["rte", "cb"], setups=[{"name": "head", "id": "A"}, {"name": "st-a", "id": "a"}]), r"only in case"),
        (dict(seeds=[1], format_version=1.0), r"format_version: 1.0 is not supported"),
        (dict(training=0), r"training: must be a mapping of TrainingConfig fields, got 0"),
        (
            dict(setups=["st-a", "mt-a"], task_training={"cb": {"epochs": 2}}),
            None,  # st-a trains cb on its own: applied there
        ),
        (
            dict(setups=[{"name": "st-a", "tasks": ["rte"]}], task_training={"cb": {"epochs": 2}}),
            r"task_training.cb: no setup trains 'cb' on its own \(no setup entry's tasks include it\), so these "
            r"overrides would be ignored; add 'cb' to a setup entry's tasks",
        ),
    ],
)
def test_values_a_run_would_refuse_or_ignore_are_refused_when_read(changes, match):
    if match is None:
        spec(**changes)
        return
    with pytest.raises(ExperimentSpecError, match=match):
        spec(**changes)


@pytest.mark.parametrize(
    "setting, said",
    [
        ("training: {learning_rate: 1e-4}", "'1e-4' is text, not a number: YAML reads a number such as 1e-4 as text"),
        ("setups: [{name: st-a, learning_rate: 3e-4}]", "write 1.0e-4"),
        ("setups: [{name: st-a, sweep: {learning_rate: [1.0e-4, 3e-4]}}]", "'3e-4' is text"),
        ("task_training: {rte: {learning_rate: 1e-4}}", "'1e-4' is text"),
        ("setups: [{name: st-a, reduction_factors: [16, 6.4e1]}]", "'6.4e1' is text"),
        ("training: {max_steps: '100'}", "'100' is text, not a number: write it without quotes"),
        ("seeds: [1, '2']", "'2' is text, not a number: write it without quotes"),
    ],
)
def test_a_number_yaml_reads_as_text_is_said_to_be_text(tmp_path, setting, said):
    """YAML (1.1, PyYAML) reads `learning_rate: 1e-4` as the text '1e-4' (the module docstring's own example did
    this): the refusal said that '1e-4' must be a finite number, and not why it was not one."""
    path = tmp_path / "experiment.yaml"
    path.write_text(f"name: x\nencoder: some-org/some-encoder\ntasks: [rte]\nsetups: [head]\n{setting}\n")
    if setting.startswith("setups"):
        path.write_text(path.read_text().replace("setups: [head]\n", ""))
    with pytest.raises(ExperimentSpecError, match=re.escape(said)):
        ExperimentSpec.load(path)


def _aliases(levels: int) -> str:
    """A YAML flow mapping whose last anchor stands for 10**levels values (each level: ten aliases of the one
    before)."""
    anchors = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    anchors += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "{" + ", ".join(anchors) + "}"


@pytest.mark.parametrize("key", ["description", "tasks", "training", "select"])
def test_yaml_aliases_that_expand_to_billions_of_values_are_refused_at_once(tmp_path, key):
    """`description: {a0: &a0 [x, ...], a1: &a1 [*a0, ...], ...}` (a short file, 10**9 values once read): the
    refusal's repr of the value ran for hours; every key that printed what it got did the same."""
    path = tmp_path / "experiment.yaml"
    lines = {"name": "x", "encoder": "some-org/some-encoder", "tasks": "[rte]", "setups": "[head]"}
    lines[key] = _aliases(9)
    path.write_text("".join(f"{name}: {value}\n" for name, value in lines.items()))
    with pytest.raises(ExperimentSpecError, match=r"stands for more than 100,000 values once its YAML aliases"):
        ExperimentSpec.load(path)


def test_yaml_aliases_of_a_small_mapping_still_work(tmp_path):
    path = tmp_path / "experiment.yaml"
    path.write_text(
        "name: x\nencoder: some-org/some-encoder\ntasks: [rte, cb]\ntraining: &t {max_steps: 3}\n"
        "setups: [{<<: *t, name: head}, {<<: *t, name: st-a}]\n"
    )
    assert [v.training["max_steps"] for v in ExperimentSpec.load(path).variants] == [3, 3]


def test_a_yaml_file_nested_too_deeply_is_an_experiment_spec_error(tmp_path):
    """5000 open brackets: PyYAML's parser recursed past Python's limit, and the RecursionError traceback reached
    the user."""
    path = tmp_path / "experiment.yaml"
    path.write_text("name: x\ndescription: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ExperimentSpecError, match="nests its lists or mappings too deeply to be read"):
        ExperimentSpec.load(path)


@pytest.mark.parametrize(
    "setting, key",
    [
        ("output_dir: >\n  results/x\n", "output_dir"),
        ("data_dir: |\n  data\n", "data_dir"),
        ('data_dir: "d\\0"', "data_dir"),
    ],
)
def test_a_path_with_a_line_break_or_control_character_is_refused(tmp_path, setting, key):
    """`output_dir: >` followed by the path on the next line is 'results/x\\n' (a block scalar keeps its final line
    break): the runner made a folder named 'x\\n' beside the one meant."""
    path = tmp_path / "experiment.yaml"
    path.write_text(f"name: x\nencoder: some-org/some-encoder\ntasks: [rte]\nsetups: [head]\n{setting}\n")
    with pytest.raises(ExperimentSpecError, match=f"{key}: .* holds a line break, tab or other control character"):
        ExperimentSpec.load(path)
