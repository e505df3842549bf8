"""Quickstart: adapters and AdapterFusion on the shipped MiniLM encoder, CPU-friendly.

    .venv/bin/python examples/quickstart.py [--data-dir DIR] [--adapter-steps 40] [--fusion-steps 40]

1. Wrap the embedded all-MiniLM-L6-v2 encoder and add three Pfeiffer adapters (mnli, sst2, rte).
2. Train the rte adapter (ST-A) for a few steps: encoder frozen, only the adapter and its head learn.
3. Fuse all three with AdapterFusion and train only the fusion's Q/K/V (and the head) for a few steps.
4. Print dev accuracy before and after, and the mean fusion attention per layer over the dev set.

Data: RTE in the HuggingFace Hub field layout (`<dir>/rte/{train,validation}.jsonl.gz`); by default the small
slice shipped inside the package. A few dozen steps on a slice is a demo of the API, not a result: the paper's
numbers need full training (see the experiment runner).
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer

import adapterfusion as af

DEMO_DATA = Path(af.__file__).parent / "demo_data"


def read_split(data_dir: Path, split: str, limit: int) -> list[dict]:
    path = data_dir / "rte" / f"{split}.jsonl.gz"
    if not path.is_file():
        raise SystemExit(f"{path} not found: pass --data-dir with an rte/{split}.jsonl.gz inside")
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line, _ in zip(handle, range(limit), strict=False)]


def batches(rows: list[dict], tokenizer, size: int, shuffle: bool, seed: int):
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed)) if shuffle else range(len(rows))
    order = list(order)
    for start in range(0, len(order), size):
        chunk = [rows[int(i)] for i in order[start : start + size]]
        encoded = tokenizer(
            [r["sentence1"] for r in chunk],
            [r["sentence2"] for r in chunk],
            truncation=True,
            max_length=128,
            padding=True,
            return_tensors="pt",
        )
        encoded["labels"] = torch.tensor([r["label"] for r in chunk])
        yield encoded


def train(model: af.AdaptedModel, rows, tokenizer, steps: int, lr: float, label: str, batch_size: int) -> None:
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    step, epoch, start = 0, 0, time.perf_counter()
    while step < steps:
        for batch in batches(rows, tokenizer, batch_size, shuffle=True, seed=epoch):
            model.set_fusion_step(step)
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step % 10 == 0 or step == steps:
                print(f"  [{label}] step {step}/{steps}  loss {loss.item():.4f}  ({time.perf_counter() - start:.0f}s)")
            if step >= steps:
                break
        epoch += 1
    model.eval()


def evaluate(model: af.AdaptedModel, rows, tokenizer, batch_size: int, with_attention: bool = False):
    with model.inference_cache():  # no_grad, and each fusion's weights folded once for the whole dev set
        return _evaluate_batches(model, rows, tokenizer, batch_size, with_attention)


def _evaluate_batches(model: af.AdaptedModel, rows, tokenizer, batch_size: int, with_attention: bool):
    correct, attention_sum, tokens = 0, None, 0
    for batch in batches(rows, tokenizer, batch_size, shuffle=False, seed=0):
        out = model(**batch, output_fusion_attentions=with_attention)
        correct += (out.logits.argmax(-1) == batch["labels"]).sum().item()
        if with_attention:
            mask = batch["attention_mask"].unsqueeze(-1).float()
            per_layer = torch.stack([(a * mask).sum(dim=(0, 1)) for a in out.fusion_attentions])  # [layers, N]
            attention_sum = per_layer if attention_sum is None else attention_sum + per_layer
            tokens += mask.sum().item()
    accuracy = correct / len(rows)
    return accuracy, (attention_sum / tokens if with_attention else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEMO_DATA)
    parser.add_argument("--encoder", default=None, help="HF encoder path or Hub name (default: shipped MiniLM)")
    parser.add_argument("--adapter-steps", type=int, default=40)
    parser.add_argument("--fusion-steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--train-examples", type=int, default=160)
    parser.add_argument("--dev-examples", type=int, default=96)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, torch.get_num_threads()))

    encoder_path = args.encoder or af.default_encoder_path()
    tokenizer = AutoTokenizer.from_pretrained(encoder_path)
    model = af.wrap(AutoModel.from_pretrained(encoder_path))
    for name in ("mnli", "sst2", "rte"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=16))
    model.add_head("rte", af.ClassificationHead(num_labels=2, labels=("entailment", "not_entailment")))
    train_rows = read_split(args.data_dir, "train", args.train_examples)
    dev_rows = read_split(args.data_dir, "validation", args.dev_examples)
    print(f"encoder: {encoder_path}\ndata: {args.data_dir / 'rte'} ({len(train_rows)} train, {len(dev_rows)} dev)")

    # Stage 1 (knowledge extraction): a single-task adapter for RTE. Paper: lr 1e-4, up to 30 epochs;
    # a demo this short uses a larger step size.
    model.train_adapter("rte")
    print("\nST-A on RTE:\n" + model.parameter_report().to_markdown())
    train(model, train_rows, tokenizer, args.adapter_steps, 1e-3, "st-a rte", args.batch_size)
    accuracy_adapter, _ = evaluate(model, dev_rows, tokenizer, args.batch_size)
    print(f"dev accuracy, ST-A: {accuracy_adapter:.3f}")

    # Stage 2 (knowledge composition): fuse the three adapters; encoder and adapters frozen.
    model.add_fusion("rte_fusion", ["mnli", "sst2", "rte"], af.FusionConfig.dynamic())
    model.train_fusion("rte_fusion", head="rte")
    print("\nFusion w/ ST-A:\n" + model.parameter_report().to_markdown())
    train(model, train_rows, tokenizer, args.fusion_steps, 5e-4, "fusion", args.batch_size)
    accuracy_fusion, attention = evaluate(model, dev_rows, tokenizer, args.batch_size, with_attention=True)
    print(f"dev accuracy, Fusion w/ ST-A: {accuracy_fusion:.3f}")

    names = model.fusion_setup("rte_fusion").adapters
    print("\nmean fusion attention over dev tokens (rows: layers, columns: adapters)")
    print("layer " + "".join(f"{n:>8}" for n in names))
    for layer, row in enumerate(attention.tolist()):
        print(f"{layer:>5} " + "".join(f"{v:8.3f}" for v in row))


if __name__ == "__main__":
    main()
