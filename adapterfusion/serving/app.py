"""The HTTP app (FastAPI): GET /healthz, POST /v1/predict, POST /v1/generate, GET and POST /v1/pieces, GET /metrics.

Everything that touches the model (forwards and loading pieces) runs on one worker thread, one thing at a time; the
event loop only parses, queues and answers. Load the model on that thread too (`model_executor`, as `serve` does).
Every refusal is a JSON body {"error": {"status", "message"}} (429 and 503 with a Retry-After header); an error inside
a forward fails only the requests it belongs to (batcher.py), never the server. Refusals name what the client sent,
never what is on the server's disk: a piece that does not load is answered by the kind of fault, and its detail (paths,
what the folders hold) goes to the server's log. When the server stops (`app.state.begin_stopping`, which server.py
calls), requests still unanswered after the drain time get a 503 rather than being cut off."""

import asyncio
import contextlib
import hmac
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from adapterfusion._validation import short_repr
from adapterfusion.errors import (
    AdapterFusionError,
    ConfigError,
    HubError,
    IncompatibleModelError,
    NameNotFoundError,
    PieceExistsError,
    SavedSettingError,
    SerializationError,
)
from adapterfusion.serialization.model_pieces import AdaptersNotLoadedError
from adapterfusion.serialization.setup_load import SeveralPiecesError
from adapterfusion.serving.batcher import Batcher, drain_ran_out
from adapterfusion.serving.catalog import Catalog
from adapterfusion.serving.config import ServeConfig, given_config, host_name
from adapterfusion.serving.contract import PieceRequest, parse_generate, parse_piece, parse_predict
from adapterfusion.serving.generator import Generator, new_tokens_limit
from adapterfusion.serving.metrics import CONTENT_TYPE, Metrics
from adapterfusion.serving.predictor import Predictor, check_max_length, check_vocabulary, model_limit
from adapterfusion.serving.request_body import body_too_large, check_body_encoding, check_no_query, read_body
from adapterfusion.serving.request_errors import SHOWN_CHARS, RequestError

if TYPE_CHECKING:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    from adapterfusion.model import AdaptedModel

logger = logging.getLogger(__name__)

ROUTES = ("/healthz", "/v1/predict", "/v1/generate", "/v1/pieces", "/metrics")
_T = TypeVar("_T")


