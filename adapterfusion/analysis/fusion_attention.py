"""`mean_fusion_attention`: the average softmax weight a fusion gives each of its adapters, per layer, over a
dataset's real tokens (Pfeiffer et al. 2021, Fig. 4 and 6: "average softmax activation of each adapter over the
dev set"). Padding tokens are left out: their attention says nothing about the task. A layer with several fusion
sites (Houlsby adapters: after attention and after the feed-forward) counts each site's weights alike.

The result is a `FusionActivation` ([layers, N] numpy array plus names), saved by fusion runs as
`<run_dir>/fusion_attention.json`. A ScaLearn fusion (fusion/scalearn.py) has no softmax: what it records is each
adapter's learned output scale (mean over the hidden dimensions), which may leave [0, 1] or be negative; such a
record says so (`fusion_kind`), and `value_label` names what the values are.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from adapterfusion._validation import check_int, check_name, short_repr
from adapterfusion.errors import ConfigError, RunFileError, SerializationError
from adapterfusion.forward_inputs.batches import check_batch, check_batches
from adapterfusion.forward_inputs.seq2seq_head import shifted_right
from adapterfusion.fusion.config import recorded_fusion_config
from adapterfusion.io.documents import read_json
from adapterfusion.io.paths import as_path
from adapterfusion.run_layout import CONFIG_FILE

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

FUSION_ATTENTION_FILE = "fusion_attention.json"
FORMAT_VERSION = 1
SCALEARN_KIND = "scalearn"  # info["fusion_kind"] of a ScaLearn fusion's record; an attention fusion writes none
SOFTMAX_LABEL = "mean softmax weight"
SCALE_LABEL = "mean ScaLearn scale"
RECORD_KEYS = frozenset({"format_version", "fusion", "adapters", "layers", "values", "tokens"})  # info never holds them


@dataclass(frozen=True)
class FusionActivation:
    """values[i, j]: mean softmax weight of adapter `adapters[j]` at encoder layer `layers[i]`, averaged over
    `tokens` real tokens (a ScaLearn fusion's: its mean learned scale). `info` holds context such as the target
    task, setup and seed of the run, and `fusion_kind` for a ScaLearn fusion."""

    fusion: str
    adapters: tuple[str, ...]
    layers: tuple[int, ...]
    values: np.ndarray
    tokens: int
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        fields = {key: getattr(self, key) for key in ("fusion", "adapters", "layers", "tokens", "info")}
        _check_record_types(fields, ConfigError, "FusionActivation")
        for name in (self.fusion, *self.adapters):  # the heatmap draws them as labels: '$..$' was parsed as TeX
            try:
                check_name(name, "piece")
            except ConfigError:
                raise ConfigError(
                    f"FusionActivation names fusion or adapter {short_repr(name)}, which no model's piece is called "
                    "(letters, digits, '_' and '-' only); a record names the fusion and adapters it measured"
                ) from None
        clash = sorted(set(self.info) & RECORD_KEYS)
        if clash:  # to_dict writes info over the record's own fields: a saved record held other values than these
            raise ConfigError(
                f"FusionActivation of {self.fusion!r}: info holds {clash}, which name the record's own fields; "
                "give them as the FusionActivation's arguments, and only other context (task, setup, seed) in info"
            )
        plain = {  # a list or numpy integers would not compare equal to a record read back, or not write as JSON
            "adapters": tuple(self.adapters),
            "layers": tuple(int(layer) for layer in self.layers),
            "tokens": int(self.tokens),
            "info": dict(self.info),
            "values": _float_values(self.values, self.fusion),
        }
        for key, value in plain.items():
            object.__setattr__(self, key, value)
        if not self.adapters or not self.layers:  # its table and heatmap would be empty, drawn as if fine
            raise ConfigError(
                f"FusionActivation of {self.fusion!r} has {len(self.adapters)} adapters and {len(self.layers)} "
                "layers; a fusion's activation has at least one of each (mean_fusion_attention records them)"
            )
        for what, names in (("adapters", self.adapters), ("layers", self.layers)):
            if len(set(names)) != len(names):  # two rows or columns of one name: the table and heatmap say nothing
                raise ConfigError(
                    f"FusionActivation of {self.fusion!r} names {what} {list(names)}, one more than once; each row is "
                    "one layer and each column one adapter of the fusion"
                )
        if self.values.shape != (len(self.layers), len(self.adapters)):
            raise ConfigError(
                f"FusionActivation values have shape {self.values.shape}, expected "
                f"({len(self.layers)} layers, {len(self.adapters)} adapters)"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "fusion": self.fusion,
            "adapters": list(self.adapters),
            "layers": list(self.layers),
            "values": self.values.tolist(),
            "tokens": self.tokens,
            **self.info,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FusionActivation:
        _check_record_types(data)
        version = data.get("format_version", FORMAT_VERSION)
        if isinstance(version, bool) or version != FORMAT_VERSION:  # a newer layout read as this one: wrong values
            raise SerializationError(
                f"fusion activation record format_version {version!r} is not supported (this version of adapterfusion "
                f"reads {FORMAT_VERSION}); upgrade adapterfusion, or record it again with mean_fusion_attention"
            )
        try:
            core = {
                "fusion": data["fusion"],
                "adapters": tuple(data["adapters"]),
                "layers": tuple(data["layers"]),
                "values": data["values"],  # [layers, adapters] as written: any other shape was reshaped into it
                "tokens": int(data["tokens"]),
            }
        except (KeyError, TypeError, ValueError) as err:
            raise SerializationError(f"not a fusion activation record ({type(err).__name__}: {err})") from err
        info = {k: v for k, v in data.items() if k not in RECORD_KEYS}
        try:
            return cls(**core, info=info)
        except ConfigError as err:
            raise SerializationError(f"not a fusion activation record: {err}") from None

    @property
    def is_scalearn(self) -> bool:
        """Whether the values are a ScaLearn fusion's learned scales rather than softmax weights."""
        return self.info.get("fusion_kind") == SCALEARN_KIND

    @property
    def value_label(self) -> str:
        return SCALE_LABEL if self.is_scalearn else SOFTMAX_LABEL

    def table(self, digits: int = 3) -> str:
        """A plain-text table: one row per layer (numbered from 1 = lowest), one column per adapter."""
        check_int(digits, "table(digits)", minimum=0, maximum=17, why_maximum=" (a float64 has no more)")
        header = ["layer", *self.adapters]
        rows = [
            [str(layer + 1), *(f"{v:.{digits}f}" for v in row)]
            for layer, row in zip(self.layers, self.values, strict=True)
        ]
        rows.append(["mean", *(f"{v:.{digits}f}" for v in self.values.mean(axis=0))])
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [header, *rows])


