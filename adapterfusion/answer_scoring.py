"""`score_answers`: a generation task's metrics of its answer tokens (answer loss, perplexity, token accuracy and,
where asked, exact match of greedy answers), batch by batch; `score_generation`: the same as a task's training run
records them. Beside scoring.py, whose `predict` and `score` serve heads' outputs; evaluation.py and the training
loop apply both to a rebuilt or training model."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from adapterfusion.blocks import BatchSplit, Parallel
from adapterfusion.errors import ConfigError
from adapterfusion.forward_inputs.batches import check_batch, check_batches
from adapterfusion.forward_inputs.limits import model_limits
from adapterfusion.heads.token_classification import ids_outside
from adapterfusion.scoring import check_wrapped, model_inputs
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.instruction import IGNORE_INDEX, end_token_id, prompt_length
from adapterfusion.tasks.registry import resolve_task
from adapterfusion.tasks.spec import TaskSpec

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


@torch.no_grad()
def score_generation(
    model: AdaptedModel,
    batches: Iterable[Mapping[str, torch.Tensor]],
    task: str | TaskSpec,
    tokenizer: Any,
    bf16: bool = False,
) -> dict[str, float]:
    """A generation task's metrics as its training run records them: `score_answers` with the tokenizer's end token
    (and pad token, else the end token), exact match only where the task lists it (it generates, so it is slow).
    `task`: a TaskSpec or a registered task's name."""
    task = resolve_task(task)
    if not task.is_generation:  # its per-example labels were refused as labels "of another shape than input_ids"
        raise TaskError(
            f"score_generation: task {task.name!r} is a {task.kind!r} task, not a generation task; score a head's "
            "outputs with adapterfusion.scoring.predict and score (or tasks.compute_metrics)"
        )
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
    Sums are kept per batch, so no [rows, seq, vocab] logits of the whole split are ever held. Left-padded batches
    score alike: a prompt is what its attention_mask keeps."""
    check_wrapped(model, "score_answers")
    check_batches(batches, "score_answers")
    _check_answer_settings(model, end_token_id, pad_token_id, exact_match, bf16)
    device = next(model.parameters()).device
    was_training = model.training
    loss_sum, correct, tokens, matches, rows = 0.0, 0, 0, 0, 0
    model.eval()
    try:
        with model.inference_cache(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            for number, batch in enumerate(batches):
                check_batch(batch, "score_answers")
                labels = _answer_labels(batch, number).to(device)
                batch = model_inputs(batch, device, "score_answers", leave_out="labels")
                logits = _lm_logits(model, batch, number)
                _check_answer_ids(labels, logits.shape[-1], number)
                _check_answer_positions(labels, batch, number, whole=exact_match)
                targets = labels[:, 1:]  # position t predicts token t + 1, as the model's own loss shifts
                answer = targets != IGNORE_INDEX
                chosen, gold = logits[:, :-1][answer], targets[answer]
                chosen = chosen.float() if chosen.dtype in (torch.float16, torch.bfloat16) else chosen
                _refuse_nan_logits(chosen, answer, number)
                loss_sum += float(F.cross_entropy(chosen, gold, reduction="sum"))
                correct += int((chosen.argmax(-1) == gold).sum())
                tokens += gold.numel()
                if exact_match:
                    matches += _greedy_matches(model, batch, labels, end_token_id, pad_token_id)
                    rows += len(labels)
    finally:
        model.train(was_training)
    if tokens == 0:
        raise ConfigError("score_answers: no answer tokens to score (no batches, or every label is -100)")
    loss = loss_sum / tokens
    metrics = {"answer_loss": loss, "perplexity": math.exp(min(loss, 700.0)), "token_accuracy": correct / tokens}
    return {**metrics, "exact_match": matches / rows} if exact_match else metrics


def _answer_labels(batch: Mapping[str, Any], number: int) -> torch.Tensor:
    """The batch's answer token labels: a signed integer tensor (uint8 holds no -100) shaped like its input_ids."""
    labels, ids = batch.get("labels"), batch.get("input_ids")
    if not isinstance(labels, torch.Tensor) or labels.is_floating_point() or labels.dtype in (torch.bool, torch.uint8):
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
    return labels.long()  # int32 labels, which the model's own loss takes, were a RuntimeError from cross_entropy


