"""What a transformers pipeline built on an AdaptedModel is given, checked before transformers reads it: its settings
(top_k, candidate_labels, function_to_apply, ...), its inputs, its device, and keywords no part of it reads, which
transformers drops or hands to the tokenizer without a word. pipelines.py calls these when it builds a pipeline and
at each call of one."""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Mapping, Set
from typing import Any

import numpy as np
import torch
import transformers

from adapterfusion._validation import blank_pair_text, closest, short_repr
from adapterfusion.devices import available_device
from adapterfusion.errors import ConfigError

# af.pipeline's own keywords: the choice a pipeline it builds runs, fixed then.
CHOICE_ARGUMENTS = ("adapter", "fusion", "head", "skip_layers")


def check_device(device: Any) -> None:
    """The device transformers moves the model to: a torch device this machine has (else torch's assertion from
    inside `.to()`), or an int, which transformers reads as the CPU (< 0) or accelerator number n (cuda:n where
    CUDA is there, else another accelerator, else the CPU)."""
    fix = "pass device='cpu' (or -1)"
    if isinstance(device, bool) or not isinstance(device, (int, str, torch.device)):
        raise ConfigError(
            f"device={short_repr(device)} has type {type(device).__name__}; pass a torch device such as 'cpu' or "
            "'cuda:0', a torch.device, or an int (-1: the CPU, n: accelerator n)"
        )
    if isinstance(device, int):
        if device >= 0 and torch.cuda.is_available():
            available_device(f"cuda:{device}", fix)
        return
    available_device(device, fix)


def check_settings(task: str, settings: Mapping[str, Any], outputs: int | None = None) -> None:
    """Refuse a pipeline setting that transformers reads as something else than meant, without a word: a top_k
    that is not a count of answers (text-classification slices its sorted scores with it, so top_k=0 answered
    nothing and top_k=-1 dropped the last label, and it took top_k=1.5 or '2' as not given; fill-mask hands it to
    torch.topk), zero-shot candidate_labels that name no label (a ValueError or TypeError inside transformers), and a
    token-classification aggregation_strategy transformers has no grouping of (a KeyError there). Also what fails
    deep inside transformers or torch: a batch_size or num_workers that is no count (torch's sampler), a
    function_to_apply it has no function of (a KeyError), a hypothesis_template without a {} for the label (an
    IndexError, KeyError or ValueError), a zero-shot multi_label that is not a bool (multi_label='false' was true),
    and, for a head of `outputs` 1 (a regression head), a softmax, which scored every text 1.0. And what the tokenizer
    or the task's pipeline fails on or misreads: truncation, padding and max_length, switches given as text
    (return_full_text='no' was true), fill-mask targets and a top_k beyond the `outputs` (vocabulary) it ranks,
    token-classification's stride, ignore_labels and delimiter, text-generation's prefix and handle_long_generation."""
    _check_counts(settings)
    _check_tokenizer_settings(settings)
    _check_flags(settings, _PIPELINE_FLAGS)
    for name in ("tokenize_kwargs", "tokenizer_kwargs"):  # feature-extraction's, fill-mask's
        kwargs = settings.get(name)
        if kwargs is not None and not isinstance(kwargs, Mapping):  # transformers unpacks it: a TypeError there
            raise ConfigError(
                f"{name}={short_repr(kwargs)} ({type(kwargs).__name__}): a {task} pipeline hands the tokenizer these "
                f"settings, so give a dict, e.g. {name}={{'truncation': True}}"
            )
        _check_tokenizer_settings(kwargs or {})
    if task == "fill-mask":
        _check_fill_mask_settings(settings, outputs)
    if task == "token-classification":
        _check_token_classification_settings(settings)
    if task == "text-generation":
        _check_generation_settings(settings)
    if task == "text-classification":
        _check_function_to_apply(settings.get("function_to_apply"), outputs)
    if task == "zero-shot-classification" and "hypothesis_template" in settings:
        _check_hypothesis_template(settings["hypothesis_template"])
    multi_label = settings.get("multi_label")
    if task == "zero-shot-classification" and multi_label is not None and not isinstance(multi_label, bool):
        raise ConfigError(  # transformers reads it as true or false: 'false' scored the labels independently
            f"multi_label={short_repr(multi_label)} ({type(multi_label).__name__}): give True (score each candidate "
            "label on its own) or False (the labels' scores sum to 1)"
        )
    top_k = settings.get("top_k")
    if task in ("text-classification", "fill-mask") and top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            every = ", or top_k=None for every label" if task == "text-classification" else ""
            raise ConfigError(
                f"top_k={short_repr(top_k)} ({type(top_k).__name__}): a {task} pipeline answers the top_k best "
                f"{'labels' if task == 'text-classification' else 'tokens'}, so give a whole number >= 1, e.g. "
                f"top_k=3{every}"
            )
    strategy = settings.get("aggregation_strategy")
    if task == "token-classification" and strategy is not None:
        from transformers.pipelines.token_classification import AggregationStrategy

        names = [choice.value for choice in AggregationStrategy]
        if (
            not isinstance(strategy, (str, AggregationStrategy))
            or str(getattr(strategy, "value", strategy)).lower() not in names
        ):
            raise ConfigError(  # transformers looks the name up in its enum: a KeyError with the name alone
                f"aggregation_strategy={short_repr(strategy)}: a token-classification pipeline groups sub-tokens into "
                f"words by one of {names}, e.g. aggregation_strategy='first'"
            )
    if task == "zero-shot-classification" and "candidate_labels" in settings:
        labels = settings["candidate_labels"]
        # transformers splits a str at its commas ('a, b' is two labels, 'a,a' the same label twice)
        split = [label.strip() for label in labels.split(",") if label.strip()] if isinstance(labels, str) else None
        entries = split if split is not None else labels if isinstance(labels, (list, tuple)) else None
        if not entries or not all(isinstance(label, str) and label.strip() for label in entries):
            raise ConfigError(
                f"candidate_labels={short_repr(labels)}: a zero-shot-classification pipeline scores each text against "
                "the candidate labels, so give a non-empty list of label names (str), e.g. candidate_labels=['sports', "
                "'politics']"
            )
        twice = sorted({label for label in entries if entries.count(label) > 1})
        if twice:
            raise ConfigError(
                f"candidate_labels={short_repr(labels)} names {short_repr(twice)} more than once, answered twice and "
                "(the labels sharing one probability) each copy with a share of it; name each label once"
            )


