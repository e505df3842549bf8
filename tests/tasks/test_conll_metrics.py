"""Entity-level scores as seqeval (default mode, CoNLL's conlleval) computes them, against hand-computed chunks:
I- without B-, adjacent entities of one type, a change of type inside a run, IOB1 and IOB2 alike, E-/S- tags."""

from __future__ import annotations

import pytest

from adapterfusion.tasks import TaskError
from adapterfusion.tasks.tagging_metrics import chunks, entity_scores, iob1_to_iob2


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 1), ("LOC", 3, 3)]),
        (["I-PER", "I-PER", "O"], [("PER", 0, 1)]),  # I- without B- starts a chunk (IOB1)
        (["O", "I-LOC"], [("LOC", 1, 1)]),
        (["B-LOC", "B-LOC"], [("LOC", 0, 0), ("LOC", 1, 1)]),  # adjacent entities of one type (IOB2)
        (["I-LOC", "B-LOC", "I-LOC"], [("LOC", 0, 0), ("LOC", 1, 2)]),  # the same in IOB1
        (["I-LOC", "I-LOC", "B-LOC"], [("LOC", 0, 1), ("LOC", 2, 2)]),
        (["B-PER", "I-LOC"], [("PER", 0, 0), ("LOC", 1, 1)]),  # a type change ends one chunk, starts another
        (["I-PER", "I-ORG", "I-ORG"], [("PER", 0, 0), ("ORG", 1, 2)]),
        (["B-PER", "I-PER"], [("PER", 0, 1)]),  # a chunk at the very end is closed
        (["S-PER", "B-LOC", "E-LOC", "I-LOC"], [("PER", 0, 0), ("LOC", 1, 2), ("LOC", 3, 3)]),  # IOBES
        (["O", "O"], []),
        (["B-MISC", "I-MISC", "I-MISC"], [("MISC", 0, 2)]),
    ],
)
def test_chunks(tags, expected):
    assert chunks(tags) == expected


def test_scores_by_hand():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "B-LOC"]]
    scores = entity_scores(predicted, gold)
    # gold chunks: PER 0-1, LOC 3, ORG (2nd sentence); predicted: PER 0-1, ORG 3, ORG, LOC -> 2 right of 4 and of 3
    assert scores["precision"] == pytest.approx(2 / 4)
    assert scores["recall"] == pytest.approx(2 / 3)
    assert scores["f1"] == pytest.approx(2 * (1 / 2) * (2 / 3) / (1 / 2 + 2 / 3))
    assert scores["accuracy"] == pytest.approx(4 / 6)


def test_a_boundary_error_is_a_wrong_entity_and_sentences_never_join():
    gold = [["B-PER", "I-PER", "O"]]
    assert entity_scores([["B-PER", "O", "O"]], gold)["f1"] == 0.0  # one word short: no credit
    # the last word of one sentence and the first of the next are two chunks, never one
    scores = entity_scores([["O", "I-PER"], ["I-PER", "O"]], [["O", "B-PER"], ["B-PER", "O"]])
    assert scores["f1"] == 1.0


def test_iob1_and_iob2_spell_the_same_chunks():
    iob1 = ["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG", "I-MISC", "B-MISC"]
    iob2 = iob1_to_iob2(iob1)
    assert iob2 == ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "B-ORG", "B-MISC", "B-MISC"]
    assert chunks(iob1) == chunks(iob2)
    assert entity_scores([iob1], [iob2]) == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "accuracy": 0.5}


def test_nothing_predicted_or_nothing_to_find_scores_zero_not_an_error():
    assert entity_scores([["O", "O"]], [["B-PER", "O"]])["f1"] == 0.0
    assert entity_scores([["B-PER", "O"]], [["O", "O"]]) == {
        "precision": 0.0,
        "recall": 0.0,
        "f1": 0.0,
        "accuracy": 0.5,
    }


def test_bad_input_is_refused():
    with pytest.raises(TaskError, match="neither 'O' nor a prefix"):
        chunks(["PER"])
    with pytest.raises(TaskError, match="sentence 0: 1 predicted tags for 2 words"):
        entity_scores([["O"]], [["O", "O"]])
    with pytest.raises(TaskError, match="2 predicted sentences but 1"):
        entity_scores([["O"], ["O"]], [["O"]])
    with pytest.raises(TaskError, match="tag 1 \\(of type int\\) is not a tag name"):
        entity_scores([[1, 0]], [[1, 0]])
    with pytest.raises(TaskError, match="predicted sentence 0 is 'B-PER', not a list of tag names"):
        entity_scores(["B-PER", "O"], ["B-PER", "O"])