def _check_record_types(
    data: Any, error: type[Exception] = SerializationError, what: str = "not a fusion activation record"
) -> None:
    """A record's names are strings and its layers and token count integers; a damaged one (or a FusionActivation
    built by hand: `error`, `what`) otherwise failed later, with a TypeError from inside the table or the figure code,
    or was drawn with layer 0 for a layer -1."""
    if not isinstance(data, Mapping):
        raise error(f"{what}: a JSON object was expected, found {type(data)}")
    listed = (list, tuple)
    expected: dict[str, tuple[str, Callable[[Any], bool]]] = {
        "fusion": ("a string", lambda v: isinstance(v, str)),
        "adapters": ("a list of names", lambda v: isinstance(v, listed) and all(isinstance(a, str) for a in v)),
        "layers": ("a list of layer indices", lambda v: isinstance(v, listed) and all(map(_is_count, v))),
        "tokens": ("a count", _is_count),
        "info": ("a mapping", lambda v: isinstance(v, Mapping)),
    }
    for key, (kind, check) in expected.items():
        if key in data and not check(data[key]):
            raise error(f"{what}: {key!r} must be {kind}, found {short_repr(data[key])}")


def _float_values(values: Any, fusion: str) -> np.ndarray:
    """`values` as a float64 array, from an array, a tensor or nested lists of real numbers. A None, a string, a bool
    or a complex number is no activation: numpy read None as NaN, '0.5' and True as numbers, and a complex dtype
    printed as one, so a damaged record was drawn as if measured."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    strays = [v for v in _leaves(values) if isinstance(v, bool) or not isinstance(v, numbers.Real)]
    why = f"found {type(strays[0]).__name__} {short_repr(strays[0])}" if strays else ""
    try:
        array = np.asarray(values)
    except (TypeError, ValueError) as err:  # ragged rows
        array, why = np.zeros(0), why or str(err)
    if not why and array.dtype.kind not in "iuf":
        why = f"found values of dtype {array.dtype}"
    if why:
        raise ConfigError(
            f"FusionActivation values of {fusion!r} are not a [layers, adapters] array of numbers ({why})"
        )
    return array.astype(np.float64)


def _leaves(values: Any) -> Iterator[Any]:
    """The entries of nested lists (of a record read from JSON, or given by hand); an array is judged by its dtype."""
    if isinstance(values, (list, tuple)):
        for item in values:
            yield from _leaves(item)
    elif not isinstance(values, np.ndarray):
        yield values


def _is_count(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 0  # numpy's too


def average_activations(activations: Sequence[FusionActivation]) -> FusionActivation:
    """The plain mean over runs (e.g. seeds) of the same fusion layout and kind; `tokens` is their total."""
    if isinstance(activations, FusionActivation):
        raise ConfigError("average_activations takes a list of FusionActivations, got one; pass [activation]")
    activations = list(activations)  # any iterable of them: a generator too
    if not activations:
        raise ConfigError("average_activations needs at least one FusionActivation")
    stray = next((a for a in activations if not isinstance(a, FusionActivation)), None)
    if stray is not None:
        raise ConfigError(
            f"average_activations takes FusionActivations (mean_fusion_attention, load_fusion_activation), got "
            f"{type(stray).__name__} {short_repr(stray)}; read a record with load_fusion_activation(path) first"
        )
    first = activations[0]
    for other in activations[1:]:
        if (other.adapters, other.layers) != (first.adapters, first.layers):
            raise ConfigError(
                f"cannot average fusion activations over adapters {list(first.adapters)} and "
                f"{list(other.adapters)} (layers {list(first.layers)} / {list(other.layers)})"
            )
        if other.is_scalearn != first.is_scalearn:  # the mean of softmax weights and scales is neither
            raise ConfigError(
                f"cannot average a {first.value_label} record of fusion {first.fusion!r} with a {other.value_label} "
                f"record of fusion {other.fusion!r}: a ScaLearn fusion's scales are not softmax weights; average "
                "the runs of each fusion kind apart"
            )
    values = np.mean([a.values for a in activations], axis=0)
    info = {**first.info, "runs": len(activations)}
    tokens = sum(a.tokens for a in activations)
    return FusionActivation(first.fusion, first.adapters, first.layers, values, tokens, info)


def _run_is_scalearn(run_dir: Path) -> bool:
    """Whether the run folder's config.json names a ScaLearn fusion config: records written before they said so."""
    try:
        config = read_json(run_dir / CONFIG_FILE, "", RunFileError)
        fusion_config = (config.get("setup_options") or {}).get("fusion_config")
        return fusion_config is not None and recorded_fusion_config(fusion_config).is_scalearn
    except (RunFileError, ConfigError, AttributeError, TypeError):
        return False


