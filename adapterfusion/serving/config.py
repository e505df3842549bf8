"""The server's knobs as one frozen value: how requests are batched, how many may wait, how large one may be, and
the API key that guards loading pieces at run time."""

from __future__ import annotations

import os
from dataclasses import dataclass

from adapterfusion._validation import short_repr
from adapterfusion.errors import ConfigError

API_KEY_ENV = "ADAPTERFUSION_API_KEY"
# The names a client on this machine reaches a loopback server by.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
# The tokens an input keeps when neither its tokenizer nor its model's position table says (predictor.model_limit).
DEFAULT_MAX_LENGTH = 512
# The default characters of one text per token of max_length. English runs ~4-5 characters a token (WordPiece, BPE),
# so a longer text is cut by truncation anyway; and tokenising runs on the event loop, whose pause grows with the
# characters (up to ~2 ms per 1000 on 2 cores, emoji through a BPE tokenizer), not with the tokens kept.
CHARS_PER_TOKEN = 8
# The new tokens one generate request may ask for when the server is not told (create_app caps it so that a one-token
# prompt still fits the model's positions: a tiny or old decoder may hold fewer).
DEFAULT_MAX_NEW_TOKENS = 256


@dataclass(frozen=True)
class ServeConfig:
    """max_batch_size: rows (inputs) in one forward; max_batch_tokens: padded tokens in one forward (inputs x the
    longest; None: no limit), which keeps long inputs from padding batches of short ones (a request over it alone
    still runs, alone); max_wait_ms: how long the first request of a batch waits for others to join it; max_queue:
    requests waiting for a forward before new ones get 429; max_inputs: inputs in one request (at most
    max_batch_size, so a request always fits one forward; None: max_batch_size); max_text_chars: characters of one
    text (None: CHARS_PER_TOKEN per token of max_length, which bounds the tokenising the event loop does per request);
    max_body_bytes: bytes of one request body; max_length: tokens kept of an input (None: the tokenizer's and the
    model's limit; more is refused when the app is made); max_new_tokens: the most tokens one generate request may
    ask for (None: DEFAULT_MAX_NEW_TOKENS, at most what the model's positions leave after a one-token prompt; more
    is refused when the app is made); api_key: required by POST /v1/pieces when set; allowed_hosts: the host names
    a request's Host header may give (None: any; `serve` on a loopback address defaults to LOOPBACK_NAMES), which
    keeps web pages of other sites from reaching a local server through DNS rebinding."""

    max_batch_size: int = 32
    max_batch_tokens: int | None = 4096
    max_wait_ms: float = 5.0
    max_queue: int = 256
    max_inputs: int | None = None
    max_text_chars: int | None = None
    max_body_bytes: int = 2_000_000
    max_length: int | None = None
    max_new_tokens: int | None = None
    api_key: str | None = None
    allowed_hosts: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.allowed_hosts is not None:
            hosts = self.allowed_hosts
            if (
                not isinstance(hosts, (tuple, list))
                or not all(isinstance(h, str) and h.strip() for h in hosts)
                or not hosts
            ):
                raise ConfigError(
                    f"allowed_hosts={short_repr(hosts)} must be a non-empty tuple of host names such as "
                    "('localhost',), or None for any"
                )
            object.__setattr__(self, "allowed_hosts", tuple(_bare_host(h) for h in hosts))
        if self.max_inputs is None:  # ServeConfig(max_batch_size=8) alone was refused: 32 inputs exceed 8
            object.__setattr__(self, "max_inputs", self.max_batch_size)
        for name in ("max_batch_size", "max_queue", "max_inputs", "max_body_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}={short_repr(value)} must be a positive whole number{_flag(name)}")
        for name in ("max_batch_tokens", "max_text_chars", "max_new_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name}={short_repr(value)} must be a positive whole number, or None{_flag(name)}")
        if self.max_length is not None and (
            isinstance(self.max_length, bool) or not isinstance(self.max_length, int) or self.max_length < 2
        ):
            raise ConfigError(
                f"max_length={short_repr(self.max_length)} must be a whole number of tokens >= 2, or "
                f"None{_flag('max_length')}"
            )
        wait = self.max_wait_ms
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 10_000:
            raise ConfigError(
                f"max_wait_ms={short_repr(self.max_wait_ms)} must be between 0 and 10000 "
                f"milliseconds{_flag('max_wait_ms')}"
            )
        if self.inputs_limit > self.max_batch_size:
            raise ConfigError(
                f"max_inputs={short_repr(self.max_inputs)} exceeds max_batch_size={self.max_batch_size}: a request "
                "must fit one forward; lower max_inputs or raise max_batch_size (serve's --max-inputs, "
                "--max-batch-size)"
            )
        if self.api_key is not None and not isinstance(self.api_key, str):
            raise ConfigError(
                f"the API key must be a string (str) of at least 8 characters, not {type(self.api_key).__name__}"
            )
        if self.api_key is not None and len(self.api_key) < 8:
            raise ConfigError(
                f"the API key must have at least 8 characters (or give none); check --api-key or ${API_KEY_ENV}, which "
                "serve reads when the flag is not given"
            )
        if self.api_key is not None and not (self.api_key.isascii() and self.api_key.isprintable()):
            raise ConfigError(
                "the API key must be printable ASCII (letters, digits, punctuation): HTTP headers carry no other "
                f"characters, so no client could send it (check --api-key or ${API_KEY_ENV})"
            )
        if self.api_key is not None and self.api_key != self.api_key.strip():
            raise ConfigError(
                "the API key begins or ends with a space, which HTTP strips from a header's value, so no client could "
                "send it and every POST /v1/pieces would be refused 401; remove the spaces (check --api-key or "
                f"${API_KEY_ENV})"
            )

    @property
    def text_chars(self) -> int:
        """The characters one text may have: max_text_chars, else CHARS_PER_TOKEN per token of max_length (of
        DEFAULT_MAX_LENGTH while that is None; create_app sets it to the model's limit)."""
        if self.max_text_chars is not None:
            return self.max_text_chars
        return CHARS_PER_TOKEN * (self.max_length or DEFAULT_MAX_LENGTH)

    @property
    def new_tokens(self) -> int:
        """The most new tokens one generate request may ask for: max_new_tokens, else DEFAULT_MAX_NEW_TOKENS (create_app
        sets it to what the model's positions allow)."""
        return self.max_new_tokens if self.max_new_tokens is not None else DEFAULT_MAX_NEW_TOKENS

    @staticmethod
    def key_from_env(given: str | None) -> str | None:
        """`given` (a --api-key flag), else ADAPTERFUSION_API_KEY, else None; an empty variable means none, an empty
        flag is refused (a key meant but lost, e.g. --api-key "$UNSET", would leave the server open)."""
        if given == "":
            raise ConfigError(
                "--api-key is empty; give a key of at least 8 characters, or leave the flag out for a server "
                f"without one (or with ${API_KEY_ENV}'s)"
            )
        key = given if given is not None else os.environ.get(API_KEY_ENV)
        return key or None

    @property
    def inputs_limit(self) -> int:
        """max_inputs as resolved (never None once the config is made)."""
        return self.max_inputs if self.max_inputs is not None else self.max_batch_size


