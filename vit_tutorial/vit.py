"""The Vision Transformer: patches, position, encoder, head (chapter 5).

.. code-block:: text

    images (B, C, H, W) -> stem -> (B, N, D) -> [class token] (B, T, D) -> + position
      -> Encoder -> LayerNorm -> class token or mean of tokens -> Linear head -> (B, num_classes)

A model is built from a :class:`ViTConfig`, its fields as keywords, or both, or from a preset
(:func:`create_vit`). Parameter names follow timm; :mod:`vit_tutorial.interop` loads timm and
torchvision weights with identical logits. :func:`vit_flops` counts a configuration's cost,
:func:`attention_rollout` follows attention through the blocks. Shapes: B batch, C channels, H×W
pixels, P patch size, Gh×Gw grid, N = Gh·Gw patches, T tokens (N + 1 with a class token), D width.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from vit_tutorial.backbone import Classifier, Indices, new_head, take_indices, to_format
from vit_tutorial.encoder import BlockOptions, Encoder, init_weights
from vit_tutorial.patches import ConvStem, IntOrPair, PatchEmbedding, pair, patch_grid
from vit_tutorial.positional import (
    LearnedPositionalEmbedding,
    RelativePositionBias,
    SinusoidalEmbedding2D,
)
from vit_tutorial.validate import (
    ModelConfig,
    build_preset,
    check_bool,
    check_int,
    check_real,
    trusted,
)

__all__ = [
    "TransformerConfig",
    "ViTConfig",
    "VisionTransformer",
    "PRESETS",
    "create_vit",
    "vit_flops",
    "attention_rollout",
]


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
        fields = [getattr(self, f.name) for f in dataclasses.fields(BlockOptions)]
        self.block = BlockOptions(*fields)  # checks dim, num_heads, mlp_ratio, ...
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
        pool: ``'cls'`` (classify the class token; the model has one) or ``'mean'`` (average
            the tokens; no class token, LayerNorm after pooling, as timm's ``'avg'``).
        dynamic_image_size: take any size the patch size divides, resampling the position table.
        stem: ``'patch'`` (:class:`~vit_tutorial.patches.PatchEmbedding`) or ``'conv'``
            (:class:`~vit_tutorial.patches.ConvStem`).
        distilled: DeiT's distillation token and head (Touvron et al. 2021, Section 4; needs
            ``pool='cls'``) for :class:`~vit_tutorial.losses.HardDistillation`.
    """

    POS_EMBEDS: ClassVar[tuple[str, ...]] = ("learned", "sincos2d", "relative", "none")

    pool: str = "cls"
    dynamic_image_size: bool = False
    stem: str = "patch"
    distilled: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_bool("dynamic_image_size", self.dynamic_image_size)
        check_bool("distilled", self.distilled)
        if self.distilled and self.pool != "cls":
            raise ValueError(
                f"distilled=True needs pool='cls' (the distillation token sits next to the "
                f"class token), got pool={self.pool!r}"
            )
        for name, valid in [("pool", ("cls", "mean")), ("stem", ("patch", "conv"))]:
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


