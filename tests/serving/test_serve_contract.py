"""Request checking without a server: a predict body against a Catalog of loaded pieces (which head answers when
none is named, which heads the server refuses) and a piece-loading body."""

from __future__ import annotations

import pytest

from adapterfusion.serving import ServeConfig
from adapterfusion.serving.catalog import Catalog, HeadInfo
from adapterfusion.serving.contract import GenerateRequest, parse_piece, parse_predict
from adapterfusion.serving.generator import Generator
from adapterfusion.serving.request_body import read_body
from adapterfusion.serving.request_errors import RequestError

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


def _parse(body, catalog=CATALOG, config=None):
    return parse_predict(body, catalog, config or ServeConfig())


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
        # the tokenizer drops an empty second text without a word: the pair was answered as its first text alone
        ({"inputs": ["a", ["b", ""]], "head": "rte"}, 422, "inputs[1] is a pair whose second text '' is blank"),
        ({"inputs": [["b", " \n"]], "head": "rte"}, 422, "second text ' \\n' is blank"),
        ({"inputs": [["", "b"]], "head": "rte"}, 422, "inputs[0] is a pair whose first text '' is blank"),
        ({"inputs": [["a", None]], "head": "rte"}, 422, "wrong shape"),
    ],
)
def test_refusals_name_the_problem(body, status, words):
    with pytest.raises(RequestError) as refused:
        _parse(body)
    assert refused.value.status == status and words in refused.value.message


@pytest.mark.parametrize(
    "config, limit",
    [
        (ServeConfig(), 8 * 512),  # max_length None: the server sets it to the model's limit; 512 where none is known
        (ServeConfig(max_length=128), 1024),
        (ServeConfig(max_length=128, max_text_chars=5000), 5000),
    ],
)
def test_the_text_limit_is_eight_characters_per_token_kept_unless_set(config, limit):
    """Texts are tokenised on the event loop, at a cost that grows with their characters: by default each may have 8
    per token of max_length (more is cut by truncation anyway); refused before tokenising, naming the setting."""
    assert _parse({"inputs": [["a", "x" * limit]], "head": "rte"}, config=config).inputs[0][1] == "x" * limit
    with pytest.raises(RequestError) as refused:
        _parse({"inputs": ["a", ["b", "x" * (limit + 1)]], "head": "rte"}, config=config)
    message = refused.value.message
    assert refused.value.status == 413 and f"inputs[1] has a text of {limit + 1} characters" in message
    assert f"over the limit of {limit}" in message and "--max-text-chars (ServeConfig.max_text_chars)" in message


def test_piece_bodies():
    assert parse_piece({"kind": "head", "source": "me/repo"}).name is None
    for body, words in [
        ({"kind": "adapter"}, "'source' is missing; give a piece's folder"),
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
        (b'{"inputs": [' + b"9" * 5000 + b"]}", "an integer of more than 4300 digits"),  # over Python's limit
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
    generator.tokenizer = lambda text, **_: {"input_ids": [7] * len(text.split())}
    generator.max_length = 64
    for prompts in [("",), ("hello", "   ")]:
        with pytest.raises(RequestError, match="make no tokens") as refused:
            generator.encode(GenerateRequest(prompts, None, 4))
        assert refused.value.status == 422


def test_prompts_are_tokenised_cut_at_the_length_the_model_takes():
    """A prompt's tokens are cut at max_length as they are made (a longer prompt is refused anyway), so a request
    never holds more tokens than the model reads; the refusal says the count was cut."""
    asked = []

    def tokenizer(text, truncation=False, max_length=None):
        asked.append((truncation, max_length))
        ids = [7] * len(text.split())
        return {"input_ids": ids[:max_length] if truncation else ids}

    generator = Generator.__new__(Generator)
    generator.tokenizer, generator.max_length = tokenizer, 64
    assert generator.encode(GenerateRequest(("a b c",), None, 4)).prompts == ([7, 7, 7],)
    with pytest.raises(RequestError, match="has at least 64 tokens, which with max_new_tokens=4") as refused:
        generator.encode(GenerateRequest(("w " * 5000,), None, 4))
    assert refused.value.status == 413 and asked == [(True, 64), (True, 64)]


def test_average_and_fuse_blocks_are_judged_when_the_request_arrives():
    """An average over a fusion, or over adapters placed otherwise, failed inside the forward (with every request of
    its batch); a fuse block runs the fusion it matched on arrival, whatever is loaded before its forward."""
    placed = Catalog(
        adapters=("rte", "mnli", "houlsby"),
        fusions={"rte_fusion": ("rte", "mnli")},
        heads=CATALOG.heads,
        active=CATALOG.active,
        placements={"rte": (("output",),), "mnli": (("output",),), "houlsby": (("attention", "output"),)},
    )
    for block, words in [
        ({"average": ["rte", "rte_fusion"]}, r"'block.average\[1\]' = 'rte_fusion' is a fusion"),
        ({"average": ["rte", "houlsby"]}, r"'block.average\[1\]' = 'houlsby' is placed otherwise than"),
    ]:
        with pytest.raises(RequestError, match=words) as refused:
            _parse({"inputs": ["a"], "block": block, "head": "rte"}, placed)
        assert refused.value.status == 422
    assert _parse({"inputs": ["a"], "block": {"average": ["rte", "mnli"]}, "head": "rte"}, placed).choice
    fused = _parse({"inputs": ["a"], "block": {"fuse": ["rte", "mnli"]}, "head": "rte"}, placed).choice
    assert fused.name == "rte_fusion"
