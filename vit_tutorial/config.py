"""The configuration of the Vision Transformer (chapter 5) and its mid-2020s options (chapter 11).

:class:`TransformerConfig` holds the fields every ViT-like model of the package shares (the
axial ViT's config extends it too), :class:`ViTConfig` those of
:class:`~vit_tutorial.vit.VisionTransformer`. Both are re-exported by :mod:`vit_tutorial.vit`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch

from vit_tutorial.encoder import BlockOptions
from vit_tutorial.patches import IntOrPair, patch_grid
from vit_tutorial.validate import ModelConfig, check_bool, check_int, check_real

__all__ = ["TransformerConfig", "ViTConfig"]


@dataclasses.dataclass
class TransformerConfig(ModelConfig):
    """The fields every ViT-like model of the package shares, validated once, here.

    ``dataclasses.asdict(config)`` is a plain dict for a checkpoint; ``type(config)(**that_dict)``
    rebuilds it. Invalid values raise ``TypeError`` or ``ValueError`` naming the field. Models check
    their config again (it may change) and build layers with :func:`~vit_tutorial.validate.trusted`.

    Attributes:
        image_size, patch_size: ``H`` or ``(H, W)``, and ``P`` or ``(P_h, P_w)``, which divides it.
        in_channels, num_classes, depth: C, the number of logits and of encoder blocks.
        dropout: dropout after the position embedding and inside the blocks.
        drop_path: stochastic depth of the last block (rising linearly from 0).
        pos_embed: one of the subclass's ``POS_EMBEDS``.
        block: not a field: the :class:`~vit_tutorial.encoder.BlockOptions` checking its fields.
    """

    POS_EMBEDS: ClassVar[tuple[str, ...]] = ("learned", "sincos2d")

    image_size: IntOrPair = 224
    patch_size: IntOrPair = 16
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
    pos_embed: str = "learned"
    norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        check_int("in_channels", self.in_channels), check_int("depth", self.depth)
        check_int("num_classes", self.num_classes, 0)  # 0: no head, as timm's num_classes=0
        check_real("drop_path", self.drop_path, 0.0, 1.0, high_open=True)
        names = [f.name for f in dataclasses.fields(BlockOptions) if hasattr(self, f.name)]
        self.block = BlockOptions(**{n: getattr(self, n) for n in names})  # checks dim, ...
        if self.pos_embed not in self.POS_EMBEDS:
            raise ValueError(f"pos_embed must be one of {self.POS_EMBEDS}, got {self.pos_embed!r}")
        patch_grid(self.image_size, self.patch_size)  # TypeError or ValueError

    def drop_path_rates(self) -> list[float]:
        """Each block's stochastic-depth rate, as :func:`~vit_tutorial.encoder.drop_path_rates`."""
        return torch.linspace(0, self.drop_path, self.depth, device="cpu").tolist()


@dataclasses.dataclass
class ViTConfig(TransformerConfig):
    """Every choice that defines a :class:`VisionTransformer` (defaults: ViT-B/16).

    The fields of :class:`TransformerConfig`, with ``pos_embed`` one of ``'learned'``,
    ``'sincos2d'`` (fixed; zero for the class token), ``'relative'`` (a
    :class:`~vit_tutorial.positional.RelativePositionBias` per block) or ``'none'``, and:

    Attributes:
        pool: ``'cls'`` (classify the class token; the model has one), ``'mean'`` (average
            the patch tokens; no class token, LayerNorm after pooling, as timm's ``'avg'``) or
            ``'map'`` (:class:`~vit_tutorial.modern.AttentionPool`; no class token).
        dynamic_image_size: take any size the patch size divides, resampling the position table.
        stem: ``'patch'`` (:class:`~vit_tutorial.patches.PatchEmbedding`) or ``'conv'``
            (:class:`~vit_tutorial.patches.ConvStem`).
        distilled: DeiT's distillation token and head (Touvron et al. 2021, Section 4; needs
            ``pool='cls'``) for :class:`~vit_tutorial.losses.HardDistillation`.

    The mid-2020s options of chapter 11, each timm's ``VisionTransformer`` argument of the same
    or the named meaning (defaults: the 2020 model):

    Attributes:
        reg_tokens: register tokens after the class token (Darcet et al. 2024).
        no_embed_class: the position table covers the patches only (timm's; DeiT III).
        rope: ``'none'``, ``'axial'`` or ``'mixed'``: 2D RoPE in every block's attention
            (:class:`~vit_tutorial.positional.RotaryEmbedding2D`; mixed learns one per block).
        pool_include_prefix: ``'mean'`` and ``'map'`` pool the prefix tokens too.
        patch_drop_rate: drop this share of the patch tokens in training (PatchDropout).
        init_values, qk_norm, norm, mlp: LayerScale, QK-norm, ``'rmsnorm'``, ``'swiglu'``
            (:class:`~vit_tutorial.encoder.BlockOptions`); ``norm`` also for the final norm.
    """

    POS_EMBEDS: ClassVar[tuple[str, ...]] = ("learned", "sincos2d", "relative", "none")

    pool: str = "cls"
    dynamic_image_size: bool = False
    stem: str = "patch"
    distilled: bool = False
    reg_tokens: int = 0
    no_embed_class: bool = False
    rope: str = "none"
    pool_include_prefix: bool = False
    patch_drop_rate: float = 0.0
    init_values: float | None = None
    qk_norm: bool = False
    norm: str = "layernorm"
    mlp: str = "gelu"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_bool("dynamic_image_size", self.dynamic_image_size)
        check_bool("distilled", self.distilled), check_int("reg_tokens", self.reg_tokens, 0)
        check_bool("no_embed_class", self.no_embed_class)
        check_bool("pool_include_prefix", self.pool_include_prefix)
        check_real("patch_drop_rate", self.patch_drop_rate, 0.0, 1.0, high_open=True)
        if self.rope not in ("none", "axial", "mixed"):
            raise ValueError(f"rope must be 'none', 'axial' or 'mixed', got {self.rope!r}")
        if self.rope != "none" and (self.dim // self.num_heads) % 4:
            raise ValueError(
                f"2D RoPE needs a head width divisible by 4, got dim // num_heads = "
                f"{self.dim // self.num_heads}"
            )
        if self.patch_drop_rate and (self.rope != "none" or self.pos_embed == "relative"):
            raise ValueError(
                "patch_drop_rate needs positions added before the encoder: not with rope or "
                f"pos_embed='relative' (got rope={self.rope!r}, pos_embed={self.pos_embed!r})"
            )
        if self.distilled and self.pool != "cls":
            raise ValueError(
                f"distilled=True needs pool='cls' (the distillation token sits next to the "
                f"class token), got pool={self.pool!r}"
            )
        for name, valid in [("pool", ("cls", "mean", "map")), ("stem", ("patch", "conv"))]:
            if getattr(self, name) not in valid:
                raise ValueError(f"{name} must be one of {valid}, got {getattr(self, name)!r}")
        if self.dynamic_image_size and self.pos_embed == "relative":
            raise ValueError(
                "dynamic_image_size is not supported with pos_embed='relative' "
                "(its table is sized for one grid)"
            )

    @property
    def class_token(self) -> bool:
        """Derived, not a field: the model has a class token exactly when ``pool == 'cls'``."""
        return self.pool == "cls"