# The pipeline settings that count things, and the least each may be: torch's DataLoader refuses the rest deep inside
# (batch_size='2' as "got batch_size=2").
_COUNTS = {"batch_size": 1, "num_workers": 0}


def _check_counts(settings: Mapping[str, Any]) -> None:
    for name, least in _COUNTS.items():
        value = settings.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise ConfigError(
                f"{name}={short_repr(value)} ({type(value).__name__}): give a whole number >= {least}, e.g. "
                f"{name}={max(least, 2)}, or leave it out"
            )


# The switches a pipeline reads or passes on to the tokenizer: add_special_tokens='no' was a TypeError inside the
# tokenizer, and return_token_type_ids='no' or return_full_text='no' (text-generation answered the prompt with its
# continuation) were taken as true.
_TOKENIZER_FLAGS = ("add_special_tokens", "return_token_type_ids", "return_attention_mask", "is_split_into_words")
_PIPELINE_FLAGS = (
    "return_full_text",
    "return_text",
    "return_tensors",
    "clean_up_tokenization_spaces",
    "continue_final_message",
)


def _check_flags(settings: Mapping[str, Any], names: tuple[str, ...]) -> None:
    for name in names:
        value = settings.get(name)
        if value is not None and not isinstance(value, bool):  # a str was a TypeError there, or read as true
            raise ConfigError(
                f"{name}={short_repr(value)} ({type(value).__name__}): transformers reads it as true or false (a "
                f"non-empty text as true); give {name}=True or False, or leave it out"
            )


