"""Write parity fixtures produced by AdapterHub's ``adapters`` library into tests/fixtures/adapterhub/.

For a tiny random BERT and a tiny random RoBERTa this saves, per model:

* ``base_model/``      the bare transformers encoder (``save_pretrained``: config.json + model.safetensors), so the
                       identical encoder can be rebuilt without ``adapters`` installed;
* ``adapters/<name>/`` each bottleneck adapter, saved by ``model.save_adapter`` twice: once with the library default
                       (``pytorch_adapter.bin``) and once with ``use_safetensors=True`` (``adapter.safetensors``);
* ``heads/cls/``       the classification head (``model.save_head``, .bin and .safetensors);
* ``fusions/<id>/``    each AdapterFusion (``model.save_adapter_fusion``, .bin and .safetensors);
* ``outputs.safetensors`` inputs and recorded eval-mode outputs, described tensor by tensor in ``manifest.json``.

All adapter, head and fusion weights are re-drawn from a seeded generator (std 0.1) after creation, because the
library initialises up-projections near zero and the outputs would otherwise hardly differ from the bare model.

After writing, ``verify`` recomputes every recorded tensor from the saved files with an independent re-implementation
of the semantics documented in docs/adapterhub.md (plain transformers encoder, no adapters import) and fails loudly on
any mismatch. Re-running is deterministic (byte-identical outputs).

Usage (from the repository root)::

    # make a throw-away venv with adapters 1.3.0 and run inside it
    python3 scripts/make_adapterhub_fixtures.py --make-venv runs/ah-venv

    # or run with a Python that already has adapters==1.3.0, transformers==4.57.6, torch, safetensors
    runs/ah-venv/bin/python scripts/make_adapterhub_fixtures.py [--out tests/fixtures/adapterhub]

The venv is created with ``python -m venv``; torch==2.13.0 is installed first and pinned (the CPU wheel comes from
pip's configured find-links) so pip never pulls CUDA wheels. No HuggingFace Hub access is needed.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import TypedDict

from fixture_runs import ADAPTERS_VERSION, rebuild, require_adapters, run_offline

TRANSFORMERS_VERSION = "4.57.6"
TORCH_VERSION = "2.13.0"
SEED = 1234
WEIGHT_STD = 0.1

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "adapterhub"


class TinySize(TypedDict):
    """The size fields of the tiny encoders' configs (BertConfig / RobertaConfig keyword arguments)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int


TINY = TinySize(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    vocab_size=100,
    max_position_embeddings=64,
)


