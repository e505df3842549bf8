"""Write parity fixtures for decoders and encoder-decoders, produced by AdapterHub's ``adapters`` 1.3.0, into
tests/fixtures/adapterhub/decoders/ (issue #23).

For every architecture of tests/tiny_decoders.py that ``adapters`` 1.3.0 supports without a user-written interface
(GPT-2, Llama, Mistral, Qwen2, Qwen3, Gemma2, Gemma3 text, T5, BART; from its EXTRA_SEQ2SEQ_CONFIGS mT5, mBART and
PLBART, and from its EXTRA_DECODER_CONFIGS GPT-J; not Gemma, Phi-3, Marian, Pegasus or M2M-100) this saves, per model:

* ``base_model/``      the bare transformers model with its LM head (``save_pretrained``: config.json +
                       model.safetensors, float32), so it can be rebuilt without ``adapters`` installed;
* ``adapters/<name>/`` each bottleneck adapter, ``model.save_adapter(..., with_head=False, use_safetensors=True)``
                       (``adapter_config.json`` + ``adapter.safetensors``, float32; plus ``adapter_interface.json``
                       for architectures that adapters reaches through its plugin interface);
* ``fusions/<id>/``    each AdapterFusion (``model.save_adapter_fusion(..., use_safetensors=True)``, float32);
* ``outputs.safetensors`` inputs and recorded eval-mode outputs (float64), described tensor by tensor in
                       ``manifest.json``.

The base weights are drawn in float32 (tests/tiny_decoders.py, seed SEED) with every normalisation weight perturbed,
so each layer's norm differs from the others; the forward runs in float64 without the KV cache (``use_cache=False``).
Adapter and fusion weights are re-drawn from a seeded generator after creation: AdapterHub's own init gives
up-projections of std 0.02 and near-identity fusion values, which would hide most placement mistakes.

After writing, ``verify`` recomputes every recorded logit and hidden state from the saved files with an independent
re-implementation of docs/adapterhub-decoders.md's placement table (plain transformers model with forward hooks, no
``adapters`` import) and fails loudly on any mismatch. Re-running is deterministic.

Usage (from the repository root; the venv comes from benchmarks/setup_adapters_venv.sh)::

    bash benchmarks/setup_adapters_venv.sh
    benchmarks/.venv-adapters/bin/python scripts/make_adapterhub_decoder_fixtures.py [--out DIR] [--only llama,t5]

No HuggingFace Hub access is needed.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import importlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from fixture_runs import rebuild, require_adapters, run_offline
from torch import nn

SEED = 2323
ADAPTER_STD = 0.1  # adapter down/up weights and biases
FUSION_QK_STD = 0.5  # fusion query/key weights and biases: large enough for clearly non-uniform fusion weights
FUSION_VALUE_STD = 0.3  # fusion value = identity + noise of this std
NORM_STD = 0.2  # perturbation of the base model's normalisation weights

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "adapterhub" / "decoders"

# The architectures of tests/tiny_decoders.py that adapters 1.3.0 cannot take without a hand-written interface.
UNSUPPORTED = {
    "gemma": "adapters.init raises 'Model gemma not pre-supported' (no models/gemma, not in wrappers/interfaces.py)",
    "phi3": "adapters.init raises 'Model phi3 not pre-supported' (its 'phi' interface is Phi-1/2's parallel block)",
    "marian": "adapters.init raises 'Model marian not pre-supported' (no models/marian, no interface)",
    "pegasus": "adapters.init raises 'Model pegasus not pre-supported' (no models/pegasus, no interface)",
    "m2m_100": "adapters.init raises 'Model m2m_100 not pre-supported' (models/m2m_100 came after 1.3.0)",
}

# name -> (config class, kwargs). seq_bn (Pfeiffer) adapters sit at the feed-forward site only, double_seq_bn
# (Houlsby) adapters at the attention and the feed-forward sites.
ADAPTERS: dict[str, tuple[str, dict[str, Any]]] = {
    "pf": ("SeqBnConfig", dict(reduction_factor=4)),  # relu, bottleneck 8
    "pf_tanh": ("SeqBnConfig", dict(reduction_factor=8, non_linearity="tanh")),
    "pf_gelu": ("SeqBnConfig", dict(reduction_factor=4, non_linearity="gelu")),
    "hb": ("DoubleSeqBnConfig", dict(reduction_factor=4)),  # swish
    "hb_relu": ("DoubleSeqBnConfig", dict(reduction_factor=8, non_linearity="relu")),
}
FUSIONS: dict[str, tuple[list[str], str]] = {
    # fixture id -> (adapter names in order, preset). The last adapter's config decides query and residual.
    "pf_dynamic": (["pf", "pf_tanh", "pf_gelu"], "dynamic"),
    "hb_static": (["hb", "hb_relu"], "static"),
}
# Encoder-decoders (T5, BART, mT5, mBART, PLBART) only: seq_bn adapters also after each decoder layer's cross-attention
# (cross_adapter=True), and a fusion of them, which then fuses at the cross-attention sites too. Drawn after the
# pieces above from the same generator, so those keep their weights.
SEQ2SEQ_ADAPTERS: dict[str, tuple[str, dict[str, Any]]] = {
    "pf_cross": ("SeqBnConfig", dict(reduction_factor=4, cross_adapter=True)),
    "pf_cross_tanh": ("SeqBnConfig", dict(reduction_factor=8, non_linearity="tanh", cross_adapter=True)),
}
SEQ2SEQ_FUSIONS: dict[str, tuple[list[str], str]] = {"pf_cross_dynamic": (["pf_cross", "pf_cross_tanh"], "dynamic")}


def pieces(model_type: str) -> tuple[dict[str, tuple[str, dict[str, Any]]], dict[str, tuple[list[str], str]]]:
    """The adapters and fusions of `model_type`'s fixture, in the order their weights are drawn."""
    if model_type not in seq2seq_types():
        return ADAPTERS, FUSIONS
    return {**ADAPTERS, **SEQ2SEQ_ADAPTERS}, {**FUSIONS, **SEQ2SEQ_FUSIONS}


