"""Read the two data formats of span tasks that are not one JSON object per example: SQuAD's JSON (articles >
paragraphs > questions) and CoNLL's text format (one word per line, its tag in the last column, a blank line between
sentences). Each becomes a `datasets.Dataset` in the field layout of the task's Hub copy, so one TaskSpec reads the
Hub, these files and JSON-lines files alike:

* SQuAD: id, title, context, question, answers = {"text": [...], "answer_start": [...]} (rajpurkar/squad);
* CoNLL: id, tokens, ner_tags (tag names; eriktks/conll2003 holds their ids). CoNLL-2003's own files write IOB1 (B- only
  between two adjacent entities of one type); their tags are rewritten as IOB2, which the Hub copy holds, so a model
  learns the same targets from both (tasks/tagging_metrics.py scores both alike).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.tagging_metrics import OUTSIDE, iob1_to_iob2

CONLL_EXTENSIONS = (".conll", ".txt", ".conll.gz", ".txt.gz")
DOCUMENT_START = "-DOCSTART-"
_SQUAD_START = re.compile(rb'^\s*\{\s*"(data|version)"\s*:')


def _read_text(path: Path) -> str:
    try:
        raw = (gzip.open if path.name.lower().endswith(".gz") else open)(path, "rb").read()
        return raw.decode("utf-8")
    except (OSError, EOFError) as err:
        raise TaskError(f"data file {str(path)!r} cannot be read ({err}); is it a valid (gzip) file?") from err
    except UnicodeDecodeError as err:
        raise TaskError(f"data file {str(path)!r} is not UTF-8 text ({err.reason} at byte {err.start}).") from err


def is_conll_file(path: Path) -> bool:
    return path.name.lower().endswith(CONLL_EXTENSIONS)


def is_squad_file(path: Path) -> bool:
    """Whether a .json file starts like SQuAD's own files ({"data": [...], "version": ...}) rather than a JSON list
    or JSON lines of examples."""
    if not path.name.lower().removesuffix(".gz").endswith(".json"):
        return False
    try:
        with (gzip.open if path.name.lower().endswith(".gz") else open)(path, "rb") as handle:
            return bool(_SQUAD_START.match(handle.read(256)))
    except (OSError, EOFError):
        return False


def _squad_rows(document: Any, path: Path) -> dict[str, list[Any]]:
    where = f"SQuAD file {str(path)!r}"
    articles = document.get("data") if isinstance(document, dict) else None
    if not isinstance(articles, list):
        raise TaskError(f"{where}: no 'data' list of articles; SQuAD files are {{'data': [...], 'version': '1.1'}}.")
    columns: dict[str, list[Any]] = {"id": [], "title": [], "context": [], "question": [], "answers": []}
    for a, article in enumerate(articles):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise TaskError(
                f"{where}: article {a} has no 'paragraphs' list. A .json file of {{'data': [...]}} is read as SQuAD "
                "(articles of paragraphs of questions); if its 'data' list holds one object per example, write that "
                "list alone as the file (a JSON list of objects) or one object per line (JSON lines)."
            )
        for p, paragraph in enumerate(paragraphs):
            context = paragraph.get("context") if isinstance(paragraph, dict) else None
            questions = paragraph.get("qas") if isinstance(paragraph, dict) else None
            if not isinstance(context, str) or not isinstance(questions, list):
                raise TaskError(f"{where}: article {a}, paragraph {p} needs a 'context' text and a 'qas' list.")
            for q, qa in enumerate(questions):
                answers = qa.get("answers") if isinstance(qa, dict) else None
                if not isinstance(answers, list) or not all(isinstance(x, dict) for x in answers):
                    raise TaskError(f"{where}: article {a}, paragraph {p}, question {q} needs an 'answers' list.")
                columns["id"].append(str(qa.get("id", f"{a}-{p}-{q}")))
                columns["title"].append(str(article.get("title", "")))
                columns["context"].append(context)
                columns["question"].append(qa.get("question"))
                columns["answers"].append(
                    {"text": [x.get("text") for x in answers], "answer_start": [x.get("answer_start") for x in answers]}
                )
    if not columns["id"]:
        raise TaskError(f"{where} holds no questions; it must hold at least one example.")
    return columns


def read_squad_file(path: Path):
    """A SQuAD-format JSON file as one row per question (the Hub's layout)."""
    import datasets

    try:
        document = json.loads(_read_text(path))
    except json.JSONDecodeError as err:
        raise TaskError(f"SQuAD file {str(path)!r}, line {err.lineno}: {err.msg} (column {err.colno}).") from err
    return datasets.Dataset.from_dict(_squad_rows(document, path))


def _conll_sentences(text: str, path: Path) -> tuple[list[list[str]], list[list[str]]]:
    sentences: list[list[str]] = []
    tags: list[list[str]] = []
    words: list[str] = []
    labels: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        columns = line.split()
        if not columns or columns[0] == DOCUMENT_START:
            if words:
                sentences.append(words)
                tags.append(labels)
            words, labels = [], []
            continue
        if len(columns) < 2:
            raise TaskError(
                f"CoNLL file {str(path)!r}, line {number}: {line.strip()!r} has no tag; each line is a word and its "
                "tag (CoNLL-2003: word, POS, chunk and NER tag), separated by spaces, a blank line between sentences."
            )
        words.append(columns[0])
        labels.append(columns[-1])
    if words:
        sentences.append(words)
        tags.append(labels)
    return sentences, tags


def read_conll_file(path: Path):
    """A CoNLL text file as one row per sentence: tokens and ner_tags (names, IOB2)."""
    import datasets

    sentences, tags = _conll_sentences(_read_text(path), path)
    if not sentences:
        raise TaskError(f"CoNLL file {str(path)!r} holds no sentences; it must hold at least one example.")
    iob = all(tag == OUTSIDE or tag[:2] in ("B-", "I-") for sentence in tags for tag in sentence)
    try:
        tags = [iob1_to_iob2(sentence) if iob else sentence for sentence in tags]
    except TaskError as err:
        raise TaskError(f"CoNLL file {str(path)!r}: {err}") from None
    return datasets.Dataset.from_dict(
        {"id": [str(i) for i in range(len(sentences))], "tokens": sentences, "ner_tags": tags}
    )
