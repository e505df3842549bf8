"""What an experiment's encoder architecture refuses is refused when the file is read (encoder_checks.py), and a
task's own data_files win over the experiment's data_dir (jobs.data_dir_for)."""

import json
import shutil
from pathlib import Path

import pytest
import transformers

from adapterfusion.defaults import default_encoder_path
from adapterfusion.demo import demo_data_dir
from adapterfusion.experiments import ExperimentSpec, ExperimentSpecError
from adapterfusion.experiments.jobs import JobPayload, data_dir_for
from adapterfusion.experiments.plan import plan_jobs
from adapterfusion.experiments.runner import job_payload, run_experiment
from adapterfusion.tasks import instruction_task
from tiny_decoders import tiny_decoder
from tiny_experiments import FAST, SLICE


@pytest.fixture(scope="module")
def tokenizer():
    return transformers.AutoTokenizer.from_pretrained(default_encoder_path())


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory, tokenizer) -> Path:
    path = tmp_path_factory.mktemp("decoders") / "tiny-llama"
    tiny_decoder("llama", vocab_size=tokenizer.vocab_size).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def bart_dir(tmp_path_factory, tokenizer) -> Path:
    config = transformers.BartConfig(
        vocab_size=tokenizer.vocab_size, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
    )  # fmt: skip
    path = tmp_path_factory.mktemp("encdec") / "tiny-bart"
    transformers.BartModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def answers(tmp_path) -> str:
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(instruction_task("answers", data_files={}).to_dict()))
    return str(path)


def spec(**changes):
    return ExperimentSpec.from_dict(
        {"name": "x", "tasks": ["rte"], "setups": ["st-a"], "output_dir": "/tmp/x", **changes}
    )


def test_cls_pooling_on_a_decoder_is_refused_naming_the_entry(llama_dir, tiny_encoder_dir):
    setups = ["st-a", {"name": "head", "pooling": "cls"}]
    with pytest.raises(ExperimentSpecError, match=r"setups\[1\].pooling: 'cls' .* a decoder \(llama\).*pooling: last"):
        spec(encoder=str(llama_dir), setups=setups)
    assert spec(encoder=str(llama_dir), setups=[{"name": "head", "pooling": "last"}]).variants[0].options == {
        "pooling": "last"
    }
    spec(encoder=str(tiny_encoder_dir), setups=setups)  # an encoder's first token has seen the whole input


def test_cls_pooling_on_an_encoder_decoder_is_refused(bart_dir):
    with pytest.raises(ExperimentSpecError, match=r"setups\[0\].pooling: .*an encoder-decoder \(bart\), whose decoder"):
        spec(encoder=str(bart_dir), setups=[{"name": "head", "pooling": "cls"}])


@pytest.mark.parametrize("model, kind", [("encoder", r"an encoder \(bert\)"), ("bart", r"an encoder-decoder \(bart\)")])
def test_a_generation_task_needs_a_decoder(model, kind, tiny_encoder_dir, bart_dir, llama_dir, answers):
    encoder = str(tiny_encoder_dir if model == "encoder" else bart_dir)
    with pytest.raises(ExperimentSpecError, match=rf"tasks\[1\]: 'answers' is a generation task.*{kind}; set encoder"):
        spec(encoder=encoder, tasks=["rte", "answers"], task_files=[answers])
    spec(encoder=str(llama_dir), tasks=["rte", "answers"], task_files=[answers])
    spec(encoder=encoder, tasks=["rte", "answers"], task_files=[answers], setups=[{"name": "st-a", "tasks": ["rte"]}])


def test_span_ablation_refuses_generation_tasks(llama_dir, answers):
    analyses = [{"kind": "span-ablation", "variant": "st-a-rf16"}]
    with pytest.raises(ExperimentSpecError, match=r"analyses\[0\].tasks: \['answers'\] are generation tasks.*no head"):
        spec(encoder=str(llama_dir), tasks=["rte", "answers"], task_files=[answers], analyses=analyses)
    limited = [{**analyses[0], "tasks": ["rte"]}]
    spec(encoder=str(llama_dir), tasks=["rte", "answers"], task_files=[answers], analyses=limited)


def _own_task(tmp_path: Path) -> str:
    (tmp_path / "train.csv").write_text("text,label\ngood,pos\nbad,neg\n")
    task = {"name": "own", "kind": "single", "text_fields": ["text"], "label_names": ["neg", "pos"]}
    (tmp_path / "own.json").write_text(json.dumps({**task, "data_files": {"train": "train.csv"}}))
    return str(tmp_path / "own.json")


