"""What a client may send and get back, checked against the loaded pieces (a Catalog) before anything runs: each bad
request becomes a RequestError whose status (400, 404, 413, 422) and message say what is wrong and how to fix it, so
it never reaches the model. The body's envelope is checked first (request_body.py), a 'block' by request_blocks.py.

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

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adapterfusion._validation import blank_pair_text, check_piece_name
from adapterfusion.blocks import Block
from adapterfusion.errors import ConfigError
from adapterfusion.piece import PIECE_KINDS
from adapterfusion.serving.catalog import Catalog
from adapterfusion.serving.request_blocks import parse_request_block
from adapterfusion.serving.request_errors import (
    RequestError,
    as_given,
    as_json,
    as_shown,
    is_json_number,
    json_kind,
    require_loaded,
)

if TYPE_CHECKING:
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
DEFAULT_NEW_TOKENS = 32  # what a generate request without max_new_tokens gets (at most the server's limit)
_PIECE_KEYS = ("kind", "source", "name")
# The longest piece name POST /v1/pieces takes (it becomes a folder name when the setup is saved, which file systems
# cap at 255 bytes) and the longest 'source' (Linux's PATH_MAX; a Hub id is far shorter).
MAX_PIECE_NAME_CHARS, MAX_SOURCE_CHARS = 128, 4096
_INPUTS_FORM = 'a list of texts ["...", ...] or of text pairs [["...", "..."], ...]'
_PROMPTS_FORM = 'a list of prompts ["...", ...]'


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


def no_tokens(index: int, text: str) -> RequestError:
    """422 for inputs[index], whose `text` (all of it, or of a pair) this tokenizer turns into no token of text."""
    return RequestError(
        422,
        f"inputs[{index}] is {len(text)} characters that make no tokens of text (none but the tokenizer's "
        "own); send text",
    )


def parse_predict(data: dict[str, Any], catalog: Catalog, config: ServeConfig) -> PredictRequest:
    """`data` (read_body's object) checked against the loaded pieces and the limits of `config`."""
    _reject_unknown(data, _PREDICT_KEYS)
    inputs = _parse_inputs(data.get("inputs"), config)
    choice = _parse_choice(data, catalog)
    head = data.get("head")
    if head is None:
        head = _default_head(catalog, choice)
    require_loaded("head", head, list(catalog.heads))
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
        raise RequestError(422, f"'max_new_tokens' is {as_json(new_tokens)}; give a whole number from 1 to {limit}")
    if new_tokens > limit:
        raise RequestError(413, f"'max_new_tokens' is {as_json(new_tokens)}, over this server's limit of {limit}")
    chat = data.get("chat", False)
    if not isinstance(chat, bool):
        raise RequestError(422, f"'chat' is {as_json(chat)}; give true (apply the chat template) or false")
    prompts = tuple(text for text, _ in inputs)
    return GenerateRequest(prompts, _parse_choice(data, catalog), new_tokens, chat, _parse_sampling(data))


def _parse_sampling(data: dict[str, Any]) -> Sampling | None:
    """The request's temperature, top_p and top_k; None (greedy) at temperature 0, where the others have no say."""
    temperature = data.get("temperature", 0.0)
    if not is_json_number(temperature) or not (temperature == 0.0 or MIN_TEMPERATURE <= temperature <= MAX_TEMPERATURE):
        raise RequestError(
            422,
            f"'temperature' is {as_json(temperature)}; give 0 (greedy) or a number from {MIN_TEMPERATURE:g} to "
            f"{MAX_TEMPERATURE:g}",
        )
    top_p, top_k = data.get("top_p", 1.0), data.get("top_k", 0)
    if not is_json_number(top_p) or not 0.0 < top_p <= 1.0:
        raise RequestError(422, f"'top_p' is {as_json(top_p)}; give a share above 0 and at most 1 (1: all tokens)")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 0 <= top_k <= MAX_TOP_K:
        raise RequestError(422, f"'top_k' is {as_json(top_k)}; give a whole number from 0 (no limit) to {MAX_TOP_K:,}")
    if temperature == 0.0:
        given = [key for key in ("top_p", "top_k") if key in data]
        if given:
            raise RequestError(
                422, f"{' and '.join(map(repr, given))} act only when sampling; give a 'temperature' above 0"
            )
        return None
    return Sampling(float(temperature), float(top_p), top_k)


def _parse_choice(data: dict[str, Any], catalog: Catalog) -> dict[str, str] | Block | None:
    """The request's 'adapter', 'fusion' or 'block' (names checked loaded) as an adapter_names entry; None: the
    plain model."""
    given = [kind for kind in ("adapter", "fusion", "block") if data.get(kind) is not None]
    if len(given) > 1:
        raise RequestError(422, f"give one of 'adapter', 'fusion' and 'block', not {' and '.join(given)}")
    if given == ["block"]:
        return parse_request_block(data["block"], catalog)
    choice = None
    for kind in ("adapter", "fusion"):
        name = data.get(kind)
        if name is not None:
            _require_piece(kind, name, catalog)
            choice = {kind: name}
    return choice


def _require_piece(kind: str, name: Any, catalog: Catalog) -> None:
    """require_loaded for an 'adapter' or 'fusion' field; 422 naming the field to use where `name` is loaded as the
    other kind (a 404 'no adapter named f' left the client to find that f is a fusion)."""
    loaded = {"adapter": list(catalog.adapters), "fusion": list(catalog.fusions)}
    other = "fusion" if kind == "adapter" else "adapter"
    if isinstance(name, str) and name not in loaded[kind] and name in loaded[other]:
        raise RequestError(
            422,
            f"'{kind}' names {as_shown(name)}, which is a loaded {other}, not {'an' if kind == 'adapter' else 'a'} "
            f"{kind}; send it as '{other}'",
        )
    require_loaded(kind, name, loaded[kind])


def parse_piece(data: dict[str, Any]) -> PieceRequest:
    """A POST /v1/pieces body: the kind of piece, where it is, and optionally the name to load it as."""
    _reject_unknown(data, _PIECE_KEYS)
    kind, source, name = data.get("kind"), data.get("source"), data.get("name")
    if kind not in PIECE_KINDS:
        given = "missing" if "kind" not in data else as_given(kind)
        raise RequestError(422, f"'kind' is {given}; give one of {list(PIECE_KINDS)}")
    if not isinstance(source, str) or not source.strip():  # blank: the library's refusal names the server's folder
        given = "missing" if "source" not in data else as_given(source)
        raise RequestError(422, f"'source' is {given}; give a piece's folder on the server or a Hub id 'org/name'")
    if len(source) > MAX_SOURCE_CHARS:
        raise RequestError(
            422, f"'source' has {len(source)} characters; no folder path or Hub id has more than {MAX_SOURCE_CHARS}"
        )
    if "\x00" in source or not _is_unicode(source):
        raise RequestError(422, f"'source' {as_json(source)} holds a NUL or a lone surrogate; no path or Hub id does")
    if name is not None and (not isinstance(name, str) or not name):
        raise RequestError(422, f"'name' is {as_given(name)}; give a non-empty name or leave it out (the saved name)")
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
        raise RequestError(422, f"unknown field(s) {as_shown(unknown)}; this endpoint takes {list(known)}")


def _parse_inputs(value: Any, config: ServeConfig, form: str = _INPUTS_FORM) -> tuple[tuple[str, str | None], ...]:
    """The request's 'inputs' as (text, pair or None) rows; `form` says what the endpoint takes."""
    if value is None:
        raise RequestError(422, f"'inputs' is missing; give {form}")
    if not isinstance(value, list):
        raise RequestError(422, f"'inputs' is {json_kind(value)}; give {form}")
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
                422, f"inputs[{index}] = {as_json(entry)} has the wrong shape; each entry is a text or a pair of texts"
            )
        broken = next((text for text in texts if not _is_unicode(text)), None)
        if broken is not None:
            raise RequestError(
                422,
                f"inputs[{index}] holds a lone surrogate ({as_json(broken)}), which is not text; send valid Unicode",
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
