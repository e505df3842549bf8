"""Bad-input cases at one boundary, the server's request contract (serving/contract.py, serving/predictor.py): what a
client sends that the server must refuse with a message naming the field and the fix, before the model runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import transformers

import adapterfusion as af
from adapterfusion.serving.app import create_app
from adapterfusion.serving.catalog import Catalog
from adapterfusion.serving.config import ServeConfig
from adapterfusion.serving.contract import parse_generate, parse_piece, parse_predict
from adapterfusion.serving.predictor import Predictor, check_max_length
from adapterfusion.serving.request_body import check_body_encoding, check_no_query, read_body
from catalogue import Action, BadInput, adapters_a_and_b, tiny_lm
from tiny_models import tiny_encoder

B = BadInput
GROUP = "server"
PIPELINES = "pipelines"


def read_with_defaults(body: bytes) -> Callable[[Path], Action]:
    """read_body(body) with the default limits."""
    return lambda folder: lambda: read_body(body, ServeConfig())


def _piece(data: dict[str, object]) -> Callable[[Path], Action]:
    """parse_piece(data), a POST /v1/pieces body."""
    return lambda folder: lambda: parse_piece(data)


def _predict_on_gpt2_tokenizer(texts: list[str]) -> Callable[[Path], Action]:
    """Predictor.encode of a predict request for `texts`, through a tokenizer that adds no special tokens (as GPT-2's,
    Llama's: "" makes no tokens)."""

    def prepare(folder: Path) -> Action:
        tokenizer = shipped_tokenizer()
        model = af.wrap(tiny_encoder(vocab_size=len(tokenizer)))
        model.add_head("cls", af.ClassificationHead(num_labels=2))
        request = parse_predict({"inputs": texts, "head": "cls"}, Catalog.of(model), ServeConfig())
        encode = Predictor(model, _NoSpecialTokens(tokenizer), 64).encode
        return lambda: encode(request)

    return prepare


def _predict_encoded(inputs: list[object]) -> Callable[[Path], Action]:
    """Predictor.encode of a predict request for `inputs`, through the shipped MiniLM tokenizer."""

    def prepare(folder: Path) -> Action:
        tokenizer = shipped_tokenizer()
        model = af.wrap(tiny_encoder(vocab_size=len(tokenizer)))
        model.add_head("cls", af.ClassificationHead(num_labels=2))
        request = parse_predict({"inputs": inputs, "head": "cls"}, Catalog.of(model), ServeConfig())
        encode = Predictor(model, tokenizer, 64).encode
        return lambda: encode(request)

    return prepare


def classified(*args: object, **call: object) -> Callable[[Path], Action]:
    """af.pipeline('text-classification' or, given candidate_labels, 'zero-shot-classification', ...)(*args, **call)
    on a tiny encoder over the shipped tokenizer with adapter a and an NLI head; the pipelines' inputs meet the same
    rules as the server's."""

    def prepare(folder: Path) -> Action:
        tokenizer = shipped_tokenizer()
        model = af.wrap(tiny_encoder(vocab_size=len(tokenizer), max_position_embeddings=128))
        model.add_adapter("a")
        model.add_head("nli", af.ClassificationHead(num_labels=3, labels=["entailment", "neutral", "contradiction"]))
        task = "zero-shot-classification" if "candidate_labels" in call else "text-classification"
        return lambda: af.pipeline(task, model, tokenizer, adapter="a", head="nli")(*args, **call)

    return prepare


def shipped_tokenizer() -> Any:
    """The shipped MiniLM's tokenizer."""
    return transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())


def _max_length(max_length: int) -> Callable[[Path], Action]:
    """The server's check of a max_length (--max-length, ServeConfig.max_length) against the shipped tokenizer."""

    def prepare(folder: Path) -> Action:
        tokenizer = shipped_tokenizer()
        return lambda: check_max_length(max_length, None, tokenizer)

    return prepare


def _served_with_its_tokenizer(**encoder: Any) -> Callable[[Path], Action]:
    """create_app for a tiny encoder made with `encoder`'s settings, served with the shipped tokenizer."""

    def prepare(folder: Path) -> Action:
        tokenizer, model = shipped_tokenizer(), af.wrap(tiny_encoder(**encoder))
        return lambda: create_app(model, tokenizer)

    return prepare


