"""A request's body and envelope before its fields are read: JSON only (no NaN, no key given twice, no number past a
float), UTF-8, uncompressed, no query string, within the size limit; each refusal a RequestError with its status."""

from __future__ import annotations

import json
import math
import sys
from typing import TYPE_CHECKING, Any

from adapterfusion._validation import past_digit_limit
from adapterfusion.io.documents import repeated_keys
from adapterfusion.serving.request_errors import RequestError, as_json, as_shown, json_kind

if TYPE_CHECKING:
    from adapterfusion.serving.config import ServeConfig


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
        raise RequestError(422, f"the request body must be a JSON object, not {json_kind(data)}")
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
            f"the request body holds the number {as_shown(literal)}, beyond what a 64-bit float holds (about 1.8e308); "
            "send a finite number",
        )
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict; 400 for a key given twice, of which json.loads would keep the last unsaid."""
    repeated = repeated_keys(pairs)
    if repeated:
        raise RequestError(
            400,
            f"the request body gives the key {as_json(repeated[0])} more than once in one object; give each key once",
        )
    return dict(pairs)


def check_no_query(endpoint: str, query: str) -> None:
    """400 for a query string on a POST endpoint, whose fields all go in the JSON body: a field sent in the URL would
    otherwise be ignored unsaid (POST /v1/predict?adapter=b ran without adapter b)."""
    if query:
        raise RequestError(
            400,
            f"{endpoint} takes no query parameters (got {as_shown('?' + query)}); send every field in the JSON body",
        )


def check_body_encoding(encoding: str | None) -> None:
    """415 for a body sent compressed (a Content-Encoding other than identity), which the server does not decode: it
    would otherwise be refused as 'not valid JSON', naming a byte of the compressed data."""
    if encoding is None or encoding.strip().lower() in ("", "identity"):
        return
    raise RequestError(
        415,
        f"the request body has Content-Encoding {as_shown(encoding)}, which this server does not decode; send the "
        "JSON uncompressed, without a Content-Encoding header",
    )


def body_too_large(size: str, config: ServeConfig) -> RequestError:
    """413 for a body of `size` bytes ("at least N" where it was refused while still arriving)."""
    return RequestError(
        413,
        f"the request body has {size} bytes, over the limit of {config.max_body_bytes}; send fewer inputs, or start "
        "the server with a higher --max-body-bytes (ServeConfig.max_body_bytes)",
    )