def make_venv_and_rerun(venv: Path, argv: list[str]) -> int:
    """Create ``venv`` (if missing), install the pinned reference stack, and re-run this script inside it."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run(pip + [f"torch=={TORCH_VERSION}"], check=True)
    subprocess.run(
        pip
        + [
            f"torch=={TORCH_VERSION}",
            f"adapters=={ADAPTERS_VERSION}",
            f"transformers=={TRANSFORMERS_VERSION}",
            "safetensors",
        ],
        check=True,
    )
    return subprocess.run([str(python), str(Path(__file__).resolve()), *argv]).returncode


# --------------------------------------------------------------------------------------------------------------------
# Everything below runs inside the reference environment.


def adapter_specs():
    """Name -> (config class name, kwargs). Names are what the fixture and manifest use."""
    return {
        # Pfeiffer: SeqBnConfig defaults are non_linearity="relu", original_ln_before=True, residual_before_ln=True.
        "pf": ("SeqBnConfig", dict(reduction_factor=4)),
        "pf_relu": ("SeqBnConfig", dict(reduction_factor=8, non_linearity="relu")),
        "pf3": ("SeqBnConfig", dict(reduction_factor=2, non_linearity="tanh")),
        # Houlsby: adapters after attention and after FFN; DoubleSeqBnConfig default non_linearity is "swish".
        "hb": ("DoubleSeqBnConfig", dict(reduction_factor=4)),
        # Unusual: new LayerNorms before/after the bottleneck, residual taken after the pretrained LN, adapter
        # residual added before ln_after, constant scaling, exact (erf) GELU.
        "pf_ln": (
            "SeqBnConfig",
            dict(
                reduction_factor=4,
                non_linearity="gelu",
                ln_before=True,
                ln_after=True,
                residual_before_ln=False,
                adapter_residual_before_ln=True,
                scaling=0.5,
            ),
        ),
        # Unusual: Houlsby placement but with pretrained LN *before* the adapter and none after, residual
        # "post_add" (sum before LN), LeakyReLU, dropout (inactive in eval).
        "hb_pre": (
            "DoubleSeqBnConfig",
            dict(
                reduction_factor=8,
                non_linearity="leakyrelu",
                original_ln_before=True,
                original_ln_after=False,
                residual_before_ln="post_add",
                dropout=0.1,
            ),
        ),
    }


FUSIONS = {
    # fixture id -> (adapter names in order, preset). The last adapter's config decides query/residual/post-LN.
    "dynamic": (["pf", "pf_relu", "pf3"], "dynamic"),
    "static": (["pf_relu", "pf3"], "static"),
}


def tiny_config(kind: str):
    from transformers import BertConfig, RobertaConfig

    # initializer_range 0.2 (not 0.02) so attention is far from uniform and hidden states depend on the context.
    if kind == "bert":
        return BertConfig(**TINY, initializer_range=0.2, type_vocab_size=2, pad_token_id=0)
    return RobertaConfig(
        **TINY, initializer_range=0.2, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2
    )


def make_inputs(kind: str):
    import torch

    g = torch.Generator().manual_seed(SEED + 7)
    pad = 0 if kind == "bert" else 1
    ids = torch.randint(5, TINY["vocab_size"], (3, 10), generator=g)
    ids[:, 0] = 2 if kind == "bert" else 0  # a fixed "CLS"/"<s>" id at position 0, which the head pools
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[1, 6:] = 0  # row 1 is padded after 6 tokens
    ids[1, 6:] = pad
    return ids, mask


def randomise_(module, gen, std: float = WEIGHT_STD) -> None:
    """Redraw every parameter of ``module``: LayerNorm weights around 1, everything else around 0."""
    import torch

    with torch.no_grad():
        for sub in module.modules():
            for pname, p in sub.named_parameters(recurse=False):
                noise = torch.randn(p.shape, generator=gen) * std
                p.copy_(1.0 + noise if isinstance(sub, torch.nn.LayerNorm) and pname == "weight" else noise)


def randomise_fusion_(fusion, gen) -> None:
    """Query/key ~ N(0, 0.1^2); value (if any) = identity + N(0, 0.1^2), matching the paper's near-identity V."""
    import torch

    with torch.no_grad():
        for name in ("query", "key", "dense"):
            lin = getattr(fusion, name, None)
            if lin is not None:
                lin.weight.copy_(torch.randn(lin.weight.shape, generator=gen) * WEIGHT_STD)
                if lin.bias is not None:
                    lin.bias.copy_(torch.randn(lin.bias.shape, generator=gen) * WEIGHT_STD)
        if getattr(fusion, "value", None) is not None:
            w = fusion.value.weight
            w.copy_(torch.eye(w.shape[0]) + torch.randn(w.shape, generator=gen) * WEIGHT_STD)


def save_twice(save_fn, directory: Path, *args, **kwargs) -> dict:
    """Save with the library default (.bin via torch.save) and with use_safetensors=True into one folder.

    Returns {"bin": True, "safetensors": True or the error text}. adapters 1.3.0 cannot write safetensors for an
    adapter with ln_before=True: its LayerNorm is registered twice (adapter_norm_before and adapter_down.0), and
    safetensors refuses shared tensors. The .bin keeps both names.
    """
    directory.mkdir(parents=True, exist_ok=True)
    save_fn(str(directory), *args, **kwargs)
    try:
        save_fn(str(directory), *args, use_safetensors=True, **kwargs)
    except RuntimeError as err:
        text = " ".join(str(err).split())
        return {"bin": True, "safetensors": text.split(": [")[0]}  # without its list of names: a set, in any order
    return {"bin": True, "safetensors": True}