class _NoSpecialTokens:
    """`tokenizer` called with add_special_tokens=False, as a tokenizer that adds none of its own."""

    def __init__(self, tokenizer: object) -> None:
        self.tokenizer = tokenizer

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self.tokenizer(*args, add_special_tokens=False, **kwargs)  # type: ignore[operator]


def _predict_block(block: dict[str, object]) -> Callable[[Path], Action]:
    """parse_predict of a request naming `block`, on a model holding adapters a and b."""

    def prepare(folder: Path) -> Action:
        catalog = Catalog.of(adapters_a_and_b("cls"))
        return lambda: parse_predict({"inputs": ["x"], "block": block, "head": "cls"}, catalog, ServeConfig())

    return prepare


def _predict_average_with_layer_norm_copies(folder: Path) -> Action:
    """parse_predict of {"average": ["a", "n"]} on a model holding adapters a, b and n (n: train_layer_norm=True,
    its own LayerNorm copies)."""
    model = adapters_a_and_b("cls")
    model.add_adapter("n", af.AdapterConfig.pfeiffer(reduction_factor=4, train_layer_norm=True))
    catalog = Catalog.of(model)
    body = {"inputs": ["x"], "block": {"average": ["a", "n"]}, "head": "cls"}
    return lambda: parse_predict(body, catalog, ServeConfig())


def _predict_naming(adapter: str) -> Callable[[Path], Action]:
    """parse_predict of a request naming `adapter`, on a model holding adapters a and b."""

    def prepare(folder: Path) -> Action:
        catalog = Catalog.of(adapters_a_and_b("cls"))
        return lambda: parse_predict({"inputs": ["x"], "adapter": adapter, "head": "cls"}, catalog, ServeConfig())

    return prepare


def _predict_inputs(inputs: list[object]) -> Callable[[Path], Action]:
    """parse_predict of a request for `inputs`, on a model holding adapters a and b and a head 'cls'."""

    def prepare(folder: Path) -> Action:
        catalog = Catalog.of(adapters_a_and_b("cls"))
        return lambda: parse_predict({"inputs": inputs, "head": "cls"}, catalog, ServeConfig())

    return prepare


def _generate_body(body: dict[str, object]) -> Callable[[Path], Action]:
    """parse_generate of a POST /v1/generate `body`, on a tiny GPT-2 with adapter a."""

    def prepare(folder: Path) -> Action:
        catalog = Catalog.of(tiny_lm("gpt2"))
        return lambda: parse_generate(body, catalog, ServeConfig())

    return prepare


def _predict_without_heads(folder: Path) -> Action:
    """parse_predict of a request naming no head, on a model that has none (a language model's setup)."""
    catalog = Catalog.of(af.wrap(tiny_encoder()))
    return lambda: parse_predict({"inputs": ["x"]}, catalog, ServeConfig())