class VisionTransformer(Classifier, nn.Module):
    """The Vision Transformer of Dosovitskiy et al. (2021), built from a :class:`ViTConfig`.

    Initialisation is timm's and DeiT's (:func:`~vit_tutorial.encoder.init_weights`, also for the
    class token and the learned position table) with a zero head; the stem keeps PyTorch's default,
    as in timm. Built under ``torch.device("meta")``, it allocates nothing.

    Args:
        config: a :class:`ViTConfig`; ``None``: the defaults (ViT-B/16).
        **fields: :class:`ViTConfig` fields, overriding those of ``config``.

    Attributes:
        config, grid_size: the :class:`ViTConfig` the model was built from, its grid ``(Gh, Gw)``.
        num_prefix_tokens: 1 with a class token, 2 with a distillation token too, else 0.
        pos_embed: the module of ``config.pos_embed`` (``'relative'``: one per block) or ``None``.

    Example:
        >>> model = VisionTransformer(image_size=32, patch_size=8, dim=64, depth=2,
        ...                           num_heads=4, num_classes=10)
        >>> model(torch.randn(2, 3, 32, 32)).shape
        torch.Size([2, 10])
        >>> [tuple(a.shape) for a in model.attention_maps(torch.randn(2, 3, 32, 32))]
        [(2, 4, 17, 17), (2, 4, 17, 17)]
    """

    def __init__(self, config: ViTConfig | None = None, **fields: Any) -> None:
        super().__init__()
        self.config = c = ViTConfig.resolve(config, **fields)
        stem = PatchEmbedding if c.stem == "patch" else ConvStem
        args = c.image_size, c.patch_size, c.in_channels, c.dim
        self.patch_embed = trusted(stem, *args, strict_image_size=not c.dynamic_image_size)
        grid = self.grid_size = self.patch_embed.grid_size
        p = self.num_prefix_tokens = int(c.class_token) + int(c.distilled)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c.dim)) if c.class_token else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, c.dim)) if c.distilled else None
        self.pos_embed = None  # for pos_embed='none'
        if c.pos_embed == "learned":
            self.pos_embed = LearnedPositionalEmbedding(p + grid[0] * grid[1], c.dim, grid, p)
        elif c.pos_embed == "sincos2d":
            self.pos_embed = trusted(SinusoidalEmbedding2D, grid, c.dim, p)
        elif c.pos_embed == "relative":
            rpb = [trusted(RelativePositionBias, grid, c.num_heads, p) for _ in range(c.depth)]
            self.pos_embed = nn.ModuleList(rpb)
        self.pos_drop = nn.Dropout(c.dropout)
        self.encoder = trusted(Encoder, c.block, c.drop_path_rates())
        # timm's placement: LayerNorm on the tokens for 'cls', on the pooled vector for 'mean'.
        self.norm = nn.LayerNorm(c.dim, eps=c.norm_eps) if c.class_token else nn.Identity()
        self.fc_norm = nn.Identity() if c.class_token else nn.LayerNorm(c.dim, eps=c.norm_eps)
        self.num_features = c.dim  # the width forward_head takes, as timm's attribute
        self.global_pool = self._POOL = "token" if c.class_token else "avg"  # timm's names
        head = (lambda: nn.Linear(c.dim, c.num_classes)) if c.num_classes else nn.Identity
        self.head, self.head_dist = head(), head() if c.distilled else None
        self.apply(init_weights)
        if c.num_classes:
            nn.init.zeros_(self.head.weight)  # zero head, as in the paper and torchvision
        for token in (self.cls_token, self.dist_token):
            if token is not None:
                nn.init.trunc_normal_(token, std=0.02, a=-0.04, b=0.04)

    def _tokens(self, images: Tensor) -> tuple[Tensor, list[Tensor] | None]:
        """Embedded tokens ``(B, T, D)`` entering the encoder, and the per-block biases."""
        x = self.patch_embed(images)  # (B, N, D), N = Gh·Gw; checks the images
        size = tuple(images.shape[-2:])
        grid = None if size == self.patch_embed.image_size else self.patch_embed.grid_size_for(size)
        tokens = (self.cls_token, self.dist_token)
        prefix = [t.expand(x.shape[0], -1, -1) for t in tokens if t is not None]
        x = torch.cat([*prefix, x], dim=1)  # (B, T, D): [class, distillation,] patches
        if self.config.pos_embed == "relative":
            return self.pos_drop(x), [rpb() for rpb in self.pos_embed]  # h × T × T each
        if self.pos_embed is not None:
            x = self.pos_embed(x, grid)  # resampled for another grid
        return self.pos_drop(x), None

    def forward_features(self, images: Tensor) -> Tensor:
        """Tokens ``(B, T, D)`` after the encoder and, for ``pool='cls'``, the final LayerNorm."""
        x, biases = self._tokens(images)
        return self.norm(self.encoder(x, biases))

    def forward_head(
        self, tokens: Tensor, pre_logits: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Pool tokens ``(B, T, D)`` (class token or mean; none once ``global_pool`` is
        ``''``), normalise if 'mean', classify; ``pre_logits=True`` stops before the head.

        With a distillation token: ``(class logits, distillation logits)`` in training, their
        mean in eval, as DeiT and timm (the paper, Section 4, adds the heads' softmax outputs);
        its pre-logits are the mean of the two tokens, as timm's ``VisionTransformerDistilled``."""
        pooled = self.fc_norm(_POOLS[self.global_pool](tokens))
        if self.head_dist is None:
            return pooled if pre_logits else self.head(pooled)
        if pre_logits:
            return (pooled + tokens[:, 1]) / 2
        logits, distill_logits = self.head(pooled), self.head_dist(tokens[:, 1])
        return (logits, distill_logits) if self.training else (logits + distill_logits) / 2

    def forward(self, images: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        """Logits ``(B, num_classes)`` for images ``(B, C, H, W)``, as :meth:`forward_head` says."""
        return self.forward_head(self.forward_features(images))

    def attention_maps(self, images: Tensor) -> list[Tensor]:
        """The attention weights of every block: a list of ``depth`` tensors ``(B, h, T, T)``."""
        x, biases = self._tokens(images)
        return self.encoder.forward_with_weights(x, biases)[1]

    def no_weight_decay(self) -> set[str]:
        """Names of the parameters exempt from weight decay: prefix tokens, position tables."""
        exempt = ("cls_token", "dist_token", "pos_embed.")
        return {name for name, _ in self.named_parameters() if name.startswith(exempt)}

    def _start(self, images: Tensor) -> tuple[Tensor, list]:
        x, biases = self._tokens(images)
        biases = biases or [None] * len(self.encoder.blocks)
        return x, [partial(block, attn_bias=b) for block, b in zip(self.encoder.blocks, biases)]

    def _normed(self, i: int, x: Tensor) -> Tensor:
        return self.norm(x)

    _end = _normed

    def _format(self, x: Tensor, output_fmt: str, images: Tensor) -> Tensor:
        grid = self.patch_embed.grid_size_for(images.shape[-2:])
        return to_format(x[:, self.num_prefix_tokens :], output_fmt, grid)

    def forward_intermediates(
        self,
        images: Tensor,
        indices: Indices = None,
        return_prefix_tokens: bool = False,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
    ) -> list | tuple[Tensor, list]:
        """:meth:`Backbone.forward_intermediates <vit_tutorial.backbone.Backbone.forward_intermediates>`,
        and, with ``return_prefix_tokens``, each intermediate as ``(grid, prefix tokens (B, p,
        D))``, as timm's ViT."""
        final, kept = self._intermediates(images, indices, norm, stop_early)
        features = [self._format(y, output_fmt, images) for y in kept]
        if return_prefix_tokens and (p := self.num_prefix_tokens):
            features = [(f, y[:, :p]) for f, y in zip(features, kept, strict=True)]
        return features if intermediates_only else (final, features)

    def prune_intermediate_layers(
        self, indices: Indices = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """Drop the blocks after the last of ``indices`` (and the final norm, the head), as
        timm's; returns the blocks ``indices`` selects. The config keeps the built ``depth``."""
        taken, last = take_indices(len(self.encoder.blocks), indices)
        self.encoder.blocks = self.encoder.blocks[: last + 1]
        if self.config.pos_embed == "relative":
            self.pos_embed = self.pos_embed[: last + 1]  # one table per block
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.fc_norm = nn.Identity()
            self.reset_classifier(0, None if self.head_dist is not None else "")  # as timm
        return taken

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """:meth:`Classifier.reset_classifier <vit_tutorial.backbone.Classifier.reset_classifier>`;
        a distillation head is drawn anew too, and keeps the pooling of its two tokens."""
        if self.head_dist is not None and global_pool == "":
            raise ValueError("a distilled model pools its two tokens: global_pool='' is refused")
        super().reset_classifier(num_classes, global_pool)
        if self.head_dist is not None:
            self.head_dist = new_head(self.num_features, num_classes, self, zero=False)


#: Pooling by ``global_pool``: the class token, the mean, or none (every token).
_POOLS = {"token": lambda t: t[:, 0], "avg": lambda t: t.mean(dim=1), "": lambda t: t}


#: The models of the ViT paper's Table 1 and DeiT's tiny and small, at 224×224 and 1000 classes.
PRESETS: dict[str, ViTConfig] = {
    "vit_tiny_patch16_224": ViTConfig(dim=192, depth=12, num_heads=3),
    "vit_small_patch16_224": ViTConfig(dim=384, depth=12, num_heads=6),
    "vit_base_patch16_224": ViTConfig(dim=768, depth=12, num_heads=12),
    "vit_base_patch32_224": ViTConfig(patch_size=32, dim=768, depth=12, num_heads=12),
    "vit_large_patch16_224": ViTConfig(dim=1024, depth=24, num_heads=16),
    "vit_huge_patch14_224": ViTConfig(patch_size=14, dim=1280, depth=32, num_heads=16),
}


def create_vit(name: str, **overrides: Any) -> VisionTransformer:
    """Build the preset ``name`` of :data:`PRESETS`, with any :class:`ViTConfig` field overridden.

    Example:
        >>> model = create_vit("vit_tiny_patch16_224", num_classes=10)
        >>> model.config.dim, model.config.num_classes
        (192, 10)
    """
    return build_preset(PRESETS, VisionTransformer, name, **overrides)


def vit_flops(config: ViTConfig) -> int:
    """Floating-point operations of one forward pass of one image, by formula.

    A multiply-add counts as 2 FLOPs (as :class:`torch.utils.flop_counter.FlopCounterMode`); only
    matrix products count: the patch projection ``2·N·C·P²·D``, per block ``2T·D·3D`` (q, k, v),
    ``2·2T²D`` (``QKᵀ`` and ``AV``), ``2T·D²`` (output projection) and ``2·2T·D·rD`` (MLP), and the
    head ``2·D·K``, with ``N`` patches and ``T`` tokens (``N`` + prefix tokens; a distillation token
    adds a second head). LayerNorm, softmax, GELU and additions are left out; patch stem only.

    Example:
        >>> round(vit_flops(PRESETS["vit_base_patch16_224"]) / 1e9, 2)  # GFLOPs of ViT-B/16
        35.13
    """
    if config.stem != "patch":
        raise ValueError(f"vit_flops covers the patch stem only, got stem={config.stem!r}")
    (gh, gw), (ph, pw) = patch_grid(config.image_size, config.patch_size), pair(config.patch_size)
    N, D, hidden = gh * gw, config.dim, int(config.dim * config.mlp_ratio)
    T = N + int(config.class_token) + int(config.distilled)
    patches = 2 * N * config.in_channels * ph * pw * D
    block = 2 * T * D * 3 * D + 2 * 2 * T * T * D + 2 * T * D * D + 2 * 2 * T * D * hidden
    return patches + config.depth * block + (1 + int(config.distilled)) * 2 * D * config.num_classes


def attention_rollout(maps: list[Tensor], residual: float = 0.5) -> Tensor:
    """Attention rollout (Abnar & Zuidema, 2020): how much each token draws on each input.

    Per block, average the heads, mix in the identity for the residual connection
    (``residual · I + (1 - residual) · A``), renormalise the rows, and multiply the blocks:
    ``R = Â_L ··· Â_2 Â_1``, ``(B, T, T)``, its row ``t`` for output token ``t``.

    Args:
        maps: the blocks' attention weights ``(B, h, T, T)``, from
            :meth:`VisionTransformer.attention_maps` (or an axial ViT's, one per layer, or one
            Swin stage's; not Swin's across stages, which see different tokens: ``ValueError``).
        residual: weight of the identity, in ``[0, 1]``.

    Example:
        >>> attention_rollout([torch.full((1, 2, 4, 4), 0.25)] * 3)[0, 0]  # uniform, 3 blocks
        tensor([0.3438, 0.2188, 0.2188, 0.2188])
    """
    if not maps:
        raise ValueError("attention_rollout needs the maps of at least one block")
    if len(tokens := {a.shape[-1] for a in maps}) > 1:
        raise ValueError(
            f"attention rollout multiplies the blocks' maps, so they must be over the same "
            f"tokens; got maps over {sorted(tokens, reverse=True)} tokens (Swin merges tokens "
            f"between stages: a token of one stage stands for up to four of the one before)"
        )
    check_real("residual", residual, 0.0, 1.0)
    result = eye = torch.eye(maps[0].shape[-1], device=maps[0].device)  # (T, T)
    for a in maps:
        a = (1 - residual) * a.mean(dim=1) + residual * eye  # (B, T, T)
        result = (a / a.sum(dim=-1, keepdim=True)) @ result
    return result
