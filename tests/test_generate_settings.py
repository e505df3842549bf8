"""generate()'s numeric settings (forward_inputs/generate_settings.py): a value of the wrong type or outside its
range is a ConfigError naming the setting, whether given as a keyword, in a passed generation_config or in the
model's own, routed or not; a numpy or torch integer scalar is the integer it holds, generating what the Python int
generates and held to the positions check like it."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    MaxLengthCriteria,
    StoppingCriteria,
    StoppingCriteriaList,
)

import adapterfusion as af
from adapterfusion.forward_inputs.generate_callbacks import checked_callbacks
from tiny_decoders import tiny_decoder, tiny_decoder_inputs

OPTIONS: dict[str, Any] = dict(pad_token_id=0, eos_token_id=None, do_sample=False)


def _model(model_type: str = "llama") -> af.AdaptedModel:
    model = af.wrap(tiny_decoder(model_type))
    model.add_adapter("a")
    model.add_adapter("b")
    model.activate(adapter="a")
    return model


def _prompts(model_type: str = "llama") -> dict[str, torch.Tensor]:
    inputs = tiny_decoder_inputs(model_type, padding_side="left")  # a decoder generates from left-padded prompts
    inputs.pop("decoder_input_ids", None)
    return inputs


# (setting, bad value, words of the message): each reached transformers raw, or was ignored without a word.
BAD = [
    ("max_new_tokens", "3", ("max_new_tokens='3'", "type str", "an integer greater than 0")),
    ("max_new_tokens", 2.0, ("max_new_tokens=2.0", "type float", "an integer")),
    ("max_new_tokens", True, ("max_new_tokens=True", "type bool")),
    ("max_new_tokens", -1, ("max_new_tokens=-1", "greater than 0")),
    ("max_length", 0, ("max_length=0", "greater than 0")),
    ("max_length", 3.5, ("max_length=3.5", "type float")),
    ("min_new_tokens", -1, ("min_new_tokens=-1", ">= 0")),
    ("min_length", "2", ("min_length='2'", "type str")),
    ("num_beams", 0, ("num_beams=0", "greater than 0")),
    ("num_beams", -1, ("num_beams=-1", "greater than 0")),
    ("num_beams", "2", ("num_beams='2'", "type str")),
    ("num_beams", torch.tensor([2]), ("num_beams=tensor([2])", "type Tensor")),
    ("num_return_sequences", 0, ("num_return_sequences=0", "greater than 0")),
    ("num_beam_groups", 0, ("num_beam_groups=0", "greater than 0")),
    ("top_k", -1, ("top_k=-1", ">= 0")),
    ("top_k", 1.5, ("top_k=1.5", "type float")),
    ("top_p", 2.0, ("top_p=2.0", "0..1")),
    ("top_p", "0.9", ("top_p='0.9'", "type str")),
    ("temperature", -1.0, ("temperature=-1.0", ">= 0")),
    ("temperature", float("nan"), ("temperature=nan", ">= 0")),
    ("repetition_penalty", 0, ("repetition_penalty=0", "greater than 0")),
    ("no_repeat_ngram_size", -1, ("no_repeat_ngram_size=-1", ">= 0")),
    ("length_penalty", "x", ("length_penalty='x'", "type str", "a number from -50 to 50")),
    ("length_penalty", 1e308, ("length_penalty=1e+308", "a number from -50 to 50")),
    ("typical_p", 0.0, ("typical_p=0.0", "greater than 0 and at most 1")),
    ("epsilon_cutoff", 1.0, ("epsilon_cutoff=1.0", "below 1")),
    ("guidance_scale", "2", ("guidance_scale='2'", "type str", "a finite number")),  # was a TypeError steps in
    ("guidance_scale", float("nan"), ("guidance_scale=nan", "a finite number")),  # was NaN scores: pad tokens
    ("top_h", "0.5", ("top_h='0.5'", "type str", "greater than 0 and at most 1")),  # a TypeError when sampling
    ("top_h", 0, ("top_h=0", "greater than 0 and at most 1")),
    ("prefill_chunk_size", 0, ("prefill_chunk_size=0", "greater than 0")),  # was torch's RuntimeError from a split
    ("prefill_chunk_size", 2.5, ("prefill_chunk_size=2.5", "type float")),  # was torch's TypeError from a split
]


@pytest.mark.parametrize(("name", "value", "words"), BAD, ids=[f"{name}={value!r}" for name, value, _ in BAD])
def test_a_bad_setting_as_a_keyword_is_refused_naming_it(name: str, value: Any, words: tuple[str, ...]) -> None:
    model = _model()
    options = {**OPTIONS, "max_new_tokens": 2, "num_beams": 2, name: value}
    with pytest.raises(af.ConfigError) as caught:
        model.generate(**_prompts(), **options)
    message = str(caught.value)
    assert message.startswith("generate(): ")
    assert all(word in message for word in words), message


@pytest.mark.parametrize("model_type", ["llama", "t5"])
def test_bad_beams_are_refused_with_adapter_names_routing(model_type: str) -> None:
    model = _model(model_type)
    for value in (0, -1, "2"):
        with pytest.raises(af.ConfigError, match=rf"generate\(\): num_beams={value!r}"):
            model.generate(**_prompts(model_type), adapter_names=["a", "b"], max_new_tokens=2, num_beams=value)
    assert model.state.routing is None  # refused before anything was routed


def test_a_bad_setting_in_a_passed_generation_config_is_refused_naming_it() -> None:
    model = _model()
    config = GenerationConfig(max_new_tokens=2, num_beams=0, pad_token_id=0, eos_token_id=None)
    with pytest.raises(af.ConfigError, match=r"generation_config\.num_beams=0 must be an integer greater than 0"):
        model.generate(**_prompts(), generation_config=config)
    inputs = _prompts()
    with pytest.raises(af.ConfigError, match=r"generation_config\.num_beams=0"):  # the config given by position
        model.generate(inputs["input_ids"], config, attention_mask=inputs["attention_mask"])
    # a keyword overrides the config's value, as in transformers
    out = model.generate(**_prompts(), generation_config=config, num_beams=1)
    assert out.shape == (2, 9)


def test_a_bad_setting_in_the_models_own_generation_config_is_refused_naming_it() -> None:
    model = _model()
    model.model.generation_config.top_k = -3
    with pytest.raises(af.ConfigError, match=r"the model's generation_config\.top_k=-3 must be an integer >= 0"):
        model.generate(**_prompts(), max_new_tokens=2, do_sample=True)
    assert model.generate(**_prompts(), max_new_tokens=2, top_k=0, **{**OPTIONS, "do_sample": True}).shape == (2, 9)


def test_a_generation_config_of_another_type_is_refused() -> None:
    with pytest.raises(af.ConfigError, match=r"generation_config is a dict, not a transformers GenerationConfig"):
        _model().generate(**_prompts(), generation_config={"max_new_tokens": 2})


INTEGERS = [np.int64(4), np.int32(4), torch.tensor(4), torch.tensor(4, dtype=torch.int32), np.array(4)]


@pytest.mark.parametrize("value", INTEGERS, ids=lambda value: f"{type(value).__name__}-{getattr(value, 'dtype', '')}")
def test_a_numpy_or_torch_integer_scalar_generates_what_the_int_generates(value: Any) -> None:
    model = _model()
    expected = model.generate(**_prompts(), max_new_tokens=4, num_beams=2, num_return_sequences=2, **OPTIONS)
    given = model.generate(**_prompts(), max_new_tokens=value, num_beams=value // 2, num_return_sequences=2, **OPTIONS)
    assert torch.equal(given, expected)
    config = GenerationConfig(max_new_tokens=value, num_beams=value // 2, num_return_sequences=2, **OPTIONS)
    assert torch.equal(model.generate(**_prompts(), generation_config=config), expected)
    assert config.max_new_tokens is value  # the caller's config is left as it was (generate read a copy)


def test_real_scalars_are_taken_for_real_settings() -> None:
    model = _model()
    options = dict(max_new_tokens=3, top_k=0, **{**OPTIONS, "do_sample": True})
    torch.manual_seed(3)
    expected = model.generate(**_prompts(), temperature=0.7, top_p=0.9, **options)
    torch.manual_seed(3)
    scalars = dict(temperature=np.float64(0.7), top_p=torch.tensor(0.9, dtype=torch.float64))
    given = model.generate(**_prompts(), **scalars, **options)
    assert torch.equal(given, expected)


@pytest.mark.parametrize("value", [np.int64(100), torch.tensor(100)], ids=["numpy", "torch"])
@pytest.mark.parametrize("setting", ["max_new_tokens", "max_length"])
def test_a_numpy_or_torch_length_is_held_to_the_positions(setting: str, value: Any) -> None:
    """GPT-2 of 64 positions, a 6-token prompt: the scalar is checked like the int 100 (was an IndexError)."""
    model = af.wrap(tiny_decoder("gpt2"))
    ids = torch.randint(5, 100, (1, 6))
    with pytest.raises(af.ConfigError, match=rf"{setting}=100\b.*64"):
        model.generate(input_ids=ids, **{setting: value}, eos_token_id=None)
    config = GenerationConfig(**{setting: value}, eos_token_id=None)
    with pytest.raises(af.ConfigError, match=rf"{setting}=100\b.*64"):
        model.generate(input_ids=ids, generation_config=config)


def test_a_float_length_is_refused_not_truncated() -> None:
    model = af.wrap(tiny_decoder("gpt2"))
    with pytest.raises(af.ConfigError, match=r"max_new_tokens=100\.0 has type float; expected an integer"):
        model.generate(input_ids=torch.randint(5, 100, (1, 6)), max_new_tokens=100.0, eos_token_id=None)


# (setting, a value holding an id outside the tiny models' 100 tokens (or not an id), words of the message): each
# reached transformers' logits processors raw (IndexError), or was ignored without a word (forced_bos_token_id on a
# decoder, the suppress lists); bad_words_ids and sequence_bias were refused by transformers in its own words.
BAD_TOKEN_IDS = [
    ("forced_bos_token_id", 500, ("forced_bos_token_id=500 is outside this model's vocabulary", "0 to 99")),
    ("forced_eos_token_id", 500, ("forced_eos_token_id=500 is outside", "0 to 99")),
    ("forced_eos_token_id", [5, 500], ("forced_eos_token_id=[5, 500] holds 500, which is outside",)),
    ("suppress_tokens", [500], ("suppress_tokens=[500] holds 500, which is outside",)),
    ("suppress_tokens", [-1], ("suppress_tokens=[-1] holds -1",)),
    ("suppress_tokens", ["a"], ("holds 'a', which has type str", "a list of integer token ids")),
    ("begin_suppress_tokens", [7, 500], ("begin_suppress_tokens=[7, 500] holds 500",)),
    ("bad_words_ids", [[5, 500]], ("bad_words_ids=[[5, 500]] holds 500",)),
    ("bad_words_ids", [5], ("bad_words_ids=[5]: expected a list of lists of integer token ids",)),
    ("sequence_bias", {(5, 500): 1.0}, ("sequence_bias={(5, 500): 1.0} holds 500",)),
    ("sequence_bias", [[[500], 1.0]], ("holds 500",)),
    ("sequence_bias", {5: 1.0}, ("sequence_bias={5: 1.0}: expected a dict {(token ids): bias}",)),
]


@pytest.mark.parametrize("model_type", ["llama", "t5"])
@pytest.mark.parametrize(("name", "value", "words"), BAD_TOKEN_IDS, ids=[f"{n}={v!r}" for n, v, _ in BAD_TOKEN_IDS])
def test_a_token_id_setting_outside_the_vocabulary_is_refused_naming_it(
    model_type: str, name: str, value: Any, words: tuple[str, ...]
) -> None:
    model = _model(model_type)
    with pytest.raises(af.ConfigError) as caught:
        model.generate(**_prompts(model_type), max_new_tokens=2, **OPTIONS, **{name: value})
    message = str(caught.value)
    assert message.startswith("generate(): ")
    assert all(word in message for word in words), message
    config = GenerationConfig(max_new_tokens=2, **OPTIONS, **{name: value})
    with pytest.raises(af.ConfigError, match=rf"generation_config\.{name}="):
        model.generate(**_prompts(model_type), generation_config=config)


def test_a_watermarking_config_of_another_type_is_refused() -> None:
    """transformers read it steps in: "'int' object has no attribute 'validate'"; a dict of its fields is taken."""
    model = _model()
    with pytest.raises(af.ConfigError, match=r"watermarking_config is a int; pass transformers' WatermarkingConfig"):
        model.generate(**_prompts(), max_new_tokens=2, **OPTIONS, watermarking_config=5)
    model.activate()
    options = {**OPTIONS, "max_new_tokens": 3, "watermarking_config": {"bias": 2.0}}
    assert torch.equal(model.generate(**_prompts(), **options), model.model.generate(**_prompts(), **options))


@pytest.mark.parametrize("name", ["suppress_tokens", "begin_suppress_tokens"])
def test_one_id_for_a_suppress_list_is_refused(name: str) -> None:
    """transformers iterates the suppress lists: one id alone was a TypeError ('int' object is not iterable), from
    its config's validation or its processor (a GenerationConfig refuses it itself, so only the keyword reaches)."""
    with pytest.raises(af.ConfigError, match=rf"{name}=5: expected a list of integer token ids"):
        _model().generate(**_prompts(), max_new_tokens=2, **OPTIONS, **{name: 5})


