from adapterfusion.fusion.config import FusionConfig, FusionSetup, resolve_fusion_config
from adapterfusion.fusion.layer import FusionLayer, fuse_fast, fuse_reference
from adapterfusion.fusion.subset import add_fusion_subset

__all__ = [
    "FusionConfig",
    "FusionLayer",
    "FusionSetup",
    "add_fusion_subset",
    "fuse_fast",
    "fuse_reference",
    "resolve_fusion_config",
]
