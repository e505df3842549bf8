"""AdapterHub parity of composition blocks: Stack, Average, BatchSplit, Parallel and average_adapter run by
`adapters` 1.3.0 on the frozen tiny BERT, Llama and GPT-2 of tests/fixtures/adapterhub (outputs frozen in
tests/fixtures/adapterhub/blocks by scripts/make_adapterhub_fixtures_blocks.py) against ours on the same pieces.

Two documented differences (docs/adapterhub.md): AdapterHub's Average divides its weighted sum by the number of
adapters, so its Average(weights=w) is ours with weights w / N and normalize_weights=False; and a Stack inside
BatchSplit or Parallel, where AdapterHub places the input twice, is ours as the Stack alone on those rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from safetensors.torch import load_file
from transformers import AutoModel

import adapterfusion as af
from tolerances import assert_close

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "adapterhub"


def _adapterhub_average(*adapters: str, weights: list[float] | None = None) -> af.Average:
    """Ours for AdapterHub's Average(*adapters, weights=weights): its normalised weights, divided by N."""
    count = len(adapters)
    weights = weights or [1.0] * count
    return af.Average(*adapters, weights=[w / sum(weights) / count for w in weights], normalize_weights=False)


BERT = {
    "stack_pf_pf3": af.Stack("pf", "pf3"),
    "stack_relu_pf3_pf": af.Stack("pf_relu", "pf3", "pf"),
    "stack_pf_hb": af.Stack("pf", "hb"),
    "average_pf_relu_pf3": _adapterhub_average("pf", "pf_relu", "pf3", weights=[0.2, 0.3, 0.5]),
    "average_pf_pf3": _adapterhub_average("pf", "pf3"),
    "stack_relu_average": af.Stack("pf_relu", _adapterhub_average("pf", "pf3", weights=[1.0, 3.0])),
    "stack_pf3_fuse": af.Stack("pf3", af.Fuse("pf", "pf_relu", "pf3")),
    "batchsplit_pf_pf3": af.BatchSplit("pf", "pf3", batch_sizes=[1, 2]),
    "parallel_pf_pf3": af.Parallel("pf", "pf3"),
    "average_adapter": "avg",
}
DECODER = {
    "stack_pf_tanh": af.Stack("pf", "pf_tanh"),
    "stack_hb_pf": af.Stack("hb", "pf"),
    "average_pf_tanh": _adapterhub_average("pf", "pf_tanh", weights=[0.3, 0.7]),
    "batchsplit_pf_tanh": af.BatchSplit("pf", "pf_tanh", batch_sizes=[1, 1]),
    "parallel_pf_tanh": af.Parallel("pf", "pf_tanh"),
}
# AdapterHub holds Average's weights in a float32 tensor: its float64 decoder outputs carry that rounding.
FLOAT32_WEIGHTS = ("average_pf_tanh",)


def _bert() -> tuple[af.AdaptedModel, dict[str, torch.Tensor]]:
    model = af.wrap(AutoModel.from_pretrained(FIXTURES / "bert" / "base_model", dtype=torch.float64).eval())
    for name in ("pf", "pf_relu", "pf3", "hb"):
        model.load_adapter(FIXTURES / "bert" / "adapters" / name)
    model.load_adapter(FIXTURES / "blocks" / "bert" / "adapters" / "pf_b")
    model.load_fusion(FIXTURES / "bert" / "fusions" / "dynamic")
    model.average_adapters("avg", ["pf", "pf_b"], weights=[0.3, 0.7])
    return model.eval(), load_file(FIXTURES / "blocks" / "bert" / "outputs.safetensors")


def _decoder(model_type: str) -> tuple[af.AdaptedModel, dict[str, torch.Tensor]]:
    source = FIXTURES / "decoders" / model_type
    auto = getattr(transformers, json.loads((source / "manifest.json").read_text())["auto_class"])
    base = auto.from_pretrained(source / "base_model", dtype=torch.float64, attn_implementation="eager")
    model = af.wrap(base.eval())
    for name in ("pf", "pf_tanh", "hb"):
        model.load_adapter(source / "adapters" / name)
    return model.eval(), load_file(FIXTURES / "blocks" / model_type / "outputs.safetensors")