def _check_fill_mask_settings(settings: Mapping[str, Any], vocabulary: int | None) -> None:
    """fill-mask's targets (the words to score at the mask: a TypeError or ValueError inside transformers for an
    int, an empty list or blank words) and a top_k beyond the `vocabulary` it ranks (torch.topk's RuntimeError)."""
    targets = settings.get("targets")
    entries = [targets] if isinstance(targets, str) else targets if isinstance(targets, (list, tuple)) else None
    if targets is not None and (not entries or not all(isinstance(word, str) and word.strip() for word in entries)):
        raise ConfigError(
            f"targets={short_repr(targets)}: a fill-mask pipeline scores only these words at the mask, so give a word "
            "or a non-empty list of words (str), e.g. targets=['paris', 'london'], or leave it out for every token"
        )
    top_k = settings.get("top_k")
    if isinstance(top_k, int) and vocabulary is not None and top_k > vocabulary:
        raise ConfigError(
            f"top_k={top_k}: a fill-mask pipeline ranks the {vocabulary} tokens of the model's vocabulary, so give "
            f"top_k <= {vocabulary}, e.g. top_k=5"
        )


def check_fill_mask_targets(targets: Any, tokenizer: Any) -> None:
    """fill-mask `targets` as transformers' FillMaskPipeline.get_target_ids reads them: a word that is a key of the
    tokenizer's vocabulary (a WordPiece '##s', a BPE 'ĠParis') or that the tokenizer makes one token of ('Paris' on an
    uncased tokenizer, ' Paris' on one that marks a leading space) is scored as that token. Any other word transformers
    cut to its first sub-token (or dropped, where there is none) with only a logged warning: another word's score."""
    _check_fill_mask_settings({"targets": targets}, None)
    try:
        vocabulary = tokenizer.get_vocab()
    except Exception:  # noqa: BLE001 - transformers falls back to tokenizing every target, as here
        vocabulary = {}
    for target in [targets] if isinstance(targets, str) else targets:
        pieces = [] if target in vocabulary else _tokens(tokenizer, target)
        if target in vocabulary or len(pieces) == 1:
            continue
        lost = (
            f"the tokenizer splits it into {pieces}, of which transformers would score {pieces[0]!r} alone in its place"
            if pieces
            else "the tokenizer makes no token of it, and transformers would leave it out"
        )
        # A word a BPE tokenizer marks with its leading space, or a cased vocabulary's lower-case word, may be one.
        near = (f" {target.strip()}", target.lower())
        whole = next((word for word in near if word != target and len(_tokens(tokenizer, word)) == 1), None)
        such = f" (such as {whole!r})" if whole is not None else ""
        raise ConfigError(
            f"targets: {target!r} is not one token of this tokenizer's vocabulary ({type(tokenizer).__name__}): "
            f"{lost}, so the answer would not be that word's score; "
            f"give whole-vocabulary words{such}, each one token by tokenizer.tokenize(word)"
        )


def _tokens(tokenizer: Any, text: str) -> list[str]:
    """The tokens `tokenizer` makes of `text` alone, without special tokens (as get_target_ids tokenizes a target)."""
    ids = tokenizer(text, add_special_tokens=False, return_attention_mask=False, return_token_type_ids=False)
    return list(tokenizer.convert_ids_to_tokens(ids["input_ids"]))


def check_mask_tokens(value: object, mask_token: str | None) -> None:
    """Every text given to a fill-mask pipeline holds the tokenizer's `mask_token`: without one transformers fails
    building its own error (an AttributeError 'base_model_prefix' on the model view)."""
    if mask_token is None:
        return
    entries = value if isinstance(value, (list, tuple)) else [value]
    missing = [index for index, text in enumerate(entries) if isinstance(text, str) and mask_token not in text]
    if missing:
        where = f"entries {missing[:5]} of the list" if isinstance(value, (list, tuple)) else short_repr(value)
        raise ConfigError(
            f"a fill-mask pipeline fills the tokenizer's mask token {mask_token!r}, and there is none in {where}; put "
            f"{mask_token} where the word to predict goes, e.g. 'Paris is the {mask_token} of France.'"
        )


