"""transformers.pipeline on an AdaptedModel: a chosen adapter or fusion with a head (or, for a decoder, its LM head).

A pipeline reads what to do with the logits from `model.config` (num_labels, id2label, problem_type), moves the
model with `model.device` and asks `model.can_generate()`. An AdaptedModel's outputs depend on what is active, so it
has no one config of that kind: `PipelineModel` is a view of it with one choice fixed, whose config is the wrapped
model's with the head's labels. Its forward and generate run the model with that choice (`activated`) and put back
whatever was active before, so one AdaptedModel can serve several pipelines, each with its own adapter and head:

    classify = af.pipeline("text-classification", model, tokenizer, adapter="rte", head="rte")
    classify("A man is playing a guitar.")  # [{'label': 'entailment', 'score': 0.93}]

or `transformers.pipeline("text-classification", model=model.for_pipeline(adapter="rte", head="rte"), tokenizer=...)`.
Which head a task reads is checked before any text runs (`check_task`): af.pipeline knows the task; a view built
without it learns it from the pipeline that first reads it (`reading_pipeline`), before that pipeline reads any
logits. A pipeline meets its view as it is built (it reads the view's device first thing, `PipelineModel._meet`),
and from then on its calls pass af.pipeline's call checks (`_checked_class`), however it was built.
`transformers.pipeline(task, model=model)` runs whatever is active at each call: `AdaptedModel.config`
(`model_config`) is the wrapped model's config, with the active head's labels where a head of ours is active, and is
checked against the reading pipeline's task the same way; the pipeline that reads it gets the same call checks.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
import transformers
from torch import nn

from adapterfusion._validation import require_wrapped, short_repr
from adapterfusion.blocks import LAYOUT_BLOCKS
from adapterfusion.defaults import named_encoder
from adapterfusion.encoder_folders import MODEL_CONFIG, TOKENIZER_FILES, check_folder_files, model_files_in
from adapterfusion.encoder_loading import load_tokenizer
from adapterfusion.encoders import resolve_encoder
from adapterfusion.errors import ConfigError
from adapterfusion.io.paths import user_path
from adapterfusion.pipeline_arguments import (
    CHOICE_ARGUMENTS,
    check_device,
    check_fill_mask_targets,
    check_mask_tokens,
    check_pipeline_input,
    check_settings,
    check_token_windows,
    refuse_unread_arguments,
    refuse_unread_call_arguments,
)
from adapterfusion.pipeline_tasks import (
    PROBLEM_TYPES,
    TASK_READS,
    check_active_for_pipeline,
    check_reads,
    check_task,
    config_for,
    pipeline_task,
    served_task,
)

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


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
        task: str | None = None,
    ) -> None:
        """task: the transformers pipeline task it serves, checked against the choice now (check_task); None (not
        known, as in transformers.pipeline(task, model=view)) checks only that the choice gives logits or tokens."""
        super().__init__()
        if isinstance(adapter, LAYOUT_BLOCKS):
            raise ConfigError(
                f"a pipeline cannot run {type(adapter).__name__}: it lays out the batch (rows per child), and the "
                "pipeline reads one prediction per input, so every other child's would be dropped; make one pipeline "
                "per adapter, or call the model with adapter_names=[...]"
            )
        self.task = pipeline_task(task) if task is not None else None
        self.adapted = model
        state = model.state_for(adapter, fusion, head, skip_layers)  # checks the choice as activate() does
        self.choice: dict[str, Any] = dict(adapter=adapter, fusion=fusion, head=head, skip_layers=state.skip_layers)
        check_reads(model, self.task, head)
        wrapped: Any = model.model
        self._config = config_for(model, head)
        self._head_config = model.get_head(head).config if head is not None else None
        self.generation_config = getattr(wrapped, "generation_config", None)
        self.checked_by_af_pipeline = False  # True while af.pipeline builds on it (it checks what it is given)

    @property
    def config(self) -> Any:
        """The wrapped model's config with the head's labels. Built without a task, the view takes the task of the
        first transformers pipeline that reads this (before it reads any logits) and checks the head against it."""
        if self.task is None:
            self._meet(reading_pipeline())
        return self._config

    def _meet(self, reader: Any | None) -> None:
        """`reader`, a transformers pipeline of a task served here that runs this view (else nothing happens), is
        checked as af.pipeline checks its own: the head against its task (check_reads; the view takes the task if it
        has none), and each of its calls by _check_call, also where transformers.pipeline(task, model=view) built it."""
        task = _checked_reader(reader, self)
        if task is not None and task != self.task:
            check_reads(self.adapted, task, self.choice["head"])
            self.task = self.task or task

    def _follow_head(self) -> None:
        """The labels the pipeline reads (config.id2label) are the head's now: a head replaced under its name
        (load_head(..., overwrite=True)) may have other labels, and transformers reads them after each forward."""
        head = self.choice["head"]
        if head is None:
            return
        current = self.adapted.get_head(head).config
        if current is not self._head_config:
            check_task(self.adapted, self.task, head)
            self._config, self._head_config = config_for(self.adapted, head), current

    @property
    def scored_outputs(self) -> int | None:
        """How many scores the pipeline ranks: the head's labels, or for fill-mask the vocabulary's tokens."""
        key = "vocab_size" if self.task == "fill-mask" else "num_labels"
        return getattr(self._config, key, None)

    @property
    def device(self) -> torch.device:
        """The model's device. Every transformers pipeline reads it first thing as it is built (to move the model),
        before it reads any setting, so this is where a pipeline built on this view meets it (_meet)."""
        self._meet(reading_pipeline())
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
        """The model's output with the choice; a regression head's logits [batch] as [batch, 1], one column per
        label as a transformers regression model gives them (text-classification reads a row of scores: with
        top_k=None it would iterate over a single number)."""
        with self.adapted.activated(**self.choice):
            self._follow_head()
            output = self.adapted(**inputs)
        if self._config.problem_type == "regression" and output.logits is not None and output.logits.dim() == 1:
            output.logits = output.logits.unsqueeze(-1)
        return output

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        with self.adapted.activated(**self.choice):
            return self.adapted.generate(*args, **kwargs)

    def extra_repr(self) -> str:
        chosen = ", ".join(f"{key}={value!r}" for key, value in {**self.choice, "task": self.task}.items() if value)
        return chosen or "bare encoder"


def reading_pipeline(depth: int = 8) -> Any | None:
    """The transformers Pipeline whose code reads the model now (a config or a forward), found among the `depth`
    frames above the caller's caller; None for any other reader. A pipeline tells a model nothing of its task, and
    without it a head of the wrong kind fails inside transformers (a KeyError on a label index) or reads wrong."""
    frame: Any = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return None
        reader = frame.f_locals.get("self")
        if isinstance(reader, transformers.Pipeline):
            return reader
        frame = frame.f_back
    return None


def model_config(model: AdaptedModel) -> Any:
    """AdaptedModel.config, what transformers reads of a model: the wrapped model's config itself, or, while a
    classification, regression or token-classification head of ours is active, a copy with that head's labels
    (num_labels, id2label, label2id, problem_type), kept while the head is the same. Read by a transformers
    pipeline, the active choice is first checked against the pipeline's task (check_task)."""
    head = model.active_head
    task = served_task(reading_pipeline())
    if task is not None:
        check_active_for_pipeline(model, task, head)
    wrapped: Any = model.model
    head_config = model.get_head(head).config if head is not None else None
    if head_config is None or head_config.kind not in PROBLEM_TYPES:
        return wrapped.config
    kept = model.__dict__.get("_pipeline_config")
    if kept is None or kept[0] is not head_config or kept[1] is not wrapped.config:
        kept = (head_config, wrapped.config, config_for(model, head))
        model.__dict__["_pipeline_config"] = kept
    return kept[2]


