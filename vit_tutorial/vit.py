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

from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from vit_tutorial.attention import attention_rollout
from vit_tutorial.backbone import Classifier, Indices, new_head, take_indices, to_format
from vit_tutorial.config import ViTConfig
from vit_tutorial.encoder import Encoder, SwiGLU, init_weights
from vit_tutorial.modern import AttentionPool, PatchDropout
from vit_tutorial.patches import ConvStem, PatchEmbedding, pair, patch_grid
from vit_tutorial.positional import (
    LearnedPositionalEmbedding,
    RelativePositionBias,
    RotaryEmbedding2D,
    SinusoidalEmbedding2D,
)
from vit_tutorial.validate import build_preset, trusted

__all__ = [  # ViTConfig and TransformerConfig are vit_tutorial.config's, importable from here
    "VisionTransformer",
    "PRESETS",
    "create_vit",
    "vit_flops",
    "attention_rollout",
]


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
        num_prefix_tokens: the class, distillation and register tokens (in this order).
        pos_embed: the module of ``config.pos_embed`` (``'relative'``: one per block) or ``None``.
        rope: the rotary embedding of ``config.rope`` (``'mixed'``: one per block) or ``None``.

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
        self.patch_embed.size_option = "dynamic_image_size=True"
        grid = self.grid_size = self.patch_embed.grid_size
        p = self.num_prefix_tokens = int(c.class_token) + int(c.distilled) + c.reg_tokens
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c.dim)) if c.class_token else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, c.dim)) if c.distilled else None
        if c.reg_tokens:  # registers: timm's name and start, N(0, 1e-6²)
            self.reg_token = nn.Parameter(torch.zeros(1, c.reg_tokens, c.dim))
        self.pos_embed, covered = None, 0 if c.no_embed_class else p  # prefix tokens in the table
        if c.pos_embed == "learned":
            n = covered + grid[0] * grid[1]
            self.pos_embed = trusted(LearnedPositionalEmbedding, n, c.dim, grid, covered)
        elif c.pos_embed == "sincos2d":
            self.pos_embed = trusted(SinusoidalEmbedding2D, grid, c.dim, covered)
        elif c.pos_embed == "relative":
            rpb = [trusted(RelativePositionBias, grid, c.num_heads, p) for _ in range(c.depth)]
            self.pos_embed = nn.ModuleList(rpb)
        self.rope = None
        if c.rope != "none":
            rope = (c.dim // c.num_heads, grid, p, None, c.rope, c.num_heads)
            ropes = [RotaryEmbedding2D(*rope) for _ in range(c.depth if c.rope == "mixed" else 1)]
            self.rope = nn.ModuleList(ropes) if c.rope == "mixed" else ropes[0]
        self.pos_drop = nn.Dropout(c.dropout)
        self.patch_drop = PatchDropout(c.patch_drop_rate, p) if c.patch_drop_rate else nn.Identity()
        self.encoder = trusted(Encoder, c.block, c.drop_path_rates())
        # timm's placement: the norm on the tokens for 'cls' and 'map', on the mean for 'mean'.
        mean = c.pool == "mean"
        self.norm = nn.Identity() if mean else c.block.normalization()
        self.fc_norm = c.block.normalization() if mean else nn.Identity()
        if c.pool == "map":
            args = c.dim, c.num_heads, c.mlp_ratio, c.norm, c.norm_eps
            self.attn_pool = trusted(AttentionPool, *args)
        self.num_features = c.dim  # the width forward_head takes, as timm's attribute
        self.global_pool = self._POOL = {"cls": "token", "mean": "avg"}.get(c.pool, c.pool)
        head = (lambda: nn.Linear(c.dim, c.num_classes)) if c.num_classes else nn.Identity
        self.head, self.head_dist = head(), head() if c.distilled else None
        self.apply(init_weights)
        if c.num_classes:
            nn.init.zeros_(self.head.weight)  # zero head, as in the paper and torchvision
        for token in (self.cls_token, self.dist_token):
            if token is not None:
                nn.init.trunc_normal_(token, std=0.02, a=-0.04, b=0.04)
        for module in self.modules():  # timm's starts of chapter 11's parts
            if isinstance(module, SwiGLU):
                module.init_gate()
        if c.reg_tokens:
            nn.init.normal_(self.reg_token, std=1e-6)
        if c.pool == "map":
            self.attn_pool.reset_latent()

    def _tokens(self, images: Tensor) -> tuple[Tensor, list[Tensor] | None]:
        """Embedded tokens ``(B, T, D)`` entering the encoder, and the per-block biases."""
        x = self.patch_embed(images)  # (B, N, D), N = Gh·Gw; checks the images
        size = tuple(images.shape[-2:])
        grid = None if size == self.patch_embed.image_size else self.patch_embed.grid_size_for(size)
        tokens = (self.cls_token, self.dist_token, getattr(self, "reg_token", None))
        prefix = [t.expand(x.shape[0], -1, -1) for t in tokens if t is not None]
        table = self.config.pos_embed in ("learned", "sincos2d")
        if table and self.config.no_embed_class:
            x = self.pos_embed(x, grid)  # the table covers the patches only (DeiT III)
        x = torch.cat([*prefix, x], dim=1)  # (B, T, D): [class, distillation, registers,] patches
        if self.config.pos_embed == "relative":
            return self.pos_drop(x), [rpb() for rpb in self.pos_embed]  # h × T × T each
        if table and not self.config.no_embed_class:
            x = self.pos_embed(x, grid)  # resampled for another grid
        return self.patch_drop(self.pos_drop(x)), None

    def _ropes(self, images: Tensor) -> list | None:
        """Each block's rotation of queries and keys, for the images' grid; ``None``: no RoPE."""
        if self.rope is None:
            return None
        grid = self.patch_embed.grid_size_for(images.shape[-2:])
        ropes = self.rope if isinstance(self.rope, nn.ModuleList) else [self.rope]
        ropes = [partial(rope, grid_size=grid) for rope in ropes]
        return ropes * len(self.encoder.blocks) if len(ropes) == 1 else ropes

    def forward_features(self, images: Tensor) -> Tensor:
        """Tokens ``(B, T, D)`` after the encoder and, for ``pool='cls'``, the final LayerNorm."""
        x, biases = self._tokens(images)
        return self.norm(self.encoder(x, biases, self._ropes(images)))

    def forward_head(
        self, tokens: Tensor, pre_logits: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Pool tokens ``(B, T, D)`` (class token or mean; none once ``global_pool`` is
        ``''``), normalise if 'mean', classify; ``pre_logits=True`` stops before the head.

        With a distillation token: ``(class logits, distillation logits)`` in training, their
        mean in eval, as DeiT and timm (the paper, Section 4, adds the heads' softmax outputs);
        its pre-logits are the mean of the two tokens, as timm's ``VisionTransformerDistilled``."""
        p = 0 if self.config.pool_include_prefix else self.num_prefix_tokens
        if self.global_pool == "map":
            pooled = self.attn_pool(tokens[:, p:])
        else:
            pooled = _POOLS[self.global_pool](tokens, p)
        pooled = self.fc_norm(pooled)
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
        return self.encoder.forward_with_weights(x, biases, self._ropes(images))[1]

    def no_weight_decay(self) -> set[str]:
        """Names of the parameters exempt from weight decay: prefix tokens, position tables."""
        exempt = ("cls_token", "dist_token", "reg_token", "pos_embed.")
        return {name for name, _ in self.named_parameters() if name.startswith(exempt)}

    def _start(self, images: Tensor) -> tuple[Tensor, list]:
        x, biases = self._tokens(images)
        n = len(self.encoder.blocks)
        per_block = zip(
            self.encoder.blocks, biases or [None] * n, self._ropes(images) or [None] * n
        )
        return x, [partial(block, attn_bias=b, rope=r) for block, b, r in per_block]

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
        if self.config.rope == "mixed":
            self.rope = self.rope[: last + 1]
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
        if global_pool == "" and hasattr(self, "attn_pool"):
            del self.attn_pool  # as timm's: no pooling, no attention pool
        if self.head_dist is not None:
            self.head_dist = new_head(self.num_features, num_classes, self, zero=False)


#: Pooling by ``global_pool``: the class token, the mean, or none (every token); ``'map'``,
#: :class:`~vit_tutorial.modern.AttentionPool`, is a module of the model.
#: ``p``: the prefix tokens the mean leaves out (all unless ``pool_include_prefix``).
_POOLS = {"token": lambda t, p: t[:, 0], "avg": lambda t, p: t[:, p:].mean(1), "": lambda t, p: t}


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
    Chapter 11's parts: SwiGLU has three ``D × rD`` products, the MAP head one query's
    attention (``2·D²`` for q and the projection, ``2T·D·2D`` for k, v, ``2·2T·D``) and an MLP.

    Example:
        >>> round(vit_flops(PRESETS["vit_base_patch16_224"]) / 1e9, 2)  # GFLOPs of ViT-B/16
        35.13
    """
    if config.stem != "patch":
        raise ValueError(f"vit_flops covers the patch stem only, got stem={config.stem!r}")
    (gh, gw), (ph, pw) = patch_grid(config.image_size, config.patch_size), pair(config.patch_size)
    N, D, hidden = gh * gw, config.dim, int(config.dim * config.mlp_ratio)
    p = int(config.class_token) + int(config.distilled) + config.reg_tokens
    T, mlp = N + p, 2 * (3 if config.mlp == "swiglu" else 2) * D * hidden  # MLP per token
    patches = 2 * N * config.in_channels * ph * pw * D
    block = 2 * T * D * 3 * D + 2 * 2 * T * T * D + 2 * T * D * D + T * mlp
    head = (1 + int(config.distilled)) * 2 * D * config.num_classes
    if config.pool == "map":  # one learned query over the pooled tokens
        pooled = T if config.pool_include_prefix else N
        head += 2 * 2 * D * D + 2 * pooled * D * 2 * D + 2 * 2 * pooled * D + 2 * 2 * D * hidden
    return patches + config.depth * block + head
