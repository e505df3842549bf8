"""AdapterHub's classification and regression heads on decoders and encoder-decoders. Heads saved by `adapters` 1.3.0
on tiny GPT-2, Llama, BART and T5 (tests/fixtures/adapterhub/decoder_heads, whose README says how) read the last
non-padding token there (the last end-of-sequence token on BART and T5); they load into ours as pooling='last' heads
with AdapterHub's logits, export back to the files AdapterHub saved, and ours load in `adapters` with our logits where
its venv is present. A head reading another token than AdapterHub's does on a model is refused on export."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from safetensors.torch import load_file
from transformers import AutoModel

import adapterfusion as af
from adapterfusion.heads.config import HeadConfig
from adapterfusion.interop import export_adapterhub
from adapterfusion.interop.adapterhub import piece_to_adapterhub
from tolerances import assert_close

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "adapterhub" / "decoder_heads"
BERT = ROOT / "tests" / "fixtures" / "adapterhub" / "bert" / "base_model"
SCRIPT = ROOT / "scripts" / "make_adapterhub_fixtures_decoder_heads.py"
ADAPTERS_PYTHON = ROOT / "benchmarks" / ".venv-adapters" / "bin" / "python"
MODEL_TYPES = ("gpt2", "llama", "bart", "t5")
ADAPTER = "sst"  # the adapter, and the classification head saved in its folder
# transformers 4.57 (the fixture's) and 5 compute the bare T5 differently by up to 7e-7 (decoders/README.md).
PRECISION = {"t5": torch.float32}


def _manifest(model_type: str) -> dict[str, Any]:
    return json.loads((FIXTURES / model_type / "manifest.json").read_text())


def _base(model_type: str, dtype: torch.dtype = torch.float64) -> af.AdaptedModel:
    auto = getattr(transformers, _manifest(model_type)["auto_class"])  # ...CausalLM, or ...Seq2SeqLM on BART and T5
    base = auto.from_pretrained(FIXTURES / model_type / "base_model", dtype=dtype, attn_implementation="eager")
    return af.wrap(base.eval())


def _loaded(model_type: str, dtype: torch.dtype = torch.float64) -> af.AdaptedModel:
    """The fixture's base model with AdapterHub's adapter and heads loaded by our loaders."""
    model = _base(model_type, dtype)
    assert model.load_adapter(FIXTURES / model_type / "adapters" / ADAPTER) == ADAPTER
    for name, entry in _manifest(model_type)["heads"].items():
        assert model.load_head(FIXTURES / model_type / entry["dir"]) == name
    return model


def _expected_config(entry: dict[str, Any]) -> HeadConfig:
    """The head AdapterHub built, as ours: the same layers and dropout, reading the last non-padding token."""
    settings = dict(layers=entry["layers"], dropout=entry["dropout"], pooling="last")
    if entry["num_labels"] == 1:
        return af.RegressionHead(**settings)
    labels = tuple(entry["id2label"][str(i)] for i in range(entry["num_labels"]))
    return af.ClassificationHead(
        num_labels=entry["num_labels"], labels=labels, activation=entry["activation_function"], **settings
    )


def _logits(model: af.AdaptedModel, inputs: dict[str, torch.Tensor], head: str, adapter: str | None) -> torch.Tensor:
    with torch.no_grad(), model.activated(head=head, adapter=adapter):
        logits = model(**inputs).logits
    return logits.unsqueeze(-1) if logits.dim() == 1 else logits  # a regression head's [batch] is adapters' [batch, 1]


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_adapterhub_heads_load_as_last_token_heads_with_adapterhubs_logits(model_type: str) -> None:
    model = _loaded(model_type)
    recorded = load_file(FIXTURES / model_type / "outputs.safetensors")
    inputs = {key: recorded[key] for key in ("input_ids", "attention_mask")}
    dtype = PRECISION.get(model_type, torch.float64)
    for name, entry in _manifest(model_type)["heads"].items():
        assert model.get_head(name).config == _expected_config(entry)
        for setup, adapter in {"bare": None, ADAPTER: ADAPTER}.items():
            logits, expected = _logits(model, inputs, name, adapter), recorded[f"{setup}.{name}.logits"]
            assert_close(logits, expected, dtype=dtype, label=f"{model_type} {setup} {name}")
            assert torch.equal(logits.argmax(-1), expected.argmax(-1))


def test_under_left_padding_ours_reads_the_same_last_real_token() -> None:
    """adapters counts non-pad tokens, so on a left-padded row it reads a position as many tokens too early as there
    is padding; ours reads the last real token. Llama's rotary positions are relative, so the left-padded row gives the
    right-padded logits, to float32 precision: transformers computes the rotary angles in float32 (and its float64
    eager attention gives NaN on fully padded rows)."""
    model = _loaded("llama", torch.float32)
    recorded = load_file(FIXTURES / "llama" / "outputs.safetensors")
    ids, mask = recorded["input_ids"], recorded["attention_mask"]
    shift = int((mask[1] == 0).sum())
    left = {"input_ids": ids.clone(), "attention_mask": mask.clone()}  # row 1's padding moved to its start
    for value in left.values():
        value[1] = value[1].roll(shift)
    assert left["attention_mask"][1, :shift].eq(0).all()
    logits = _logits(model, left, ADAPTER, ADAPTER)
    assert_close(logits, recorded[f"{ADAPTER}.{ADAPTER}.logits"], dtype=torch.float32)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_imported_heads_export_to_the_files_adapterhub_saved_and_load_back(model_type: str, tmp_path: Path) -> None:
    model = _loaded(model_type)
    for name, entry in _manifest(model_type)["heads"].items():
        folder = export_adapterhub(model, "head", name, tmp_path / name)
        theirs = FIXTURES / model_type / entry["dir"]
        written = json.loads((folder / "head_config.json").read_text())
        saved = json.loads((theirs / "head_config.json").read_text())
        # adapters saved dropout_prob None (the model's default); ours writes the value that default resolved to.
        assert written["config"] == {**saved["config"], "dropout_prob": entry["dropout"]}
        for key in ("model_class", "model_type", "hidden_size", "name", "version"):
            assert written[key] == saved[key], key
        ours, adapters_own = load_file(folder / "model_head.safetensors"), load_file(theirs / "model_head.safetensors")
        assert ours.keys() == adapters_own.keys()
        for key, value in ours.items():
            assert torch.equal(value, adapters_own[key].to(value.dtype)), key

        again = _base(model_type)
        assert again.load_head(folder) == name
        assert again.get_head(name).config == model.get_head(name).config
        for (key, p), (_, q) in zip(
            model.get_head(name).state_dict().items(), again.get_head(name).state_dict().items(), strict=True
        ):
            assert torch.equal(p, q), key


@pytest.mark.parametrize("model_type", ["gpt2", "bart"])
@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_a_decoder_head_pooling_another_token_is_refused_on_export(model_type: str, pooling: str, tmp_path) -> None:
    model = _base(model_type)
    model.add_head("h", af.ClassificationHead(num_labels=2, pooling="last"))
    piece = model.export_piece("head", "h")
    piece = dataclasses.replace(piece, config=af.ClassificationHead(num_labels=2, pooling=pooling))
    with pytest.raises(af.ConfigError, match=f"pooling={pooling!r}.*pooling='last'"):
        piece_to_adapterhub(piece, tmp_path / "h", model.layout())
    assert not (tmp_path / "h").exists()
    if pooling == "mean":  # a head our decoder holds; a 'cls' one it refuses to hold at all
        model.add_head("m", af.RegressionHead(pooling="mean"))
        with pytest.raises(af.ConfigError, match="pooling='last'"):
            export_adapterhub(model, "head", "m", tmp_path / "m")


def test_a_decoder_multiple_choice_head_is_refused_on_export(tmp_path: Path) -> None:
    model = _base("gpt2")
    model.add_head("mc", af.MultipleChoiceHead(num_labels=4, pooling="last"))
    with pytest.raises(af.ConfigError, match="no multiple-choice head"):
        export_adapterhub(model, "head", "mc", tmp_path / "mc")


def test_an_encoder_head_still_exports_from_cls_and_refuses_last(tmp_path: Path) -> None:
    model = af.wrap(AutoModel.from_pretrained(BERT)).eval()
    model.add_head("c", af.ClassificationHead(num_labels=2, labels=("no", "yes"), pooling="cls"))
    model.add_head("l", af.ClassificationHead(num_labels=2, pooling="last"))
    again = af.wrap(AutoModel.from_pretrained(BERT)).eval()
    again.load_head(export_adapterhub(model, "head", "c", tmp_path / "c"))
    assert again.get_head("c").config == model.get_head("c").config
    with pytest.raises(af.ConfigError, match="pooling='last'.*token 0.*pooling='cls'"):
        export_adapterhub(model, "head", "l", tmp_path / "l")


_CHECK = """
import sys
from pathlib import Path
import torch
sys.path.insert(0, sys.argv[1])
from make_adapterhub_fixtures_decoder_heads import adapter_model, head_logits
fixtures, out = Path(sys.argv[2]), Path(sys.argv[3])
inputs = torch.load(out / "inputs.pt", weights_only=True)
got = {}
for model_type, given in inputs.items():
    model = adapter_model(fixtures / model_type / "base_model")
    model.load_adapter(str(out / model_type / "sst"), load_as="sst", with_head=False, use_safetensors=True)
    model.load_head(str(out / model_type / "fresh"), use_safetensors=True)
    model = model.to(torch.float64).eval()
    model.set_active_adapters("sst")
    got[model_type] = head_logits(model, given, "fresh")
