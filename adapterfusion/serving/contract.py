"""What a client may send and get back, checked against the loaded pieces (a Catalog) before anything runs: each bad
request becomes a RequestError whose status (400, 404, 413, 422) and message say what is wrong and how to fix it, so
it never reaches the model.

    POST /v1/predict  {"inputs": ["text", ...] | [["text a", "text b"], ...], "adapter": NAME | "fusion": NAME |
                       "block": BLOCK, "head": NAME}
                   -> {"predictions": [{"label": int, "scores": [float, ...]}, ...]}   (classification heads;
                      with "label_name" too where the head has label names)
                      {"predictions": [{"value": float, "scores": [float]}, ...]}      (regression heads)
    POST /v1/generate {"inputs": ["prompt", ...], "adapter": NAME | "fusion": NAME | "block": BLOCK,
                       "max_new_tokens": int, "chat": bool, "temperature": float, "top_p": float, "top_k": int}
                   -> {"generations": [{"text": str, "tokens": int}, ...]}   (a decoder or encoder-decoder served
                      with its language-model head; "chat": the prompt through the tokenizer's chat template;
                      temperature 0, the default, is greedy, above 0 samples, with top_p / top_k if given)
    POST /v1/pieces   {"kind": "adapter" | "fusion" | "head", "source": folder or Hub id, "name": NAME (optional)}

Neither adapter nor fusion: the plain encoder. No head: the head named like the adapter or fusion, else the setup's
active head. BLOCK, a composition block (blocks.py) as JSON: {"stack": [CHILD, ...]}, {"average": [CHILD, ...],
"weights": [w, ...]} or {"fuse": [adapter, ...]}, a CHILD a loaded adapter's or fusion's name or a nested BLOCK
(e.g. {"stack": ["lang", {"fuse": ["a", "b"]}]}).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from adapterfusion._validation import blank_pair_text, check_piece_name, past_digit_limit, short_repr
from adapterfusion.blocks import (
    AVERAGE_SHARED_OPTIONS,
    Average,
    Block,
    BlockNestingError,
    Fuse,
    Stack,
    holds_layer_norm_copy,
    matching_fusions,
)
from adapterfusion.errors import ConfigError
from adapterfusion.io.documents import repeated_keys
from adapterfusion.piece import PIECE_KINDS

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel
    from adapterfusion.serving.config import ServeConfig

# Heads whose output is one vector per input, which the predictions above describe.
SERVED_HEAD_KINDS = ("classification", "regression")
_PREDICT_KEYS = ("inputs", "adapter", "fusion", "block", "head")
_GENERATE_KEYS = ("inputs", "adapter", "fusion", "block", "max_new_tokens", "chat", "temperature", "top_p", "top_k")
MAX_TEMPERATURE = 100.0
# More tokens than any vocabulary holds: a larger top_k (a JSON integer of 400 digits) failed the generate() it shared
# as no finite number, a refusal in the Python API's terms after the batch ran.
MAX_TOP_K = 1_000_000
# Below this, logits / temperature overflows to inf in float32 and sampling fails; 0 means greedy.
MIN_TEMPERATURE = 1e-3
# A BLOCK's JSON: its kind's key -> the block, and how deep and large one may be.
_BLOCKS = {"stack": Stack, "average": Average, "fuse": Fuse}
_BLOCK_OPTIONS = {"stack": (), "average": ("weights",), "fuse": ("name",)}
MAX_BLOCK_DEPTH, MAX_BLOCK_CHILDREN = 4, 64
# Adapters one block may run at each site (a stack of 64 averages of 64 adapters ran 4,096 and held the model's
# thread for minutes), or as many as the largest loaded fusion fuses, a cost the server took on by loading it.
MAX_BLOCK_ADAPTER_RUNS = 16
# What the adapters of an average block must agree on (blocks.py refuses the rest when the block runs, which would
# fail the forward the request shares): the placement options, and whether each holds its own LayerNorm copies.
PLACEMENT_FIELDS = (*AVERAGE_SHARED_OPTIONS, "train_layer_norm")
DEFAULT_NEW_TOKENS = 32  # what a generate request without max_new_tokens gets (at most the server's limit)
_PIECE_KEYS = ("kind", "source", "name")
# The longest piece name POST /v1/pieces takes (it becomes a folder name when the setup is saved, which file systems
# cap at 255 bytes) and the longest 'source' (Linux's PATH_MAX; a Hub id is far shorter).
MAX_PIECE_NAME_CHARS, MAX_SOURCE_CHARS = 128, 4096
# What a message quotes of a client's string: a refusal never echoes the megabyte a client sent.
SHOWN_CHARS = 60
_INPUTS_FORM = 'a list of texts ["...", ...] or of text pairs [["...", "..."], ...]'
_PROMPTS_FORM = 'a list of prompts ["...", ...]'


class RequestError(ConfigError):
    """A request the server refuses, with the HTTP status that says why and any headers the answer needs (429 and 503
    carry Retry-After)."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