def tiny_decoders() -> Any:
    """tests/tiny_decoders.py, the config table shared with our own unit tests."""
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    return importlib.import_module("tiny_decoders")


def seq2seq_types() -> tuple[str, ...]:
    """The encoder-decoders of tests/tiny_decoders.py: its main table's and the extra ones kept out of it."""
    td = tiny_decoders()
    return (*td.SEQ2SEQ_TYPES, *td.EXTRA_SEQ2SEQ_CONFIGS)


# The rows of tests/tiny_decoders.py's EXTRA_DECODER_CONFIGS that adapters 1.3.0 has models for (the others: none).
ADAPTERHUB_EXTRA_DECODERS = ("gptj",)


def supported_types() -> list[str]:
    td = tiny_decoders()
    types = (*td.TINY_DECODER_CONFIGS, *td.EXTRA_SEQ2SEQ_CONFIGS, *ADAPTERHUB_EXTRA_DECODERS)
    return [t for t in types if t not in UNSUPPORTED]


# --------------------------------------------------------------------------------------------------------------------
# Building the fixtures: everything here runs adapters 1.3.0.


def perturb_norms_(model: nn.Module, gen: torch.Generator) -> None:
    """Add N(0, NORM_STD^2) noise to every parameter of every normalisation module (LayerNorm, RMSNorm, T5LayerNorm),
    so that using another layer's norm, or none, changes the output."""
    with torch.no_grad():
        for module in model.modules():
            if "norm" in type(module).__name__.lower():
                for p in module.parameters(recurse=False):
                    p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * NORM_STD)


def randomise_adapters_(model: nn.Module, name: str, gen: torch.Generator) -> None:
    """Redraw every weight and bias of adapter `name` at every site from N(0, ADAPTER_STD^2)."""
    with torch.no_grad():
        for module in model.modules():
            bank = getattr(module, "adapters", None)
            if isinstance(bank, nn.ModuleDict) and name in bank:
                for p in bank[name].parameters():
                    p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * ADAPTER_STD)


