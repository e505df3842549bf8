"""Write parity fixtures for composition blocks (Stack, Average, BatchSplit, Parallel, average_adapter), produced by
AdapterHub's ``adapters`` 1.3.0, into tests/fixtures/adapterhub/blocks/ (issue #24 item 2).

It reuses the pieces the other fixture scripts froze: the tiny BERT of tests/fixtures/adapterhub/bert (its
``base_model/`` and adapters pf, pf_relu, pf3, hb) and the tiny decoders of tests/fixtures/adapterhub/decoders/<type>
(adapters pf, pf_tanh, hb). AdapterHub loads them, runs each block of `setups` on the fixture's own inputs, and this
writes per model:

* ``outputs.safetensors``  per setup ``<setup>.last_hidden_state`` (BERT, float32 as the BERT fixture) or
                           ``<setup>.logits`` (decoders, float64, use_cache=False), and ``<setup>.hidden_states.1``
                           (the output of layer 0);
* ``adapters/pf_b/``       (BERT only) a second adapter with pf's config, randomly drawn, so that ``average_adapter``
                           has two adapters of one config to average (setup ``average_adapter``: adapter ``avg``,
                           0.3 * pf + 0.7 * pf_b, activated alone);
* ``manifest.json``        the setups (AdapterHub's own repr of each block), shapes and versions.

Usage (from the repository root; the venv comes from benchmarks/setup_adapters_venv.sh)::

    benchmarks/.venv-adapters/bin/python scripts/make_adapterhub_fixtures_blocks.py [--out DIR]

BatchSplit and Parallel hold adapters of one placement only: AdapterHub 1.3.0 places the whole batch with the first
adapter's config before splitting it, and raises KeyError at a site that lacks the first adapter (Pfeiffer beside
Houlsby). Re-running is deterministic. No Hub access is needed.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import torch

ADAPTERS_VERSION = "1.3.0"
SEED = 2424
REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "adapterhub"
DEFAULT_OUT = FIXTURES / "blocks"
DECODERS = ("llama", "gpt2")


def setups(kind: str) -> dict[str, Any]:
    """Setup id -> AdapterHub block, for BERT (batch 3) or a decoder (batch 2)."""
    from adapters.composition import Average, BatchSplit, Fuse, Parallel, Stack

    if kind == "bert":
        return {
            "stack_pf_pf3": Stack("pf", "pf3"),
            "stack_relu_pf3_pf": Stack("pf_relu", "pf3", "pf"),
            "stack_pf_hb": Stack("pf", "hb"),  # hb alone at the attention site
            "average_pf_relu_pf3": Average("pf", "pf_relu", "pf3", weights=[0.2, 0.3, 0.5]),
            "average_pf_pf3": Average("pf", "pf3"),
            "stack_relu_average": Stack("pf_relu", Average("pf", "pf3", weights=[1.0, 3.0])),
            "stack_pf3_fuse": Stack("pf3", Fuse("pf", "pf_relu", "pf3")),  # the fixture's dynamic fusion
            "batchsplit_pf_pf3": BatchSplit("pf", "pf3", batch_sizes=[1, 2]),
            "batchsplit_stack_relu": BatchSplit(Stack("pf", "pf3"), "pf_relu", batch_sizes=[2, 1]),
            "parallel_pf_pf3": Parallel("pf", "pf3"),
            "parallel_stack_relu": Parallel(Stack("pf", "pf3"), "pf_relu"),
        }
    return {
        "stack_pf_tanh": Stack("pf", "pf_tanh"),
        "stack_hb_pf": Stack("hb", "pf"),
        "average_pf_tanh": Average("pf", "pf_tanh", weights=[0.3, 0.7]),
        "batchsplit_pf_tanh": BatchSplit("pf", "pf_tanh", batch_sizes=[1, 1]),
        "batchsplit_pf_stack": BatchSplit("pf", Stack("pf", "pf_tanh"), batch_sizes=[1, 1]),
        "parallel_pf_tanh": Parallel("pf", "pf_tanh"),
    }


def record_bert(out: Path) -> dict[str, Any]:
    import adapters
    from adapters import SeqBnConfig
    from transformers import BertModel

    source = FIXTURES / "bert"
    model = BertModel.from_pretrained(source / "base_model").eval()
    adapters.init(model)
    for name in ("pf", "pf_relu", "pf3", "hb"):
        model.load_adapter(str(source / "adapters" / name), load_as=name)
    model.load_adapter_fusion(str(source / "fusions" / "dynamic"))
    model.add_adapter("pf_b", config=SeqBnConfig(reduction_factor=4))
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for module in model.modules():
            bank = getattr(module, "adapters", None)
            if isinstance(bank, torch.nn.ModuleDict) and "pf_b" in bank:
                for p in bank["pf_b"].parameters():
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    model.save_adapter(str(out / "adapters" / "pf_b"), "pf_b", with_head=False, use_safetensors=True)
    refused = adapterhub_refusal(model)
    model.average_adapter("avg", ["pf", "pf_b"], weights=[0.3, 0.7])
    model.eval()
    described = record(model, source, out, {**setups("bert"), "average_adapter": "avg"}, "last_hidden_state")
    return {"setups": described, "adapterhub_fails": refused}


def adapterhub_refusal(model: Any) -> dict[str, str]:
    """What adapters does with a Fuse over Stacks (its issue #574: one adapter's output fed to several, fused)."""
    from adapters.composition import Fuse, Stack

    setup = Fuse(Stack("pf3", "pf"), Stack("pf3", "pf_relu"))
    try:
        model.add_adapter_fusion(setup)
    except Exception as error:  # recorded, not raised: the fixture documents the failure
        return {"setup": repr(setup), "error": f"{type(error).__name__}: {error}"}
    return {"setup": repr(setup), "error": "none: it ran"}


def record_decoder(model_type: str, out: Path) -> dict[str, Any]:
    import adapters
    import transformers

    source = FIXTURES / "decoders" / model_type
    manifest = json.loads((source / "manifest.json").read_text())
    auto = getattr(transformers, manifest["auto_class"])
    model = auto.from_pretrained(source / "base_model", attn_implementation="eager")
    adapters.init(model)
    for name in ("pf", "pf_tanh", "hb"):
        model.load_adapter(str(source / "adapters" / name), load_as=name, with_head=False, use_safetensors=True)
    model = model.to(torch.float64).eval()
    return record(model, source, out, setups("decoder"), "logits", use_cache=False, return_dict=True)


def record(model: Any, source: Path, out: Path, chosen: dict[str, Any], output: str, **options: Any) -> dict[str, Any]:
    """Run every setup on the source fixture's inputs; save `<setup>.<output>` and `<setup>.hidden_states.1`."""
    from safetensors.torch import load_file, save_file

    expected = load_file(source / "outputs.safetensors")
    inputs = {"input_ids": expected["input_ids"], "attention_mask": expected["attention_mask"]}
    tensors: dict[str, torch.Tensor] = dict(inputs)
    described = {}
    for setup_id, setup in chosen.items():
        model.set_active_adapters(setup)
        with torch.no_grad():
            o = model(**inputs, output_hidden_states=True, **options)
        tensors[f"{setup_id}.{output}"] = getattr(o, output).contiguous()
        tensors[f"{setup_id}.hidden_states.1"] = o.hidden_states[1].contiguous()
        described[setup_id] = {
            "setup": setup.to_dict() if hasattr(setup, "to_dict") else setup,
            "rows": getattr(o, output).shape[0],
        }
    save_file(tensors, str(out / "outputs.safetensors"))
    return described


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    import adapters
    import transformers

    assert adapters.__version__ == ADAPTERS_VERSION, adapters.__version__
    torch.manual_seed(SEED)
    for model_type in ("bert", *DECODERS):  # what this script wrote before; README.md stays
        shutil.rmtree(args.out / model_type, ignore_errors=True)
    (args.out / "bert" / "adapters").mkdir(parents=True)
    manifest: dict[str, Any] = {
        "versions": {
            "adapters": adapters.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__.split("+")[0],
        },
        "script": "scripts/make_adapterhub_fixtures_blocks.py",
        "models": {"bert": {"source": "../bert", **record_bert(args.out / "bert")}},
    }
    for model_type in DECODERS:
        (args.out / model_type).mkdir()
        manifest["models"][model_type] = {
            "source": f"../decoders/{model_type}",
            "setups": record_decoder(model_type, args.out / model_type),
        }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
