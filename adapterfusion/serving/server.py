"""`adapterfusion serve`: load a saved setup onto its base encoder and serve it with uvicorn until SIGINT/SIGTERM,
which stops taking connections, lets the requests in flight finish for --drain-seconds, answers those still running
503 (Retry-After), then ends."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import signal
import socket
from dataclasses import replace
from typing import Any, cast

import torch
import transformers

from adapterfusion.defaults import default_encoder_path
from adapterfusion.devices import available_device
from adapterfusion.encoder_limits import encoder_config
from adapterfusion.encoder_loading import load_tokenizer
from adapterfusion.encoders import resolve_encoder
from adapterfusion.errors import ConfigError, IncompatibleModelError
from adapterfusion.io.paths import user_path
from adapterfusion.model import AdaptedModel
from adapterfusion.piece import SETUP_FILE
from adapterfusion.serialization.setup_index import read_index
from adapterfusion.serving.app import create_app, model_executor
from adapterfusion.serving.config import LOOPBACK_NAMES, ServeConfig, given_config
from adapterfusion.serving.generator import new_tokens_limit
from adapterfusion.serving.predictor import check_max_length

logger = logging.getLogger(__name__)

# Seconds uvicorn waits past the drain before it cancels what is left: time for the app's 503s to be written.
STOP_GRACE_SECONDS = 5
# After a second interrupt, the seconds the app's 503s get to be written before the exit is forced.
FORCED_ANSWER_SECONDS = 1.0
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_setup(
    setup: str | os.PathLike,
    base: str | os.PathLike | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    max_length: int | None = None,
    max_new_tokens: int | None = None,
) -> tuple[AdaptedModel, Any]:
    """The model save_pretrained wrote to `setup`, on `base` (default: the shipped encoder), with base's tokenizer,
    in eval mode on `device` in `dtype`. A `max_length` (the server's) over what base's tokenizer and config allow,
    and for a setup saved on a model that generates a `max_new_tokens` that leaves no room for a prompt, are refused
    before the weights load (where base's config is on disk or in the Hub cache and the setup is a local folder;
    else create_app refuses them)."""
    if dtype not in DTYPES:
        raise ConfigError(f"dtype {dtype!r} is not one of {list(DTYPES)}")
    target = available_device(device, "serve with --device cpu")
    given_base, base = base, base if base is not None else default_encoder_path()
    encoder = resolve_encoder(base)
    tokenizer = load_tokenizer(encoder)
    config = encoder_config(encoder.folder or encoder.given)
    check_max_length(max_length, config, tokenizer)
    if config is not None and _setup_generates(setup):
        new_tokens_limit(max_new_tokens, max_length, config, tokenizer)
    try:
        model = AdaptedModel.from_pretrained(base, setup)
    except IncompatibleModelError as error:  # the library's fix is in Python's terms; a server's is its --base
        raise IncompatibleModelError(f"{error}; {_base_advice(setup, given_base)}") from None
    return model.to(device=target, dtype=DTYPES[dtype]).eval(), tokenizer


def _base_advice(setup: str | os.PathLike, given_base: str | os.PathLike | None) -> str:
    """How to serve a setup that does not fit the base it was loaded on: the base it was saved on, as --base."""
    saved_on = _saved_base_model(setup).get("name_or_path")
    named = repr(saved_on) if isinstance(saved_on, str) and saved_on else "the encoder it was saved on"
    used = "the shipped encoder, as no --base was given" if given_base is None else f"--base {os.fspath(given_base)!r}"
    return f"it was loaded on {used}; serve it with --base {named} (load_setup's base), a folder or Hub id"


def serve(
    setup: str | os.PathLike,
    base: str | os.PathLike | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    config: ServeConfig | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    drain_seconds: int = 30,
) -> None:
    """Serve `setup` on host:port until stopped; requests in flight get `drain_seconds` to finish."""
    import uvicorn

    config = given_config(config)
    if not isinstance(host, str):  # None would listen on every interface, unasked
        raise ConfigError(
            f"host {host!r} is not an address; give one as a string: '127.0.0.1' (this machine only) or '0.0.0.0' "
            "(all interfaces)"
        )
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"port {port!r} is not a TCP port; give a number from 1 to 65535 (0: any free port)")
    if isinstance(drain_seconds, bool) or not isinstance(drain_seconds, int) or drain_seconds < 1:
        raise ConfigError(
            f"drain_seconds={drain_seconds!r} must be a whole number of seconds >= 1: the time requests in flight "
            "get to finish when the server stops"
        )
    available_device(device, "serve with --device cpu")  # before the minutes of loading, not after
    _check_can_listen(host, port)
    executor = model_executor()  # the model is loaded on the thread that will run it (model_executor says why)
    try:
        loading = executor.submit(load_setup, setup, base, device, dtype, config.max_length, config.max_new_tokens)
        model, tokenizer = loading.result()
    except BaseException:
        executor.shutdown(wait=False)
        raise
    _log_to_stderr()
    if config.api_key is None and not _is_loopback(host):
        logger.warning(
            "serving on %s without an API key: anyone who reaches it can load pieces (POST /v1/pieces)", host
        )
    if config.allowed_hosts is None and _is_loopback(host):
        config = replace(config, allowed_hosts=tuple(dict.fromkeys((*LOOPBACK_NAMES, host.lower()))))
    app = create_app(model, tokenizer, config, executor)
    server_config = uvicorn.Config(
        app, host=host, port=port, timeout_graceful_shutdown=drain_seconds + STOP_GRACE_SECONDS, log_level="info"
    )
    draining_server(server_config, drain_seconds).run()


def draining_server(config: Any, drain_seconds: float) -> Any:
    """A uvicorn.Server for `config` (its app made by create_app) that, when it stops, tells the app to answer what
    is still running after `drain_seconds` with a 503; give the config a timeout_graceful_shutdown above
    `drain_seconds`, or uvicorn cancels those requests first (a plain-text 500 and a traceback each)."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        stopping: asyncio.AbstractEventLoop | None = None

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            self.stopping = asyncio.get_running_loop()
            config.app.state.begin_stopping(drain_seconds)
            await super().shutdown(sockets)

        def handle_exit(self, sig: int, frame: Any) -> None:
            """A second interrupt while draining: uvicorn's forced exit would cancel the requests still running,
            each answered a plain-text 500; the app answers them its 503 first, and the exit is forced once those
            had FORCED_ANSWER_SECONDS to be sent (sooner if every connection closes)."""
            loop = self.stopping
            if loop is None or not self.should_exit or self.force_exit or sig != signal.SIGINT:
                super().handle_exit(sig, frame)
                return
            loop.call_soon_threadsafe(config.app.state.stop_now)
            loop.call_soon_threadsafe(loop.call_later, FORCED_ANSWER_SECONDS, setattr, self, "force_exit", True)

    lifespan_logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _ForcedExitFilter) for f in lifespan_logger.filters):
        lifespan_logger.addFilter(_ForcedExitFilter())
    return DrainingServer(config)


