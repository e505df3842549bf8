"""Small self-written SQuAD-format and CoNLL-format task files for the span-task tests (issue #25): a few dozen
examples made from templates, so the tests need no download. A plain module: tests import these writers.

SQuAD: each paragraph tells who founded a place, when and where; its questions ask for each fact, with several gold
answers on the dev side ("1907", "in 1907"). One paragraph is long, so a short max_length reads it in windows.
CoNLL: sentences of people, places and organisations in CoNLL-2003's own text format (word, POS, chunk, NER tag),
tagged in IOB1 (B- only between two adjacent entities of one type), as the original files are.
"""

from __future__ import annotations

import json
from pathlib import Path

from adapterfusion.tasks import TaskSpec

PEOPLE = ["Ada Brook", "Omar Field", "Lena Stone", "Ivo Marsh", "Rosa Hill", "Tom Vale", "Mia Crane", "Nils Ford"]
PLACES = ["Lisbon", "Quito", "Oslo", "Hanoi", "Perth", "Cairo", "Lima", "Riga"]
THINGS = ["museum", "library", "school", "bakery", "theatre", "garden"]
ORGS = ["Acme Corp", "Blue Bank", "Nordic Rail", "Sun Press"]
# A three-tag person tagger over 'tokens' / 'ner_tags' rows, for tests that write a few rows of their own.
PERSON_TAGGER = TaskSpec(
    name="ner",
    kind="token_classification",
    text_fields=("tokens",),
    label_field="ner_tags",
    label_names=("O", "B-PER", "I-PER"),
)


def squad_examples(count: int, start: int = 0, several_answers: bool = False) -> list[dict]:
    """`count` questions in the Hub's squad layout (id, title, context, question, answers)."""
    rows = []
    for n in range(start, start + count):
        person, place, thing = PEOPLE[n % 8], PLACES[(n // 2) % 8], THINGS[n % 6]
        year = str(1850 + 7 * n)
        context = f"The {thing} of {place} was founded in {year} by {person}. It is still open to visitors."
        if n % 9 == 4:  # a long context: the answer sits far from the start
            filler = " ".join(f"Visitors came from town number {k} to see it." for k in range(12))
            context = f"{filler} The {thing} of {place} was founded in {year} by {person}."
        kind = n % 3
        question, answer = (
            (f"When was the {thing} of {place} founded?", year),
            (f"Who founded the {thing} of {place}?", person),
            (f"Where is the {thing} founded by {person}?", place),
        )[kind]
        start_char = context.index(answer, context.index(f"The {thing} of"))
        texts, starts = [answer], [start_char]
        if several_answers and kind == 0:
            texts, starts = [answer, f"in {year}"], [start_char, start_char - 3]
        rows.append(
            {
                "id": f"q{n}",
                "title": place,
                "context": context,
                "question": question,
                "answers": {"text": texts, "answer_start": starts},
            }
        )
    return rows


def squad_task_file(path: Path, rows: list[dict]) -> TaskSpec:
    """`rows` (squad_examples' form) as a JSON-lines train file at `path`, and the extractive QA task that reads it."""
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return TaskSpec(
        name="qa",
        kind="extractive_qa",
        text_fields=("question", "context"),
        label_field="answers",
        data_files={"train": str(path)},
    )


def write_squad_json(path: Path, rows: list[dict]) -> Path:
    """`rows` as one SQuAD v1.1 file ({"data": [articles > paragraphs > qas]}), a paragraph per row."""
    articles = [
        {
            "title": row["title"],
            "paragraphs": [
                {
                    "context": row["context"],
                    "qas": [
                        {
                            "id": row["id"],
                            "question": row["question"],
                            "answers": [
                                {"text": t, "answer_start": s}
                                for t, s in zip(row["answers"]["text"], row["answers"]["answer_start"], strict=True)
                            ],
                        }
                    ],
                }
            ],
        }
        for row in rows
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"data": articles, "version": "1.1"}), encoding="utf-8")
    return path


def conll_sentences(count: int, start: int = 0) -> list[list[tuple[str, str]]]:
    """`count` sentences of (word, IOB1 tag); every fourth has two adjacent places (the second tagged B-LOC)."""
    sentences = []
    for n in range(start, start + count):
        person, place, org = PEOPLE[n % 8].split(), PLACES[(n + 3) % 8], ORGS[n % 4].split()
        words = [(w, "I-PER") for w in person] + [("visited", "O")] + [(place, "I-LOC")]
        if n % 4 == 0:
            words.append((PLACES[(n + 4) % 8], "B-LOC"))  # "Oslo Hanoi": two places side by side
        words += [("for", "O")] + [(w, "I-ORG") for w in org] + [(".", "O")]
        sentences.append(words)
    return sentences


def write_conll(path: Path, sentences: list[list[tuple[str, str]]]) -> Path:
    """CoNLL-2003's text format: a -DOCSTART- line, then word POS chunk tag per line, a blank line after each
    sentence."""
    lines = ["-DOCSTART- -X- -X- O", ""]
    for sentence in sentences:
        lines += [f"{word} NNP I-NP {tag}" for word, tag in sentence] + [""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
