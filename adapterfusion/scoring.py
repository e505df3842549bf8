"""`predict`: a model's head logits, gold labels and mean task loss over a list of batches, as it is activated;
`score`: the task's metrics of them; `score_answers`: a generation task's metrics of its answer tokens, batch by
batch. Below the training recipes (MT-A scores every task's dev set with them) and knowing nothing of run folders;
evaluation.py applies them to a rebuilt run."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from adapterfusion.errors import ConfigError
from adapterfusion.forward_inputs.batches import check_batch, check_batches
from adapterfusion.forward_inputs.limits import model_limits
from adapterfusion.heads.token_classification import ids_outside
from adapterfusion.tasks.instruction import IGNORE_INDEX, end_token_id, prompt_length
from adapterfusion.tasks.metrics import dev_metrics
from adapterfusion.tasks.spec import TaskSpec
from adapterfusion.tasks.squad import qa_needs_features, score_qa

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


@dataclass(frozen=True)
class Predictions:
    """Head logits and gold labels of a whole split; `loss` is the mean task loss per example (the HF
    Trainer's eval_loss), None when the batches have no labels."""

    logits: np.ndarray
    labels: np.ndarray
    loss: float | None


@torch.no_grad()
def predict(model: AdaptedModel, batches: Iterable[Mapping[str, torch.Tensor]], bf16: bool = False) -> Predictions:
    """Run `batches` through the model as it is activated, in eval mode and inside `inference_cache()`; with `bf16`
    under bfloat16 autocast, as a run trained with TrainingConfig.bf16 evaluates."""
    check_batches(batches, "predict")
    device = next(model.parameters()).device
    was_training = model.training
    logits, labels, loss_sum, count = [], [], 0.0, 0
    model.eval()
    try:
        with model.inference_cache(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            for batch in batches:
                check_batch(batch, "predict")
                batch = {k: v.to(device) for k, v in batch.items() if isinstance(v, torch.Tensor)}
                output = model(**batch)
                logits.append(output.logits.float().cpu().numpy())
                if "labels" in batch:
                    labels.append(batch["labels"].cpu().numpy())
                    loss_sum += float(output.task_loss) * len(batch["labels"])
                    count += len(batch["labels"])
    finally:
        model.train(was_training)
    if not logits:
        raise ConfigError("predict: no batches to evaluate (the split is empty)")
    return Predictions(
        padded_concat(logits, -100.0),
        padded_concat(labels, IGNORE_INDEX) if labels else np.empty(0, dtype=np.int64),
        loss_sum / count if count else None,
    )


def padded_concat(arrays: list[np.ndarray], value: float) -> np.ndarray:
    """Batches joined along the first axis; per-token outputs (QA, tagging) of batches padded to different lengths
    padded with `value` to the longest first, as the HF Trainer pads them (-100)."""
    if len({a.shape[1:] for a in arrays}) <= 1:
        return np.concatenate(arrays)
    length = max(a.shape[1] for a in arrays)
    return np.concatenate(
        [np.pad(a, [(0, 0), (0, length - a.shape[1])] + [(0, 0)] * (a.ndim - 2), constant_values=value) for a in arrays]
    )


def score(task: TaskSpec, predictions: Predictions, features: Any = None) -> dict[str, float]:
    """The task's metrics of `predictions`, plus "loss". An extractive QA task decodes its answers with the encoded
    `features` the predictions came from, in their order (tasks/squad.py)."""
    if task.is_extractive_qa:
        if features is None:
            raise qa_needs_features(task)
        metrics = score_qa(features, predictions.logits, task.metrics)
        return {**metrics, "loss": predictions.loss} if predictions.loss is not None else metrics
    if predictions.labels.size == 0 and predictions.logits.size:
        raise ConfigError(
            f"score: the predictions for task {task.name!r} have no gold labels (the batches held no 'labels'); "
            "predict on batches that carry them (load the split with its labels: load_task_data, encode_task)"
        )
    metrics = dev_metrics(task, predictions.logits, predictions.labels)
    return {**metrics, "loss": predictions.loss} if predictions.loss is not None else metrics


@torch.no_grad()
def score_generation(
    model: AdaptedModel,
    batches: Iterable[Mapping[str, torch.Tensor]],
    task: TaskSpec,
    tokenizer: Any,
    bf16: bool = False,
) -> dict[str, float]:
    """A generation task's metrics as its training run records them: `score_answers` with the tokenizer's end token
    (and pad token, else the end token), exact match only where the task lists it (it generates, so it is slow)."""
    end = end_token_id(tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else end
    return score_answers(model, batches, end, pad, exact_match="exact_match" in task.metrics, bf16=bf16)


def score_answers(
    model: AdaptedModel,
    batches: Iterable[Mapping[str, torch.Tensor]],
    end_token_id: int,
    pad_token_id: int,
    exact_match: bool = False,
    bf16: bool = False,
) -> dict[str, float]:
    """A generation task's dev metrics over `batches` (right-padded, with per-token labels, -100 off the answer), as
    the model is activated, with its own LM head: `answer_loss` (mean cross-entropy per answer token, what the
    model's own loss averages), `perplexity` (its exp), `token_accuracy` (teacher-forced argmax == answer token);
    with `exact_match`, the share of rows whose greedy generation from the prompt is the answer and its end token.
    Sums are kept per batch, so no [rows, seq, vocab] logits of the whole split are ever held."""
    check_batches(batches, "score_answers")
    device = next(model.parameters()).device
    was_training = model.training
    loss_sum, correct, tokens, matches, rows = 0.0, 0, 0, 0, 0
    model.eval()
    try:
        with model.inference_cache(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            for number, batch in enumerate(batches):
                check_batch(batch, "score_answers")
                labels = _answer_labels(batch, number).to(device)
                batch = {k: v.to(device) for k, v in batch.items() if isinstance(v, torch.Tensor) and k != "labels"}
                logits = model(**batch).logits
                _check_answer_ids(labels, logits.shape[-1], number)
                targets = labels[:, 1:]  # position t predicts token t + 1, as the model's own loss shifts
                answer = targets != IGNORE_INDEX
                chosen, gold = logits[:, :-1][answer], targets[answer]
                chosen = chosen.float() if chosen.dtype in (torch.float16, torch.bfloat16) else chosen
                loss_sum += float(F.cross_entropy(chosen, gold, reduction="sum"))
                correct += int((chosen.argmax(-1) == gold).sum())
                tokens += gold.numel()
                if exact_match:
                    matches += _greedy_matches(model, batch["input_ids"], labels, end_token_id, pad_token_id)
                    rows += len(labels)
    finally:
        model.train(was_training)
    if tokens == 0:
        raise ConfigError("score_answers: no answer tokens to score (no batches, or every label is -100)")
    loss = loss_sum / tokens
    metrics = {"answer_loss": loss, "perplexity": math.exp(min(loss, 700.0)), "token_accuracy": correct / tokens}
    return {**metrics, "exact_match": matches / rows} if exact_match else metrics


def _answer_labels(batch: Mapping[str, Any], number: int) -> torch.Tensor:
    """The batch's answer token labels: an integer tensor shaped like its input_ids."""
    labels, ids = batch.get("labels"), batch.get("input_ids")
    if not isinstance(labels, torch.Tensor) or labels.is_floating_point() or labels.dtype == torch.bool:
        found = f"'labels' of type {type(labels).__name__}" if labels is not None else "no 'labels'"
        found = f"'labels' of dtype {labels.dtype}" if isinstance(labels, torch.Tensor) else found
        raise ConfigError(
            f"score_answers: batch {number} holds {found}; each batch needs per-token answer labels (a tensor), "
            f"token ids with {IGNORE_INDEX} off the answer (encode_task of an instruction task gives them)"
        )
    if isinstance(ids, torch.Tensor) and labels.shape != ids.shape:
        raise ConfigError(
            f"score_answers: batch {number} has labels of shape {list(labels.shape)} for input_ids of shape "
            f"{list(ids.shape)}; give one label per input token ({IGNORE_INDEX} off the answer)"
        )
    return labels


def _check_answer_ids(labels: torch.Tensor, vocab: int, number: int) -> None:
    """Answer labels are token ids of the model's vocabulary (or IGNORE_INDEX), else cross-entropy fails deep in
    torch ('Target -1 is out of bounds')."""
    wrong = ids_outside(labels, vocab)
    if wrong:
        raise ConfigError(
            f"score_answers: batch {number} has label {wrong[0]}, neither a token id of the model's {vocab} "
            f"nor {IGNORE_INDEX} (off the answer); encode the data with this model's tokenizer"
        )


# Greedy decoding with nothing else on the logits: what exact_match means, whatever a model's generation_config
# asks for by default (Qwen2.5-Instruct's repetition_penalty=1.05, a no_repeat_ngram_size, a minimum length).
PLAIN_GREEDY: dict[str, Any] = {
    "do_sample": False,
    "num_beams": 1,
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_repetition_penalty": 1.0,
    "min_length": 0,
    "min_new_tokens": None,
    "bad_words_ids": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "sequence_bias": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
}


def _greedy_matches(
    model: AdaptedModel, input_ids: torch.Tensor, labels: torch.Tensor, end_token_id: int, pad_token_id: int
) -> int:
    """How many rows' greedy continuation of their prompt (left-padded, as generation needs) is their answer."""
    label_rows = labels.tolist()
    prompts = [input_ids[i, : prompt_length(row)] for i, row in enumerate(label_rows)]
    answers = [[t for t in row if t != IGNORE_INDEX] for row in label_rows]
    limit = model_limits(model.model).max_length
    return sum(
        _group_matches(
            model, [prompts[i] for i in group], [answers[i] for i in group], end_token_id, pad_token_id, limit
        )
        for group in groups_within_positions([len(p) for p in prompts], [len(a) for a in answers], limit)
    )


def groups_within_positions(prompt_lengths: list[int], answer_lengths: list[int], limit: int | None) -> list[list[int]]:
    """The rows in groups that generate together within the model's `limit` positions: a group's longest prompt plus
    its longest answer (new tokens) fits (two rows that each fit may not fit together, left-padded in one batch).
    Exact match's generation and the server's generate batches cut their rows by it."""
    if limit is None:
        return [list(range(len(prompt_lengths)))]
    groups: list[list[int]] = []
    widest, longest = 0, 0
    for row in sorted(range(len(prompt_lengths)), key=lambda i: (prompt_lengths[i], answer_lengths[i])):
        width, answer = max(widest, prompt_lengths[row]), max(longest, answer_lengths[row])
        if groups and width + answer <= limit:
            groups[-1].append(row)
            widest, longest = width, answer
        else:
            groups.append([row])
            widest, longest = prompt_lengths[row], answer_lengths[row]
    return groups


def _group_matches(
    model: AdaptedModel,
    prompts: list[torch.Tensor],
    answers: list[list[int]],
    end_token_id: int,
    pad_token_id: int,
    limit: int | None,
) -> int:
    """_greedy_matches for rows that generate together; a row's answer tokens past the model's `limit` positions are
    a miss, as truncation makes them."""
    width = max(len(p) for p in prompts)
    padded = prompts[0].new_full((len(prompts), width), pad_token_id)
    mask = torch.zeros_like(padded)
    for i, prompt in enumerate(prompts):
        padded[i, width - len(prompt) :] = prompt
        mask[i, width - len(prompt) :] = 1
    new_tokens = max(len(a) for a in answers)
    new_tokens = min(new_tokens, limit - width) if limit is not None else new_tokens
    if new_tokens < 1:
        return 0
    generated = model.generate(
        input_ids=padded,
        attention_mask=mask,
        max_new_tokens=new_tokens,
        eos_token_id=end_token_id,
        pad_token_id=pad_token_id,
        **PLAIN_GREEDY,  # not the model's own generation_config (a repetition penalty would change the answers)
    )[:, width:].tolist()
    # an answer cut by max_length lost its end token: no generation is that answer and its end, so it is a miss
    whole = [bool(answer) and answer[-1] == end_token_id for answer in answers]
    return sum(
        complete and row[: len(answer)] == answer
        for row, answer, complete in zip(generated, answers, whole, strict=True)
    )
