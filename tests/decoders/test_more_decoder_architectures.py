"""The decoder rows beyond issue #23's (tests/tiny_decoders.py EXTRA_DECODER_CONFIGS). test_decoder_sites.py checks
their sites against the hand computation, fusion's fast path and cached generation, as for every decoder row; here,
what that module does not: each tiny config is the shape the others are, and a saved setup and a classification head
work on each.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_decoder_sites import _fused, _generating, _left_padded

import adapterfusion as af
from tiny_decoders import EXTRA_DECODER_CONFIGS, HIDDEN, LAYERS, tiny_decoder, tiny_decoder_config, tiny_decoder_inputs
from tolerances import assert_close

DECODERS = tuple(EXTRA_DECODER_CONFIGS)


def test_every_extra_tiny_decoder_is_an_own_format_decoder_row_of_the_common_shape() -> None:
    assert all(af.ARCHITECTURES[t].causal and not af.ARCHITECTURES[t].in_adapterhub for t in DECODERS)
    for model_type in DECODERS:
        config = tiny_decoder_config(model_type)
        assert (config.model_type, config.hidden_size, config.num_hidden_layers) == (model_type, HIDDEN, LAYERS)


@pytest.mark.parametrize("model_type", DECODERS)
def test_a_setup_saves_and_loads_to_the_same_outputs(model_type: str, tmp_path: Path) -> None:
    model = _fused(model_type).eval()
    inputs = tiny_decoder_inputs(model_type)
    with torch.no_grad():
        expected = model(**inputs).logits
    model.save_pretrained(tmp_path / "setup")
    again = af.AdaptedModel.from_pretrained(tiny_decoder(model_type, dtype=torch.float64), tmp_path / "setup").eval()
    assert again.active_fusion == "f" and again.adapter_names == model.adapter_names
    with torch.no_grad():
        assert torch.equal(again(**inputs).logits, expected)


@pytest.mark.parametrize("model_type", DECODERS)
def test_a_classification_head_pools_each_rows_last_token(model_type: str) -> None:
    """Left-padded rows: each row's logits equal the head on that row alone, unpadded."""
    model = _generating(model_type)
    model.add_head("cls", af.ClassificationHead(num_labels=3, pooling="last"))
    model.activate(fusion="f", head="cls")
    inputs = _left_padded(model_type)
    with torch.no_grad():
        logits = model(**inputs).logits
        assert logits.shape == (2, 3)
        for row, (ids, mask) in enumerate(zip(inputs["input_ids"], inputs["attention_mask"], strict=True)):
            alone = model(input_ids=ids[mask.bool()][None]).logits[0]
            assert_close(logits[row], alone, dtype=torch.float64, label=f"row {row}")
