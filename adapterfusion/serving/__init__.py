"""A multi-tenant inference server: one base encoder, many adapters, fusions and heads, each request naming its
own, with requests that arrive together run in one routed forward (routing.py). Needs the `serve` extra (FastAPI,
uvicorn): `adapterfusion serve SETUP`.

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
from adapterfusion.serving.contract import PredictRequest, RequestError

__all__ = ["API_KEY_ENV", "PredictRequest", "RequestError", "ServeConfig"]
