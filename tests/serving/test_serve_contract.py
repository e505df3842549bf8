"""Request checking without a server: a predict body against a Catalog of loaded pieces (which head answers when
none is named, which heads the server refuses) and a piece-loading body."""

from __future__ import annotations

import pytest

from adapterfusion.serving import ServeConfig
from adapterfusion.serving.contract import (
    Catalog,
    GenerateRequest,
    HeadInfo,
    RequestError,
    parse_piece,
    parse_predict,
    read_body,
)
from adapterfusion.serving.generator import Generator

CATALOG = Catalog(
    adapters=("rte", "mnli"),
    fusions={"rte_fusion": ("rte", "mnli")},
    heads={
        "rte": HeadInfo("classification", 2, ("entailment", "not_entailment")),
        "sts": HeadInfo("regression", 1, None),
        "copa": HeadInfo("multiple_choice", 1, None),
    },
    active={"adapter": None, "fusion": None, "head": "sts"},
)


def _parse(body, catalog=CATALOG):
    return parse_predict(body, catalog, ServeConfig())


def test_the_head_defaults_to_the_one_named_like_the_piece_then_to_the_active_one():
    request = _parse({"inputs": ["a", ["b", "c"]], "adapter": "rte"})
    assert request.head == "rte" and request.labels == ("entailment", "not_entailment")
    assert request.inputs == (("a", None), ("b", "c")) and request.choice == {"adapter": "rte"}
    assert _parse({"inputs": ["a"], "fusion": "rte_fusion"}).head == "sts"  # no head named rte_fusion: the active
    plain = _parse({"inputs": ["a"], "head": "rte"})
    assert plain.choice is None and plain.head_kind == "classification"
    idle = Catalog(CATALOG.adapters, CATALOG.fusions, CATALOG.heads, {"adapter": None, "fusion": None, "head": None})
    with pytest.raises(RequestError, match="no 'head' given") as refused:
        _parse({"inputs": ["a"], "adapter": "mnli"}, idle)
    assert refused.value.status == 422


@pytest.mark.parametrize(
    "body, status, words",
    [
        ({"inputs": ["a"], "head": "copa"}, 422, "multiple_choice head"),
        ({"inputs": ["a"], "adapter": 3, "head": "rte"}, 422, "'adapter' is 3"),
        ({"inputs": [["a", 1]], "head": "rte"}, 422, "wrong shape"),
        ({"inputs": [["a"]], "head": "unknown"}, 404, "loaded heads: ['rte', 'sts', 'copa']"),
        ({"inputs": ["a\ud800b"], "head": "rte"}, 422, "lone surrogate"),  # valid JSON, but no tokenizer takes it
        ({"inputs": [["a", "\udfff"]], "head": "rte"}, 422, "inputs[0] holds a lone surrogate"),
        ({"inputs": ["a"], "block": {"fuse": ["rte", "mnli"], "name": "zz"}, "head": "rte"}, 404, "no fusion named"),
    ],
)
def test_refusals_name_the_problem(body, status, words):
    with pytest.raises(RequestError) as refused:
        _parse(body)
    assert refused.value.status == status and words in refused.value.message


def test_piece_bodies():
    assert parse_piece({"kind": "head", "source": "me/repo"}).name is None
    for body, words in [
        ({"kind": "adapter"}, "'source' must be"),
        ({"kind": "adapter", "source": "x", "name": ""}, "'name' is ''"),
        ({"kind": "adapter", "source": "x", "overwrite": True}, "unknown field"),
        ({"kind": "adapter", "source": "/tmp/a\x00b"}, "holds a NUL"),
    ]:
        with pytest.raises(RequestError, match=words):
            parse_piece(body)


@pytest.mark.parametrize(
    "body, words",
    [
        (b"[" * 100_000 + b"]" * 100_000, "nests JSON too deeply"),  # json.loads: RecursionError, a 500 before
        (b'{"inputs": [' + b"9" * 5000 + b"]}", "not valid JSON"),  # over Python's 4300 digits: ValueError
        (b"\xff\xfe{}", "not valid JSON"),
    ],
)
def test_unreadable_bodies_are_400(body, words):
    with pytest.raises(RequestError, match=words) as refused:
        read_body(body, ServeConfig(max_body_bytes=1_000_000))
    assert refused.value.status == 400


def test_a_prompt_that_makes_no_tokens_is_refused_alone_and_in_company():
    """A tokenizer that adds no special tokens (GPT-2's) makes nothing of '': generate() has no token to start from.
    Refused when the request is encoded, so the answer cannot depend on what shares its batch."""
    generator = Generator.__new__(Generator)  # only encode's tokenizer and limit matter here
    generator.tokenizer = lambda text: {"input_ids": [7] * len(text.split())}
    generator.max_length = 64
    for prompts in [("",), ("hello", "   ")]:
        with pytest.raises(RequestError, match="make no tokens") as refused:
            generator.encode(GenerateRequest(prompts, None, 4))
        assert refused.value.status == 422
