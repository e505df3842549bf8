"""Rows of a user's own task files that used to load wrong or be refused in the wrong words: blank prompts and blank
sides of a pair, ragged CSV rows, "NaN" written as a label, and files with a header but no rows. Each is refused
(or dropped) with a TaskError naming the file, the row and the field, in every file format it can occur in."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from pathlib import Path

import datasets
import pytest
import tokenizers
from transformers import PreTrainedTokenizerFast

from adapterfusion.tasks import TaskError, TaskSpec, encode_task, instruction_task, load_task_data
from task_data import train_and_dev

JSONL_AND_CSV = ("d.jsonl", "d.jsonl.gz", "d.csv", "d.csv.gz")


def _write(path: Path, text: str) -> Path:
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _rows(name: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """`rows` as the text of file `name`: JSON lines, or CSV with every cell quoted (so a blank cell stays text)."""
    if ".jsonl" in name:
        return "".join(json.dumps(dict(zip(columns, row, strict=True))) + "\n" for row in rows)
    text = io.StringIO()
    csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows([columns, *rows])
    return text.getvalue()


def _own(tmp_path: Path, name: str, text: str, **fields) -> TaskSpec:
    """A task whose train and validation file is `name`, holding `text`."""
    path = _write(tmp_path / name, text)
    options = {"name": "own", "kind": "single", "text_fields": ("text",), "label_names": ("neg", "pos"), **fields}
    return TaskSpec(**options, data_files=train_and_dev(path))


def _refused(spec: TaskSpec, match: str) -> str:
    """The message of the TaskError loading `spec` raises; the files it read are left as they were."""
    files = [Path(path) for _, path in spec.data_files]
    before = [path.read_bytes() for path in files]
    with pytest.raises(TaskError, match=match) as info:
        load_task_data(spec)
    assert [path.read_bytes() for path in files] == before
    return str(info.value)


# -- 1. a generation row's prompt must hold text --------------------------------------------------------------


@pytest.mark.parametrize("name", JSONL_AND_CSV)
@pytest.mark.parametrize("prompt", ["", "   "])
def test_a_blank_prompt_is_refused_with_its_row_and_field(tmp_path, name, prompt) -> None:
    text = _rows(name, ("prompt", "answer"), [("q?", "a"), (prompt, "b")])
    if prompt == "" and ".csv" in name:  # an empty CSV cell is a missing value, refused in its own words
        match = r"row 1: field 'prompt' is missing or empty"
    else:
        match = rf"d\.{name.split('.', 1)[1]}, row 1: the prompt in field 'prompt' is blank \('{prompt}'\)"
    path = _write(tmp_path / name, text)
    message = _refused(instruction_task("qa", train_and_dev(path)), match)
    assert "write the prompt or drop the row" in message or "fill it in or drop the row" in message


def _bos_less_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer that, like GPT-2's, adds no BOS token: an empty prompt gives no token at all."""
    vocab = {"[UNK]": 0, "</s>": 1, "q?": 2, "a": 3, "b": 4}
    model = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    model.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    model.normalizer = tokenizers.normalizers.Replace("~", "")  # a character it drops, as BERT's drops U+200B
    return PreTrainedTokenizerFast(tokenizer_object=model, unk_token="[UNK]", eos_token="</s>")


def test_a_prompt_without_tokens_is_refused_by_the_encoding() -> None:
    """Data that skipped load_task_data reaches the encoding; with no BOS, nothing would predict the answer's first
    token (its label would sit at position 0, which the causal-LM loss never scores)."""
    tokenizer = _bos_less_tokenizer()
    assert tokenizer("", add_special_tokens=True)["input_ids"] == []
    spec = instruction_task("qa")
    good = datasets.Dataset.from_dict({"prompt": ["q?"], "answer": ["a"]})
    encoded, _ = encode_task(spec, good, tokenizer)
    assert encoded["input_ids"] == [[2, 3, 1]] and encoded["labels"] == [[-100, 3, 1]]
    bad = datasets.Dataset.from_dict({"prompt": ["q?", "~"], "answer": ["a", "b"]})
    with pytest.raises(TaskError, match=r"split 'data', row 1: the prompt in field 'prompt' \('~'\) has no tokens"):
        encode_task(spec, bad, tokenizer)
    blank = datasets.Dataset.from_dict({"prompt": ["q?", ""], "answer": ["a", "b"]})  # refused as load_task_data does
    with pytest.raises(TaskError, match=r"split 'data', row 1: the prompt in field 'prompt' is blank \(''\)"):
        encode_task(spec, blank, tokenizer)