def check_token_windows(value: object, settings: Mapping[str, Any], tokenizer: Any = None) -> None:
    """A token-classification call's `settings` (the pipeline's own with the call's over them) read together with its
    input and `tokenizer`: a stride splits a long text into windows whose entities only an aggregation_strategy other
    than 'none' joins, and must stay below a window's tokens; is_split_into_words=True takes texts as lists of words
    (a ValueError inside transformers for each)."""
    strategy = settings.get("aggregation_strategy")
    stride = settings.get("stride")
    window = _window_tokens(tokenizer)
    if isinstance(stride, int) and window is not None and stride >= window:
        raise ConfigError(
            f"stride={stride} must be below the {window} tokens of a window (the tokenizer's model_max_length less "
            f"the special tokens it adds), as each window moves on by the tokens it does not share; e.g. "
            f"stride={min(128, window // 4)}"
        )
    if stride is not None and strategy is not None and str(getattr(strategy, "value", strategy)).lower() == "none":
        raise ConfigError(
            f"stride={short_repr(stride)} splits a long text into overlapping windows, whose tokens only an "
            "aggregation_strategy joins back into entities; give aggregation_strategy='simple' (or 'first', 'average', "
            "'max') with it, or leave stride out"
        )
    if settings.get("is_split_into_words") and isinstance(value, str):
        raise ConfigError(
            f"is_split_into_words=True takes a text as a list of its words, e.g. ['Paris', 'is', 'big'], and was given "
            f"the str {short_repr(value)}; pass its words, or leave is_split_into_words out"
        )


def _window_tokens(tokenizer: Any) -> int | None:
    """The text tokens one window of a token-classification input holds, or None where the tokenizer sets no bound."""
    limit = getattr(tokenizer, "model_max_length", None)
    if not isinstance(limit, int) or not 0 < limit < 10**9:  # transformers' "no limit" is a huge int
        return None
    try:
        return limit - int(tokenizer.num_special_tokens_to_add(pair=False))
    except (AttributeError, TypeError, ValueError):
        return limit


def _check_token_classification_settings(settings: Mapping[str, Any]) -> None:
    """token-classification's stride (a count of tokens the windows overlap), ignore_labels (label names) and
    delimiter (a text): other values failed inside transformers or the tokenizer (a TypeError, an OverflowError)."""
    stride = settings.get("stride")
    if stride is not None and (isinstance(stride, bool) or not isinstance(stride, int) or stride < 0):
        raise ConfigError(
            f"stride={short_repr(stride)} ({type(stride).__name__}): the tokens by which the windows of a long text "
            "overlap, so give a whole number >= 0 below the tokenizer's model_max_length, e.g. stride=16"
        )
    ignore = settings.get("ignore_labels")
    if ignore is not None and not (isinstance(ignore, (list, tuple)) and all(isinstance(x, str) for x in ignore)):
        raise ConfigError(
            f"ignore_labels={short_repr(ignore)} ({type(ignore).__name__}): the labels to leave out of the answer, so "
            "give a list of label names, e.g. ignore_labels=['O']"
        )
    delimiter = settings.get("delimiter")
    if delimiter is not None and not isinstance(delimiter, str):
        raise ConfigError(
            f"delimiter={short_repr(delimiter)} ({type(delimiter).__name__}): the text that joins pre-split words, "
            "so give a str, e.g. delimiter=' '"
        )


def _check_tokenizer_settings(settings: Mapping[str, Any]) -> None:
    """The tokenizer settings a pipeline passes on (truncation, padding, max_length): a name transformers has no
    strategy of failed inside it with a ValueError, a negative max_length with the tokenizer's OverflowError, and
    max_length=0 was read as not given (nothing truncated)."""
    from transformers.tokenization_utils_base import PaddingStrategy, TruncationStrategy

    for name, strategies in (("truncation", TruncationStrategy), ("padding", PaddingStrategy)):
        value = settings.get(name)
        names = [choice.value for choice in strategies]
        if value is None or isinstance(value, (bool, strategies)) or (isinstance(value, str) and value in names):
            continue
        raise ConfigError(
            f"{name}={short_repr(value)} ({type(value).__name__}): the tokenizer takes {name}=True, False or one of "
            f"{names}, e.g. {name}=True"
        )
    _check_flags(settings, _TOKENIZER_FLAGS)
    max_length = settings.get("max_length")
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1):
        raise ConfigError(
            f"max_length={short_repr(max_length)} ({type(max_length).__name__}): the most tokens a text is cut to, "
            "so give a whole number >= 1 with truncation=True, e.g. max_length=128, or leave it out"
        )