def meet_pipeline(model: AdaptedModel) -> None:
    """For AdaptedModel.device, which every transformers pipeline reads first thing as it is built: a pipeline of a
    task served here that runs `model` itself passes af.pipeline's call checks from then on, as a view's does
    (PipelineModel._meet)."""
    _checked_reader(reading_pipeline(), model)


def _checked_reader(reader: Any | None, model: Any) -> str | None:
    """The task of `reader` where it is a transformers pipeline of a task served here that runs `model` (a view or
    the model itself), whose calls pass af.pipeline's call checks from now on (_checked_class); None for any other
    reader, left as it is."""
    task = served_task(reader)
    if task is None or getattr(reader, "model", None) is not model:
        return None
    reader.__class__ = _checked_class(type(reader))
    return task


def for_pipeline(
    model: AdaptedModel,
    adapter: str | None = None,
    fusion: str | None = None,
    head: str | None = None,
    task: str | None = None,
    skip_layers: Iterable[int] = (),
) -> PipelineModel:
    """`model` with `adapter` or `fusion`, `head` and `skip_layers` fixed (what is active in the model plays no
    part), as `transformers.pipeline(task, model=...)` takes it (a config with the head's labels, device,
    can_generate); each call runs that choice and puts back what was active. `task`: the pipeline task it will
    serve, so that a head of the wrong kind or a misspelt task is refused now. af.pipeline(task, model, tokenizer,
    adapter=..., head=...) builds the pipeline in one call."""
    return PipelineModel(model, adapter=adapter, fusion=fusion, head=head, skip_layers=skip_layers, task=task)


