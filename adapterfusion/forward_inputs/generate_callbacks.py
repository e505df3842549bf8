"""generate()'s callbacks, the callables and objects transformers calls into steps in: logits_processor's and
stopping_criteria's entries, prefix_allowed_tokens_fn, custom_generate, a streamer, an assistant_model and the
tokenizer of stop_strings.

`check_callbacks` refuses one transformers cannot call as it will before the first step. `checked_callbacks` hands
it each callable of the user's (transformers' own classes return what it needs, and its merge of the lists finds
them by their type) wrapped so that an answer it cannot use is a ConfigError naming the callable and what it must
return, not a TypeError or RuntimeError inside transformers' loop or a silently different answer (a stopping criterion's
integer 2 reads as "go on", a logits processor's scores of one row are taken for every row, a prefix function's id
-1 allows the last token). Each check is a type, dtype, shape and device compare per call (and a logits processor's
scores one reduction for NaN or a row of no finite score, read once per step); a prefix function's ids
are held to the vocabulary where they are on the CPU (a min and a max of the tensor transformers would make of
them, handed on in their place).

`checked_scores` checks the scores after all of transformers' processors, its own included: a setting such as
temperature=1e-40 pushes them past float32's range, which sampling cannot draw from (torch.multinomial's error, a
device-side assert on CUDA); the ConfigError names the settings instead."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from transformers.generation.logits_process import LogitsProcessor, LogitsProcessorList
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList

from adapterfusion._validation import short_repr
from adapterfusion.errors import ConfigError

# generate()'s lists of callables it calls at each step as (input_ids, scores), and what each must be.
_CALLBACK_LISTS = {
    "logits_processor": "LogitsProcessorList([...]) of LogitsProcessor objects (callables (input_ids, scores) -> "
    "scores)",
    "stopping_criteria": "StoppingCriteriaList([...]) of StoppingCriteria objects (callables (input_ids, scores) -> "
    "a bool tensor per row)",
}
_PREFIX_FUNCTION = "a function (batch_id, input_ids) -> the list of token ids allowed next"


def check_callbacks(given: dict[str, Any], kwargs: dict[str, Any]) -> None:
    """generate()'s arguments by name (`given`; `kwargs`: its keywords, where the tokenizer is): logits_processor
    and stopping_criteria a list of callables taking (input_ids, scores), prefix_allowed_tokens_fn a callable taking
    (batch_id, input_ids), custom_generate a callable or a repository's name, a streamer an object with put() and
    end() (transformers' BaseStreamer), an assistant_model a transformers model, a tokenizer one with get_vocab()."""
    for name, expected in _CALLBACK_LISTS.items():
        value = given.get(name)
        if value is None:
            continue
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"generate(): {name} is a {type(value).__name__}; pass {expected}, e.g. [processor]")
        for index, item in enumerate(value):
            if not callable(item):
                raise ConfigError(
                    f"generate(): {name}[{index}] = {item!r} is a {type(item).__name__}, which cannot be called; "
                    f"pass {expected}"
                )
            _check_arguments(item, f"{name}[{index}] ({_callable_name(item)})", "(input_ids, scores)", expected)
    prefix = given.get("prefix_allowed_tokens_fn")
    if prefix is not None and not callable(prefix):
        raise ConfigError(f"generate(): prefix_allowed_tokens_fn is a {type(prefix).__name__}; pass {_PREFIX_FUNCTION}")
    if prefix is not None:
        name = f"prefix_allowed_tokens_fn ({_callable_name(prefix)})"
        _check_arguments(prefix, name, "(batch_id, input_ids)", _PREFIX_FUNCTION)
    custom = given.get("custom_generate")
    if custom is not None and not isinstance(custom, str) and not callable(custom):
        raise ConfigError(
            f"generate(): custom_generate is a {type(custom).__name__}, which transformers ignores without a word; "
            "pass a decoding function (called as transformers' own decoding loops are) or the name of a Hub "
            "repository with a custom_generate/generate.py, or leave it out"
        )
    _check_helpers(given, kwargs)