def test_token_id_settings_inside_the_vocabulary_generate_as_transformers_does() -> None:
    """The same settings with ids of the vocabulary pass, generating what the bare model generates."""
    model = _model()
    model.activate()  # no adapter runs: the wrapped model generates what the bare model does
    settings = dict(
        suppress_tokens=[5, 6],
        begin_suppress_tokens=[7],
        bad_words_ids=[[8, 9], [10]],
        sequence_bias={(11,): -2.0, (12, 13): 1.5},
        forced_eos_token_id=[14, 15],
        forced_bos_token_id=16,
    )
    prompts = _prompts()
    generated = model.generate(**prompts, max_new_tokens=4, **OPTIONS, **settings)
    bare = model.model.generate(**prompts, max_new_tokens=4, **OPTIONS, **settings)
    assert torch.equal(generated, bare)


class _Streamer:
    """A streamer that keeps what generate() hands it (transformers' BaseStreamer interface: put and end)."""

    def __init__(self) -> None:
        self.put_calls, self.ended = 0, False

    def put(self, value: torch.Tensor) -> None:
        self.put_calls += 1

    def end(self) -> None:
        self.ended = True


def _keep(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    return scores


def _never(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    return torch.zeros(input_ids.shape[0], dtype=torch.bool)


def _three(input_ids: torch.Tensor, scores: torch.Tensor, extra: int) -> torch.Tensor:
    return scores


def _one(input_ids: torch.Tensor) -> bool:
    return False


# (argument, bad value, words of the message): each failed steps in, inside transformers' loop, with an
# AttributeError or TypeError ("'str' object has no attribute '__call__'", "object of type 'function' has no len()").
BAD_CALLBACKS = [
    ("logits_processor", ["x"], ("logits_processor[0] = 'x' is a str, which cannot be called", "LogitsProcessorList")),
    ("logits_processor", _keep, ("logits_processor is a function", "LogitsProcessorList")),
    ("stopping_criteria", ["x"], ("stopping_criteria[0] = 'x' is a str", "StoppingCriteriaList")),
    ("stopping_criteria", _never, ("stopping_criteria is a function", "StoppingCriteriaList")),
    ("prefix_allowed_tokens_fn", [5, 6], ("prefix_allowed_tokens_fn is a list", "a function (batch_id, input_ids)")),
    ("streamer", object(), ("streamer is a object, which has no put or end() method", "BaseStreamer")),
    # transformers' own ValueError, steps in: "Make sure that all the required parameters ... are passed"
    ("logits_processor", [_three], ("logits_processor[0] (_three) takes (input_ids", "(input_ids, scores) alone")),
    ("stopping_criteria", [_one], ("stopping_criteria[0] (_one) takes (input_ids: 'torch.Tensor')",)),
    ("custom_generate", 5, ("custom_generate is a int, which transformers ignores without a word",)),  # ignored
    ("assistant_model", "x", ("assistant_model is a str", "a transformers model")),  # 'str' has no attribute 'config'
    ("negative_prompt_ids", torch.full((2, 3), 500), ("negative_prompt_ids holds [500]", "0 to 99")),
    ("negative_prompt_ids", [[5, 6]], ("negative_prompt_ids is a list", "[batch, seq] torch.long tensor")),
    ("negative_prompt_ids", torch.full((2, 3), 5.0), ("dtype torch.float32", "[batch, seq] torch.long tensor")),
    ("renormalize_logits", "no", ("renormalize_logits='no' has type str", "true or false")),
]


def _case_id(value: object) -> str:
    """A test id the same in every process (pytest-xdist's workers must collect equal ids): a function or a bare
    object by its name, a tensor by its dtype, shape and largest value, never by its repr's address."""
    if isinstance(value, torch.Tensor):
        return f"{value.dtype}{list(value.shape)}-max{value.max().item()}"
    if callable(value) or type(value) is object:
        return getattr(value, "__name__", type(value).__name__)
    if isinstance(value, list):
        return f"[{', '.join(_case_id(item) for item in value)}]"
    return repr(value)


@pytest.mark.parametrize("model_type", ["gpt2", "t5"])
@pytest.mark.parametrize(
    ("name", "value", "words"), BAD_CALLBACKS, ids=[f"{n}={_case_id(v)}" for n, v, _ in BAD_CALLBACKS]
)
def test_a_bad_callback_is_refused_before_the_first_step(
    model_type: str, name: str, value: Any, words: tuple[str, ...]
) -> None:
    model = _model(model_type)
    settings = {"guidance_scale": 1.5} if name == "negative_prompt_ids" else {}
    if settings and model_type == "t5":  # no guidance on an encoder-decoder, whatever its negative prompt
        words = ("guidance_scale=1.5", "T5ForConditionalGeneration is an encoder-decoder")
    with pytest.raises(af.ConfigError) as caught:
        model.generate(**_prompts(model_type), max_new_tokens=2, **OPTIONS, **settings, **{name: value})
    assert all(word in str(caught.value) for word in words), str(caught.value)


def test_a_bad_callback_given_by_position_is_refused() -> None:
    """generate(inputs, generation_config, logits_processor, ...): the positions of transformers' signature."""
    model = _model()
    with pytest.raises(af.ConfigError, match=r"logits_processor\[0\] = 'x' is a str"):
        model.generate(_prompts()["input_ids"], GenerationConfig(max_new_tokens=2, **OPTIONS), ["x"])


def test_good_callbacks_generate_what_the_bare_model_generates() -> None:
    model = _model("gpt2")
    model.activate()  # no adapter runs: the wrapped model generates what the bare model does
    prompts, streamer = _prompts("gpt2"), _Streamer()
    callbacks = dict(
        logits_processor=[_keep],
        stopping_criteria=[_never],
        prefix_allowed_tokens_fn=lambda batch_id, ids: list(range(5, 50)),
        negative_prompt_ids=torch.full((2, 3), 7),
        guidance_scale=1.5,
    )
    one_row = {key: value[:1] for key, value in prompts.items()}  # a streamer takes one row
    generated = model.generate(**prompts, max_new_tokens=3, **OPTIONS, **callbacks)
    assert torch.equal(generated, model.model.generate(**prompts, max_new_tokens=3, **OPTIONS, **callbacks))
    model.generate(**one_row, max_new_tokens=3, **OPTIONS, streamer=streamer)
    assert streamer.put_calls == 4 and streamer.ended  # the prompt, then each new token


BAD_DECAYS = [
    (3, "expected a pair (start_index, decay_factor)"),  # was a TypeError steps in: 'int' object is not subscriptable
    ((1,), "expected a pair"),  # was an IndexError steps in
    (("1", 1.5), "its start_index '1' is no integer >= 0"),  # was a TypeError: can only concatenate str
    ((-1, 1.5), "its start_index -1 is no integer >= 0"),
    ((2, float("nan")), "its decay_factor nan is no finite number greater than 0"),
    ((2, 1.5, 3), "expected a pair"),  # the third item was ignored
]


@pytest.mark.parametrize(("value", "words"), BAD_DECAYS, ids=[repr(value) for value, _ in BAD_DECAYS])
def test_a_bad_exponential_decay_length_penalty_is_refused(value: Any, words: str) -> None:
    with pytest.raises(af.ConfigError, match=re.escape(f"exponential_decay_length_penalty={value!r}: {words}")):
        _model().generate(**_prompts(), max_new_tokens=2, **OPTIONS, exponential_decay_length_penalty=value)
    config = GenerationConfig(max_new_tokens=2, exponential_decay_length_penalty=value)
    with pytest.raises(af.ConfigError, match=re.escape("generation_config.exponential_decay_length_penalty")):
        _model().generate(**_prompts(), generation_config=config)


def test_a_good_exponential_decay_length_penalty_generates_what_the_bare_model_generates() -> None:
    model = _model()
    model.activate()
    prompts = _prompts()
    for value in ((1, 1.5), [0, 2]):
        options = {**OPTIONS, "eos_token_id": 2, "max_new_tokens": 4, "exponential_decay_length_penalty": value}
        assert torch.equal(model.generate(**prompts, **options), model.model.generate(**prompts, **options))


NEGATIVE = torch.full((2, 3), 7)
# (settings, words of the message): classifier-free guidance's negative prompt that failed steps in, inside the
# guidance's own forward ("The size of tensor a (4) must match the size of tensor b (2)"), or played no part.
BAD_GUIDANCE = [
    ({"num_beams": 2}, ("negative_prompt_ids have 2 rows, but generate runs 4", "repeat_interleave")),
    ({"do_sample": True, "num_return_sequences": 3}, ("negative_prompt_ids have 2 rows, but generate runs 6",)),
    ({"negative_prompt_ids": NEGATIVE[:1]}, ("negative_prompt_ids have 1 row, but generate runs 2",)),
    (
        {"negative_prompt_attention_mask": torch.ones(2, 4, dtype=torch.long)},
        ("negative_prompt_attention_mask is of shape (2, 4), but negative_prompt_ids are of shape (2, 3)",),
    ),
    (
        {"negative_prompt_ids": None, "negative_prompt_attention_mask": torch.ones(2, 3, dtype=torch.long)},
        ("negative_prompt_attention_mask without negative_prompt_ids",),
    ),
    ({"guidance_scale": None}, ("negative_prompt_ids given, but guidance_scale=None", "plays no part")),
    ({"guidance_scale": 1}, ("guidance_scale=1, so classifier-free guidance is off",)),
]


@pytest.mark.parametrize(("settings", "words"), BAD_GUIDANCE, ids=range(len(BAD_GUIDANCE)))
def test_a_negative_prompt_generate_cannot_run_is_refused(settings: dict[str, Any], words: tuple[str, ...]) -> None:
    options = {**OPTIONS, "max_new_tokens": 2, "guidance_scale": 1.5, "negative_prompt_ids": NEGATIVE, **settings}
    with pytest.raises(af.ConfigError) as caught:
        _model().generate(**_prompts(), **{key: value for key, value in options.items() if value is not None})
    assert all(word in str(caught.value) for word in words), str(caught.value)


def test_a_negative_prompt_per_row_generates_what_the_bare_model_generates() -> None:
    """One negative prompt per row generate runs (each prompt's repeated for its beams), with its mask."""
    model = _model()
    model.activate()
    prompts = _prompts()
    options = dict(
        OPTIONS,
        max_new_tokens=3,
        num_beams=2,
        guidance_scale=1.5,
        negative_prompt_ids=NEGATIVE.repeat_interleave(2, dim=0),
        negative_prompt_attention_mask=torch.ones(4, 3, dtype=torch.long),
    )
    assert torch.equal(model.generate(**prompts, **options), model.model.generate(**prompts, **options))


@pytest.mark.parametrize("model_type", ["t5", "bart"])
def test_guidance_on_an_encoder_decoder_is_refused(model_type: str) -> None:
    """transformers' guidance runs the negative prompt (by default each row's last token) through the whole model as
    input_ids: T5 failed ("You must specify exactly one of input_ids or inputs_embeds"), BART read it as its encoder's
    input, and each new token as a new encoder input, without a word."""
    model = _model(model_type)
    with pytest.raises(af.ConfigError, match="is an encoder-decoder, which would read it as the encoder's input"):
        model.generate(**_prompts(model_type), max_new_tokens=2, guidance_scale=1.5)


@pytest.mark.parametrize(
    "settings",
    [{"max_new_tokens": 10**400}, {"temperature": 10**400}, {"exponential_decay_length_penalty": (2, 10**400)}],
    ids=["max_new_tokens", "temperature", "exponential_decay_length_penalty"],
)
def test_an_int_beyond_any_float_is_refused_by_name(settings: dict[str, Any]) -> None:
    """math.isfinite and float() raised OverflowError ('int too large to convert to float') on these."""
    ((name, _),) = settings.items()
    with pytest.raises(af.ConfigError, match=rf"{name}=.*(is not a finite number|no finite number)"):
        _model().generate(**_prompts(), **{"max_new_tokens": 2, **OPTIONS, **settings})


class _Answering(StoppingCriteria, LogitsProcessor):
    """A stopping criterion or logits processor whose answer at each step is `answer(input_ids, scores)`."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def __call__(self, input_ids: torch.Tensor, scores: Any) -> Any:  # no **kwargs: a processor list demands them
        return self.answer(input_ids, scores)


def _callback(name: str, answer: Any) -> Any:
    """generate()'s argument `name` answering `answer` (a prefix function gets (batch_id, input_ids))."""
    if name == "prefix_allowed_tokens_fn":
        return lambda batch_id, input_ids: answer(input_ids, None)
    return (StoppingCriteriaList if name == "stopping_criteria" else LogitsProcessorList)([_Answering(answer)])


# (argument, its answer, words of the message): each failed steps in, inside transformers' loop (a TypeError,
# RuntimeError or IndexError), or gave another answer without a word (marked "silent").
BAD_ANSWERS = [
    ("stopping_criteria", lambda ids, scores: None, ("stopping_criteria[0] (_Answering) returned None",)),
    (
        "stopping_criteria",
        lambda ids, scores: torch.full(ids.shape[:1], 2),
        ("int64 tensor", ".bool() of it"),
    ),  # silent
    ("stopping_criteria", lambda ids, scores: torch.zeros(ids.shape[0], 1, dtype=torch.bool), (", 1); a stop",)),
    ("stopping_criteria", lambda ids, scores: [False] * ids.shape[0], ("of type list", "or a Python bool")),
    ("stopping_criteria", lambda ids, scores: np.bool_(True), ("np.True_ of type numpy.bool",)),
    ("logits_processor", lambda ids, scores: None, ("logits_processor[0] (_Answering) returned None",)),
    ("logits_processor", lambda ids, scores: scores[0], ("shape (100,)", "a floating tensor of their shape")),  # silent
    ("logits_processor", lambda ids, scores: scores[:, :-1], ("returned a torch.float32 tensor of shape",)),  # silent
    ("logits_processor", lambda ids, scores: scores.long(), ("torch.int64",)),  # silent: every row picked token 0
    (
        "prefix_allowed_tokens_fn",
        lambda ids, scores: None,
        ("prefix_allowed_tokens_fn (_callback.<locals>.<lambda>) returned None",),
    ),
    ("prefix_allowed_tokens_fn", lambda ids, scores: [-1], ("[-1] of type list", "outside this model's vocabulary")),
    ("prefix_allowed_tokens_fn", lambda ids, scores: {5, 6}, ("{5, 6} of type set", "a non-empty list of token ids")),
    ("prefix_allowed_tokens_fn", lambda ids, scores: ["a"], ("which holds other things than token ids",)),
    ("prefix_allowed_tokens_fn", lambda ids, scores: torch.tensor([5.0]), ("holds no integer token ids",)),
]


@pytest.mark.parametrize("num_beams", [1, 2])
@pytest.mark.parametrize("model_type", ["gpt2", "t5"])
@pytest.mark.parametrize(
    ("name", "answer", "words"), BAD_ANSWERS, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(BAD_ANSWERS)]
)
def test_a_callback_answering_what_transformers_cannot_use_is_refused_naming_it(
    model_type: str, num_beams: int, name: str, answer: Any, words: tuple[str, ...]
) -> None:
    model = _model(model_type)
    with pytest.raises(af.ConfigError) as caught:
        model.generate(
            **_prompts(model_type), max_new_tokens=2, **OPTIONS, num_beams=num_beams, **{name: _callback(name, answer)}
        )
    message = str(caught.value)
    assert message.startswith("generate(): ") and " must return " in message, message
    assert all(word in message for word in words), message


# (argument, an answer transformers takes): a Python bool or one bool for every row, scores in half precision, the
# allowed ids as a tensor, an array, a range or a bool mask over the vocabulary.
GOOD_ANSWERS = [
    ("stopping_criteria", lambda ids, scores: ids.shape[1] > 9),
    ("stopping_criteria", lambda ids, scores: torch.tensor([ids.shape[1] > 9])),
    ("stopping_criteria", lambda ids, scores: torch.tensor(ids.shape[1] > 9)),
    ("stopping_criteria", lambda ids, scores: ids[:, -1] == 7),
    ("logits_processor", lambda ids, scores: scores.half()),
    ("logits_processor", lambda ids, scores: scores - ids[:, -1:]),
    ("prefix_allowed_tokens_fn", lambda ids, scores: torch.arange(5, 50)),
    ("prefix_allowed_tokens_fn", lambda ids, scores: np.arange(5, 50)),
    ("prefix_allowed_tokens_fn", lambda ids, scores: range(5, 50)),
    ("prefix_allowed_tokens_fn", lambda ids, scores: torch.arange(100) % 3 == 0),
]


@pytest.mark.parametrize("num_beams", [1, 2])
@pytest.mark.parametrize(("name", "answer"), GOOD_ANSWERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(GOOD_ANSWERS)])
def test_a_callback_answering_what_transformers_takes_generates_what_the_bare_model_generates(
    num_beams: int, name: str, answer: Any
) -> None:
    model = _model()
    model.activate()  # no adapter runs: the wrapped model generates what the bare model does
    options = {**OPTIONS, "max_new_tokens": 4, "num_beams": num_beams, name: _callback(name, answer)}
    assert torch.equal(model.generate(**_prompts(), **options), model.model.generate(**_prompts(), **options))