@dataclass(frozen=True)
class HeadInfo:
    kind: str
    outputs: int
    labels: tuple[str, ...] | None


@dataclass(frozen=True)
class Catalog:
    """The loaded pieces, as requests are checked against them: a snapshot taken on the model's thread (at start
    and after each load), so the event loop never reads the model while a piece is being loaded into it."""

    adapters: tuple[str, ...]
    fusions: dict[str, tuple[str, ...]]
    heads: dict[str, HeadInfo]
    active: dict[str, str | None]
    generates: bool = False  # the model has a language-model head (POST /v1/generate)
    # adapter -> its PLACEMENT_FIELDS' values: an average block needs them alike
    placements: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, model: AdaptedModel) -> Catalog:
        heads = {}
        for name in model.head_names:
            config = model.get_head(name).config
            heads[name] = HeadInfo(config.kind, config.output_size, tuple(config.labels) if config.labels else None)
        return cls(
            tuple(model.adapter_names),
            {name: tuple(model.fusion_setup(name).adapters) for name in model.fusion_names},
            heads,
            {"adapter": model.active_adapter, "fusion": model.active_fusion, "head": model.active_head},
            model.can_generate(),
            {
                name: (
                    *(getattr(model.adapter_configs[name], option) for option in AVERAGE_SHARED_OPTIONS),
                    holds_layer_norm_copy(model, name),
                )
                for name in model.adapter_names
            },
        )

    def to_dict(self) -> dict[str, Any]:
        """What GET /v1/pieces answers."""
        return {
            "adapters": list(self.adapters),
            "fusions": {name: list(fused) for name, fused in self.fusions.items()},
            "heads": {
                name: {"kind": head.kind, "outputs": head.outputs, "labels": list(head.labels or ())}
                for name, head in self.heads.items()
            },
            "active": dict(self.active),
        }


@dataclass(frozen=True)
class PredictRequest:
    """A checked predict request: one (text, text pair or None) per input, the routing choice of all its inputs
    (adapter_names' {'adapter'|'fusion': name} form, None for the plain encoder) and its head."""

    inputs: tuple[tuple[str, str | None], ...]
    choice: dict[str, str] | Block | None
    head: str
    head_kind: str
    labels: tuple[str, ...] | None = None


@dataclass(frozen=True)
class GenerateRequest:
    """A checked generate request: its prompts, the routing choice of all of them (as PredictRequest's), at most
    how many tokens to add to each, and whether each prompt is a user turn for the chat template."""

    prompts: tuple[str, ...]
    choice: dict[str, str] | Block | None
    max_new_tokens: int
    chat: bool = False
    sampling: Sampling | None = None  # None: greedy


@dataclass(frozen=True)
class Sampling:
    """How a generate request samples: softmax temperature, nucleus share (1.0: off), top-k (0: off)."""

    temperature: float
    top_p: float = 1.0
    top_k: int = 0


@dataclass(frozen=True)
class PieceRequest:
    kind: str
    source: str
    name: str | None


