"""AdapterHub parity on decoders: adapters and fusions saved by AdapterHub `adapters` 1.3.0 (transformers 4.57.6) on
tiny random decoders load into our wrapped model under transformers 5 and give AdapterHub's own logits, hidden states
and fusion weights, frozen in tests/fixtures/adapterhub/decoders (its README says how they were made). Exported back to
AdapterHub's format, they load again to the same outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

import adapterfusion as af
from adapterfusion.interop import export_adapterhub
from tolerances import assert_close

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "adapterhub" / "decoders"
SEQ2SEQ = ("t5", "bart", "mt5", "mbart", "plbart")
DECODERS = ("gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "gptj", *SEQ2SEQ)
SETUPS = ("pf", "pf_tanh", "pf_gelu", "hb", "hb_relu", "fusion_pf_dynamic", "fusion_hb_static")
# The encoder-decoders also: Pfeiffer adapters after cross-attention as well (cross_adapter=True), and their fusion.
CROSS_SETUPS = ("pf_cross", "pf_cross_tanh", "fusion_pf_cross_dynamic")
POSITIONS = {"mh_adapter": "attention", "cross_adapter": "cross", "output_adapter": "output"}
# On Gemma2/3 AdapterHub's Pfeiffer normalises x + r with the *last* layer's feed-forward post-norm in every layer (a
# defect of its hooks, docs/adapterhub-decoders.md); ours uses each layer's own, so only Houlsby setups compare there.
HOULSBY_SETUPS = ("hb", "hb_relu", "fusion_hb_static")
# transformers 4.57 and 5 compute the bare Gemma3 text model differently by up to 8e-8: compare it at float32's row.
# T5 and mT5: up to 6.9e-7 and 2.5e-6 between the versions, from their first layer on.
# GPT-J's LM head casts its logits to float32, in both libraries.
PRECISION = {"gemma3_text": torch.float32, "t5": torch.float32, "mt5": torch.float32, "gptj": torch.float32}


def _loaded(model_type: str) -> tuple[af.AdaptedModel, dict, dict[str, torch.Tensor]]:
    folder = FIXTURES / model_type
    manifest = json.loads((folder / "manifest.json").read_text())
    auto = getattr(transformers, manifest["auto_class"])  # AutoModelForCausalLM, or ...Seq2SeqLM (encoder-decoders)
    base = auto.from_pretrained(folder / "base_model", dtype=torch.float64, attn_implementation="eager")
    model = af.wrap(base.eval())
    for name, entry in manifest["adapters"].items():
        assert model.load_adapter(folder / entry["dir"]) == name
    for entry in manifest["fusions"].values():
        model.load_fusion(folder / entry["dir"])
    return model, manifest, load_file(folder / "outputs.safetensors")


def _activate(model: af.AdaptedModel, manifest: dict, setup: str) -> list[str] | None:
    """Activate `setup`; the adapters it fuses, in AdapterHub's order, for a fusion."""
    if not setup.startswith("fusion_"):
        model.activate(adapter=setup)
        return None
    adapters = manifest["fusions"][setup.removeprefix("fusion_")]["adapters"]
    model.activate(fusion="-".join(adapters))
    return adapters


def test_every_decoder_row_whose_adapterhub_files_translate_has_fixtures_here() -> None:
    translated = {t for t, spec in af.ARCHITECTURES.items() if spec.in_adapterhub and spec.pools_last_token}
    assert translated == set(DECODERS)


