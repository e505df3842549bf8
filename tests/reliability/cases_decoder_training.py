"""Bad-input cases at one boundary, training and evaluating decoders: instruction (prompt + answer) data, answer-only
loss masks, tokenizers without pad tokens, padding sides, length limits and decoder heads through train(), experiment
files and the runner."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import transformers

import adapterfusion as af
import adapterfusion.training
from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.tasks import TaskCollator, TaskError
from adapterfusion.training import TrainingError
from catalogue import Action, BadInput, experiment
from tiny_decoders import tiny_decoder

B = BadInput
GROUP = "decoder training"

_LM_FAST = {"max_steps": 2, "batch_size": 4, "max_length": 32, "patience": None, "warmup_ratio": 0, "logging_steps": 1}
_TEMPLATE = (
    "{% for m in messages %}<|user|> {{ m['content'] }}{% endfor %}{% if add_generation_prompt %} answer :{% endif %}"
)


def _collating(*features: dict[str, Any], **options: Any) -> Callable[[Path], Action]:
    """TaskCollator(<the shipped tokenizer>, **options)(features)."""

    def prepare(folder: Path) -> Action:
        tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
        return lambda: TaskCollator(tokenizer, **options)(list(features))

    return prepare


def _encoding(data: Any, task: Any = None, tokenizer: Any = "shipped", **options: Any) -> Callable[[Path], Action]:
    """encode_task(`task` (default: a generation task over prompt and answer), `data` (a dict of columns becomes a
    datasets.Dataset), `tokenizer` (default: the shipped one; a number: the shipped one with that model_max_length),
    **options)."""

    def prepare(folder: Path) -> Action:
        import datasets

        from adapterfusion.tasks import encode_task, instruction_task

        given = datasets.Dataset.from_dict(data) if isinstance(data, dict) else data
        shipped = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
        used = shipped if tokenizer == "shipped" else tokenizer
        if isinstance(tokenizer, int):  # the shipped tokenizer with this model_max_length
            shipped.model_max_length, used = tokenizer, shipped
        return lambda: encode_task(task or instruction_task("answers"), given, used, **options)

    return prepare


def _model(folder: Path, model_type: str, chat_template: str | None = None) -> Path:
    """A tiny random `model_type` (tiny_decoders.py) saved with the shipped tokenizer (and `chat_template`)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    tokenizer.chat_template = chat_template
    tiny_decoder(model_type, vocab_size=tokenizer.vocab_size).save_pretrained(folder / model_type)
    tokenizer.save_pretrained(folder / model_type)
    return folder / model_type


def _resume_after_template_edit(folder: Path) -> Action:
    """A chat-template generation run on a tiny Llama, cut short after a checkpoint (its metrics.json removed, as a
    kill leaves it), then its tokenizer's chat template edited and train(..., resume=True) run again."""
    from adapterfusion.tasks import instruction_task
    from task_data import write_jsonl

    llama = _model(folder, "llama", _TEMPLATE)
    rows = [{"prompt": f"what colour is thing {i} ?", "answer": "blue"} for i in range(8)]
    files = {role: write_jsonl(folder / f"{role}.jsonl", rows) for role in ("train", "validation")}
    task = instruction_task("answers", {role: str(path) for role, path in files.items()}, chat_template=True)
    settings = {**_LM_FAST, "keep_checkpoints": True}
    run = af.training.train(task, "st-a", encoder=llama, output_dir=folder / "runs", training_config=settings)
    run.metrics_path.unlink()
    (llama / "chat_template.jinja").write_text(_TEMPLATE.replace(" answer :", " reply :"))
    return lambda: af.training.train(
        task, "st-a", encoder=llama, output_dir=folder / "runs", training_config=settings, resume=True
    )


def _token_added_after_the_model(token: str) -> Callable[[Path], Action]:
    """train(<a generation task of prompts of several lengths>, 'st-a') on a tiny Llama of the shipped tokenizer's
    vocabulary, saved with that tokenizer after add_special_tokens({token: '<new>'}) (no resize_token_embeddings)."""

    def prepare(folder: Path) -> Action:
        from adapterfusion.tasks import instruction_task
        from task_data import write_jsonl

        tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
        tiny_decoder("llama", vocab_size=tokenizer.vocab_size).save_pretrained(folder / "llama")
        tokenizer.add_special_tokens({token: "<new>"})
        tokenizer.save_pretrained(folder / "llama")
        rows = [{"prompt": "what colour is the sky" + " ?" * i, "answer": "blue"} for i in range(8)]
        files = {role: write_jsonl(folder / f"{role}.jsonl", rows) for role in ("train", "validation")}
        task = instruction_task("answers", {role: str(path) for role, path in files.items()})
        return lambda: af.training.train(
            task, "st-a", encoder=folder / "llama", output_dir=folder / "runs", training_config=_LM_FAST
        )

    return prepare


