"""Write parity fixtures for classification and regression heads on decoders and encoder-decoders, produced by
AdapterHub's ``adapters`` 1.3.0, into tests/fixtures/adapterhub/decoder_heads/.

AdapterHub's sequence heads read a different token per architecture: token 0 on encoders, the last non-padding token
on decoders (GPT2/Llama/MistralAdapterModel: ``(input_ids != pad_token_id).sum(-1) - 1``), and on encoder-decoders the
decoder's state at the last end-of-sequence token of ``input_ids`` (BartAdapterModel, T5AdapterModel), the decoder
running on ``input_ids`` shifted right. T5AdapterModel multiplies the decoder's output by ``d_model ** -0.5`` when
its word embeddings are tied, but picks the classification heads' token from the unscaled output, so those read the
state unscaled (verified below).

For a tiny random GPT-2, Llama, BART and T5 (the configs of tests/tiny_decoders.py, pad id 0, end-of-sequence id 2)
this saves, per model:

* ``base_model/``     the bare transformers model with its LM head (``save_pretrained``, float32);
* ``adapters/sst/``   a Pfeiffer adapter ``sst`` (SeqBnConfig(reduction_factor=4)) with its classification head ``sst``
                      (3 labels named, 2 layers, tanh), ``save_adapter(..., with_head=True, use_safetensors=True)``;
* ``heads/score/``    GPT-2 only: a 1-label classification head (adapters' regression: MSE loss), 1 layer,
                      ``save_head(..., use_safetensors=True)``;
* ``outputs.safetensors`` the inputs (row 1 right-padded by 2; encoder-decoders: each row ends with one end-of-sequence
                      token) and each head's float64 eval-mode logits without and with the adapter, described in
                      ``manifest.json``.

Adapter and head weights are re-drawn from a seeded generator (AdapterHub's init would leave the adapter near zero).
``verify`` (also ``--verify-only``) reloads the saved files in ``adapters`` and reproduces every logit bit for bit, and
recomputes the logits without the adapter from a plain transformers model and the saved head weights, reading the token
described above, so that the fixture documents which token AdapterHub's heads read. Re-running is deterministic.

Usage (from the repository root; the venv comes from benchmarks/setup_adapters_venv.sh)::

    benchmarks/.venv-adapters/bin/python scripts/make_adapterhub_fixtures_decoder_heads.py [--only gpt2,t5]
    benchmarks/.venv-adapters/bin/python scripts/make_adapterhub_fixtures_decoder_heads.py --verify-only

No HuggingFace Hub access is needed.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from fixture_runs import rebuild, require_adapters, run_offline
from torch import nn

SEED = 2929
ADAPTER_STD = 0.1  # adapter down/up weights and biases
HEAD_STD = 0.3  # head weights and biases: large enough for clearly different logits per class
BATCH, SEQ, PADDED = 2, 7, 2  # row 1 is right-padded by PADDED tokens

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "adapterhub" / "decoder_heads"
MODEL_TYPES = ("gpt2", "llama", "bart", "t5")
ADAPTER = "sst"  # the adapter, and the classification head saved with it
LABELS = {0: "negative", 1: "neutral", 2: "positive"}
# head name -> (add_classification_head keyword arguments, model types that get it)
HEADS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    ADAPTER: (dict(num_labels=len(LABELS), layers=2, activation_function="tanh", id2label=LABELS), MODEL_TYPES),
    "score": (dict(num_labels=1, layers=1), ("gpt2",)),
}


def tiny_decoders() -> Any:
    """tests/tiny_decoders.py, the config table shared with our own unit tests."""
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    return importlib.import_module("tiny_decoders")


def heads_of(model_type: str) -> dict[str, dict[str, Any]]:
    return {name: kwargs for name, (kwargs, types) in HEADS.items() if model_type in types}


def head_dir(name: str) -> str:
    return f"adapters/{name}" if name == ADAPTER else f"heads/{name}"


def is_seq2seq(model_type: str) -> bool:
    return model_type in tiny_decoders().SEQ2SEQ_TYPES


def head_inputs(model_type: str) -> dict[str, torch.Tensor]:
    """Random ids (no special id), row 1 right-padded; encoder-decoders end each row with one end-of-sequence id."""
    td = tiny_decoders()
    ids = torch.randint(5, td.VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(SEED + 2))
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, -PADDED:] = 0
    ids[1, -PADDED:] = td.PAD
    if is_seq2seq(model_type):
        ids[0, -1] = td.EOS
        ids[1, -PADDED - 1] = td.EOS
    return {"input_ids": ids, "attention_mask": mask}


# --------------------------------------------------------------------------------------------------------------------
# Building the fixtures: everything here runs adapters 1.3.0.


def adapter_model(base_dir: Path) -> Any:
    """adapters' flex-head model (GPT2AdapterModel, ...) holding the weights saved in `base_dir`."""
    from adapters import AutoAdapterModel
    from safetensors.torch import load_file
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(base_dir, attn_implementation="eager")
    config._name_or_path = ""  # saved configs record it as model_name: no machine path in the fixture
    model = AutoAdapterModel.from_config(config)
    saved = load_file(str(base_dir / "model.safetensors"))
    prefix = next((p for p in ("transformer.", "model.") if any(k.startswith(p) for k in saved)), "")
    state = {k[len(prefix) :]: v for k, v in saved.items() if k.startswith(prefix)}
    missing, unexpected = model.base_model.load_state_dict(state, strict=False)
    lm_only = {"lm_head.weight", "final_logits_bias"}
    tied = {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}  # stored once, as shared.weight
    assert set(unexpected) <= lm_only, unexpected
    assert all(k in tied or k.startswith("prompt_tuning.") for k in missing), missing
    return model


