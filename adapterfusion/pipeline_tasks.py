"""Which transformers pipeline task reads which head: a pipeline finds its logits where its task expects them (our
classification, regression or token-classification head, the wrapped model's own head of a kind, or generate()),
and any other pairing fails inside transformers (a KeyError 'logits', an IndexError) or reads the wrong logits without a
word; so a choice is checked against its task here (check_task, check_reads) before any text runs, and the config a
pipeline reads carries the head's labels (config_for)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, cast

import transformers

from adapterfusion._validation import closest, short_repr
from adapterfusion.blocks import LAYOUT_BLOCKS
from adapterfusion.errors import ConfigError

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

# The head kinds a pipeline can read through config.num_labels / id2label, and the problem_type that tells the
# text-classification pipeline how to turn logits into scores (softmax, none).
PROBLEM_TYPES = {
    "classification": "single_label_classification",
    "regression": "regression",
    "token_classification": None,
}
_GENERATES = "generate"  # the wrapped model's own language-model head, through generate()
# The transformers tasks a PipelineModel serves, and what each reads: the logits of one of these kinds of our heads,
# or, with head=None, the output of the wrapped model's own head, a class whose name ends so ('' any model: its first
# output, the hidden states of a bare encoder). Any other pairing fails inside transformers (a KeyError 'logits', an
# IndexError on logits of another shape) or reads the wrong logits without a word.
TASK_READS: dict[str, tuple[tuple[str, ...], str]] = {
    "text-classification": (("classification", "regression"), "ForSequenceClassification"),
    "zero-shot-classification": (("classification",), "ForSequenceClassification"),
    "token-classification": (("token_classification",), "ForTokenClassification"),
    "fill-mask": ((), "ForMaskedLM"),
    "feature-extraction": ((), ""),
    "text-generation": ((), _GENERATES),
}
_OWN_HEAD_CLASSES = {  # what to load a model with to give it that head of its own
    "ForSequenceClassification": "AutoModelForSequenceClassification",
    "ForTokenClassification": "AutoModelForTokenClassification",
    "ForMaskedLM": "AutoModelForMaskedLM",
}


def served_task(reader: Any | None) -> str | None:
    """The task of the pipeline `reader` as pipeline_task names it, or None: no pipeline, or a task not served here
    (a pipeline subclass of the user's, whose reads we cannot know)."""
    task = getattr(reader, "task", None)
    if not isinstance(task, str) or not task:
        return None
    try:
        return pipeline_task(task)
    except ConfigError:
        return None


def check_active_for_pipeline(model: AdaptedModel, task: str, head: str | None) -> None:
    """What is active in `model`, checked for a pipeline of `task` that runs the model itself (not a view)."""
    block = model.state.block
    if isinstance(block, LAYOUT_BLOCKS):
        raise ConfigError(
            f"a {task} pipeline reads one prediction per input, and the active {type(block).__name__} lays out the "
            "batch (rows per child), so every other child's would be dropped; activate one adapter or fusion, or "
            "build one pipeline per choice with af.pipeline(task, model, tokenizer, adapter=..., head=...)"
        )
    check_reads(model, task, head)


def check_reads(model: AdaptedModel, task: str | None, head: str | None) -> None:
    """check_task, and for zero-shot-classification that `head`'s labels name entailment (_check_entailment_label):
    what a pipeline of `task` needs of the model's output."""
    check_task(model, task, head)
    if task == "zero-shot-classification":
        _check_entailment_label(config_for(model, head), head)


def pipeline_task(task: object) -> str:
    """`task` as transformers names it (its aliases resolved: sentiment-analysis, ner), if a PipelineModel serves it;
    else a ConfigError with the closest task name, instead of transformers' KeyError."""
    served = ", ".join(TASK_READS)
    if not isinstance(task, str):
        raise ConfigError(
            f"task={short_repr(task)} has type {type(task).__name__}; expected a pipeline task name: {served}"
        )
    try:
        name: str = transformers.pipelines.check_task(task)[0]
    except KeyError as error:  # not a task, or one transformers 5 removed (question-answering, summarization, ...)
        known = [*TASK_READS, *transformers.pipelines.PIPELINE_REGISTRY.task_aliases]
        match = closest(task, known)
        why = f"did you mean {match!r}?" if match is not None else ""
        why = str(error.args[0]) if "removed" in str(error) else why
        raise ConfigError(
            f"unknown pipeline task {short_repr(task)}{f' ({why})' if why else ''}; a pipeline on an "
            f"AdaptedModel serves {served}"
        ) from None
    if name not in TASK_READS:
        raise ConfigError(
            f"pipeline task {short_repr(task)} is not one an AdaptedModel serves (it reads images, audio or tables, "
            "or a "
            f"model kind this library does not wrap); use one of {served}"
        )
    return name


def check_task(model: AdaptedModel, task: str | None, head: str | None) -> None:
    """Refuse a `head` (None: the wrapped model's own) whose output the pipeline `task` (pipeline_task's name; None:
    not known yet) cannot read: no logits at all, or those of another kind of head. Transformers would fail deep
    inside the pipeline (a KeyError 'logits', an IndexError) or read the wrong logits without a word."""
    wrapped = type(model.model).__name__
    if task is None:
        makes_logits = model.can_generate() or model.model is not cast(Any, model.model).base_model
        if head is None and not makes_logits:
            raise ConfigError(
                f"head=None: the wrapped {wrapped} has no head of its own, so a pipeline would find no logits to read "
                f"(a KeyError 'logits' inside transformers); pass head= {_loaded_heads(model, ())}, or for the "
                "encoder's hidden states build af.pipeline('feature-extraction', model, tokenizer, ...)"
            )
        return
    kinds, own = TASK_READS[task]
    if own == _GENERATES and model.architecture.decoder is not None:
        raise ConfigError(
            f"text-generation runs decoder-only models, and the wrapped {wrapped} is an encoder-decoder "
            f"({model.fingerprint.model_type}): transformers' pipeline would return the prompt with nothing generated. "
            "transformers 5 removed text2text-generation, the pipeline for encoder-decoders, so generate with the "
            "model itself: `with model.activated(adapter=...): model.generate(**tokenizer(text, return_tensors='pt'))`"
        )
    if head is None:
        if model.can_generate() if own == _GENERATES else wrapped.endswith(own):
            return
        if own == _GENERATES:
            raise ConfigError(
                "text-generation needs a decoder wrapped with its language-model head (AutoModelForCausalLM); the "
                f"wrapped {wrapped} has none"
            )
        if not kinds:
            raise ConfigError(
                f"{task} reads the wrapped model's own {own} head, and the wrapped {wrapped} has none; wrap the "
                f"model loaded with {_OWN_HEAD_CLASSES[own]}"
            )
        raise ConfigError(
            f"{task} reads the logits of a {' or '.join(kinds)} head, and with head=None the wrapped {wrapped} has "
            f"none of its own; pass head= {_loaded_heads(model, kinds)}, or wrap the model loaded with "
            f"{_OWN_HEAD_CLASSES[own]}"
        )
    kind = model.get_head(head).config.kind
    if kind in kinds:
        return
    if not kinds:
        reads = {_GENERATES: "the tokens of the language-model head", "": "the encoder's hidden states"}.get(
            own, f"the logits of the wrapped model's own {own} head"
        )
        raise ConfigError(
            f"{task} reads {reads}, and no prediction head of ours plays a part (got head={head!r}, a {kind} head); "
            "pass head=None"
        )
    raise ConfigError(
        f"{task} reads the logits of a {' or '.join(kinds)} head, but head {head!r} is a {kind} head; pass head= "
        f"{_loaded_heads(model, kinds)}"
    )


def _check_entailment_label(config: Any, head: str | None) -> None:
    """zero-shot-classification scores each candidate label by the NLI entailment logit, found as the label whose
    name starts with 'entail'; without one transformers logs a line and reads the last class, so every score would
    come from an arbitrary class."""
    names = [str(name) for name in (config.label2id or {})]
    if any(name.lower().startswith("entail") for name in names):
        return
    owner = f"head {head!r}" if head is not None else "the wrapped model's own head"
    raise ConfigError(
        f"zero-shot-classification reads the logit of an NLI head's 'entailment' label, and {owner} has labels "
        f"{names}, none of which starts with 'entail'; pass a head trained on an NLI task (e.g. mnli), whose labels "
        "name entailment"
    )


def _loaded_heads(model: AdaptedModel, kinds: tuple[str, ...]) -> str:
    """The loaded heads of `kinds` (any kind when empty), as a fix names them."""
    what = f"{' or '.join(kinds)} head" if kinds else "head"
    names = [name for name in model.head_names if not kinds or model.get_head(name).config.kind in kinds]
    if names:
        return f"one of the loaded {what}s {names}"
    return f"a {what} added with add_head() first (loaded heads: {model.head_names or 'none'})"


def config_for(model: AdaptedModel, head: str | None) -> Any:
    """The wrapped model's config, with `head`'s outputs (num_labels, id2label, label2id, problem_type) where a head
    of ours makes the logits."""
    config: Any = copy.deepcopy(cast(Any, model.model).config)
    if head is None:
        return config
    head_config = model.get_head(head).config
    if head_config.kind not in PROBLEM_TYPES:
        raise ConfigError(
            f"head {head!r} is a {head_config.kind} head, whose logits no transformers pipeline of this kind reads; "
            f"pipelines take a classification, regression or token-classification head"
        )
    names = head_config.labels or tuple(f"LABEL_{i}" for i in range(head_config.output_size))
    config.id2label = dict(enumerate(names))
    config.label2id = {name: i for i, name in enumerate(names)}
    config.num_labels = head_config.output_size
    config.problem_type = PROBLEM_TYPES[head_config.kind]
    return config
