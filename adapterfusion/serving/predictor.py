"""One forward for many requests: their tokenised inputs padded together and run with a routing choice and a head
per row (`model(**batch, adapter_names=[...], head_names=[...])`, routing.py), whatever pieces the requests named.

Padding is compute wasted: a batch of one-sentence inputs and one long pair is padded to the pair. So the inputs of a
batch are sorted by length and cut into the groups that cost least in padded tokens plus FORWARD_COST tokens per
forward (`length_groups`, an exact partition of the sorted lengths); each group is one routed forward. On the shipped
MiniLM's demo pairs (~40 tokens on average, up to ~160) that runs about a third of the tokens of one padded batch.

`encode` is safe anywhere; `predict` is not thread-safe (a routed forward sets the model's state while it runs):
the server calls it from one worker thread only, the same thread that loads pieces."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch

from adapterfusion.encoder_limits import limit_reason, max_input_length
from adapterfusion.errors import ConfigError
from adapterfusion.serving.config import DEFAULT_MAX_LENGTH
from adapterfusion.serving.contract import PredictRequest, no_tokens
from adapterfusion.serving.request_errors import RequestError

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

Prediction = dict[str, Any]


@dataclass(frozen=True)
class Encoded:
    """A checked request with its inputs tokenised (each as it would be alone), ready to be padded into a batch."""

    request: PredictRequest
    features: tuple[dict[str, list[int]], ...]

    @property
    def rows(self) -> int:
        return len(self.features)

    @property
    def tokens(self) -> int:
        """Its longest input in tokens: what a batch holding it is padded to at least."""
        return max(len(feature["input_ids"]) for feature in self.features)


class Predictor:
    """`model` with `tokenizer`, inputs cut to `max_length` tokens (None: the tokenizer's limit, capped by the
    model's positions)."""

    def __init__(self, model: AdaptedModel, tokenizer: Any, max_length: int | None = None) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_length = max_length or model_limit(model, tokenizer)
        # The ids that are no token of text. [UNK] is special but stands for text (emoji, a script the vocabulary
        # lacks): it counts as a word.
        self._special = set(getattr(tokenizer, "all_special_ids", None) or ()) - {
            getattr(tokenizer, "unk_token_id", None)
        }

    def encode(self, request: PredictRequest) -> Encoded:
        """The request's inputs tokenised (on the event loop, while the model runs other requests); 422 for an input
        that makes no token of text: none at all (an empty text where the tokenizer adds none of its own: GPT-2,
        Llama, BART), or only the tokenizer's own ([CLS] [SEP] of an empty or invisible text), whose prediction would
        say nothing of what was sent."""
        encodings = [
            self.tokenizer(text, pair, truncation=True, max_length=self.max_length) for text, pair in request.inputs
        ]
        for index, encoding in enumerate(encodings):
            text, pair = request.inputs[index]
            if all(token in self._special for token in encoding["input_ids"]):
                raise no_tokens(index, text + (pair or ""))
            side = self._side_of_no_text(encoding) if pair is not None else None
            if side is not None:  # text the contract's check of blank sides cannot see: a zero-width space
                raise RequestError(
                    422,
                    f"inputs[{index}] is a pair whose {side} text makes no tokens of text (none but the tokenizer's "
                    "own); send text on both sides, or the one text alone",
                )
        return Encoded(request, tuple(dict(encoding) for encoding in encodings))

    def _side_of_no_text(self, encoding: Any) -> str | None:
        """ "first" or "second": the text of a pair's encoding that holds no token of text (a fast tokenizer's
        sequence_ids() say which text each token is of); None where both do, or a slow tokenizer cannot say."""
        try:
            sides = encoding.sequence_ids()
        except (AttributeError, ValueError):
            return None
        for side, name in ((0, "first"), (1, "second")):
            held = (token for token, of in zip(encoding["input_ids"], sides, strict=True) if of == side)
            if all(token in self._special for token in held):
                return name
        return None

    def predict(self, batch: Sequence[Encoded]) -> list[list[Prediction]]:
        """Each request's predictions, from one routed forward per group of inputs of similar length."""
        features = [feature for item in batch for feature in item.features]
        choices = [item.request.choice for item in batch for _ in item.features]
        heads = [item.request.head for item in batch for _ in item.features]
        logits: list[torch.Tensor | None] = [None] * len(features)
        # Each fusion's folded weights, reused until its weights change; here they change only by loading pieces
        # (new tensors), so the per-batch hash of their values that catches `p.data` writes is skipped.
        with self.model.inference_cache(check_values=False):
            lengths = [len(feature["input_ids"]) for feature in features]
            for group in length_groups(lengths, forward_cost(self.model.device)):
                padded = self.tokenizer.pad([features[i] for i in group], padding=True, return_tensors="pt")
                inputs = {key: value.to(self.model.device) for key, value in padded.items()}
                output = self.model(
                    **inputs, adapter_names=[choices[i] for i in group], head_names=[heads[i] for i in group]
                )
                rows = _rows_on_cpu(output)
                assert len(rows) == len(group)
                for i, row in zip(group, rows, strict=True):
                    logits[i] = row
        answers, start = [], 0
        for item in batch:
            stop = start + item.rows
            answers.append([_prediction(_present(row), item.request) for row in logits[start:stop]])
            start = stop
        return answers


# What one more forward costs, in padded tokens it would have to save: the Python and dispatch of a routed forward of
# the shipped MiniLM on a CPU (a few ms) against its compute per token (~0.1 ms on 2 cores). On an accelerator the
# same few ms of launches buy thousands of tokens of compute (~1 us each for MiniLM on one H100), so there a batch
# of up to 32 inputs is split only where its padding would be extreme.
FORWARD_COST = 64
ACCELERATOR_FORWARD_COST = 4096


def forward_cost(device: torch.device) -> int:
    """FORWARD_COST for a model on `device`."""
    return FORWARD_COST if device.type == "cpu" else ACCELERATOR_FORWARD_COST


def length_groups(lengths: Sequence[int], forward_cost: int = FORWARD_COST) -> list[list[int]]:
    """The inputs (indices into `lengths`) cut into groups, one forward each, in order of length: the partition of
    the sorted lengths into runs that minimises the padded tokens (a run's size times its longest) plus `forward_cost`
    per run, found exactly by dynamic programming (a batch holds tens of inputs)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    best = [0] + [0] * len(order)  # best[k]: the cost of the first k sorted inputs
    cut = [0] * (len(order) + 1)  # cut[k]: where the last run of that best partition starts
    for end in range(1, len(order) + 1):
        longest = lengths[order[end - 1]]
        best[end], cut[end] = min((best[start] + (end - start) * longest + forward_cost, start) for start in range(end))
    groups, end = [], len(order)
    while end > 0:
        groups.append(order[cut[end] : end])
        end = cut[end]
    return groups[::-1]


def _rows_on_cpu(output: Any) -> list[torch.Tensor]:
    """The forward's logits per row, copied off the device at once (not one small copy per row and answer)."""
    if output.logits is not None:
        return list(output.logits.cpu().unbind(0))
    assert output.row_logits is not None  # rows whose heads differ in width
    return [row.cpu() for row in output.row_logits]


def _present(row: torch.Tensor | None) -> torch.Tensor:
    assert row is not None  # every input is in exactly one group
    return row


def _prediction(logits: torch.Tensor, request: PredictRequest) -> Prediction:
    values = logits.reshape(-1).float() if logits.dtype not in (torch.float32, torch.float64) else logits.reshape(-1)
    if request.head_kind == "regression":
        return {"value": float(values[0]), "scores": values.tolist()}
    label = int(values.argmax())
    named = {"label_name": request.labels[label]} if request.labels else {}
    return {"label": label, **named, "scores": values.softmax(-1).tolist()}


def model_limit(model: AdaptedModel, tokenizer: Any) -> int:
    """The most tokens one input may have: the tokenizer's model_max_length where it is finite, at most the positions
    the model's table holds (encoder_limits.max_input_length: RoBERTa's skip the padding id); DEFAULT_MAX_LENGTH
    where neither says."""
    limits = [limit for _, limit in length_limits(getattr(model.model, "config", None), tokenizer)]
    return min(limits) if limits else DEFAULT_MAX_LENGTH


def check_max_length(max_length: int | None, model_config: Any, tokenizer: Any) -> None:
    """ConfigError for a max_length over model_limit: longer inputs would fail in the model's embeddings (or run past
    what it was trained on) at the first long request, long after the server started; and for one under
    least_max_length, where a text pair loses a text (or every text makes no tokens) at every request."""
    if max_length is None:
        return
    least = least_max_length(tokenizer)
    if max_length < least:
        raise ConfigError(
            f"max_length={max_length} tokens leaves no room for text: this tokenizer adds {least - 2} tokens of its "
            f"own to a text pair, so a pair needs {least} to keep a token of each text (with fewer, the tokenizer "
            f"drops the first text, or cuts nothing at all); serve with --max-length {least} or more "
            "(ServeConfig.max_length), or leave it out to use the model's limit"
        )
    limits = length_limits(model_config, tokenizer)
    if not limits:
        return
    reason, limit = min(limits, key=lambda named: named[1])
    if max_length > limit:
        raise ConfigError(
            f"max_length={max_length} is more tokens than this model takes: {limit} ({reason}); serve with "
            f"--max-length {limit} or less (ServeConfig.max_length), or leave it out to use the model's limit"
        )


def check_vocabulary(model: AdaptedModel, tokenizer: Any) -> None:
    """ConfigError for a tokenizer whose vocabulary (its own, without added tokens) is larger than the model's
    embedding table: every request holding a word past the table was refused 422 ("was the tokenizer made for this
    model?"), a fault its client could not fix, while requests of other words were answered."""
    try:
        rows = int(cast(Any, model.model).get_input_embeddings().weight.shape[0])
    except Exception:  # noqa: BLE001 - a model without one embedding table: its forward checks the ids
        return
    words = getattr(tokenizer, "vocab_size", None)
    if isinstance(words, bool) or not isinstance(words, int) or words <= rows:
        return
    raise ConfigError(
        f"the tokenizer has {words} tokens and the model's embedding table {rows}, so a text with a token past id "
        f"{rows - 1} could not be read: this tokenizer was not made for this model; serve the model with the "
        "tokenizer saved with it (its base's)"
    )


def least_max_length(tokenizer: Any) -> int:
    """The fewest tokens an input may be cut to: the tokenizer's own tokens of a text pair ([CLS] a [SEP] b [SEP]:
    3) and one token of each text; 2 where the tokenizer does not say."""
    try:
        own = tokenizer.num_special_tokens_to_add(pair=True)
    except Exception:  # noqa: BLE001 - a tokenizer without the method, or one that cannot build pairs
        own = 0
    return 2 + (own if isinstance(own, int) and not isinstance(own, bool) and own > 0 else 0)


def length_limits(model_config: Any, tokenizer: Any) -> list[tuple[str, int]]:
    """(why, tokens) for each limit that the model's config (None: not known) and the tokenizer set; the config's
    first, so that where both say the same (load_tokenizer caps a tokenizer at the model's positions) it is named."""
    limits = []
    positions = max_input_length(model_config) if model_config is not None else None
    if positions is not None and positions > 1:
        limits.append((f"its config's {limit_reason(model_config)}", positions))
    told = getattr(tokenizer, "model_max_length", None)
    if isinstance(told, int) and not isinstance(told, bool) and 1 < told < 1_000_000:  # "no limit" is a huge int
        limits.append((f"its tokenizer's model_max_length={told}", told))
    return limits