def load_fusion_activation(path: str | os.PathLike) -> FusionActivation:
    """Read a fusion_attention.json, or the one inside a run folder. A record without `fusion_kind` beside a run
    config of a ScaLearn fusion is marked as one."""
    path = as_path(path, "fusion activation record")
    if path.is_dir():
        path = path / FUSION_ATTENTION_FILE
    activation = FusionActivation.from_dict(
        read_json(
            path, "fusion runs (fusion-st-a, fusion-mt-a) write it after training; give the folder of one", RunFileError
        )
    )
    if "fusion_kind" not in activation.info and _run_is_scalearn(path.parent):
        activation = replace(activation, info={**activation.info, "fusion_kind": SCALEARN_KIND})
    return activation


def _token_mask(inputs: Mapping[str, torch.Tensor], attention: torch.Tensor, decoder_side: bool) -> torch.Tensor:
    """[batch(*choices), seq] mask of the real tokens a site's weights cover: the input's attention_mask; on an
    encoder-decoder's decoder side its decoder_attention_mask, else the positions whose labels count (not -100)
    where the model builds its decoder inputs from labels, else (a head of ours: the decoder reads the input shifted
    right, forward_inputs/seq2seq_head.py) the input's mask shifted alike; every position of decoder_input_ids given
    without a mask (the model reads them all, whatever their length)."""
    mask = inputs.get("attention_mask")
    if decoder_side:
        labels = inputs.get("labels")
        if "decoder_attention_mask" in inputs:
            mask = inputs["decoder_attention_mask"]
        elif labels is not None:
            mask = labels != -100
        elif "decoder_input_ids" in inputs:  # the caller's own decoder inputs, unmasked: the model reads them all
            mask = None
        elif mask is not None:
            mask = shifted_right(mask, 1)
    if mask is None:
        return torch.ones(attention.shape[:2], device=attention.device, dtype=torch.long)
    return mask.reshape(attention.shape[:2]).to(attention.device)  # multiple choice: [batch * choices, seq]


