"""One forward for many requests: their inputs tokenised together and run with a routing choice and a head per row
(`model(**batch, adapter_names=[...], head_names=[...])`, routing.py), whatever pieces the requests named.

Not thread-safe (a routed forward sets the model's state while it runs): the server calls it from one worker
thread only, the same thread that loads pieces."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from adapterfusion.serving.contract import PredictRequest

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

Prediction = dict[str, Any]


class Predictor:
    """`model` with `tokenizer`, inputs cut to `max_length` tokens (None: the tokenizer's limit, capped by the
    model's positions)."""

    def __init__(self, model: AdaptedModel, tokenizer: Any, max_length: int | None = None) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_length = max_length or _model_limit(model, tokenizer)

    def predict(self, requests: Sequence[PredictRequest]) -> list[list[Prediction]]:
        """Each request's predictions, from one forward over all their inputs."""
        rows = [row for request in requests for row in request.inputs]
        choices = [request.choice for request in requests for _ in request.inputs]
        heads = [request.head for request in requests for _ in request.inputs]
        batch = self.tokenise(rows)
        with self.model.inference_cache():  # each fusion's folded weights, reused until its weights change
            output = self.model(**batch, adapter_names=choices, head_names=heads)
        logits = output.logits.unbind(0) if output.logits is not None else output.row_logits
        assert logits is not None and len(logits) == len(rows)
        answers, start = [], 0
        for request in requests:
            stop = start + len(request.inputs)
            answers.append([_prediction(row, request) for row in logits[start:stop]])
            start = stop
        return answers

    def tokenise(self, rows: Sequence[tuple[str, str | None]]) -> dict[str, torch.Tensor]:
        """Texts and text pairs in one padded batch on the model's device (each row encoded as it would be alone)."""
        features = [self.tokenizer(text, pair, truncation=True, max_length=self.max_length) for text, pair in rows]
        batch = self.tokenizer.pad(features, padding=True, return_tensors="pt")
        return {key: value.to(self.model.device) for key, value in batch.items()}


def _prediction(logits: torch.Tensor, request: PredictRequest) -> Prediction:
    values = logits.reshape(-1).float() if logits.dtype not in (torch.float32, torch.float64) else logits.reshape(-1)
    if request.head_kind == "regression":
        return {"value": float(values[0]), "scores": values.tolist()}
    label = int(values.argmax())
    named = {"label_name": request.labels[label]} if request.labels else {}
    return {"label": label, **named, "scores": values.softmax(-1).tolist()}


def _model_limit(model: AdaptedModel, tokenizer: Any) -> int:
    """The tokens an input may have: the tokenizer's model_max_length, at most the encoder's position table."""
    positions = getattr(getattr(model.model, "config", None), "max_position_embeddings", None)
    limits = [limit for limit in (getattr(tokenizer, "model_max_length", None), positions) if isinstance(limit, int)]
    limits = [limit for limit in limits if 1 < limit < 1_000_000]  # transformers' "no limit" is a huge int
    return min(limits) if limits else 512