# -- 2. every text of a single or pair row must hold text ------------------------------------------------------

PAIR = {"kind": "pair", "text_fields": ("a", "b")}


@pytest.mark.parametrize("name", JSONL_AND_CSV)
@pytest.mark.parametrize(("a", "b", "blank"), [("x", "  ", "['b']"), ("", "y", "['a']"), (" ", "\t", "['a', 'b']")])
def test_a_pair_row_with_a_blank_side_is_refused(tmp_path, name, a, b, blank) -> None:
    text = _rows(name, ("a", "b", "label"), [("p", "h", "pos"), (a, b, "neg")])
    if ".csv" in name and "" in (a, b):  # an empty CSV cell is a missing value, refused in its own words
        _refused(_own(tmp_path, name, text, **PAIR), r"row 1: field 'a' is missing or empty; fill it in")
        return
    message = _refused(_own(tmp_path, name, text, **PAIR), re.escape(f"row 1: field(s) {blank}"))
    assert "a pair task reads every one of ['a', 'b']" in message and "fill them in or drop the row" in message


def test_a_multiple_choice_context_piece_may_be_blank(tmp_path) -> None:
    """HellaSwag-style contexts are joined from pieces, one of which may be empty; only single/pair inputs and
    prompts need every field."""
    rows = [
        {"q": "", "r": "the ball", "opts": ["x", "y"], "label": 0},
        {"q": "a", "r": "b", "opts": ["x", "y"], "label": 1},
    ]
    text = "".join(json.dumps(row) + "\n" for row in rows)
    choice = {"kind": "multiple_choice", "text_fields": ("q", "r"), "choice_fields": ("opts",), "label_names": ()}
    spec = _own(tmp_path, "d.jsonl", text, **choice, num_choices=2)
    assert len(load_task_data(spec).splits["train"]) == 2


def test_a_multiple_choice_row_of_identical_choices_is_refused(tmp_path) -> None:
    """Choices no model can tell apart (the same text, up to case and spacing) make the label arbitrary: scored right
    only as choice 0, never learnt. Two equal choices beside a third still tell something apart and pass."""
    rows = [{"q": "a", "opts": ["x", "y", "x"], "label": 1}, {"q": "b", "opts": ["Yes ", "yes", " yes"], "label": 2}]
    text = "".join(json.dumps(row) + "\n" for row in rows)
    choice = {"kind": "multiple_choice", "text_fields": ("q",), "choice_fields": ("opts",), "label_names": ()}
    message = _refused(_own(tmp_path, "d.jsonl", text, **choice, num_choices=3), "row 1: all 3 choices")
    assert "are the same text 'Yes '" in message and "drop the row" in message
    spec = _own(tmp_path, "e.jsonl", "".join(json.dumps(row) + "\n" for row in rows[:1] * 2), **choice, num_choices=3)
    assert len(load_task_data(spec).splits["train"]) == 2


# -- 3. a CSV row must have one cell per header column ---------------------------------------------------------


@pytest.mark.parametrize("name", ["d.csv", "d.csv.gz"])
@pytest.mark.parametrize(
    ("text", "line", "row", "cells"),
    [
        ("text,label\na,pos\nb\nc,neg\n", 3, 1, 1),  # pandas filled the label in as missing: "no gold label"
        ("text,label\na,pos\nb, c,neg\n", 3, 1, 3),  # pandas: "could not be parsed as CSV"
        ("text,label\na,pos,x\nb,neg,y\n", 2, 0, 3),  # pandas made column 1 an index: "label 'x' is not one of"
        ('text,label\n"a,\nb",pos\n\n   \nc,neg,\n', 6, 1, 3),  # a quoted line break and skipped blank lines
    ],
)
def test_a_ragged_csv_row_is_named_by_line_and_cell_count(tmp_path, name, text, line, row, cells) -> None:
    message = _refused(
        _own(tmp_path, name, text),
        rf"{name}', line {line} \(row {row}\): {cells} cell\(s\) where the header has 2 columns \['text', 'label'\]",
    )
    assert "one cell per column" in message


def test_blank_csv_lines_are_skipped_as_pandas_skips_them(tmp_path) -> None:
    data, _ = load_task_data(_own(tmp_path, "d.csv", "text,label\r\na,pos\r\n\r\n  \t\r\nb,neg\r\n"))
    assert data["train"]["text"] == ["a", "b"]


