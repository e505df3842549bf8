"""Which weights an encoder has: its identity (fingerprint and the sha256 of its weights), recorded beside the
adapters trained on it and checked when they are loaded again (`check_same_encoder`); a cheap sample digest recorded
with each saved piece (`sampled_fingerprint`); and the sha256 of a local folder's weight files, recorded with each
run (`encoder_files`), so the runner can tell other weights were saved there without loading the model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from adapterfusion._validation import check_has_values
from adapterfusion.encoder_folders import WEIGHT_FILES, WEIGHT_SHARDS
from adapterfusion.encoder_loading import Encoder
from adapterfusion.errors import IncompatibleModelError
from adapterfusion.file_digests import file_sha256

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel
    from adapterfusion.piece import EncoderFingerprint


# ---- which weights ----------------------------------------------------------------------------------------------
_DIGESTS: weakref.WeakKeyDictionary[nn.Module, tuple[tuple, str]] = weakref.WeakKeyDictionary()


def encoder_digest(model: AdaptedModel) -> str:
    """sha256 of the base encoder's weights (as float32, in module order): tells apart two checkpoints of one
    architecture, which the fingerprint's sizes cannot. Remembered per model until a weight changes: its storage,
    `_version` (in-place operators) or a strided sample of its values (a write through `p.data` leaves `_version` as
    it was, and a digest remembered by version alone went stale), a few dozen values a tensor, so a repeat call costs
    little whatever the model's size."""
    base = {id(p) for p in cast(nn.Module, model.model.base_model).parameters()}
    weights = [p for p in model.encoder_parameters() if id(p) in base]
    check_has_values(weights, "the encoder's weights are", "there is nothing to record or compare a setup by")
    version = tuple((p.data_ptr(), p._version, p.dtype, p.device, _sampled(p)) for p in weights)
    remembered = _DIGESTS.get(model)
    if remembered is not None and remembered[0] == version:
        return remembered[1]
    digest = hashlib.sha256()
    for parameter in weights:
        digest.update(parameter.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    _DIGESTS[model] = (version, digest.hexdigest())
    return digest.hexdigest()


SAMPLED_VALUES = 4096  # values of each weight encoder_sample_digest reads


def encoder_sample_digest(model: AdaptedModel) -> str:
    """sha256 of about SAMPLED_VALUES evenly spaced values of each weight of the encoder's layers (as float32) and of
    its shape: two checkpoints of one architecture differ in nearly every value, so this tells them apart in
    milliseconds at any model size, where encoder_digest reads every weight (a minute on a 7B decoder). Recorded with
    each saved piece, for a warning when it is loaded into other weights; not a proof that two encoders are equal.
    The layers alone: a checkpoint without some weights outside them (roberta-base's pooler) gets them initialised at
    random on each load, which must not read as other weights. "" where a weight has no values (the meta device):
    nothing to record or compare, and what needs values says so itself."""
    base = {id(p) for p in model.encoder_layers().parameters()}
    digest = hashlib.sha256()
    with torch.no_grad():
        for weight in (p for p in model.encoder_parameters() if id(p) in base):
            if weight.is_meta:
                return ""
            sample = _evenly_spaced(weight, SAMPLED_VALUES).to("cpu", torch.float32).contiguous()
            digest.update(repr(tuple(weight.shape)).encode())
            digest.update(sample.numpy().tobytes())
    return digest.hexdigest()


def sampled_fingerprint(model: AdaptedModel) -> EncoderFingerprint:
    """The model's fingerprint with the sample digest of its weights, as our saved pieces record it."""
    return dataclasses.replace(model.fingerprint, weights_sample=encoder_sample_digest(model))


def _sampled(weight: torch.Tensor) -> float:
    """The sum of about 64 of `weight`'s values, evenly spaced (a NaN compares unequal: the digest is taken again)."""
    with torch.no_grad():
        return float(_evenly_spaced(weight, 64).double().sum())


def _evenly_spaced(weight: torch.Tensor, count: int) -> torch.Tensor:
    """About `count` of `weight`'s values (at least `count`, all of a smaller one), evenly spaced, flattened."""
    flat = weight.detach().reshape(-1)
    return flat[:: max(1, flat.numel() // count)]


def encoder_identity(model: AdaptedModel) -> dict[str, Any]:
    """What is recorded beside adapters trained on `model`'s encoder: its fingerprint and the digest of its weights."""
    return {**model.fingerprint.to_dict(), "weights_sha256": encoder_digest(model)}


def weight_file_digests(folder: Path) -> dict[str, str]:
    """{file name: sha256} of the files in a model folder that may hold its weights (WEIGHT_FILES, shards, GGUF)."""
    return {
        path.name: file_sha256(path)
        for path in sorted(folder.iterdir())
        if path.is_file()
        and (
            path.name in WEIGHT_FILES
            or any(path.name.startswith(stem) and path.name.endswith(ends) for stem, ends in WEIGHT_SHARDS)
        )
    }


def encoder_files(encoder: Encoder) -> dict[str, Any] | None:
    """What a run records of a local encoder's weight files, {"folder": ..., "sha256": weight_file_digests}: which
    weights it started from, judged from the files without loading the model (the default decoder's take ~30 s), so
    the experiment runner can tell that other weights were saved at that path since. None for a Hub id."""
    if encoder.folder is None:
        return None
    return {"folder": str(encoder.folder), "sha256": weight_file_digests(encoder.folder)}


def check_same_encoder(model: AdaptedModel, recorded: Mapping[str, Any] | None, source: Path) -> None:
    """IncompatibleModelError if `recorded` (an encoder_identity saved with `source`) names another encoder than
    `model`'s: other sizes, or other weights. Nothing recorded (older files) is not checked."""
    if not recorded:
        return
    model.fingerprint.check_compatible(recorded, source)
    saved = recorded.get("weights_sha256")
    if saved and saved != encoder_digest(model):
        raise IncompatibleModelError(
            f"{source} was trained on the encoder {recorded.get('name_or_path') or '(unnamed)'} (weights sha256 "
            f"{str(saved)[:12]}), but this model's encoder {model.fingerprint.name_or_path or '(unnamed)'} has other "
            f"weights (sha256 {encoder_digest(model)[:12]}); use the encoder it was trained on, or train the adapter "
            "for this one (loading the same encoder in another precision also changes its weights)"
        )