def read_body(body: bytes, config: ServeConfig) -> dict[str, Any]:
    """The JSON object of a request body (413 over max_body_bytes; 400 empty, not JSON (NaN, Infinity and numbers past
    a float's range included) or a key given twice in one object; 422 not an object)."""
    if len(body) > config.max_body_bytes:
        raise body_too_large(str(len(body)), config)
    if not body.strip():
        raise RequestError(400, 'the request body is empty; send a JSON object, e.g. {"inputs": ["..."]}')
    try:
        data = json.loads(body, object_pairs_hook=_unique_keys, parse_constant=_not_json_number, parse_float=_float)
    except RequestError:
        raise
    except RecursionError:
        raise RequestError(400, "the request body nests JSON too deeply to read; send a flat JSON object") from None
    except UnicodeDecodeError as error:  # e.g. Latin-1 text, whatever its Content-Type's charset says
        byte = f"byte {error.object[error.start]:#04x} at offset {error.start}"
        raise RequestError(
            400,
            f"the request body is not UTF-8 ({byte}); JSON is sent as UTF-8: encode the body so (or escape the "
            "character as \\uXXXX)",
        ) from None
    except ValueError as error:  # not JSON, or an integer longer than Python converts
        if past_digit_limit(error):
            raise RequestError(
                400,
                f"the request body holds an integer of more than {sys.get_int_max_str_digits()} digits, the most this "
                "server reads (no field takes more); send a shorter number",
            ) from None
        raise RequestError(400, f"the request body is not valid JSON ({error}); send a JSON object") from None
    if not isinstance(data, dict):
        raise RequestError(422, f"the request body must be a JSON object, not {_json_kind(data)}")
    return data


def _not_json_number(literal: str) -> Any:
    """400 for NaN, Infinity or -Infinity, which Python's json reads but JSON has not: the value would pass as a
    number and be refused later in Python's terms (weights=[nan, 1]), or pass a check that NaN compares false with."""
    raise RequestError(
        400, f"the request body holds {literal}, which is not JSON (JSON has no NaN or infinity); send a finite number"
    )


def _float(literal: str) -> float:
    """A JSON number with a fraction or exponent; 400 for one past a 64-bit float (1e400), which Python reads as
    infinity, a value JSON has not, refused later in Python's terms (weights=[inf, 1])."""
    value = float(literal)
    if math.isinf(value):
        raise RequestError(
            400,
            f"the request body holds the number {_shown(literal)}, beyond what a 64-bit float holds (about 1.8e308); "
            "send a finite number",
        )
    return value


def _json_kind(value: Any) -> str:
    """The JSON name of a parsed value's type, as the client wrote it (not Python's: NoneType, dict, str)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    kinds = ((str, "a string"), ((int, float), "a number"), (list, "an array"), (dict, "an object"))
    return next((name for kind, name in kinds if isinstance(value, kind)), type(value).__name__)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict; 400 for a key given twice, of which json.loads would keep the last unsaid."""
    repeated = repeated_keys(pairs)
    if repeated:
        raise RequestError(
            400,
            f"the request body gives the key {_short(repeated[0])} more than once in one object; give each key once",
        )
    return dict(pairs)


def check_no_query(endpoint: str, query: str) -> None:
    """400 for a query string on a POST endpoint, whose fields all go in the JSON body: a field sent in the URL would
    otherwise be ignored unsaid (POST /v1/predict?adapter=b ran without adapter b)."""
    if query:
        raise RequestError(
            400, f"{endpoint} takes no query parameters (got {_shown('?' + query)}); send every field in the JSON body"
        )


def check_body_encoding(encoding: str | None) -> None:
    """415 for a body sent compressed (a Content-Encoding other than identity), which the server does not decode: it
    would otherwise be refused as 'not valid JSON', naming a byte of the compressed data."""
    if encoding is None or encoding.strip().lower() in ("", "identity"):
        return
    raise RequestError(
        415,
        f"the request body has Content-Encoding {_shown(encoding)}, which this server does not decode; send the "
        "JSON uncompressed, without a Content-Encoding header",
    )


