"""SQuAD v1.1's exact match and F1 against hand-computed cases: the official normalisation's edge cases (articles,
punctuation, whitespace, case), several gold answers, no overlap, and repeated tokens."""

from __future__ import annotations

import pytest

from adapterfusion.tasks import TaskError
from adapterfusion.tasks.qa_metrics import exact_match, normalize_answer, squad_scores, token_f1


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("The Eiffel Tower", "eiffel tower"),  # case, and an article at the start
        ("an apple a day", "apple day"),  # every article, as whole words only
        ("Anna and the theatre", "anna and theatre"),  # 'an' inside 'Anna', 'the' inside 'theatre' stay
        ("  New\tYork \n City ", "new york city"),  # whitespace of any kind collapses
        ("U.S.A.!", "usa"),  # punctuation is deleted, not turned into spaces
        ("rock-and-roll", "rockandroll"),
        ("the", ""),
        ("A.", ""),  # punctuation first, then the article it leaves
        ("café", "café"),  # non-ASCII letters stay
        ("“quoted”", "“quoted”"),  # typographic quotes are not in string.punctuation: the script keeps them
    ],
)
def test_normalisation(text, normalised):
    assert normalize_answer(text) == normalised


def test_exact_match_after_normalisation():
    assert exact_match("the Eiffel tower.", "Eiffel Tower") == 1.0
    assert exact_match("Eiffel", "Eiffel Tower") == 0.0


@pytest.mark.parametrize(
    ("prediction", "gold", "expected"),
    [
        ("Eiffel Tower", "the eiffel tower", 1.0),
        ("the Eiffel", "Eiffel Tower", 2 * 1 * 0.5 / 1.5),  # P = 1/1, R = 1/2
        ("in Paris France", "Paris", 2 * (1 / 3) * 1 / (1 / 3 + 1)),  # P = 1/3, R = 1
        ("Berlin", "Paris", 0.0),  # no overlap
        ("the", "a", 0.0),  # both normalise to nothing: v1.1 gives 0 (SQuAD 2.0 would give 1)
        ("red red red", "red", 2 * (1 / 3) * 1 / (1 / 3 + 1)),  # a token counts as often as the gold has it
        ("red blue red", "red red", 2 * (2 / 3) * 1 / (2 / 3 + 1)),
    ],
)
def test_token_f1(prediction, gold, expected):
    assert token_f1(prediction, gold) == pytest.approx(expected)


def test_scores_take_the_best_gold_answer_per_question_and_average_questions():
    predictions = ["in 1907", "Omar", "Lima"]
    gold = [["1907", "in 1907"], ["Omar Field"], ["Quito", "the city of Quito"]]
    scores = squad_scores(predictions, gold)
    # question 1: exact on its second answer; question 2: F1 2/3 (P 1, R 1/2); question 3: nothing
    assert scores["exact_match"] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx((1.0 + 2 / 3 + 0.0) / 3)


def test_bad_inputs_are_refused():
    with pytest.raises(TaskError, match="2 predicted answers but 1 questions"):
        squad_scores(["a", "b"], [["a"]])
    with pytest.raises(TaskError, match="no gold answer"):
        squad_scores(["a"], [[]])
    with pytest.raises(TaskError, match="empty"):
        squad_scores([], [])
    with pytest.raises(TaskError, match="the predicted answers are 'abc'"):  # not one answer per character
        squad_scores("abc", [["a"], ["b"], ["c"]])
    with pytest.raises(TaskError, match="the predicted answers are a dict"):  # the official {id: answer}
        squad_scores({"q1": "a"}, [["a"]])
    assert squad_scores(("Paris",), [("Paris", "paris!")])["exact_match"] == 1.0  # any sequence of texts will do