def _answers_longer_than_max_length(folder: Path) -> Action:
    """train(<generation task whose train answers are 40 words>, 'st-a', max_length=32) on a tiny Llama, into a
    temporary folder; the action returns the warnings the run recorded in its metrics.json."""

    from adapterfusion.tasks import instruction_task
    from task_data import write_jsonl

    llama = _model(folder, "llama")
    long = [{"prompt": f"describe thing {i} .", "answer": "very " * 40 + "blue"} for i in range(4)]
    short = [{"prompt": f"what colour is thing {i} ?", "answer": "blue"} for i in range(4)]
    files = {"train": write_jsonl(folder / "train.jsonl", long), "validation": write_jsonl(folder / "dev.jsonl", short)}
    task = instruction_task("answers", {role: str(path) for role, path in files.items()})

    return _warnings_of_run(task, llama)


def _warnings_of_run(task: Any, encoder: Path) -> Action:
    """train(task, 'st-a') on `encoder`, into a temporary folder; the action returns the warnings the run recorded in
    its metrics.json."""
    import json
    import tempfile

    def action() -> str:
        with tempfile.TemporaryDirectory() as runs:
            result = af.training.train(task, "st-a", encoder=encoder, output_dir=runs, training_config=_LM_FAST)
            return " | ".join(json.loads(result.metrics_path.read_text())["warnings"])

    return action


def _float16_llama(folder: Path, dtype: str = "float16") -> Path:
    """A tiny Llama saved in `dtype` (as many decoders are shared) with the shipped tokenizer."""
    import torch

    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    llama = tiny_decoder("llama", vocab_size=tokenizer.vocab_size).to(getattr(torch, dtype))
    llama.save_pretrained(folder / "llama")
    tokenizer.save_pretrained(folder / "llama")
    return folder / "llama"


def _bfloat16_run_warnings(folder: Path) -> Action:
    """train(<generation task>, 'st-a') on a tiny Llama saved in bfloat16, into a temporary folder; the action returns
    the warnings the run recorded in its metrics.json."""

    from adapterfusion.tasks import instruction_task
    from task_data import write_jsonl

    llama = _float16_llama(folder, "bfloat16")
    rows = [{"prompt": f"what colour is thing {i} ?", "answer": "blue"} for i in range(8)]
    files = {role: write_jsonl(folder / f"{role}.jsonl", rows) for role in ("train", "validation")}
    task = instruction_task("answers", {role: str(path) for role, path in files.items()})

    return _warnings_of_run(task, llama)


def _llama_saved_in_float16(folder: Path) -> Action:
    """train(<generation task>, 'st-a') on _float16_llama."""
    from adapterfusion.tasks import instruction_task
    from task_data import write_jsonl

    _float16_llama(folder)
    rows = [{"prompt": f"what colour is thing {i} ?", "answer": "blue"} for i in range(8)]
    files = {role: write_jsonl(folder / f"{role}.jsonl", rows) for role in ("train", "validation")}
    task = instruction_task("answers", {role: str(path) for role, path in files.items()})
    return lambda: af.training.train(
        task, "st-a", encoder=folder / "llama", output_dir=folder / "runs", training_config=_LM_FAST
    )


def _on_t5(**changes: Any) -> Callable[[Path], Action]:
    """An experiment on a tiny T5 saved in the case's folder."""

    def prepare(folder: Path) -> Action:
        return experiment(encoder=str(_model(folder, "t5")), **changes)(folder)

    return prepare


