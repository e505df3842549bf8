"""A multi-tenant inference server: one base encoder, many adapters, fusions and heads, each request naming its
own, with requests that arrive together run in one routed forward (routing.py). Needs the `serve` extra (FastAPI,
uvicorn): `adapterfusion serve SETUP`.

    request_errors.py  RequestError (a 4xx status and message) and how a message quotes the client's values
    catalog.py    the loaded pieces, as requests are checked against them
    request_body.py  the body's envelope: JSON, UTF-8, uncompressed, within the size limit
    request_blocks.py  a request's composition block, read and checked in the request's terms
    contract.py   what a request may hold, checked into PredictRequest / GenerateRequest / PieceRequest or a
                  RequestError (4xx)
    predictor.py  one tokenised batch, one forward with a choice and a head per row
    generator.py  prompts of many requests, one greedy generate() per length group with a choice per prompt
    batcher.py    the bounded queue and the loop that groups requests into forwards
    metrics.py    counters and histograms in the Prometheus text format
    app.py        the FastAPI app and its endpoints
    server.py     loading a saved setup and running uvicorn
"""

from adapterfusion.serving.config import API_KEY_ENV, ServeConfig
from adapterfusion.serving.contract import PredictRequest
from adapterfusion.serving.request_errors import RequestError

__all__ = ["API_KEY_ENV", "PredictRequest", "RequestError", "ServeConfig"]
