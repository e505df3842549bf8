"""Write AdapterHub parity fixtures for the span heads (issue #25) into tests/fixtures/adapterhub/span_heads/.

On the tiny BERT of tests/fixtures/adapterhub/bert (its base_model, adapters and dynamic fusion, made by
make_adapterhub_fixtures.py), `adapters` 1.3.0 adds a QuestionAnsweringHead ("qa", 1 layer) and a TaggingHead
("ner", 2 layers, relu, 5 labels), redraws their weights from a seeded generator, saves each with its own save_head
(.bin and .safetensors), and records on the bert fixture's inputs, in eval mode:

* ``<setup>.qa.start_logits`` / ``<setup>.qa.end_logits`` [3, 10] and ``<setup>.ner.logits`` [3, 10, 5],
  for the setups ``bare``, ``pf`` (one adapter) and ``fusion_dynamic`` (pf, pf_relu, pf3);

into ``outputs.safetensors``, described in ``manifest.json``. Re-running is deterministic.

Usage (from the repository root), with the interpreter of a venv holding adapters==1.3.0 (the one of
make_adapterhub_fixtures.py, or benchmarks/.venv-adapters)::

    benchmarks/.venv-adapters/bin/python scripts/make_adapterhub_fixtures_span.py
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_adapterhub_fixtures import ADAPTERS_VERSION, SEED, randomise_, save_twice  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
BERT = REPO_ROOT / "tests" / "fixtures" / "adapterhub" / "bert"
OUT = REPO_ROOT / "tests" / "fixtures" / "adapterhub" / "span_heads"
TAGS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
FUSED = ("pf", "pf_relu", "pf3")


def build() -> None:
    import adapters
    import torch
    import transformers
    from adapters import AutoAdapterModel, Fuse
    from safetensors.torch import load_file, save_file

    base = transformers.AutoModel.from_pretrained(BERT / "base_model")
    base.config._name_or_path = ""  # head_config.json records it as model_name: no machine path in the fixture
    model = AutoAdapterModel.from_config(base.config)
    missing, unexpected = model.base_model.load_state_dict(base.state_dict(), strict=False)
    assert not unexpected and all(k.startswith("prompt_tuning.") for k in missing), (missing, unexpected)
    for name in FUSED:
        model.load_adapter(str(BERT / "adapters" / name), load_as=name, with_head=False)
    model.load_adapter_fusion(str(BERT / "fusions" / "dynamic"), with_head=False)

    gen = torch.Generator().manual_seed(SEED + 25)
    model.add_qa_head("qa", layers=1)
    model.add_tagging_head("ner", num_labels=len(TAGS), layers=2, activation_function="relu", id2label=TAGS)
    randomise_(model.heads["qa"], gen)
    randomise_(model.heads["ner"], gen)
    OUT.mkdir(parents=True)
    formats = {f"heads/{h}": save_twice(model.save_head, OUT / "heads" / h, h) for h in ("qa", "ner")}

    recorded = load_file(str(BERT / "outputs.safetensors"))
    ids, mask = recorded["input_ids"], recorded["attention_mask"]
    tensors = {"input_ids": ids, "attention_mask": mask}
    model.eval()
    setups = {"bare": None, "pf": "pf", "fusion_dynamic": Fuse(*FUSED)}
    with torch.no_grad():
        for setup_id, setup in setups.items():
            model.set_active_adapters(setup)
            qa = model(input_ids=ids, attention_mask=mask, head="qa", return_dict=True)
            tensors[f"{setup_id}.qa.start_logits"] = qa.start_logits.contiguous()
            tensors[f"{setup_id}.qa.end_logits"] = qa.end_logits.contiguous()
            ner = model(input_ids=ids, attention_mask=mask, head="ner", return_dict=True)
            tensors[f"{setup_id}.ner.logits"] = ner.logits.contiguous()
    save_file(tensors, str(OUT / "outputs.safetensors"))
    manifest = {
        "base": "tests/fixtures/adapterhub/bert (base_model, adapters pf/pf_relu/pf3, fusions/dynamic)",
        "seed": SEED + 25,
        "versions": {"adapters": adapters.__version__, "transformers": transformers.__version__},
        "mode": "eval (all dropout off)",
        "heads": {
            "qa": {"dir": "heads/qa", "type": "question_answering", "layers": 1},
            "ner": {"dir": "heads/ner", "type": "tagging", "layers": 2, "activation": "relu", "id2label": TAGS},
        },
        "setups": {"bare": "no adapter", "pf": "adapter pf", "fusion_dynamic": "Fuse(pf, pf_relu, pf3)"},
        "saved_formats": formats,
        "tensors": {key: list(value.shape) for key, value in tensors.items()},
    }
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(f"{len(tensors)} tensors -> {OUT}")


def main() -> int:
    try:
        import adapters
    except ImportError:
        sys.exit("adapters is not installed here; run with the python of a venv holding adapters==1.3.0")
    if adapters.__version__ != ADAPTERS_VERSION:
        sys.exit(f"need adapters=={ADAPTERS_VERSION}, found {adapters.__version__}")
    if OUT.exists():
        shutil.rmtree(OUT)
    build()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    sys.exit(main())