def test_own_data_files_win_over_data_dir_for_their_task_only(tmp_path):
    loaded = spec(tasks=["rte", "own"], task_files=[_own_task(tmp_path)], data_dir=str(tmp_path))
    payload = JobPayload(
        "j", "own", "st-a", 1, "out", "out/run", data_dir=loaded.data_dir, task_specs=loaded.task_specs
    )
    assert data_dir_for(payload, "own") is None
    assert data_dir_for(payload, "rte") == str(tmp_path)


def test_houlsby_layer_norm_copies_on_bart_are_refused_and_can_be_left_out(bart_dir, llama_dir):
    """BART applies its LayerNorms inside its blocks: st-a-houlsby's copies failed every job at run time, with a fix
    an experiment file could not give; train_layer_norm: false is that fix."""
    with pytest.raises(ExperimentSpecError, match=r"setups\[0\]: st-a-houlsby trains LayerNorm copies.*bart.*"
                       r"train_layer_norm: false"):  # fmt: skip
        spec(encoder=str(bart_dir), setups=["st-a-houlsby"])
    plain = spec(encoder=str(bart_dir), setups=[{"name": "st-a-houlsby", "train_layer_norm": False}])
    assert plain.variants[0].options["train_layer_norm"] is False
    assert spec(encoder=str(llama_dir), setups=["st-a-houlsby"]).variants[0].setup == "st-a-houlsby"
    with pytest.raises(ExperimentSpecError, match=r"setups\[0\].train_layer_norm: .*expected true or false"):
        spec(setups=[{"name": "st-a-houlsby", "train_layer_norm": "no"}])


def _answers_with_data(tmp_path: Path) -> str:
    """The generation task 'answers' over four rows of prompt and answer (the same in train and validation)."""
    rows = "".join(json.dumps({"prompt": f"q{i} ", "answer": f"a{i}"}) + "\n" for i in range(4))
    for split in ("train", "validation"):
        (tmp_path / f"{split}.jsonl").write_text(rows)
    task = instruction_task("answers", data_files={"train": "train.jsonl", "validation": "validation.jsonl"})
    (tmp_path / "answers.json").write_text(json.dumps(task.to_dict()))
    return str(tmp_path / "answers.json")


def test_generation_jobs_are_given_no_pooling_and_keep_their_hashes(llama_dir, answers):
    """The spec spells a variant's pooling out (the decoder's 'last'), and train() refuses a pooling on a generation
    task: every generation job of an experiment failed. Its run is given none now; the job keeps it in its options
    (and so in its config hash), and the variant's classification job keeps it."""
    loaded = spec(encoder=str(llama_dir), tasks=["rte", "answers"], task_files=[answers])
    jobs = {job.task: job for job in plan_jobs(loaded)}
    assert jobs["answers"].options["pooling"] == "last"  # hashed as before
    assert "pooling" not in job_payload(loaded, jobs["answers"]).options
    assert job_payload(loaded, jobs["rte"]).options["pooling"] == "last"


def test_a_generation_experiment_runs_on_a_decoder(llama_dir, tmp_path):
    """st-a and a fusion of it on a generation task, end to end (each job failed at its start on the pooling the spec
    spelled out for it)."""
    summary = run_experiment(
        {
            "name": "answers",
            "encoder": str(llama_dir),
            "task_files": [_answers_with_data(tmp_path)],
            "tasks": ["answers", "rte"],
            "setups": ["st-a", {"name": "fusion-st-a", "tasks": ["answers"]}],
            "data_dir": str(demo_data_dir()),
            "max_examples": SLICE,
            "training": {**FAST, "max_steps": 1},
            "output_dir": str(tmp_path / "out"),
        },
        progress=False,
        report=False,
    )
    assert summary.ok, summary.failed
    assert sorted(summary.ran) == ["fusion-st-a/answers/seed-42", "st-a-rf16/answers/seed-42", "st-a-rf16/rte/seed-42"]


