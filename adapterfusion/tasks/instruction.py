"""Encode instruction data (prompt + answer) for a causal language model, with the loss on the answer only.

    input_ids = prompt tokens + answer tokens + end token
    labels    = -100 on every prompt token, the answer's ids and the end token elsewhere

(labels are aligned with input_ids, as transformers' causal-LM loss takes them: it shifts them by one itself.) The
prompt is tokenised with the tokenizer's special tokens (a Llama BOS), or, with the task's `chat_template`, as one user
turn of the tokenizer's chat template followed by its generation prompt; the answer is tokenised on its own, so the
separating space or newline belongs at the end of the prompt or the start of the answer. The end token is the
tokenizer's eos (a chat model's end of turn), else its sep token; it is appended here, so an answer whose text
holds it ("Paris.</s>") is refused. A prompt must give at least one token: the answer's
first token is trained by the position before it, which a tokenizer without BOS (GPT-2) does not add to an empty
prompt; load_task_data and the encoding refuse blank prompts (and answers), and the encoding a prompt with no tokens.

Truncation to max_length cuts the prompt from the left first (the tokens nearest the answer stay); only an answer
that does not fit beside one prompt token loses its tail, and that is counted apart (`ANSWER_CUT_COLUMN`) and warned
of by the encoding, since the model then never learns to end that answer. No answer loses all its tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from adapterfusion._validation import short_repr
from adapterfusion.tasks import fields
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.spec import TaskSpec

IGNORE_INDEX = -100  # the label transformers' losses skip
PROMPT_CUT_COLUMN = "truncated"  # the encoding's per-example truncation flag (encoding.TRUNCATED_COLUMN)
ANSWER_CUT_COLUMN = "answer_cut"


class InstructionExample(NamedTuple):
    input_ids: list[int]
    labels: list[int]
    truncated: bool  # any token was cut
    answer_cut: bool  # the answer (or its end token) lost tokens


def end_token_id(tokenizer: Any) -> int:
    """The token that ends an answer: eos, else sep (a BERT-style tokenizer); TaskError when there is neither, or when
    it is not in the vocabulary (an eos_token set to text the vocabulary lacks gets the unknown token's id, so every
    answer would end with, and generation stop at, the unknown token)."""
    for name in ("eos", "sep"):
        candidate = getattr(tokenizer, f"{name}_token_id", None)
        if not isinstance(candidate, int):
            continue
        token, unknown = getattr(tokenizer, f"{name}_token", None), getattr(tokenizer, "unk_token", None)
        if candidate == getattr(tokenizer, "unk_token_id", None) and token != unknown:  # GPT-2's unk is its eos
            raise TaskError(
                f"the {name} token {token!r} of the tokenizer {type(tokenizer).__name__} is not in its vocabulary "
                f"(it gets the id {candidate} of the unknown token {unknown!r}), so every answer would end with "
                f"{unknown!r}; set tokenizer.{name}_token to a token of its vocabulary (convert_ids_to_tokens shows "
                "them), or add it with tokenizer.add_special_tokens and resize the model's embeddings."
            )
        return candidate
    raise TaskError(
        f"the tokenizer {type(tokenizer).__name__} has no eos or sep token to end an answer with; set "
        "tokenizer.eos_token (and save it with the model) before training a generation task."
    )


def require_chat_template(tokenizer: Any) -> None:
    """A task with chat_template=True needs a tokenizer that has one: a template's text, or named templates with a
    'default' one (which transformers renders; without it, a ValueError of its own at the first row). A number
    (5) failed in jinja2 with a TypeError ('Can't compile non template nodes')."""
    name = type(tokenizer).__name__
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, Mapping) and isinstance(template.get("default"), str) and template["default"].strip():
        return
    if isinstance(template, str) and template.strip():
        return
    if isinstance(template, Mapping) and template:
        raise TaskError(
            f"chat_template=True, but the tokenizer {name} has named chat templates {sorted(map(str, template))} "
            "and no usable 'default' one, which a prompt is written with; set tokenizer.chat_template to the "
            "template to use (e.g. tokenizer.chat_template = tokenizer.chat_template['<name>']), or set "
            "chat_template=False in the task."
        )
    if template:
        raise TaskError(
            f"chat_template=True, but the chat template of the tokenizer {name} is {short_repr(template)} (of type "
            f"{type(template).__name__}), not a template's text; set tokenizer.chat_template to its Jinja text and "
            "save it with the model, or set chat_template=False in the task."
        )
    raise TaskError(
        f"chat_template=True, but the tokenizer {name} has no chat template; set chat_template=False in the task "
        "(the prompt is then used as it is)."
    )