def _check_generation_settings(settings: Mapping[str, Any]) -> None:
    """text-generation's prefix is a text put before each prompt (another value failed in the tokenizer), and its
    handle_long_generation None or 'hole' (another, a ValueError inside transformers)."""
    prefix = settings.get("prefix")
    if prefix is not None and not isinstance(prefix, str):
        raise ConfigError(
            f"prefix={short_repr(prefix)} ({type(prefix).__name__}): a text-generation pipeline puts the prefix text "
            "before each prompt, so give a str, e.g. prefix='Once upon a time ', or leave it out"
        )
    handle = settings.get("handle_long_generation")
    if handle not in (None, "hole"):
        raise ConfigError(
            f"handle_long_generation={short_repr(handle)}: a text-generation pipeline takes None (prompts as they are) "
            "or 'hole' (cut a long prompt from the left to leave room for max_new_tokens)"
        )


def _check_function_to_apply(value: Any, outputs: int | None) -> None:
    """A text-classification function_to_apply: one of transformers' ClassificationFunction names (any case), and
    not softmax over the one output of a regression head (1.0 for every text)."""
    if value is None:
        return
    from transformers.pipelines.text_classification import ClassificationFunction

    names = [choice.value for choice in ClassificationFunction]
    name = (
        value.value if isinstance(value, ClassificationFunction) else value.lower() if isinstance(value, str) else None
    )
    if name not in names:
        raise ConfigError(
            f"function_to_apply={short_repr(value)}: a text-classification pipeline turns logits into scores with one "
            f"of {names} (leave it out for the head's own: softmax over labels, none for a regression value)"
        )
    if name == "softmax" and outputs == 1:
        raise ConfigError(
            "function_to_apply='softmax' over a head of one output (a regression value) scores every text 1.0; "
            "leave it out (or 'none') for the value itself, or 'sigmoid' to squash it into (0, 1)"
        )


def _check_hypothesis_template(template: Any) -> None:
    """A zero-shot hypothesis_template must hold one {} that each candidate label fills."""
    try:
        fills = isinstance(template, str) and template.format("label") != template
    except (IndexError, KeyError, ValueError):
        fills = False
    if not fills:
        raise ConfigError(
            f"hypothesis_template={short_repr(template)}: a zero-shot-classification pipeline writes one hypothesis "
            "per candidate label into it, so give a text with one {} for the label, e.g. 'This example is {}.'"
        )


# The tasks whose answer is about the text as a whole, which a blank text (the tokenizer's special tokens alone)
# answers without a word; token-classification answers it with no entities, generation continues from nothing.
_TEXT_READERS = ("text-classification", "zero-shot-classification")