def build(kind: str, out: Path) -> None:
    import adapters
    import numpy as np
    import torch
    import transformers
    from adapters import AutoAdapterModel, Fuse
    from safetensors.torch import save_file
    from transformers import AutoModel

    out.mkdir(parents=True, exist_ok=True)
    config = tiny_config(kind)

    # 1. Bare transformers encoder, saved for the no-adapters side.
    torch.manual_seed(SEED)
    bare = AutoModel.from_config(config).eval()
    bare.save_pretrained(out / "base_model", safe_serialization=True)
    base_state = bare.state_dict()

    # 2. Same encoder inside the adapters flex-head model.
    torch.manual_seed(SEED)
    model = AutoAdapterModel.from_config(config)
    prefix = model.base_model_prefix
    missing, unexpected = model.base_model.load_state_dict(base_state, strict=False)
    # prompt_tuning.base_model_embeddings is a second reference to the word embeddings, filled by the load above.
    assert not unexpected and all(k.startswith("prompt_tuning.") for k in missing), (missing, unexpected)

    gen = torch.Generator().manual_seed(SEED + 1)
    specs = adapter_specs()
    for name, (cls_name, kwargs) in specs.items():
        model.add_adapter(name, config=getattr(adapters, cls_name)(**kwargs))
        for module in model.modules():
            if isinstance(getattr(module, "adapters", None), torch.nn.ModuleDict) and name in module.adapters:
                randomise_(module.adapters[name], gen)

    model.add_classification_head("cls", num_labels=2, layers=2, activation_function="tanh")
    randomise_(model.heads["cls"], gen)

    fusion_names = {}
    for fid, (names, preset) in FUSIONS.items():
        model.add_adapter_fusion(Fuse(*names), config=preset)
        fusion_names[fid] = ",".join(names)
        for module in model.modules():
            layers = getattr(module, "adapter_fusion_layer", None)
            if isinstance(layers, torch.nn.ModuleDict) and fusion_names[fid] in layers:
                randomise_fusion_(layers[fusion_names[fid]], gen)

    # 3. Save with the library's own functions.
    formats = {}
    for name in specs:
        formats[f"adapters/{name}"] = save_twice(model.save_adapter, out / "adapters" / name, name, with_head=False)
    formats["heads/cls"] = save_twice(model.save_head, out / "heads" / "cls", "cls")
    for fid, (names, _) in FUSIONS.items():
        formats[f"fusions/{fid}"] = save_twice(model.save_adapter_fusion, out / "fusions" / fid, Fuse(*names))

    # 4. Record eval-mode outputs.
    model.eval()
    ids, mask = make_inputs(kind)
    tensors = {"input_ids": ids, "attention_mask": mask}
    manifest_tensors = {
        "input_ids": {"shape": list(ids.shape), "what": "int64 token ids; row 1 padded after 6 tokens"},
        "attention_mask": {"shape": list(mask.shape), "what": "1 = real token, 0 = padding"},
    }

    def record(key: str, value, what: str, **extra) -> None:
        t = torch.as_tensor(value).detach().to(torch.float32).clone().contiguous()
        tensors[key] = t
        manifest_tensors[key] = {"shape": list(t.shape), "what": what, **extra}

    with torch.no_grad():
        ref = bare(input_ids=ids, attention_mask=mask).last_hidden_state
        setups = {"bare": None, **{n: n for n in specs}, **{f"fusion_{fid}": Fuse(*FUSIONS[fid][0]) for fid in FUSIONS}}
        bare_diff = None
        for setup_id, setup in setups.items():
            model.set_active_adapters(setup)
            is_fusion = setup_id.startswith("fusion_")
            enc = model.base_model(
                input_ids=ids,
                attention_mask=mask,
                output_hidden_states=True,
                return_dict=True,
                output_adapter_fusion_attentions=True if is_fusion else None,
            )
            record(
                f"{setup_id}.last_hidden_state",
                enc.last_hidden_state,
                "encoder last_hidden_state",
                setup=describe_setup(setup),
            )
            for i, h in enumerate(enc.hidden_states[:-1]):  # the last one is last_hidden_state
                record(
                    f"{setup_id}.hidden_states.{i}",
                    h,
                    "embeddings output" if i == 0 else f"output of encoder layer {i - 1}",
                    setup=describe_setup(setup),
                    layer=i - 1,
                )
            if is_fusion:
                attn = enc["adapter_fusion_attentions"][setup.name]
                for layer_idx, per_loc in sorted(attn.items()):
                    for loc, probs in per_loc.items():
                        record(
                            f"{setup_id}.fusion_attention.layer{layer_idx}.{loc}",
                            np.asarray(probs),
                            "softmax fusion weights, shape (batch, seq, n_adapters), adapters in fusion order",
                            setup=describe_setup(setup),
                            layer=int(layer_idx),
                            location=loc,
                            adapters=[str(child) for child in setup.children],  # fusion order (flatten() is a set)
                        )
            logits = model(input_ids=ids, attention_mask=mask, head="cls", return_dict=True).logits
            record(
                f"{setup_id}.logits",
                logits,
                "head 'cls' logits (pools token 0 of last_hidden_state)",
                setup=describe_setup(setup),
                head="cls",
            )
            if setup is None:
                bare_diff = (enc.last_hidden_state - ref).abs().max().item()

    save_file(tensors, str(out / "outputs.safetensors"))

    manifest = {
        "model_type": config.model_type,
        "seed": SEED,
        "weight_std": WEIGHT_STD,
        "versions": {
            "adapters": adapters.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "python": sys.version.split()[0],
        },
        "mode": "eval (all dropout off)",
        "base_model": {
            "dir": "base_model",
            "prefix_in_adapter_model": prefix,
            "bare_vs_adapter_model_max_abs_diff": bare_diff,
            "attn_implementation_adapters": getattr(model.config, "_attn_implementation", None),
        },
        "adapters": {
            n: {"dir": f"adapters/{n}", "config_class": c, "config_kwargs": kw} for n, (c, kw) in specs.items()
        },
        "head": {"dir": "heads/cls", "name": "cls", "num_labels": 2, "layers": 2, "activation_function": "tanh"},
        "fusions": {
            fid: {"dir": f"fusions/{fid}", "name": fusion_names[fid], "adapters": names, "preset": preset}
            for fid, (names, preset) in FUSIONS.items()
        },
        "saved_formats": formats,
        "setups": {sid: describe_setup(s) for sid, s in setups.items()},
        "tensors": manifest_tensors,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(f"{kind}: bare vs adapters-model max|diff| = {bare_diff:.3e}, {len(tensors)} tensors -> {out}")


# --------------------------------------------------------------------------------------------------------------------
# Independent re-implementation, used to check that docs/adapterhub.md describes what adapters 1.3.0 computes. It only
# reads the saved files and a plain transformers encoder; nothing here imports adapters.


def load_weights(folder: Path, bin_name: str, safe_name: str) -> dict:
    """Read a saved weights file; if both formats exist, check they hold the same tensors."""
    import torch
    from safetensors.torch import load_file

    state = torch.load(folder / bin_name, map_location="cpu", weights_only=True)
    if (folder / safe_name).exists():
        safe = load_file(str(folder / safe_name))
        assert safe.keys() == state.keys() and all(torch.equal(safe[k], state[k]) for k in state), folder
    return state


def act_fn(name: str):
    import torch.nn.functional as F
    from transformers.activations import get_activation

    return F.leaky_relu if name.lower() == "leakyrelu" else get_activation(name.lower())


class RefAdapter:
    """One bottleneck adapter at one site: W holds its tensors with the site prefix stripped."""

    def __init__(self, cfg: dict, W: dict):
        self.cfg, self.W = cfg, W

    def pre(self, h, x, ln, query_before_ln=False):
        """Returns (adapter input, fusion query, adapter residual). h: sub-layer output, x: sub-layer input."""
        c = self.cfg
        residual, query = None, (h if query_before_ln else None)
        if c["residual_before_ln"] is True:
            residual = h
        if c["original_ln_before"]:
            h = h + x
            if c["residual_before_ln"] == "post_add":
                residual = h
            h = ln(h)
        if not c["residual_before_ln"]:
            residual = h
        return h, (h if query is None else query), residual

    def up(self, z):
        import torch.nn.functional as F

        c, W = self.cfg, self.W
        if c["ln_before"]:  # saved twice: adapter_norm_before.* and adapter_down.0.*
            z = F.layer_norm(z, z.shape[-1:], W["adapter_norm_before.weight"], W["adapter_norm_before.bias"])
        i = 1 if c["ln_before"] else 0
        down = act_fn(c["non_linearity"])(F.linear(z, W[f"adapter_down.{i}.weight"], W[f"adapter_down.{i}.bias"]))
        return F.linear(down, W["adapter_up.weight"], W["adapter_up.bias"]) * c["scaling"]

    def core(self, z, residual):
        import torch.nn.functional as F

        c, out = self.cfg, self.up(z)
        if c["adapter_residual_before_ln"]:
            out = out + residual
        if c["ln_after"]:
            out = F.layer_norm(
                out, out.shape[-1:], self.W["adapter_norm_after.weight"], self.W["adapter_norm_after.bias"]
            )
        if not c["adapter_residual_before_ln"]:
            out = out + residual
        return out

    def post(self, out, x, ln):
        return ln(out + x) if self.cfg["original_ln_after"] else out


def ref_fusion(cfg: dict, W: dict, adapters: list, h, x, ln):
    """AdapterFusion at one site; the last adapter's config decides the query, residual and final LayerNorm."""
    import torch
    import torch.nn.functional as F

    last = adapters[-1]
    z, query, residual = last.pre(h, x, ln, query_before_ln=cfg["query_before_ln"])
    V = torch.stack([a.up(z) for a in adapters], dim=2)  # (batch, seq, N, d); keys and values are the same tensor
    if cfg["residual_before"]:
        V = V + residual[:, :, None, :]
    q = F.linear(query, W["query.weight"], W["query.bias"]) if cfg["query"] else query
    k = F.linear(V, W["key.weight"], W["key.bias"]) if cfg["key"] else V
    v = F.linear(V, W["value.weight"]) if cfg["value"] and cfg["value_before_softmax"] else V
    probs = torch.softmax(torch.einsum("btd,btnd->btn", q, k) / (50.0 if cfg["temperature"] else 1.0), dim=-1)
    ctx = torch.einsum("btn,btnd->btd", probs, v)
    if cfg["value"] and not cfg["value_before_softmax"]:
        ctx = F.linear(ctx, W["value.weight"])
    if not cfg["residual_before"]:
        ctx = ctx + residual
    return last.post(ctx, x, ln), probs


def verify(kind: str, out: Path, atol: float = 1e-5) -> None:
    """Recompute every recorded tensor from the saved files with the reference above and compare."""
    import torch
    import torch.nn.functional as F
    from safetensors.torch import load_file
    from transformers import AutoModel

    manifest = json.loads((out / "manifest.json").read_text())
    rec = load_file(str(out / "outputs.safetensors"))
    enc = AutoModel.from_pretrained(out / "base_model").eval()
    prefix = manifest["base_model"]["prefix_in_adapter_model"]
    sites = {}  # (layer, location) -> sub-layer output module
    for i, layer in enumerate(enc.encoder.layer):
        sites[(i, "mh_adapter")] = layer.attention.output
        sites[(i, "output_adapter")] = layer.output
    site_path = {"mh_adapter": "attention.output", "output_adapter": "output"}

    def strip(state: dict, i: int, loc: str, kind_key: str, name: str) -> dict:
        p = f"{prefix}.encoder.layer.{i}.{site_path[loc]}.{kind_key}.{name}."
        return {k[len(p) :]: v for k, v in state.items() if k.startswith(p)}

    adapters_at: dict[str, dict[tuple[int, str], RefAdapter]] = {}
    for name, info in manifest["adapters"].items():
        saved = json.loads((out / info["dir"] / "adapter_config.json").read_text())
        state = load_weights(out / info["dir"], "pytorch_adapter.bin", "adapter.safetensors")
        adapters_at[name] = {}
        for i, loc in sites:
            W = strip(state, i, loc, "adapters", name)
            if W:
                adapters_at[name][(i, loc)] = RefAdapter(saved["config"], W)
        assert sum(len(a.W) for a in adapters_at[name].values()) == len(state), f"{name}: unplaced weights"

    fusions = {}
    for fid, info in manifest["fusions"].items():
        saved = json.loads((out / info["dir"] / "adapter_fusion_config.json").read_text())
        state = load_weights(out / info["dir"], "pytorch_model_adapter_fusion.bin", "model_adapter_fusion.safetensors")
        fusions[fid] = (saved, {key: strip(state, *key, "adapter_fusion_layer", saved["name"]) for key in sites})

    head = load_weights(out / "heads" / "cls", "pytorch_model_head.bin", "model_head.safetensors")

    def run(setup_id: str):
        probs_out = {}

        def site_forward(module, hidden_states, input_tensor, *, key):
            h = module.dropout(module.dense(hidden_states))
            ln = module.LayerNorm
            if setup_id.startswith("fusion_"):
                saved, W = fusions[setup_id[len("fusion_") :]]
                if W[key]:
                    ads = [adapters_at[n][key] for n in saved["adapter_names"]]
                    y, probs_out[key] = ref_fusion(saved["config"], W[key], ads, h, input_tensor, ln)
                    return y
            elif setup_id in adapters_at and key in adapters_at[setup_id]:
                a = adapters_at[setup_id][key]
                z, _, r = a.pre(h, input_tensor, ln)
                return a.post(a.core(z, r), input_tensor, ln)
            return ln(h + input_tensor)

        for key, module in sites.items():
            module.forward = functools.partial(site_forward, module, key=key)
        o = enc(input_ids=rec["input_ids"], attention_mask=rec["attention_mask"]).last_hidden_state
        for module in sites.values():
            del module.forward
        return o, probs_out

    worst = 0.0
    with torch.no_grad():
        for setup_id in manifest["setups"]:
            hidden, probs = run(setup_id)
            expect = rec[f"{setup_id}.last_hidden_state"]
            torch.testing.assert_close(hidden, expect, atol=atol, rtol=1e-5, msg=f"{kind} {setup_id}")
            worst = max(worst, (hidden - expect).abs().max().item())
            for (i, loc), p in probs.items():
                torch.testing.assert_close(p, rec[f"{setup_id}.fusion_attention.layer{i}.{loc}"], atol=atol, rtol=1e-5)
            cls = hidden[:, 0]  # pooled token: position 0, no pooler
            logits = F.linear(
                torch.tanh(F.linear(cls, head["heads.cls.1.weight"], head["heads.cls.1.bias"])),
                head["heads.cls.4.weight"],
                head["heads.cls.4.bias"],
            )
            torch.testing.assert_close(logits, rec[f"{setup_id}.logits"], atol=atol, rtol=1e-5)
    print(f"{kind}: reference re-implementation matches all setups (max|diff| {worst:.2e})")


def describe_setup(setup) -> str:
    if setup is None:
        return "no active adapter"
    return str(setup)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="fixture folder (default: %(default)s)")
    parser.add_argument(
        "--make-venv",
        type=Path,
        metavar="DIR",
        help="create DIR with the pinned adapters stack and run this script inside it",
    )
    args = parser.parse_args()

    if args.make_venv is not None:
        return make_venv_and_rerun(args.make_venv, ["--out", str(args.out.resolve())])

    require_adapters("run with --make-venv DIR or with that venv's python")
    rebuild(("bert", "roberta"), args.out, build, verify)
    return 0


if __name__ == "__main__":
    run_offline(main)