def test_transformers_own_callbacks_are_handed_on_as_they_are() -> None:
    """transformers' own criteria and processors return what its loop needs, and its merge with the ones it makes
    finds them by their type (a MaxLengthCriteria given replaces its own): only the user's are wrapped."""
    model = _model()
    own, mine = MaxLengthCriteria(max_length=9), _Answering(lambda ids, scores: False)
    args, kwargs = checked_callbacks(model.model, (), {"stopping_criteria": [own, mine]}, 100)
    assert kwargs["stopping_criteria"][0] is own and kwargs["stopping_criteria"][1] is not mine
    assert checked_callbacks(model.model, (), {"stopping_criteria": [own]}, 100)[1]["stopping_criteria"] == [own]
    model.activate()
    options = {**OPTIONS, "max_new_tokens": 6, "stopping_criteria": StoppingCriteriaList([own, mine])}
    generated = model.generate(**_prompts(), **options)
    assert generated.shape[1] == 9 and torch.equal(generated, model.model.generate(**_prompts(), **options))


def test_a_callback_given_by_position_is_checked_at_each_step() -> None:
    """generate(inputs, generation_config, logits_processor, stopping_criteria, prefix_allowed_tokens_fn)."""
    model = _model()
    config = GenerationConfig(max_new_tokens=2, **OPTIONS)
    criteria = _callback("stopping_criteria", lambda ids, scores: None)
    with pytest.raises(af.ConfigError, match=r"stopping_criteria\[0\] \(_Answering\) returned None"):
        model.generate(_prompts()["input_ids"], config, None, criteria)