@pytest.mark.parametrize("model_type", DECODERS)
def test_adapterhub_decoder_pieces_give_adapterhubs_outputs(model_type: str) -> None:
    model, manifest, expected = _loaded(model_type)
    inputs = {key: expected[key] for key in ("input_ids", "attention_mask", "decoder_input_ids") if key in expected}
    dtype = PRECISION.get(model_type, torch.float64)
    with torch.no_grad():
        assert_close(model(**inputs).logits, expected["bare.logits"], dtype=dtype, label="bare")
        setups = HOULSBY_SETUPS if model_type.startswith("gemma") else SETUPS
        for setup in (*setups, *CROSS_SETUPS) if model_type in SEQ2SEQ else setups:
            fused = _activate(model, manifest, setup)
            output = model(**inputs, output_hidden_states=True, output_fusion_attentions=fused is not None)
            assert_close(output.logits, expected[f"{setup}.logits"], dtype=dtype, label=setup)
            assert torch.equal(output.logits.argmax(-1), expected[f"{setup}.logits"].argmax(-1))  # greedy tokens
            for states in ("hidden_states", "encoder_hidden_states", "decoder_hidden_states"):  # each stack's layer 0
                if f"{setup}.{states}.1" in expected:
                    hidden = expected[f"{setup}.{states}.1"]
                    assert_close(getattr(output, states)[1], hidden, dtype=dtype, label=f"{setup} {states} 1")
            if fused is not None:
                recorded = output.fusion_attentions_by_site
                for key, weights in expected.items():
                    if key.startswith(f"{setup}.fusion_attention."):
                        layer, location = key.split(".")[-2:]
                        site = (int(layer.removeprefix("layer")), POSITIONS[location])
                        assert_close(recorded[site], weights, dtype=dtype, label=key)


@pytest.mark.parametrize("model_type", ["llama", "gpt2", "gptj"])
def test_decoder_pieces_exported_to_adapterhub_load_back_to_the_same_outputs(model_type: str, tmp_path: Path) -> None:
    model, manifest, expected = _loaded(model_type)
    fusion = "pf-pf_tanh-pf_gelu"
    for name in ("pf", "pf_tanh", "pf_gelu"):
        export_adapterhub(model, "adapter", name, tmp_path / name)
    export_adapterhub(model, "fusion", fusion, tmp_path / "fusion")
    base = AutoModelForCausalLM.from_pretrained(
        FIXTURES / model_type / "base_model", dtype=torch.float64, attn_implementation="eager"
    )
    again = af.wrap(base)
    for name in ("pf", "pf_tanh", "pf_gelu"):
        again.load_adapter(tmp_path / name)
    again.load_fusion(tmp_path / "fusion")
    again.eval().activate(fusion=fusion)
    inputs = {"input_ids": expected["input_ids"], "attention_mask": expected["attention_mask"]}
    with torch.no_grad():
        dtype = PRECISION.get(model_type, torch.float64)
        assert_close(again(**inputs).logits, expected["fusion_pf_dynamic.logits"], dtype=dtype)


@pytest.mark.parametrize("model_type", SEQ2SEQ)
def test_cross_attention_pieces_exported_to_adapterhub_load_back(model_type: str, tmp_path: Path) -> None:
    model, manifest, expected = _loaded(model_type)
    names, fusion = ("pf_cross", "pf_cross_tanh"), "pf_cross-pf_cross_tanh"
    for name in names:
        export_adapterhub(model, "adapter", name, tmp_path / name)
        written = json.loads((tmp_path / name / "adapter_config.json").read_text())["config"]
        assert written["cross_adapter"] is True and written["output_adapter"] is True and not written["mh_adapter"]
    export_adapterhub(model, "fusion", fusion, tmp_path / "fusion")
    base = transformers.AutoModelForSeq2SeqLM.from_pretrained(
        FIXTURES / model_type / "base_model", dtype=torch.float64, attn_implementation="eager"
    )
    again = af.wrap(base)
    for name in names:
        again.load_adapter(tmp_path / name)
    again.load_fusion(tmp_path / "fusion")
    again.eval().activate(fusion=fusion)
    inputs = {key: expected[key] for key in ("input_ids", "attention_mask", "decoder_input_ids")}
    with torch.no_grad():
        assert_close(again(**inputs).logits, expected["fusion_pf_cross_dynamic.logits"], dtype=torch.float32)


@pytest.mark.parametrize("model_type", ["gemma", "phi3", "marian", "pegasus", "m2m_100"])
def test_decoders_adapterhub_lacks_are_refused_by_name(model_type: str, tmp_path: Path) -> None:
    from tiny_decoders import tiny_decoder

    model = af.wrap(tiny_decoder(model_type))
    model.add_adapter("a")
    with pytest.raises(af.UnsupportedArchitectureError, match="own format"):
        export_adapterhub(model, "adapter", "a", tmp_path / "a")