def no_tokens(index: int, text: str) -> RequestError:
    """422 for inputs[index], whose `text` (all of it, or of a pair) this tokenizer turns into no token of text."""
    return RequestError(
        422,
        f"inputs[{index}] is {len(text)} characters that make no tokens of text (none but the tokenizer's "
        "own); send text",
    )


def body_too_large(size: str, config: ServeConfig) -> RequestError:
    """413 for a body of `size` bytes ("at least N" where it was refused while still arriving)."""
    return RequestError(
        413,
        f"the request body has {size} bytes, over the limit of {config.max_body_bytes}; send fewer inputs, or start "
        "the server with a higher --max-body-bytes (ServeConfig.max_body_bytes)",
    )


def parse_predict(data: dict[str, Any], catalog: Catalog, config: ServeConfig) -> PredictRequest:
    """`data` (read_body's object) checked against the loaded pieces and the limits of `config`."""
    _reject_unknown(data, _PREDICT_KEYS)
    inputs = _parse_inputs(data.get("inputs"), config)
    choice = _parse_choice(data, catalog)
    head = data.get("head")
    if head is None:
        head = _default_head(catalog, choice)
    _require("head", head, list(catalog.heads))
    head_info = catalog.heads[head]
    kind = head_info.kind
    if kind not in SERVED_HEAD_KINDS:  # the fix names the heads that serve, as the client may not have named this one
        served = [name for name, info in catalog.heads.items() if info.kind in SERVED_HEAD_KINDS]
        chosen = "" if data.get("head") is not None else "no 'head' given, and the default "
        fix = f"give 'head', one of {served}" if served else "load one with POST /v1/pieces (kind 'head')"
        raise RequestError(
            422,
            f"{chosen}head {head!r} is a {kind} head; the server predicts with {' or '.join(SERVED_HEAD_KINDS)} "
            f"heads: {fix}",
        )
    return PredictRequest(inputs, choice, head, kind, head_info.labels)


def parse_generate(data: dict[str, Any], catalog: Catalog, config: ServeConfig) -> GenerateRequest:
    """A POST /v1/generate body (read_body's object) checked against the loaded pieces and the limits of `config`."""
    if not catalog.generates:
        raise RequestError(
            404,
            "this server's model has no language-model head, so it cannot generate; serve a decoder (or T5, BART) "
            "setup on its AutoModelForCausalLM / AutoModelForSeq2SeqLM base, or use POST /v1/predict",
        )
    _reject_unknown(data, _GENERATE_KEYS)
    inputs = _parse_inputs(data.get("inputs"), config, _PROMPTS_FORM)
    paired = [index for index, (_, pair) in enumerate(inputs) if pair is not None]
    if paired:
        raise RequestError(422, f"inputs[{paired[0]}] is a pair of texts; each prompt to generate from is one text")
    limit = config.new_tokens
    new_tokens = data.get("max_new_tokens", min(DEFAULT_NEW_TOKENS, limit))
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 1:
        raise RequestError(422, f"'max_new_tokens' is {_short(new_tokens)}; give a whole number from 1 to {limit}")
    if new_tokens > limit:
        raise RequestError(413, f"'max_new_tokens' is {_short(new_tokens)}, over this server's limit of {limit}")
    chat = data.get("chat", False)
    if not isinstance(chat, bool):
        raise RequestError(422, f"'chat' is {_short(chat)}; give true (apply the chat template) or false")
    prompts = tuple(text for text, _ in inputs)
    return GenerateRequest(prompts, _parse_choice(data, catalog), new_tokens, chat, _parse_sampling(data))