def _refuse_nan_logits(chosen: torch.Tensor, answer: torch.Tensor, number: int) -> None:
    """The answer positions' logits must hold no NaN nor +inf (-inf is a token ruled out): answer_loss and
    perplexity came back NaN, token_accuracy and exact_match 0, and a run recorded them as its result (QA and class
    outputs are refused alike: tasks.errors.refuse_nan_outputs)."""
    bad = (torch.isnan(chosen) | torch.isposinf(chosen)).any(dim=-1)
    if bool(bad.any()):
        rows = torch.zeros(answer.shape, dtype=torch.bool, device=answer.device)
        rows[answer] = bad
        raise TaskError(
            f"score_answers: batch {number}: the model's logits hold NaN (or +inf) at the answer tokens of "
            f"{int(rows.any(dim=1).sum())} of {len(rows)} rows, so no answer can be scored; its weights or inputs hold "
            "NaN or inf (check the checkpoint with torch.isfinite), or bf16 overflowed (evaluate in float32)."
        )


def _check_answer_settings(model: AdaptedModel, end: Any, pad: Any, exact_match: Any, bf16: Any) -> None:
    """What score_answers is told, refused before any batch runs: a decoder's language model (an encoder-decoder
    read prompt + answer as its encoder's input too, BART silently), no head of ours in front of it, token ids as
    integers (pad None was a TypeError; end None a silent exact_match of 0), true or false flags ('no' was true), and
    no Parallel block (each row run per branch) nor, with exact_match, a BatchSplit (its rows generate regrouped)."""
    architecture = getattr(model, "architecture", None)
    if architecture is not None and not architecture.causal:
        kind = "an encoder-decoder" if getattr(model.model.config, "is_encoder_decoder", False) else "an encoder"
        raise ConfigError(
            f"score_answers: the model is {kind} ({type(model.model).__name__}); a generation task's answers are "
            "scored as a decoder's language model reads them, prompt + answer in one sequence; score a decoder (e.g. "
            "af.default_decoder_path())"
        )
    head = getattr(model, "active_head", None)
    if head is not None:
        raise ConfigError(
            f"score_answers: head {head!r} is active, so the model answers its head's logits, not the language "
            f"model's next-token logits; activate the adapter or fusion without it (model.activate(adapter=..., "
            "head=None))"
        )
    for name, value in (("end_token_id", end), ("pad_token_id", pad)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ConfigError(
                f"score_answers: {name}={value!r} must be a token id (an integer): the tokenizer's "
                f"{'eos' if name == 'end_token_id' else 'pad'} token id (score_generation reads both from the "
                "tokenizer)"
            )
    for name, value in (("exact_match", exact_match), ("bf16", bf16)):
        if not isinstance(value, (bool, np.bool_)):
            raise ConfigError(f"score_answers: {name}={value!r} must be True or False")
    block = getattr(model, "active_block", None)
    if isinstance(block, Parallel) or (exact_match and isinstance(block, BatchSplit)):
        why = (
            "runs every row once per branch, so the logits are not one row per answer"
            if isinstance(block, Parallel)
            else "routes rows by their place in the batch, and exact_match generates the rows regrouped by length"
        )
        raise ConfigError(
            f"score_answers: the active {type(block).__name__} block {why}; score each adapter or fusion activated "
            "alone, or give each batch its rows' choices as adapter_names=[...] (one per row)"
        )


def _lm_logits(model: AdaptedModel, batch: Mapping[str, torch.Tensor], number: int) -> torch.Tensor:
    """The model's next-token logits [rows, seq, vocab] of one batch; another output (a classifier's [rows, labels],
    a bare decoder's hidden states) was read as a vocabulary of its last dimension."""
    output = model(**batch)
    logits = getattr(output, "logits", None)
    ids = batch["input_ids"]
    if not isinstance(logits, torch.Tensor) or logits.ndim != 3 or logits.shape[:2] != ids.shape:
        shape = list(logits.shape) if isinstance(logits, torch.Tensor) else "no logits"
        raise ConfigError(
            f"score_answers: batch {number}: the model answers {shape} for input_ids of shape {list(ids.shape)}, not "
            f"a language model's logits [rows, tokens, vocabulary]; wrap the model with its LM head "
            "(AutoModelForCausalLM), not a classifier or the bare decoder"
        )
    return logits


def _check_answer_positions(labels: torch.Tensor, batch: Mapping[str, torch.Tensor], number: int, whole: bool) -> None:
    """Answer labels as encode_task makes them: aligned with input_ids (each the token at its own position, which
    the model's loss shifts itself), after at least one prompt token the attention mask keeps (nothing predicts an
    answer token with none before it), and, for exact_match (`whole`), one run of tokens per row."""
    ids, mask = batch["input_ids"], batch.get("attention_mask")
    answer = labels != IGNORE_INDEX
    kept = torch.ones_like(answer) if mask is None else mask.bool()
    before = torch.cumsum((kept & ~answer).long(), dim=1)  # prompt tokens up to each position
    unprompted = answer & (torch.cumsum(answer.long(), dim=1) == 1) & (before == 0)
    if bool(unprompted.any()):
        row = int(unprompted.nonzero()[0, 0])
        raise ConfigError(
            f"score_answers: batch {number}, row {row} has no prompt token before its first answer label, so nothing "
            "predicts that token (labels=input_ids, as a language model's loss takes them, label the prompt too); "
            f"give {IGNORE_INDEX} on the prompt's tokens and the padding (encode_task of an instruction task does)"
        )
    wrong = answer & (labels != ids)
    if bool(wrong.any()):
        row, position = (int(i) for i in wrong.nonzero()[0])
        label, token = int(labels[row, position]), int(ids[row, position])
        raise ConfigError(
            f"score_answers: batch {number}, row {row}: the label at position {position} is {label} but the token "
            f"there is {token}; labels are the answer's token ids at their own "
            "positions, aligned with input_ids (not shifted by one: the loss shifts them itself)"
        )
    if not whole:
        return
    for row, marks in enumerate(answer.tolist()):
        starts = sum(1 for i, mark in enumerate(marks) if mark and (i == 0 or not marks[i - 1]))
        if starts != 1:
            found = "no answer label" if starts == 0 else f"{starts} separate runs of answer labels"
            raise ConfigError(
                f"score_answers: batch {number}, row {row} has {found}; exact_match generates one answer after each "
                f"row's prompt, so give each row its answer's tokens in one run ({IGNORE_INDEX} elsewhere)"
            )


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
    model: AdaptedModel, batch: Mapping[str, Any], labels: torch.Tensor, end_token_id: int, pad_token_id: int
) -> int:
    """How many rows' greedy continuation of their prompt (left-padded, as generation needs) is their answer, each
    row generated with its own adapter_names choice where the batch routes its rows. A prompt is its tokens before
    the answer that the attention mask keeps: a left-padded batch's padding was read as prompt tokens, attended, and
    the answers generated after it."""
    input_ids, mask, routes = batch["input_ids"], batch.get("attention_mask"), batch.get("adapter_names")
    label_rows = labels.tolist()
    prompts = []
    for i, row in enumerate(label_rows):
        prompt = input_ids[i, : prompt_length(row)]
        prompts.append(prompt if mask is None else prompt[mask[i, : len(prompt)].bool()])
    answers = [[t for t in row if t != IGNORE_INDEX] for row in label_rows]
    limit = model_limits(model.model).max_length
    return sum(
        _group_matches(
            model,
            [prompts[i] for i in group],
            [answers[i] for i in group],
            None if routes is None else [routes[i] for i in group],
            (end_token_id, pad_token_id),
            limit,
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
    routes: list[Any] | None,
    end_and_pad: tuple[int, int],
    limit: int | None,
) -> int:
    """_greedy_matches for rows that generate together (`routes`: their adapter_names, or None); a row's answer
    tokens past the model's `limit` positions are a miss, as truncation makes them."""
    end_token_id, pad_token_id = end_and_pad
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
        **({} if routes is None else {"adapter_names": routes}),
        **PLAIN_GREEDY,  # not the model's own generation_config (a repetition penalty would change the answers)
    )[:, width:].tolist()
    # an answer cut by max_length lost its end token: no generation is that answer and its end, so it is a miss
    whole = [bool(answer) and answer[-1] == end_token_id for answer in answers]
    return sum(
        complete and row[: len(answer)] == answer
        for row, answer, complete in zip(generated, answers, whole, strict=True)
    )
