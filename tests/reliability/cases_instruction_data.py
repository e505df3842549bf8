"""Bad-input cases at one boundary, instruction and generation tasks: their definitions, chat templates, prompts and
answers as tokenised, and their scoring."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import datasets
import torch
import transformers

import adapterfusion as af
from adapterfusion.answer_scoring import score_answers, score_generation
from adapterfusion.errors import ConfigError
from adapterfusion.scoring import predict
from adapterfusion.tasks import TaskCollator, TaskError, encode_task, instruction_task, load_task_data
from catalogue import Action, BadInput
from tiny_decoders import randomise_pieces, tiny_decoder, tiny_decoder_config
from tiny_models import tiny_encoder

B = BadInput
GROUP = "instruction data"
ROWS = {"prompt": ["what colour is the sky ?", "what is two plus two, tell me now ?"], "answer": [" blue", " four"]}
END, PAD = 102, 0  # the shipped tokenizer's [SEP], which ends its answers, and [PAD]


# ---- helpers -------------------------------------------------------------------------------------------------------
def _tokenizer() -> Any:
    """The shipped MiniLM tokenizer (WordPiece; answers end with [SEP])."""
    return transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())


def _lm(model_type: str = "llama", head: bool = False) -> af.AdaptedModel:
    """A tiny random `model_type` of the shipped tokenizer's vocabulary with adapter 'a' active (and head 'h')."""
    model = af.wrap(tiny_decoder(model_type, vocab_size=_tokenizer().vocab_size))
    model.add_adapter("a")
    model.activate(adapter="a")
    if head:
        model.add_head("h", af.ClassificationHead(num_labels=2))
        model.activate(adapter="a", head="h")
    return model


def _batch() -> dict[str, torch.Tensor]:
    """ROWS encoded for an instruction task and collated, padded on the right."""
    tokenizer = _tokenizer()
    encoded = encode_task(instruction_task("answers"), datasets.Dataset.from_dict(ROWS), tokenizer, 32).splits
    return TaskCollator(tokenizer, padding_side="right")(list(encoded))


def _encoding(rows: dict[str, list], chat_template: Any = None) -> Callable[[Path], Action]:
    """encode_task(<instruction task>, Dataset.from_dict(rows), <shipped tokenizer>), the tokenizer given
    `chat_template` (and the task chat_template=True) unless None."""

    def prepare(folder: Path) -> Action:
        tokenizer = _tokenizer()
        if chat_template is not None:
            tokenizer.chat_template = chat_template
        spec = instruction_task("answers", chat_template=chat_template is not None)
        return lambda: encode_task(spec, datasets.Dataset.from_dict(rows), tokenizer, 32)

    return prepare


def _answers(
    change: Callable[[dict[str, torch.Tensor]], None] = lambda batch: None, **settings: Any
) -> Callable[[Path], Action]:
    """score_answers(<tiny Llama>, [<ROWS collated, then `change`d>], END, PAD, exact_match=True, **settings)."""

    def prepare(folder: Path) -> Action:
        model, batch = _lm(), _batch()
        change(batch)
        arguments = {"end_token_id": END, "pad_token_id": PAD, "exact_match": True, **settings}
        return lambda: score_answers(model, [batch], **arguments)

    return prepare


def _labels_as_input_ids(batch: dict[str, torch.Tensor]) -> None:
    """labels = input_ids, -100 on the padding: the usual causal-LM labels, which label the prompt too."""
    batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)


def _labels_shifted(batch: dict[str, torch.Tensor]) -> None:
    """labels shifted left by one by hand, as if the loss did not shift them itself."""
    shifted = torch.full_like(batch["labels"], -100)
    shifted[:, :-1] = batch["labels"][:, 1:]
    batch["labels"] = shifted


def _collating(*features: dict[str, Any]) -> Callable[[Path], Action]:
    """TaskCollator(<shipped tokenizer>, padding_side='right')(features)."""
    return lambda folder: lambda: TaskCollator(_tokenizer(), padding_side="right")(list(features))


