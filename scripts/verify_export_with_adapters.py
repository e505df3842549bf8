"""Check that folders written by `export_adapterhub` load in AdapterHub's `adapters` with identical outputs.

Two steps, two environments (ours runs on transformers 5.x, adapters 1.3.0 pins 4.57):
    .venv/bin/python scripts/verify_export_with_adapters.py export OUT      # our venv: export + expected logits
    /path/to/adapters-venv/bin/python scripts/verify_export_with_adapters.py check OUT   # adapters' venv
The adapters venv is the one scripts/make_adapterhub_fixtures.py --make-venv creates.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

BASE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "adapterhub" / "bert" / "base_model"
ADAPTERS = {"a": "pfeiffer", "b": "pfeiffer", "h": "houlsby"}


def export(out: Path) -> None:
    from transformers import AutoModel

    import adapterfusion as af
    from adapterfusion.interop import export_adapterhub

    torch.manual_seed(0)
    model = af.wrap(AutoModel.from_pretrained(BASE)).eval()
    for name, preset in ADAPTERS.items():
        model.add_adapter(name, af.AdapterConfig.from_name(preset, reduction_factor=4, train_layer_norm=False))
        for parameter in model.adapter_parameters(name):
            torch.nn.init.normal_(parameter, std=0.1)
    model.add_fusion("f", ["a", "b"], af.FusionConfig.dynamic(value_init_noise=0.1))
    for parameter in model.fusion_parameters("f"):
        parameter.data.add_(torch.randn_like(parameter) * 0.1)
    model.add_head("cls", af.ClassificationHead(num_labels=2))
    for kind, name in [("adapter", "a"), ("adapter", "b"), ("adapter", "h"), ("fusion", "f"), ("head", "cls")]:
        export_adapterhub(model, kind, name, out / name)
    ids = torch.randint(5, 100, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0
    expected = {"ids": ids, "mask": mask}
    with torch.no_grad():
        for setup, (adapter, fusion) in {"h": ("h", None), "f": (None, "f")}.items():
            model.activate(adapter=adapter, fusion=fusion, head="cls")
            expected[setup] = model(input_ids=ids, attention_mask=mask).logits
    torch.save(expected, out / "expected.pt")
    print(f"exported to {out}")


def check(out: Path) -> None:
    from adapters import AutoAdapterModel
    from adapters.composition import Fuse

    expected = torch.load(out / "expected.pt", weights_only=True)
    model = AutoAdapterModel.from_pretrained(BASE).eval()
    for name in ADAPTERS:  # adapters reads safetensors only when asked to
        model.load_adapter(str(out / name), load_as=name, use_safetensors=True)
    model.load_head(str(out / "cls"), use_safetensors=True)
    model.load_adapter_fusion(str(out / "f"), load_as="a,b", use_safetensors=True)
    worst = 0.0
    with torch.no_grad():
        for setup, active in {"h": "h", "f": Fuse("a", "b")}.items():
            model.set_active_adapters(active)
            model.active_head = "cls"
            logits = model(input_ids=expected["ids"], attention_mask=expected["mask"]).logits
            difference = (logits - expected[setup]).abs().max().item()
            worst = max(worst, difference)
            print(f"{setup}: max |adapters - adapterfusion| = {difference:.3g}")
    sys.exit(0 if worst <= 1e-5 else 1)


if __name__ == "__main__":
    mode, folder = sys.argv[1], Path(sys.argv[2])
    {"export": export, "check": check}[mode](folder)
