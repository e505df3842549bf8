"""How far new, untrained adapters move a decoder's answer, per init (the README's Decoders section quotes it).

    .venv/bin/python scripts/fresh_adapter_drift.py [--seeds 12] [--new-tokens 10]

On the shipped SmolLM2-135M-Instruct (float32), for each seed: two new Pfeiffer adapters and a fusion of them, then
the largest change of the last prompt token's logits against the bare model, and whether the greedy answer to the
README's prompt changed, for one adapter and for the fusion. Prints one row per init."""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import adapterfusion as af

PROMPT = "What is the capital of France?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--new-tokens", type=int, default=10)
    args = parser.parse_args()
    folder = af.default_decoder_path()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = af.wrap(AutoModelForCausalLM.from_pretrained(folder).eval())
    prompt: Any = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True, return_tensors="pt"
    )

    def answer() -> list[int]:
        return model.generate(**prompt, max_new_tokens=args.new_tokens, do_sample=False)[0].tolist()

    with torch.no_grad():
        bare_logits, bare_answer = model(**prompt).logits[0, -1], answer()
    print(f"bare answer: {tokenizer.decode(bare_answer[prompt['input_ids'].shape[1] :])!r}")
    print(f"logits' standard deviation: {float(bare_logits.std()):.2f}")
    print("| init | choice | largest logit change, median [max] | answers changed |")
    print("|---|---|---:|---:|")
    for init in ("houlsby", "bert", "zero_up"):
        moved: dict[str, list[float]] = {"adapter": [], "fusion": []}
        changed = {"adapter": 0, "fusion": 0}
        for seed in range(args.seeds):
            torch.manual_seed(seed)
            for name in ("a", "b"):
                model.add_adapter(name, af.AdapterConfig.pfeiffer(init=init))
            model.add_fusion("f", ["a", "b"])
            choices: tuple[tuple[str, dict[str, Any]], ...] = (
                ("adapter", {"adapter": "a"}),
                ("fusion", {"fusion": "f"}),
            )
            for kind, choice in choices:
                with model.activated(**choice), torch.no_grad():
                    moved[kind].append(float((model(**prompt).logits[0, -1] - bare_logits).abs().max()))
                    changed[kind] += answer() != bare_answer
            model.delete_fusion("f")
            for name in ("a", "b"):
                model.delete_adapter(name)
        for kind in ("adapter", "fusion"):
            print(
                f"| {init} | {kind} | {statistics.median(moved[kind]):.2f} [{max(moved[kind]):.2f}] | "
                f"{changed[kind]} of {args.seeds} |"
            )


if __name__ == "__main__":
    main()