def _collating_with(tokenizer: Any) -> Callable[[Path], Action]:
    """TaskCollator(tokenizer) of two generation examples of 3 and 2 tokens."""
    features = [{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}, {"input_ids": [5, 6], "labels": [-100, 6]}]
    return lambda folder: lambda: TaskCollator(tokenizer)(features)


def _tokenizer_padding(side: str) -> Any:
    tokenizer = _tokenizer()
    tokenizer.padding_side = side
    return tokenizer


def _exact_match_left_padded(folder: Path) -> Action:
    """exact_match of one row whose answer is the model's own greedy continuation, left-padded beside a longer row."""
    torch.manual_seed(0)
    model = _lm()
    prompts = [
        [101, 2054, 6120, 2003, 1996, 3712, 1029, 102],
        [101, 2054, 2003, 2048, 4606, 2048, 1010, 2425, 2033, 2085, 3531, 1029, 102],
    ]
    answers = []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        new = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False)
        answers.append(new[0, len(prompt) :].tolist())
    end = answers[0][-1]  # the first row's answer ends with its end token
    width = max(len(p) + len(a) for p, a in zip(prompts, answers, strict=True))
    ids, labels, mask = (torch.full((2, width), value) for value in (PAD, -100, 0))
    for row, (prompt, answer) in enumerate(zip(prompts, answers, strict=True)):
        start = width - len(prompt) - len(answer)
        ids[row, start:] = torch.tensor(prompt + answer)
        labels[row, start + len(prompt) :] = torch.tensor(answer)
        mask[row, start:] = 1
    batch = {"input_ids": ids[:1], "attention_mask": mask[:1], "labels": labels[:1]}  # the first row, left-padded

    def action() -> str:
        scores = score_answers(model, [batch], end_token_id=end, pad_token_id=PAD, exact_match=True)
        return f"the left-padded row's own greedy answer: exact_match={scores['exact_match']:.1f}"

    return action


def _nan_adapter(folder: Path) -> Action:
    """score_answers of a tiny Llama whose active adapter's first weight holds NaN (a diverged checkpoint)."""
    model, batch = _lm(), _batch()
    with torch.no_grad():
        next(p for name, p in model.named_parameters() if ".adapters." in name).fill_(float("nan"))
    return lambda: score_answers(model, [batch], END, PAD, exact_match=True)


def _routed_rows(block: bool) -> Callable[[Path], Action]:
    """score_answers(exact_match=True) of two rows whose one-token answers are each the greedy answer of its own
    adapter (a or b, random weights), routed by the batch's adapter_names (`block`: by an active BatchSplit), the
    end token the first row's answer: its row matches, the other row (an answer without that end) cannot."""

    def prepare(folder: Path) -> Action:
        torch.manual_seed(0)
        model = _lm()
        model.add_adapter("b")
        randomise_pieces(model, 0)
        prompts = [[101, 2054, 2003, 2048, 4606, 2048, 1010, 2425, 2033, 2085, 3531, 1029, 102], [101, 2054, 102]]
        ids, labels, mask = (torch.full((2, 14), value) for value in (PAD, -100, 0))
        for row, (prompt, name) in enumerate(zip(prompts, ("a", "b"), strict=True)):
            model.activate(adapter=name)
            alone = torch.tensor([prompt])
            answer = model.generate(input_ids=alone, attention_mask=torch.ones_like(alone), max_new_tokens=1)[0, -1]
            ids[row, : len(prompt) + 1] = torch.tensor([*prompt, int(answer)])
            labels[row, len(prompt)], mask[row, : len(prompt) + 1] = answer, 1
        batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
        if block:
            model.activate(adapter=af.BatchSplit("a", "b", batch_sizes=[1, 1]))
        else:
            model.activate(adapter="a")
            batch["adapter_names"] = ["a", "b"]

        def action() -> str:
            scores = score_answers(model, [batch], int(labels[0, 13]), PAD, exact_match=True)
            return f"token_accuracy={scores['token_accuracy']:.1f}, exact_match={scores['exact_match']:.1f}"

        return action

    return prepare


