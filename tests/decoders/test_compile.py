"""torch.compile over adapted models: on a GPU, decoding is launch-bound, and CUDA graphs (a static cache, which
transformers' generate then compiles; or torch.compile(mode="reduce-overhead")) are what make it fast. That needs
the sites to trace as part of one graph: a graph break at every site would cut the graph into a piece per layer.

The eager backend traces without generating code, so these run in seconds on a CPU."""

from __future__ import annotations

import contextlib
import logging
import re

import pytest
import torch

import adapterfusion as af
from tiny_decoders import tiny_decoder, tiny_decoder_inputs
from tiny_models import tiny_encoder, tiny_inputs
from tolerances import assert_close


def _adapted(module: torch.nn.Module, active: str) -> af.AdaptedModel:
    model = af.wrap(module)
    for name in "abc":
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
        for parameter in model.adapter_parameters(name):
            torch.nn.init.normal_(parameter, std=0.1)
    model.add_fusion("f", list("abc"), af.FusionConfig.dynamic(value_init_noise=0.05))
    model.activate(**({"fusion": "f"} if active == "fusion" else {"adapter": "a"}))
    return model.eval()


CASES = [  # (model, active, inside inference_cache): each site kind and both fusion paths (lane/fold, general)
    ("llama", "adapter", False),
    ("llama", "fusion", False),
    ("llama", "fusion", True),
    ("gpt2", "fusion", False),
    ("t5", "fusion", False),
    ("t5", "fusion", True),
    ("bart", "fusion", True),
    ("bert", "fusion", False),
    ("bert", "fusion", True),
]


@pytest.mark.parametrize(("model_type", "active", "cached"), CASES)
def test_an_adapted_forward_compiles_as_one_graph(model_type: str, active: str, cached: bool) -> None:
    """fullgraph=True makes any graph break an error; the eager backend traces without generating code."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    if model_type == "bert":
        model, inputs = _adapted(tiny_encoder("bert"), active), tiny_inputs(batch=2, seq=7)
    else:
        model, inputs = _adapted(tiny_decoder(model_type), active), tiny_decoder_inputs(model_type)
        if "decoder_input_ids" in inputs:  # T5/BART make a DynamicCache, which torch 2.11 cannot trace (deepcopy)
            inputs["use_cache"] = False
    with torch.no_grad(), model.inference_cache() if cached else contextlib.nullcontext():
        eager = model.model(**inputs)
        compiled = torch.compile(model.model, backend="eager", fullgraph=True)(**inputs)
    first = eager.logits if hasattr(eager, "logits") else eager.last_hidden_state
    again = compiled.logits if hasattr(compiled, "logits") else compiled.last_hidden_state
    assert_close(again, first)


@pytest.mark.parametrize("model_type", ["llama", "t5"])
def test_generation_with_a_static_cache_is_generation_with_the_dynamic_one(model_type: str) -> None:
    """A static cache is what transformers compiles on a GPU; the tokens must not depend on the cache kind."""
    torch.manual_seed(0)
    model = _adapted(tiny_decoder(model_type, dtype=torch.float64), "fusion")
    inputs = tiny_decoder_inputs(model_type, padding_side="left")
    inputs.pop("decoder_input_ids", None)
    options = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        dynamic = model.generate(**inputs, **options)
        static = model.generate(**inputs, cache_implementation="static", **options)
    assert torch.equal(static, dynamic)


@pytest.mark.parametrize("recording", [False, True])
def test_generate_compiles_its_decode_step_as_one_graph(recording: bool) -> None:
    """transformers compiles generate()'s decode step (self.__call__, hooks included) for a static cache; a graph
    break there (a host read of the cache's length, once done on every step) splits the CUDA graph and syncs per
    token. Dynamo counts breaks (fullgraph=True does not see one in a forward pre-hook); outside a recording there
    must be none. A recording reads where each step starts, so it may break; it must still record every position."""
    from torch._dynamo.utils import counters
    from transformers import CompileConfig

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = _adapted(tiny_decoder("llama"), "fusion")
    inputs = tiny_decoder_inputs("llama", padding_side="left")
    config = CompileConfig(backend="eager", dynamic=False, mode=None)
    config._compile_all_devices = True  # transformers compiles on CUDA only unless told
    options = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0)
    with torch.no_grad(), model.recording_fusion_attentions(recording) as weights:
        compiled = model.generate(**inputs, cache_implementation="static", compile_config=config, **options)
    assert counters["stats"]["unique_graphs"] >= 1  # it did compile
    if not recording:
        assert not counters["graph_break"], dict(counters["graph_break"])
    torch._dynamo.reset()
    with torch.no_grad():
        plain = model.generate(**inputs, **options)
    assert torch.equal(compiled, plain)
    if recording:
        assert weights is not None
        length = inputs["input_ids"].shape[1] + 3  # the last token is not run
        assert {tuple(w.shape[-2:]) for w in weights.values()} == {(length, 3)}


@pytest.mark.parametrize("active", ["adapter", "fusion"])
def test_a_compiled_step_guards_no_object_through_two_sites(active: str) -> None:
    """A compiled decode step checks its guards before every token, and an object the sites share (the runtime,
    their spec, its kind) read through each site costs a Python guard per site that it is one object (torch's object
    aliasing guards: 121 of them for one adapter on a 30-layer Llama, 33 now, the residual hooks' own). Inside
    inference_cache() a site reads its lane from its own attributes only."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _adapted(tiny_decoder("llama"), active)
    inputs = tiny_decoder_inputs("llama")
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.extend(record.getMessage().splitlines())

    handler = Collect()
    guards_log = logging.getLogger("torch._dynamo.guards.__guards")
    torch._logging.set_logs(guards=True)
    guards_log.addHandler(handler)
    try:
        with torch.no_grad(), model.inference_cache():
            model.model(**inputs)  # the eager prompt step hands each site its lane, as generate's first step does
            torch.compile(model.model, backend="eager", fullgraph=True)(**inputs)
    finally:
        guards_log.removeHandler(handler)
        torch._logging.set_logs()
    assert any("TENSOR_MATCH" in line for line in lines), "no guards were logged: the check would see nothing"
    across = [
        line
        for line in lines
        if " is " in line and len(set(re.findall(r"_modules\['layers'\]\._modules\['(\d+)'\]", line))) > 1
    ]
    assert not across, across[:3]
