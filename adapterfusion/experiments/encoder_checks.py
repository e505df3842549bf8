"""What an experiment's encoder decides when its file is read: the `encoder` value itself (a folder, a Hub id or
the default decoder by name), the head pooling of every variant spelled out (default: the encoder's own), and the
settings its config refuses (a max_length above its positions, layernorm-only without LayerNorms). Read from the
encoder's config, without the network, so a bad file is refused before any job runs, not by every job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from adapterfusion.defaults import DEFAULT_DECODER, default_decoder_gguf, default_encoder_path
from adapterfusion.encoder_limits import check_max_length
from adapterfusion.encoders import check_encoder, default_pooling
from adapterfusion.errors import AdapterFusionError, ConfigError, DefaultModelMissingError
from adapterfusion.experiments.spec_checks import fail
from adapterfusion.experiments.variants import Entry, SetupVariant, setup_option_defaults
from adapterfusion.heads.pooling import resolve_pooling
from adapterfusion.training.errors import TrainingError
from adapterfusion.training.setups import LAYERNORM_ONLY, check_layer_norms


def parse_encoder(value: Any, base_dir: Path) -> str | None:
    """The file's `encoder`: None (the shipped MiniLM), the default decoder by name, a local folder made absolute, or
    a Hub id as it is."""
    if value is None:
        return None
    if value == DEFAULT_DECODER:  # kept by name, so the spec is the same on every machine (runner.py resolves it)
        try:
            default_decoder_gguf()
        except AdapterFusionError as err:
            raise fail("encoder", str(err)) from None
        return value
    if not isinstance(value, str) or not value:
        raise fail(
            "encoder", f"must be an encoder folder or a Hub id (a string), or null for the shipped one; got {value!r}"
        )
    try:  # a mistyped path or a folder with no model or tokenizer is refused here, not per job
        local = check_encoder(value, base_dir)
    except AdapterFusionError as err:  # a Hub id is looked up once, when the experiment runs (runner.py)
        raise fail("encoder", str(err)) from None
    return str(local) if local is not None else value


def resolve_poolings(
    variants: Sequence[SetupVariant], entries: Sequence[Entry], encoder: str | None, key: str = "setups"
) -> list[SetupVariant]:
    """Every variant with a `pooling` option gets it spelled out (the entry's, else the encoder's own: mean for the
    shipped MiniLM, see heads/pooling.py), so job hashes and the saved spec say which pooling each run used."""
    if encoder is None:
        try:
            encoder = str(default_encoder_path())
        except DefaultModelMissingError:
            encoder = None
    out = []
    for variant, (i, _, _) in zip(variants, entries, strict=True):
        if "pooling" not in variant.options and "pooling" not in setup_option_defaults(variant.setup):
            out.append(variant)
            continue
        try:
            pooling = resolve_pooling(variant.options.get("pooling"), encoder, default_pooling(encoder))
        except ConfigError as err:
            raise fail(f"{key}[{i}].pooling", str(err)) from None
        out.append(dataclasses.replace(variant, options={**variant.options, "pooling": pooling}))
    return out


def check_max_lengths(
    global_training: Mapping[str, Any],
    entries: Sequence[Entry],
    task_training: Mapping[str, Mapping[str, Any]],
    encoder: str | None,
    key: str = "setups",
) -> None:
    """A max_length above the encoder's positions, refused here when its config can be read without the network
    (else the job refuses it before training: training/api.py)."""
    try:
        checked = encoder if encoder is not None else str(default_encoder_path())
    except DefaultModelMissingError:
        return
    sources = [
        ("training", global_training),
        *((f"{key}[{i}]", entry) for i, _, entry in entries),
        *((f"task_training.{task}", overrides) for task, overrides in task_training.items()),
    ]
    for path, overrides in sources:
        if "max_length" in overrides:
            try:
                check_max_length(overrides["max_length"], checked)
            except ConfigError as err:
                raise fail(f"{path}.max_length", str(err)) from None


def check_layernorm_only(
    variants: Sequence[SetupVariant], entries: Sequence[Entry], encoder: str | None, key: str
) -> None:
    """layernorm-only on an encoder without torch.nn.LayerNorm (RMSNorm decoders: SmolLM2, Llama, Qwen, ...) is
    refused here, from the encoder's config, not by every job at run time (the jobs still refuse an encoder whose
    config cannot be read without the network). The shipped MiniLM (encoder null) has LayerNorms."""
    first = next(
        (i for variant, (i, _, _) in zip(variants, entries, strict=True) if variant.setup == LAYERNORM_ONLY), None
    )
    if first is None or encoder is None:
        return
    try:
        check_layer_norms(encoder)
    except TrainingError as err:
        raise fail(f"{key}[{first}]", str(err)) from None
