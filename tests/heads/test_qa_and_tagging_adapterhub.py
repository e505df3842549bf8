"""The span heads in AdapterHub's format: AdapterHub 1.3.0's QuestionAnsweringHead and TaggingHead, saved by
`adapters` itself (tests/fixtures/adapterhub/span_heads, scripts/make_adapterhub_fixtures_span.py), load into ours
with the logits it recorded (bare, with an adapter, with a fusion); ours export and load back unchanged, and, where
the AdapterHub venv is present, load in `adapters` with the same logits."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel

import adapterfusion as af
from adapterfusion.interop import export_adapterhub
from tolerances import assert_close

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "adapterhub"
SPAN = FIXTURES / "span_heads"
ADAPTERS_PYTHON = ROOT / "benchmarks" / ".venv-adapters" / "bin" / "python"
TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")


def _model() -> af.AdaptedModel:
    model = af.wrap(AutoModel.from_pretrained(FIXTURES / "bert" / "base_model")).eval()
    for name in ("pf", "pf_relu", "pf3"):
        model.load_adapter(FIXTURES / "bert" / "adapters" / name)
    model.load_fusion(FIXTURES / "bert" / "fusions" / "dynamic")
    return model


@pytest.mark.parametrize("fmt", ["bin", "safetensors"])
def test_adapterhub_heads_load_with_the_logits_adapters_recorded(fmt, tmp_path):
    recorded = load_file(str(SPAN / "outputs.safetensors"))
    model = _model()
    weights = {"bin": "pytorch_model_head.bin", "safetensors": "model_head.safetensors"}
    for head in ("qa", "ner"):
        folder = tmp_path / head
        folder.mkdir()
        for name in ("head_config.json", weights[fmt]):
            (folder / name).write_bytes((SPAN / "heads" / head / name).read_bytes())
        assert model.load_head(folder) == head
    assert model.get_head("qa").config == af.QuestionAnsweringHead(layers=1, dropout=0.1)
    assert model.get_head("ner").config == af.TokenClassificationHead(
        num_labels=5, labels=TAGS, layers=2, activation="relu", dropout=0.1
    )
    fusion = model.fusion_names[0]
    inputs = {"input_ids": recorded["input_ids"], "attention_mask": recorded["attention_mask"]}
    with torch.no_grad():
        for setup, active in {"bare": {}, "pf": {"adapter": "pf"}, "fusion_dynamic": {"fusion": fusion}}.items():
            with model.activated(head="qa", **active):
                logits = model(**inputs).logits
            assert_close(logits[..., 0], recorded[f"{setup}.qa.start_logits"], label=f"{setup} start")
            assert_close(logits[..., 1], recorded[f"{setup}.qa.end_logits"], label=f"{setup} end")
            with model.activated(head="ner", **active):
                assert_close(model(**inputs).logits, recorded[f"{setup}.ner.logits"], label=f"{setup} tagging")


@pytest.mark.parametrize(
    "config",
    [
        af.QuestionAnsweringHead(),
        af.QuestionAnsweringHead(layers=2, activation="gelu", dropout=0.0),
        af.TokenClassificationHead(num_labels=3, labels=("O", "B-X", "I-X"), layers=2, activation="relu"),
        af.TokenClassificationHead(num_labels=4),
    ],
)
def test_export_writes_adapterhubs_head_type_and_loads_back(config, tmp_path):
    source = af.wrap(AutoModel.from_pretrained(FIXTURES / "bert" / "base_model"))
    source.add_head("h", config)
    folder = export_adapterhub(source, "head", "h", tmp_path / "h")
    written = json.loads((Path(folder) / "head_config.json").read_text())["config"]
    assert written["head_type"] == ("question_answering" if config.kind == "question_answering" else "tagging")
    assert "use_pooler" not in written and "bias" not in written  # AdapterHub's span heads take neither
    target = af.wrap(AutoModel.from_pretrained(FIXTURES / "bert" / "base_model"))
    target.load_head(folder)
    expected = config if config.labels or config.kind == "question_answering" else None
    if expected is not None:
        assert target.get_head("h").config == expected
    for p, q in zip(source.get_head("h").parameters(), target.get_head("h").parameters(), strict=True):
        assert torch.equal(p, q)


def test_a_question_answering_head_of_other_than_two_outputs_is_refused(tmp_path):
    folder = tmp_path / "qa"
    folder.mkdir()
    document = json.loads((SPAN / "heads" / "qa" / "head_config.json").read_text())
    document["config"]["num_labels"] = 3
    (folder / "head_config.json").write_text(json.dumps(document))
    (folder / "model_head.safetensors").write_bytes((SPAN / "heads" / "qa" / "model_head.safetensors").read_bytes())
    with pytest.raises(af.ConfigError, match="only 2"):
        _model().load_head(folder)


_CHECK = """
import sys, torch
from adapters import AutoAdapterModel
out = sys.argv[1]
expected = torch.load(out + "/expected.pt", weights_only=True)
model = AutoAdapterModel.from_pretrained(sys.argv[2]).eval()
model.load_adapter(out + "/pf", load_as="pf", use_safetensors=True)
model.set_active_adapters("pf")
worst = 0.0
with torch.no_grad():
    for head in ("qa", "ner"):
        model.load_head(out + "/" + head, use_safetensors=True)
        output = model(input_ids=expected["ids"], attention_mask=expected["mask"], head=head)
        logits = torch.stack([output.start_logits, output.end_logits], -1) if head == "qa" else output.logits
        worst = max(worst, (logits - expected[head]).abs().max().item())
print(worst)
"""


@pytest.mark.skipif(not ADAPTERS_PYTHON.is_file(), reason="the AdapterHub venv (benchmarks/.venv-adapters) is absent")
def test_exported_heads_load_in_adapterhub_with_the_same_logits(tmp_path):
    torch.manual_seed(0)
    model = _model()
    model.add_head("qa", af.QuestionAnsweringHead(layers=2))
    model.add_head("ner", af.TokenClassificationHead(num_labels=5, labels=TAGS))
    for head in ("qa", "ner"):
        for parameter in model.get_head(head).parameters():
            torch.nn.init.normal_(parameter, std=0.1)
        export_adapterhub(model, "head", head, tmp_path / head)
    export_adapterhub(model, "adapter", "pf", tmp_path / "pf")
    ids = torch.randint(5, 100, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0
    expected = {"ids": ids, "mask": mask}
    with torch.no_grad():
        for head in ("qa", "ner"):
            with model.activated(adapter="pf", head=head):
                expected[head] = model(input_ids=ids, attention_mask=mask).logits
    torch.save(expected, tmp_path / "expected.pt")
    result = subprocess.run(
        [str(ADAPTERS_PYTHON), "-c", _CHECK, str(tmp_path), str(FIXTURES / "bert" / "base_model")],
        capture_output=True,
        text=True,
        timeout=300,
        env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert float(result.stdout.split()[-1]) <= 1e-5