def model_executor() -> ThreadPoolExecutor:
    """The one worker thread that runs everything touching the model, for `create_app`. Load the model on it as well
    (`executor.submit(load_setup, ...).result()`): torch's OpenMP gives every thread that runs a parallel operator
    its own pool of worker threads, and once a second pool exists (the main thread's, left over from loading the
    model) libgomp counts more threads than cores and stops its workers spinning between operators, so every
    operator waits for them to wake. On 2 CPU cores that made each forward on the worker thread 1.42x slower
    (benchmarks/model_thread.py: MiniLM, the load test's batches)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="adapterfusion-model")


def create_app(
    model: "AdaptedModel", tokenizer: Any, config: ServeConfig | None = None, executor: ThreadPoolExecutor | None = None
) -> "FastAPI":
    """The app serving `model` (with its loaded adapters, fusions and heads) through `tokenizer`, running the model on
    `executor` (`model_executor()`, best the one the model was loaded on; default: a new one), which the app shuts
    down when it stops. FastAPI is imported here, not at the top, so that the package imports without the `serve`
    extra; the endpoints' annotations are evaluated here too, where FastAPI reads them. ConfigError for a
    config.max_length over what the model takes, a tokenizer whose vocabulary the model's embeddings do not hold,
    and (a model that generates) a config.max_new_tokens that leaves no room for a prompt in it."""
    try:
        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse, PlainTextResponse, Response
        from starlette.exceptions import HTTPException
    except ImportError:
        raise ConfigError("serving needs FastAPI and uvicorn: pip install 'adapterfusion[serve]'") from None
    config = given_config(config)
    model_config = getattr(model.model, "config", None)
    check_max_length(config.max_length, model_config, tokenizer)
    check_vocabulary(model, tokenizer)
    if model.can_generate():
        new_tokens = new_tokens_limit(config.max_new_tokens, config.max_length, model_config, tokenizer)
        config = replace(config, max_new_tokens=new_tokens)
    # The tokens kept of an input, fixed now, so that the default of max_text_chars follows from it too.
    config = replace(config, max_length=config.max_length or model_limit(model, tokenizer))
    predictor = Predictor(model, tokenizer, config.max_length)
    metrics = Metrics()
    executor = executor if executor is not None else model_executor()

    def on_forward(rows: int, failed: bool) -> None:
        metrics.batch_rows.observe(rows)
        metrics.failed_forwards += failed

    def batcher_of(run: Callable[..., Any]) -> Batcher[Any]:
        limits = (config.max_batch_size, config.max_wait_ms, config.max_queue, config.max_batch_tokens)
        return Batcher(run, executor, *limits, on_forward)

    batcher = batcher_of(predictor.predict)
    # Generation has its own queue (its batches run for many steps), on the same model thread as the forwards.
    generator = Generator(model, tokenizer, config.max_length) if model.can_generate() else None
    generations = batcher_of(generator.generate) if generator is not None else None
    batchers = [batcher, *([generations] if generations is not None else [])]
    in_flight = 0
    catalog = Catalog.of(model)  # replaced (on the model's thread) after each load
    drained = asyncio.Event()  # set when the drain time of a stopping server ran out
    forced = False  # stop_now ran: the lifespan does not wait for the model's thread

    def drain_over() -> None:
        for each in batchers:
            each.stop(drain_ran_out())
        drained.set()

    def begin_stopping(drain_seconds: float) -> None:
        """On the event loop, when the server stops taking connections: whatever is unanswered `drain_seconds` later
        gets drain_ran_out()'s 503, before the server cancels it (which would answer a bare 500)."""
        asyncio.get_running_loop().call_later(drain_seconds, drain_over)

    def stop_now() -> None:
        """On the event loop, at a second interrupt: the drain is over now (server.py gives the 503s a moment to be
        sent before it forces the exit), and the lifespan does not wait for the batchers; the process still ends only
        once a forward running on the model's thread ends (a thread cannot be interrupted)."""
        nonlocal forced
        forced = True
        drain_over()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        for each in batchers:
            each.start()
        try:
            yield
        finally:  # the server stopped taking requests and waited for those in flight; finish anything still queued
            nonlocal forced
            try:
                for each in batchers if not forced else ():
                    await each.close()
            except asyncio.CancelledError:  # a second interrupt: stop now, answering what is queued with a 503
                forced = True
                for each in batchers:
                    each.stop(drain_ran_out())
            if forced:
                logger.warning("forced shutdown: requests still unanswered were answered 503")
            executor.shutdown(wait=not forced, cancel_futures=forced)

    # No /docs, /redoc or /openapi.json (the endpoints are ROUTES, documented in the README), and no redirect of
    # /v1/pieces/ to a URL built from the request's Host header.
    app = FastAPI(
        title="adapterfusion",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        redirect_slashes=False,
    )
    app.state.begin_stopping = begin_stopping
    app.state.stop_now = stop_now

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        nonlocal in_flight
        in_flight += 1
        status = 500  # what the safety net answers when the call raises past every handler
        try:
            refused = _foreign_host(request, config.allowed_hosts)
            if refused is not None:
                status = refused.status
                return _error(refused.status, refused.message)
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            in_flight -= 1
            path = request.url.path
            metrics.requests[(path if path in ROUTES else "other", status)] += 1

    @app.exception_handler(RequestError)
    async def refused(_: Request, error: RequestError) -> JSONResponse:
        return _error(error.status, error.message, error.headers)

    @app.exception_handler(HTTPException)
    async def routing_refused(request: Request, error: HTTPException) -> JSONResponse:  # FastAPI's own 404, 405
        headers = {key.lower(): value for key, value in (error.headers or {}).items()}
        if "allow" in headers:  # Starlette names the first route of the path's methods only; a path may have several
            methods = {
                m
                for route in app.routes
                if getattr(route, "path", None) == request.url.path
                for m in getattr(route, "methods", None) or ()
            }
            headers["allow"] = ", ".join(sorted(methods)) or headers["allow"]
        allowed = f"; this path takes {headers['allow']}" if "allow" in headers else ""
        known = "" if allowed else f"; the endpoints are {', '.join(ROUTES)}"
        return _error(error.status_code, f"{error.detail}{allowed or known}", headers)  # a 405 names Allow

    @app.exception_handler(Exception)
    async def failed(request: Request, _: Exception) -> JSONResponse:  # a safety net: the endpoints catch their own
        return _error(500, "the server failed on this request; the error is in the server's log")

    @app.api_route("/healthz", methods=["GET", "HEAD"])  # HEAD: probes that want the status alone
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "adapters": len(catalog.adapters), "fusions": len(catalog.fusions)}

    async def answer(
        request: Request, encode: Callable[[dict[str, Any]], Any], queue: Batcher[Any], key: str
    ) -> JSONResponse:
        """A request read, checked and encoded by `encode`, run in `queue`'s next batch, answered as {key: [...]}."""
        start = time.perf_counter()
        check_no_query(f"POST {request.url.path}", request.url.query)
        try:
            answers = await _unless_client_left(
                request, queue.submit(encode(read_body(await _body(request, config), config)))
            )
        except ClientLeft:
            return _client_left()
        except RequestError:
            raise
        except AdapterFusionError as error:  # a check inside the forward refused this request's inputs
            # The arrival checks (contract.py) should have: the log shows the operator which one they missed.
            logger.warning("%s: a check inside the forward refused a request the contract let pass: %s", key, error)
            raise RequestError(422, str(error)) from None
        except Exception:
            logger.exception("%s failed", key)
            return _error(500, "the forward failed on the server; the error is in the server's log")
        try:
            response = JSONResponse({key: answers})
        except ValueError:  # NaN or infinity, which JSON cannot carry
            bad = [index for index, each in enumerate(answers) if not _finite(each)]
            logger.error("%s: the model gave non-finite values for inputs %s: %r", key, bad, answers)
            return _error(
                500,
                f"the model gave non-finite values (NaN or infinity) for inputs {bad} of this request, which cannot "
                "be answered; the server's log has them (check the model's dtype and attention kernel)",
            )
        if key == "predictions":  # the histogram is of answered predict requests, not of refusals or generations
            metrics.latency.observe(time.perf_counter() - start)
        metrics.predictions += len(answers)
        return response

    @app.post("/v1/predict")
    async def predict(request: Request) -> JSONResponse:
        return await answer(
            request, lambda data: predictor.encode(parse_predict(data, catalog, config)), batcher, "predictions"
        )

    @app.post("/v1/generate")
    async def generate(request: Request) -> JSONResponse:
        def encode(data: dict[str, Any]) -> Any:
            parsed = parse_generate(data, catalog, config)  # 404 where the model cannot generate
            assert generator is not None
            return generator.encode(parsed)

        return await answer(request, encode, generations or batcher, "generations")

    @app.api_route("/v1/pieces", methods=["GET", "HEAD"])  # HEAD: probes that want the status alone
    async def pieces() -> dict[str, Any]:
        return catalog.to_dict()

    @app.post("/v1/pieces")
    async def post_piece(request: Request) -> JSONResponse:
        nonlocal catalog
        _check_key(request, config.api_key)
        _require_json(request)
        check_no_query("POST /v1/pieces", request.url.query)
        try:
            body = await _body(request, config)
        except ClientLeft:
            return _client_left()
        piece = parse_piece(read_body(body, config))
        loading = asyncio.get_running_loop().run_in_executor(executor, load_piece, model, piece)
        try:
            name, catalog = await _unless_drained(drained, loading)
        except RequestError:
            raise
        except Exception:  # e.g. weights that do not load: this request fails, the server goes on
            logger.exception("loading %s from %s failed", piece.kind, piece.source)
            return _error(500, "loading the piece failed on the server; the error is in the server's log")
        logger.info("loaded %s %r from %s", piece.kind, name, piece.source)
        return JSONResponse({"kind": piece.kind, "name": name}, status_code=201)

    @app.api_route("/metrics", methods=["GET", "HEAD"])  # HEAD: probes that want the status alone
    async def metrics_text() -> PlainTextResponse:
        gauges = {
            "queue_waiting": (sum(each.waiting for each in batchers), "Requests queued for a forward or generation."),
            "in_flight": (in_flight, "HTTP requests being handled."),
            "pieces_loaded": (
                len(catalog.adapters) + len(catalog.fusions) + len(catalog.heads),
                "Adapters, fusions and heads loaded.",
            ),
        }
        return PlainTextResponse(metrics.render(gauges), media_type=CONTENT_TYPE)

    return app


