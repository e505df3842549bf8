"""Bad-input cases at one boundary, the server's HTTP surface as a hostile or careless client and operator meet it:
bodies that are JSON only to Python (NaN), or of the wrong JSON kind, a piece sent in the other kind's field, piece
loads (POST /v1/pieces) with a blank source or a bad saved setting, API keys sent wrong, and allowed hosts no request
could match. Each calls the function the endpoint calls (serving/contract.py, serving/app.py), not a server."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import adapterfusion as af
from adapterfusion.interop.adapterhub import export_adapterhub
from adapterfusion.serving.app import _check_key, create_app, load_piece
from adapterfusion.serving.catalog import Catalog
from adapterfusion.serving.config import API_KEY_ENV, ServeConfig
from adapterfusion.serving.contract import parse_piece, parse_predict
from adapterfusion.serving.server import load_setup, serve
from cases_serving import read_with_defaults
from catalogue import Action, BadInput, adapters_a_and_b, cli, edit_json, saved_piece
from tiny_models import tiny_encoder

B = BadInput
GROUP = "server"
KEY = "secret-key-123"


def _predict(body: dict[str, object]) -> Callable[[Path], Action]:
    """parse_predict(body) on a model holding adapters a and b, fusion f over them and a head 'cls'."""

    def prepare(folder: Path) -> Action:
        model = adapters_a_and_b("cls")
        model.add_fusion("f", ["a", "b"])
        catalog = Catalog.of(model)
        return lambda: parse_predict(body, catalog, ServeConfig())

    return prepare


def _default_head_of_another_kind(folder: Path) -> Action:
    """parse_predict naming adapter a and no head, on a model whose head 'a' is a multiple-choice head."""
    model = adapters_a_and_b("cls")
    model.add_head("a", af.MultipleChoiceHead())
    catalog = Catalog.of(model)
    return lambda: parse_predict({"inputs": ["x"], "adapter": "a"}, catalog, ServeConfig())


def _piece_with_setting(key: str, value: object) -> Callable[[Path], Action]:
    """load_piece (POST /v1/pieces' load on the model's thread) of a saved adapter whose config has `key` = `value`."""

    def prepare(folder: Path) -> Action:
        saved = saved_piece(folder)
        edit_json(saved / "adapter_config.json", lambda document: document["config"].update({key: value}))
        model = adapters_a_and_b("cls")
        return lambda: load_piece(model, parse_piece({"kind": "adapter", "source": str(saved), "name": "n"}))

    return prepare


def _adapterhub_fusion_with_setting(key: str, value: object) -> Callable[[Path], Action]:
    """load_piece of an AdapterHub fusion over a and b whose adapter_fusion_config.json has `key` = `value`."""

    def prepare(folder: Path) -> Action:
        model = adapters_a_and_b("cls")
        model.add_fusion("f", ["a", "b"])
        exported = export_adapterhub(model, "fusion", "f", folder / "f")
        edit_json(exported / "adapter_fusion_config.json", lambda document: document["config"].update({key: value}))
        model.delete_fusion("f")
        return lambda: load_piece(model, parse_piece({"kind": "fusion", "source": str(exported)}))

    return prepare


def _fusion_over_adapters_placed_otherwise(folder: Path) -> Action:
    """load_piece of a fusion saved over Houlsby adapters a and b into a model whose a and b are Pfeiffer's."""
    saved = af.wrap(tiny_encoder("bert"))
    for name in ("a", "b"):
        saved.add_adapter(name, af.AdapterConfig.houlsby(reduction_factor=4))
    saved.add_fusion("g", ["a", "b"])
    piece = parse_piece({"kind": "fusion", "source": str(saved.save_fusion("g", folder / "g"))})
    model = adapters_a_and_b("cls")
    return lambda: load_piece(model, piece)


def _setup_on_the_shipped_encoder(folder: Path) -> Action:
    """load_setup (what `serve SETUP` runs) of a tiny BERT's setup, with no base: the shipped MiniLM."""
    setup = adapters_a_and_b("cls").save_pretrained(folder / "setup")
    return lambda: load_setup(setup)


def _serve_with_env_key(key: str) -> Callable[[Path], Action]:
    """`adapterfusion serve <folder>/setup` with ADAPTERFUSION_API_KEY set to `key` and no --api-key."""

    def prepare(folder: Path) -> Action:
        def action() -> str:
            with mock.patch.dict(os.environ, {API_KEY_ENV: key}):
                return cli("serve", str(folder / "setup"))

        return action

    return prepare


def _key_check(headers: dict[str, str], query: str = "") -> Callable[[Path], Action]:
    """The API-key check of POST /v1/pieces on a server started with KEY, for a request with `headers` and `query`."""

    def prepare(folder: Path) -> Action:
        from starlette.requests import Request

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/pieces",
            "query_string": query.encode(),
            "headers": [(name.lower().encode(), value.encode()) for name, value in headers.items()],
        }
        return lambda: _check_key(Request(scope), KEY)

    return prepare


