from adapterfusion.fusion.config import FusionConfig, resolve_fusion_config
from adapterfusion.fusion.layer import FusionLayer, fuse_fast, fuse_reference

__all__ = ["FusionConfig", "FusionLayer", "fuse_fast", "fuse_reference", "resolve_fusion_config"]
