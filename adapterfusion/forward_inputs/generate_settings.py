"""`check_generate_settings`: generate()'s numeric settings (max_new_tokens, num_beams, temperature, top_p, ...)
checked before transformers reads them. transformers compares max_new_tokens='3' with an int (a TypeError), divides
by num_beams=0, makes a tensor of num_beams=-1 rows, and ignores top_p=2 or no_repeat_ngram_size=-1 without a word.

Each setting is read where generate() reads it: its keyword, else the generation_config passed, else the model's
own. A numpy or torch scalar (np.int64(100), torch.tensor(100)) counts as the Python number it holds, and is handed
on as that number, so the positions check sees it too; a float is no integer setting (max_new_tokens=100.0).

Beside them: the token-id settings (check_token_ids: ids in the vocabulary, no list of them empty, finite
sequence biases, a token left unsuppressed), assistant_early_exit (check_early_exit), and the arguments
transformers reads only steps in, its callbacks (generate_callbacks.py) and negative_prompt_ids
(check_generate_arguments)."""

from __future__ import annotations

import copy
import functools
import inspect
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn
from transformers import GenerationConfig
from transformers.generation import BaseWatermarkingConfig, WatermarkingConfig

from adapterfusion._validation import is_finite_number, short_repr
from adapterfusion.errors import ConfigError
from adapterfusion.forward_inputs.generate_callbacks import bind_generate, check_callbacks


@dataclass(frozen=True)
class _Setting:
    """An integer (else a real number) setting, the values `allowed`, and what it must be, said in the message."""

    integer: bool
    allowed: Callable[[float], bool]
    expected: str


def _positive(value: float) -> bool:
    return value > 0


def _not_negative(value: float) -> bool:
    return value >= 0


def _fraction(value: float) -> bool:
    return 0 <= value <= 1


def _up_to_one(value: float) -> bool:
    return 0 < value <= 1


def _below_one(value: float) -> bool:
    return 0 <= value < 1


def _inside_unit(value: float) -> bool:
    return 0 < value < 1


def _any(value: float) -> bool:
    return True


def _moderate_power(value: float) -> bool:
    return -50 <= value <= 50


