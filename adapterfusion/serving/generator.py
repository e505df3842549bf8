"""Generation for many requests at once: their prompts run in one `generate()` call per group of similar length,
each prompt with the adapter or fusion its request named (`generate(..., adapter_names=[...])`, generation.py), so
requests for different adapters share the decoding steps of one frozen model.

Greedy requests get the tokens their prompt gets generated alone with its choice active, and a request asking for
fewer new tokens than its group gets a prefix of the group's run, which is what it would have got by itself (each
step depends only on the tokens before it). Requests that sample run in groups of the same temperature, top_p and
top_k (one generate() call per group and length group); they draw from the one random stream of the server, so a
sampled answer is not reproducible by the request alone. A decoder's prompts are padded on the left, as generation
needs; an encoder-decoder's are its encoder's inputs. Like Predictor.predict, `generate` is not
thread-safe: the server runs it on the model's one thread."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from adapterfusion.answer_scoring import groups_within_positions
from adapterfusion.errors import ConfigError
from adapterfusion.serving.config import DEFAULT_MAX_LENGTH, DEFAULT_MAX_NEW_TOKENS
from adapterfusion.serving.contract import GenerateRequest, Sampling, no_tokens
from adapterfusion.serving.predictor import Prediction, forward_cost, length_groups, length_limits, model_limit
from adapterfusion.serving.request_errors import RequestError

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


def new_tokens_limit(max_new_tokens: int | None, max_length: int | None, model_config: Any, tokenizer: Any) -> int:
    """The most new tokens one generate request may ask for: `max_new_tokens`, or DEFAULT_MAX_NEW_TOKENS cut so that
    a one-token prompt fits. A prompt and its new tokens share the server's `max_length` (None: the model's limit,
    `model_config` None where not known yet), so a max_new_tokens that leaves no room for any prompt would have every
    request asking for it refused, long after the server started: ConfigError now."""
    limits = length_limits(model_config, tokenizer)
    model_most = min((limit for _, limit in limits), default=None)
    if max_length is not None:
        longest, why = max_length, f"--max-length {max_length}, ServeConfig.max_length"
    elif limits:
        why, longest = min(limits, key=lambda named: named[1])
    else:
        longest = DEFAULT_MAX_LENGTH
        why = f"neither its config nor its tokenizer states a limit, so the server keeps {DEFAULT_MAX_LENGTH}"
    if max_new_tokens is None:
        return min(DEFAULT_MAX_NEW_TOKENS, longest - 1)
    if max_new_tokens < longest:
        return max_new_tokens
    more = ""
    if model_most is None:
        more = f", or {'raise' if max_length is not None else 'give'} --max-length for longer sequences"
    elif longest < model_most:
        more = f", or raise --max-length up to the model's {model_most}"
    raise ConfigError(
        f"max_new_tokens={max_new_tokens} leaves no room for a prompt: a prompt and its new tokens together hold at "
        f"most {longest} tokens on this server ({why}), so every request asking for {max_new_tokens} new tokens would "
        f"be refused; serve with --max-new-tokens {longest - 1} or less (ServeConfig.max_new_tokens){more}"
    )


@dataclass(frozen=True)
class EncodedPrompts:
    """A checked generate request with its prompts tokenised, each as it would be alone."""

    request: GenerateRequest
    prompts: tuple[list[int], ...]

    @property
    def rows(self) -> int:
        return len(self.prompts)

    @property
    def tokens(self) -> int:
        """Its longest prompt plus the tokens it may add: what a batch holding it runs to at most."""
        return max(len(prompt) for prompt in self.prompts) + self.request.max_new_tokens


class Generator:
    """`model` (with its language-model head) and `tokenizer`; prompt plus new tokens at most `max_length` (None: the
    tokenizer's and the model's limit)."""

    def __init__(self, model: AdaptedModel, tokenizer: Any, max_length: int | None = None) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_length = max_length or model_limit(model, tokenizer)
        config = cast(Any, model.model).config
        self.encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
        generation = getattr(model.model, "generation_config", None)
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        ends = getattr(generation, "eos_token_id", None)
        ends = ends if ends is not None else tokenizer.eos_token_id
        self.ends = set(ends) if isinstance(ends, (list, tuple)) else {ends} if ends is not None else set()

    def encode(self, request: GenerateRequest) -> EncodedPrompts:
        """The request's prompts tokenised (on the event loop); 413 where a prompt leaves no room for its tokens."""
        prompts = tuple(self._tokens(prompt, request.chat) for prompt in request.prompts)
        for index, prompt in enumerate(prompts):
            if not prompt:  # generate() needs a token to start from; this tokenizer adds none of its own
                raise no_tokens(index, request.prompts[index])
            if len(prompt) + request.max_new_tokens > self.max_length:
                tokens = f"{len(prompt)}" if len(prompt) < self.max_length else f"at least {len(prompt)}"  # cut
                raise RequestError(
                    413,
                    f"inputs[{index}] has {tokens} tokens, which with max_new_tokens={request.max_new_tokens} "
                    f"exceeds the model's {self.max_length}; shorten the prompt or ask for fewer tokens",
                )
        return EncodedPrompts(request, prompts)

    def _tokens(self, prompt: str, chat: bool) -> list[int]:
        """The prompt's tokens, cut at max_length: a longer one is refused anyway, so no more are kept."""
        cut = {"truncation": True, "max_length": self.max_length}
        if not chat:
            return list(self.tokenizer(prompt, **cut)["input_ids"])
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise RequestError(422, "'chat' is true, but this model's tokenizer has no chat template; send false")
        turn = [{"role": "user", "content": prompt}]
        return list(self.tokenizer.apply_chat_template(turn, add_generation_prompt=True, return_dict=False, **cut))

    def generate(self, batch: Sequence[EncodedPrompts]) -> list[list[Prediction]]:
        """Each request's generations, from one greedy generate() per group of prompts of similar length."""
        prompts = [prompt for item in batch for prompt in item.prompts]
        choices = [item.request.choice for item in batch for _ in item.prompts]
        limits = [item.request.max_new_tokens for item in batch for _ in item.prompts]
        samplings = [item.request.sampling for item in batch for _ in item.prompts]
        made: list[Prediction | None] = [None] * len(prompts)
        for group in self._groups(prompts, samplings, limits):
            padded = self.tokenizer.pad(
                [{"input_ids": prompts[i]} for i in group],
                padding=True,
                padding_side="right" if self.encoder_decoder else "left",
                return_tensors="pt",
            )
            inputs = {key: value.to(self.model.device) for key, value in padded.items()}
            output = self.model.generate(
                **inputs,
                adapter_names=[choices[i] for i in group],
                max_new_tokens=max(limits[i] for i in group),
                num_beams=1,
                pad_token_id=self.pad,
                **_decoding(samplings[group[0]]),
            )
            start = 1 if self.encoder_decoder else inputs["input_ids"].shape[1]  # after the decoder's start token
            for row, i in enumerate(group):
                made[i] = self._answer(output[row, start : start + limits[i]].tolist())
        answers, first = [], 0
        for item in batch:
            answers.append([_present(made[i]) for i in range(first, first + item.rows)])
            first += item.rows
        return answers

    def _groups(
        self, prompts: Sequence[list[int]], samplings: Sequence[Sampling | None], limits: Sequence[int]
    ) -> list[list[int]]:
        """The prompts (indices) cut into generate() calls: one per decoding setting, each cut by length, and cut
        again where a decoder's longest prompt plus the most new tokens asked would pass its positions (each
        request fits alone; a short prompt asking for many tokens beside a long one would not)."""
        by_setting: dict[Sampling | None, list[int]] = {}
        for index, sampling in enumerate(samplings):
            by_setting.setdefault(sampling, []).append(index)
        cost = forward_cost(self.model.device)
        groups = []
        for members in by_setting.values():
            for group in length_groups([len(prompts[i]) for i in members], cost):
                groups += self._within_positions([members[k] for k in group], prompts, limits)
        return groups

    def _within_positions(
        self, group: list[int], prompts: Sequence[list[int]], limits: Sequence[int]
    ) -> list[list[int]]:
        if self.encoder_decoder:  # the prompt is the encoder's, the new tokens the decoder's
            return [group]
        lengths, new_tokens = [len(prompts[i]) for i in group], [limits[i] for i in group]
        return [[group[k] for k in part] for part in groups_within_positions(lengths, new_tokens, self.max_length)]

    def _answer(self, tokens: list[int]) -> Prediction:
        """The new tokens up to and including the first end token, as text."""
        end = next((k for k, token in enumerate(tokens) if token in self.ends), None)
        kept = tokens if end is None else tokens[: end + 1]
        return {"text": self.tokenizer.decode(kept, skip_special_tokens=True), "tokens": len(kept)}


def _decoding(sampling: Sampling | None) -> dict[str, Any]:
    """generate()'s decoding options for a group: greedy, or sampling with its settings (top_k 0 switches the
    model's own generation_config top_k off too)."""
    if sampling is None:
        return {"do_sample": False}
    return {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k}


def _present(answer: Prediction | None) -> Prediction:
    assert answer is not None  # every prompt is in exactly one group
    return answer
