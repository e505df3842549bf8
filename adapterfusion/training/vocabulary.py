"""The token ids a run's tokenizer puts in every batch must have rows in the model's embeddings. A token added to the
tokenizer after the model was made (`add_special_tokens({"pad_token": "<pad>"})` without resizing the embeddings)
gets an id past them: every padded batch, or with an added end token every answer, would fail at the first training
step, once the data had loaded and the run folder was written. Judged from the encoder's config, before the data
loads."""

from __future__ import annotations

import os
from typing import Any

from adapterfusion.encoder_limits import encoder_config
from adapterfusion.tasks.instruction import end_token_id
from adapterfusion.training.errors import TrainingError

_PAD, _ADDED, _END = (
    "the pad token",
    "a special token the tokenizer adds to every text",
    "the end token of every answer",
)
# how to stay within the embeddings without resizing them, per kind of token
_INSTEAD = {
    _PAD: "tokenizer.pad_token = tokenizer.eos_token",
    _ADDED: "the tokenizer the model was saved with",
    _END: "tokenizer.eos_token = <a token of the model's vocabulary>",
}


def _vocabulary_size(encoder: str | os.PathLike) -> int | None:
    """The number of token ids the model embeds, from its config (None when that cannot be read offline)."""
    config = encoder_config(encoder)
    if config is None:
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    size = getattr(text, "vocab_size", None)
    return size if isinstance(size, int) and size > 0 else None


def _used_ids(tokenizer: Any, generation: bool) -> dict[str, int]:
    """What the encoding and padding put in batches whatever the text: the pad token, the special tokens the
    tokenizer adds to every text (BOS, [CLS], [SEP]) and, for a generation task, the end token of every answer."""
    used: dict[str, int] = {}
    if isinstance(tokenizer.pad_token_id, int):
        used[_PAD] = tokenizer.pad_token_id
    special = set(getattr(tokenizer, "all_special_ids", ()))
    for token_id in tokenizer("a", add_special_tokens=True)["input_ids"]:
        if token_id in special:
            used.setdefault(_ADDED, token_id)
    if generation:
        used[_END] = end_token_id(tokenizer)
    return used


def check_tokenizer_vocabulary(tokenizer: Any, encoder: str | os.PathLike, generation: bool = False) -> None:
    """TrainingError when a token id every batch holds is past the model's embeddings (see the module docstring)."""
    size = _vocabulary_size(encoder)
    if size is None:
        return
    outside = {what: token_id for what, token_id in _used_ids(tokenizer, generation).items() if token_id >= size}
    if not outside:
        return
    what, token_id = next(iter(outside.items()))
    token = tokenizer.convert_ids_to_tokens(token_id)
    raise TrainingError(
        f"encoder {os.fspath(encoder)!r}: {what}, {token!r}, has the id {token_id}, past the model's vocabulary of "
        f"{size} token ids (its embeddings), so every batch would fail at the first step; it was added to the "
        "tokenizer after the model was made. Resize the model's embeddings and save both "
        "(model.resize_token_embeddings(len(tokenizer)); model.save_pretrained(folder); "
        f"tokenizer.save_pretrained(folder)), or use a token the model has ({_INSTEAD[what]}) and save the tokenizer"
    )
