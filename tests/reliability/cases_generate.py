"""Bad-input cases at one boundary, generation settings: generate()'s numeric settings of the wrong type or value
(forward_inputs/generate_settings.py), a numpy scalar among them, its callbacks and negative prompt, and integer ids
or labels of another dtype than torch.long (forward_inputs/tokens.py, labels.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import GenerationConfig, LogitsProcessor, StoppingCriteria
from transformers.cache_utils import DynamicCache

import adapterfusion as af
from adapterfusion.answer_scoring import score_answers
from catalogue import Action, BadInput, generating, tiny_lm
from tiny_decoders import tiny_decoder_inputs

B = BadInput
GROUP = "generation settings"


def _int32_labels(folder: Path) -> Action:
    """A tiny Llama's loss on int32 labels, compared with its loss on the same labels as int64."""
    model = tiny_lm("llama")
    inputs = tiny_decoder_inputs("llama", padding_side="left")
    labels = inputs["input_ids"]

    def action() -> str:
        narrow, wide = model(**inputs, labels=labels.int()).loss, model(**inputs, labels=labels).loss
        return f"int32 labels give the int64 labels' loss: {bool(torch.equal(narrow, wide))}"

    return action


def _cached_generate(rows: int, prompt_tokens: int, **settings: Any) -> Callable[[Path], Action]:
    """A tiny Llama's generate() of `rows` x `prompt_tokens` prompts, given the cache of a forward over 2 x 10."""

    def prepare(folder: Path) -> Action:
        model = tiny_lm("llama")
        ids = torch.randint(5, 100, (2, 10), generator=torch.Generator().manual_seed(0))
        cache = model(input_ids=ids, use_cache=True).past_key_values
        return lambda: model.generate(
            input_ids=ids[:rows, :prompt_tokens], past_key_values=cache, max_new_tokens=2, **settings
        )

    return prepare


def _assisted(folder: Path) -> Action:
    """generate(assistant_model=<an AdaptedModel>): transformers reads the draft's config, which it has not."""
    model, draft = tiny_lm("llama"), tiny_lm("llama")
    return lambda: model.generate(
        **tiny_decoder_inputs("llama", padding_side="left"), max_new_tokens=2, assistant_model=draft
    )


def _exact_match_of_long_rows(folder: Path) -> Action:
    """Exact match on a dev batch of a 60-token prompt with a 3-token answer and a 4-token prompt with a 59-token
    one (each 64 tokens with its end token: a tiny Llama's 64 positions), which cannot generate in one batch."""
    model = tiny_lm("llama")
    ids, labels = torch.zeros(2, 64, dtype=torch.long), torch.full((2, 64), -100)
    for row, (prompt, answer) in enumerate(((60, 3), (4, 59))):
        answer_ids = torch.tensor([7] * answer + [2])
        ids[row, :prompt], ids[row, prompt:] = torch.arange(5, 5 + prompt), answer_ids
        labels[row, prompt:] = answer_ids
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}

    def action() -> str:
        scores = score_answers(model, [batch], end_token_id=2, pad_token_id=0, exact_match=True)
        return f"scored both rows: exact_match={scores['exact_match']:.1f}"

    return action


def _recorded_guidance(folder: Path) -> Action:
    """generate(guidance_scale=1.5) of a tiny Llama with a fusion active, inside recording_fusion_attentions()."""
    model = tiny_lm("llama")
    model.add_adapter("b")
    model.add_fusion("f", ["a", "b"])
    model.activate(fusion="f")

    def action() -> Any:
        with model.recording_fusion_attentions():
            return model.generate(
                **tiny_decoder_inputs("llama", padding_side="left"),
                max_new_tokens=2,
                pad_token_id=0,
                guidance_scale=1.5,
            )

    return action