_SETTINGS: dict[str, _Setting] = {
    "max_new_tokens": _Setting(True, _positive, "an integer greater than 0 (the tokens to generate after the prompt)"),
    "max_length": _Setting(True, _positive, "an integer greater than 0 (the most tokens, prompt included)"),
    "min_new_tokens": _Setting(True, _not_negative, "an integer >= 0 (the fewest tokens to generate)"),
    "min_length": _Setting(True, _not_negative, "an integer >= 0 (the fewest tokens, prompt included)"),
    "num_beams": _Setting(True, _positive, "an integer greater than 0 (beams per prompt; 1: no beam search)"),
    "num_return_sequences": _Setting(True, _positive, "an integer greater than 0 (sequences returned per prompt)"),
    "num_beam_groups": _Setting(True, _positive, "an integer greater than 0 (groups of beams; 1: one group)"),
    "top_k": _Setting(True, _not_negative, "an integer >= 0 (sample among the k likeliest tokens; 0: all)"),
    "no_repeat_ngram_size": _Setting(True, _not_negative, "an integer >= 0 (no n-gram of it repeats; 0: off)"),
    "encoder_no_repeat_ngram_size": _Setting(
        True, _not_negative, "an integer >= 0 (no n-gram of the prompt of it recurs; 0: off)"
    ),
    "prompt_lookup_num_tokens": _Setting(True, _positive, "an integer greater than 0 (candidate tokens per step)"),
    "max_matching_ngram_size": _Setting(True, _positive, "an integer greater than 0 (the longest n-gram matched)"),
    "num_assistant_tokens": _Setting(True, _positive, "an integer greater than 0 (the assistant's tokens per step)"),
    "temperature": _Setting(False, _not_negative, "a number >= 0 (> 0 when sampling, do_sample=True; 1: unchanged)"),
    "top_p": _Setting(False, _fraction, "a number in 0..1 (sample among the likeliest tokens of that mass; 1: all)"),
    "top_h": _Setting(False, _up_to_one, "a number greater than 0 and at most 1 (an entropy share to sample within)"),
    "min_p": _Setting(False, _fraction, "a number in 0..1 (a token's least probability, times the top one's)"),
    "typical_p": _Setting(False, _up_to_one, "a number greater than 0 and at most 1 (1: off)"),
    "epsilon_cutoff": _Setting(False, _below_one, "a number >= 0 and below 1 (0: off)"),
    "eta_cutoff": _Setting(False, _below_one, "a number >= 0 and below 1 (0: off)"),
    "repetition_penalty": _Setting(False, _positive, "a number greater than 0 (1: no penalty)"),
    "encoder_repetition_penalty": _Setting(False, _positive, "a number greater than 0 (1: no penalty)"),
    # beyond ±50 the power overflows a float (an OverflowError inside transformers) or becomes 0 (every beam's
    # score -inf, an arbitrary pick) for some length up to a million tokens
    "length_penalty": _Setting(
        False, _moderate_power, "a number from -50 to 50 (beam scores are divided by length ** it; 1: by length)"
    ),
    "max_time": _Setting(False, _positive, "a number of seconds greater than 0"),
    "prefill_chunk_size": _Setting(True, _positive, "an integer greater than 0 (prompt tokens per prefill forward)"),
    "guidance_scale": _Setting(False, _any, "a finite number (classifier-free guidance's weight; 1: off)"),
    # transformers compares these with numbers (a TypeError from a string) or reads a value out of range as "off"
    # without a word (penalty_alpha=-1: greedy search, not contrastive).
    "penalty_alpha": _Setting(
        False, _not_negative, "a number >= 0 (contrastive search's penalty, with top_k > 1; 0: off)"
    ),
    "max_cache_len": _Setting(True, _positive, "an integer greater than 0 (the tokens a static cache holds)"),
    "assistant_confidence_threshold": _Setting(
        False, _fraction, "a number in 0..1 (the assistant's confidence below which it stops drafting)"
    ),
    "assistant_ensemble_weight": _Setting(
        False, _inside_unit, "a number greater than 0 and below 1 (the assistant's share of the mixed scores)"
    ),
}


# Settings whose transformers processor refuses an int ("`temperature` (=2) has to be a strictly positive float"),
# handed on as the float they equal.
_FLOATS_ONLY = ("temperature", "repetition_penalty", "encoder_repetition_penalty")