class _ForcedExitFilter(logging.Filter):
    """Drops the traceback uvicorn logs when a second interrupt cancels the app's shutdown (a CancelledError in the
    lifespan): the app says 'forced shutdown' itself, and the user asked for exactly that."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[0] is asyncio.CancelledError:
            return False
        message = record.getMessage()  # starlette hands uvicorn the lifespan's traceback as text
        return not (message.startswith("Traceback") and message.rstrip().endswith("CancelledError"))


def _log_to_stderr() -> None:
    """The library's log lines (pieces loaded at run time and refused, forwards that failed) beside uvicorn's, with
    time and level, unless the application configured logging itself (the `adapterfusion` logger or the root's)."""
    library = logging.getLogger("adapterfusion")
    if library.handlers or logging.getLogger().handlers:  # configured by the application: its handlers print them
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    library.addHandler(handler)
    library.setLevel(logging.INFO)


def _check_can_listen(host: str, port: int) -> None:
    """Refuse a host that names no address and a port in use before the model loads, not after (uvicorn's way)."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as error:
        reason = error.strerror if isinstance(error, socket.gaierror) else "not a host name"
        raise ConfigError(
            f"host {host!r} is no address this machine can listen on ({reason}); give an IP address such as "
            "127.0.0.1 (this machine only) or 0.0.0.0 (all interfaces), or a name that resolves"
        ) from None
    for family, kind, protocol, _, address in addresses:
        with socket.socket(family, kind, protocol) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            try:
                probe.bind(address)
            except OSError as error:
                raise ConfigError(
                    f"cannot listen on {host}:{port} ({error.strerror}): another server may hold the port, or the "
                    "address is not this machine's; give another --port (0: any free port) or --host"
                ) from None


def _setup_generates(setup: str | os.PathLike) -> bool:
    """Whether the setup in the local folder `setup` was saved on a model with a language-model head (the class
    from_pretrained loads), read from its index before any weights load; False for a Hub id (create_app checks)."""
    saved = _saved_base_model(setup).get("class")
    can_generate = getattr(getattr(transformers, saved, None) if isinstance(saved, str) else None, "can_generate", None)
    return bool(callable(can_generate) and can_generate())


def _saved_base_model(setup: str | os.PathLike) -> dict[str, Any]:
    """The 'base_model' entry of the index of the setup in the local folder `setup`; {} for a Hub id."""
    folder = user_path(setup)
    if not (folder / SETUP_FILE).is_file():
        return {}
    return cast(dict[str, Any], read_index(folder)["base_model"])


def _is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback one: by what it resolves to, not its spelling, so that
    'LOCALHOST' or 'ip6-localhost' gets a loopback server's Host check (and no warning) as 'localhost' does."""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
        return bool(addresses) and all(ipaddress.ip_address(str(a).partition("%")[0]).is_loopback for a in addresses)
    except (OSError, UnicodeError, ValueError):
        return False