def _parse_sampling(data: dict[str, Any]) -> Sampling | None:
    """The request's temperature, top_p and top_k; None (greedy) at temperature 0, where the others have no say."""
    temperature = data.get("temperature", 0.0)
    if not _is_number(temperature) or not (temperature == 0.0 or MIN_TEMPERATURE <= temperature <= MAX_TEMPERATURE):
        raise RequestError(
            422,
            f"'temperature' is {_short(temperature)}; give 0 (greedy) or a number from {MIN_TEMPERATURE:g} to "
            f"{MAX_TEMPERATURE:g}",
        )
    top_p, top_k = data.get("top_p", 1.0), data.get("top_k", 0)
    if not _is_number(top_p) or not 0.0 < top_p <= 1.0:
        raise RequestError(422, f"'top_p' is {_short(top_p)}; give a share above 0 and at most 1 (1: all tokens)")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 0 <= top_k <= MAX_TOP_K:
        raise RequestError(422, f"'top_k' is {_short(top_k)}; give a whole number from 0 (no limit) to {MAX_TOP_K:,}")
    if temperature == 0.0:
        given = [key for key in ("top_p", "top_k") if key in data]
        if given:
            raise RequestError(
                422, f"{' and '.join(map(repr, given))} act only when sampling; give a 'temperature' above 0"
            )
        return None
    return Sampling(float(temperature), float(top_p), top_k)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # not NaN


def _parse_choice(data: dict[str, Any], catalog: Catalog) -> dict[str, str] | Block | None:
    """The request's 'adapter', 'fusion' or 'block' (names checked loaded) as an adapter_names entry; None: the
    plain model."""
    given = [kind for kind in ("adapter", "fusion", "block") if data.get(kind) is not None]
    if len(given) > 1:
        raise RequestError(422, f"give one of 'adapter', 'fusion' and 'block', not {' and '.join(given)}")
    if given == ["block"]:
        block = _parse_block(data["block"], catalog, "block", 1)
        runs, limit = adapter_runs(block, catalog), max([MAX_BLOCK_ADAPTER_RUNS, *map(len, catalog.fusions.values())])
        if runs > limit:
            raise RequestError(
                413,
                f"'block' runs {runs} adapters at each site, over this server's limit of {limit} (each costs about "
                "what the model's own layers do); send a smaller block, or one request per choice",
            )
        return block
    choice = None
    for kind in ("adapter", "fusion"):
        name = data.get(kind)
        if name is not None:
            _require_piece(kind, name, catalog)
            choice = {kind: name}
    return choice


def _require_piece(kind: str, name: Any, catalog: Catalog) -> None:
    """_require for an 'adapter' or 'fusion' field; 422 naming the field to use where `name` is loaded as the other
    kind (a 404 'no adapter named f' left the client to find that f is a fusion)."""
    loaded = {"adapter": list(catalog.adapters), "fusion": list(catalog.fusions)}
    other = "fusion" if kind == "adapter" else "adapter"
    if isinstance(name, str) and name not in loaded[kind] and name in loaded[other]:
        raise RequestError(
            422,
            f"'{kind}' names {_shown(name)}, which is a loaded {other}, not {'an' if kind == 'adapter' else 'a'} "
            f"{kind}; send it as '{other}'",
        )
    _require(kind, name, loaded[kind])


def adapter_runs(block: Any, catalog: Catalog) -> int:
    """How many adapters `block` (or a name in it) runs at each site: a fusion runs each adapter it fuses."""
    if isinstance(block, str):
        return len(catalog.fusions.get(block, ())) or 1
    if isinstance(block, Fuse):
        return len(block.children)
    return sum(adapter_runs(child, catalog) for child in block.children)