def _check_helpers(given: dict[str, Any], kwargs: dict[str, Any]) -> None:
    """The objects generate() calls methods of: a streamer's put() and end(), an assistant model's config and
    forward, a tokenizer's get_vocab() (for stop_strings)."""
    streamer = given.get("streamer")
    missing = [method for method in ("put", "end") if not callable(getattr(streamer, method, None))]
    if streamer is not None and missing:
        raise ConfigError(
            f"generate(): streamer is a {type(streamer).__name__}, which has no {' or '.join(missing)}() method; pass "
            "a transformers streamer (TextStreamer(tokenizer), TextIteratorStreamer(tokenizer)) or a subclass of "
            "transformers.generation.BaseStreamer"
        )
    assistant = given.get("assistant_model")
    # Imported here: transformers' modeling_utils is loaded by then (a model is generating), and importing it with
    # this module would load it for every command of the CLI (tests/test_cli.py).
    from transformers import PreTrainedModel

    if assistant is not None and not isinstance(assistant, PreTrainedModel):
        raise ConfigError(
            f"generate(): assistant_model is a {type(assistant).__name__}; pass a transformers model that drafts "
            "tokens with the same tokenizer (e.g. AutoModelForCausalLM.from_pretrained(<a smaller model>)), or "
            "prompt_lookup_num_tokens=... to draft from the prompt"
        )
    tokenizer = kwargs.get("tokenizer")
    if tokenizer is not None and not callable(getattr(tokenizer, "get_vocab", None)):
        raise ConfigError(
            f"generate(): tokenizer is a {type(tokenizer).__name__}, which has no get_vocab() method; pass the "
            "model's transformers tokenizer (AutoTokenizer.from_pretrained(...)), which stop_strings and token healing "
            "read"
        )


def _check_arguments(function: Callable[..., Any], name: str, arguments: str, expected: str) -> None:
    """Refuse a callable that cannot be called with the two positional `arguments` transformers passes (one that
    needs a third, or takes one); one whose signature cannot be read is left to transformers."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None, None)
    except TypeError:
        raise ConfigError(
            f"generate(): {name} takes {signature}, but generate calls it with {arguments} alone; pass {expected}"
        ) from None


def _callable_name(function: Any) -> str:
    """A callable's name for a message: a function's own, else its class's."""
    name = getattr(function, "__qualname__", None)
    return name if isinstance(name, str) else type(function).__qualname__


def _is_own(function: Any) -> bool:
    """One of transformers' own processors or criteria, which return what its loop needs."""
    return type(function).__module__.split(".")[0] == "transformers"


def bind_generate(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> inspect.BoundArguments | None:
    """generate(*args, **kwargs)'s arguments bound to the model's generate() signature, so a setting reads the same
    given by keyword or by position; None where they do not bind (transformers then says what is wrong)."""
    try:
        return inspect.signature(model.generate).bind_partial(*args, **kwargs)
    except (TypeError, ValueError):
        return None


def checked_callbacks(
    model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], vocabulary: int
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """generate()'s arguments (given by keyword or by position) with the user's logits processors, stopping criteria
    and prefix_allowed_tokens_fn wrapped to check each answer (the module docstring); `vocabulary`: the ids a prefix
    function may allow. Arguments that do not bind to the model's generate() are handed on as they are."""
    bound = bind_generate(model, args, kwargs)
    if bound is None:
        return args, kwargs
    changed = False
    for name, wrapper, of in (
        ("logits_processor", _CheckedProcessor, LogitsProcessorList),
        ("stopping_criteria", _CheckedCriterion, StoppingCriteriaList),
    ):
        given = bound.arguments.get(name)
        if isinstance(given, (list, tuple)) and not all(_is_own(item) for item in given):
            items = (item if _is_own(item) else wrapper(item, f"{name}[{i}]") for i, item in enumerate(given))
            bound.arguments[name], changed = of(items), True
    prefix = bound.arguments.get("prefix_allowed_tokens_fn")
    if callable(prefix) and not _is_own(prefix):
        bound.arguments["prefix_allowed_tokens_fn"], changed = _CheckedPrefix(prefix, vocabulary), True
    return (tuple(bound.args), dict(bound.kwargs)) if changed else (args, kwargs)


def _described(value: Any, device: torch.device | None = None) -> str:
    """What a callable returned, for a message: a tensor by its dtype and shape (and device, where not `device`)."""
    if isinstance(value, torch.Tensor):
        where = f" on {value.device}" if device is not None and value.device != device else ""
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}{where}"
    kind = type(value)
    name = (
        kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__.split('.')[0]}.{kind.__qualname__}"
    )
    return "None" if value is None else f"{short_repr(value)} of type {name}"


class _CheckedCriterion(StoppingCriteria):
    """A user's stopping criterion whose answer transformers ORs into its bool tensor of the rows still running:
    a bool tensor of one value per row (or one value) on their device, or a Python bool. None, a list or a float
    tensor fail in its loop; an integer tensor fails under beam search and reads 2 as "go on" elsewhere."""

    def __init__(self, criterion: Callable[..., Any], name: str) -> None:
        self.criterion, self.name = criterion, f"{name} ({_callable_name(criterion)})"

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> Any:
        done = self.criterion(input_ids, scores, **kwargs)
        if type(done) is bool or (
            isinstance(done, torch.Tensor)
            and done.dtype == torch.bool
            and (done.dim() == 0 or (done.dim() == 1 and done.shape[0] in (1, input_ids.shape[0])))
            and (done.dim() == 0 or done.device == input_ids.device)
        ):
            return done
        raise ConfigError(
            f"generate(): {self.name} returned {_described(done, input_ids.device)}; a stopping criterion must "
            f"return a bool tensor of shape [{input_ids.shape[0]}] (one per row of input_ids, True: that row is done) "
            f"on {input_ids.device}, or a Python bool for every row, e.g. `return input_ids[:, -1] == stop_id` "
            "(an integer tensor: .bool() of it)"
        )


