"""Which pooling a head should use on a given encoder.

A head reads one vector per input. BERT-style encoders pretrain their [CLS] token (next-sentence prediction), so
`cls` suits them; sentence-transformers encoders such as the shipped all-MiniLM-L6-v2 were trained on the *mean* of
their token outputs, and their [CLS] output was never trained for anything: a head on it starts from a feature that
carries little of the sentence. Those models say how they pool in `1_Pooling/config.json`, so we read it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from adapterfusion.errors import ConfigError
from adapterfusion.heads.config import POOLINGS

SENTENCE_TRANSFORMERS_POOLING = Path("1_Pooling") / "config.json"
_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}


def encoder_pooling(encoder: str | os.PathLike | None) -> str:
    """The pooling a head on `encoder` (a local folder or a Hub id) uses by default: what a sentence-transformers
    folder declares (mean or cls), else `cls`. A Hub id is not looked up (no download for a default)."""
    if encoder is None:
        return "cls"
    config = Path(encoder) / SENTENCE_TRANSFORMERS_POOLING
    try:
        declared = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "cls"
    if not isinstance(declared, dict):
        return "cls"
    modes = [mode for key, mode in _MODES.items() if declared.get(key) is True]
    return modes[0] if len(modes) == 1 else "cls"


def resolve_pooling(pooling: str | None, encoder: str | os.PathLike | None, default: str | None = None) -> str:
    """`pooling` when given (checked), else `default` (encoders.default_pooling knows decoders), else the
    encoder's own (encoder_pooling)."""
    if pooling is None:
        return default if default is not None else encoder_pooling(encoder)
    if pooling not in POOLINGS:
        raise ConfigError(
            f"pooling={pooling!r} is not supported; choose one of {', '.join(POOLINGS)} (or null for the "
            "encoder's own: mean for sentence-transformers encoders such as the shipped MiniLM, "
            "else cls)"
        )
    return pooling