def _parse_block(value: Any, catalog: Catalog, where: str, depth: int) -> Block:
    """A BLOCK's JSON (module docstring) as the block it names, its names checked loaded (422/404 naming where)."""
    form = '{"stack": [...]}, {"average": [...], "weights": [...]} or {"fuse": [...]}'
    kinds = [key for key in _BLOCKS if isinstance(value, dict) and key in value]
    if len(kinds) != 1:
        raise RequestError(422, f"'{where}' is {_short(value)}; a block is one of {form}")
    kind = kinds[0]
    extra = sorted(set(value) - {kind, *_BLOCK_OPTIONS[kind]})
    if extra:
        takes = " and ".join(f"'{field}'" for field in (kind, *_BLOCK_OPTIONS[kind]))
        raise RequestError(
            422, f"'{where}' has unknown field(s) {_shown(extra)}; a {kind} block has the fields {takes} only"
        )
    children = value[kind]
    if not isinstance(children, list) or not 1 <= len(children) <= MAX_BLOCK_CHILDREN:
        raise RequestError(422, f"'{where}.{kind}' must list 1 to {MAX_BLOCK_CHILDREN} children: names or blocks")
    if depth > MAX_BLOCK_DEPTH and any(isinstance(child, dict) for child in children):
        raise RequestError(413, f"'{where}' nests blocks more than {MAX_BLOCK_DEPTH} deep")
    parsed: list[Any] = []
    for index, child in enumerate(children):
        if isinstance(child, dict):
            parsed.append(_parse_block(child, catalog, f"{where}.{kind}[{index}]", depth + 1))
        elif isinstance(child, str):
            if child not in catalog.adapters and child not in catalog.fusions:
                loaded = [*catalog.adapters, *catalog.fusions]
                raise RequestError(
                    404, f"'{where}.{kind}[{index}]' = {_shown(child)} is no loaded adapter or fusion ({loaded})"
                )
            parsed.append(child)
        else:
            raise RequestError(422, f"'{where}.{kind}[{index}]' is {_short(child)}; a child is a name or a block")
    options = {key: value[key] for key in _BLOCK_OPTIONS[kind] if key in value}
    if kind == "fuse" and all(isinstance(child, str) for child in parsed):
        # the fusion matched now is the one that runs, whatever is loaded before the request's forward
        options["name"] = _check_fuse(tuple(parsed), options.get("name"), catalog, where)
    if kind == "average":
        _check_average(parsed, catalog, where)
        _check_weights(options.get("weights"), len(parsed), where)
    try:
        return cast(Block, _BLOCKS[kind](*parsed, **options))
    except BlockNestingError as error:  # in the request's JSON terms, not the Python constructors'
        raise RequestError(422, f"'{where}': {error.json_message}") from None
    except (ConfigError, TypeError, ValueError) as error:  # the block's own checks: weights, names
        raise RequestError(422, f"'{where}': {error}") from None


def _check_average(children: list[Any], catalog: Catalog, where: str) -> None:
    """An average block's named children must be adapters placed alike (blocks.py refuses the rest at forward time,
    failing the whole batch the request joined): refused here, in the request's fields."""
    named = [(index, child) for index, child in enumerate(children) if isinstance(child, str)]
    for index, child in named:
        if child not in catalog.adapters:
            raise RequestError(
                422, f"'{where}.average[{index}]' = {child!r} is a fusion; an average block takes adapters only"
            )
    if not named:
        return
    first_index, first = named[0]
    for index, child in named[1:]:
        for option, mine, theirs in zip(
            PLACEMENT_FIELDS, catalog.placements.get(child, ()), catalog.placements.get(first, ()), strict=False
        ):
            if mine != theirs:
                raise RequestError(
                    422,
                    f"'{where}.average[{index}]' = {child!r} is placed otherwise than '{where}.average[{first_index}]' "
                    f"= {first!r} ({option}: {_json_value(mine)} against {_json_value(theirs)}); an average block "
                    "takes adapters placed alike",
                )