CASES: tuple[BadInput, ...] = (
    B(
        "collate-padding-side-unknown",
        GROUP,
        "TaskCollator(tokenizer, padding_side='Left') (was padded on the right without a word)",
        TaskError,
        ("padding_side='Left'", "'left', 'right' or None"),
        _collating({"input_ids": [1, 2, 3]}, {"input_ids": [1, 2]}, padding_side="Left"),
    ),
    B(
        "collate-pad-multiple-negative",
        GROUP,
        "TaskCollator(tokenizer, pad_to_multiple_of=-4) (was a ValueError from numpy: could not broadcast)",
        TaskError,
        ("pad_to_multiple_of=-4", "a positive integer"),
        _collating({"input_ids": [1, 2, 3]}, pad_to_multiple_of=-4),
    ),
    B(
        "collate-labels-longer-than-ids",
        GROUP,
        "a generation example whose per-token labels are one longer than its input_ids (was padded out of line "
        "with the tokens, without a word: every label scored against the next position)",
        TaskError,
        ("example 0 of the batch", "labels has 3 values but input_ids 2 tokens"),
        _collating({"input_ids": [5, 6], "labels": [-100, 6, 2]}, {"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}),
    ),
    B(
        "collate-qa-start-none",
        GROUP,
        "an extractive QA example with start_positions=None (was a TypeError from int() inside the collator)",
        TaskError,
        ("example 1 of the batch has start_positions=None, end_positions=2", "whole indices >= 0"),
        _collating(
            {"input_ids": [1, 2, 3], "start_positions": 1, "end_positions": 2},
            {"input_ids": [1, 2, 3], "start_positions": None, "end_positions": 2},
        ),
    ),
    B(
        "collate-example-without-mask",
        GROUP,
        "a batch whose second example lacks the attention_mask the first has (was a KeyError from the collator)",
        TaskError,
        ("example 1 of the batch lacks ['attention_mask']", "encoded alike"),
        _collating({"input_ids": [1, 2], "attention_mask": [1, 1]}, {"input_ids": [1]}),
    ),
    B(
        "collate-label-name",
        GROUP,
        "an example whose label is its name 'yes', not a class id (was a ValueError from int())",
        TaskError,
        ("example 0 of the batch has labels='yes'", "class id", "load_task_data"),
        _collating({"input_ids": [1, 2], "labels": "yes"}),
    ),
    B(
        "encode-generation-answer-none",
        GROUP,
        "encode_task(<generation task>, Dataset whose row 1 has answer None) (was trained on: the answer became the "
        "text 'None')",
        TaskError,
        ("split 'data', row 1", "the answer in field 'answer' is None", "drop the row"),
        _encoding({"prompt": ["what colour is the sky ?", "and the sea ?"], "answer": ["blue", None]}),
    ),
    B(
        "encode-generation-prompt-not-text",
        GROUP,
        "encode_task(<generation task>, Dataset whose prompts are numbers) (was a ValueError from the tokenizer: "
        "'text input must be of type str')",
        TaskError,
        ("split 'data', row 0", "the prompt in field 'prompt' is 7 (of type int), not text"),
        _encoding({"prompt": [7, 8], "answer": ["seven", "eight"]}),
    ),
    B(
        "encode-prompt-column-missing",
        GROUP,
        "encode_task(<generation task over 'prompt'>, Dataset of columns question and answer) (was a KeyError from "
        "datasets: 'prompt')",
        TaskError,
        ("no ['prompt'] column", "it has ['question', 'answer']", "text_fields"),
        _encoding({"question": ["what colour is the sky ?"], "answer": ["blue"]}),
    ),
    B(
        "encode-data-list-of-rows",
        GROUP,
        "encode_task(<generation task>, [{'prompt': ..., 'answer': ...}]), a list of rows (was an AttributeError: "
        "'list' object has no attribute 'column_names')",
        TaskError,
        ("the data to encode is a list", "datasets.Dataset.from_list(rows)"),
        _encoding([{"prompt": "what colour is the sky ?", "answer": "blue"}]),
    ),
    B(
        "encode-tokenizer-name",
        GROUP,
        "encode_task('rte', <rows>, 'gpt2'): a model name for the tokenizer (was a TypeError: 'str' object is not "
        "callable)",
        TaskError,
        ("tokenizer='gpt2' is not a tokenizer", "AutoTokenizer.from_pretrained"),
        _encoding({"sentence1": ["a"], "sentence2": ["b"], "label": [0]}, task="rte", tokenizer="gpt2"),
    ),
    B(
        "encode-split-without-rows",
        GROUP,
        "encode_task(<generation task>, an empty Dataset) (was a ValueError from datasets: \"Column 'truncated' "
        "doesn't exist\")",
        TaskError,
        ("split 'data' has no rows to encode",),
        _encoding({"prompt": [], "answer": []}),
    ),
    B(
        "encode-tokenizer-max-length-4",
        GROUP,
        "encode_task(<generation task>, rows, <a tokenizer whose model_max_length is 4>) (was every example cut to 4 "
        "tokens, below the 8 a max_length must have, said only in the truncation report)",
        TaskError,
        ("model_max_length=4 caps max_length=", "below the 8 tokens", "tokenizer.model_max_length"),
        _encoding({"prompt": ["what colour is the sky ?"], "answer": ["blue"]}, tokenizer=4),
    ),
    B(
        "encode-num-proc-negative",
        GROUP,
        "encode_task(..., num_proc=-1) (was a ValueError from datasets: num_proc must be >= 0 or None)",
        TaskError,
        ("num_proc=-1", "worker processes"),
        _encoding({"prompt": ["what colour is the sky ?"], "answer": ["blue"]}, num_proc=-1),
    ),
    B(
        "train-resume-decoder-template-edited",
        GROUP,
        "train(<chat-template generation task>, 'st-a', resume=True) after the decoder's chat template was edited "
        "(was resumed: the run finished on prompts its checkpoint had never seen)",
        TrainingError,
        ("cannot resume", "the encoded data differ", "chat template", "overwrite=True"),
        _resume_after_template_edit,
    ),
    B(
        "train-decoder-pad-token-past-embeddings",
        GROUP,
        "train(<generation task>, 'st-a') on a Llama whose tokenizer got a new pad token without "
        "resize_token_embeddings (was a ConfigError at the first padded step, once the data had loaded and an "
        "unfinished run was written: 'input_ids holds [30522] ... was the tokenizer made for this model?')",
        TrainingError,
        ("the pad token, '<new>', has the id 30522", "vocabulary of 30522", "resize_token_embeddings"),
        _token_added_after_the_model("pad_token"),
    ),
    B(
        "train-decoder-end-token-past-embeddings",
        GROUP,
        "train(<generation task>, 'st-a') on a Llama whose tokenizer got a new eos token without "
        "resize_token_embeddings (was a ConfigError at the first step, after the data had loaded)",
        TrainingError,
        ("the end token of every answer, '<new>'", "vocabulary of 30522", "tokenizer.eos_token = "),
        _token_added_after_the_model("eos_token"),
    ),
    B(
        "train-run-answers-cut-by-max-length",
        GROUP,
        "train(<generation task whose answers are longer than max_length>) (not an error; the run's metrics.json "
        "said nothing: only a log line as the data was encoded told that the model never learns to stop them)",
        None,
        ("answers cut: train 4", "never learns to stop them", "raise max_length"),
        _answers_longer_than_max_length,
    ),
    B(
        "train-decoder-saved-in-float16",
        GROUP,
        "train(<generation task>, 'st-a') on a Llama saved in float16, loaded (as transformers loads it) with float16 "
        "adapters (was 'the loss became nan in training step 2 ... Likely causes: learning_rate too high, fp16 "
        "overflow', with fp16 never asked for, once the run was written)",
        TrainingError,
        ("holds float16 weights", "would be float16 too", "dtype=torch.float32"),
        _llama_saved_in_float16,
    ),
    B(
        "train-decoder-saved-in-bfloat16",
        GROUP,
        "train(<generation task>, 'st-a') on a Llama saved in bfloat16, its adapters loaded in bfloat16 (not an "
        "error; the run's metrics.json said nothing of updates under 1/256 of a weight rounding away)",
        None,
        ("holds bfloat16 weights", "lost to rounding", "bf16=True"),
        _bfloat16_run_warnings,
    ),
    B(
        "experiment-decoder-saved-in-float16",
        GROUP,
        "an experiment on a Llama folder saved in float16 (every job trained float16 adapters to a NaN loss)",
        ExperimentSpecError,
        ("encoder:", "was saved in float16", "dtype=torch.float32"),
        lambda folder: experiment(encoder=str(_float16_llama(folder)), setups=["st-a"])(folder),
        cli=True,
    ),
    B(
        "experiment-span-task-on-encoder-decoder",
        GROUP,
        "tasks: [squad] on a T5 encoder (every job failed at run time: no question-answering head on an "
        "encoder-decoder)",
        ExperimentSpecError,
        ("tasks[0]", "'squad' is an extractive question-answering task", "an encoder-decoder (t5)", "leave the task"),
        _on_t5(tasks=["squad"], setups=["st-a"]),
        cli=True,
    ),
)
