"""transformers.pipeline on an AdaptedModel: a chosen adapter or fusion with a head (or, for a decoder, its LM head).

A pipeline reads what to do with the logits from `model.config` (num_labels, id2label, problem_type), moves the
model with `model.device` and asks `model.can_generate()`. An AdaptedModel's outputs depend on what is active, so it
has no one config of that kind: `PipelineModel` is a view of it with one choice fixed, whose config is the wrapped
model's with the head's labels. Its forward and generate run the model with that choice (`activated`) and put back
whatever was active before, so one AdaptedModel can serve several pipelines, each with its own adapter and head:

    classify = af.pipeline("text-classification", model, tokenizer, adapter="rte", head="rte")
    classify("A man is playing a guitar.")  # [{'label': 'entailment', 'score': 0.93}]

or `transformers.pipeline("text-classification", model=model.for_pipeline(adapter="rte", head="rte"), tokenizer=...)`.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, cast

import torch
import transformers
from torch import nn

from adapterfusion.blocks import LAYOUT_BLOCKS
from adapterfusion.errors import ConfigError

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

# The head kinds a pipeline can read through config.num_labels / id2label, and the problem_type that tells the
# text-classification pipeline how to turn logits into scores (softmax, none).
_PROBLEM_TYPES = {
    "classification": "single_label_classification",
    "regression": "regression",
    "token_classification": None,
}


class PipelineModel(nn.Module):
    """`model` with `adapter` or `fusion` (or neither) and `head` (None: the wrapped model's own head, e.g. a decoder's
    LM head for text generation), as a transformers pipeline expects a model to be."""

    main_input_name = "input_ids"

    def __init__(
        self,
        model: AdaptedModel,
        adapter: str | None = None,
        fusion: str | None = None,
        head: str | None = None,
        skip_layers: Iterable[int] = (),
    ) -> None:
        super().__init__()
        if isinstance(adapter, LAYOUT_BLOCKS):
            raise ConfigError(
                f"a pipeline cannot run {type(adapter).__name__}: it lays out the batch (rows per child), and the "
                "pipeline reads one prediction per input, so every other child's would be dropped; make one pipeline "
                "per adapter, or call the model with adapter_names=[...]"
            )
        self.adapted = model
        self.choice: dict[str, Any] = dict(adapter=adapter, fusion=fusion, head=head, skip_layers=tuple(skip_layers))
        with model.activated(**self.choice):  # checks the choice now, naming what is loaded
            pass
        wrapped: Any = model.model
        self.config = _config_for(model, head)
        self.generation_config = getattr(wrapped, "generation_config", None)

    @property
    def device(self) -> torch.device:
        return self.adapted.device

    @property
    def dtype(self) -> torch.dtype:
        return self.adapted.dtype

    @property
    def name_or_path(self) -> str:
        return self.adapted.fingerprint.name_or_path

    @property
    def input_modalities(self) -> Any:
        return getattr(self.adapted.model, "input_modalities", "text")

    @property
    def output_modalities(self) -> Any:
        return getattr(self.adapted.model, "output_modalities", "text")

    def can_generate(self) -> bool:
        """Text generation picks tokens with the wrapped model's LM head, so only a choice without a head of ours."""
        return self.choice["head"] is None and self.adapted.can_generate()

    def forward(self, **inputs: Any) -> Any:
        with self.adapted.activated(**self.choice):
            return self.adapted(**inputs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        with self.adapted.activated(**self.choice):
            return self.adapted.generate(*args, **kwargs)

    def extra_repr(self) -> str:
        chosen = ", ".join(f"{key}={value!r}" for key, value in self.choice.items() if value)
        return chosen or "bare encoder"


def _config_for(model: AdaptedModel, head: str | None) -> Any:
    """The wrapped model's config, with `head`'s outputs (num_labels, id2label, label2id, problem_type) where a head
    of ours makes the logits."""
    config: Any = copy.deepcopy(cast(Any, model.model).config)
    if head is None:
        return config
    head_config = model.get_head(head).config
    if head_config.kind not in _PROBLEM_TYPES:
        raise ConfigError(
            f"head {head!r} is a {head_config.kind} head, whose logits no transformers pipeline of this kind reads; "
            f"pipelines take a classification, regression or token-classification head"
        )
    names = head_config.labels or tuple(f"LABEL_{i}" for i in range(head_config.output_size))
    config.id2label = dict(enumerate(names))
    config.label2id = {name: i for i, name in enumerate(names)}
    config.num_labels = head_config.output_size
    config.problem_type = _PROBLEM_TYPES[head_config.kind]
    return config


def pipeline(
    task: str,
    model: AdaptedModel,
    tokenizer: Any,
    adapter: str | None = None,
    fusion: str | None = None,
    head: str | None = None,
    **kwargs: Any,
) -> Any:
    """transformers.pipeline(task, ...) running `model` with `adapter` or `fusion` and `head` (see the module
    docstring); `kwargs` go to transformers.pipeline (device, batch_size, top_k, max_new_tokens, ...)."""
    view = PipelineModel(model, adapter=adapter, fusion=fusion, head=head, skip_layers=model.skip_layers)
    if task == "text-generation" and not view.can_generate():
        raise ConfigError(
            "text-generation needs a decoder wrapped with its language-model head (AutoModelForCausalLM) and no "
            f"prediction head of ours (got head={head!r}); pass head=None"
        )
    own_classifier = type(model.model).__name__.endswith("ForSequenceClassification")
    if task in ("text-classification", "sentiment-analysis") and head is None and not own_classifier:
        raise ConfigError(
            f"{task} reads the logits of a head of ours: pass head= one of the loaded heads {model.head_names}"
        )
    build: Any = transformers.pipeline  # typed for PreTrainedModel; any model with its attributes works
    with _quiet_model_type_check():
        return build(task, model=view, tokenizer=tokenizer, **kwargs)


@contextlib.contextmanager
def _quiet_model_type_check() -> Iterator[None]:
    """Drop the pipeline's one log line that PipelineModel is not a transformers *For<Task> class (it says nothing
    of whether it works: the pipeline reads only the attributes PipelineModel has)."""
    logger = logging.getLogger("transformers.pipelines.base")

    def keep(record: logging.LogRecord) -> bool:
        return not (PipelineModel.__name__ in record.getMessage() and "is not supported for" in record.getMessage())

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)