CASES: tuple[BadInput, ...] = (
    B(
        "serve-body-nan-literal",
        GROUP,
        'POST /v1/predict {"block": {"average": ["a", "b"], "weights": [NaN, 1]}} (NaN, not JSON, was read as a '
        "number and refused in the Python API's terms, 'Average(weights=[nan, 1])')",
        af.ConfigError,
        ("holds NaN, which is not JSON", "send a finite number"),
        read_with_defaults(b'{"inputs": ["x"], "block": {"average": ["a", "b"], "weights": [NaN, 1]}, "head": "cls"}'),
    ),
    B(
        "serve-body-float-past-range",
        GROUP,
        'POST /v1/generate {"temperature": 1, "top_p": 1e400} (read as infinity, which JSON has not, and refused in '
        "Python's terms: 'top_p' is Infinity)",
        af.ConfigError,
        ("holds the number '1e400'", "beyond what a 64-bit float holds", "send a finite number"),
        read_with_defaults(b'{"inputs": ["x"], "temperature": 1, "top_p": 1e400}'),
    ),
    B(
        "serve-body-integer-too-long",
        GROUP,
        'POST /v1/predict {"inputs": ["x"], "head": 1000...0 (5000 digits)} (was told to call '
        "sys.set_int_max_str_digits(), advice for the server's Python, not its client)",
        af.ConfigError,
        ("an integer of more than 4300 digits", "send a shorter number"),
        read_with_defaults(b'{"inputs": ["x"], "head": 1' + b"0" * 5000 + b"}"),
    ),
    B(
        "serve-body-latin-1",
        GROUP,
        'POST /v1/predict {"inputs": ["café"]} encoded as Latin-1 (was "not valid JSON (\'utf-8\' codec can\'t decode '
        "byte 0xe9 in position 16: invalid continuation byte)\"), naming Python's codec, not the fix)",
        af.ConfigError,
        ("not UTF-8 (byte 0xe9 at offset 16)", "JSON is sent as UTF-8"),
        read_with_defaults('{"inputs": ["café"], "head": "cls"}'.encode("latin-1")),
    ),
    B(
        "serve-body-null",
        GROUP,
        "a request body of null (was 'must be a JSON object, not NoneType', Python's name for it)",
        af.ConfigError,
        ("must be a JSON object, not null",),
        read_with_defaults(b"null"),
    ),
    B(
        "serve-body-empty",
        GROUP,
        "POST /v1/predict with an empty body (was 'not valid JSON (Expecting value: line 1 column 1 (char 0))')",
        af.ConfigError,
        ("the request body is empty", "send a JSON object"),
        read_with_defaults(b""),
    ),
    B(
        "serve-inputs-an-object",
        GROUP,
        'POST /v1/predict {"inputs": {"text": "x"}} (was "\'inputs\' is a dict", Python\'s name for an object)',
        af.ConfigError,
        ("'inputs' is an object", "a list of texts"),
        _predict({"inputs": {"text": "x"}, "head": "cls"}),
    ),
    B(
        "serve-block-average-weight-boolean",
        GROUP,
        'POST /v1/predict {"block": {"average": ["a", "b"], "weights": [true, 1]}} (was refused in the Python '
        "constructor's terms, 'Average(weights=[True, 1]) for 2 adapters: ... weights=[0.5, 0.5]')",
        af.ConfigError,
        ("'block.weights[0]' is true", "give a number, e.g. [0.5, 0.5]"),
        _predict({"inputs": ["x"], "block": {"average": ["a", "b"], "weights": [True, 1]}, "head": "cls"}),
    ),
    B(
        "serve-block-average-weights-sum-to-zero",
        GROUP,
        'POST /v1/predict {"block": {"average": ["a", "b"], "weights": [1, -1]}} (was "\'block\': Average(weights=[1, '
        "-1]) sum to 0\", the Python constructor's terms)",
        af.ConfigError,
        ("'block.weights' [1, -1] sum to 0", "leave it out for equal weights"),
        _predict({"inputs": ["x"], "block": {"average": ["a", "b"], "weights": [1, -1]}, "head": "cls"}),
    ),
    B(
        "serve-default-head-not-served",
        GROUP,
        'POST /v1/predict {"inputs": ["x"], "adapter": "a"} where the head named like adapter a is a multiple-choice '
        "head (was \"head 'a' is a multiple_choice head\", of a head the client never named, and no word of which "
        "would do)",
        af.ConfigError,
        ("no 'head' given, and the default head 'a'", "give 'head', one of ['cls']"),
        _default_head_of_another_kind,
    ),
    B(
        "serve-adapter-field-names-a-fusion",
        GROUP,
        'POST /v1/predict {"adapter": "f"} where f is a loaded fusion (a 404 "no adapter named \'f\' is loaded", '
        "which did not say f is loaded, as a fusion)",
        af.ConfigError,
        ("'adapter' names 'f', which is a loaded fusion", "send it as 'fusion'"),
        _predict({"inputs": ["x"], "adapter": "f", "head": "cls"}),
    ),
    B(
        "serve-piece-source-blank",
        GROUP,
        'POST /v1/pieces {"kind": "adapter", "source": " "} (went to the model\'s thread and came back "the adapter '
        "in ' ' was refused; the reason is in the server's log\")",
        af.ConfigError,
        ("'source' is ' '", "a piece's folder on the server"),
        lambda folder: lambda: parse_piece({"kind": "adapter", "source": " "}),
    ),
    B(
        "serve-piece-config-bad-setting",
        GROUP,
        'POST /v1/pieces of a saved adapter whose adapter_config.json has "non_linearity": "nope" (was "the adapter '
        "in '...' was refused; the reason is in the server's log\": nothing the client could act on)",
        af.ConfigError,
        ("refused for a setting in its adapter_config.json", "non_linearity='nope'", "save the adapter again"),
        _piece_with_setting("non_linearity", "nope"),
    ),
    B(
        "serve-adapterhub-fusion-bad-setting",
        GROUP,
        'POST /v1/pieces of an AdapterHub fusion whose adapter_fusion_config.json has "dropout_prob": 7 (was told '
        "the setting is in its 'fusion_config.json', a file the folder does not hold: the answer was cut out of the "
        "message at '<kind>_config.json: ')",
        af.ConfigError,
        ("refused for a setting in its adapter_fusion_config.json", "dropout_prob=7 must be a number from 0 to 1"),
        _adapterhub_fusion_with_setting("dropout_prob", 7),
    ),
    B(
        "serve-fusion-over-adapters-placed-otherwise",
        GROUP,
        "POST /v1/pieces of a fusion saved over Houlsby adapters a and b, into a server whose a and b are Pfeiffer's "
        "(was told the fusion 'was saved for another encoder than the one this server runs': the encoder was this one)",
        af.ConfigError,
        ("or over adapters of the names it fuses placed otherwise", "load the adapters it was saved with first"),
        _fusion_over_adapters_placed_otherwise,
    ),
    B(
        "serve-api-key-wrong",
        GROUP,
        "POST /v1/pieces with 'Authorization: Bearer <a wrong key>' (the same 401 as no key at all: 'needs the "
        "server's API key')",
        af.ConfigError,
        ("the API key sent is not this server's", "the key the server was started with"),
        _key_check({"Authorization": "Bearer wrong-key-456"}),
    ),
    B(
        "serve-api-key-in-url",
        GROUP,
        "POST /v1/pieces?api_key=KEY, the key in the query string (a 401 that did not say the URL is not read)",
        af.ConfigError,
        ("sent no API key", "a key in the URL is not read", "Authorization: Bearer KEY"),
        _key_check({}, f"api_key={KEY}"),
    ),
    B(
        "serve-api-key-other-scheme",
        GROUP,
        "POST /v1/pieces with 'Authorization: Token KEY' (a 401 that did not say the scheme was the fault)",
        af.ConfigError,
        ("not of the Bearer scheme ('Token' ...)", "Authorization: Bearer KEY"),
        _key_check({"Authorization": f"Token {KEY}"}),
    ),
    B(
        "serve-config-a-dict",
        GROUP,
        "create_app(model, tokenizer, {'max_batch_size': 8}), the config's fields as a dict (an AttributeError: 'dict' "
        "object has no attribute 'max_length')",
        af.ConfigError,
        ("config is a dict, not a ServeConfig", "ServeConfig(**{'max_batch_size': 8})"),
        lambda folder: lambda: create_app(adapters_a_and_b("cls"), None, {"max_batch_size": 8}),  # type: ignore[arg-type]
    ),
    B(
        "serve-host-none",
        GROUP,
        "serve(setup, host=None) (getaddrinfo read None as 'any': the server would listen on every interface)",
        af.ConfigError,
        ("host None is not an address", "'127.0.0.1'"),
        lambda folder: lambda: serve(folder / "setup", host=None),  # type: ignore[arg-type]
    ),
    B(
        "serve-setup-on-another-base",
        GROUP,
        "adapterfusion serve SETUP without --base, for a setup saved on another encoder than the shipped one (was "
        "told to 'load it into a matching model', in the Python API's terms)",
        af.IncompatibleModelError,
        ("hidden_size=32", "no --base was given", "serve it with --base"),
        _setup_on_the_shipped_encoder,
    ),
    B(
        "serve-api-key-env-too-short",
        GROUP,
        "ADAPTERFUSION_API_KEY=short adapterfusion serve SETUP, no --api-key (was 'the API key must have at least 8 "
        "characters', to a user who gave none on the command line)",
        af.ConfigError,
        ("at least 8 characters", "$ADAPTERFUSION_API_KEY"),
        _serve_with_env_key("short"),
        cli=True,
    ),
    B(
        "serve-allowed-host-wildcard",
        GROUP,
        "serve --allowed-host '*' (ServeConfig(allowed_hosts=('*',))): started, then refused every request 400, no "
        "Host header being '*'",
        af.ConfigError,
        ("'*' is not a host name", "wildcards such as '*' are not read", "give none"),
        lambda folder: lambda: ServeConfig(allowed_hosts=("*",)),
    ),
)