torch.save(got, out / "got.pt")
"""


@pytest.mark.slow
@pytest.mark.skipif(not ADAPTERS_PYTHON.is_file(), reason="the AdapterHub venv (benchmarks/.venv-adapters) is absent")
def test_our_decoder_heads_load_in_adapterhub_with_our_logits(tmp_path: Path) -> None:
    inputs, ours = {}, {}
    for model_type in MODEL_TYPES:
        model = _loaded(model_type)
        model.add_head("fresh", af.ClassificationHead(num_labels=2, layers=2, activation="relu", pooling="last"))
        with torch.no_grad():  # float32 values: adapters loads them into its float32 model before casting it
            for parameter in model.get_head("fresh").parameters():
                parameter.copy_(torch.randn(parameter.shape).mul(0.3))
        export_adapterhub(model, "adapter", ADAPTER, tmp_path / model_type / ADAPTER)
        export_adapterhub(model, "head", "fresh", tmp_path / model_type / "fresh")
        recorded = load_file(FIXTURES / model_type / "outputs.safetensors")
        inputs[model_type] = {key: recorded[key] for key in ("input_ids", "attention_mask")}
        ours[model_type] = _logits(model, inputs[model_type], "fresh", ADAPTER)
    torch.save(inputs, tmp_path / "inputs.pt")
    result = subprocess.run(
        [str(ADAPTERS_PYTHON), "-c", _CHECK, str(SCRIPT.parent), str(FIXTURES), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    theirs = torch.load(tmp_path / "got.pt", weights_only=True)
    for model_type, logits in ours.items():
        dtype = PRECISION.get(model_type, torch.float64)
        assert_close(theirs[model_type], logits, dtype=dtype, label=f"{model_type} in adapters")