def _flag(field: str) -> str:
    """Where a ServeConfig field's refusal names the `adapterfusion serve` flag that set it, for an operator who
    typed the flag, not the field."""
    return f" (serve's --{field.replace('_', '-')})"


def given_config(config: object) -> ServeConfig:
    """`config` as create_app and serve take it: a ServeConfig, or None for the defaults; ConfigError for anything
    else (a dict of its fields failed as "'dict' object has no attribute 'max_length'")."""
    if config is None:
        return ServeConfig()
    if not isinstance(config, ServeConfig):
        shown = short_repr(config, 200)
        fields = f"ServeConfig(**{shown})" if isinstance(config, dict) and len(shown) < 80 else "ServeConfig(...)"
        raise ConfigError(
            f"config is a {type(config).__name__}, not a ServeConfig; pass {fields} (from adapterfusion.serving "
            "import ServeConfig), or None for the defaults"
        )
    return config


def host_name(header: str) -> str:
    """The host name of a Host header, without its port, lower-cased ('[::1]:8000' -> '::1')."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def _bare_host(given: str) -> str:
    """An allowed_hosts entry as a Host header's name is compared with it; ConfigError for one with a scheme, a port
    or a path, which no request's host name (its port dropped) could ever equal, so the server refused every
    request ('localhost:8000' refused a Host header of 'localhost:8000')."""
    name = given.strip().lower()
    bare = name.strip("[]")
    if "/" in name or any(c.isspace() for c in name) or host_name(name) != bare:
        shown = host_name(name.partition("://")[2].partition("/")[0] if "://" in name else name.partition("/")[0])
        shown = shown if shown and not any(c.isspace() for c in shown) else "localhost"
        raise ConfigError(
            f"allowed_hosts entry {short_repr(given)} is not a host name: give the name alone, without scheme, "
            f"port or path, e.g. {short_repr(shown)} (the port of a request's Host header is not compared)"
        )
    if not all(c.isascii() and (c.isalnum() or c in "._-:%") for c in bare):  # '*', 'bücher.de': no Host equals them
        raise ConfigError(
            f"allowed_hosts entry {short_repr(given)} is not a host name, so no request's Host header could "
            "match it and every request would be refused: give names of letters, digits, '.' and '-' (an "
            "international name in its 'xn--' form), one entry each; wildcards such as '*' are not read: to answer "
            "any host, give none (ServeConfig.allowed_hosts=None; serve on a non-loopback --host without "
            "--allowed-host)"
        )
    return bare