@dataclass(frozen=True)
class GenerateSettings:
    """generate()'s arguments with its numeric settings as Python numbers (`args`, `kwargs`: hand these to the
    wrapped model's generate), and the value of each setting it will read (`values`; one not set anywhere: absent)."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    values: dict[str, int | float]
    asked: frozenset[str] = frozenset()  # the settings of `values` given in this call, not the model's own

    @property
    def max_new_tokens(self) -> int | None:
        return self._integer("max_new_tokens")

    @property
    def max_length(self) -> int | None:
        return self._integer("max_length")

    @property
    def least(self) -> tuple[int | None, int | None]:
        """min_new_tokens and min_length given in this call; the model's own (a summariser's min_length=56) are
        defaults for lengths of its own, left to transformers."""
        return self._asked("min_new_tokens"), self._asked("min_length")

    def _integer(self, name: str) -> int | None:
        value = self.values.get(name)
        return int(value) if value is not None else None

    def _asked(self, name: str) -> int | None:
        return self._integer(name) if name in self.asked else None


# The settings transformers scales or shifts the scores by (neutral at 1), which can push float32 scores past their
# range: temperature=1e-40 divides them by it (sampling only), repetition_penalty=1e-40 a repeated token's.
_SCORE_SCALES = ("temperature", "repetition_penalty", "encoder_repetition_penalty", "guidance_scale")


def score_scales(settings: GenerateSettings, sampling: bool) -> str:
    """The score-scaling settings of `settings` that act in this call (_SCORE_SCALES other than 1), as a message
    names them, e.g. "temperature=1e-40"; empty where none does."""
    acting = [
        f"{name}={settings.values[name]!r}"
        for name in _SCORE_SCALES
        if settings.values.get(name, 1) != 1 and (sampling or name != "temperature")
    ]
    return ", ".join(acting)


def check_generate_settings(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> GenerateSettings:
    """Check the numeric settings generate(*args, **kwargs) of the transformers `model` will read (its keywords,
    else the generation_config passed, its second positional argument or keyword, else the model's own); each
    one of the wrong type or outside its range is a ConfigError naming it, the value and what it must be."""
    args, kwargs = tuple(args), dict(kwargs)
    passed = _passed_config(args, kwargs)
    if passed is not None and not isinstance(passed, GenerationConfig):
        raise ConfigError(
            f"generate(): generation_config is a {type(passed).__name__}, not a transformers GenerationConfig; pass "
            "GenerationConfig(...) of it, or its settings as keywords, e.g. generate(..., max_new_tokens=20)"
        )
    own = getattr(model, "generation_config", None)
    values: dict[str, int | float] = {}
    asked: set[str] = set()
    copied: GenerationConfig | None = None
    for name, setting in _SETTINGS.items():
        value, where = _read(name, kwargs, passed, own)
        if value is None:
            continue
        number = _number(value, f"{where}{name}", setting)
        values[name] = number
        if not where.startswith("the model's"):
            asked.add(name)
        if type(value) is float or (type(value) is int and name not in _FLOATS_ONLY):
            continue
        if where == "generation_config.":  # a numpy or torch scalar in the passed config: a copy holds the number
            copied = copied or copy.deepcopy(passed)
            setattr(copied, name, number)
        else:  # a keyword, or the model's own config, which a keyword overrides
            kwargs[name] = number
    if copied is not None:
        if "generation_config" in kwargs:
            kwargs["generation_config"] = copied
        else:
            args = (args[0], copied, *args[2:])
    _check_decay(*_read("exponential_decay_length_penalty", kwargs, passed, own))
    _check_watermarking(*_read("watermarking_config", kwargs, passed, own))
    return GenerateSettings(args, kwargs, values, frozenset(asked))


def _check_decay(value: Any, where: str) -> None:
    """exponential_decay_length_penalty: (start_index, decay_factor), an integer >= 0 (tokens generated before the
    end token's score starts to grow) and a finite number greater than 0; transformers indexes and adds to it steps
    in (a TypeError or IndexError there) and ignores a third item."""
    if value is None:
        return
    field = f"generate(): {where}exponential_decay_length_penalty={value!r}"
    expected = "a pair (start_index, decay_factor): an integer >= 0 and a number greater than 0, e.g. (10, 1.5)"
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ConfigError(f"{field}: expected {expected}")
    start, factor = (_held(item) for item in value)
    if isinstance(start, bool) or not isinstance(start, numbers.Integral) or int(start) < 0:
        raise ConfigError(f"{field}: its start_index {value[0]!r} is no integer >= 0; expected {expected}")
    if not is_finite_number(factor) or not factor > 0:  # an int beyond any float too, which float() cannot convert
        raise ConfigError(
            f"{field}: its decay_factor {value[1]!r} is no finite number greater than 0; expected {expected}"
        )


def _check_watermarking(value: Any, where: str) -> None:
    """watermarking_config: one of transformers' watermarking configs or a dict of WatermarkingConfig's fields;
    transformers reads another value steps in ("'int' object has no attribute 'validate'"), and makes a
    WatermarkingConfig of a dict with another key inside (a TypeError: unexpected keyword argument)."""
    if isinstance(value, dict):
        fields = inspect.signature(WatermarkingConfig.__init__).parameters
        unknown = sorted(str(key) for key in value if key not in fields or key == "self")
        if unknown:
            raise ConfigError(
                f"generate(): {where}watermarking_config={short_repr(value)} has key(s) {unknown}, which transformers' "
                f"WatermarkingConfig (what it makes of a dict) does not take (a TypeError inside transformers); use "
                f"its fields: {', '.join(name for name in fields if name != 'self')}, or pass "
                "SynthIDTextWatermarkingConfig(...) itself"
            )
        return
    if value is None or isinstance(value, BaseWatermarkingConfig):
        return
    raise ConfigError(
        f"generate(): {where}watermarking_config is a {type(value).__name__}; pass transformers' "
        "WatermarkingConfig(...) or SynthIDTextWatermarkingConfig(...), or a dict of its fields"
    )


def _passed_config(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The generation_config generate() was given: its keyword, else its second positional argument (None: none)."""
    return kwargs["generation_config"] if "generation_config" in kwargs else args[1] if len(args) > 1 else None


def _held(value: Any) -> Any:
    """The Python number a numpy or torch scalar holds; any other value as it is."""
    return value.item() if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)) else value