# transformers.pipeline's arguments that load or build a model: given a loaded model, transformers ignores them.
_LOADING_ARGUMENTS = {
    "dtype": "cast the model first: model.to(torch.bfloat16)",
    "torch_dtype": "cast the model first: model.to(torch.bfloat16)",
    "device_map": "place the model first (model.to('cuda')), or pass device=",
    "model_kwargs": "load the wrapped model with them before af.wrap",
    "config": "the pipeline reads the model's own config, with the head's labels",
    "trust_remote_code": "load the wrapped model with it before af.wrap",
    "revision": "load the wrapped model (and tokenizer) at that revision before af.wrap",
}


def pipeline(
    task: str,
    model: AdaptedModel,
    tokenizer: Any,
    adapter: str | None = None,
    fusion: str | None = None,
    head: str | None = None,
    skip_layers: Iterable[int] = (),
    **kwargs: Any,
) -> Any:
    """transformers.pipeline(task, ...) running `model` with `adapter` or `fusion`, `head` and `skip_layers` (see
    the module docstring); `kwargs` go to transformers.pipeline (device, batch_size, top_k, max_new_tokens, ...),
    and one that neither it nor the task's pipeline takes is refused (transformers would drop it without a word)."""
    if task is None:
        raise ConfigError(
            "af.pipeline needs a task (transformers infers one only from a Hub model id); pass one of "
            f"{', '.join(TASK_READS)}"
        )
    require_wrapped(model, "af.pipeline")
    if tokenizer is None:
        raise ConfigError(
            "af.pipeline needs the model's tokenizer, got None; pass it, or its folder or Hub id: "
            "AutoTokenizer.from_pretrained(<the wrapped model's folder or Hub id>)"
        )
    if not isinstance(tokenizer, (str, os.PathLike, transformers.PreTrainedTokenizerBase)):  # 3 failed at a call
        raise ConfigError(
            f"af.pipeline(tokenizer={short_repr(tokenizer)}) has type {type(tokenizer).__name__}; pass the model's "
            "tokenizer (AutoTokenizer.from_pretrained(...)), or its folder or Hub id"
        )
    loading = sorted(set(kwargs) & set(_LOADING_ARGUMENTS))
    if loading:
        raise ConfigError(
            f"af.pipeline({loading[0]}=...): transformers uses {loading[0]} only to load a model, and this one is "
            f"loaded, so it would be ignored; {_LOADING_ARGUMENTS[loading[0]]}"
        )
    if kwargs.get("device") is not None:
        check_device(kwargs["device"])
    view = for_pipeline(model, adapter, fusion, head, task, skip_layers)
    check_settings(view.task or pipeline_task(task), kwargs, view.scored_outputs)
    view.checked_by_af_pipeline = True  # its settings here, its unread keywords after the build
    if isinstance(tokenizer, (str, os.PathLike)):
        tokenizer = named_tokenizer(tokenizer)
    build: Any = transformers.pipeline  # typed for PreTrainedModel; any model with its attributes works
    built = build(task, model=view, tokenizer=tokenizer, **kwargs)
    view.checked_by_af_pipeline = False  # built: another transformers.pipeline on this view checks its own
    refuse_unread_arguments(built, tokenizer, kwargs)
    built.__class__ = _checked_class(type(built))  # _meet did so as transformers built it; not left to that
    return built


