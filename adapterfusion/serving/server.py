"""`adapterfusion serve`: load a saved setup onto its base encoder and serve it with uvicorn until SIGINT/SIGTERM,
which stops taking connections, lets the requests in flight finish, then ends."""

from __future__ import annotations

import ipaddress
import logging
import os
from typing import Any

import torch

from adapterfusion.defaults import default_encoder_path
from adapterfusion.encoders import load_tokenizer, resolve_encoder
from adapterfusion.errors import ConfigError
from adapterfusion.model import AdaptedModel
from adapterfusion.serving.app import create_app, model_executor
from adapterfusion.serving.config import ServeConfig

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_setup(
    setup: str | os.PathLike, base: str | os.PathLike | None = None, device: str = "cpu", dtype: str = "float32"
) -> tuple[AdaptedModel, Any]:
    """The model save_pretrained wrote to `setup`, on `base` (default: the shipped encoder), with base's tokenizer,
    in eval mode on `device` in `dtype`."""
    if dtype not in DTYPES:
        raise ConfigError(f"dtype {dtype!r} is not one of {list(DTYPES)}")
    try:
        target = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"device {device!r} is not a torch device such as 'cpu' or 'cuda:0'") from None
    base = base if base is not None else default_encoder_path()
    tokenizer = load_tokenizer(resolve_encoder(base))
    model = AdaptedModel.from_pretrained(base, setup)
    return model.to(device=target, dtype=DTYPES[dtype]).eval(), tokenizer


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

    config = config or ServeConfig()
    executor = model_executor()  # the model is loaded on the thread that will run it (model_executor says why)
    try:
        model, tokenizer = executor.submit(load_setup, setup, base, device, dtype).result()
    except BaseException:
        executor.shutdown(wait=False)
        raise
    if config.api_key is None and not _is_loopback(host):
        logger.warning(
            "serving on %s without an API key: anyone who reaches it can load pieces (POST /v1/pieces)", host
        )
    app = create_app(model, tokenizer, config, executor)
    uvicorn.run(app, host=host, port=port, timeout_graceful_shutdown=drain_seconds, log_level="info")


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
