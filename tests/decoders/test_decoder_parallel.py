"""forward_parallel on decoders and encoder-decoders: every adapter route and the fusion route, each with its own
head, in one forward, each equal (float64) to activating that route alone; on T5 and BART the decoder's inputs are
repeated per route with the encoder's."""

from __future__ import annotations

import pytest
import torch

import adapterfusion as af
from tiny_decoders import tiny_decoder, tiny_decoder_inputs
from tolerances import assert_close


@pytest.mark.parametrize("model_type", ["llama", "gpt2", "t5", "bart"])
@pytest.mark.parametrize("share_encoder_prefix", [True, False])
def test_each_route_equals_it_alone(model_type: str, share_encoder_prefix: bool) -> None:
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(4))
        model.add_head(name, af.ClassificationHead(num_labels=2, pooling="last"))
    model.add_fusion("f", ["a", "b"])
    model.add_head("f", af.ClassificationHead(num_labels=3, pooling="last"))
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".adapters." in name or ".fusions." in name or name.startswith("heads."):
                parameter.add_(torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype) * 0.3)
    inputs = tiny_decoder_inputs(model_type)  # T5/BART: with decoder_input_ids as given; row 1 right-padded
    with torch.no_grad():
        out = model.forward_parallel("f", share_encoder_prefix=share_encoder_prefix, **inputs)
        for name in ("a", "b"):
            with model.activated(adapter=name, head=name):
                assert_close(out.adapter_logits[name], model(**inputs).logits, label=name)
        with model.activated(fusion="f", head="f"):
            assert_close(out.fusion_logits, model(**inputs).logits, label="fusion")
    assert out.fusion_logits.shape == (2, 3)