def named_tokenizer(name: str | os.PathLike) -> Any:
    """The tokenizer of the folder or Hub id `name`, loaded as an encoder's is (resolve_encoder, load_tokenizer): a
    Hub id's '@revision' and '/subfolder', the cache and offline mode the environment names now, and our errors for
    a path, folder or id that holds no usable tokenizer. transformers, given the str, took 'org/name@rev' for a repo
    name, looked in the cache it found at import (an id cached since failed offline) and failed with its own errors.
    'default-decoder' is the shipped decoder, as for train(encoder=...).
    A folder holding a tokenizer and no model weights (tokenizer.save_pretrained(folder)), with no model to check it
    against, is loaded as it is."""
    folder = user_path(name)
    alone = False
    with contextlib.suppress(OSError, ValueError):  # a name past the file system's limit: resolve_encoder says so
        weights = [file for file in model_files_in(folder) if file != MODEL_CONFIG] if folder.is_dir() else None
        alone = weights == [] and any((folder / f).is_file() for f in TOKENIZER_FILES)
    if alone:
        return _tokenizer_alone(folder)
    # 'default-decoder' names the shipped decoder, as for train(encoder=...)
    # model=False: a Hub id's cache that holds what AutoTokenizer.from_pretrained left (no weights) is enough
    return load_tokenizer(resolve_encoder(named_encoder(name) if isinstance(name, str) else name, model=False))


def _tokenizer_alone(folder: Path) -> Any:
    """The tokenizer saved on its own in `folder`, its files checked as a model folder's are (check_folder_files)."""
    check_folder_files(folder, sorted(p.name for p in folder.iterdir()))
    try:
        return transformers.AutoTokenizer.from_pretrained(folder)
    except Exception as error:  # noqa: BLE001 - transformers raises many kinds for a folder it cannot read
        reason = (str(error).strip().splitlines() or [""])[0]
        raise ConfigError(
            f"af.pipeline: the tokenizer in {str(folder)!r} does not load ({type(error).__name__}: {reason}); save "
            "the model's tokenizer there again, AutoTokenizer.from_pretrained(<the wrapped model's folder or Hub "
            "id>).save_pretrained(folder), or pass the loaded tokenizer"
        ) from None


_CHECKED_CLASSES: dict[type, type] = {}


def _checked_class(cls: type) -> type:
    """`cls`, a transformers pipeline class, whose calls first pass _check_call, and whose fill-mask targets (given
    when it is built or at a call) pass check_fill_mask_targets where transformers resolves them to token ids (one
    subclass per class, of the same name, with no fields of its own, so a pipeline's class can be swapped for it)."""
    if cls in _CHECKED_CLASSES.values():
        return cls
    if cls not in _CHECKED_CLASSES:

        def checked_call(self: Any, *args: Any, **kwargs: Any) -> Any:
            _check_call(self, args, kwargs)
            return cls.__call__(self, *args, **kwargs)

        @functools.wraps(cast(Any, cls)._sanitize_parameters)  # its signature: what names it reads
        def checked_sanitize(self: Any, **kwargs: Any) -> Any:
            # Not a call's settings (_check_call read them) nor af.pipeline's (it checks its own): the settings given
            # to transformers.pipeline as it builds this one.
            building = not hasattr(self, "_preprocess_params")
            building = building and not getattr(self.model, "checked_by_af_pipeline", False)
            if building:
                _check_build_settings(self, kwargs)
            steps = cast(Any, cls)._sanitize_parameters(self, **kwargs)
            if building:  # stored as the pipeline stores them, for refuse_unread_arguments (and its probe) to read
                self._preprocess_params, self._forward_params, self._postprocess_params = steps
                refuse_unread_arguments(self, self.tokenizer, kwargs, ours=False)
            return steps

        namespace = {
            "__call__": checked_call,
            "_sanitize_parameters": checked_sanitize,
            "__slots__": (),
            "__doc__": cls.__doc__,
            "__module__": __name__,
        }
        if issubclass(cls, transformers.FillMaskPipeline):

            def checked_target_ids(self: Any, targets: Any) -> Any:
                check_fill_mask_targets(targets, self.tokenizer)
                return cast(Any, cls).get_target_ids(self, targets)

            namespace["get_target_ids"] = checked_target_ids
        _CHECKED_CLASSES[cls] = type(cls.__name__, (cls,), namespace)
    return _CHECKED_CLASSES[cls]