# (settings, words of the message): a minimum beyond the maximum, which transformers only warned of (a UserWarning)
# before stopping at the maximum, the sequences short of the minimum asked for.
LEAST_BEYOND_MOST = [
    (
        {"min_new_tokens": 5, "max_new_tokens": 2},
        ("min_new_tokens=5", "max_new_tokens=2 stops it after 2", "at most 2"),
    ),
    ({"min_length": 30, "max_new_tokens": 2}, ("min_length=30", "prompt included", "raise max_new_tokens")),
    ({"min_length": 10, "max_length": 9, "max_new_tokens": None}, ("min_length=10", "max_length=9 stops it at 9")),
]


@pytest.mark.parametrize("model_type", ["llama", "t5"])
@pytest.mark.parametrize(("settings", "words"), LEAST_BEYOND_MOST, ids=["new-tokens", "length", "max-length"])
def test_a_minimum_beyond_the_maximum_is_refused(
    model_type: str, settings: dict[str, Any], words: tuple[str, ...]
) -> None:
    options = {key: value for key, value in {**OPTIONS, "eos_token_id": 2, **settings}.items() if value is not None}
    with pytest.raises(af.ConfigError) as caught:
        _model(model_type).generate(**_prompts(model_type), **options)
    assert all(word in str(caught.value) for word in words), str(caught.value)