def randomise_fusions_(model: nn.Module, fusion_name: str, gen: torch.Generator) -> None:
    """Query/key weights and biases ~ N(0, FUSION_QK_STD^2); value (if any) = identity + N(0, FUSION_VALUE_STD^2)."""
    with torch.no_grad():
        for module in model.modules():
            bank = getattr(module, "adapter_fusion_layer", None)
            if not (isinstance(bank, nn.ModuleDict) and fusion_name in bank):
                continue
            fusion = bank[fusion_name]
            for part in ("query", "key", "value"):
                lin = getattr(fusion, part, None)
                if lin is None:
                    continue
                for p in lin.parameters():
                    noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
                    if part == "value":
                        p.copy_(torch.eye(p.shape[0], dtype=p.dtype) + noise * FUSION_VALUE_STD)
                    else:
                        p.copy_(noise * FUSION_QK_STD)


def forward(model: nn.Module, inputs: dict[str, torch.Tensor], **extra: Any) -> Any:
    with torch.no_grad():
        return model(**inputs, use_cache=False, output_hidden_states=True, return_dict=True, **extra)


def hidden_state_tensors(out: Any) -> dict[str, torch.Tensor]:
    """Named hidden states: `hidden_states.<i>` (decoders) or `encoder_/decoder_hidden_states.<i>` (seq2seq);
    index 0 is the embedding output, index i the output of layer i-1 (the last one before any final norm)."""
    named = {}
    for field in ("hidden_states", "encoder_hidden_states", "decoder_hidden_states"):
        for i, h in enumerate(getattr(out, field, None) or ()):
            named[f"{field}.{i}"] = h
    return named


