"""vit_tutorial: Vision Transformers from scratch, one module per chapter of the book.

The names a reader of the book uses are importable from the package itself
(``from vit_tutorial import VisionTransformer``); helpers stay in their modules
(``from vit_tutorial.patches import pair``). ``__all__`` is built from the imports below.
"""

from types import ModuleType as _ModuleType

from vit_tutorial.attention import (
    MultiHeadSelfAttention,
    attention_weights,
    scaled_dot_product_attention,
)
from vit_tutorial.axial import AxialAttention, AxialEncoderBlock, AxialViT, AxialViTConfig
from vit_tutorial.checkpoint import load_checkpoint, save_checkpoint
from vit_tutorial.data import DataSplits, digits_datasets
from vit_tutorial.encoder import MLP, DropPath, Encoder, EncoderBlock, LayerScale, SwiGLU
from vit_tutorial.engine import FitSettings, evaluate, fit, predict
from vit_tutorial.interop import from_timm, from_timm_eva, from_torchvision
from vit_tutorial.modern import AttentionPool, PatchDropout, patch_dropout
from vit_tutorial.patches import ConvStem, PatchEmbedding, image_to_patches, patches_to_image
from vit_tutorial.positional import (
    LearnedPositionalEmbedding,
    RelativePositionBias,
    RotaryEmbedding2D,
    SinusoidalEmbedding2D,
    resize_pos_embed,
    sinusoidal_1d,
    sinusoidal_2d,
)
from vit_tutorial.registry import create_model, list_models
from vit_tutorial.swin import SWIN_PRESETS, SwinConfig, SwinTransformer, create_swin, swin_flops
from vit_tutorial.swin_interop import swin_from_timm, swin_from_torchvision
from vit_tutorial.vit import (
    PRESETS,
    VisionTransformer,
    ViTConfig,
    attention_rollout,
    create_vit,
    vit_flops,
)
from vit_tutorial.windows import (
    PatchMerging,
    SwinBlock,
    WindowAttention,
    block_diagonal_mask,
    shifted_window_mask,
    window_partition,
    window_reverse,
)

__version__ = "0.1.0"

__all__ = sorted(
    name
    for name, value in globals().items()
    if not name.startswith("_") and not isinstance(value, _ModuleType)
)