def _predict_routed(head_names: list[str] | None) -> Callable[[Path], Action]:
    """predict(<tiny BERT with random adapters a and b>, [<2 rows, adapter_names=['a', 'b'] (and head_names)>]),
    compared with each row predicted with its adapter activated alone."""

    def prepare(folder: Path) -> Action:
        model = af.wrap(tiny_encoder("bert"))
        for name in ("a", "b"):
            model.add_adapter(name)
        model.add_head("h2", af.ClassificationHead(num_labels=2))
        model.add_head("h3", af.ClassificationHead(num_labels=3))
        randomise_pieces(model, 0)
        ids = torch.tensor([[1, 5, 6, 2], [1, 7, 8, 2]])
        batch: dict[str, Any] = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "adapter_names": ["a", "b"]}
        if head_names is not None:
            batch["head_names"] = head_names
        alone = []
        for row, name in enumerate(("a", "b")):
            model.activate(adapter=name, head="h2")
            alone.append(predict(model, [{"input_ids": ids[row : row + 1]}]).logits[0])
        model.activate(adapter="a", head="h2")

        def action() -> str:
            routed = predict(model, [batch]).logits
            same = all(abs(routed[row] - alone[row]).max() < 1e-5 for row in range(2))
            return f"each routed row as predicted alone: {same}"

        return action

    return prepare


def _scoring(
    task: Any, model_type: str = "llama", head: bool = False, wrapped: bool = True
) -> Callable[[Path], Action]:
    """score_generation(<tiny model_type>, [<ROWS collated>], task, <shipped tokenizer>); `wrapped` False: the
    transformers model itself."""

    def prepare(folder: Path) -> Action:
        model: Any = _lm(model_type, head)
        model, batch = (model if wrapped else model.model), _batch()
        return lambda: score_generation(model, [batch], task, _tokenizer())

    return prepare


def _bare_decoder(folder: Path) -> Action:
    """score_answers of a wrapped LlamaModel, the decoder without its LM head (its output has no logits)."""
    config = tiny_decoder_config("llama", vocab_size=_tokenizer().vocab_size)
    model = af.wrap(transformers.LlamaModel(config))
    model.add_adapter("a")
    model.activate(adapter="a")
    batch = _batch()
    return lambda: score_answers(model, [batch], END, PAD)


_CHAT = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}<|assistant|>"


def _chat_file(folder: Path) -> Callable[[], Any]:
    """A chat-format JSON lines file (one row of user and assistant turns) as a generation task's train split."""
    turns = [{"role": "user", "content": "2+2="}, {"role": "assistant", "content": "4"}]
    (folder / "train.jsonl").write_text(json.dumps({"messages": turns}) + "\n")
    return lambda: load_task_data(instruction_task("chat", data_files={"train": str(folder / "train.jsonl")}))


