"""The same app as a Ray Serve deployment, for when one machine is not enough: N replicas, each loading the setup
and running its own batcher (batching happens inside a replica; Ray Serve's proxy spreads requests over them).

    from ray import serve
    from adapterfusion.serving.ray_deployment import deployment
    serve.run(deployment("out/rte-setup", replicas=4), route_prefix="/")   # the endpoints of `adapterfusion serve`

Needs `ray[serve]` (imported here only when a deployment is made). Each replica asks Ray for `cpus` CPUs and `gpus`
GPUs (give gpus=1 and device="cuda" to put each on a GPU)."""

from __future__ import annotations

import os
from typing import Any

from adapterfusion.errors import ConfigError
from adapterfusion.serving.app import create_app, model_executor
from adapterfusion.serving.config import ServeConfig, given_config
from adapterfusion.serving.server import load_setup


class AdapterServer:
    """One replica: the setup loaded in its constructor, on the thread that will run it (app.model_executor);
    Ray Serve asks `__serve_build_asgi_app__` for the app."""

    def __init__(self, setup: str, base: str | None, config: ServeConfig, device: str, dtype: str) -> None:
        self.executor = model_executor()
        limits = (config.max_length, config.max_new_tokens)
        loading = self.executor.submit(load_setup, setup, base, device, dtype, *limits)
        self.model, self.tokenizer = loading.result()
        self.config = config

    def __serve_build_asgi_app__(self) -> Any:
        return create_app(self.model, self.tokenizer, self.config, self.executor)


def deployment(
    setup: str | os.PathLike,
    base: str | os.PathLike | None = None,
    config: ServeConfig | None = None,
    replicas: int = 2,
    device: str = "cpu",
    dtype: str = "float32",
    cpus: float = 1.0,
    gpus: float = 0.0,
) -> Any:
    """A bound Ray Serve application of `replicas` AdapterServer replicas serving `setup`, for `serve.run`."""
    try:
        from ray import serve
    except ImportError:
        raise ConfigError("a Ray Serve deployment needs Ray Serve: pip install 'ray[serve]'") from None
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ConfigError(f"replicas={replicas!r} must be a positive whole number")
    config = given_config(config)  # here, not in each replica after its setup loaded
    ingress = serve.ingress()(AdapterServer)
    options = {"num_cpus": cpus, "num_gpus": gpus}
    app: Any = serve.deployment(ingress, name="adapterfusion", num_replicas=replicas, ray_actor_options=options)
    base_path = os.fspath(base) if base is not None else None
    return app.bind(os.fspath(setup), base_path, config, device, dtype)