def _read(name: str, kwargs: dict[str, Any], passed: Any, own: Any) -> tuple[Any, str]:
    """The value of setting `name` generate() reads, and where from (the prefix of its name in a message): a keyword
    (even None, which unsets it), else the passed generation_config's value, else the model's own (None: unset)."""
    if name in kwargs:
        return kwargs[name], ""
    value = getattr(passed, name, None)
    if value is not None:
        return value, "generation_config."
    return getattr(own, name, None), "the model's generation_config."


def _number(value: Any, field: str, setting: _Setting) -> int | float:
    """`value` as the Python number `setting` takes (a numpy or torch scalar read as the number it holds), or a
    ConfigError naming `field`."""
    held = _held(value)
    if isinstance(held, bool) or not isinstance(held, numbers.Integral if setting.integer else numbers.Real):
        raise ConfigError(f"generate(): {field}={value!r} has type {type(value).__name__}; expected {setting.expected}")
    if not is_finite_number(held):  # NaN, inf, or an int beyond any float, which math.isfinite cannot even convert
        raise ConfigError(
            f"generate(): {field}={short_repr(value)} is not a finite number; expected {setting.expected}"
        )
    number = int(cast(Any, held)) if setting.integer else float(cast(Any, held))  # numbers' ABCs type neither
    if not setting.allowed(number):
        raise ConfigError(f"generate(): {field}={value!r} must be {setting.expected}")
    return number


