"""vit_tutorial: Vision Transformers from scratch, one module per chapter of the book.

Every public name is re-exported here, so ``from vit_tutorial import MultiHeadSelfAttention``
works as well as ``from vit_tutorial.attention import MultiHeadSelfAttention``.
"""

from vit_tutorial.attention import (
    MultiHeadSelfAttention,
    attention_weights,
    scaled_dot_product_attention,
)
from vit_tutorial.axial import (
    AxialAttention,
    AxialEncoderBlock,
    AxialViT,
    AxialViTConfig,
    attention_flops,
    axial_mask,
)
from vit_tutorial.checkpoint import load_checkpoint, save_checkpoint
from vit_tutorial.data import DataSplits, cifar10_datasets, digits_datasets, make_loader
from vit_tutorial.encoder import MLP, DropPath, Encoder, EncoderBlock, drop_path
from vit_tutorial.engine import evaluate, fit, param_groups, predict, warmup_cosine
from vit_tutorial.interop import (
    TIMM_KEYS,
    TORCHVISION_KEYS,
    from_timm,
    from_torchvision,
    load_converted,
    max_abs_logit_difference,
    timm_state_dict_to_ours,
    torchvision_state_dict_to_ours,
)
from vit_tutorial.measure import median_seconds, peak_memory
from vit_tutorial.patches import PatchEmbedding, image_to_patches, pair, patches_to_image
from vit_tutorial.positional import (
    LearnedPositionalEmbedding,
    RelativePositionBias,
    RotaryEmbedding2D,
    resize_pos_embed,
    sinusoidal_1d,
    sinusoidal_2d,
)
from vit_tutorial.vit import PRESETS, ConvStem, VisionTransformer, ViTConfig, create_vit

__version__ = "0.1.0"

__all__ = [
    "MultiHeadSelfAttention",
    "attention_weights",
    "scaled_dot_product_attention",
    # axial
    "AxialAttention",
    "AxialEncoderBlock",
    "AxialViT",
    "AxialViTConfig",
    "attention_flops",
    "axial_mask",
    # measure
    "median_seconds",
    "peak_memory",
    # patches
    "PatchEmbedding",
    "image_to_patches",
    "pair",
    "patches_to_image",
    # positional
    "LearnedPositionalEmbedding",
    "RelativePositionBias",
    "RotaryEmbedding2D",
    "resize_pos_embed",
    "sinusoidal_1d",
    "sinusoidal_2d",
    # encoder
    "MLP",
    "DropPath",
    "Encoder",
    "EncoderBlock",
    "drop_path",
    # vit
    "PRESETS",
    "ConvStem",
    "VisionTransformer",
    "ViTConfig",
    "create_vit",
    # interop
    "TIMM_KEYS",
    "TORCHVISION_KEYS",
    "from_timm",
    "from_torchvision",
    "load_converted",
    "max_abs_logit_difference",
    "timm_state_dict_to_ours",
    "torchvision_state_dict_to_ours",
    # data (python -m vit_tutorial.train is not imported here, so that it runs as a script)
    "DataSplits",
    "cifar10_datasets",
    "digits_datasets",
    "make_loader",
    # engine (the training loop; resolve_device stays in vit_tutorial.engine)
    "evaluate",
    "fit",
    "param_groups",
    "predict",
    "warmup_cosine",
    # checkpoint (unwrap_model stays in vit_tutorial.checkpoint)
    "load_checkpoint",
    "save_checkpoint",
]