class _CheckedProcessor(LogitsProcessor):
    """A user's logits processor, whose answer transformers takes for the scores: a floating tensor of their shape
    on their device, each row with a finite score somewhere and NaN nowhere. None fails in its loop; scores of other
    shape are broadcast or indexed past the vocabulary, integer ones picked from without a word; NaN scores or a row
    of -inf (every token masked) fail in sampling's torch.multinomial, and greedy or beam search picks token 0 or
    any other from them without a word."""

    def __init__(self, processor: Callable[..., Any], name: str) -> None:
        self.processor, self.name = processor, f"{name} ({_callable_name(processor)})"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        processed = self.processor(input_ids, scores)
        if (
            isinstance(processed, torch.Tensor)
            and processed.shape == scores.shape
            and processed.is_floating_point()
            and processed.device == scores.device
        ):
            _check_scores(self.name, scores, processed)
            return processed
        raise ConfigError(
            f"generate(): {self.name} returned {_described(processed, scores.device)}; a logits processor must "
            f"return the scores it is given, changed: a floating tensor of their shape {tuple(scores.shape)} "
            f"([rows, vocabulary]) on {scores.device}"
        )


def _unusable_rows(scores: torch.Tensor, sampling: bool = False) -> torch.Tensor:
    """The rows of [rows, vocabulary] scores no token can be picked from: NaN anywhere, or no finite score (every
    token masked with -inf, or +inf everywhere). -inf for some tokens is masking, which every row may do. Sampling
    cannot draw from +inf anywhere either: softmax makes it NaN (inf - inf)."""
    bad = scores.isnan().any(dim=-1) | ~scores.isfinite().any(dim=-1)
    return bad | scores.isposinf().any(dim=-1) if sampling else bad


def _check_scores(name: str, scores: torch.Tensor, processed: torch.Tensor) -> None:
    """Refuse scores a logits processor made unusable (_unusable_rows), naming it; rows it was given so (the model's
    own NaN logits, or an earlier processor's) are left to transformers' remove_invalid_values. One reduction, read
    once per step (generate's loop waits on the device each step anyway)."""
    bad = _unusable_rows(processed)
    if not bool(bad.any()):
        return
    bad &= ~_unusable_rows(scores)
    if not bool(bad.any()):
        return
    rows = bad.nonzero().flatten().tolist()
    row = processed[rows[0]]
    what = "NaN scores" if bool(row.isnan().any()) else "no finite score (every token -inf or +inf)"
    raise ConfigError(
        f"generate(): {name} returned {what} in row(s) {rows[:5]} of {processed.shape[0]}, from which no token can "
        "be picked (sampling fails in torch.multinomial, greedy and beam search pick an arbitrary token); mask "
        "tokens with float('-inf') but leave each row a finite score, e.g. scores.masked_fill(banned, "
        "float('-inf')) with banned not covering a whole row, and keep NaN out (torch.nan_to_num)"
    )


class _CheckedPrefix:
    """A user's prefix_allowed_tokens_fn, whose answer transformers indexes each row's scores with: token ids in the
    vocabulary (a list, a range, an integer tensor or array; or a bool tensor over the vocabulary). None, a set or a
    string fail in its loop; a negative id allows a token counted from the vocabulary's end."""

    def __init__(self, function: Callable[[int, torch.Tensor], Any], vocabulary: int) -> None:
        self.function, self.vocabulary = function, vocabulary
        self.name = f"prefix_allowed_tokens_fn ({_callable_name(function)})"

    def __call__(self, batch_id: int, input_ids: torch.Tensor) -> Any:
        allowed = self.function(batch_id, input_ids)
        ids, problem = _checked_ids(allowed, self.vocabulary)
        if problem is None:
            return ids
        raise ConfigError(
            f"generate(): {self.name} returned {_described(allowed)} for batch_id {batch_id}{problem}; it must "
            f"return the ids of the tokens allowed next: a non-empty list of token ids in 0..{self.vocabulary - 1} "
            "(or a 1-d integer tensor of them)"
        )