def _keep_scores(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """A logits processor that changes nothing (a function, where a list of them goes)."""
    return scores


class _ForgetsToReturn(StoppingCriteria):
    """A stopping criterion whose __call__ computes its answer but returns nothing (None)."""

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> Any:
        input_ids[:, -1] == 2  # noqa: B015 - the missing return is the bad input


class _IntegerStop(StoppingCriteria):
    """A stopping criterion answering 0 or 1 per row as an integer tensor, not a bool one."""

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> Any:
        return (input_ids[:, -1] == 2).long()


class _OneRowScores(LogitsProcessor):
    """A logits processor returning the first row's scores alone."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores[0]


def _last_token(batch_id: int, input_ids: torch.Tensor) -> list[int]:
    """A prefix_allowed_tokens_fn allowing id -1, meant as "the end token" (no id)."""
    return [-1]


class _NaNScores(LogitsProcessor):
    """A logits processor that divides the scores by zero-centred ones, giving NaN everywhere (0 / 0)."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return (scores - scores) / (scores - scores)


class _MasksEverything(LogitsProcessor):
    """A logits processor banning every token of the vocabulary (a mask meant for some, built for all)."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores.masked_fill(torch.ones_like(scores, dtype=torch.bool), float("-inf"))


def _integer_temperature(folder: Path) -> Action:
    """A tiny Llama's sampled generate() at temperature=2 against temperature=2.0, from the same seed."""
    model = tiny_lm("llama")
    inputs = {**tiny_decoder_inputs("llama", padding_side="left"), "max_new_tokens": 3, "pad_token_id": 0}

    def action() -> str:
        torch.manual_seed(0)
        whole = model.generate(**inputs, do_sample=True, temperature=2)
        torch.manual_seed(0)
        same = torch.equal(whole, model.generate(**inputs, do_sample=True, temperature=2.0))
        return f"temperature=2 samples as 2.0: {same}"

    return action


def _own_config(model_type: str, prompts: bool = True, **changes: Any) -> Callable[[Path], Action]:
    """generating(model_type) with `changes` set on the wrapped model's own generation_config, not passed;
    prompts=False: generate() of no prompt (a decoder starts from its bos token)."""

    def prepare(folder: Path) -> Action:
        model = tiny_lm(model_type)
        for name, value in changes.items():
            setattr(model.model.generation_config, name, value)
        inputs = tiny_decoder_inputs(model_type, padding_side="left") if prompts else {}
        return lambda: model.generate(**inputs, max_new_tokens=2, pad_token_id=0)

    return prepare


def _paged_in_config(folder: Path) -> Action:
    """A tiny Llama's generate(generation_config=GenerationConfig(cache_implementation='paged', ...))."""
    model = tiny_lm("llama")
    config = GenerationConfig(cache_implementation="paged", max_new_tokens=2, pad_token_id=0)
    inputs = tiny_decoder_inputs("llama", padding_side="left")
    return lambda: model.generate(**inputs, generation_config=config, adapter_names=["a", "a"])


CASES: tuple[BadInput, ...] = (
    B(
        "generate-decoder-right-padded",
        GROUP,
        "Llama generate() of a batch whose row 1 is padded on the right (its new tokens followed the padding: "
        "another answer than the prompt alone, with at most a logged warning from transformers)",
        af.ConfigError,
        ("row(s) [1]", "ends in padding", "padding_side = 'left'"),
        lambda folder: (
            lambda: tiny_lm("llama").generate(**tiny_decoder_inputs("llama"), max_new_tokens=2, pad_token_id=0)
        ),
    ),
    B(
        "generate-max-new-tokens-numpy",
        GROUP,
        "generate(max_new_tokens=np.int64(100)) of a 7-token prompt, GPT-2 of 64 positions (was an IndexError "
        "mid-generation: the positions check skipped a length that is not a Python int)",
        af.ConfigError,
        ("107 tokens", "max_new_tokens=100", "64", "at most 57"),
        generating(max_new_tokens=np.int64(100)),
    ),
    B(
        "generate-num-beams-zero",
        GROUP,
        "generate(num_beams=0) (was a ZeroDivisionError from transformers)",
        af.ConfigError,
        ("generate()", "num_beams=0", "an integer greater than 0"),
        generating("llama", num_beams=0),
    ),
    B(
        "generate-ids-uint8",
        GROUP,
        "generate(input_ids=<uint8 tensor>), Llama (was a RuntimeError from torch's embedding)",
        af.ConfigError,
        ("input_ids", "torch.uint8", "torch.long", "input_ids.long()"),
        generating("llama", input_ids=tiny_decoder_inputs("llama", padding_side="left")["input_ids"].to(torch.uint8)),
    ),
    B(
        "lm-labels-int32",
        GROUP,
        "int32 causal-LM labels (not an error; was a RuntimeError from cross_entropy: 'expected target dtype to be "
        "Long')",
        None,
        ("int32 labels give the int64 labels' loss: True",),
        _int32_labels,
    ),
    B(
        "generate-pad-token-out-of-vocabulary",
        GROUP,
        "generate(pad_token_id=500) on a model of 100 tokens, sampling until rows finish (was torch's IndexError "
        "from the embedding, steps in)",
        af.ConfigError,
        ("pad_token_id=500", "outside this model's vocabulary", "0 to 99"),
        generating("llama", pad_token_id=500, do_sample=True, eos_token_id=list(range(5, 40))),
    ),
    B(
        "generate-decoder-start-negative",
        GROUP,
        "T5 generate(decoder_start_token_id=-1) (was torch's IndexError from the embedding)",
        af.ConfigError,
        ("decoder_start_token_id=-1", "outside this model's vocabulary"),
        generating("t5", decoder_input_ids=None, decoder_start_token_id=-1),
    ),
    B(
        "generate-eos-token-str",
        GROUP,
        "generate(eos_token_id='2') (was a TypeError from transformers: invalid data type 'str')",
        af.ConfigError,
        ("eos_token_id='2'", "has type str", "an integer token id"),
        generating("llama", eos_token_id="2"),
    ),
    B(
        "generate-cache-of-other-rows",
        GROUP,
        "generate(past_key_values=<cache of 2 rows>) for 1 prompt (was a RuntimeError from transformers' cache)",
        af.ConfigError,
        ("past_key_values hold 2 rows", "the inputs have 1"),
        _cached_generate(1, 10),
    ),
    B(
        "generate-cache-longer-than-prompt",
        GROUP,
        "generate(past_key_values=<cache of 10 tokens>) of 5-token prompts (was a RuntimeError from a reshape)",
        af.ConfigError,
        ("past_key_values hold 10 tokens", "the prompts have 5", "input_ids"),
        _cached_generate(2, 5),
    ),
    B(
        "generate-cache-with-beams",
        GROUP,
        "generate(past_key_values=..., num_beams=2) (was a RuntimeError: the cache has one row per prompt)",
        af.ConfigError,
        ("past_key_values", "2 rows per prompt", "num_beams=1"),
        _cached_generate(2, 10, num_beams=2),
    ),
    B(
        "generate-assistant-adapted-model",
        GROUP,
        "generate(assistant_model=<AdaptedModel>) (was an AttributeError: 'AdaptedModel' object has no attribute "
        "'config')",
        af.ConfigError,
        ("assistant_model is an AdaptedModel", "assistant_model=draft.model"),
        _assisted,
    ),
    B(
        "generate-early-exit-gpt2",
        GROUP,
        "generate(assistant_early_exit=1) on GPT-2 (was an IndexError inside transformers' cache: its layer loop does "
        "not stop where the draft sets config.num_hidden_layers)",
        af.ConfigError,
        ("assistant_early_exit=1", "GPT2LMHeadModel", "Llama-style", "assistant_model="),
        generating("gpt2", assistant_early_exit=1),
    ),
    B(
        "exact-match-rows-too-long-together",
        GROUP,
        "exact_match over a dev batch whose two rows each fit 64 positions but not left-padded together (was a "
        "ConfigError after training: 'lower max_new_tokens', which scoring sets itself)",
        None,
        ("scored both rows: exact_match=",),
        _exact_match_of_long_rows,
    ),
    B(
        "generate-logits-processor-strings",
        GROUP,
        "generate(logits_processor=['x']) (was an AttributeError from transformers' loop: 'str' object has no "
        "attribute '__call__')",
        af.ConfigError,
        ("logits_processor[0] = 'x'", "cannot be called", "LogitsProcessorList"),
        generating("llama", logits_processor=["x"]),
    ),
    B(
        "generate-logits-processor-function",
        GROUP,
        "generate(logits_processor=<a function>), not a list of them (was a TypeError from transformers: object of "
        "type 'function' has no len())",
        af.ConfigError,
        ("logits_processor is a function", "LogitsProcessorList"),
        generating("t5", decoder_input_ids=None, logits_processor=_keep_scores),
    ),
    B(
        "generate-stopping-criteria-strings",
        GROUP,
        "generate(stopping_criteria=['x']) (was a TypeError from transformers' loop: 'str' object is not callable)",
        af.ConfigError,
        ("stopping_criteria[0] = 'x'", "StoppingCriteriaList"),
        generating("gpt2", stopping_criteria=["x"]),
    ),
    B(
        "generate-streamer-object",
        GROUP,
        "generate(streamer=object()), no put() or end() (was an AttributeError from transformers: 'object' object "
        "has no attribute 'put')",
        af.ConfigError,
        ("streamer", "no put or end() method", "TextStreamer", "BaseStreamer"),
        generating("bart", decoder_input_ids=None, streamer=object()),
    ),
    B(
        "generate-negative-prompt-out-of-vocab",
        GROUP,
        "generate(guidance_scale=1.5, negative_prompt_ids=<ids of 500>), vocabulary 100 (was torch's IndexError "
        "from the embedding, in the guidance's forward)",
        af.ConfigError,
        ("negative_prompt_ids holds [500]", "0 to 99"),
        generating("qwen2", guidance_scale=1.5, negative_prompt_ids=torch.full((2, 3), 500)),
    ),
    B(
        "generate-renormalize-string",
        GROUP,
        "generate(renormalize_logits='no') (was renormalized: 'no' is truthy)",
        af.ConfigError,
        ("renormalize_logits='no'", "true or false"),
        generating("llama", renormalize_logits="no"),
    ),
    B(
        "generate-seq2seq-dynamic-cache",
        GROUP,
        "BART generate(past_key_values=DynamicCache()), a decoder's cache (was a RuntimeError from the attention "
        "mask's shape: BART shares it between its self- and cross-attention)",
        af.ConfigError,
        ("past_key_values is a DynamicCache", "BartForConditionalGeneration is an encoder-decoder"),
        generating("bart", decoder_input_ids=None, past_key_values=DynamicCache()),
    ),
    B(
        "generate-guidance-scale-string",
        GROUP,
        "generate(guidance_scale='2') (was a TypeError from transformers' guidance, steps in: only integer tensors of "
        "a single element can be converted to an index)",
        af.ConfigError,
        ("guidance_scale='2'", "has type str", "a finite number"),
        generating("llama", guidance_scale="2"),
    ),
    B(
        "generate-negative-prompt-per-prompt-with-beams",
        GROUP,
        "generate(guidance_scale=1.5, num_beams=2, negative_prompt_ids=<one row per prompt>) (was a RuntimeError "
        "from transformers' guidance: the size of tensor a (4) must match the size of tensor b (2))",
        af.ConfigError,
        ("negative_prompt_ids have 2 rows, but generate runs 4", "repeat_interleave"),
        generating("llama", guidance_scale=1.5, num_beams=2, negative_prompt_ids=torch.full((2, 3), 7)),
    ),
    B(
        "generate-negative-prompt-without-guidance",
        GROUP,
        "generate(negative_prompt_ids=...) without guidance_scale (was generated without it, without a word)",
        af.ConfigError,
        ("negative_prompt_ids given, but guidance_scale=None", "plays no part"),
        generating("llama", negative_prompt_ids=torch.full((2, 3), 7)),
    ),
    B(
        "generate-guidance-encoder-decoder",
        GROUP,
        "BART generate(guidance_scale=1.5) (was generated without a word, the negative prompt read as the encoder's "
        "input; T5 failed in transformers: 'You must specify exactly one of input_ids or inputs_embeds')",
        af.ConfigError,
        ("guidance_scale=1.5", "BartForConditionalGeneration is an encoder-decoder", "leave guidance_scale unset"),
        generating("bart", decoder_input_ids=None, guidance_scale=1.5),
    ),
    B(
        "generate-guidance-recorded",
        GROUP,
        "generate(guidance_scale=1.5) inside recording_fusion_attentions() (was a record of one position per row: "
        "the negative prompt's forwards overwrote the steps')",
        af.ConfigError,
        ("guidance_scale=1.5", "recording_fusion_attentions()", "negative prompt"),
        _recorded_guidance,
    ),
    B(
        "generate-ids-beside-embeds-other-length",
        GROUP,
        "Llama generate(input_ids=<2 x 3>, inputs_embeds=<2 x 7 x 32>) (was a RuntimeError from the attention: the "
        "size of tensor a (7) must match the size of tensor b (3))",
        af.ConfigError,
        ("input_ids of shape (2, 3) beside inputs_embeds of shape (2, 7)", "the ids of the embedded tokens"),
        generating(
            "llama",
            input_ids=tiny_decoder_inputs("llama", padding_side="left")["input_ids"][:, :3],
            inputs_embeds=torch.zeros(2, 7, 32),
            attention_mask=None,
        ),
    ),
    B(
        "generate-max-length-within-embedded-prompt",
        GROUP,
        "Llama generate(inputs_embeds=<2 x 7 x 32>, max_length=5) (was transformers' message of another call: "
        "'Input length of input_ids is 0, but `max_length` is set to -2')",
        af.ConfigError,
        ("max_length=5 tokens per sequence, prompt included", "already have 7", "max_new_tokens="),
        generating("llama", input_ids=None, inputs_embeds=torch.zeros(2, 7, 32), max_new_tokens=None, max_length=5),
    ),
    B(
        "generate-decay-penalty-not-a-pair",
        GROUP,
        "generate(exponential_decay_length_penalty=3) (was a TypeError from transformers, steps in: 'int' object is "
        "not subscriptable)",
        af.ConfigError,
        ("exponential_decay_length_penalty=3", "a pair (start_index, decay_factor)"),
        generating("llama", exponential_decay_length_penalty=3),
    ),
    B(
        "generate-stopping-criterion-returns-none",
        GROUP,
        "generate(stopping_criteria=[<a StoppingCriteria returning None>]) (was a TypeError from transformers' "
        "StoppingCriteriaList, steps in: unsupported operand type(s) for |: 'Tensor' and 'NoneType')",
        af.ConfigError,
        ("stopping_criteria[0] (_ForgetsToReturn) returned None", "a bool tensor of shape [2]", "or a Python bool"),
        generating("llama", stopping_criteria=[_ForgetsToReturn()]),
    ),
    B(
        "generate-stopping-criterion-integer-tensor",
        GROUP,
        "generate(num_beams=2, stopping_criteria=[<a criterion answering a long tensor>]) (was a RuntimeError from "
        "transformers' beam search: where expected condition to be a boolean tensor; without beams 2 read as 'go on')",
        af.ConfigError,
        ("stopping_criteria[0] (_IntegerStop) returned a torch.int64 tensor", "a bool tensor", ".bool() of it"),
        generating("gpt2", num_beams=2, stopping_criteria=[_IntegerStop()]),
    ),
    B(
        "generate-logits-processor-one-row",
        GROUP,
        "generate(logits_processor=[<a processor returning scores[0]>]) of 2 prompts (was generated without a word: "
        "the first row's scores broadcast to every row, each prompt given the first one's tokens)",
        af.ConfigError,
        (
            "logits_processor[0] (_OneRowScores) returned a torch.float32 tensor of shape (100,)",
            "of their shape (2, 100)",
        ),
        generating("llama", logits_processor=[_OneRowScores()]),
    ),
    B(
        "generate-prefix-function-negative-id",
        GROUP,
        "BART generate(prefix_allowed_tokens_fn=<returns [-1]>) (was generated without a word: id -1 indexed the "
        "vocabulary's last token, and only it was allowed)",
        af.ConfigError,
        ("prefix_allowed_tokens_fn (_last_token) returned [-1]", "outside this model's vocabulary (0 to 99)"),
        generating("bart", decoder_input_ids=None, prefix_allowed_tokens_fn=_last_token),
    ),
    B(
        "generate-suppress-tokens-one-id",
        GROUP,
        "generate(suppress_tokens=5), one id for a list (was a TypeError from transformers: 'int' object is not "
        "iterable)",
        af.ConfigError,
        ("suppress_tokens=5", "expected a list of integer token ids"),
        generating("llama", suppress_tokens=5),
    ),
    B(
        "generate-min-new-tokens-beyond-max",
        GROUP,
        "generate(min_new_tokens=5, max_new_tokens=2, eos_token_id=2) (was 2 new tokens, the minimum dropped with a "
        "UserWarning)",
        af.ConfigError,
        ("min_new_tokens=5", "max_new_tokens=2 stops it after 2", "lower min_new_tokens to at most 2"),
        generating("llama", min_new_tokens=5, eos_token_id=2),
    ),
    B(
        "generate-assistant-model-string",
        GROUP,
        "generate(assistant_model='gpt2'), a name, not a model (was an AttributeError from transformers: 'str' object "
        "has no attribute 'config')",
        af.ConfigError,
        ("assistant_model is a str", "a transformers model"),
        generating("llama", assistant_model="gpt2"),
    ),
    B(
        "generate-stop-strings-tokenizer-without-vocab",
        GROUP,
        "generate(stop_strings=['x'], tokenizer=object()) (was an AttributeError from transformers' "
        "StopStringCriteria: 'object' object has no attribute 'get_vocab')",
        af.ConfigError,
        ("tokenizer is a object, which has no get_vocab() method", "AutoTokenizer"),
        generating("llama", stop_strings=["x"], tokenizer=object()),
    ),
    B(
        "generate-custom-generate-number",
        GROUP,
        "generate(custom_generate=5) (was ignored without a word: transformers' own decoding ran)",
        af.ConfigError,
        ("custom_generate is a int", "ignores without a word", "a decoding function"),
        generating("llama", custom_generate=5),
    ),
    B(
        "generate-paged-routed",
        GROUP,
        "generate(adapter_names=['a', 'a'], cache_implementation='paged') (was the prompts back without new tokens: "
        "continuous batching packs the prompts into one row, the routing failed in its background loop, only logged)",
        af.ConfigError,
        ("cache_implementation='paged'", "adapter_names", "packs every prompt's tokens into one row"),
        generating("llama", adapter_names=["a", "a"], cache_implementation="paged"),
    ),
    B(
        "generate-top-h-string",
        GROUP,
        "generate(do_sample=True, top_h='0.5') (was a TypeError from transformers' TopHLogitsWarper: '<' not "
        "supported between instances of 'int' and 'str')",
        af.ConfigError,
        ("top_h='0.5' has type str", "greater than 0 and at most 1"),
        generating("llama", do_sample=True, top_h="0.5"),
    ),
    B(
        "generate-prefill-chunk-size-zero",
        GROUP,
        "generate(prefill_chunk_size=0) (was torch's RuntimeError from splitting the prompt: split_size can only be "
        "0 if dimension size is 0)",
        af.ConfigError,
        ("prefill_chunk_size=0", "an integer greater than 0"),
        generating("llama", prefill_chunk_size=0),
    ),
    B(
        "generate-watermarking-config-number",
        GROUP,
        "generate(watermarking_config=5) (was an AttributeError from transformers: 'int' object has no attribute "
        "'validate')",
        af.ConfigError,
        ("watermarking_config is a int", "WatermarkingConfig(...)", "a dict of its fields"),
        generating("llama", watermarking_config=5),
    ),
    B(
        "generate-eos-token-empty-list",
        GROUP,
        "generate(eos_token_id=[], num_beams=2) (was torch's IndexError from transformers' beam search: index 0 is "
        "out of bounds for dimension 0 with size 0; without beams it never stopped at the model's end token)",
        af.ConfigError,
        ("eos_token_id=[] holds no token ids", "beam search fails", "tokenizer.eos_token_id"),
        generating("llama", eos_token_id=[], num_beams=2),
    ),
    B(
        "generate-eos-token-empty-in-model-config",
        GROUP,
        "T5 generate() with its own generation_config.eos_token_id = [] and num_beams=2 (was torch's IndexError from "
        "transformers' beam search)",
        af.ConfigError,
        ("the model's generation_config.eos_token_id=[]", "holds no token ids"),
        _own_config("t5", eos_token_id=[], num_beams=2),
    ),
    B(
        "generate-bad-words-empty-sequence",
        GROUP,
        "generate(generation_config=GenerationConfig(bad_words_ids=[[]])) (was generated without a word: "
        "transformers skips the empty banned sequence, banning nothing)",
        af.ConfigError,
        ("generation_config.bad_words_ids=[[]]", "an empty list of token ids", "skips without a word"),
        generating("gpt2", generation_config=GenerationConfig(bad_words_ids=[[]])),
    ),
    B(
        "generate-logits-processor-nan",
        GROUP,
        "generate(do_sample=True, logits_processor=[<a processor returning NaN scores>]) (was a RuntimeError from "
        "torch.multinomial: probability tensor contains either inf, nan or element < 0)",
        af.ConfigError,
        ("logits_processor[0] (_NaNScores) returned NaN scores in row(s) [0, 1]", "keep NaN out"),
        generating("llama", do_sample=True, logits_processor=[_NaNScores()]),
    ),
    B(
        "generate-logits-processor-masks-every-token",
        GROUP,
        "generate(logits_processor=[<a processor setting every score to -inf>]), greedy (was generated without a "
        "word: argmax of a row of -inf picked token 0)",
        af.ConfigError,
        ("logits_processor[0] (_MasksEverything) returned no finite score", "leave each row a finite score"),
        generating("gpt2", logits_processor=[_MasksEverything()]),
    ),
    B(
        "generate-paged-in-generation-config",
        GROUP,
        "generate(generation_config=GenerationConfig(cache_implementation='paged'), adapter_names=[...]) (was an "
        "ordinary generation without a word: transformers switches to continuous batching for the keyword alone)",
        af.ConfigError,
        (
            "cache_implementation='paged' in a generation_config",
            "only for the keyword",
            "cache_implementation='paged')",
        ),
        _paged_in_config,
    ),
    B(
        "generate-penalty-alpha-string",
        GROUP,
        "generate(penalty_alpha='0.6', top_k=4) (was a TypeError from transformers' GenerationConfig: '>' not "
        "supported between instances of 'str' and 'int')",
        af.ConfigError,
        ("penalty_alpha='0.6' has type str", "a number >= 0"),
        generating("llama", penalty_alpha="0.6", top_k=4),
    ),
    B(
        "generate-max-cache-len-string",
        GROUP,
        "generate(cache_implementation='static', max_cache_len='64') (was a TypeError from transformers' static "
        "cache: '>' not supported between instances of 'str' and 'int')",
        af.ConfigError,
        ("max_cache_len='64' has type str", "an integer greater than 0"),
        generating("llama", cache_implementation="static", max_cache_len="64"),
    ),
    B(
        "generate-bos-token-in-model-config-out-of-vocabulary",
        GROUP,
        "Llama generate() of no prompt, its own generation_config.bos_token_id = 500 of 100 tokens (was torch's "
        "IndexError from the embedding)",
        af.ConfigError,
        ("the model's generation_config.bos_token_id=500", "outside this model's vocabulary"),
        _own_config("llama", prompts=False, bos_token_id=500),
    ),
    B(
        "generate-sequence-bias-nan",
        GROUP,
        "generate(do_sample=True, sequence_bias={(5,): nan}) (was a RuntimeError from torch.multinomial, steps in: "
        "probability tensor contains either inf, nan or element < 0)",
        af.ConfigError,
        ("sequence_bias={(5,): nan} holds the bias nan", "give finite biases", "float('-inf')"),
        generating("llama", do_sample=True, sequence_bias={(5,): float("nan")}),
    ),
    B(
        "generate-suppress-every-token",
        GROUP,
        "generate(suppress_tokens=<ids 0..49>, begin_suppress_tokens=<ids 50..99>), vocabulary 100 (was generated "
        "without a word: the first step's scores all -inf, greedy search picked token 0; sampling failed in "
        "torch.multinomial)",
        af.ConfigError,
        ("suppress all 100 tokens of the vocabulary", "suppress only the tokens to keep out"),
        generating("gpt2", suppress_tokens=list(range(50)), begin_suppress_tokens=list(range(50, 100))),
    ),
    B(
        "generate-watermarking-dict-unknown-key",
        GROUP,
        "generate(watermarking_config={'strength': 2.0}) (was a TypeError from transformers' GenerationConfig: "
        "WatermarkingConfig.__init__() got an unexpected keyword argument 'strength')",
        af.ConfigError,
        ("watermarking_config={'strength': 2.0} has key(s) ['strength']", "greenlist_ratio, bias"),
        generating("llama", watermarking_config={"strength": 2.0}),
    ),
    B(
        "generate-temperature-overflows-scores",
        GROUP,
        "generate(do_sample=True, temperature=1e-40) (was a RuntimeError from torch.multinomial, as on the bare "
        "model: probability tensor contains either inf, nan or element < 0; on CUDA a device-side assert)",
        af.ConfigError,
        ("decoding settings (temperature=1e-40) left +inf", "float32", "do_sample=False"),
        generating("llama", do_sample=True, temperature=1e-40),
    ),
    B(
        "generate-beam-sampling-temperature-overflows-scores",
        GROUP,
        "generate(do_sample=True, num_beams=2, temperature=1e-40) (was a RuntimeError from torch.multinomial in "
        "beam sampling: every log-probability divided to -inf)",
        af.ConfigError,
        ("decoding settings (temperature=1e-40) left no finite score", "row(s) [0, 1, 2, 3]"),
        generating("gpt2", do_sample=True, num_beams=2, temperature=1e-40),
    ),
    B(
        "generate-repetition-penalty-overflows-scores",
        GROUP,
        "generate(do_sample=True, repetition_penalty=1e-40) (was a RuntimeError from torch.multinomial: a repeated "
        "token's score divided to +inf)",
        af.ConfigError,
        ("decoding settings (repetition_penalty=1e-40) left +inf", "repetition_penalty near 1"),
        generating("llama", do_sample=True, repetition_penalty=1e-40),
    ),
    B(
        "generate-decay-penalty-overflows-scores",
        GROUP,
        "generate(do_sample=True, exponential_decay_length_penalty=(0, 1e300)) (was a RuntimeError from "
        "torch.multinomial: the end token's score grown to +inf)",
        af.ConfigError,
        ("decoding settings left +inf in the scores", "no token can be sampled"),
        generating("llama", do_sample=True, exponential_decay_length_penalty=(0, 1e300)),
    ),
    B(
        "generate-temperature-int",
        GROUP,
        "generate(do_sample=True, temperature=2) (not an error; was transformers' ValueError: '`temperature` (=2) "
        "has to be a strictly positive float')",
        None,
        ("temperature=2 samples as 2.0: True",),
        _integer_temperature,
    ),
    B(
        "generate-length-penalty-overflows",
        GROUP,
        "generate(num_beams=2, length_penalty=1e308) (was an OverflowError from transformers' beam scores: "
        "length ** 1e308; -1e308 made every beam's score -inf, an arbitrary pick, without a word)",
        af.ConfigError,
        ("length_penalty=1e+308", "a number from -50 to 50"),
        generating("gpt2", num_beams=2, length_penalty=1e308),
    ),
)