CASES: tuple[BadInput, ...] = (
    B(
        "serve-name-of-a-megabyte",
        GROUP,
        'POST /v1/predict {"adapter": "x" * 1_000_000} (the 404 quoted the whole name back: a 1 MB error message)',
        af.ConfigError,
        ("no adapter named 'xxxxxxxxxx", "...", "loaded adapters: ['a', 'b']"),
        _predict_naming("x" * 1_000_000),
    ),
    B(
        "serve-piece-name-too-long",
        GROUP,
        'POST /v1/pieces {"kind": "adapter", "source": "org/x", "name": "n" * 5000} (was loaded; the setup then '
        "could not be saved: a folder name has at most 255 bytes)",
        af.ConfigError,
        ("'name' has 5000 characters", "at most 128", "folder name"),
        _piece({"kind": "adapter", "source": "org/x", "name": "n" * 5000}),
    ),
    B(
        "serve-piece-source-not-text",
        GROUP,
        'POST /v1/pieces {"kind": "adapter", "source": 3} (was told "\'source\' must be ..." without what it got)',
        af.ConfigError,
        ("'source' is 3", "folder on the server", "Hub id"),
        _piece({"kind": "adapter", "source": 3}),
    ),
    B(
        "serve-query-parameters",
        GROUP,
        "POST /v1/predict?adapter=b with the other fields in the body (the query was ignored unsaid: the plain "
        "encoder answered)",
        af.ConfigError,
        ("takes no query parameters", "'?adapter=b'", "JSON body"),
        lambda folder: lambda: check_no_query("POST /v1/predict", "adapter=b"),
    ),
    B(
        "serve-compressed-body",
        GROUP,
        "a request body sent with Content-Encoding: gzip (was \"not valid JSON ('utf-8' codec can't decode byte "
        '0x8b ...)")',
        af.ConfigError,
        ("Content-Encoding 'gzip'", "does not decode", "uncompressed"),
        lambda folder: lambda: check_body_encoding("gzip"),
    ),
    B(
        "serve-block-too-many-adapter-runs",
        GROUP,
        'POST /v1/predict {"block": {"stack": [{"average": ["a", "b"] * 32}] * 64}} (ran 4,096 adapters a site and '
        "held the model's thread for minutes)",
        af.ConfigError,
        ("'block' runs 4096 adapters at each site", "limit of 16", "smaller block"),
        _predict_block({"stack": [{"average": ["a", "b"] * 32}] * 64}),
    ),
    B(
        "serve-block-fuse-name-not-text",
        GROUP,
        'POST /v1/predict {"block": {"fuse": ["a", "b"], "name": 5}} (was told "Fuse(name=5) has type int")',
        af.ConfigError,
        ("'block.name' is 5", "name of a loaded fusion"),
        _predict_block({"fuse": ["a", "b"], "name": 5}),
    ),
    B(
        "serve-duplicate-key",
        GROUP,
        'a request body {"inputs": ["x"], "adapter": "a", "adapter": "b"} (a key twice)',
        af.ConfigError,
        ('"adapter"', "more than once", "give each key once"),
        read_with_defaults(b'{"inputs": ["x"], "adapter": "a", "adapter": "b"}'),
    ),
    B(
        "serve-piece-invalid-name",
        GROUP,
        'POST /v1/pieces {"kind": "adapter", "source": "org/x", "name": "../x"}',
        af.ConfigError,
        ("'name'", "'../x'", "letters, digits"),
        _piece({"kind": "adapter", "source": "org/x", "name": "../x"}),
    ),
    B(
        "serve-predict-no-tokens",
        GROUP,
        'POST /v1/predict {"inputs": ["Hello there", ""]} on a tokenizer that adds no special tokens',
        af.ConfigError,
        ("inputs[1]", "0 characters that make no tokens of text", "send text"),
        _predict_on_gpt2_tokenizer(["Hello there", ""]),
    ),
    B(
        "serve-block-fuse-of-stack",
        GROUP,
        'POST /v1/predict {"block": {"fuse": ["a", {"stack": ["b"]}]}} (was told to write Stack(\'base\', Fuse(...)))',
        af.ConfigError,
        ("'block'", "a fuse block cannot hold a stack block", '{"stack": ["base", {"fuse": ["a", "b"]}]}'),
        _predict_block({"fuse": ["a", {"stack": ["b"]}]}),
    ),
    B(
        "serve-block-average-int-beyond-float",
        GROUP,
        'POST /v1/predict {"block": {"average": ["a", "b"], "weights": [10**400, 1]}} (was a 500 "the forward failed": '
        "an OverflowError parsing the request)",
        af.ConfigError,
        ("'block'", "give one finite number per adapter"),
        _predict_block({"average": ["a", "b"], "weights": [10**400, 1]}),
    ),
    B(
        "serve-predict-no-heads-loaded",
        GROUP,
        'POST /v1/predict {"inputs": ["x"]} to a server with no heads (was "give \'head\', one of none")',
        af.ConfigError,
        ("no heads loaded", "POST /v1/pieces", "/v1/generate"),
        _predict_without_heads,
    ),
    B(
        "serve-max-length-no-room-for-a-pair",
        GROUP,
        "serve --max-length 4 on a tokenizer that adds 3 tokens to a pair (a pair's first text was cut away: the "
        "second was predicted alone)",
        af.ConfigError,
        ("max_length=4", "adds 3 tokens of its own to a text pair", "--max-length 5 or more"),
        _max_length(4),
    ),
    B(
        "serve-allowed-host-with-port",
        GROUP,
        "serve --allowed-host localhost:8000 (every request was refused 400, even one whose Host header was exactly "
        "'localhost:8000': the header's port is not compared)",
        af.ConfigError,
        ("allowed_hosts entry 'localhost:8000' is not a host name", "without scheme, port or path", "'localhost'"),
        lambda folder: lambda: ServeConfig(allowed_hosts=("localhost:8000",)),
    ),
    B(
        "serve-tokenizer-not-the-models",
        GROUP,
        "create_app(<an encoder of 1000 embeddings>, <MiniLM's tokenizer of 30522>) (some texts were answered, others "
        "refused 422 'was the tokenizer made for this model?', a fault no client could fix)",
        af.ConfigError,
        ("the tokenizer has 30522 tokens", "embedding table 1000", "tokenizer saved with it"),
        _served_with_its_tokenizer(vocab_size=1000),
    ),
    B(
        "serve-block-average-layer-norm-copies",
        GROUP,
        'POST /v1/predict {"block": {"average": ["a", "n"]}} (n: train_layer_norm=True) (passed the request\'s check, '
        "then failed the forward it shared: a traceback in the log, the batch rerun, and a 422 in Python terms, "
        "\"Average('a', 'n'): adapters ['n'] hold their own LayerNorm copies\")",
        af.ConfigError,
        ("'block.average[1]' = 'n'", "train_layer_norm: true against false", "placed alike"),
        _predict_average_with_layer_norm_copies,
    ),
    B(
        "serve-pair-empty-second-text",
        GROUP,
        'POST /v1/predict {"inputs": ["x", ["a", ""]]} (was answered as the single text "a": the tokenizer drops an '
        "empty second text without a word)",
        af.ConfigError,
        ("inputs[1] is a pair whose second text '' is blank", "drops without a word", "text on both sides"),
        _predict_inputs(["x", ["a", ""]]),
    ),
    B(
        "serve-pair-blank-first-text",
        GROUP,
        'POST /v1/predict {"inputs": [[" ", "b"]]} (was answered for half an input: [CLS] [SEP] b [SEP])',
        af.ConfigError,
        ("inputs[0] is a pair whose first text ' ' is blank", "half an input"),
        _predict_inputs([[" ", "b"]]),
    ),
    B(
        "serve-pair-zero-width-second-text",
        GROUP,
        'POST /v1/predict {"inputs": [["a", "\\u200b"]]} (was answered as the single text "a": the tokenizer reads '
        "a zero-width space as no text and drops the empty second text)",
        af.ConfigError,
        ("inputs[0] is a pair whose second text makes no tokens of text", "text on both sides"),
        _predict_encoded([["a", "\u200b"]]),
    ),
    B(
        "pipeline-pair-empty-text-pair",
        PIPELINES,
        "af.pipeline('text-classification', ...)({'text': 'a', 'text_pair': ''}) (was answered as the text 'a' "
        "alone: the tokenizer drops an empty text_pair)",
        af.ConfigError,
        ("the text pair {'text': 'a', 'text_pair': ''}", "second text '' is blank", "text on both sides"),
        classified({"text": "a", "text_pair": ""}),
    ),
    B(
        "pipeline-blank-text",
        PIPELINES,
        "af.pipeline('text-classification', ...)(['a', '  ']) (the blank text was answered from [CLS] [SEP] alone)",
        af.ConfigError,
        ("entry [1] '  ', which holds no text", "leave out blank texts"),
        classified(["a", "  "]),
    ),
    B(
        "pipeline-zero-shot-label-twice",
        PIPELINES,
        "af.pipeline('zero-shot-classification', ...)('a', candidate_labels=['x', 'x']) (was answered 0.5 each, "
        "whatever the text: the copies share the label's probability)",
        af.ConfigError,
        ("candidate_labels=['x', 'x'] names ['x'] more than once", "name each label once"),
        classified("a", candidate_labels=["x", "x"]),
    ),
    B(
        "serve-generate-top-k-beyond-any-vocabulary",
        GROUP,
        'POST /v1/generate {"temperature": 1, "top_k": 10**400} (passed the request\'s check, then failed the '
        "generate() of its batch: the batch rerun, and a 422 in the Python API's terms, 'generate(): top_k=... is not "
        "a finite number')",
        af.ConfigError,
        ("'top_k' is 1000", "a whole number from 0 (no limit) to 1,000,000"),
        _generate_body({"inputs": ["x"], "temperature": 1, "top_k": 10**400}),
    ),
)