def check_pipeline_input(task: str, value: object) -> None:
    """Refuse what no pipeline of `task` reads as its input: None, a number, bytes, a set, a tensor or array (read
    as one input, whole), an empty list, an entry that is not a text, pair or chat, (text-classification) a dict other
    than {'text': ..., 'text_pair': ...} or a pair with a blank side, (text-generation) a chat message without a role
    or content, and a blank text where the answer is about the whole text (_TEXT_READERS). Generators and datasets
    pass as they are: reading them would use them up."""
    takes = "a text (str) or a non-empty list of texts"
    if task == "text-classification":
        takes += ", a text pair {'text': ..., 'text_pair': ...} or a list of those"
    elif task == "text-generation":
        takes += ", a chat (a list of {'role': ..., 'content': ...} messages) or a list of chats"
    listed = isinstance(value, (list, tuple))
    entries: list[Any] = list(value) if isinstance(value, (list, tuple)) else [value]
    if not entries:
        raise ConfigError(f"a {task} pipeline was given an empty {type(value).__name__}; it takes {takes}")
    if isinstance(value, tuple) and task != "text-generation":
        # A tuple is one input to transformers, which the tokenizer reads as a batch: text-classification and
        # zero-shot-classification answered its first text alone, token-classification failed in the tokenizer.
        as_pair = task == "text-classification" and len(entries) == 2
        or_pair = f", or a text pair as {{'text': {short_repr(entries[0])}, 'text_pair': ...}}" if as_pair else ""
        raise ConfigError(
            f"a {task} pipeline was given a tuple of {len(entries)}, which transformers reads as one input, not as "
            f"{len(entries)} texts; pass a list of texts{or_pair}"
        )
    if task == "text-generation":
        for chat in [value] if any(isinstance(entry, Mapping) for entry in entries) else entries:
            if isinstance(chat, (list, tuple)):
                _check_chat(chat)
    for index, entry in enumerate(entries):
        where = f"entry [{index}] " if listed else ""
        one = isinstance(entry, Mapping) and task == "text-classification" and entry.get("text_pair") is None
        text = entry.get("text") if one else entry
        if isinstance(text, str) and task in _TEXT_READERS and not text.strip():  # a text, or a pair dict of one
            raise ConfigError(
                f"a {task} pipeline was given {where}{short_repr(entry)}, which holds no text: the answer would be the "
                "model's for its special tokens alone, saying nothing of what was sent; leave out blank texts"
            )
        if isinstance(entry, Mapping):  # a text pair, or one message of a chat
            pair = task == "text-classification" and "text" in entry and set(entry) <= {"text", "text_pair"}
            bad = not (pair or (listed and task == "text-generation"))
            if pair and not bad and not _is_pair(entry):
                raise ConfigError(
                    f"a text-classification pipeline was given the text pair {short_repr(entry)}; a pair is one text "
                    "and its pair, {'text': str, 'text_pair': str}: pass a list of such dicts for several pairs"
                )
            paired = pair and isinstance(entry.get("text_pair"), str)
            blank = blank_pair_text(entry["text"], entry["text_pair"]) if paired else None
            if blank is not None:
                raise ConfigError(
                    f"a text-classification pipeline was given {where}the text pair {short_repr(entry)}, whose "
                    f"{blank}; give text on both sides, or the one text alone as a plain string"
                )
        elif isinstance(entry, (list, tuple)) and task != "text-generation":
            # A pair as a list: the pipeline answered its first text alone (zero-shot), or failed in the tokenizer.
            bad = True
        elif listed:  # inside a list only texts, pairs and (text-generation) chats are inputs
            bad = not isinstance(entry, (str, list, tuple))
        else:  # containers transformers reads as one input, handing them whole to the tokenizer (a ValueError)
            bad = entry is None or isinstance(entry, (numbers.Number, bytes, Set, torch.Tensor, np.ndarray))
        if bad:
            raise ConfigError(
                f"a {task} pipeline was given {'an entry ' if listed else ''}{short_repr(entry)} of type "
                f"{type(entry).__name__}; it takes {takes}"
            )


def _check_chat(chat: list | tuple) -> None:
    """A chat a text-generation pipeline writes into a prompt with the tokenizer's chat template: a message without a
    role or content failed inside transformers (a TypeError or KeyError)."""
    for index, message in enumerate(chat):
        if not (isinstance(message, Mapping) and isinstance(message.get("role"), str) and "content" in message):
            raise ConfigError(
                f"a text-generation pipeline was given a chat whose message [{index}] is {short_repr(message)}; each "
                "message is {'role': 'user' (or 'system', 'assistant'), 'content': <the text>}"
            )


def _is_pair(entry: Mapping[str, Any]) -> bool:
    """Whether a {'text', 'text_pair'} dict holds one text and its pair (or no pair): lists in it were one answer for
    the first pair alone, and other values failed inside the tokenizer."""
    return isinstance(entry["text"], str) and isinstance(entry.get("text_pair"), (str, type(None)))


def _passed_through(built: Any) -> int | None:
    """Which of the pipeline's preprocess / forward / postprocess settings (0, 1, 2) gets a keyword its
    _sanitize_parameters does not know, or None where such a keyword is dropped or refused."""
    probe = "_adapterfusion_unknown_keyword"
    try:
        steps = type(built)._sanitize_parameters(built, **{probe: None})
    except TypeError:  # no **kwargs: transformers refuses the keyword itself
        return None
    return next((step for step, params in enumerate(steps) if probe in (params or {})), None)


# What transformers.Pipeline.__init__ takes out of its **kwargs before the task's _sanitize_parameters sees them.
_PIPELINE_OWN_ARGUMENTS = {"batch_size", "num_workers", "args_parser", "assistant_model", "assistant_tokenizer"}