def _check_weights(weights: Any, count: int, where: str) -> None:
    """An average block's 'weights', if given, must be a JSON list of one number per adapter, refused here in JSON's
    terms ('weights[0]' is true) where blocks.py would refuse it in Python's (Average(weights=[True, 1])); blocks.py
    checks what the numbers may be (a sum of 0)."""
    if weights is None:
        return
    example = f"e.g. {[round(1 / count, 3)] * count}, or leave it out for equal weights"
    if not isinstance(weights, list):
        raise RequestError(
            422, f"'{where}.weights' is {_short(weights)}; give a list of one number per adapter, {example}"
        )
    if len(weights) != count:
        raise RequestError(
            422,
            f"'{where}.weights' lists {len(weights)} weight(s) for {count} adapters; give one per adapter, {example}",
        )
    for index, weight in enumerate(weights):
        if not _is_number(weight):
            raise RequestError(422, f"'{where}.weights[{index}]' is {_short(weight)}; give a number, {example}")
    try:
        total = math.fsum(weights)
    except OverflowError:  # an integer past a float's range: blocks.py refuses it
        return
    if total == 0:
        raise RequestError(
            422, f"'{where}.weights' {_short(weights)} sum to 0, and an average scales them to sum to 1; {example}"
        )


def _json_value(value: Any) -> str:
    return json.dumps(list(value) if isinstance(value, tuple) else value)


def _check_fuse(adapters: tuple[str, ...], name: Any, catalog: Catalog, where: str) -> Any:
    """A fuse block's adapters (and 'name') matched against the loaded fusions here, so that the refusal speaks of the
    request's fields, not of the Python API (blocks.py's message at forward time); returns the fusion's name."""
    if isinstance(name, str):
        _require("fusion", name, list(catalog.fusions))
        if adapters != catalog.fusions[name]:
            raise RequestError(
                422,
                f"'{where}' names fusion {name!r}, which fuses {list(catalog.fusions[name])}; list those adapters in "
                f"that order in '{where}.fuse'",
            )
        return name
    if name is not None:
        raise RequestError(422, f"'{where}.name' is {_short(name)}; give the name of a loaded fusion, a string")
    matches = matching_fusions(adapters, catalog.fusions)
    if not matches:
        loaded = {fusion: list(fused) for fusion, fused in catalog.fusions.items()}
        raise RequestError(
            422,
            f"'{where}': no loaded fusion fuses exactly {list(adapters)} in this order (loaded fusions: "
            f"{loaded or 'none'}); list a loaded fusion's adapters in its order, or load one with POST /v1/pieces",
        )
    if len(matches) > 1:
        raise RequestError(
            422, f"'{where}': fusions {matches} all fuse {list(adapters)}; say which with a 'name' field in the block"
        )
    return matches[0]


def parse_piece(data: dict[str, Any]) -> PieceRequest:
    """A POST /v1/pieces body: the kind of piece, where it is, and optionally the name to load it as."""
    _reject_unknown(data, _PIECE_KEYS)
    kind, source, name = data.get("kind"), data.get("source"), data.get("name")
    if kind not in PIECE_KINDS:
        given = "missing" if "kind" not in data else _given(kind)
        raise RequestError(422, f"'kind' is {given}; give one of {list(PIECE_KINDS)}")
    if not isinstance(source, str) or not source.strip():  # blank: the library's refusal names the server's folder
        given = "missing" if "source" not in data else _given(source)
        raise RequestError(422, f"'source' is {given}; give a piece's folder on the server or a Hub id 'org/name'")
    if len(source) > MAX_SOURCE_CHARS:
        raise RequestError(
            422, f"'source' has {len(source)} characters; no folder path or Hub id has more than {MAX_SOURCE_CHARS}"
        )
    if "\x00" in source or not _is_unicode(source):
        raise RequestError(422, f"'source' {_short(source)} holds a NUL or a lone surrogate; no path or Hub id does")
    if name is not None and (not isinstance(name, str) or not name):
        raise RequestError(422, f"'name' is {_given(name)}; give a non-empty name or leave it out (the saved name)")
    if name is not None and len(name) > MAX_PIECE_NAME_CHARS:
        raise RequestError(
            422,
            f"'name' has {len(name)} characters; give at most {MAX_PIECE_NAME_CHARS} (it becomes a folder name when "
            "the setup is saved)",
        )
    if name is not None:
        try:
            check_piece_name(name, kind)
        except ConfigError as error:
            raise RequestError(422, f"'name': {error}") from None
    return PieceRequest(kind, source, name)


