"""Non-linearities of the adapter search space (AdapterFusion appendix A.2) by name."""

from __future__ import annotations

from torch import nn

from adapterfusion.errors import ConfigError

_ACTIVATIONS = {
    "relu": nn.ReLU,
    "leaky_relu": nn.LeakyReLU,  # slope 0.01, the torch default
    "swish": nn.SiLU,
    "silu": nn.SiLU,
    "gelu": nn.GELU,
    "tanh": nn.Tanh,
}
ACTIVATION_NAMES = tuple(_ACTIVATIONS)


def make_activation(name: str) -> nn.Module:
    try:
        return _ACTIVATIONS[name]()
    except KeyError:
        raise ConfigError(f"unknown non_linearity {name!r}; choose one of {', '.join(ACTIVATION_NAMES)}") from None