def refuse_unread_arguments(built: Any, tokenizer: Any, kwargs: dict[str, Any], ours: bool = True) -> None:
    """A keyword that neither transformers.pipeline nor the task's pipeline reads (`adapter_name=` for adapter=):
    dropped without a word, or handed to the tokenizer, which ignores what it does not know, it would run another
    choice than the one meant. Generation settings are the model's generate()'s to check. `ours`: built by
    af.pipeline (False: by transformers.pipeline on a view or the model)."""
    named = set(inspect.signature(transformers.pipeline).parameters) | _PIPELINE_OWN_ARGUMENTS
    named |= set(inspect.signature(transformers.Pipeline.__init__).parameters)
    named |= set(inspect.signature(type(built)._sanitize_parameters).parameters)
    taken = named | set(getattr(built, "_generate_kwargs", None) or {})
    through = _passed_through(built)
    tokenizes = set(inspect.signature(type(tokenizer).__call__).parameters)
    for step, params in enumerate((built._preprocess_params, built._forward_params, built._postprocess_params)):
        # Where a pipeline passes on what it does not know: to the tokenizer (read there, or ignored), or to
        # generate() (which checks what it is given itself).
        passed_on = step == through and step != 1
        taken |= {key for key in params or {} if not passed_on or key in named or (step == 0 and key in tokenizes)}
    unread = sorted(set(kwargs) - taken)
    if not unread:
        return
    choices = list(CHOICE_ARGUMENTS)
    shown = [
        f"{name!r}" + (f" (did you mean {match!r}?)" if (match := closest(name, choices)) else "") for name in unread
    ]
    one = len(unread) == 1
    if ours:
        raise ConfigError(
            f"af.pipeline: {', '.join(shown)} {'is not an argument' if one else 'are not arguments'} of "
            f"af.pipeline, of transformers.pipeline or of its {type(built).__name__}, so transformers would ignore "
            f"{'it' if one else 'them'}; af.pipeline takes {', '.join(choices)}, and the pipeline's own "
            "settings (device, batch_size, top_k, max_new_tokens, ...)"
        )
    raise ConfigError(
        f"transformers.pipeline: {', '.join(shown)} {'is not an argument' if one else 'are not arguments'} of "
        f"transformers.pipeline or of its {type(built).__name__}, so transformers would ignore "
        f"{'it' if one else 'them'}; give the pipeline's own settings (device, batch_size, top_k, ...), and choose "
        "the adapter, fusion and head in the model (model.for_pipeline(adapter=..., head=...)) or build with "
        "af.pipeline(task, model, tokenizer, adapter=..., head=...)"
    )


# What a call's keyword means where a pipeline does not read it, said with the refusal.
_CALL_HINTS = {
    "adapter_names": "a pipeline runs the choice it was built with for every input; for a choice per example call "
    "the model itself, model(**batch, adapter_names=[...])",
    "head_names": "a pipeline runs the head it was built with for every input; for a head per example call the "
    "model itself, model(**batch, head_names=[...])",
}


def refuse_unread_call_arguments(built: Any, kwargs: dict[str, Any]) -> None:
    """A keyword given to a call of the pipeline `built` that its task's pipeline does not read: transformers hands
    it to the tokenizer, which ignores what it does not know (adapter_names=[...] ran the pipeline's own choice
    unsaid), drops it (zero-shot), or fails with a TypeError inside transformers. Generation settings are the model's
    generate()'s to check, as at build time."""
    through = _passed_through(built)
    if through == 1:
        return
    named = _PIPELINE_OWN_ARGUMENTS | set(inspect.signature(type(built)._sanitize_parameters).parameters)
    keys = [key for key in kwargs if key not in named]
    if not keys:
        return
    try:
        steps = type(built)._sanitize_parameters(built, **{key: kwargs[key] for key in keys})
    except TypeError:  # no **kwargs: none of them is read
        steps = ({}, {}, {})
    except Exception:  # noqa: BLE001 - a value the pipeline itself refuses: its own error, at the call
        return
    tokenizer = getattr(built, "tokenizer", None)
    tokenizes = set(inspect.signature(type(tokenizer).__call__).parameters) if tokenizer is not None else set()
    unread = [
        key
        for key in keys
        if not any(key in (params or {}) and (step != through or key in tokenizes) for step, params in enumerate(steps))
    ]
    if unread:
        key = unread[0]
        hint = _CALL_HINTS.get(key, "give only the settings of the task's pipeline (top_k, truncation, ...)")
        raise ConfigError(
            f"{key}={short_repr(kwargs[key])} given to a pipeline call: its {type(built).__name__} does not read it, "
            f"so transformers would ignore it; {hint}"
        )