def prompt_ids(tokenizer: Any, prompt: str, chat_template: bool) -> list[int]:
    """The prompt's token ids: with the tokenizer's special tokens, or inside its chat template."""
    if not chat_template:
        return list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    require_chat_template(tokenizer)
    import jinja2

    name = type(tokenizer).__name__
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
    # raise_exception() in the template, one that does not compile, or any error of the template's own code (1/0)
    except (jinja2.TemplateError, ArithmeticError, LookupError, TypeError, ValueError) as error:
        raise TaskError(
            f"chat_template=True, but the chat template of the tokenizer {name} fails on a prompt as one user turn "
            f"({type(error).__name__}: {str(error)[:200]}); set chat_template=False in the task and write the "
            "template's text into the prompts, or fix tokenizer.chat_template and save it with the model."
        ) from None
    if prompt.strip() not in text:  # the model would be trained on answers to a question it never reads
        raise TaskError(
            f"chat_template=True, but the chat template of the tokenizer {name} leaves the prompt out of what it "
            f"writes ({prompt!r} becomes {text[:120]!r}); set chat_template=False in the task, or fix "
            "tokenizer.chat_template to write each message's content and save it with the model."
        )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def check_instruction_tokenizer(spec: TaskSpec, tokenizer: Any) -> None:
    """What the encoding of every row of a generation task needs of its tokenizer, refused before the data loads:
    an end token, and with the task's chat_template a chat template (how it renders is judged on each row)."""
    end_token_id(tokenizer)
    if spec.chat_template:
        require_chat_template(tokenizer)


def instruction_example(prompt: list[int], answer: list[int], end: int, max_length: int) -> InstructionExample:
    """One encoded example (see the module docstring), at most `max_length` tokens."""
    target = [*answer, end]
    room = max_length - len(target)
    if len(prompt) <= room:
        kept_prompt, kept_target = prompt, target
    elif room >= 1:
        kept_prompt, kept_target = prompt[len(prompt) - room :], target
    else:  # one prompt token stays, so that the answer's first token has a position that predicts it
        kept_prompt, kept_target = prompt[-1:], target[: max_length - 1]
    ids = [*kept_prompt, *kept_target]
    labels = [IGNORE_INDEX] * len(kept_prompt) + kept_target
    return InstructionExample(ids, labels, len(ids) < len(prompt) + len(target), len(kept_target) < len(target))


def encode_instruction_batch(
    batch: Mapping[str, list], indices: list[int], spec: TaskSpec, tokenizer: Any, max_length: int, split: str
) -> dict:
    """A column batch (rows `indices` of split `split`) of a generation task as input_ids, attention_mask, labels
    and the two truncation flags."""
    end = end_token_id(tokenizer)
    prompts = fields.text_columns(batch, spec)[0]
    answers = fields.field_values(batch, spec.label_field)
    for row, prompt, answer in zip(indices, prompts, answers, strict=True):
        check_row_texts(spec, split, row, prompt, answer)
    answers = [str(a) for a in answers]
    answer_ids = tokenizer(answers, add_special_tokens=False)["input_ids"]
    examples = []
    for row, prompt, text, answer in zip(indices, prompts, answers, answer_ids, strict=True):
        ids = prompt_ids(tokenizer, prompt, spec.chat_template)
        if not ids:  # load_task_data refuses a blank prompt; data handed in some other way reaches this
            raise TaskError(
                f"task {spec.name!r}, split {split!r}, row {row}: the prompt in field {spec.text_fields[0]!r} "
                f"({prompt!r}) has no tokens and the tokenizer {type(tokenizer).__name__} adds no BOS token, so no "
                "position would predict the answer's first token; give the row a prompt or drop it."
            )
        if not answer:  # load_task_data refuses a blank answer; one of characters the tokenizer drops gets here
            raise TaskError(
                f"task {spec.name!r}, split {split!r}, row {row}: the answer in field {spec.label_field!r} "
                f"({text!r}) has no tokens for the tokenizer {type(tokenizer).__name__} "
                "(it drops every character of it), so the row would train only on the end token; write the answer "
                "or drop the row."
            )
        check_answer_end(answer, end, tokenizer, f"task {spec.name!r}, split {split!r}, row {row}", spec, text)
        examples.append(instruction_example(ids, list(answer), end, max_length))
    return {
        "input_ids": [e.input_ids for e in examples],
        "attention_mask": [[1] * len(e.input_ids) for e in examples],
        "labels": [e.labels for e in examples],
        PROMPT_CUT_COLUMN: [e.truncated for e in examples],
        ANSWER_CUT_COLUMN: [e.answer_cut for e in examples],
    }


