"""Bad-input cases at one boundary, AdapterHub's format on decoders and encoder-decoders: adapters, fusions and heads
of GPT-2, Llama, Qwen, T5 and BART read from and written to AdapterHub folders."""

from __future__ import annotations

from catalogue import BadInput

B = BadInput
GROUP = "AdapterHub decoders"

CASES: tuple[BadInput, ...] = ()