def _checked_ids(allowed: Any, vocabulary: int) -> tuple[Any, str | None]:
    """A prefix function's answer as transformers will index with it, and what is wrong with it, said after it in a
    message (None: nothing transformers would not say itself, as it says an empty list is unsatisfiable). A list of
    integer ids comes back as the tensor made once to check them, which transformers indexes with faster than with
    the list (it would make the same tensor itself)."""
    listed = isinstance(allowed, (list, tuple, range))
    if listed and len(allowed) == 0:
        return allowed, None
    if not listed and not isinstance(allowed, (torch.Tensor, np.ndarray)):
        return allowed, ""
    try:
        ids = torch.as_tensor(allowed)
    except (TypeError, ValueError, RuntimeError):
        return allowed, ", which holds other things than token ids"
    if ids.dim() == 0:
        return allowed, ""
    if ids.dtype == torch.bool:
        return allowed, None if ids.shape[-1] == vocabulary else f", a mask not of the {vocabulary} tokens"
    if (ids.is_floating_point() and not listed) or ids.is_complex():
        return allowed, ", which holds no integer token ids"
    if ids.numel() == 0 or ids.device.type != "cpu":
        return allowed, None  # on a device, its range would wait for the device at each row of each step
    low, high = (int(bound) for bound in torch.aminmax(ids))
    if low < 0 or high >= vocabulary:
        return allowed, f", ids outside this model's vocabulary (0 to {vocabulary - 1})"
    return (ids if listed and not ids.is_floating_point() else allowed), None


# What to do about settings that push the scores past float32's range, said by each refusal of them.
_MODERATE = (
    "keep them moderate (e.g. temperature >= 1e-3, repetition_penalty near 1), or, for a temperature near 0, decode "
    "greedily (do_sample=False), which it approaches"
)


class _CheckedScores(LogitsProcessorList):
    """transformers' own list of processors for one generate() call (its settings' processors, the user's, then
    sampling's warpers), whose scores are checked after the last: a setting that pushes float32 scores past their
    range (temperature=1e-40 divides them by it, repetition_penalty=1e-40, guidance_scale=1e308) leaves NaN or inf,
    from which torch.multinomial fails (a device-side assert on CUDA, which ends the process's use of the GPU) and
    greedy search picks an arbitrary token. One reduction per step, read once (the loop waits on the device anyway)."""

    sampling: bool = False
    settings: str = ""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        try:
            processed = super().__call__(input_ids, scores, **kwargs)
        except ValueError as error:  # torch.distributions' check of scores made inf (EtaLogitsWarper's Categorical)
            if isinstance(error, ConfigError) or not self.settings or "Expected parameter" not in str(error):
                raise
            raise ConfigError(
                f"generate(): a logits processor refused a step's scores ({short_repr(str(error), 120)}) after the "
                f"decoding settings ({self.settings}) scaled them, likely past float32's range (at most 3.4e38); "
                f"{_MODERATE}"
            ) from error
        bad = _unusable_rows(processed, self.sampling)
        if not bool(bad.any()):
            return processed
        given = _unusable_rows(scores, self.sampling)  # the model's own logits, before any processor
        if not self.sampling and not bool((bad & ~given).any()):
            return processed  # greedy from the model's own NaN logits: left to remove_invalid_values, as before
        rows = bad.nonzero().flatten().tolist()
        if bool(given[rows[0]]):
            raise ConfigError(
                f"generate(): the model's own logits held NaN or inf in row(s) {rows[:5]} at a step, from which no "
                "token can be sampled (torch.multinomial fails); pass remove_invalid_values=True to replace them, or "
                "run the model in float32 (half precision can overflow)"
            )
        row = processed[rows[0]]
        what = "NaN" if bool(row.isnan().any()) else "+inf" if bool(row.isposinf().any()) else "no finite score"
        named = f" ({self.settings})" if self.settings else ""
        raise ConfigError(
            f"generate(): the decoding settings{named} left {what} in "
            f"the scores of row(s) {rows[:5]} at a step: they scale or shift float32 scores (at most 3.4e38) past "
            "their range, and no token can be "
            f"{'sampled (torch.multinomial fails)' if self.sampling else 'picked (argmax of NaN is arbitrary)'}; "
            f"{_MODERATE}"
        )


@contextlib.contextmanager
def checked_scores(model: Any, sampling: bool, settings: str) -> Iterator[None]:
    """Inside the block, the transformers `model`'s generate() checks each step's scores after every processor
    (_CheckedScores); `sampling`: whether it samples, `settings`: the score-changing settings given, named in the
    message. transformers builds that list in its _get_logits_processor, which is wrapped for the block (an attribute
    of the instance, removed after); a version without it generates unchecked."""
    build = getattr(model, "_get_logits_processor", None)
    if not callable(build) or "_get_logits_processor" in vars(model):
        yield
        return

    def checked(*args: Any, **kwargs: Any) -> LogitsProcessorList:
        processors = _CheckedScores(build(*args, **kwargs))
        processors.sampling, processors.settings = sampling, settings
        return processors

    model._get_logits_processor = checked
    try:
        yield
    finally:
        del model._get_logits_processor
