"""Bad-input cases at one boundary, training and evaluating decoders: instruction (prompt + answer) data, answer-only
loss masks, tokenizers without pad tokens, padding sides, length limits and decoder heads through train(), experiment
files and the runner."""

from __future__ import annotations

from catalogue import BadInput

B = BadInput

CASES: tuple[BadInput, ...] = ()