def read_setting(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> Any:
    """The value of generate()'s setting `name` (None: unset): its keyword, else the generation_config passed, else
    the model's own."""
    return _read(name, kwargs, _passed_config(args, kwargs), getattr(model, "generation_config", None))[0]


def check_early_exit(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse assistant_early_exit where transformers' early-exit drafting cannot run: it drafts with the model's own
    first layers by lowering its base model's config.num_hidden_layers for the draft, which only a base model whose
    layer loop stops there honours (Llama-style decoders). GPT-2's loop indexes its cache past the draft's layers (an
    IndexError inside transformers) and T5's base model is not where transformers looks for it (an AttributeError)."""
    layers = read_setting(model, args, kwargs, "assistant_early_exit")
    if layers is None:
        return
    base = getattr(model, getattr(model, "base_model_prefix", ""), None)
    if isinstance(base, nn.Module) and _stops_at_num_hidden_layers(cast(Any, type(base))):
        return
    raise ConfigError(
        f"generate(assistant_early_exit={layers!r}): transformers drafts with the model's first layers by lowering "
        f"config.num_hidden_layers, where {type(model).__name__} does not stop (Llama-style decoders do: Llama, "
        "Mistral, Qwen2/3, Gemma, Phi-3); draft with another model (assistant_model=...) or with "
        "prompt_lookup_num_tokens=... instead"
    )


@functools.cache
def _stops_at_num_hidden_layers(base_class: Any) -> bool:
    """Whether `base_class`'s forward reads config.num_hidden_layers (its layer loop's end), read once per class (as
    encoder_decoder.py reads a forward's shifts); True where its source cannot be read, leaving it to transformers."""
    try:
        return "num_hidden_layers" in inspect.getsource(base_class.forward)
    except (OSError, TypeError):
        return True


# The token-id settings generate() embeds, compares with the chosen tokens or indexes the logits with, and how each
# nests its ids: 0 one id, 1 one id or a list of them, 2 a list of them (the suppress lists, which transformers
# iterates: one id alone was a TypeError), 3 a list of lists of them (sequence_bias: a dict keyed by them, or a list
# of [ids, bias] pairs). transformers would embed or index an id outside the vocabulary steps later (torch's
# IndexError) or, for forced_bos_token_id on a decoder and the suppress lists, ignore it without a word.
_TOKEN_IDS = {
    "pad_token_id": 0,
    "bos_token_id": 0,
    "decoder_start_token_id": 0,
    "forced_bos_token_id": 0,
    "eos_token_id": 1,
    "forced_eos_token_id": 1,
    "suppress_tokens": 2,
    "begin_suppress_tokens": 2,
    "bad_words_ids": 3,
    "sequence_bias": 3,
}
_TOKEN_KINDS = (
    "an integer token id",
    "an integer token id or a list of them",
    "a list of integer token ids",
    "a list of lists of integer token ids",
)


def check_token_ids(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], vocabulary: int) -> None:
    """The token-id settings generate(*args, **kwargs) will read from its keywords, the generation_config passed or
    the model's own (_TOKEN_IDS): each id an integer in 0..vocabulary-1, and no list of them empty, else a
    ConfigError naming the setting. The model's own ids are read as generate() reads them: an encoder-decoder's
    decoder_start_token_id (every generation embeds it first), a decoder's not (it plays no part)."""
    passed = _passed_config(args, kwargs)
    own = getattr(model, "generation_config", None)
    seq2seq = bool(getattr(model.config, "is_encoder_decoder", False))
    for name, depth in _TOKEN_IDS.items():
        value, where = _read(name, kwargs, passed, own if seq2seq or name != "decoder_start_token_id" else None)
        if value is None:
            continue
        field = f"generate(): {where}{name}={value!r}"
        kind = "a dict {(token ids): bias}" if name == "sequence_bias" else _TOKEN_KINDS[depth]
        for token in _token_ids(value, depth, name, field, kind):
            held = _held(token)
            what = "" if token is value else f" holds {token!r}, which"
            if isinstance(held, bool) or not isinstance(held, numbers.Integral):
                raise ConfigError(f"{field}{what} has type {type(token).__name__}; expected {kind}")
            if not 0 <= int(held) < vocabulary:
                own_fix = f" (or set model.model.generation_config.{name})" if where.startswith("the model's") else ""
                raise ConfigError(
                    f"{field}{what} is outside this model's vocabulary (ids 0 to {vocabulary - 1}); give token ids "
                    f"of its tokenizer{own_fix}, e.g. tokenizer.pad_token_id or tokenizer.convert_tokens_to_ids(...)"
                )
        if name == "sequence_bias":
            _check_biases(value, field)
    _check_suppressed(model, args, kwargs, vocabulary)


def _check_biases(value: Any, field: str) -> None:
    """sequence_bias's biases (a dict's values, or the second of each [ids, bias] pair): NaN or +inf, which sampling
    turns into NaN probabilities (a RuntimeError from torch.multinomial steps in) and greedy search into an arbitrary
    token; -inf (the sequence banned) and finite numbers are fine, their type transformers checks itself."""
    biases = list(value.values()) if isinstance(value, dict) else [pair[1] for pair in value]
    bad = [bias for bias in biases if isinstance(bias, float) and (math.isnan(bias) or bias == math.inf)]
    if bad:
        raise ConfigError(
            f"{field} holds the bias {bad[0]!r}, which makes each row's scores unusable (sampling's probabilities "
            "NaN: a RuntimeError from torch.multinomial; greedy search an arbitrary token); give finite biases, or "
            "float('-inf') to ban a sequence"
        )


def _check_suppressed(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], vocabulary: int) -> None:
    """suppress_tokens with begin_suppress_tokens (both at the first step) covering every id of the vocabulary:
    every score -inf, from which sampling fails (torch.multinomial's RuntimeError) and greedy search picks token 0
    without a word."""
    suppressed: set[int] = set()
    for name in ("suppress_tokens", "begin_suppress_tokens"):
        value = read_setting(model, args, kwargs, name)
        value = value.tolist() if isinstance(value, torch.Tensor) else value
        if isinstance(value, (list, tuple)):
            suppressed.update(int(_held(token)) for token in value)
    if len(suppressed) >= vocabulary and suppressed >= set(range(vocabulary)):
        raise ConfigError(
            f"generate(): suppress_tokens and begin_suppress_tokens together suppress all {vocabulary} tokens of the "
            "vocabulary, so no token can be generated (sampling fails, greedy search picks token 0); suppress only "
            "the tokens to keep out"
        )