def test_the_models_own_minimum_is_left_to_transformers() -> None:
    """A summariser's own min_length (BART-large-CNN's 56) is its default for its own lengths: a call's
    max_new_tokens below it generates what the bare model generates, as it did."""
    model = _model("t5")
    model.activate()
    model.model.generation_config.min_length = 30
    options = {**OPTIONS, "eos_token_id": 2, "max_new_tokens": 3}
    assert torch.equal(model.generate(**_prompts("t5"), **options), model.model.generate(**_prompts("t5"), **options))


def test_continuous_batching_is_refused_where_generate_follows_rows() -> None:
    """cache_implementation='paged' packs every prompt's tokens into one row: per-prompt routing failed in its
    background loop (only logged, the prompts came back without new tokens), and a recording cannot follow it."""
    model = _model()
    with pytest.raises(af.ConfigError, match=r"'paged'\) with adapter_names .* packs every prompt's tokens"):
        model.generate(
            **_prompts(), max_new_tokens=2, **OPTIONS, adapter_names=["a", "b"], cache_implementation="paged"
        )
    model.add_fusion("f", ["a", "b"])
    model.activate(fusion="f")
    with pytest.raises(af.ConfigError, match=r"'paged'\) inside recording_fusion_attentions\(\)"):
        with model.recording_fusion_attentions():
            model.generate(**_prompts(), max_new_tokens=2, **OPTIONS, cache_implementation="paged")


