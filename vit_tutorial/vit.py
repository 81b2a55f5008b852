"""The Vision Transformer: patches, position, encoder, head (chapter 5).

.. code-block:: text

    images (B, C, H, W) -> stem -> (B, N, D) -> [class token] -> + position -> Encoder
      -> LayerNorm -> class token or mean of tokens -> Linear head -> logits (B, num_classes)

Everything is set by one :class:`ViTConfig`; the presets of the paper's Table 1 and of DeiT
are in :data:`PRESETS` and built by :func:`create_vit`. Parameter names follow timm, and
:mod:`vit_tutorial.interop` loads timm and torchvision weights with identical logits.
Shapes: B batch, C channels, H×W pixels, P patch size, Gh×Gw grid, N tokens, D width.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from einops import rearrange
from torch import Tensor, nn

from vit_tutorial.encoder import Encoder
from vit_tutorial.patches import PatchEmbedding, pair
from vit_tutorial.positional import (
    LearnedPositionalEmbedding,
    RelativePositionBias,
    resize_pos_embed,
    sinusoidal_2d,
)

__all__ = ["ViTConfig", "ConvStem", "VisionTransformer", "PRESETS", "create_vit"]

POOLS = ("cls", "mean")
POS_EMBEDS = ("learned", "sincos2d", "relative", "none")
STEMS = ("patch", "conv")


def check_sizes_and_rates(config: object) -> None:
    """Validate the fields a ViT-like config shares: sizes, counts and dropout rates.

    Raises:
        ValueError: a count below 1 or a rate outside ``[0, 1)``, naming the field and value.
        TypeError: a malformed ``image_size`` or ``patch_size``.
    """
    for name in ("num_classes", "in_channels", "dim", "depth", "num_heads"):
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be at least 1, got {getattr(config, name)}")
    for name in ("dropout", "attn_dropout", "drop_path"):
        if not 0.0 <= getattr(config, name) < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {getattr(config, name)}")
    pair(config.image_size), pair(config.patch_size)  # TypeError for malformed sizes


@dataclasses.dataclass
class ViTConfig:
    """Every choice that defines a :class:`VisionTransformer` (defaults: ViT-B/16).

    ``dataclasses.asdict(config)`` is a plain dict that can be stored in a checkpoint, and
    ``ViTConfig(**that_dict)`` rebuilds the config. Invalid values raise ``ValueError``.
    ``class_token`` is a derived property, not a field: ``pool == 'cls'``.

    Attributes:
        image_size: ``H`` or ``(H, W)``.
        patch_size: ``P`` or ``(P_h, P_w)``.
        in_channels: C.
        num_classes: number of logits, at least 1.
        dim: model width D.
        depth: number of encoder blocks.
        num_heads: attention heads h.
        mlp_ratio: MLP hidden width / D.
        qkv_bias: bias in the query/key/value projections.
        dropout: dropout after the position embedding and inside the blocks.
        attn_dropout: dropout on the attention weights.
        drop_path: stochastic depth of the last block (rising linearly from 0).
        pool: ``'cls'`` (classify the class token; the model has one) or ``'mean'``
            (average the tokens; no class token, LayerNorm after pooling, as timm's ``'avg'``).
        pos_embed: ``'learned'``, ``'sincos2d'`` (fixed; zero for the class token),
            ``'relative'`` (a :class:`~vit_tutorial.positional.RelativePositionBias` per
            block) or ``'none'``.
        dynamic_image_size: accept any size divisible by the patch size and resample the
            position embedding; otherwise another size raises ``ValueError``.
        stem: ``'patch'`` (:class:`~vit_tutorial.patches.PatchEmbedding`) or ``'conv'``
            (:class:`ConvStem`).
        norm_eps: LayerNorm epsilon.
    """

    image_size: int | tuple[int, int] = 224
    patch_size: int | tuple[int, int] = 16
    in_channels: int = 3
    num_classes: int = 1000
    dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    dropout: float = 0.0
    attn_dropout: float = 0.0
    drop_path: float = 0.0
    pool: str = "cls"
    pos_embed: str = "learned"
    dynamic_image_size: bool = False
    stem: str = "patch"
    norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        for name, value, valid in [("pool", self.pool, POOLS), ("pos_embed", self.pos_embed,
                                   POS_EMBEDS), ("stem", self.stem, STEMS)]:
            if value not in valid:
                raise ValueError(f"{name} must be one of {valid}, got {value!r}")
        check_sizes_and_rates(self)
        if self.dynamic_image_size and self.pos_embed == "relative":
            raise ValueError("dynamic_image_size is not supported with pos_embed='relative' "
                             "(its table is sized for one grid)")

    @property
    def class_token(self) -> bool:
        """Derived, not a field: the model has a class token exactly when ``pool == 'cls'``."""
        return self.pool == "cls"


class ConvStem(nn.Module):
    """A convolutional stem (Xiao et al., 2021) in place of the single patchifying convolution.

    ``log2(P)`` blocks of 3×3 convolution (stride 2), BatchNorm and GELU, topped up with
    stride-1 blocks to at least two, widths doubling up to D/2, then a 1×1 convolution to D.
    The total stride is P, so the output lies on the same ``Gh × Gw`` grid as
    :class:`~vit_tutorial.patches.PatchEmbedding`'s; small P (1, 2, 4) suits tiny images.

    Args:
        image_size: ``H`` or ``(H, W)``.
        patch_size: P, a power of 2 (the total stride).
        in_channels: C.
        dim: D.

    Example:
        >>> ConvStem(image_size=8, patch_size=2, in_channels=1, dim=32)(torch.randn(4, 1, 8, 8)).shape
        torch.Size([4, 16, 32])
    """

    def __init__(self, image_size: int | tuple[int, int], patch_size: int | tuple[int, int],
                 in_channels: int = 3, dim: int = 768) -> None:
        super().__init__()
        p, pw = pair(patch_size)
        if p != pw or p < 1 or p & (p - 1):
            raise ValueError(f"the conv stem needs a square power-of-2 patch size, got {(p, pw)}")
        self.patch_size, self.image_size = (p, p), pair(image_size)
        self.grid_size = self.grid_size_for(self.image_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        strides = [2] * int(math.log2(p))
        strides += [1] * (2 - len(strides))  # at least two 3×3 blocks
        layers, width = [], in_channels
        for i, stride in enumerate(strides):
            out = max(dim // 2 ** (len(strides) - i), 8)
            layers += [nn.Conv2d(width, out, 3, stride, padding=1, bias=False),
                       nn.BatchNorm2d(out), nn.GELU()]
            width = out
        self.convs = nn.Sequential(*layers)
        self.proj = nn.Conv2d(width, dim, kernel_size=1)

    def grid_size_for(self, image_size: int | tuple[int, int]) -> tuple[int, int]:
        """The grid ``(Gh, Gw)`` for an image size; ``ValueError`` unless P divides it."""
        (H, W), P = pair(image_size), self.patch_size[0]
        if min(H, W) < 1 or H % P or W % P:
            raise ValueError(f"image size {(H, W)} is not divisible by patch size {(P, P)}")
        return H // P, W // P

    def forward(self, images: Tensor) -> Tensor:
        """Embed images ``(B, C, H, W)`` (H, W multiples of P) as tokens ``(B, N, D)``."""
        self.grid_size_for(tuple(images.shape[-2:]))
        x = self.proj(self.convs(images))  # (B, D, Gh, Gw)
        return rearrange(x, "b d gh gw -> b (gh gw) d")


class VisionTransformer(nn.Module):
    """The Vision Transformer of Dosovitskiy et al. (2021), built from a :class:`ViTConfig`.

    Initialisation follows the paper and timm: Linear weights from a truncated normal of
    std 0.02 and zero biases, the same for the class token and the learned position table,
    a zero head; the stem's convolutions keep PyTorch's default, as in timm. Building inside
    ``with torch.device("meta"):`` allocates nothing, e.g. to count parameters.

    Args:
        config: the configuration (or a dict of its fields, as stored in a checkpoint);
            ``None`` means the defaults (ViT-B/16).
        **fields: :class:`ViTConfig` fields, overriding those of ``config``.

    Attributes:
        config: the :class:`ViTConfig` the model was built from.
        grid_size: the patch grid ``(Gh, Gw)`` of ``image_size``.
        num_prefix_tokens: 1 with a class token, else 0.

    Example:
        >>> model = VisionTransformer(image_size=32, patch_size=8, dim=64, depth=2,
        ...                           num_heads=4, num_classes=10)
        >>> model(torch.randn(2, 3, 32, 32)).shape
        torch.Size([2, 10])
        >>> [tuple(a.shape) for a in model.attention_maps(torch.randn(2, 3, 32, 32))]
        [(2, 4, 17, 17), (2, 4, 17, 17)]
    """

    def __init__(self, config: ViTConfig | dict | None = None, **fields) -> None:
        super().__init__()
        if isinstance(config, dict):
            config = ViTConfig(**config)
        elif config is not None and not isinstance(config, ViTConfig):
            raise TypeError(f"config must be a ViTConfig, a dict or None, got {type(config).__name__}")
        unknown = set(fields) - {f.name for f in dataclasses.fields(ViTConfig)}
        if unknown:
            raise TypeError(f"unknown ViTConfig fields {sorted(unknown)}; valid fields: "
                            f"{[f.name for f in dataclasses.fields(ViTConfig)]}")
        config = dataclasses.replace(config or ViTConfig(), **fields)
        self.config = c = config
        if c.stem == "patch":
            self.patch_embed = PatchEmbedding(c.image_size, c.patch_size, c.in_channels, c.dim,
                                              strict_image_size=False)
        else:
            self.patch_embed = ConvStem(c.image_size, c.patch_size, c.in_channels, c.dim)
        self.grid_size = self.patch_embed.grid_size
        self.num_prefix_tokens = int(c.class_token)
        num_tokens = self.num_prefix_tokens + self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c.dim)) if c.class_token else None
        self.pos_embed = LearnedPositionalEmbedding(num_tokens, c.dim) \
            if c.pos_embed == "learned" else None
        if c.pos_embed == "sincos2d":
            self.register_buffer("pos_sincos", self._sincos(self.grid_size), persistent=False)
        self.rel_pos = nn.ModuleList(
            RelativePositionBias(self.grid_size, c.num_heads, self.num_prefix_tokens)
            for _ in range(c.depth)) if c.pos_embed == "relative" else None
        self.pos_drop = nn.Dropout(c.dropout)
        self.encoder = Encoder(c.dim, c.depth, c.num_heads, c.mlp_ratio, c.qkv_bias, c.dropout,
                               c.attn_dropout, c.drop_path, c.norm_eps)
        # timm's placement: LayerNorm on the tokens for 'cls', on the pooled vector for 'mean'.
        self.norm = nn.LayerNorm(c.dim, eps=c.norm_eps) if c.class_token else nn.Identity()
        self.fc_norm = nn.Identity() if c.class_token else nn.LayerNorm(c.dim, eps=c.norm_eps)
        self.head = nn.Linear(c.dim, c.num_classes)
        self.apply(_init_weights)
        nn.init.zeros_(self.head.weight)  # zero head, as in the paper and torchvision
        if self.cls_token is not None:
            nn.init.trunc_normal_(self.cls_token, std=0.02, a=-0.04, b=0.04)

    def _sincos(self, grid: tuple[int, int]) -> Tensor:
        """Fixed table ``(1, prefix + Gh·Gw, D)``: zeros for the class token, then 2D sin-cos."""
        table = sinusoidal_2d(grid, self.config.dim)  # (Gh·Gw, D)
        return torch.cat([table.new_zeros(self.num_prefix_tokens, table.shape[1]), table])[None]

    def _tokens(self, images: Tensor) -> tuple[Tensor, list[Tensor] | None]:
        """Embedded tokens ``(B, N, D)`` entering the encoder, and the per-block biases."""
        c = self.config
        if images.dim() != 4:
            raise ValueError(f"expected images of shape (B, C, H, W), got {tuple(images.shape)}")
        C, H, W = images.shape[1:]
        if C != c.in_channels:
            raise ValueError(f"expected {c.in_channels} input channels, got {C} "
                             f"(images of shape {tuple(images.shape)})")
        if (H, W) != self.patch_embed.image_size and not c.dynamic_image_size:
            raise ValueError(f"expected image size {self.patch_embed.image_size}, got {(H, W)}; "
                             "resize the images or build with dynamic_image_size=True")
        grid = self.patch_embed.grid_size_for((H, W))  # ValueError unless P divides H and W
        x = self.patch_embed(images)  # (B, Gh·Gw, D)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)  # (B, N, D)
        if self.pos_embed is not None:
            x = x + resize_pos_embed(self.pos_embed.weight, self.grid_size, grid,
                                     self.num_prefix_tokens)
        elif c.pos_embed == "sincos2d":
            x = x + (self.pos_sincos if grid == self.grid_size else self._sincos(grid).to(x))
        biases = [rpb() for rpb in self.rel_pos] if self.rel_pos is not None else None
        return self.pos_drop(x), biases

    def forward_features(self, images: Tensor) -> Tensor:
        """Tokens ``(B, N, D)`` after the encoder and, for ``pool='cls'``, the final LayerNorm."""
        x, biases = self._tokens(images)
        return self.norm(self.encoder(x, biases))

    def forward_head(self, tokens: Tensor) -> Tensor:
        """Pool tokens ``(B, N, D)`` (class token or mean), normalise if 'mean', classify."""
        pooled = tokens[:, 0] if self.config.class_token else tokens.mean(dim=1)  # (B, D)
        return self.head(self.fc_norm(pooled))

    def forward(self, images: Tensor) -> Tensor:
        """Logits ``(B, num_classes)`` for images ``(B, C, H, W)``."""
        return self.forward_head(self.forward_features(images))

    def attention_maps(self, images: Tensor) -> list[Tensor]:
        """The attention weights of every block: a list of ``depth`` tensors ``(B, h, N, N)``."""
        x, biases = self._tokens(images)
        return self.encoder(x, biases, return_attention=True)[1]

    def no_weight_decay(self) -> set[str]:
        """Names of the parameters exempt from weight decay (class token, position tables)."""
        return {name for name, _ in self.named_parameters()
                if name == "cls_token" or name.startswith(("pos_embed.", "rel_pos."))}


def _init_weights(module: nn.Module) -> None:
    """Linear weights from a normal of std 0.02 truncated at ±2 std, zero biases.

    The scheme of the paper and timm; timm's default bounds (±2 in absolute units) do not
    truncate at all with std 0.02, the difference is immaterial.
    """
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=0.02, a=-0.04, b=0.04)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


#: The models of the ViT paper's Table 1 and DeiT's tiny and small, at 224×224 and 1000 classes.
PRESETS: dict[str, ViTConfig] = {
    "vit_tiny_patch16_224": ViTConfig(dim=192, depth=12, num_heads=3),
    "vit_small_patch16_224": ViTConfig(dim=384, depth=12, num_heads=6),
    "vit_base_patch16_224": ViTConfig(dim=768, depth=12, num_heads=12),
    "vit_base_patch32_224": ViTConfig(patch_size=32, dim=768, depth=12, num_heads=12),
    "vit_large_patch16_224": ViTConfig(dim=1024, depth=24, num_heads=16),
    "vit_huge_patch14_224": ViTConfig(patch_size=14, dim=1280, depth=32, num_heads=16),
}


def create_vit(name: str, **overrides) -> VisionTransformer:
    """Build the preset ``name`` of :data:`PRESETS`, with any :class:`ViTConfig` field overridden.

    Example:
        >>> model = create_vit("vit_tiny_patch16_224", num_classes=10)
        >>> model.config.dim, model.config.num_classes
        (192, 10)
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid presets: {sorted(PRESETS)}")
    return VisionTransformer(PRESETS[name], **overrides)