# What an empty list of ids does in each token-id setting that takes lists (the suppress lists excepted: an empty
# one suppresses nothing, as asked), and how to say what was meant.
_EMPTY = {
    "eos_token_id": (
        "no end token: beam search fails on it with an IndexError inside transformers, other decoding never stops "
        "early",
        "give the end token's id (tokenizer.eos_token_id) or a non-empty list of them, or leave it unset for the "
        "model's own (generation_config.eos_token_id)",
    ),
    "forced_eos_token_id": (
        "no token to force at max_length",
        "give the id of the token to end each sequence with (tokenizer.eos_token_id), or leave it unset",
    ),
    "bad_words_ids": (
        "a banned sequence of no tokens, which transformers skips without a word",
        "give each banned sequence's ids, e.g. tokenizer(words, add_special_tokens=False).input_ids, and leave out "
        "empty ones (None: ban nothing)",
    ),
    "sequence_bias": (
        "a biased sequence of no tokens, which transformers skips without a word",
        "give each biased sequence's ids, e.g. {tuple(tokenizer.encode(word, add_special_tokens=False)): -2.0}, and "
        "leave out empty ones (None: bias nothing)",
    ),
}


def _token_ids(value: Any, depth: int, name: str, field: str, kind: str) -> list[Any]:
    """The ids token-id setting `name` holds, nesting them `depth` deep (sequence_bias: a dict keyed by them, or
    [ids, bias] pairs); `field`: the setting and its value as a message names them, `kind`: what it must be. A list
    of ids with none in it is refused (_EMPTY): transformers fails on an empty eos_token_id steps in (beam search)
    and skips an empty banned sequence without a word."""
    value = value.tolist() if isinstance(value, torch.Tensor) else value
    biases = name == "sequence_bias"
    if depth == 0 or (depth == 1 and not isinstance(value, (list, tuple))):
        return [value]
    if biases and isinstance(value, dict):
        value = list(value)
    elif biases and isinstance(value, (list, tuple)):
        value = [pair[0] if isinstance(pair, (list, tuple)) and len(pair) == 2 else None for pair in value]
    if not isinstance(value, (list, tuple)) or (
        depth == 3 and not all(isinstance(ids, (list, tuple)) for ids in value)
    ):
        raise ConfigError(f"{field}: expected {kind}")
    if depth != 2 and (len(value) == 0 or (depth == 3 and not all(value))):
        if depth == 3 and len(value) == 0:
            raise ConfigError(
                f"{field} holds no token sequences, which transformers refuses; give at least one, or leave {name} "
                "unset (None)"
            )
        effect, fix = _EMPTY[name]
        which = "no token ids" if len(value) == 0 else "an empty list of token ids"
        raise ConfigError(f"{field} holds {which} ({effect}); {fix}")
    return [token for ids in value for token in ids] if depth == 3 else list(value)


def check_generate_arguments(
    model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], vocabulary: int, rows: int | None = None
) -> None:
    """generate()'s arguments that transformers reads only steps in, checked before the first: its callbacks and
    the objects it calls into (generate_callbacks.check_callbacks) and classifier-free guidance's negative prompt
    (_check_guidance), given by keyword or by position. `rows`: the rows generate runs (prompts x beams x sequences
    returned; None: unknown)."""
    given = _arguments(model, args, kwargs)
    check_callbacks(given, kwargs)
    _check_guidance(model, given, read_setting(model, args, kwargs, "guidance_scale"), vocabulary, rows)