def _reject_unknown(data: dict[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise RequestError(422, f"unknown field(s) {_shown(unknown)}; this endpoint takes {list(known)}")


def _parse_inputs(value: Any, config: ServeConfig, form: str = _INPUTS_FORM) -> tuple[tuple[str, str | None], ...]:
    """The request's 'inputs' as (text, pair or None) rows; `form` says what the endpoint takes."""
    if value is None:
        raise RequestError(422, f"'inputs' is missing; give {form}")
    if not isinstance(value, list):
        raise RequestError(422, f"'inputs' is {_json_kind(value)}; give {form}")
    if not value:
        raise RequestError(422, f"'inputs' is empty; give at least one input, {form}")
    if len(value) > config.inputs_limit:
        raise RequestError(
            413, f"'inputs' has {len(value)} entries, over the limit of {config.inputs_limit}; split the request"
        )
    rows = []
    for index, entry in enumerate(value):
        texts = [entry] if isinstance(entry, str) else entry
        if not isinstance(texts, list) or len(texts) not in (1, 2) or not all(isinstance(t, str) for t in texts):
            raise RequestError(
                422, f"inputs[{index}] = {_short(entry)} has the wrong shape; each entry is a text or a pair of texts"
            )
        broken = next((text for text in texts if not _is_unicode(text)), None)
        if broken is not None:
            raise RequestError(
                422, f"inputs[{index}] holds a lone surrogate ({_short(broken)}), which is not text; send valid Unicode"
            )
        blank = blank_pair_text(*texts) if len(texts) == 2 else None
        if blank is not None:
            raise RequestError(
                422, f"inputs[{index}] is a pair whose {blank}; send text on both sides, or the one text alone"
            )
        longest = max(len(text) for text in texts)
        if longest > config.text_chars:  # checked before tokenising, which runs on the event loop
            raise RequestError(
                413,
                f"inputs[{index}] has a text of {longest} characters, over the limit of {config.text_chars}; send a "
                "shorter text, or start the server with a higher --max-text-chars (ServeConfig.max_text_chars)",
            )
        rows.append((texts[0], texts[1] if len(texts) == 2 else None))
    return tuple(rows)


def _is_unicode(text: str) -> bool:
    """False for a string JSON allowed but no tokenizer or file system takes: one holding a lone surrogate."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _require(kind: str, name: Any, loaded: list[str]) -> None:
    if not isinstance(name, str):
        raise RequestError(422, f"'{kind}' is {_short(name)}; give the name of a loaded {kind}")
    if name not in loaded:
        raise RequestError(404, f"no {kind} named {_shown(name)} is loaded; loaded {kind}s: {loaded or 'none'}")


def _default_head(catalog: Catalog, choice: dict[str, str] | Block | None) -> str:
    named = next(iter(choice.values())) if isinstance(choice, dict) else None
    if named is not None and named in catalog.heads:
        return named
    active = catalog.active["head"]
    if active is not None:
        return active
    if not catalog.heads:
        raise RequestError(
            422,
            "this server has no heads loaded, and /v1/predict answers with a head; load one with POST /v1/pieces "
            "(kind 'head'), or, on a language model, ask /v1/generate",
        )
    raise RequestError(
        422,
        f"no 'head' given and none is named like the {'piece' if named else 'request'} or active; give 'head', "
        f"one of {list(catalog.heads)}",
    )


def _short(value: Any) -> str:
    """A client's JSON value as a message quotes it, in JSON, cut to SHOWN_CHARS."""
    text = json.dumps(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def _shown(value: Any) -> str:
    """A name (or list of names) the client sent as a message quotes it: repr, cut to SHOWN_CHARS."""
    return short_repr(value, SHOWN_CHARS)


def _given(value: Any) -> str:
    """A field's value as a message quotes it: a string as names are quoted ('x'), anything else in JSON (null)."""
    return _shown(value) if isinstance(value, str) else _short(value)