def test_a_csv_cell_over_the_csv_modules_limit_is_read_and_the_limit_restored(tmp_path) -> None:
    limit = csv.field_size_limit()
    long = "word " * 40_000  # 200 KB, over the csv module's 128 KiB default
    data, _ = load_task_data(_own(tmp_path, "d.csv", f"text,label\n{long},pos\nb,neg\n"))
    assert data["train"]["text"][0] == long and csv.field_size_limit() == limit


# -- 4. NaN written as a classification label is a missing label ----------------------------------------------


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("d.csv", "text,label\na,pos\nb,NaN\nc,neg\n"),
        ("d.csv.gz", "text,label\na,pos\nb,nan\nc,neg\n"),
        ("d.csv", 'text,label\na,pos\nb," "\nc,neg\n'),
        ("d.csv", "text,label\na,pos\nb,\nc,neg\n"),
        ("d.jsonl", '{"text": "a", "label": "pos"}\n{"text": "b", "label": "NaN"}\n{"text": "c", "label": "neg"}\n'),
        ("d.jsonl.gz", '{"text": "a", "label": 1}\n{"text": "b", "label": NaN}\n{"text": "c", "label": 0}\n'),
    ],
)
def test_a_nan_label_is_a_missing_label_at_its_row(tmp_path, name, text) -> None:
    message = _refused(_own(tmp_path, name, text), r"row 1: no gold label in field 'label' \(1 such rows")
    assert "drop_unlabelled=True" in message and "not one of" not in message
    data, info = load_task_data(_own(tmp_path, name, text, drop_unlabelled=True))
    assert data["train"]["label"] == [1, 0] and info.splits[0].dropped_unlabelled == 1


def test_a_nan_label_is_a_label_where_the_task_names_it_so(tmp_path) -> None:
    spec = _own(
        tmp_path, "d.csv", "text,label\na,nan\nb,pos\n", label_names=("nan", "pos"), label_values=("nan", "pos")
    )
    assert load_task_data(spec).splits["train"]["label"] == [0, 1]


@pytest.mark.parametrize("name", JSONL_AND_CSV)
@pytest.mark.parametrize(
    "fields", [{"label_names": ("-1", "1")}, {"label_names": ("neg", "pos"), "label_values": (-1, 1)}]
)
def test_a_minus_one_label_is_a_class_where_the_task_names_it_so(tmp_path, name, fields) -> None:
    """A polarity task's -1 was read as GLUE's hidden label: every such row refused, or dropped (a whole class)."""
    text = _rows(name, ("text", "label"), [("a", "-1"), ("b", "1"), ("c", "-1")])
    if ".jsonl" in name:
        text = text.replace('"-1"', "-1").replace('"1"', "1")
    data, info = load_task_data(_own(tmp_path, name, text, drop_unlabelled=True, **fields))
    assert data["train"]["label"] == [0, 1, 0] and info.splits[0].dropped_unlabelled == 0


def test_labels_listed_for_an_unknown_label_leave_out_nan(tmp_path) -> None:
    message = _refused(_own(tmp_path, "d.csv", "text,label\na,NaN\nb,maybe\n"), r"row 1: label 'maybe'")
    assert "holds 1 distinct labels: ['maybe']" in message


# -- 5. a file with a header (or an empty list) and no rows ---------------------------------------------------


def _datasets_says(monkeypatch, words: str) -> None:
    """`datasets.load_dataset` fails with `words`, so a check that read its message would miss."""

    def load_dataset(*args, **kwargs):
        raise ValueError(words)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("d.csv", "text,label\n"),
        ("d.csv.gz", "text,label\n"),
        ("d.csv", "text,label\r\n\r\n   \n"),
        ("d.json", "[ ]\n"),
    ],
)
@pytest.mark.parametrize("reworded", [False, True])
def test_a_file_without_rows_is_refused_whatever_datasets_says(tmp_path, monkeypatch, name, text, reworded) -> None:
    spec = _own(tmp_path, name, text)
    if reworded:
        _datasets_says(monkeypatch, "some other wording in another datasets release")
    _refused(spec, rf"{name}' has no rows \(only a header, or an empty list\); it must hold at least one example")


def test_a_long_blank_start_is_not_an_empty_file(tmp_path) -> None:
    """Only the first 4096 bytes used to be looked at: a file starting with more whitespace was called empty."""
    data, _ = load_task_data(
        _own(tmp_path, "d.jsonl", " " * 5000 + '\n{"text": "a", "label": "pos"}\n{"text": "b", "label": "neg"}\n')
    )
    assert data["train"]["text"] == ["a", "b"]
    _refused(_own(tmp_path, "e.jsonl", " \n" * 5000), r"e\.jsonl' is empty")