# (settings, the setting named, what the scores held): settings that push the float32 scores past their range, from
# which the bare model failed in torch.multinomial ("probability tensor contains either inf, nan or element < 0"; on
# CUDA a device-side assert, which ends the process's use of the GPU).
OVERFLOWING = [
    ({"temperature": 1e-40}, "temperature=1e-40", "+inf"),
    ({"temperature": 1e-40, "top_p": 0.5, "top_k": 5}, "temperature=1e-40", "+inf"),
    ({"temperature": 1e-40, "num_beams": 2}, "temperature=1e-40", "no finite score"),
    ({"repetition_penalty": 1e-40}, "repetition_penalty=1e-40", "+inf"),
    ({"guidance_scale": 1e308}, "guidance_scale=1e+308", "+inf"),
]


@pytest.mark.parametrize(("settings", "named", "held"), OVERFLOWING)
def test_sampling_settings_that_overflow_the_scores_are_refused_by_name(
    settings: dict[str, Any], named: str, held: str
) -> None:
    model, prompts = _model(), _prompts()
    options = {**OPTIONS, "do_sample": True, "max_new_tokens": 2, **settings}
    with pytest.raises(RuntimeError, match="probability tensor contains"):
        model.model.generate(**prompts, **options)
    with pytest.raises(af.ConfigError, match=re.escape(f"decoding settings ({named}) left {held}")) as refused:
        model.generate(**prompts, **options)
    assert "do_sample=False" in str(refused.value)
    assert "_get_logits_processor" not in vars(model.model)  # the check is gone after the call