def redraw_(params: Iterable[nn.Parameter], gen: torch.Generator, std: float) -> None:
    """Replace each parameter, in order, by a draw from N(0, std^2)."""
    with torch.no_grad():
        for p in params:
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * std)


def adapter_parameters(model: nn.Module, name: str) -> list[nn.Parameter]:
    """Every parameter of adapter `name`, at every site, in module order."""
    params = []
    for module in model.modules():
        bank = getattr(module, "adapters", None)
        if isinstance(bank, nn.ModuleDict) and name in bank:
            params += list(bank[name].parameters())
    return params


def head_dropout(head: nn.Module) -> float:
    """The dropout probability adapters gave the head (dropout_prob None: taken from the model's config)."""
    (p,) = {m.p for m in head.modules() if isinstance(m, nn.Dropout)}
    return float(p)


def head_logits(model: Any, inputs: dict[str, torch.Tensor], head: str) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs, head=head, use_cache=False, return_dict=True).logits


def build(model_type: str, out: Path) -> None:
    import adapters
    import transformers
    from safetensors.torch import save_file

    td = tiny_decoders()
    out.mkdir(parents=True)
    lm = td.tiny_decoder(model_type, seed=SEED)
    lm.save_pretrained(out / "base_model", safe_serialization=True)

    model = adapter_model(out / "base_model")
    model.add_adapter(ADAPTER, config=adapters.SeqBnConfig(reduction_factor=4))
    heads = heads_of(model_type)
    for name, kwargs in heads.items():
        model.add_classification_head(name, **kwargs)
    gen = torch.Generator().manual_seed(SEED + 1)
    redraw_(adapter_parameters(model, ADAPTER), gen, ADAPTER_STD)
    for name in heads:
        redraw_(model.heads[name].parameters(), gen, HEAD_STD)

    for name in heads:
        (out / head_dir(name)).mkdir(parents=True)
    model.save_adapter(str(out / "adapters" / ADAPTER), ADAPTER, with_head=True, use_safetensors=True)
    for name in heads:
        if name != ADAPTER:
            model.save_head(str(out / head_dir(name)), name, use_safetensors=True)

    inputs = head_inputs(model_type)
    tensors: dict[str, torch.Tensor] = dict(inputs)
    model = model.to(torch.float64).eval()
    setups = {"bare": None, ADAPTER: ADAPTER}
    for setup_id, setup in setups.items():
        model.set_active_adapters(setup)
        for name in heads:
            tensors[f"{setup_id}.{name}.logits"] = head_logits(model, inputs, name).contiguous()
    save_file(tensors, str(out / "outputs.safetensors"))

    config = model.config
    manifest = {
        "model_type": model_type,
        "adapter_model_class": type(model).__name__,
        "auto_class": "AutoModelForSeq2SeqLM" if is_seq2seq(model_type) else "AutoModelForCausalLM",
        "seed": SEED,
        "std": {"adapter": ADAPTER_STD, "head": HEAD_STD},
        "versions": {
            "adapters": adapters.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "python": sys.version.split()[0],
        },
        "mode": "eval (dropout off), float64 forward, use_cache=False, eager attention",
        "special_ids": {"pad": config.pad_token_id, "eos": config.eos_token_id},
        "pooled_token": pooled_token_rule(model_type),
        "adapter": {"name": ADAPTER, "dir": f"adapters/{ADAPTER}", "config": "SeqBnConfig(reduction_factor=4)"},
        "heads": {
            name: {"dir": head_dir(name), "dropout": head_dropout(model.heads[name]), **kwargs}
            for name, kwargs in heads.items()
        },
        "saved_formats": "safetensors only (use_safetensors=True), float32",
        "setups": {sid: "no active adapter" if s is None else f"adapter {s}" for sid, s in setups.items()},
        "tensors": {
            key: {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
            for key, value in tensors.items()
        },
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(f"{model_type}: {len(tensors)} tensors -> {out}")


# --------------------------------------------------------------------------------------------------------------------
# Checking: adapters reloads its own files to the same logits, and a plain transformers model plus the saved head
# weights, reading the token pooled_token_rule names, gives the logits without the adapter.


def pooled_token_rule(model_type: str) -> str:
    if is_seq2seq(model_type):
        return "decoder state at the last position where input_ids == eos_token_id (decoder: input_ids shifted right)"
    return "position (input_ids != pad_token_id).sum(-1) - 1 of the last hidden state"


def pooled_positions(model_type: str, ids: torch.Tensor, pad: int, eos: int) -> torch.Tensor:
    if is_seq2seq(model_type):
        positions = torch.arange(ids.shape[1]).expand_as(ids)
        return torch.where(ids == eos, positions, -1).max(dim=-1).values
    return (ids != pad).sum(-1) - 1


def reference_logits(folder: Path, head: str, hidden: torch.Tensor) -> torch.Tensor:
    """AdapterHub's PredictionHead on pooled states: [Linear -> activation] x (layers - 1) -> Linear (eval mode)."""
    from safetensors.torch import load_file
    from transformers.activations import get_activation

    config = json.loads((folder / "head_config.json").read_text())["config"]
    weights = {k: v.to(torch.float64) for k, v in load_file(str(folder / "model_head.safetensors")).items()}
    indices = sorted({int(k.split(".")[2]) for k in weights})
    assert len(indices) == config["layers"], (indices, config)
    x = hidden
    for n, i in enumerate(indices):
        x = nn.functional.linear(x, weights[f"heads.{head}.{i}.weight"], weights[f"heads.{head}.{i}.bias"])
        if n < len(indices) - 1:
            x = get_activation(config["activation_function"])(x)
    return x


def decoder_states(model_type: str, base_dir: Path, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The last hidden states a head reads from, from the plain transformers base model (no adapters import)."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(base_dir, attn_implementation="eager").to(torch.float64).eval()
    extra = {}
    if is_seq2seq(model_type):  # no decoder mask, as AdapterHub passes none
        start = torch.full_like(ids[:, :1], model.config.decoder_start_token_id)
        extra["decoder_input_ids"] = torch.cat([start, ids[:, :-1]], dim=-1)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, use_cache=False, **extra).last_hidden_state


def verify(model_type: str, out: Path) -> None:
    from safetensors.torch import load_file

    manifest = json.loads((out / "manifest.json").read_text())
    recorded = load_file(str(out / "outputs.safetensors"))
    inputs = {key: recorded[key] for key in ("input_ids", "attention_mask")}
    heads = manifest["heads"]

    model = adapter_model(out / "base_model")
    assert model.load_adapter(str(out / "adapters" / ADAPTER), with_head=True, use_safetensors=True) == ADAPTER
    for name, entry in heads.items():
        if name != ADAPTER:
            model.load_head(str(out / entry["dir"]), use_safetensors=True)
    model = model.to(torch.float64).eval()
    for setup_id, setup in {"bare": None, ADAPTER: ADAPTER}.items():
        model.set_active_adapters(setup)
        for name in heads:
            key = f"{setup_id}.{name}.logits"
            assert torch.equal(head_logits(model, inputs, name), recorded[key]), f"{model_type} {key}: not reproduced"

    ids = inputs["input_ids"]
    states = decoder_states(model_type, out / "base_model", ids, inputs["attention_mask"])
    special = manifest["special_ids"]
    positions = pooled_positions(model_type, ids, special["pad"], special["eos"])
    pooled = states[torch.arange(ids.shape[0]), positions]
    worst = 0.0
    for name, entry in heads.items():
        expected = recorded[f"bare.{name}.logits"]
        got = reference_logits(out / entry["dir"], name, pooled)
        where = functools.partial(_prefixed, f"{model_type} {name}")
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12, msg=where)
        worst = max(worst, (got - expected).abs().max().item())
    print(
        f"{model_type}: adapters reproduces every logit; pooled positions {positions.tolist()} (max|diff| {worst:.1e})"
    )


def _prefixed(where: str, message: str) -> str:
    return f"{where}: {message}"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="fixture folder (default: %(default)s)")
    parser.add_argument("--only", default="", help=f"comma-separated model types (default: {','.join(MODEL_TYPES)})")
    parser.add_argument("--verify-only", action="store_true", help="check existing fixtures, write nothing")
    args = parser.parse_args()

    require_adapters()
    types = [t for t in args.only.split(",") if t] or list(MODEL_TYPES)
    for model_type in types:
        if model_type not in MODEL_TYPES:
            sys.exit(f"{model_type}: not one of {', '.join(MODEL_TYPES)}")
    rebuild(types, args.out, build, verify, args.verify_only)
    return 0


if __name__ == "__main__":
    run_offline(main)