CASES: tuple[BadInput, ...] = (
    # ---- rows handed to encode_task ------------------------------------------------------------------------------
    B(
        "instruction-encode-answer-blank",
        GROUP,
        "encode_task(<generation task>, Dataset whose answer is '\\n') (was encoded and trained on with a tokenizer "
        "that keeps whitespace, the model taught to answer a newline; an empty answer was said to be 'characters the "
        "tokenizer drops'), where load_task_data refuses the same row",
        TaskError,
        ("row 1", "the answer in field 'answer' is blank ('\\n')", "write the answer or drop the row"),
        _encoding({"prompt": ["2+2=", "3+3="], "answer": ["4", "\n"]}),
    ),
    B(
        "instruction-encode-answer-column-other-name",
        GROUP,
        "encode_task(<generation task over 'answer'>, Dataset of columns prompt and label) (was told to 'load the "
        "data with load_task_data so labels are checked and converted to ids', a classification task's words)",
        TaskError,
        ("no 'answer' column, which holds each row's answer text", "['prompt', 'label']", "answer_field="),
        _encoding({"prompt": ["2+2="], "label": ["4"]}),
    ),
    B(
        "instruction-encode-prompt-blank-chat-template",
        GROUP,
        "encode_task(<generation task with chat_template=True>, Dataset whose prompt is ' ') (was encoded: the chat "
        "template's turn markers around nothing, an answer trained to no question), where load_task_data refuses the "
        "same row",
        TaskError,
        ("row 0", "the prompt in field 'prompt' is blank (' ')", "write the prompt or drop the row"),
        _encoding({"prompt": [" "], "answer": ["4"]}, chat_template=_CHAT),
    ),
    B(
        "instruction-task-option-misspelled",
        GROUP,
        "instruction_task('qa', chat_templat=True) (was TypeError: TaskSpec.__init__() got an unexpected keyword "
        "argument 'chat_templat', from the dataclass)",
        TaskError,
        ("instruction_task('qa') has no option ['chat_templat']", "Did you mean 'chat_template'?", "max_length"),
        lambda folder: lambda: instruction_task("qa", chat_templat=True),
    ),
    B(
        "instruction-chat-format-file",
        GROUP,
        "load_task_data(instruction_task('chat', data_files={'train': <JSON lines of {\"messages\": [turns]}>})) "
        "(was only told 'missing field(s) [prompt, answer]; the file has [messages]', nothing of what to write)",
        TaskError,
        ("missing field(s) ['prompt', 'answer']", "holds chat turns in 'messages'", "user turn as 'prompt'"),
        _chat_file,
    ),
    # ---- collating ----------------------------------------------------------------------------------------------
    B(
        "instruction-collate-rows-of-one-row",
        GROUP,
        "TaskCollator of generation examples made with return_tensors='pt', input_ids and labels each [1, seq] (was "
        "'are not integers (ValueError: could not broadcast input array from shape (3,) into shape (1,))')",
        TaskError,
        ("labels of row 0", "values of shape [1, 3]", "take its row [0]"),
        _collating({"input_ids": torch.tensor([[5, 6, 7]]), "labels": torch.tensor([[-100, 6, 7]])}),
    ),
    B(
        "instruction-collate-ids-bool",
        GROUP,
        "TaskCollator of a generation example whose labels are bools [False, True, True] (was collated as the token "
        "ids 0, 1, 1 without a word)",
        TaskError,
        ("labels of row 0", "values of dtype bool, not integer ids"),
        _collating({"input_ids": [5, 6, 7], "labels": [False, True, True]}),
    ),
    B(
        "instruction-collate-tokenizer-name",
        GROUP,
        "TaskCollator('gpt2'), a model's name where the tokenizer belongs (was an AttributeError at the first batch: "
        "'str' object has no attribute 'pad_token_id')",
        TaskError,
        ("tokenizer='gpt2' is not a tokenizer", "AutoTokenizer.from_pretrained"),
        lambda folder: lambda: TaskCollator("gpt2"),
    ),
    B(
        "instruction-collate-tokenizer-padding-side-capitalised",
        GROUP,
        "TaskCollator(<tokenizer whose padding_side is 'Left'>) of examples of 3 and 2 tokens (was padded on the "
        "right without a word, where the argument padding_side='Left' is refused)",
        TaskError,
        ("the tokenizer's padding_side is 'Left', not a padding side", "'left' or 'right'"),
        lambda folder: _collating_with(_tokenizer_padding("Left"))(folder),
    ),
    # ---- chat templates ------------------------------------------------------------------------------------------
    B(
        "instruction-chat-template-named-without-default",
        GROUP,
        "a generation task with chat_template=True, the tokenizer's chat_template a dict of named templates with no "
        "'default' (was a ValueError from transformers at the first row)",
        TaskError,
        ("named chat templates ['tool_use']", "no usable 'default' one", "tokenizer.chat_template = "),
        _encoding({"prompt": ["2+2="], "answer": ["4"]}, chat_template={"tool_use": _CHAT}),
    ),
    B(
        "instruction-chat-template-a-number",
        GROUP,
        "a generation task with chat_template=True, the tokenizer's chat_template set to 5 in memory (was a "
        'TypeError from jinja2: "Can\'t compile non template nodes")',
        TaskError,
        ("chat template of the tokenizer BertTokenizer is 5 (of type int)", "its Jinja text"),
        _encoding({"prompt": ["2+2="], "answer": ["4"]}, chat_template=5),
    ),
    B(
        "instruction-chat-template-python-error",
        GROUP,
        "a generation task with chat_template=True whose template divides by zero as it renders (was a raw "
        "ZeroDivisionError from the template's code; only jinja2's own errors were caught)",
        TaskError,
        ("fails on a prompt as one user turn (ZeroDivisionError", "fix tokenizer.chat_template"),
        _encoding({"prompt": ["2+2="], "answer": ["4"]}, chat_template=_CHAT + "{{ 1 / 0 }}"),
    ),
    # ---- scoring -------------------------------------------------------------------------------------------------
    B(
        "instruction-exact-match-left-padded",
        GROUP,
        "score_answers(..., exact_match=True) of a left-padded batch whose answer is the model's own greedy "
        "continuation (not an error; was exact_match 0.0: the padding was read as prompt tokens, attended, and the "
        "answer generated after it)",
        None,
        ("exact_match=1.0",),
        _exact_match_left_padded,
    ),
    B(
        "instruction-score-nan-logits",
        GROUP,
        "score_answers(<tiny Llama whose adapter holds NaN>, ...) (was answer_loss and perplexity nan, token_accuracy "
        "and exact_match 0.0, recorded as a run's result; QA and class outputs were refused alike)",
        TaskError,
        ("logits hold NaN (or +inf) at the answer tokens of 2 of 2 rows", "torch.isfinite"),
        _nan_adapter,
    ),
    B(
        "instruction-score-adapter-names",
        GROUP,
        "score_answers(<batch routing its rows with adapter_names=['a', 'b']>, exact_match=True) (not an error; was "
        "every row run with the active adapter a: the list was dropped as not a tensor, token_accuracy 0.5)",
        None,
        ("token_accuracy=1.0, exact_match=0.5",),
        _routed_rows(block=False),
    ),
    B(
        "instruction-score-batch-split-exact-match",
        GROUP,
        "score_answers(exact_match=True) with BatchSplit('a', 'b', batch_sizes=[1, 1]) active (was exact_match 0.0 "
        "where row 0 matches: the rows generate regrouped by length, and the split gave row 1 adapter a)",
        ConfigError,
        ("BatchSplit block routes rows by their place in the batch", "adapter_names=[...]"),
        _routed_rows(block=True),
    ),
    B(
        "instruction-score-labels-int32",
        GROUP,
        "score_answers(<batch whose labels are int32>) (not an error, as the model's own loss takes them; was a "
        "RuntimeError from cross_entropy: 'expected target dtype to be Long or Byte, but got Int')",
        None,
        ("'token_accuracy'",),
        _answers(lambda batch: batch.update(labels=batch["labels"].int()), exact_match=False),
    ),
    B(
        "instruction-score-input-ids-list",
        GROUP,
        "score_answers(<batch whose input_ids are lists, not a tensor>) (was the model's 'takes input_ids or "
        "inputs_embeds ...; got neither': the lists were dropped as not tensors)",
        ConfigError,
        ("a batch's input_ids is a list, not a tensor", "TaskCollator"),
        _answers(lambda batch: batch.update(input_ids=batch["input_ids"].tolist())),
    ),
    B(
        "instruction-predict-adapter-names",
        GROUP,
        "predict(model, [<batch with adapter_names=['a', 'b']>]) with adapter a active (not an error; was every row "
        "predicted with adapter a: the list was dropped as not a tensor)",
        None,
        ("each routed row as predicted alone: True",),
        _predict_routed(head_names=None),
    ),
    B(
        "instruction-predict-head-names-of-other-sizes",
        GROUP,
        "predict(model, [<batch with head_names=['h2', 'h3']>]), heads of 2 and 3 labels (was every row predicted "
        "with the active head h2: the list was dropped as not a tensor)",
        ConfigError,
        ("heads of different output sizes", "predict the rows of each head apart"),
        _predict_routed(head_names=["h2", "h3"]),
    ),
    B(
        "instruction-score-labels-are-input-ids",
        GROUP,
        "score_answers(<batch whose labels are input_ids, the prompt labelled too>, exact_match=True) (was a "
        "ConfigError of another call: 'input_ids of shape (2, 0) is empty ... skip empty batches'; without "
        "exact_match the prompt was scored as answer, silently)",
        ConfigError,
        ("row 0 has no prompt token before its first answer label", "-100 on the prompt's tokens"),
        _answers(_labels_as_input_ids),
    ),
    B(
        "instruction-score-labels-shifted",
        GROUP,
        "score_answers(<batch whose labels are shifted left by one by hand>) (was scored silently, each answer token "
        "against the one after it)",
        ConfigError,
        ("row 0: the label at position 7 is 2630 but the token there is 102", "not shifted by one"),
        _answers(_labels_shifted, exact_match=False),
    ),
    B(
        "instruction-score-end-token-none",
        GROUP,
        "score_answers(..., end_token_id=None, exact_match=True) (was exact_match 0.0 silently: generation never "
        "stopped, and no answer ends with None)",
        ConfigError,
        ("end_token_id=None must be a token id (an integer)",),
        _answers(end_token_id=None),
    ),
    B(
        "instruction-score-pad-token-none",
        GROUP,
        "score_answers(..., pad_token_id=None, exact_match=True), a tokenizer's pad_token_id of a decoder without one "
        "(was a TypeError from torch: new_full() ... must be Number, not NoneType)",
        ConfigError,
        ("pad_token_id=None must be a token id (an integer)",),
        _answers(pad_token_id=None),
    ),
    B(
        "instruction-score-exact-match-text",
        GROUP,
        "score_answers(..., exact_match='no') (was taken as true: every row generated)",
        ConfigError,
        ("exact_match='no' must be True or False",),
        _answers(exact_match="no"),
    ),
    B(
        "instruction-score-generation-task-name",
        GROUP,
        "score_generation(model, batches, 'rte', tokenizer): a task's name, and of a classification task (was an "
        "AttributeError: 'str' object has no attribute 'metrics')",
        TaskError,
        ("task 'rte' is a 'pair' task, not a generation task", "predict and score"),
        _scoring("rte"),
    ),
    B(
        "instruction-score-head-active",
        GROUP,
        "score_generation(<tiny Llama with a classification head active>, ...) (was told label 102 is outside 'the "
        "model's 2' tokens and to encode with this model's tokenizer)",
        ConfigError,
        ("head 'h' is active", "head=None"),
        _scoring(instruction_task("answers"), head=True),
    ),
    B(
        "instruction-score-model-not-wrapped",
        GROUP,
        "score_generation(<the LlamaForCausalLM itself, not af.wrap's>, ...) (was an AttributeError: "
        "'LlamaForCausalLM' object has no attribute 'inference_cache'; predict() alike)",
        ConfigError,
        ("the model is a LlamaForCausalLM, not a wrapped model", "af.wrap("),
        _scoring(instruction_task("answers"), wrapped=False),
    ),
    B(
        "instruction-score-bare-decoder",
        GROUP,
        "score_answers(<af.wrap(LlamaModel)>, the decoder without its LM head) (was an AttributeError from its "
        "output: no attribute 'logits')",
        ConfigError,
        ("the model answers no logits", "AutoModelForCausalLM"),
        _bare_decoder,
    ),
    B(
        "instruction-score-encoder-decoder",
        GROUP,
        "score_generation(<tiny BART>, <prompt + answer batches>, ...) (was scored silently: BART's encoder read the "
        "answers it was scored on; T5 failed asking for decoder inputs)",
        ConfigError,
        ("the model is an encoder-decoder (BartForConditionalGeneration)", "score a decoder"),
        _scoring(instruction_task("answers"), model_type="bart"),
    ),
)