def cache_check(model: nn.Module, inputs: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Last-position logits of row 0 computed in one uncached forward vs a cached prefill plus one cached step."""
    ids = inputs["input_ids"][:1]
    with torch.no_grad():
        full = model(input_ids=ids, use_cache=False).logits[0, -1]
        prefill = model(input_ids=ids[:, :-1], use_cache=True)
        cached = int(prefill.past_key_values.get_seq_length())
        step = model(input_ids=ids[:, -1:], past_key_values=prefill.past_key_values, use_cache=True).logits[0, -1]
    return {
        "cached_vs_uncached_max_abs_diff": (full - step).abs().max().item(),
        "cache_length_after_prefill": cached,
        "prefill_length": int(ids.shape[1] - 1),
    }


def build(model_type: str, out: Path) -> None:
    adapters = importlib.import_module("adapters")
    transformers = importlib.import_module("transformers")
    from safetensors.torch import save_file

    td = tiny_decoders()
    out.mkdir(parents=True, exist_ok=True)

    # 1. The bare model, float32 weights, norms perturbed; saved before adapters touches it.
    model = td.tiny_decoder(model_type, seed=SEED)
    perturb_norms_(model, torch.Generator().manual_seed(SEED + 1))
    model.save_pretrained(out / "base_model", safe_serialization=True)
    inputs = td.tiny_decoder_inputs(model_type, seed=SEED + 2)
    # On a copy: after one forward of the plain model, an adapters.init'ed Llama keeps running its original layers.
    bare = forward(copy.deepcopy(model).to(torch.float64), inputs)

    # 2. Adapters and fusions, re-drawn in float32 (so that saving them in float32 loses nothing).
    all_adapters, all_fusions = pieces(model_type)
    adapters.init(model)
    for name, (cls_name, kwargs) in all_adapters.items():
        model.add_adapter(name, config=getattr(adapters, cls_name)(**kwargs))
    for names, preset in all_fusions.values():
        model.add_adapter_fusion(adapters.Fuse(*names), config=preset)
    model.eval()
    gen = torch.Generator().manual_seed(SEED + 3)
    for batch_adapters, batch_fusions in ((ADAPTERS, FUSIONS), (SEQ2SEQ_ADAPTERS, SEQ2SEQ_FUSIONS)):
        for name in (n for n in batch_adapters if n in all_adapters):
            randomise_adapters_(model, name, gen)
        for names, _ in (f for fid, f in batch_fusions.items() if fid in all_fusions):
            randomise_fusions_(model, ",".join(names), gen)

    # 3. Save with the library's own functions (safetensors; the .bin default is covered by the encoder fixtures).
    (out / "adapters").mkdir()
    (out / "fusions").mkdir()
    for name in all_adapters:
        model.save_adapter(str(out / "adapters" / name), name, with_head=False, use_safetensors=True)
    for fid, (names, _) in all_fusions.items():
        model.save_adapter_fusion(str(out / "fusions" / fid), ",".join(names), use_safetensors=True)

    # 4. Record eval-mode float64 outputs, no KV cache.
    model = model.to(torch.float64)
    tensors: dict[str, torch.Tensor] = dict(inputs)
    manifest_tensors: dict[str, dict[str, Any]] = {
        "input_ids": {"shape": list(inputs["input_ids"].shape), "what": "int64 token ids; row 1 right-padded by 2"},
        "attention_mask": {"shape": list(inputs["attention_mask"].shape), "what": "1 = real token, 0 = padding"},
    }
    if "decoder_input_ids" in inputs:
        manifest_tensors["decoder_input_ids"] = {
            "shape": list(inputs["decoder_input_ids"].shape),
            "what": "int64 decoder ids, first = decoder_start_token_id, no padding (no decoder_attention_mask)",
        }

    def record(key: str, value: Any, what: str, **extra: Any) -> None:
        t = torch.as_tensor(value).detach().to(torch.float64).clone().contiguous()
        tensors[key] = t
        manifest_tensors[key] = {"shape": list(t.shape), "what": what, **extra}

    setups: dict[str, Any] = {
        "bare": None,
        **{n: n for n in all_adapters},
        **{f"fusion_{fid}": adapters.Fuse(*names) for fid, (names, _) in all_fusions.items()},
    }
    effect = {}
    bare_diff = 0.0
    for setup_id, setup in setups.items():
        model.set_active_adapters(setup)
        is_fusion = setup_id.startswith("fusion_")
        o = forward(model, inputs, **({"output_adapter_fusion_attentions": True} if is_fusion else {}))
        record(f"{setup_id}.logits", o.logits, "LM logits, float64, use_cache=False", setup=str(setup))
        for key, h in hidden_state_tensors(o).items():
            if setup is not None and not key.endswith(".1"):
                continue  # with adapters only the first layer's output, to tell a layer-0 from a layer-1 mistake
            record(f"{setup_id}.{key}", h, "hidden state (index 0 = embeddings, i = output of layer i-1)")
        if is_fusion:
            for layer_idx, per_loc in sorted(o["adapter_fusion_attentions"][setup.name].items()):
                for loc, probs in per_loc.items():
                    record(
                        f"{setup_id}.fusion_attention.layer{layer_idx}.{loc}",
                        probs,
                        "softmax fusion weights (batch, seq, n_adapters), adapters in fusion order; layer = "
                        "AdapterHub's global layer index (seq2seq: encoder layers first, then decoder layers)",
                        adapters=all_fusions[setup_id[len("fusion_") :]][0],
                    )
        if setup is None:
            bare_diff = (o.logits - bare.logits).abs().max().item()
            assert bare_diff == 0.0, f"{model_type}: adapters.init changed the bare model ({bare_diff})"
        effect[setup_id] = (o.logits - bare.logits).abs().max().item() / bare.logits.abs().max().item()
    save_file(tensors, str(out / "outputs.safetensors"))

    model.set_active_adapters("pf")
    cache = None if model_type in seq2seq_types() else cache_check(model, inputs)

    sites = [
        {"module": name, "location": module.location_key, "adapters": sorted(module.adapters)}
        for name, module in model.named_modules()
        if isinstance(module, adapters.methods.bottleneck.BottleneckLayer) and len(module.adapters)
    ]
    manifest = {
        "model_type": model_type,
        "model_class": type(model).__name__,
        "auto_class": "AutoModelForSeq2SeqLM" if model_type in seq2seq_types() else "AutoModelForCausalLM",
        "seed": SEED,
        "std": {
            "adapter": ADAPTER_STD,
            "fusion_query_key": FUSION_QK_STD,
            "fusion_value_noise": FUSION_VALUE_STD,
            "norm_perturbation": NORM_STD,
        },
        "versions": {
            "adapters": adapters.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "python": sys.version.split()[0],
        },
        "mode": "eval (dropout off), float64 forward, use_cache=False, eager attention",
        "base_model": {
            "dir": "base_model",
            "dtype_saved": "float32 (run in float64 after .to(torch.float64))",
            "bare_vs_adapters_init_max_abs_diff": bare_diff,
        },
        "integration": "plugin interface (wrappers/interfaces.py)"
        if getattr(model.base_model, "adapter_interface", None) is not None
        else "built-in (models/" + model_type + "/)",
        "adapter_sites": sites,
        "adapters": {
            n: {"dir": f"adapters/{n}", "config_class": c, "config_kwargs": kw} for n, (c, kw) in all_adapters.items()
        },
        "fusions": {
            fid: {"dir": f"fusions/{fid}", "name": ",".join(names), "adapters": names, "preset": preset}
            for fid, (names, preset) in all_fusions.items()
        },
        "saved_formats": "safetensors only (save_adapter/save_adapter_fusion with use_safetensors=True), float32",
        "setups": {sid: str(s) if s is not None else "no active adapter" for sid, s in setups.items()},
        "relative_effect_on_logits": effect,
        "kv_cache_check_with_pf": cache,
        "tensors": manifest_tensors,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    low = min(v for k, v in effect.items() if k != "bare")
    print(f"{model_type}: {len(tensors)} tensors, smallest relative adapter effect on logits {low:.2e} -> {out}")


# --------------------------------------------------------------------------------------------------------------------
# Independent re-implementation of the placement table (docs/adapterhub-decoders.md). It reads only the saved files
# and a plain transformers model; nothing here imports adapters.


@dataclass(frozen=True)
class Site:
    """One adapter site of the plain model.

    key:  AdapterHub's module path at this site (prefix of the saved weight names).
    x:    module whose output is the sub-block output x (first element if it returns a tuple).
    r:    module whose input (first positional argument or `hidden_states=`) is the residual stream r.
    ln:   the normalisation AdapterHub applies to x + r before a seq_bn adapter (`original_ln_before`), or None.
    r_adds: a parallel-residual block's module whose (adapted) output AdapterHub adds to r for this site (GPT-J's
          output adapters take attention_adapters' result, r + the attention output, as their residual).
    The model itself then combines the new x' with r exactly as it combined x with r."""

    key: str
    location: str
    x: nn.Module
    r: nn.Module
    ln: nn.Module | None
    r_adds: nn.Module | None = None
    layer: int = 0  # AdapterHub's global layer index (seq2seq: the encoder's layers first)


def site_table(model_type: str, model: Any) -> list[Site]:
    """The adapter sites of a plain transformers model (`model`: its attribute tree, hence Any)."""
    sites = []
    if model_type == "gpt2":
        for i, layer in enumerate(model.transformer.h):
            p = f"transformer.h.{i}"
            sites += [
                Site(f"{p}.attention_adapters", "mh_adapter", layer.attn, layer.ln_1, None),
                Site(f"{p}.output_adapters", "output_adapter", layer.mlp, layer.ln_2, None),
            ]
    elif model_type in ("llama", "mistral", "qwen2", "qwen3"):
        for i, layer in enumerate(model.model.layers):
            p = f"model.layers.{i}"
            sites += [
                Site(f"{p}.attention_adapters", "mh_adapter", layer.self_attn, layer.input_layernorm, None),
                Site(f"{p}.output_adapters", "output_adapter", layer.mlp, layer.post_attention_layernorm, None),
            ]
    elif model_type == "gptj":
        # r + attn(ln_1(r)) + mlp(ln_1(r)); AdapterHub's block: h = attention_adapters(attn, r), then
        # output_adapters(mlp, h), so the feed-forward site's residual is r + the (adapted) attention output.
        for i, layer in enumerate(model.transformer.h):
            p = f"transformer.h.{i}"
            sites += [
                Site(f"{p}.attention_adapters", "mh_adapter", layer.attn, layer.ln_1, None),
                Site(f"{p}.output_adapters", "output_adapter", layer.mlp, layer.ln_1, None, r_adds=layer.attn),
            ]
    elif model_type in ("gemma2", "gemma3_text"):
        # AdapterHub's interface hooks look the norm up through a closure over the loop variable of
        # methods/bottleneck.py:init_bottleneck, so every layer uses the LAST layer's post-norms.
        last = model.model.layers[-1]
        for i, layer in enumerate(model.model.layers):
            p = f"model.layers.{i}"
            sites += [
                Site(
                    f"{p}.attention_adapters",
                    "mh_adapter",
                    layer.self_attn,
                    layer.input_layernorm,
                    last.post_attention_layernorm,
                ),
                Site(
                    f"{p}.output_adapters",
                    "output_adapter",
                    layer.mlp,
                    layer.pre_feedforward_layernorm,
                    last.post_feedforward_layernorm,
                ),
            ]
    elif model_type in ("t5", "mt5"):  # mT5: T5's blocks (its gated-GELU feed-forward is inside DenseReluDense)
        for stack in ("encoder", "decoder"):
            for i, block in enumerate(getattr(model, stack).block):
                attn, ff = block.layer[0], block.layer[-1]
                p = f"{stack}.block.{i}.layer"
                sites += [
                    Site(f"{p}.0", "mh_adapter", attn.SelfAttention, attn.layer_norm, None),
                    Site(f"{p}.{len(block.layer) - 1}", "output_adapter", ff.DenseReluDense, ff.layer_norm, None),
                ]
                if stack == "decoder":  # T5LayerCrossAttention: r + EncDecAttention(layer_norm(r), encoder states)
                    cross = block.layer[1]
                    sites.insert(-1, Site(f"{p}.1", "cross_adapter", cross.EncDecAttention, cross.layer_norm, None))
    elif model_type in ("bart", "plbart"):  # PLBART: BART's layers under BART's names
        for stack in ("encoder", "decoder"):
            for i, layer in enumerate(getattr(model.model, stack).layers):
                p = f"model.{stack}.layers.{i}"
                sites += [
                    Site(
                        f"{p}.attention_adapters",
                        "mh_adapter",
                        layer.self_attn,
                        layer.self_attn,
                        layer.self_attn_layer_norm,
                    ),
                    Site(f"{p}.output_adapters", "output_adapter", layer.fc2, layer.fc1, layer.final_layer_norm),
                ]
                if stack == "decoder":  # encoder_attn_layer_norm(r + encoder_attn(r, encoder states))
                    cross = Site(
                        f"{p}.cross_attention_adapters",
                        "cross_adapter",
                        layer.encoder_attn,
                        layer.encoder_attn,
                        layer.encoder_attn_layer_norm,
                    )
                    sites.insert(-1, cross)
    elif model_type == "mbart":
        # Pre-norm, unlike BART: r + sub-layer(norm(r)); AdapterHub's layers get no norm (layer_norm=None), and r is
        # the input of the norm in front of the sub-layer.
        for stack in ("encoder", "decoder"):
            for i, layer in enumerate(getattr(model.model, stack).layers):
                p = f"model.{stack}.layers.{i}"
                sites += [
                    Site(f"{p}.attention_adapters", "mh_adapter", layer.self_attn, layer.self_attn_layer_norm, None),
                    Site(f"{p}.output_adapters", "output_adapter", layer.fc2, layer.final_layer_norm, None),
                ]
                if stack == "decoder":  # r + encoder_attn(encoder_attn_layer_norm(r), encoder states)
                    cross = Site(
                        f"{p}.cross_attention_adapters",
                        "cross_adapter",
                        layer.encoder_attn,
                        layer.encoder_attn_layer_norm,
                        None,
                    )
                    sites.insert(-1, cross)
    else:
        raise KeyError(model_type)
    return _numbered(sites)


def _numbered(sites: list[Site]) -> list[Site]:
    """The sites with AdapterHub's global layer index: a new layer starts at each mh_adapter site."""
    numbered, layer = [], -1
    for site in sites:
        layer += site.location == "mh_adapter"
        numbered.append(dataclasses.replace(site, layer=layer))
    return numbered


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    """A saved safetensors file, as float64."""
    from safetensors.torch import load_file

    return {k: v.to(torch.float64) for k, v in load_file(str(path)).items()}


def activation(name: str) -> Any:
    from transformers.activations import get_activation

    return get_activation(name.lower())


class RefBottleneck:
    """One adapter at one site: z -> up(act(down(z))). Only the options the fixtures use are implemented."""

    def __init__(self, cfg: dict[str, Any], weights: dict[str, torch.Tensor]):
        unsupported = {
            "ln_before": False,
            "ln_after": False,
            "residual_before_ln": True,
            "scaling": 1.0,
            "use_gating": False,
            "is_parallel": False,
            "phm_layer": False,
        }
        assert all(cfg[k] == v for k, v in unsupported.items()), cfg
        self.cfg, self.w = cfg, weights

    def input(self, x: torch.Tensor, r: torch.Tensor, ln: nn.Module | None) -> torch.Tensor:
        """What the bottleneck reads: x + r (through the site's norm, if any) for seq_bn, x itself for double_seq_bn."""
        if not self.cfg["original_ln_before"]:
            return x
        return ln(x + r) if ln is not None else x + r

    def up(self, z: torch.Tensor) -> torch.Tensor:
        import torch.nn.functional as F

        w = self.w
        down = activation(self.cfg["non_linearity"])(F.linear(z, w["adapter_down.0.weight"], w["adapter_down.0.bias"]))
        return F.linear(down, w["adapter_up.weight"], w["adapter_up.bias"])


def ref_fusion(
    cfg: dict[str, Any], w: dict[str, torch.Tensor], z: torch.Tensor, ups: list[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over the adapters' up-projections; query = z (the last adapter's input), keys = values = ups."""
    import torch.nn.functional as F

    expected = {"query_before_ln": False, "residual_before": False, "temperature": False, "value_before_softmax": True}
    assert all(cfg[k] == v for k, v in expected.items()), cfg
    stack = torch.stack(ups, dim=2)  # (batch, seq, n, d)
    q = F.linear(z, w["query.weight"], w["query.bias"])
    k = F.linear(stack, w["key.weight"], w["key.bias"])
    v = F.linear(stack, w["value.weight"]) if cfg["value"] else stack
    probs = torch.softmax(torch.einsum("btd,btnd->btn", q, k), dim=-1)
    return torch.einsum("btn,btnd->btd", probs, v), probs


def verify(model_type: str, out: Path, atol: float = 1e-12) -> None:
    """Recompute every recorded logit, hidden state and fusion weight from the saved files and compare."""
    import transformers
    from safetensors.torch import load_file

    manifest = json.loads((out / "manifest.json").read_text())
    rec = load_file(str(out / "outputs.safetensors"))
    auto = getattr(transformers, manifest["auto_class"])
    model = auto.from_pretrained(out / "base_model", attn_implementation="eager").to(torch.float64).eval()
    sites = site_table(model_type, model)

    def at_site(state: dict[str, torch.Tensor], site: Site, bank: str, name: str) -> dict[str, torch.Tensor]:
        p = f"{site.key}.{bank}.{name}."
        return {k[len(p) :]: v for k, v in state.items() if k.startswith(p)}

    adapters_at: dict[str, dict[str, RefBottleneck]] = {}  # adapter name -> site key -> adapter
    for name, info in manifest["adapters"].items():
        cfg = json.loads((out / info["dir"] / "adapter_config.json").read_text())["config"]
        state = load_weights(out / info["dir"] / "adapter.safetensors")
        placed = {s.key: RefBottleneck(cfg, w) for s in sites if (w := at_site(state, s, "adapters", name))}
        assert sum(len(a.w) for a in placed.values()) == len(state), f"{model_type} {name}: unplaced weights"
        expected_locations = {loc for loc in ("mh_adapter", "cross_adapter", "output_adapter") if cfg[loc]}
        assert {s.location for s in sites if s.key in placed} == expected_locations, (name, list(placed))
        adapters_at[name] = placed

    fusions = {}
    for fid, info in manifest["fusions"].items():
        saved = json.loads((out / info["dir"] / "adapter_fusion_config.json").read_text())
        state = load_weights(out / info["dir"] / "model_adapter_fusion.safetensors")
        per_site = {s.key: w for s in sites if (w := at_site(state, s, "adapter_fusion_layer", saved["name"]))}
        assert sum(len(w) for w in per_site.values()) == len(state), f"{model_type} {fid}: unplaced weights"
        fusions[fid] = (saved, per_site)

    def new_x(setup_id: str, site: Site, x: torch.Tensor, r: torch.Tensor, probs: dict) -> torch.Tensor:
        """x' = x + (adapter or fusion output); the model then adds r (and norms) as it would have for x."""
        if setup_id.startswith("fusion_"):
            saved, per_site = fusions[setup_id[len("fusion_") :]]
            if site.key not in per_site:
                return x
            members = [adapters_at[n][site.key] for n in saved["adapter_names"]]
            z = members[-1].input(x, r, site.ln)
            ctx, probs[site.key] = ref_fusion(saved["config"], per_site[site.key], z, [a.up(z) for a in members])
            return x + ctx
        adapter = adapters_at.get(setup_id, {}).get(site.key)
        return x if adapter is None else x + adapter.up(adapter.input(x, r, site.ln))

    def run(setup_id: str) -> tuple[Any, dict]:
        residual: dict[str, torch.Tensor] = {}
        added: dict[str, torch.Tensor] = {}
        probs: dict[str, torch.Tensor] = {}
        handles = []

        def keep_r(site: Site, module: nn.Module, args: tuple, kwargs: dict) -> None:
            residual[site.key] = args[0] if args else kwargs["hidden_states"]

        def keep_added(site: Site, module: nn.Module, args: tuple, output: Any) -> None:
            added[site.key] = output[0] if isinstance(output, tuple) else output

        def replace_x(site: Site, module: nn.Module, args: tuple, output: Any) -> Any:
            x = output[0] if isinstance(output, tuple) else output
            r = residual.pop(site.key) + (added.pop(site.key) if site.r_adds is not None else 0)
            y = new_x(setup_id, site, x, r, probs)
            return (y, *output[1:]) if isinstance(output, tuple) else y

        for site in sites:
            handles.append(site.r.register_forward_pre_hook(_bind(keep_r, site), with_kwargs=True))
            handles.append(site.x.register_forward_hook(_bind(replace_x, site)))
        for site in sites:  # after every replace_x: they see the adapted output
            if site.r_adds is not None:
                handles.append(site.r_adds.register_forward_hook(_bind(keep_added, site)))
        try:
            inputs: dict[str, torch.Tensor] = {
                k: rec[k] for k in ("input_ids", "attention_mask", "decoder_input_ids") if k in rec
            }
            return forward(model, inputs), probs
        finally:
            for h in handles:
                h.remove()

    worst = 0.0
    key_to_layer = {s.key: s.layer for s in sites}  # AdapterHub's global layer index
    for setup_id in manifest["setups"]:
        o, probs = run(setup_id)
        # GPT-J's LM head casts its logits to float32 (in both libraries), so they were recorded at float32's rounding
        got = {"logits": o.logits.to(torch.float64), **hidden_state_tensors(o)}
        for name, value in got.items():
            if f"{setup_id}.{name}" not in rec:
                continue
            expect = rec[f"{setup_id}.{name}"]
            where = f"{model_type} {setup_id} {name}"
            torch.testing.assert_close(value, expect, atol=atol, rtol=0, msg=functools.partial(_prefixed, where))
            worst = max(worst, (value - expect).abs().max().item())
        for key, p in probs.items():
            loc = next(s.location for s in sites if s.key == key)
            torch.testing.assert_close(
                p, rec[f"{setup_id}.fusion_attention.layer{key_to_layer[key]}.{loc}"], atol=atol, rtol=0
            )
        n_recorded = sum(1 for k in rec if k.startswith(f"{setup_id}.fusion_attention."))
        assert len(probs) == n_recorded, (setup_id, len(probs), n_recorded)
    print(f"{model_type}: placement table reproduces all {len(manifest['setups'])} setups (max|diff| {worst:.1e})")


def _bind(fn: Any, site: Site) -> Any:
    """fn with `site` bound as its first argument (a lambda in a loop would bind the last site)."""
    return functools.partial(fn, site)


def _prefixed(where: str, message: str) -> str:
    return f"{where}: {message}"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="fixture folder (default: %(default)s)")
    parser.add_argument("--only", default="", help="comma-separated model types (default: every supported one)")
    parser.add_argument("--verify-only", action="store_true", help="check existing fixtures, write nothing")
    args = parser.parse_args()

    require_adapters()
    types = [t for t in args.only.split(",") if t] or supported_types()
    for model_type in types:
        if model_type in UNSUPPORTED:
            sys.exit(f"{model_type}: {UNSUPPORTED[model_type]}")
    rebuild(types, args.out, build, verify, args.verify_only)
    return 0


if __name__ == "__main__":
    run_offline(main)
