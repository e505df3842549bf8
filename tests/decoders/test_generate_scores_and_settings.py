"""generate() settings and logits processors that left no token to pick, or that transformers ignored or failed on
steps in, are refused before (or at) the step; their valid neighbours still give what the bare model gives: a
processor masking some tokens with -inf, an empty suppress list, 'paged' as the keyword transformers reads.
The catalogue holds one case of each refusal (tests/reliability/cases_generate.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

import adapterfusion as af
from tiny_decoders import tiny_decoder, tiny_decoder_inputs

OPTIONS: dict[str, Any] = {"max_new_tokens": 3, "pad_token_id": 0}


class _MaskHigh(LogitsProcessor):
    """Bans the ids 50 and up with -inf (masking some tokens: valid)."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores.masked_fill(torch.arange(scores.shape[-1]) >= 50, float("-inf"))


class _NaNFirstRow(LogitsProcessor):
    """Gives row 0 one NaN score."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.clone()
        scores[0, 3] = float("nan")
        return scores


class _PassOn(LogitsProcessor):
    """Hands the scores on as they are."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores


def _pair(model_type: str = "llama") -> tuple[Any, af.AdaptedModel]:
    bare = tiny_decoder(model_type)
    return bare, af.wrap(copy.deepcopy(bare))


def test_a_processor_masking_some_tokens_generates_what_the_bare_model_generates() -> None:
    bare, model = _pair()
    inputs = tiny_decoder_inputs("llama", padding_side="left")
    processors = LogitsProcessorList([_MaskHigh()])
    expected = bare.generate(**inputs, **OPTIONS, logits_processor=processors)
    given = model.generate(**inputs, **OPTIONS, logits_processor=processors)
    assert torch.equal(given, expected)
    assert int(given[:, -3:].max()) < 50


def test_nan_scores_are_blamed_on_the_processor_that_made_them() -> None:
    """The second processor is handed the first one's NaN row: the first is named, in greedy search too (where
    transformers picked a token from the NaN row without a word)."""
    _, model = _pair()
    inputs = tiny_decoder_inputs("llama", padding_side="left")
    with pytest.raises(
        af.ConfigError, match=r"logits_processor\[0\] \(_NaNFirstRow\) returned NaN scores in row\(s\) \[0\]"
    ):
        model.generate(**inputs, **OPTIONS, logits_processor=LogitsProcessorList([_NaNFirstRow(), _PassOn()]))


def test_an_empty_suppress_list_suppresses_nothing_as_asked() -> None:
    bare, model = _pair("gpt2")
    inputs = tiny_decoder_inputs("gpt2", padding_side="left")
    assert torch.equal(model.generate(**inputs, **OPTIONS, suppress_tokens=[]), bare.generate(**inputs, **OPTIONS))


@pytest.mark.parametrize("where", ["keyword", "passed config", "model's config"])
def test_an_empty_end_token_list_is_refused_wherever_it_is_set(where: str) -> None:
    _, model = _pair("t5")
    inputs = tiny_decoder_inputs("t5")
    inputs.pop("decoder_input_ids")
    settings: dict[str, Any] = {**OPTIONS, "num_beams": 2}
    if where == "keyword":
        settings["eos_token_id"] = []
    elif where == "passed config":
        settings = {"generation_config": GenerationConfig(eos_token_id=[], **settings)}
    else:
        model.model.generation_config.eos_token_id = []
    with pytest.raises(af.ConfigError, match=r"eos_token_id=\[\] holds no token ids"):
        model.generate(**inputs, **settings)


@pytest.mark.parametrize("own", [False, True])
def test_paged_in_a_generation_config_is_refused(own: bool) -> None:
    """transformers reads cache_implementation='paged' as the keyword alone; in a config it ran an ordinary
    generation without a word."""
    _, model = _pair()
    inputs = tiny_decoder_inputs("llama", padding_side="left")
    settings: dict[str, Any] = dict(OPTIONS)
    if own:
        model.model.generation_config.cache_implementation = "paged"
    else:
        settings = {"generation_config": GenerationConfig(cache_implementation="paged", **OPTIONS)}
    with pytest.raises(af.ConfigError, match=r"cache_implementation='paged' in a generation_config"):
        model.generate(**inputs, **settings)
    # the keyword None overrides the config's value: an ordinary generation, as asked
    model.generate(**inputs, **settings, **({} if own else OPTIONS), cache_implementation=None)


@pytest.mark.parametrize(
    ("setting", "value", "words"),
    [
        ("penalty_alpha", -0.5, "penalty_alpha=-0.5 must be a number >= 0"),
        ("max_cache_len", "64", "max_cache_len='64' has type str"),
        ("assistant_confidence_threshold", 1.5, "assistant_confidence_threshold=1.5 must be a number in 0..1"),
        ("assistant_ensemble_weight", 1.0, "assistant_ensemble_weight=1.0 must be a number greater than 0 and below"),
    ],
)
def test_numeric_settings_transformers_compared_or_ignored_are_refused(setting: str, value: Any, words: str) -> None:
    _, model = _pair()
    inputs = tiny_decoder_inputs("llama", padding_side="left")
    with pytest.raises(af.ConfigError, match=words.replace("(", r"\(").replace(".", r"\.")):
        model.generate(**inputs, **OPTIONS, **{setting: value})