class ClientLeft(Exception):
    """The client closed its connection while its request waited: the request leaves the queue unrun."""


# The status logged and counted for a request whose client left first (nginx's 499); nobody receives it.
CLIENT_CLOSED = 499


def _client_left() -> "JSONResponse":
    """The answer counted for a request whose client left: not a server fault, so no 500 and no traceback."""
    return _error(CLIENT_CLOSED, "the client closed the connection before its answer")


async def _unless_client_left(request: "Request", work: Awaitable[_T]) -> _T:
    """`work`'s result, or ClientLeft if the client disconnects first; `work` is then cancelled, which takes its
    request out of the queue (a request in the running forward still runs, its answer unsent). Starlette does not
    cancel a handler whose client left, so without this a client could queue forwards and hang up."""
    task = asyncio.ensure_future(work)
    try:
        finished = await _finished_first(task, _disconnected(request))
    except asyncio.CancelledError:  # the handler itself cancelled (the server's shutdown timeout): its request too
        task.cancel()
        raise
    if not finished:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise ClientLeft
    return task.result()


async def _finished_first(work: "asyncio.Future[Any]", watcher: Awaitable[Any]) -> bool:
    """Whether `work` is done when it or `watcher` (a client's disconnect, the drain's end) completes first; the
    watcher is cancelled either way, `work` never."""
    waiting = asyncio.ensure_future(watcher)
    try:
        await asyncio.wait([work, waiting], return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
    return work.done()


async def _disconnected(request: "Request") -> None:
    """Returns when the client disconnects: once the body is read, the server's next message is that."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _foreign_host(request: "Request", allowed: tuple[str, ...] | None) -> RequestError | None:
    """400 for a Host header naming none of `allowed` (None: any): a web page on another site whose name was made to
    resolve to 127.0.0.1 (DNS rebinding) sends its own name as the Host, and would otherwise reach a loopback server
    as if it were its own origin, JSON posts included."""
    if allowed is None:
        return None
    given = request.headers.get("host")
    if given is None:  # HTTP/1.0 clients may send none; browsers always do
        return None
    name = host_name(given)
    if name in allowed:
        return None
    return RequestError(
        400,
        f"this server answers to the host names {list(allowed)}, and the request's Host header is {given[:80]!r}; "
        "connect by one of those (or start the server with --allowed-host NAME)",
    )


async def _unless_drained(drained: asyncio.Event, work: "asyncio.Future[_T]") -> _T:
    """`work`'s result, or drain_ran_out() if `drained` is set first (`work` then ends unheard on the model thread)."""
    if not await _finished_first(work, drained.wait()):
        raise drain_ran_out()
    return work.result()


async def _body(request: "Request", config: ServeConfig) -> bytes:
    """The body, refused (413) over max_body_bytes: from its Content-Length before any of it is read, else (a chunked
    body, which declares no length) as soon as the bytes read so far pass the limit, so no oversized body is held."""
    check_body_encoding(request.headers.get("content-encoding"))
    limit = config.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise body_too_large(declared, config)
    from starlette.requests import ClientDisconnect

    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise body_too_large(f"at least {len(body)}", config)
    except ClientDisconnect:  # the client hung up mid-body: was a 500 and a traceback in the log
        raise ClientLeft from None
    return bytes(body)


def load_piece(model: "AdaptedModel", piece: PieceRequest) -> tuple[str, Catalog]:
    """POST /v1/pieces' load of `piece` into `model` (on the model's thread): its name and the new Catalog; a
    RequestError where it is refused, in terms of what the client sent (the library's message goes to the log)."""
    # An adapter and a fusion of one name could not be told apart in a request's JSON block.
    other = {"adapter": "fusion", "fusion": "adapter"}.get(piece.kind)
    taken = set(getattr(model, f"{other}_names")) if other else set()
    if piece.name in taken:
        article = "an" if other == "adapter" else "a"
        raise RequestError(
            422, f"{article} {other} named {piece.name!r} is loaded; load the {piece.kind} under another name"
        )
    if piece.name in getattr(model, f"{piece.kind}_names"):
        raise RequestError(422, f"{piece.kind} {piece.name!r} is loaded already; give another 'name'")
    try:
        name = getattr(model, f"load_{piece.kind}")(piece.source, piece.name)
    except AdapterFusionError as error:
        logger.warning("loading %s from %r was refused: %s", piece.kind, piece.source, error)
        raise _load_refused(error, piece) from None
    if name in taken:
        getattr(model, f"delete_{piece.kind}")(name)
        raise RequestError(
            422, f"the {piece.kind} is saved as {name!r}, the name of a loaded {other}; give it another 'name'"
        )
    return name, Catalog.of(model)


def _load_refused(error: AdapterFusionError, piece: PieceRequest) -> RequestError:
    """What a client is told of a piece that did not load: the kind of fault, in terms of the 'source' it sent. Not the
    library's message, which names the paths it resolved on the server and lists what the folders there hold."""
    kind, source = piece.kind, repr(piece.source)  # at most MAX_SOURCE_CHARS
    if isinstance(error, AdaptersNotLoadedError):  # adapter names, not paths: the client needs them
        return RequestError(
            404,
            f"the fusion in {source} fuses adapters {list(error.fused)}, of which {list(error.missing)} are not loaded "
            "here; load them first (POST /v1/pieces; GET /v1/pieces lists what is loaded)",
        )
    if isinstance(error, PieceExistsError):
        return RequestError(
            422, f"the {kind} in {source} is saved as {error.name!r}, which is loaded already; give another 'name'"
        )
    if isinstance(error, IncompatibleModelError) and kind == "fusion":  # its sites are where its adapters were
        return RequestError(
            422,
            f"the fusion in {source} was saved for another encoder than the one this server runs, or over adapters of "
            "the names it fuses placed otherwise than those loaded here (other layers or positions); load the adapters "
            "it was saved with first, under those names",
        )
    if isinstance(error, IncompatibleModelError):
        return RequestError(422, f"the {kind} in {source} was saved for another encoder than the one this server runs")
    if isinstance(error, (HubError, SerializationError, NameNotFoundError)):
        # One answer whether or not a folder of that name exists here: a client must not learn the server's paths.
        return RequestError(
            422,
            f"no {kind} could be loaded from {source}: no such folder on the server, or no saved {kind} in it (ours "
            f"or AdapterHub's, or a saved setup with one), or a file of it missing or damaged; and as a Hub id, no "
            f"such repository or {kind} in it, or the Hub out of reach",
        )
    if isinstance(error, SeveralPiecesError):  # how many, not their names: those are the server's folders
        return RequestError(
            422,
            f"{source} is a saved setup holding {len(error.choices)} {kind}s; give the folder of one as 'source' "
            f"(the setup's {kind}s folder holds one folder per {kind}, named like it)",
        )
    if isinstance(error, SavedSettingError):  # a saved setting this version refuses: its file's name, not its path
        # a saved value may itself be a path on the server: then the file and the fix, not the reason
        said = f" ({error.reason[:200]})" if not any(sep in error.reason for sep in "/\\") else ""
        return RequestError(
            422,
            f"the {kind} in {source} was refused for a setting in its {error.file}{said}: a hand-edited or damaged "
            f"file, or one saved by another version of adapterfusion; save the {kind} again with this version",
        )
    return RequestError(422, f"the {kind} in {source} was refused; the reason is in the server's log")


def _finite(value: Any) -> bool:
    """Whether an answer holds only finite numbers (JSON has no NaN or infinity)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, Mapping):
        return all(_finite(each) for each in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(each) for each in value)
    return True


def _require_json(request: "Request") -> None:
    """415 unless the body is declared JSON: a web page can post a form or text/plain to a local server without
    asking (no CORS preflight), but not application/json, so this keeps pages from loading pieces into it."""
    declared = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if declared != "application/json":
        raise RequestError(
            415, f"POST /v1/pieces takes a JSON body; send 'Content-Type: application/json' (got {declared or 'none'})"
        )


def _check_key(request: "Request", key: str | None) -> None:
    """401 unless the request carries `key` (Authorization: Bearer KEY, or X-API-Key: KEY); no key: open."""
    if key is None:
        return
    scheme, _, token = request.headers.get("authorization", "").strip().partition(" ")
    given = request.headers.get("x-api-key") or (token.strip() if scheme.lower() == "bearer" else "")
    if hmac.compare_digest(given.encode(), key.encode()):
        return
    send = "send 'Authorization: Bearer KEY' (or 'X-API-Key: KEY')"
    if given:  # one message for every wrong key: it says nothing of the right one
        problem = f"the API key sent is not this server's; {send} with the key the server was started with"
    elif scheme.lower() == "bearer":
        problem = f"the Authorization header holds no key after 'Bearer'; {send}"
    elif scheme:
        problem = (
            f"the Authorization header is not of the Bearer scheme ({short_repr(scheme, SHOWN_CHARS)} ...); {send}"
        )
    else:
        where = " (a key in the URL is not read)" if request.url.query else ""
        problem = f"the request sent no API key{where}; {send}"
    raise RequestError(401, f"loading pieces needs the server's API key: {problem}")


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> "JSONResponse":
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": {"status": status, "message": message}}, status_code=status, headers=headers)