def _check_guidance(model: Any, given: dict[str, Any], scale: Any, vocabulary: int, rows: int | None) -> None:
    """Classifier-free guidance (guidance_scale other than 1) and its negative prompt, which transformers runs through
    the model as a decoder's input_ids beside every step: only a decoder's, and negative_prompt_ids (with its
    negative_prompt_attention_mask) of the rows generate runs, else torch fails inside the guidance's forward. A
    negative prompt without guidance plays no part."""
    ids, mask = given.get("negative_prompt_ids"), given.get("negative_prompt_attention_mask")
    if scale is None or scale == 1:
        named = [
            name
            for name, value in (("negative_prompt_ids", ids), ("negative_prompt_attention_mask", mask))
            if value is not None
        ]
        if named:
            raise ConfigError(
                f"generate(): {' and '.join(named)} given, but guidance_scale={scale!r}, so classifier-free guidance "
                "is off and the negative prompt plays no part; pass guidance_scale (other than 1, e.g. 1.5) with "
                "it, or leave it out"
            )
        return
    if getattr(model.config, "is_encoder_decoder", False):
        raise ConfigError(
            f"generate(guidance_scale={scale!r}): transformers' classifier-free guidance runs the negative prompt "
            f"through the model as a decoder's input_ids, but {type(model).__name__} is an encoder-decoder, which "
            "would read it as the encoder's input (and each new token as a new one); leave guidance_scale unset"
        )
    if mask is not None and ids is None:
        raise ConfigError(
            "generate(): negative_prompt_attention_mask without negative_prompt_ids, whose tokens it would mask "
            "(transformers' default negative prompt is each row's last token); pass negative_prompt_ids with it"
        )
    if ids is None:
        return
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype not in (torch.int64, torch.int32):
        shape = f" of shape {tuple(ids.shape)} and dtype {ids.dtype}" if isinstance(ids, torch.Tensor) else ""
        raise ConfigError(
            f"generate(): negative_prompt_ids is a {type(ids).__name__}{shape}; pass the negative prompt's token ids "
            "as a [batch, seq] torch.long tensor, e.g. tokenizer(texts, return_tensors='pt').input_ids"
        )
    outside = ids[(ids < 0) | (ids >= vocabulary)]
    if outside.numel():
        raise ConfigError(
            f"generate(): negative_prompt_ids holds {sorted(set(outside.tolist()))[:5]}, outside this model's "
            f"vocabulary (ids 0 to {vocabulary - 1}); give token ids of its tokenizer"
        )
    if rows is not None and ids.shape[0] != rows:
        raise ConfigError(
            f"generate(): negative_prompt_ids have {ids.shape[0]} row{'s' * (ids.shape[0] != 1)}, but generate runs "
            f"{rows} (each prompt once per beam and sequence returned, num_beams x num_return_sequences, side by "
            "side); give one negative prompt per row it runs, in that order: negative_prompt_ids.repeat_interleave("
            "num_beams * num_return_sequences, dim=0) of one per prompt"
        )
    if mask is not None and (not isinstance(mask, torch.Tensor) or mask.shape != ids.shape):
        shape = f"of shape {tuple(mask.shape)}" if isinstance(mask, torch.Tensor) else f"a {type(mask).__name__}"
        raise ConfigError(
            f"generate(): negative_prompt_attention_mask is {shape}, but negative_prompt_ids are of shape "
            f"{tuple(ids.shape)}; pass one 0/1 value per negative prompt token (the tokenizer's attention_mask)"
        )


def _arguments(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """generate()'s arguments by name, its positional ones included (only its keywords where they do not bind)."""
    bound = bind_generate(model, args, kwargs)
    return dict(bound.arguments) if bound is not None else dict(kwargs)
