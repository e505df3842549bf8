"""Entity-level scores of tag sequences, as seqeval (default mode, i.e. CoNLL's conlleval) computes them.

A chunk (entity) is a maximal run of tags of one type. Tags are "O" or a prefix and a type ("B-PER", "I-LOC"; "E-"
and "S-" of IOBES are read too). A chunk starts at a B- (or S-), at an I- (or E-) that follows "O", another type, or
the end of a chunk (E-/S-), so an I- without a B- starts one: this reads IOB1 (CoNLL-2003's own files: B- only
between two adjacent entities of one type) and IOB2 (B- on every entity's first word) alike. Sentences are scored as
one sequence with an "O" between them, so no chunk spans two. Precision, recall and F1 are micro averages over
chunks; each is 0 where it divides by zero (seqeval's zero_division default). `accuracy` is the share of words whose
tag is right.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from adapterfusion.tasks.errors import TaskError

OUTSIDE = "O"
_PREFIXES = ("B", "I", "E", "S")

Chunk = tuple[str, int, int]  # (type, first word, last word), words counted over the joined sentences


def _split(tag: str) -> tuple[str, str]:
    """(prefix, type) of a tag; ("O", "") for outside."""
    if not isinstance(tag, str):
        raise TaskError(
            f"tag {tag!r} (of type {type(tag).__name__}) is not a tag name; map tag ids to their names first "
            "(tasks.tagging.word_tags)."
        )
    if tag == OUTSIDE:
        return OUTSIDE, ""
    prefix, _, kind = tag.partition("-")
    if prefix not in _PREFIXES or not kind:
        raise TaskError(f"tag {tag!r} is neither 'O' nor a prefix {list(_PREFIXES)}, '-' and a type (e.g. 'B-PER').")
    return prefix, kind


def chunks(tags: Iterable[str]) -> list[Chunk]:
    """The chunks of one tag sequence, in order."""
    if isinstance(tags, str) or not isinstance(tags, Iterable):
        what = "one text" if isinstance(tags, str) else f"a {type(tags).__name__}"
        raise TaskError(f"tags {tags!r} are {what}; pass a list of tags (e.g. ['B-PER', 'I-PER']).")
    found: list[Chunk] = []
    start, previous, previous_kind = 0, OUTSIDE, ""
    tags = list(tags)
    for i, tag in enumerate([*tags, OUTSIDE]):
        prefix, kind = _split(tag)
        ends = previous != OUTSIDE and (
            previous in ("E", "S") or prefix in ("B", "S", OUTSIDE) or kind != previous_kind
        )
        if ends:
            found.append((previous_kind, start, i - 1))
        begins = prefix != OUTSIDE and (
            prefix in ("B", "S") or previous in (OUTSIDE, "E", "S") or kind != previous_kind
        )
        if begins:
            start = i
        previous, previous_kind = prefix, kind
    return found


def _joined(sentences: Sequence[Sequence[str]]) -> list[str]:
    return [tag for sentence in sentences for tag in [*sentence, OUTSIDE]]


def _check_sentences(name: str, sentences: object) -> list[list[str]]:
    """One list of tag names per sentence, as lists (a generator had no len()): a bare list of tags would be read
    as sentences of one-letter tags."""
    if isinstance(sentences, str) or not isinstance(sentences, Iterable):
        raise TaskError(f"the {name} tags are {sentences!r}; pass one list of tag names per sentence.")
    checked = []
    for i, sentence in enumerate(sentences):
        if isinstance(sentence, str) or not isinstance(sentence, Iterable):
            raise TaskError(
                f"{name} sentence {i} is {sentence!r}, not a list of tag names; pass one list per sentence "
                "(e.g. [['B-PER', 'O']], not ['B-PER', 'O'])."
            )
        checked.append(list(sentence))
    return checked


def entity_scores(predicted: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]) -> dict[str, float]:
    """{"precision", "recall", "f1", "accuracy"} of predicted tag sentences against gold ones (same lengths)."""
    predicted, gold = _check_sentences("predicted", predicted), _check_sentences("gold", gold)
    if len(predicted) != len(gold):
        raise TaskError(f"{len(predicted)} predicted sentences but {len(gold)} gold ones; they must match.")
    lengths = [(len(p), len(g)) for p, g in zip(predicted, gold, strict=True)]
    bad = [i for i, (p, g) in enumerate(lengths) if p != g]
    if bad:
        raise TaskError(f"sentence {bad[0]}: {lengths[bad[0]][0]} predicted tags for {lengths[bad[0]][1]} words.")
    words = sum(g for _, g in lengths)
    if words == 0:
        raise TaskError("no tagged words to score; the evaluation split is empty.")
    found, expected = set(chunks(_joined(predicted))), set(chunks(_joined(gold)))
    correct = len(found & expected)
    precision = correct / len(found) if found else 0.0
    recall = correct / len(expected) if expected else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    right = sum(p == g for ps, gs in zip(predicted, gold, strict=True) for p, g in zip(ps, gs, strict=True))
    return {"precision": precision, "recall": recall, "f1": f1, "accuracy": right / words}


def iob1_to_iob2(tags: Sequence[str]) -> list[str]:
    """The same chunks written in IOB2 (B- on the first word of every chunk): what the Hub's conll2003 holds, so a
    model trained on CoNLL's own IOB1 files learns the same targets."""
    starts = {start for _, start, _ in chunks(tags)}
    return [f"B-{_split(tag)[1]}" if i in starts else tag for i, tag in enumerate(tags)]