def test_a_warper_that_refuses_overflowed_scores_is_answered_naming_the_settings() -> None:
    """eta_cutoff's Categorical refused the scores temperature=1e-40 made inf: torch's "Expected parameter logits"."""
    options = {**OPTIONS, "do_sample": True, "max_new_tokens": 2, "temperature": 1e-40, "eta_cutoff": 0.1}
    words = "a logits processor refused a step's scores ('Expected parameter logits"
    with pytest.raises(af.ConfigError, match=re.escape(words) + ".*decoding settings \\(temperature=1e-40\\)"):
        _model().generate(**_prompts(), **options)


def test_sampling_at_a_small_temperature_the_scores_hold_generates_what_the_bare_model_generates() -> None:
    model = _model()
    model.activate()
    prompts = _prompts()
    for settings in ({"temperature": 1e-30}, {"temperature": 1e-30, "num_beams": 2}, {"temperature": 0.7}):
        options = {**OPTIONS, "do_sample": True, "max_new_tokens": 3, **settings}
        torch.manual_seed(0)
        expected = model.model.generate(**prompts, **options)
        torch.manual_seed(0)
        assert torch.equal(model.generate(**prompts, **options), expected)


def test_an_integer_temperature_or_penalty_samples_as_the_float_does() -> None:
    """The bare model refused temperature=2: "`temperature` (=2) has to be a strictly positive float"."""
    model, prompts = _model(), _prompts()
    options = {**OPTIONS, "do_sample": True, "max_new_tokens": 3}
    with pytest.raises(ValueError, match="strictly positive float"):
        model.model.generate(**prompts, **options, temperature=2)
    for name in ("temperature", "repetition_penalty"):
        torch.manual_seed(0)
        expected = model.generate(**prompts, **options, **{name: 2.0})
        torch.manual_seed(0)
        assert torch.equal(model.generate(**prompts, **options, **{name: 2}), expected)
