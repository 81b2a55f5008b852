"""Swin Transformer: windows and a hierarchy of stages (chapter 10).

.. code-block:: text

    images (B, C, H, W) -> patch conv + LayerNorm -> grid (B, Gh, Gw, D)
      -> stage 1: SwinBlocks, shift 0, M//2, 0, ... -> (B, Gh, Gw, D)
      -> stage s > 1: PatchMerging, then SwinBlocks -> (B, ⌈h/2⌉, ⌈w/2⌉, 2^(s-1) D)
      -> LayerNorm -> mean over the grid -> Linear head -> (B, num_classes)

A model is built from a :class:`SwinConfig`, its fields as keywords, or both, or from a preset
(:func:`create_swin`); :func:`swin_flops` counts a configuration's cost. The layers are those of
:mod:`vit_tutorial.windows`; :mod:`vit_tutorial.swin_interop` loads timm and torchvision
weights with the same logits. Shapes: B batch, C channels, H×W pixels, Gh×Gw patch grid, h×w a
stage's grid, D the first stage's width, M window, S stages.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import Tensor, nn

from vit_tutorial.backbone import Classifier, Indices, take_indices, to_format
from vit_tutorial.encoder import BlockOptions, init_weights
from vit_tutorial.patches import IntOrPair, PatchEmbedding, pair, patch_grid
from vit_tutorial.validate import ModelConfig, build_preset, check_int, check_real, trusted
from vit_tutorial.windows import PatchMerging, SwinBlock

__all__ = [
    "SwinConfig",
    "SwinStage",
    "SwinTransformer",
    "SWIN_PRESETS",
    "create_swin",
    "swin_flops",
]


@dataclasses.dataclass
class SwinConfig(ModelConfig):
    """Every choice that defines a :class:`SwinTransformer` (defaults: Swin-T at 224×224).

    Attributes:
        image_size, patch_size: ``H`` or ``(H, W)``, and ``P`` or ``(P_h, P_w)``, which divides it.
        in_channels, num_classes: C of the images, and the number of logits.
        dim: the width of the first stage (the paper's C; stage ``s`` has ``dim · 2^s``).
        depths, num_heads: blocks and heads per stage (a tuple each, one entry per stage).
        window_size: M, or one M per stage (the official code and timm shrink the window of a
            stage whose grid is smaller, ``swin_fashion`` says so itself); every second block
            of a stage shifts by ``M // 2``. No grid needs to be divisible by M: a block pads
            it (:class:`~vit_tutorial.windows.SwinBlock`).
        mlp_ratio, qkv_bias: the MLP's width as a multiple of the stage's; a q/k/v bias.
        drop_path: stochastic depth of the last block, rising linearly from 0 over all blocks.
        norm_eps: the LayerNorm epsilon (PyTorch's 1e-5, as both references).
    """

    image_size: IntOrPair = 224
    patch_size: IntOrPair = 4
    in_channels: int = 3
    num_classes: int = 1000
    dim: int = 96
    depths: tuple[int, ...] = (2, 2, 6, 2)
    num_heads: tuple[int, ...] = (3, 6, 12, 24)
    window_size: int | tuple[int, ...] = 7
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    drop_path: float = 0.0
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name, low in [("in_channels", 1), ("dim", 1), ("num_classes", 0)]:  # 0: no head
            setattr(self, name, check_int(name, getattr(self, name), low))  # NumPy's as ints
        per_stage = ["depths", "num_heads"]
        if isinstance(self.window_size, (tuple, list)):
            per_stage.append("window_size")  # one M per stage
        else:
            self.window_size = check_int("window_size", self.window_size)
        for name in per_stage:
            value = getattr(self, name)
            if not isinstance(value, (tuple, list)) or not value:
                raise TypeError(f"{name} must be a tuple with one int per stage, got {value!r}")
            setattr(self, name, tuple(check_int(f"{name}[{s}]", v) for s, v in enumerate(value)))
            if len(value) != len(self.depths):
                raise ValueError(f"depths {self.depths} and {name} {value} differ in length")
        check_real("drop_path", self.drop_path, 0.0, 1.0, high_open=True)
        patch_grid(self.image_size, self.patch_size)  # TypeError or ValueError
        #: Not a field: each stage's BlockOptions (width dim·2^s, its heads, mlp_ratio, ...),
        #: checked here and nowhere else; the stages build their layers from them.
        self.stage_options = tuple(
            BlockOptions(self.dim * 2**s, h, self.mlp_ratio, self.qkv_bias, norm_eps=self.norm_eps)
            for s, h in enumerate(self.num_heads)
        )

    def stage_window(self, stage: int) -> int:
        """The window M of the blocks of ``stage`` (0-based)."""
        windows = self.window_size
        return windows[stage] if isinstance(windows, tuple) else windows

    def stage_grids(self) -> list[tuple[int, int]]:
        """The grid ``(h, w)`` of every stage: the patch grid, then halved (rounded up)."""
        grids = [patch_grid(self.image_size, self.patch_size)]
        for _ in self.depths[1:]:
            grids.append(tuple(-(-n // 2) for n in grids[-1]))
        return grids


class SwinStage(nn.Module):
    """Stage ``stage`` of a :class:`SwinConfig`: a :class:`PatchMerging` (``downsample``; ``None``
    in the first stage), then a block per drop-path rate, shifted by ``M // 2`` every second."""

    def __init__(self, config: SwinConfig, stage: int, rates: list[float]) -> None:
        super().__init__()
        o, M = config.stage_options[stage], config.stage_window(stage)
        self.downsample = trusted(PatchMerging, o.dim // 2, o.norm_eps) if stage else None
        shifts = [(i % 2) * (M // 2) for i in range(len(rates))]
        blocks = [trusted(SwinBlock, o, M, s, p) for s, p in zip(shifts, rates, strict=True)]
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, H, W, C)`` to ``(B, ⌈H/2⌉, ⌈W/2⌉, 2C)`` (first stage: ``(B, H, W, C)``)."""
        x = x if self.downsample is None else self.downsample(x)
        for block in self.blocks:
            x = block(x)
        return x

    def forward_with_weights(self, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        """:meth:`forward` on the explicit path, and each block's attention on the stage's grid
        ``h × w``, ``(B, h_heads, h·w, h·w)`` (:meth:`SwinBlock.forward_with_weights
        <vit_tutorial.windows.SwinBlock.forward_with_weights>`)."""
        x, maps = x if self.downsample is None else self.downsample(x), []
        for block in self.blocks:
            x, weights = block.forward_with_weights(x)
            maps.append(weights)
        return x, maps


class SwinTransformer(Classifier, nn.Module):
    """Swin Transformer (Liu et al. 2021), built from a :class:`SwinConfig` and/or its fields.

    Parameter names follow timm's where the parts agree (``patch_embed.proj``, ``downsample``,
    ``blocks``, ``attn.qkv``, ``mlp.fc1``, ``norm``); Linear layers start from
    :func:`~vit_tutorial.encoder.init_weights` (std 0.02 truncated at ±2 std, about 0.0176, zero
    bias; timm and torchvision truncate at ±2, which cuts nothing).

    Example:
        >>> model = SwinTransformer(image_size=(32, 64), dim=16, depths=(2, 2), num_heads=(1, 2),
        ...                         window_size=4, num_classes=5)
        >>> model.config.stage_grids(), model(torch.randn(2, 3, 32, 64)).shape
        ([(8, 16), (4, 8)], torch.Size([2, 5]))
    """

    def __init__(self, config: SwinConfig | None = None, **fields: Any) -> None:
        super().__init__()
        self.config = c = SwinConfig.resolve(config, **fields)
        self.patch_embed = trusted(PatchEmbedding, c.image_size, c.patch_size, c.in_channels, c.dim)
        self.patch_norm = nn.LayerNorm(c.dim, eps=c.norm_eps)
        rates = torch.linspace(0, c.drop_path, sum(c.depths), device="cpu").split(c.depths)
        self.stages = nn.ModuleList(SwinStage(c, s, r.tolist()) for s, r in enumerate(rates))
        self.num_features = width = c.stage_options[-1].dim  # dim · 2^(S-1), as timm's
        self.global_pool = self._POOL
        self.norm = nn.LayerNorm(width, eps=c.norm_eps)
        self.head = nn.Linear(width, c.num_classes) if c.num_classes else nn.Identity()
        self.apply(init_weights)

    def _embed(self, images: Tensor) -> Tensor:
        """Images ``(B, C, H, W)`` to the normalised patch grid ``(B, Gh, Gw, D)``."""
        x = self.patch_embed(images)  # (B, Gh·Gw, D); checks the images' size and channels
        return self.patch_norm(x.view(x.shape[0], *self.patch_embed.grid_size, -1))

    def forward_features(self, images: Tensor) -> Tensor:
        """Images ``(B, C, H, W)`` to the last stage's normalised grid ``(B, h, w, D·2^(S-1))``."""
        x = self._embed(images)
        for stage in self.stages:
            x = stage(x)
        return self.norm(x)

    def forward_head(self, features: Tensor, pre_logits: bool = False) -> Tensor:
        """The mean of the grid ``(B, h, w, C)`` (the grid once ``global_pool`` is ``''``) through
        the head; ``pre_logits``: the mean."""
        pooled = features.mean(dim=(1, 2)) if self.global_pool else features  # (B, C)
        return pooled if pre_logits else self.head(pooled)

    def forward(self, images: Tensor) -> Tensor:
        """Logits ``(B, num_classes)``: the mean of the last grid, through the head."""
        return self.forward_head(self.forward_features(images))

    def attention_maps(self, images: Tensor) -> list[Tensor]:
        """Every block's attention weights, its windows placed back on its stage's grid: a
        ``(B, h, N_s, N_s)`` per block, ``N_s`` the tokens of stage ``s``, row-major; zero
        between tokens that share no window (with the shift undone and the padding dropped)."""
        x, maps = self._embed(images), []
        for stage in self.stages:
            x, weights = stage.forward_with_weights(x)
            maps += weights
        return maps

    def no_weight_decay(self) -> set[str]:
        """The parameters exempt from weight decay besides biases and norms: the relative position
        bias tables, as in timm's ``no_weight_decay`` and the official ``optimizer.py``."""
        return {n for n, _ in self.named_parameters() if n.endswith("relative_position_bias.table")}

    def _start(self, images: Tensor) -> tuple[Tensor, nn.ModuleList]:
        return self._embed(images), self.stages

    def _normed(self, i: int, x: Tensor) -> Tensor:
        return self.norm(x) if i == len(self.stages) - 1 else x  # the norm is sized for it

    _end = _normed

    def _format(self, x: Tensor, output_fmt: str, images: Tensor) -> Tensor:
        return to_format(x, output_fmt)  # timm's Swin has 'NCHW' alone

    def prune_intermediate_layers(
        self, indices: Indices = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """Drop the stages after the last of ``indices``, as timm's: with them the final norm
        and the head, sized for the last stage (``num_features`` becomes the last kept stage's
        width). Returns the stages ``indices`` selects."""
        taken, last = take_indices(len(self.stages), indices)
        cut = last < len(self.stages) - 1
        self.stages = self.stages[: last + 1]
        if prune_norm or cut:
            self.norm = nn.Identity()
        if cut:
            self.num_features = self.config.stage_options[last].dim
        if prune_head or cut:
            self.reset_classifier(0, "")
        return taken

    _POOL, ZERO_HEAD = "avg", False  # reset_classifier's: the mean; a head drawn at random


#: Swin-T, S and B of the paper's Section 3.3 (drop path 0.2, 0.3 and 0.5: torchvision's
#: ``swin_t``, ``swin_s``, ``swin_b``), and ``swin_fashion`` for 28×28 Fashion-MNIST (chapter 10):
#: 2×2 patches, widths 16, 32 and 64 (heads of width 16), Swin's MLP ratio of 4, no drop path;
#: two blocks on the 14×14 grid (four 7×7 windows, then shifted), six on the 7×7 grid (one
#: window: no shift) and one on the 4×4 grid (the odd 7×7 grid padded before the merge, as timm
#: and torchvision pad; the preset sets that stage's window to 4, its grid). 146,844 parameters
#: and 14.8 MFLOPs, attention's products included: +5.7% and -3.7% of chapter 8's ViT.
SWIN_PRESETS: dict[str, SwinConfig] = {
    "swin_tiny_patch4_window7_224": SwinConfig(drop_path=0.2),
    "swin_small_patch4_window7_224": SwinConfig(depths=(2, 2, 18, 2), drop_path=0.3),
    "swin_base_patch4_window7_224": SwinConfig(
        dim=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32), drop_path=0.5
    ),
    "swin_fashion": SwinConfig(
        28, 2, 1, 10, dim=16, depths=(2, 6, 1), num_heads=(1, 2, 4), window_size=(7, 7, 4)
    ),
}


def create_swin(name: str, **overrides: Any) -> SwinTransformer:
    """Build the preset ``name`` of :data:`SWIN_PRESETS`, any :class:`SwinConfig` field overridden.

    Example:
        >>> create_swin("swin_fashion").config.stage_grids()
        [(14, 14), (7, 7), (4, 4)]
    """
    return build_preset(SWIN_PRESETS, SwinTransformer, name, **overrides)


def swin_flops(config: SwinConfig) -> int:
    """Floating-point operations of one forward pass of one image, by formula.

    As :func:`~vit_tutorial.vit.vit_flops`, a multiply-add is 2 FLOPs and only matrix products
    count. A block on a grid ``h × w`` of width C, padded to ``Hp × Wp``, costs
    ``2(4·HpWp·C² + 2M²·HpWp·C)`` in (S)W-MSA (the paper's equation 2, whose ``2M²hwC`` replaces
    equation 1's ``2(hw)²C``: linear in ``hw``) and ``2·2hw·C·rC`` in the MLP; a
    :class:`PatchMerging` ``2hw·4C·2C`` on its output grid; then the patch convolution and head.
    The paper's Table 1 counts multiply-adds: 4.5G for Swin-T.

    Example:
        >>> round(swin_flops(SWIN_PRESETS["swin_tiny_patch4_window7_224"]) / 1e9, 2)  # GFLOPs
        8.98
    """
    (ph, pw), grids = pair(config.patch_size), config.stage_grids()
    total = 2 * grids[0][0] * grids[0][1] * config.in_channels * ph * pw * config.dim
    for s, ((h, w), depth) in enumerate(zip(grids, config.depths, strict=True)):
        M = config.stage_window(s)
        C, hidden = config.dim * 2**s, int(config.dim * 2**s * config.mlp_ratio)
        padded = math.ceil(h / M) * M * math.ceil(w / M) * M
        total += 2 * h * w * 2 * C * C if s else 0  # merging 4·(C/2) channels into C
        attention = 4 * padded * C * C + 2 * M * M * padded * C  # equation 2, multiply-adds
        total += depth * (2 * attention + 2 * 2 * h * w * C * hidden)
    return total + 2 * config.dim * 2 ** (len(config.depths) - 1) * config.num_classes
