"""Training on instruction data (prompt + answer) with the loss on the answer tokens only: the encoding's labels,
the wrapped language model's own loss against a float64 hand computation, st-a lowering the dev answer loss,
fusion-st-a over stored LM adapters with the base frozen, and resume."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import transformers

from adapterfusion.answer_scoring import score_answers
from adapterfusion.encoder_loading import load_language_model
from adapterfusion.encoders import resolve_encoder
from adapterfusion.evaluation import evaluate_run
from adapterfusion.model import wrap
from adapterfusion.tasks import TaskCollator, TaskError, encode_task, instruction_task, load_task_data, register_task
from adapterfusion.tasks.instruction import IGNORE_INDEX, instruction_example
from adapterfusion.training import AdapterStore, TrainingError, adapter_subsets, train
from adapterfusion.training.callbacks import FusionStepCallback
from adapterfusion.training.checkpoints import resumable_checkpoint
from tolerances import assert_close

COLOURS = {"sky": "blue", "grass": "green", "snow": "white", "coal": "black", "blood": "red", "sun": "yellow"}
FAST = dict(batch_size=8, max_length=32, learning_rate=1e-2, logging_steps=1, patience=None)


def _rows(n: int, offset: int = 0) -> list[dict[str, str]]:
    things = list(COLOURS)
    return [
        {"prompt": f"what colour is the {things[(i + offset) % 6]} ?", "answer": COLOURS[things[(i + offset) % 6]]}
        for i in range(n)
    ]


def _write(folder: Path, name: str, rows: list[dict[str, str]]) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _task(folder: Path, name: str = "colours", **options):
    files = {"train": _write(folder, "train", _rows(32)), "validation": _write(folder, "validation", _rows(12, 3))}
    return instruction_task(name, data_files=files, **options)


def _tokenizer(folder: Path):
    return transformers.AutoTokenizer.from_pretrained(folder)


def test_labels_are_ignored_exactly_on_prompt_and_padding(tiny_decoder_dir, tmp_path) -> None:
    tokenizer = _tokenizer(tiny_decoder_dir)
    files = {
        "train": _write(tmp_path, "train", [{"prompt": "snow", "answer": "very white"}]),
        "validation": _write(tmp_path, "validation", [{"prompt": "the sky is", "answer": "blue"}]),
    }
    spec = instruction_task("two", data_files=files)
    data, _ = load_task_data(spec)
    encoded, report = encode_task(spec, data, tokenizer, 16)
    assert not report.any_truncated
    batch = TaskCollator(tokenizer, padding_side="right")([encoded["train"][0], encoded["validation"][0]])
    cls, sep, pad = 101, 102, 0  # the BERT vocabulary of the fixture's tokenizer; sep ends an answer (no eos)
    sky, is_, blue = tokenizer.convert_tokens_to_ids(["sky", "is", "blue"])
    snow, very, white = tokenizer.convert_tokens_to_ids(["snow", "very", "white"])
    the = tokenizer.convert_tokens_to_ids("the")
    # row 1: [CLS] snow [SEP] very white [SEP]        row 2: [CLS] the sky is [SEP] blue [SEP]
    assert batch["input_ids"].tolist() == [
        [cls, snow, sep, very, white, sep, pad],
        [cls, the, sky, is_, sep, blue, sep],
    ]
    assert batch["labels"].tolist() == [
        [IGNORE_INDEX] * 3 + [very, white, sep, IGNORE_INDEX],
        [IGNORE_INDEX] * 5 + [blue, sep],
    ]
    assert batch["attention_mask"].tolist() == [[1] * 6 + [0], [1] * 7]


def test_truncation_cuts_the_prompt_first_and_never_the_whole_answer() -> None:
    prompt, answer, end = [1, 2, 3, 4, 5, 6], [7, 8, 9], 0
    cut = instruction_example(prompt, answer, end, 8)  # room for 4 prompt tokens: the ones nearest the answer
    assert cut.input_ids == [3, 4, 5, 6, 7, 8, 9, 0] and cut.labels == [-100] * 4 + [7, 8, 9, 0]
    assert cut.truncated and not cut.answer_cut
    long = instruction_example(prompt, list(range(10, 20)), end, 8)  # one prompt token, the answer's tail cut
    assert long.input_ids == [6, 10, 11, 12, 13, 14, 15, 16] and long.labels[0] == -100 and long.answer_cut


def test_hub_datasets_and_chat_templates(tiny_decoder_dir, monkeypatch) -> None:
    import datasets

    rows = {"question": ["the sky is", "snow is"], "response": ["blue", "white"]}
    hub = datasets.DatasetDict({s: datasets.Dataset.from_dict(rows) for s in ("train", "validation")})
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: hub)  # stands for the Hub's copy
    spec = instruction_task("hubqa", prompt_field="question", answer_field="response", hub_path="org/qa")
    data, info = load_task_data(spec)
    assert info.source == "hub" and data["train"]["response"] == ["blue", "white"]
    tokenizer = _tokenizer(tiny_decoder_dir)
    with pytest.raises(TaskError, match="has no chat template"):
        encode_task(
            instruction_task("chat", prompt_field="question", answer_field="response", chat_template=True),
            data,
            tokenizer,
        )
    tokenizer.chat_template = "{% for m in messages %}user: {{ m['content'] }}{% endfor %} answer:"
    chat = instruction_task("chat", prompt_field="question", answer_field="response", chat_template=True)
    encoded, _ = encode_task(chat, data, tokenizer, 32)
    words = tokenizer.convert_ids_to_tokens(encoded["train"][0]["input_ids"])
    assert words == ["user", ":", "the", "sky", "is", "answer", ":", "blue", "[SEP]"]


def test_an_answer_the_tokenizer_drops_whole_is_refused_by_its_row(tiny_decoder_dir, tmp_path) -> None:
    """An answer of characters the tokenizer drops (a zero-width space to WordPiece) passed the blank-answer check
    and trained on the end token alone."""
    rows = [*_rows(3), {"prompt": "what colour is the sea ?", "answer": "\u200b"}]
    files = {"train": _write(tmp_path, "train", rows), "validation": _write(tmp_path, "validation", _rows(2))}
    spec = instruction_task("dropped", data_files=files)
    data, _ = load_task_data(spec)
    with pytest.raises(
        TaskError, match=r"split 'train', row 3: the answer in field 'answer' \('\\u200b'\) has no tokens"
    ):
        encode_task(spec, data, _tokenizer(tiny_decoder_dir), 32)


@pytest.mark.parametrize(
    ("template", "refusal"),
    [
        ("{{ raise_exception('Conversation must start with a system message') }}", "fails on a prompt as one user"),
        ("{% for m in messages %}{{ m['content'] | no_such_filter }}{% endfor %}", "fails on a prompt as one user"),
        ("{% for m in messages %}<|{{ m['role'] }}|>{% endfor %}", "leaves the prompt out of what it writes"),
    ],
)
def test_a_chat_template_that_fails_or_drops_the_prompt_is_refused(tiny_decoder_dir, template, refusal) -> None:
    """A template raising (a raw jinja2 TemplateError) or writing no message content (the model would have learnt
    answers to prompts it never read) is refused with the way out."""
    import datasets

    rows = {"prompt": ["the sky is"], "answer": ["blue"]}
    data = datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)})
    tokenizer = _tokenizer(tiny_decoder_dir)
    tokenizer.chat_template = template
    with pytest.raises(TaskError, match=refusal) as refused:
        encode_task(instruction_task("chat", chat_template=True), data, tokenizer, 32)
    assert "set chat_template=False" in str(refused.value)


def test_the_loss_is_the_mean_over_answer_tokens(tiny_decoder_dir, tmp_path) -> None:
    tokenizer = _tokenizer(tiny_decoder_dir)
    spec = _task(tmp_path)
    data, _ = load_task_data(spec)
    encoded, _ = encode_task(spec, data, tokenizer, 32)
    batch = TaskCollator(tokenizer, padding_side="right")(list(encoded["validation"])[:4])
    model = wrap(load_language_model(resolve_encoder(tiny_decoder_dir))).double().eval()
    with torch.no_grad():
        model.model.lm_head.weight.mul_(300.0)  # peaked predictions: token losses far apart, so a wrong mask shows
        loss = model(**batch).loss
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    total, count, every = 0.0, 0, []
    columns = [batch[key].tolist() for key in ("labels", "input_ids", "attention_mask")]
    rows = zip(logits.tolist(), *columns, strict=True)
    for row, labels, ids, mask in rows:
        for t in range(len(labels) - 1):  # position t predicts the token at t + 1
            scores = row[t]
            top = max(scores)
            token_loss = top + math.log(sum(math.exp(s - top) for s in scores)) - scores[ids[t + 1]]
            if mask[t + 1]:
                every.append(token_loss)
            if labels[t + 1] == IGNORE_INDEX:
                continue
            total += token_loss
            count += 1
    assert count == sum(1 for r in batch["labels"].tolist() for v in r[1:] if v != IGNORE_INDEX)
    # transformers computes its causal-LM loss from logits cast to float32, so the model's own loss is a float32 value
    assert_close(loss.item(), total / count, dtype=torch.float32, label="the model's own loss")
    assert abs(sum(every) / len(every) - total / count) > 1.0  # prompt tokens in the mean would be far off
    scores = score_answers(model, [batch], end_token_id=102, pad_token_id=0)
    assert_close(scores["answer_loss"], total / count, dtype=torch.float64, label="score_answers")


def test_generation_tasks_are_refused_where_they_cannot_train(tiny_encoder_dir, tiny_decoder_dir, tmp_path) -> None:
    spec = _task(tmp_path)
    with pytest.raises(TrainingError, match="generation task"):
        train(spec, "head", encoder=tiny_decoder_dir, output_dir=tmp_path / "runs", training_config=FAST)
    with pytest.raises(TrainingError, match="is an encoder"):
        train(spec, "st-a", encoder=tiny_encoder_dir, output_dir=tmp_path / "runs", training_config=FAST)
    with pytest.raises(TaskError, match="no label_names"):
        instruction_task("bad", label_names=("a", "b"))
    with pytest.raises(TaskError, match="unknown for a 'generation' task"):
        instruction_task("bad", metrics=("accuracy",))


@pytest.mark.slow
def test_st_a_lowers_the_dev_answer_loss(tiny_decoder_dir, tmp_path) -> None:
    spec = _task(tmp_path, metrics=("answer_loss", "token_accuracy", "exact_match"))
    tokenizer = _tokenizer(tiny_decoder_dir)
    data, _ = load_task_data(spec)
    encoded, _ = encode_task(spec, data, tokenizer, 32)
    collate = TaskCollator(tokenizer, padding_side="right")
    batches = [collate(list(encoded["validation"])[i : i + 8]) for i in (0, 8)]
    base = wrap(load_language_model(resolve_encoder(tiny_decoder_dir)))
    before = score_answers(base, batches, end_token_id=102, pad_token_id=0)
    result = train(
        spec,
        "st-a",
        seed=1,
        encoder=tiny_decoder_dir,
        output_dir=tmp_path / "runs",
        training_config=dict(FAST, epochs=4, learning_rate=5e-2),
        setup_options={"reduction_factor": 2},
    )
    after = result.metrics
    # 10.31 -> 9.90 here: the frozen random LM head of hidden size 32 after an RMSNorm bounds how peaked any
    # prediction can get, so the loss cannot fall far below log(vocab size) = 10.33 on this model
    assert after["answer_loss"] < before["answer_loss"] - 0.25, (before, after)
    assert set(after) >= {"answer_loss", "perplexity", "token_accuracy", "exact_match"}
    assert result.model.active_head is None and not result.model.head_names
    assert (result.run_dir / "adapter").is_dir() and not (result.run_dir / "head").exists()
    recorded = json.loads(result.metrics_path.read_text())
    assert recorded["metric_for_best"] == "answer_loss" and len(recorded["epochs"]) == 4
    # The saved run, rebuilt and scored again, gives the metrics its training recorded.
    evaluated = evaluate_run(result.run_dir)
    assert set(evaluated["metrics"]) == {"answer_loss", "perplexity", "token_accuracy", "exact_match"}
    for name, value in evaluated["metrics"].items():
        assert_close(torch.tensor(value), torch.tensor(after[name]), dtype=torch.float32, label=name)


@pytest.mark.slow
def test_fusion_over_stored_lm_adapters_keeps_the_base_frozen(tiny_decoder_dir, tmp_path, monkeypatch) -> None:
    store = AdapterStore(tmp_path / "store")
    common = dict(encoder=tiny_decoder_dir, output_dir=tmp_path / "runs", store=store)
    target = _task(tmp_path / "a", "colours")
    source = instruction_task(
        "echo",
        data_files={
            "train": _write(
                tmp_path / "b", "train", [{"prompt": r["answer"], "answer": r["answer"]} for r in _rows(24)]
            ),
            "validation": _write(tmp_path / "b", "validation", [{"prompt": "red", "answer": "red"}] * 4),
        },
    )
    for spec in (target, source):
        register_task(spec, overwrite=True)  # fusion sources are named tasks
        stored = train(spec, "st-a", seed=1, training_config=dict(FAST, max_steps=3), **common)
        assert stored.store_path is not None and not (stored.store_path / "head").exists()
    base = load_language_model(resolve_encoder(tiny_decoder_dir)).state_dict()
    fused = train(
        target,
        "fusion-st-a",
        seed=1,
        training_config=dict(FAST, max_steps=4),
        setup_options={"sources": ["echo"]},
        **common,
    )
    model = fused.model
    assert model.fusion_setup("fusion_colours").adapters == ("echo", "colours") and model.active_head is None
    for key, value in model.unload().state_dict().items():
        assert torch.equal(value, base[key]), key  # the language model stayed frozen
    assert (fused.run_dir / "fusion").is_dir() and (fused.run_dir / "fusion_attention.json").is_file()
    assert 0 <= fused.metrics["token_accuracy"] <= 1
    # a fusion on a random subset of its adapters each step still draws the target's own every step, though a
    # generation task has no head of ours (whose name the target's adapter shares on other tasks)
    drawn: list[list[str]] = []
    real_draw = adapter_subsets.draw_subset
    monkeypatch.setattr(
        adapter_subsets, "draw_subset", lambda *args, **kwargs: drawn.append(real_draw(*args, **kwargs)) or drawn[-1]
    )
    options = {"sources": ["echo"], "adapter_subset": 1, "adapter_seed": 1}
    train(target, "fusion-st-a", seed=2, training_config=dict(FAST, max_steps=3), setup_options=options, **common)
    assert drawn == [["colours"]] * 3


class Killed(Exception):
    """Stands for the process being killed."""


@pytest.mark.slow
def test_an_interrupted_lm_run_resumes_to_the_same_result(tiny_decoder_dir, tmp_path, monkeypatch) -> None:
    spec = _task(tmp_path)
    settings = dict(FAST, epochs=2, keep_checkpoints=True)  # 32 rows in batches of 8: 4 steps per epoch

    def run(output: Path, resume: bool = False):
        return train(
            spec, "st-a", seed=3, encoder=tiny_decoder_dir, output_dir=output, training_config=settings, resume=resume
        )

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == 4:
            raise Killed("killed after saving step 4")

    with monkeypatch.context() as patch:
        patch.setattr(FusionStepCallback, "on_save", on_save, raising=False)
        with pytest.raises(Killed):
            run(tmp_path / "resumed")
    checkpoint = resumable_checkpoint(next((tmp_path / "resumed").rglob("checkpoints")))
    assert checkpoint is not None and checkpoint.name == "checkpoint-4"
    resumed = run(tmp_path / "resumed", resume=True)
    whole = run(tmp_path / "whole")
    got, want = (json.loads(r.metrics_path.read_text()) for r in (resumed, whole))
    assert got["resumed_from"] == "checkpoints/checkpoint-4" and got["global_step"] == want["global_step"] == 8
    trained = {n: p for n, p in resumed.model.named_parameters() if p.requires_grad}
    expected = {n: p for n, p in whole.model.named_parameters() if p.requires_grad}
    assert trained.keys() == expected.keys() and trained
    for name in expected:
        assert_close(trained[name], expected[name], dtype=torch.float32, label=name)
    assert_close(got["best"]["answer_loss"], want["best"]["answer_loss"], dtype=torch.float32, label="dev loss")


def test_gradient_accumulation_weighs_micro_batches_by_their_answer_tokens(tiny_decoder_dir, tmp_path) -> None:
    """Two micro-batches of 2 rows accumulated make the step of one 4-row batch: the mean over all its answer tokens.
    Each micro-batch's mean counted alike, so one with few answer tokens weighed more (10.8077 against 10.8104)."""
    rows = [
        {"prompt": "a", "answer": "blue"},
        {"prompt": "b", "answer": "very very dark green"},
        {"prompt": "c", "answer": "white"},
        {"prompt": "d", "answer": "red"},
    ]
    files = {"train": _write(tmp_path, "train", rows), "validation": _write(tmp_path, "validation", rows)}
    spec = instruction_task("uneven", data_files=files)
    losses = []
    for batch, accumulation in ((4, 1), (2, 2)):
        settings = dict(FAST, batch_size=batch, grad_accumulation=accumulation, max_steps=1, group_by_length=False)
        run = train(spec, "st-a", seed=1, encoder=tiny_decoder_dir, output_dir=tmp_path / f"b{batch}",
                    training_config=settings)  # fmt: skip
        losses.append(json.loads(run.metrics_path.read_text())["train_losses"][0]["loss"])
    assert losses[1] == pytest.approx(losses[0], rel=1e-6)
