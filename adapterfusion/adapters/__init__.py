from adapterfusion.adapters.bottleneck import BottleneckAdapter
from adapterfusion.adapters.config import POSITIONS, AdapterConfig, resolve_adapter_config

__all__ = ["AdapterConfig", "BottleneckAdapter", "POSITIONS", "resolve_adapter_config"]