def _run(model: af.AdaptedModel, setup: Any, expected: dict[str, torch.Tensor]) -> Any:
    inputs = {"input_ids": expected["input_ids"], "attention_mask": expected["attention_mask"]}
    with model.activated(setup), torch.no_grad():
        return model(**inputs, output_hidden_states=True)


def test_blocks_give_adapterhubs_outputs_on_bert() -> None:
    model, expected = _bert()
    for setup_id, setup in BERT.items():
        out = _run(model, setup, expected)
        # The BERT fixture is float32 (AdapterHub ran it in float32): its row of the table.
        assert_close(out.last_hidden_state, expected[f"{setup_id}.last_hidden_state"], label=setup_id)
        assert_close(out.hidden_states[1], expected[f"{setup_id}.hidden_states.1"], label=setup_id)


@pytest.mark.parametrize("model_type", ["llama", "gpt2"])
def test_blocks_give_adapterhubs_outputs_on_decoders(model_type: str) -> None:
    model, expected = _decoder(model_type)
    for setup_id, setup in DECODER.items():
        out = _run(model, setup, expected)
        dtype = torch.float32 if setup_id in FLOAT32_WEIGHTS else torch.float64
        assert_close(out.logits, expected[f"{setup_id}.logits"], dtype=dtype, label=setup_id)
        assert_close(out.hidden_states[1], expected[f"{setup_id}.hidden_states.1"], dtype=dtype, label=setup_id)


def test_a_stack_inside_batch_split_or_parallel_is_the_stack_alone_where_adapterhub_differs() -> None:
    model, expected = _bert()
    with model.activated(af.Stack("pf", "pf3")), torch.no_grad():
        stack = model(input_ids=expected["input_ids"], attention_mask=expected["attention_mask"]).last_hidden_state
    relu = _run(model, "pf_relu", expected).last_hidden_state
    split = _run(model, af.BatchSplit(af.Stack("pf", "pf3"), "pf_relu", batch_sizes=[2, 1]), expected)
    assert_close(split.last_hidden_state, torch.cat([stack[:2], relu[2:]]))
    parallel = _run(model, af.Parallel(af.Stack("pf", "pf3"), "pf_relu"), expected)
    assert_close(parallel.last_hidden_state, torch.cat([stack, relu]))
    for setup_id in ("batchsplit_stack_relu", "parallel_stack_relu"):  # AdapterHub's rows of the Stack differ
        theirs = expected[f"{setup_id}.last_hidden_state"]
        assert (theirs[:2].double() - stack[:2]).abs().max() > 0.1
    model, expected = _decoder("llama")  # the same on a decoder
    theirs = expected["batchsplit_pf_stack.logits"]
    ours = _run(model, af.BatchSplit("pf", af.Stack("pf", "pf_tanh"), batch_sizes=[1, 1]), expected).logits
    assert_close(ours[0], _run(model, "pf", expected).logits[0])
    assert_close(ours[1], _run(model, af.Stack("pf", "pf_tanh"), expected).logits[1])
    assert_close(ours[0], theirs[0])
    assert (ours[1] - theirs[1]).abs().max() > 0.05


def test_adapterhub_cannot_fuse_stacks_which_ours_spells_as_a_stack_ending_in_a_fuse() -> None:
    """AdapterHub's issue #574: one adapter's output fed to several adapters and fused. adapters 1.3.0 still fails on
    its spelling, Fuse(Stack(base, a), Stack(base, b)) (the error is frozen in the manifest); ours is
    Stack(base, Fuse(a, b)), which AdapterHub runs too (stack_pf3_fuse above), and a Fuse holding a Stack is refused
    with that spelling."""
    manifest = json.loads((FIXTURES / "blocks" / "manifest.json").read_text())
    assert manifest["models"]["bert"]["adapterhub_fails"]["error"].startswith("TypeError")
    with pytest.raises(af.ConfigError, match=r"Stack\('base', Fuse\('a', 'b'\)\)"):
        af.Fuse(af.Stack("pf3", "pf"), af.Stack("pf3", "pf_relu"))