def check_row_texts(spec: TaskSpec, split: str, row: int, prompt: Any, answer: Any) -> None:
    """A row's prompt must be text and its answer text or an integer (written out as text). load_task_data checks as
    much; data handed to encode_task some other way reaches the tokenizer (a ValueError of its own), or is trained
    on: a missing answer became the text 'None'."""
    where = f"task {spec.name!r}, split {split!r}, row {row}"
    if not isinstance(prompt, str):
        raise TaskError(
            f"{where}: the prompt in field {spec.text_fields[0]!r} is {short_repr(prompt)} (of type "
            f"{type(prompt).__name__}), not text; write it as a string, or drop the row"
        )
    if answer is None:
        raise TaskError(
            f"{where}: the answer in field {spec.label_field!r} is None, not text; write the answer as a string, or "
            "drop the row (load_task_data with drop_unlabelled=True drops rows without one)"
        )
    check_answer_type(spec, where, answer)
    # load_task_data refuses blank prompts and answers; rows handed in otherwise were trained on (an answer of
    # spaces or a newline the model learnt to give; with the chat template, an answer to no question)
    for role, field, text in (("prompt", spec.text_fields[0], prompt), ("answer", spec.label_field, str(answer))):
        if not text.strip():
            raise TaskError(
                f"{where}: the {role} in field {field!r} is blank ({text!r}); every row needs a prompt and an "
                f"answer with text (a separating space or newline belongs beside it, not alone); write the {role} or "
                "drop the row"
            )


def check_answer_type(spec: TaskSpec, where: str, answer: Any) -> None:
    """An answer (not None) must be text, or an integer (a CSV column of numbers is read as integers), written out
    as text. A float is refused: its text is not what the file wrote (a CSV column of integers with a gap is read as
    floats, 7 as '7.0'), so exact_match would score against other text. load_task_data and encode_task share it."""
    if isinstance(answer, bool) or not isinstance(answer, (str, int)):
        raise TaskError(
            f"{where}: the answer in field {spec.label_field!r} is {short_repr(answer)} (of type "
            f"{type(answer).__name__}), not text; write the answer as a string (in JSON, in quotes), or drop the row"
        )


def check_answer_end(answer: list[int], end: int, tokenizer: Any, where: str, spec: TaskSpec, text: str) -> None:
    """Refuse an answer whose own tokens hold the end token (its text written into the answer, "Paris.</s>"): the
    encoding appends the end token itself, so the model would learn to stop inside the answer, or to write the end
    twice, and no greedy generation (which stops at the first end) could ever be that answer for exact_match."""
    if end not in answer:
        return
    token = tokenizer.convert_ids_to_tokens(end)
    at = "ends with" if answer.index(end) == len(answer) - 1 else "holds"
    raise TaskError(
        f"{where}: the answer in field {spec.label_field!r} ({text[:120]!r}) {at} the end token {token!r} "
        f"(id {end}), which is appended to every answer already; the model would learn to stop there (or to write "
        f"it twice), and exact_match could never match the row; remove {token!r} from the answers."
    )


def prompt_length(labels: list[int]) -> int:
    """How many leading tokens of an encoded example are its prompt (labels -100 before the answer)."""
    for i, label in enumerate(labels):
        if label != IGNORE_INDEX:
            return i
    raise TaskError("an encoded generation example has no answer token (every label is -100)")
