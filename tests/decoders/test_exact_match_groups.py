"""Exact match on a dev batch generates the rows left-padded together: two rows that each fit the model's positions
(a long prompt with a short answer, a short prompt with a long answer) may not fit together, so they generate in
groups that do. Checked against each row generated alone, and the group split against its definition."""

from __future__ import annotations

import torch

import adapterfusion as af
from adapterfusion.answer_scoring import groups_within_positions, score_answers
from tiny_decoders import tiny_decoder

END, PAD = 2, 0


def _row(prompt: int, answer: int, token: int) -> tuple[list[int], list[int]]:
    """prompt + answer + end tokens, with their labels (-100 on the prompt)."""
    answer_ids = [token] * answer + [END]
    return list(range(5, 5 + prompt)) + answer_ids, [-100] * prompt + answer_ids


def test_rows_that_fit_alone_are_scored_even_when_they_cannot_generate_together() -> None:
    torch.manual_seed(0)
    model = af.wrap(tiny_decoder("llama"))  # 64 positions
    model.add_adapter("a")
    model.activate(adapter="a")
    rows = [_row(60, 3, 7), _row(4, 59, 7), _row(10, 5, 9)]  # each 64, 64 and 16 tokens; 60 + 60 > 64 together
    ids = torch.full((3, 64), PAD)
    labels = torch.full((3, 64), -100)
    mask = torch.zeros(3, 64, dtype=torch.long)
    for i, (tokens, row_labels) in enumerate(rows):
        ids[i, : len(tokens)], labels[i, : len(tokens)], mask[i, : len(tokens)] = (
            torch.tensor(tokens),
            torch.tensor(row_labels),
            1,
        )
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    scored = score_answers(model, [batch], END, PAD, exact_match=True)
    alone = [
        score_answers(model, [{key: value[i : i + 1] for key, value in batch.items()}], END, PAD, exact_match=True)
        for i in range(3)
    ]
    assert scored["exact_match"] == sum(row["exact_match"] for row in alone) / 3


def test_generation_groups_fit_the_positions_and_keep_every_row_once() -> None:
    prompts, answers = [60, 4, 10, 30, 2], [4, 60, 6, 30, 1]
    groups = groups_within_positions(prompts, answers, 64)
    assert sorted(row for group in groups for row in group) == list(range(5))
    for group in groups:
        assert len(group) == 1 or max(prompts[i] for i in group) + max(answers[i] for i in group) <= 64
    assert groups_within_positions(prompts, answers, None) == [list(range(5))]


def test_exact_match_is_plain_greedy_and_a_cut_answer_is_a_miss(monkeypatch) -> None:
    """The model's own generation_config (a repetition penalty, as Qwen2.5-Instruct ships) changed the answers
    exact_match compared; and an answer whose end token max_length cut off counted as matched by its prefix."""
    torch.manual_seed(0)
    model = af.wrap(tiny_decoder("llama"))
    model.model.generation_config.repetition_penalty = 1.5
    model.model.generation_config.no_repeat_ngram_size = 2
    plain = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "do_sample": False, "num_beams": 1}
    seen: list[dict] = []
    generate = model.generate

    def recording(*args, **kwargs):
        seen.append(kwargs)
        return generate(*args, **kwargs)

    monkeypatch.setattr(model, "generate", recording)
    prompt = torch.tensor([[5, 6, 7, 8]])
    greedy = generate(input_ids=prompt, max_new_tokens=3, **plain, pad_token_id=PAD)[0, 4:].tolist()
    cut = greedy  # its end token cut off: labels hold the answer's prefix only
    batch = {
        "input_ids": torch.tensor([[5, 6, 7, 8, *cut]]),
        "attention_mask": torch.ones(1, 7, dtype=torch.long),
        "labels": torch.tensor([[-100] * 4 + cut]),
    }
    assert score_answers(model, [batch], END, PAD, exact_match=True)["exact_match"] == 0.0
    assert all(seen[-1][key] == value for key, value in plain.items())


def test_a_left_padded_batch_scores_as_its_right_padded_twin() -> None:
    """Exact match read a left-padded row's padding as prompt tokens (attended), so a row whose answer is the model's
    own greedy continuation missed; the prompt is now what the attention mask keeps."""
    torch.manual_seed(0)
    model = af.wrap(tiny_decoder("llama"))
    model.add_adapter("a")
    model.activate(adapter="a")
    prompts = [list(range(5, 9)), list(range(5, 20))]
    rows = []
    for prompt in prompts:  # each answer: the model's greedy token, which is also the end token
        ids = torch.tensor([prompt])
        new = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=1, pad_token_id=PAD)
        rows.append((prompt + [int(new[0, -1])], [-100] * len(prompt) + [int(new[0, -1])]))
    width = max(len(tokens) for tokens, _ in rows)
    scores = {}
    for side in ("left", "right"):
        ids, labels, mask = (torch.full((2, width), value) for value in (PAD, -100, 0))
        for i, (tokens, row_labels) in enumerate(rows):
            at = slice(width - len(tokens), width) if side == "left" else slice(0, len(tokens))
            ids[i, at], labels[i, at], mask[i, at] = torch.tensor(tokens), torch.tensor(row_labels), 1
        batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
        scores[side] = score_answers(model, [batch], rows[0][1][-1], PAD, exact_match=True)
    assert scores["left"]["exact_match"] == scores["right"]["exact_match"] >= 0.5
    assert abs(scores["left"]["answer_loss"] - scores["right"]["answer_loss"]) < 1e-4