def _forward_inputs(model: AdaptedModel, batch: Mapping[str, Any], device: torch.device) -> dict[str, torch.Tensor]:
    """The batch's tensors for the forward. Labels are left out (they only add a loss), except where an
    encoder-decoder with no head of ours needs them to build its decoder inputs."""
    check_batch(batch, "mean_fusion_attention")
    keep_labels = (
        model.fingerprint.decoder_layers is not None and model.active_head is None and "decoder_input_ids" not in batch
    )
    return {k: v.to(device) for k, v in batch.items() if isinstance(v, torch.Tensor) and (k != "labels" or keep_labels)}


def _accumulate(
    model: AdaptedModel, batches: Iterable[Mapping[str, torch.Tensor]], device: torch.device
) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor], int]:
    """Per layer, the sum of the fusion softmax weights over every fusion site of the layer (a Houlsby fusion's
    attention and output sites) and its real tokens, and how many (site, token) pairs that sums; and the number of
    real input tokens."""
    decoders = model.fingerprint.decoder_layers
    first_decoder = model.num_layers - decoders if decoders is not None else model.num_layers
    sums: dict[int, torch.Tensor] = {}
    counts: dict[int, torch.Tensor] = {}
    tokens = 0
    for batch in batches:
        inputs = _forward_inputs(model, batch, device)
        output = model(**inputs, output_fusion_attentions=True)
        sites = sorted((output.fusion_attentions_by_site or {}).items())
        if not sites:
            continue
        tokens += int(_token_mask(inputs, sites[0][1], sites[0][0][0] >= first_decoder).sum().item())
        for (layer, _), attention in sites:
            mask = _token_mask(inputs, attention, layer >= first_decoder).double()
            weighted = (attention.double() * mask.unsqueeze(-1)).sum(dim=(0, 1))
            sums[layer] = sums[layer] + weighted if layer in sums else weighted
            counts[layer] = counts[layer] + mask.sum() if layer in counts else mask.sum()
    return sums, counts, tokens


@torch.no_grad()
def mean_fusion_attention(
    model: AdaptedModel, fusion_name: str, batches: Iterable[Mapping[str, torch.Tensor]], head: str | None = None
) -> FusionActivation:
    """Run `batches` (model inputs; labels are ignored) through the model with `fusion_name` active, in eval mode,
    and average each layer's softmax weights over the real tokens (attention_mask == 1) and over the layer's fusion
    sites (a Houlsby fusion has two: after attention and after the feed-forward). The model's activation and
    train/eval mode are restored afterwards."""
    model.require("fusion", fusion_name)
    check_batches(batches, "mean_fusion_attention")
    adapters = model.fusion_setup(fusion_name).adapters
    scalearn = model.fusion_setup(fusion_name).config.is_scalearn
    layers = sorted({site.layer_index for site in model.sites_with_fusion(fusion_name)})
    if layers and set(layers) <= set(model.skip_layers):  # before a pass over the whole dataset that records nothing
        raise ConfigError(
            f"mean_fusion_attention: fusion {fusion_name!r} runs at layers {layers}, and skip_layers="
            f"{sorted(model.skip_layers)} skips every one of them, so it would record nothing; activate the model "
            "with fewer skip_layers (e.g. model.activate(fusion=..., skip_layers=()))"
        )
    was_training = model.training
    device = next(model.parameters()).device
    try:
        with model.activated(
            fusion=fusion_name, head=head if head is not None else model.active_head, skip_layers=model.skip_layers
        ):
            model.eval()
            with model.inference_cache():
                sums, counts, tokens = _accumulate(model, batches, device)
    finally:
        model.train(was_training)
    if not sums or tokens == 0:
        raise ConfigError(
            f"mean_fusion_attention: no fusion attention was recorded for {fusion_name!r} "
            "(no batches, no real tokens, or every fusion layer skipped)"
        )
    recorded = tuple(sorted(sums))
    values = torch.stack([sums[layer] / counts[layer] for layer in recorded]).cpu().numpy()
    info = {"fusion_kind": SCALEARN_KIND} if scalearn else {}
    return FusionActivation(fusion_name, adapters, recorded, values, tokens, info)
