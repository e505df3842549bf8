"""Prediction-head configs: what a head predicts and its shape, independent of any encoder."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from adapterfusion._validation import (
    check_choice,
    check_int,
    check_number,
    plain_fields,
    reject_unknown_fields,
    reject_unknown_keys,
    short_repr,
)
from adapterfusion.errors import ConfigError, IncompatibleModelError

POOLINGS = ("cls", "mean", "last")  # last: the last non-padding token, what a decoder has read whole
HEAD_ACTIVATIONS = ("tanh", "relu", "gelu", "swish")
# A head is a few layers on the pooled output (AdapterHub: 1 to 3). A head config of a million layers (a typo, or a
# file handed to the server's POST /v1/pieces) built that many hidden x hidden layers and held the model's thread.
MAX_HEAD_LAYERS = 64
_WHY_MAX_LAYERS = " (a prediction head is a few linear layers on the pooled output: AdapterHub's are 1 to 3)"

MAX_LABELS = 2**31 - 1  # a head's output size is a torch dimension
TORCH_DIMENSION = " (a torch dimension)"  # why_maximum of MAX_LABELS


@reject_unknown_fields
@dataclass(frozen=True)
class HeadConfig:
    """Shared fields: `layers` linear layers on the pooled representation (AdapterHub's default: 2, tanh).
    `pooling` None: the model's own, set when the head is added: `last` on a decoder or an encoder-decoder, whose
    first token has seen no other, `cls` on an encoder."""

    kind: ClassVar[str] = "base"
    per_token: ClassVar[bool] = False  # outputs one row of logits per token, not per (pooled) input
    num_labels: int = 2
    layers: int = 2
    activation: str = "tanh"
    dropout: float = 0.1
    pooling: str | None = None
    labels: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        plain_fields(self)  # np.int64(3) would pass every check and then fail json at save time
        check_int(self.num_labels, "num_labels", minimum=1, maximum=MAX_LABELS, why_maximum=TORCH_DIMENSION)
        if self.kind in ("classification", "token_classification") and self.num_labels < 2:
            fix = (  # cross-entropy over one class is always 0
                "use num_labels=2 for a yes/no task, or af.RegressionHead() for one real value"
                if self.kind == "classification"
                else "a tagging task has at least two tags, e.g. 'O' and one entity tag"
            )
            raise ConfigError(
                f"num_labels={self.num_labels}: a {self.kind} head over one class learns nothing (its loss is "
                f"always 0); {fix}"
            )
        if self.kind == "regression" and self.num_labels != 1:  # its loss and labels are one value per example
            raise ConfigError(
                f"num_labels={self.num_labels}: a regression head predicts one real value per example (labels "
                "[batch], a mean-squared-error loss); leave num_labels out, or for classes use af.ClassificationHead"
            )
        if self.per_token and self.pooling is not None:  # it would be saved and shown, and never used
            raise ConfigError(
                f"pooling={short_repr(self.pooling)}: a {self.kind} head predicts from every token's output and pools "
                "nothing; leave pooling out"
            )
        check_int(self.layers, "layers", minimum=1, maximum=MAX_HEAD_LAYERS, why_maximum=_WHY_MAX_LAYERS)
        check_choice(self.activation, HEAD_ACTIVATIONS, "head activation")
        check_number(self.dropout, "head dropout", minimum=0, below=1, expected="a number in [0, 1)")
        if self.pooling is not None:
            check_choice(self.pooling, POOLINGS, "pooling")
        if self.labels is not None:
            if not isinstance(self.labels, (list, tuple)):
                raise ConfigError(
                    f"labels={short_repr(self.labels)} has type {type(self.labels).__name__}; expected a list of "
                    f"{self.output_size} label names"
                )
            labels = tuple(self.labels)
            if len(labels) != self.output_size or not all(isinstance(label, str) for label in labels):
                raise ConfigError(
                    f"labels {short_repr(list(labels))} must be {self.output_size} strings, one per output of this head"
                )
            repeated = sorted({label for label in labels if labels.count(label) > 1})
            if repeated:
                raise ConfigError(
                    f"labels {short_repr(list(labels))} name {repeated} twice; give each output its own name"
                )
            object.__setattr__(self, "labels", labels)

    @property
    def output_size(self) -> int:
        return self.num_labels

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["kind"] = self.kind
        if self.labels is not None:
            data["labels"] = list(self.labels)
        return data


@reject_unknown_fields
@dataclass(frozen=True)
class ClassificationHead(HeadConfig):
    """Single text or text pair -> one of num_labels classes; cross-entropy loss."""

    kind: ClassVar[str] = "classification"


@reject_unknown_fields
@dataclass(frozen=True)
class RegressionHead(HeadConfig):
    """One real value per input; mean-squared-error loss."""

    kind: ClassVar[str] = "regression"
    num_labels: int = 1


@reject_unknown_fields
@dataclass(frozen=True)
class MultipleChoiceHead(HeadConfig):
    """Inputs of shape [batch, num_choices, seq], each (context, choice) pair scored with one logit;
    cross-entropy over the choices. num_labels is the number of choices (informational: any count works)."""

    kind: ClassVar[str] = "multiple_choice"

    @property
    def output_size(self) -> int:
        return 1

    def __post_init__(self) -> None:
        if self.labels is not None:
            raise ConfigError("MultipleChoiceHead takes no labels: its outputs are the choices of each example")
        super().__post_init__()


@reject_unknown_fields
@dataclass(frozen=True)
class QuestionAnsweringHead(HeadConfig):
    """Extractive QA: a start and an end logit per token (outputs [batch, seq, 2]); labels [batch, 2] hold each
    example's start and end token, the loss is the mean of their cross-entropies (heads/question_answering.py).
    One linear layer by default, as BERT's and AdapterHub's QA heads."""

    kind: ClassVar[str] = "question_answering"
    per_token: ClassVar[bool] = True
    num_labels: int = 2
    layers: int = 1

    def __post_init__(self) -> None:
        if self.num_labels != 2 or self.labels is not None:
            raise ConfigError(
                f"QuestionAnsweringHead has exactly 2 outputs per token (start, end) and no labels; got "
                f"num_labels={short_repr(self.num_labels)}, labels={short_repr(self.labels)}: leave both out"
            )
        super().__post_init__()


@reject_unknown_fields
@dataclass(frozen=True)
class TokenClassificationHead(HeadConfig):
    """Tagging (e.g. named entities): num_labels logits per token (outputs [batch, seq, num_labels]); labels
    [batch, seq] hold a tag id on the first sub-token of each word and -100 elsewhere, which the loss skips
    (heads/token_classification.py). One linear layer by default, as AdapterHub's TaggingHead."""

    kind: ClassVar[str] = "token_classification"
    per_token: ClassVar[bool] = True
    layers: int = 1


HEAD_KINDS: dict[str, type[HeadConfig]] = {
    cls.kind: cls
    for cls in (ClassificationHead, RegressionHead, MultipleChoiceHead, QuestionAnsweringHead, TokenClassificationHead)
}


def head_config_from_dict(data: Mapping[str, Any]) -> HeadConfig:
    if not isinstance(data, Mapping):
        raise ConfigError(f"head config must be a JSON object, got {type(data).__name__}")
    data = dict(data)
    kind = data.pop("kind", None)
    if not isinstance(kind, str) or kind not in HEAD_KINDS:
        raise ConfigError(f"head kind {short_repr(kind)} is unknown; choose one of {', '.join(HEAD_KINDS)}")
    cls = HEAD_KINDS[kind]
    reject_unknown_keys(data, [f.name for f in dataclasses.fields(cls)], f"{kind} head config")
    if data.get("labels") is not None:
        if not isinstance(data["labels"], (list, tuple)):
            raise ConfigError(f"head labels={short_repr(data['labels'])} must be a list of label names")
        data["labels"] = tuple(data["labels"])
    return cls(**data)


def check_head_labels(config: HeadConfig, labels: Sequence[str] | None, source: str | Path) -> None:
    """Refuse a head trained for another label set: its outputs would be read as the wrong classes. `labels` are the
    names the caller will read the outputs as (e.g. a task's label_names, in id order); None checks nothing."""
    if labels is None:
        return
    if not isinstance(labels, (list, tuple)) or not all(isinstance(label, str) for label in labels):
        raise ConfigError(
            f"labels={short_repr(labels)} has type {type(labels).__name__}; expected a list of label names, e.g. a "
            "task's label_names"
        )
    labels = tuple(labels)
    if config.num_labels != len(labels) or (config.labels is not None and config.labels != labels):
        saved = list(config.labels) if config.labels is not None else f"{config.num_labels} unnamed labels"
        raise IncompatibleModelError(
            f"{source}: the head was saved for labels {saved}, but {list(labels)} are expected (in this order); "
            "load a head trained on this label set, or train a new one"
        )