def _check_call(built: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse af.pipeline's own keywords at a call of the pipeline `built` (the task's pipeline would hand them to the
    tokenizer, which ignores them, and run the choice it was built with) and an input no pipeline of its task reads
    (transformers fails on it with an IndexError or a tokenizer's error)."""
    given = [name for name in CHOICE_ARGUMENTS if name in kwargs]
    if given:
        _refuse_choice_at_call(built.model, given[0], kwargs[given[0]])
    refuse_unread_call_arguments(built, kwargs)
    task = served_task(built) or built.model.task  # the pipeline's own (a view may serve several), no alias
    if args:
        check_pipeline_input(task, args[0])
        if task == "fill-mask":
            check_mask_tokens(args[0], getattr(built.tokenizer, "mask_token", None))
    if task == "token-classification":  # the pipeline's own settings with the call's over them
        own = {**(built._preprocess_params or {}), **(built._postprocess_params or {})}
        check_token_windows(args[0] if args else None, {**own, **kwargs}, built.tokenizer)
    settings = dict(kwargs)
    if task == "zero-shot-classification":  # the call's labels: a keyword, the second argument, or the pipeline's
        built_with = (built._preprocess_params or {}).get("candidate_labels")
        settings["candidate_labels"] = kwargs.get("candidate_labels", args[1] if len(args) > 1 else built_with)
    check_settings(task, settings, _scored_outputs(built.model, task))


def _check_build_settings(built: Any, settings: dict[str, Any]) -> None:
    """The settings given to transformers.pipeline(task, model=view or model, ...) itself, checked as af.pipeline
    checks its own as it builds (check_settings), before transformers reads them: top_k=0 there answered nothing.
    On the model itself, what a head's labels bound (a top_k beyond them, a softmax of one value) waits for the
    calls: the head that answers is the one active at each call."""
    task = served_task(built) or getattr(built.model, "task", None)
    if task is None:
        return
    given = {**settings}
    for name in ("batch_size", "num_workers"):  # taken out by the pipeline before the others
        if getattr(built, f"_{name}", None) is not None:
            given[name] = getattr(built, f"_{name}")
    check_settings(task, given, built.model.scored_outputs if isinstance(built.model, PipelineModel) else None)


def _refuse_choice_at_call(model: Any, name: str, value: Any) -> None:
    """An adapter, fusion, head or skip_layers given to a pipeline's call: the pipeline would hand it to the
    tokenizer, which ignores it, and run its model's choice unsaid."""
    if isinstance(model, PipelineModel):
        chosen = _choice_text(model.choice)
        raise ConfigError(
            f"{name}={short_repr(value)} given to a pipeline call: af.pipeline (or model.for_pipeline) fixes the "
            f"adapter, fusion, head and skip_layers when the pipeline is built (this one runs "
            f"{chosen or 'the bare model'}); build another for that choice, af.pipeline(task, model, tokenizer, "
            f"{name}=...)"
        )
    raise ConfigError(
        f"{name}={short_repr(value)} given to a pipeline call: a pipeline built on the model itself runs what is "
        f"active in it ({_active_text(model)}); activate the choice first, model.activate({name}=...), or build "
        f"a pipeline for it, af.pipeline(task, model, tokenizer, {name}=...)"
    )


def _active_text(model: AdaptedModel) -> str:
    """What `model` runs now, as activate()'s keywords."""
    active = {
        "adapter": model.active_adapter,
        "fusion": model.active_fusion,
        "block": model.active_block,
        "head": model.active_head,
        "skip_layers": model.skip_layers,
    }
    return _choice_text(active) or "nothing: the bare model"


def _choice_text(choice: Mapping[str, Any]) -> str:
    """A choice as keywords, those given only: "adapter='a', head='nli'"."""
    return ", ".join(f"{key}={value!r}" for key, value in choice.items() if value not in (None, ()))


def _scored_outputs(model: Any, task: str | None) -> int | None:
    """How many scores the pipeline ranks: the head's labels, or for fill-mask the vocabulary's tokens, of a view
    or of the model itself (its active head's)."""
    if isinstance(model, PipelineModel):
        return model.scored_outputs
    return getattr(model.config, "vocab_size" if task == "fill-mask" else "num_labels", None)


# The classes transformers' pipelines do not list among a task's models, though they run them: a view, the model.
_OUR_MODEL_CLASSES = ("PipelineModel", "AdaptedModel")


def _not_our_model_type_line(record: logging.LogRecord) -> bool:
    """False for the pipeline's log line that a view or the model is not a transformers *For<Task> class (it says
    nothing of whether it works: the pipeline reads only the attributes both have), a screenful of class names."""
    message = record.getMessage()
    return not ("is not supported for" in message and any(f"'{name}'" in message for name in _OUR_MODEL_CLASSES))


def _drop_model_type_line() -> None:
    """Filter that line out of transformers' pipeline logger, once (at import: a pipeline logs it as it is built,
    before it reads anything of the model). Only lines naming one of _OUR_MODEL_CLASSES are dropped."""
    logger = logging.getLogger("transformers.pipelines.base")
    if _not_our_model_type_line not in logger.filters:
        logger.addFilter(_not_our_model_type_line)


_drop_model_type_line()
