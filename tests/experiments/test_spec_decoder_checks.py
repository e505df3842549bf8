"""What an experiment's encoder architecture refuses is refused when the file is read (encoder_checks.py), and a
task's own data_files win over the experiment's data_dir (jobs.data_dir_for)."""

import json
from pathlib import Path

import pytest
import transformers

from adapterfusion.defaults import default_encoder_path
from adapterfusion.experiments import ExperimentSpec, ExperimentSpecError
from adapterfusion.experiments.jobs import JobPayload, data_dir_for
from adapterfusion.tasks import instruction_task
from tiny_decoders import tiny_decoder


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
