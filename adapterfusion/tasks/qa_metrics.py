"""SQuAD v1.1's answer metrics, as its official evaluation script computes them: exact match and token F1 of the
normalised answer text, the best over the gold answers of each question, averaged over questions.

Normalisation (the script's `normalize_answer`): lower case, drop ASCII punctuation, drop the articles "a", "an",
"the" as whole words, collapse whitespace. F1 counts the common tokens of the two normalised answers (a bag of words,
with repeats); when they share none, F1 is 0, also when both normalise to nothing (v1.1; SQuAD 2.0's script says 1).
Scores are fractions in [0, 1] like every metric here; the official script prints them x 100.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from adapterfusion.tasks.errors import TaskError

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """The official SQuAD v1.1 normalisation (see the module docstring), in its order."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the normalised texts are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    """F1 of the normalised texts' tokens, counted with repeats; 0.0 when they share no token."""
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(predicted) & Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def _one_per_question(values: Any, what: str, each: str) -> list[Any]:
    """`values` as a list with one entry per question: a bare text (scored per character), a mapping (the official
    script's {question id: answer}, whose keys would be scored) and None are refused."""
    if isinstance(values, (str, Mapping)) or not isinstance(values, Iterable):
        shown = f"a {type(values).__name__}" if isinstance(values, Mapping) else repr(values)[:80]
        raise TaskError(
            f"the {what} are {shown}; pass a list with {each} per question, in the order of the questions (a dict "
            "{question id: answer}, as the official script reads, must first be put in that order)."
        )
    return list(values)


def squad_scores(predictions: Sequence[str], gold_answers: Sequence[Sequence[str]]) -> dict[str, float]:
    """{"exact_match", "f1"}: per question the best over its gold answers, averaged over the questions."""
    predictions = _one_per_question(predictions, "predicted answers", "one text")
    gold_answers = _one_per_question(gold_answers, "gold answers", "a list of gold texts")
    if len(predictions) != len(gold_answers):
        raise TaskError(f"{len(predictions)} predicted answers but {len(gold_answers)} questions; they must match.")
    if not predictions:
        raise TaskError("no answers to score; the evaluation split is empty.")
    for i, (prediction, gold) in enumerate(zip(predictions, gold_answers, strict=True)):
        if not isinstance(prediction, str):
            raise TaskError(f"question {i}: the predicted answer {prediction!r} is not a text; pass one string each.")
        texts = not isinstance(gold, (str, Mapping)) and isinstance(gold, Iterable)
        if not texts or not all(isinstance(g, str) for g in gold):
            raise TaskError(
                f"question {i}: gold answers {gold!r} must be a list of texts (a bare string would be read as one "
                "answer per character); wrap a single answer in a list: [answer]."
            )
    gold_answers = [list(gold) for gold in gold_answers]
    unanswerable = [i for i, answers in enumerate(gold_answers) if not answers]
    if unanswerable:
        raise TaskError(
            f"question {unanswerable[0]} has no gold answer ({len(unanswerable)} such); SQuAD v1.1 scoring needs at "
            "least one per question (unanswerable questions are SQuAD 2.0, which this task does not score)."
        )
    em = sum(max(exact_match(p, g) for g in gold) for p, gold in zip(predictions, gold_answers, strict=True))
    f1 = sum(max(token_f1(p, g) for g in gold) for p, gold in zip(predictions, gold_answers, strict=True))
    return {"exact_match": em / len(predictions), "f1": f1 / len(predictions)}