def test_a_pooling_on_an_entry_of_generation_tasks_only_is_refused(llama_dir, answers):
    """It would choose nothing (a generation task has no head of ours); on an entry that also runs on a
    classification task it is that task's head's pooling."""
    with pytest.raises(ExperimentSpecError, match=r"setups\[1\].pooling: .*st-a-rf16 runs on generation tasks only "
                       r"\(\['answers'\]\).*leave pooling out"):  # fmt: skip
        spec(
            encoder=str(llama_dir),
            tasks=["rte", "answers"],
            task_files=[answers],
            setups=[{"name": "head", "tasks": ["rte"]}, {"name": "st-a", "tasks": ["answers"], "pooling": "mean"}],
        )
    swept = {"name": "st-a", "tasks": ["answers"], "sweep": {"pooling": ["mean", "last"]}}
    with pytest.raises(ExperimentSpecError, match=r"setups\[0\].pooling: .*runs on generation tasks only"):
        spec(encoder=str(llama_dir), tasks=["rte", "answers"], task_files=[answers], setups=[swept])
    mixed = spec(
        encoder=str(llama_dir),
        tasks=["rte", "answers"],
        task_files=[answers],
        setups=[{"name": "st-a", "pooling": "mean"}],
    )
    assert mixed.variants[0].options["pooling"] == "mean"


@pytest.mark.parametrize("saved", ["bare", "classifier"])
def test_a_decoder_saved_without_its_language_model_head_refuses_generation_tasks(saved, tokenizer, tmp_path, answers):
    """AutoModelForCausalLM drew the missing head at random (transformers' load report on stderr said so), and every
    run trained and scored under it. Tied embeddings are that head, and a classification task needs none."""
    cls = transformers.LlamaModel if saved == "bare" else transformers.LlamaForSequenceClassification
    for tied in (False, True):
        config = tiny_decoder("llama", vocab_size=tokenizer.vocab_size, tie_word_embeddings=tied, pad_token_id=0).config
        cls(config).save_pretrained(tmp_path / f"{saved}-{tied}")
        tokenizer.save_pretrained(tmp_path / f"{saved}-{tied}")
    untied, tied_dir = str(tmp_path / f"{saved}-False"), str(tmp_path / f"{saved}-True")
    with pytest.raises(ExperimentSpecError, match=rf"tasks\[1\]: 'answers' is a generation task.*saved as "
                       rf"{cls.__name__}, without that head.*save_pretrained\(folder\)"):  # fmt: skip
        spec(encoder=untied, tasks=["rte", "answers"], task_files=[answers])
    spec(encoder=tied_dir, tasks=["rte", "answers"], task_files=[answers])
    spec(encoder=untied, tasks=["rte"])


def test_a_chat_template_the_tokenizer_cannot_apply_is_refused_when_the_file_is_read(llama_dir, tokenizer, tmp_path):
    """chat_template: true on a tokenizer without a template (or one that raises on a lone user turn) failed every
    job of the task as it encoded its data; the tokenizer alone says so."""
    task = instruction_task("chats", data_files={}, chat_template=True)
    (tmp_path / "chats.json").write_text(json.dumps(task.to_dict()))
    files = [str(tmp_path / "chats.json")]
    with pytest.raises(ExperimentSpecError, match=r"tasks\[1\]: task 'chats' on encoder .*has no chat template"):
        spec(encoder=str(llama_dir), tasks=["rte", "chats"], task_files=files)
    spec(encoder=str(llama_dir), tasks=["rte", "chats"], task_files=files, setups=[{"name": "st-a", "tasks": ["rte"]}])
    for template, works in (("{{ raise_exception('no lone turns') }}", False), ("{{ messages[0]['content'] }}", True)):
        folder = tmp_path / f"templated-{works}"
        shutil.copytree(llama_dir, folder)
        templated = transformers.AutoTokenizer.from_pretrained(folder)
        templated.chat_template = template
        templated.save_pretrained(folder)
        if works:
            spec(encoder=str(folder), tasks=["rte", "chats"], task_files=files)
        else:
            with pytest.raises(ExperimentSpecError, match=r"tasks\[1\]: .*fails on a prompt as one user turn"):
                spec(encoder=str(folder), tasks=["rte", "chats"], task_files=files)


def test_a_tokenizer_with_no_token_to_end_an_answer_refuses_generation_tasks(llama_dir, tmp_path, answers):
    """No eos and no sep token: each generation job failed as it encoded its data."""
    folder = tmp_path / "no-end"
    shutil.copytree(llama_dir, folder)
    endless = transformers.AutoTokenizer.from_pretrained(folder)
    endless.sep_token = endless.eos_token = None
    endless.save_pretrained(folder)
    with pytest.raises(ExperimentSpecError, match=r"tasks\[1\]: task 'answers' on encoder .*no eos or sep token"):
        spec(encoder=str(folder), tasks=["rte", "answers"], task_files=[answers])
    spec(encoder=str(folder), tasks=["rte"])
