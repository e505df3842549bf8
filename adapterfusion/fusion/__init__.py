from adapterfusion.fusion.config import FusionConfig, FusionSetup, resolve_fusion_config
from adapterfusion.fusion.layer import FusionLayer, fuse_fast, fuse_reference
from adapterfusion.fusion.scalearn import ScaLearnLayer, scale_fast, scale_reference
from adapterfusion.fusion.subset import add_fusion_subset

__all__ = [
    "FusionConfig",
    "FusionLayer",
    "FusionSetup",
    "ScaLearnLayer",
    "add_fusion_subset",
    "fuse_fast",
    "fuse_reference",
    "resolve_fusion_config",
    "scale_fast",
    "scale_reference",
]
