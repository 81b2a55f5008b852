"""Axial attention: attend along each column, then along each row (chapter 7).

Full self-attention over a ``Gh × Gw`` grid of ``N = Gh·Gw`` patch tokens costs ``O(N²)`` time, and
``O(N²)`` memory when the score matrix is stored. Axial attention (Ho et al. 2019, Wang et al. 2020)
splits it in a **height** layer, where a token attends only to its column, and a **width** layer,
only to its row: ``O(N·Gh)`` and ``O(N·Gw)``, ``O(N·√N)`` on a square grid, and after both every
token has heard from every other one (through the token where its row meets the other's column).
:func:`attention_flops` counts the cost; :func:`vit_tutorial.measure.peak_memory` and
:func:`vit_tutorial.measure.median_seconds` measure it on the CPU. Shapes: B batch, Gh×Gw grid (a
column is Gh tokens, a row Gw), N = Gh·Gw patches, T = N tokens (no class token), D width, h heads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from einops import rearrange
from torch import Tensor, nn

from vit_tutorial.attention import MultiHeadSelfAttention
from vit_tutorial.backbone import Classifier, Indices, take_indices, to_format
from vit_tutorial.config import TransformerConfig
from vit_tutorial.encoder import BlockOptions, DropPath, init_weights
from vit_tutorial.patches import IntOrPair, PatchEmbedding, grid_coordinates, pair
from vit_tutorial.positional import LearnedPositionalEmbedding, SinusoidalEmbedding2D
from vit_tutorial.validate import check_int, check_real, trusted
from vit_tutorial.vit import VisionTransformer

__all__ = [
    "AxialAttention",
    "AxialEncoderBlock",
    "AxialViTConfig",
    "AxialViT",
    "AXIAL_PRESETS",
    "axial_mask",
    "on_grid",
    "along_axis",
    "attention_flops",
]

AXES = ("height", "width")
# einops patterns folding the other axis into the batch (a sequence per column or row), and back
_FOLD = {"height": "b gh gw d -> (b gw) gh d", "width": "b gh gw d -> (b gh) gw d"}
_UNFOLD = {"height": "(b gw) gh d -> b gh gw d", "width": "(b gh) gw d -> b gh gw d"}


def _check_axis(axis: str) -> None:
    if axis not in AXES:
        raise ValueError(
            f"axis must be 'height' (attend along columns) or 'width' (along rows), got {axis!r}"
        )


def along_axis(x: Tensor, fn: Callable[[Tensor], Tensor], axis: str) -> Tensor:
    """Apply ``fn`` to every column (``'height'``) or every row (``'width'``) of a grid.

    The other axis of ``x`` ``(B, Gh, Gw, D)`` is folded into the batch; ``fn`` maps the short
    sequences ``(B·Gw, Gh, D)`` or ``(B·Gh, Gw, D)`` to ``(·, ·, D')``, put back on the grid.

    Example:
        >>> x = torch.randn(2, 3, 5, 4)
        >>> torch.equal(along_axis(x, lambda s: s.cumsum(1), "height"), x.cumsum(1))
        True
    """
    _check_axis(axis)
    if not isinstance(x, Tensor) or x.dim() != 4:
        shape = f"{x.dim()}-D {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"expected a grid of tokens of shape (B, Gh, Gw, D), got {shape}")
    lines = fn(rearrange(x, _FOLD[axis]))  # (B·Gw, Gh, D) or (B·Gh, Gw, D)
    return rearrange(lines, _UNFOLD[axis], b=x.shape[0], gh=x.shape[1], gw=x.shape[2])


class AxialAttention(nn.Module):
    """Multi-head self-attention along one axis of a ``(B, Gh, Gw, D)`` grid of tokens.

    Each token attends to its column (``axis='height'``) or row (``'width'``). The
    :class:`~vit_tutorial.attention.MultiHeadSelfAttention` ``attn`` of ``dim``, ``num_heads`` and
    ``**attention_options`` sees the ``B·Gw`` columns or ``B·Gh`` rows as a batch
    (:func:`along_axis`): full attention on the flattened grid masked by :func:`axial_mask`.

    Example:
        >>> AxialAttention(dim=32, num_heads=4, axis="height")(torch.randn(2, 6, 9, 32)).shape
        torch.Size([2, 6, 9, 32])
    """

    def __init__(self, dim: int, num_heads: int, axis: str, **attention_options: Any) -> None:
        _check_axis(axis)
        self._build(MultiHeadSelfAttention(dim, num_heads, **attention_options), axis)

    def _build(self, attn: MultiHeadSelfAttention, axis: str) -> None:
        super().__init__()
        self.axis, self.attn = axis, attn

    fused = property(
        lambda self: self.attn.fused,
        lambda self, value: setattr(self.attn, "fused", value),
        doc="The ``fused`` switch of the inner attention (set it to compare the two paths).",
    )

    def _check(self, x: Tensor) -> None:
        if isinstance(x, Tensor) and x.dim() == 4 and x.shape[-1] != self.attn.dim:
            raise ValueError(
                f"expected last dimension dim={self.attn.dim}, got "
                f"{x.shape[-1]} (x is {tuple(x.shape)})"
            )

    def forward(self, x: Tensor) -> Tensor:
        """Attend along ``self.axis``: a grid ``(B, Gh, Gw, D)`` in, the same shape out."""
        self._check(x)
        return along_axis(x, self.attn, self.axis)

    def forward_with_weights(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`forward` on the explicit path, and the attention weights: one matrix per column,
        ``(B, Gw, h, Gh, Gh)``, or per row, ``(B, Gh, h, Gw, Gw)``."""
        self._check(x)
        kept = []

        def attend(lines: Tensor) -> Tensor:
            out, weights = self.attn.forward_with_weights(lines)
            kept.append(weights)  # (B·Gw, h, Gh, Gh) or (B·Gh, h, Gw, Gw)
            return out

        out = along_axis(x, attend, self.axis)
        return out, kept[0].unflatten(0, (x.shape[0], x.shape[2 if self.axis == "height" else 1]))

    def extra_repr(self) -> str:
        return f"axis={self.axis!r}"


class AxialEncoderBlock(nn.Module):
    """A pre-norm encoder block for a grid: height attention, width attention and MLP, each in a
    residual branch ``x = x + DropPath(layer(LN(x)))``.

    Arguments as for :class:`~vit_tutorial.encoder.EncoderBlock` but ``norm_first`` (``num_heads``
    per attention layer); after one block each token depends on the whole grid.

    Example:
        >>> AxialEncoderBlock(dim=32, num_heads=4)(torch.randn(2, 4, 6, 32)).shape
        torch.Size([2, 4, 6, 32])
    """

    def __init__(self, dim: int, num_heads: int, *, drop_path: float = 0.0, **options: Any) -> None:
        check_real("drop_path", drop_path, 0.0, 1.0, high_open=True)
        self._build(BlockOptions(dim, num_heads, **options), drop_path)

    def _build(self, o: BlockOptions, drop_path: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(o.dim, eps=o.norm_eps)
        self.attn_height = trusted(AxialAttention, o.attention(), "height")
        self.drop_path1 = trusted(DropPath, drop_path)
        self.norm2 = nn.LayerNorm(o.dim, eps=o.norm_eps)
        self.attn_width = trusted(AxialAttention, o.attention(), "width")
        self.drop_path2 = trusted(DropPath, drop_path)
        self.norm3 = nn.LayerNorm(o.dim, eps=o.norm_eps)
        self.mlp = o.feed_forward()
        self.drop_path3 = trusted(DropPath, drop_path)

    def forward(self, x: Tensor) -> Tensor:
        """Apply the block to a grid of tokens ``(B, Gh, Gw, D)``; same shape out."""
        x = x + self.drop_path1(self.attn_height(self.norm1(x)))
        x = x + self.drop_path2(self.attn_width(self.norm2(x)))
        return x + self.drop_path3(self.mlp(self.norm3(x)))

    def forward_with_weights(self, x: Tensor) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """:meth:`forward` on the explicit path, and the weights of its two layers: per column
        ``(B, Gw, h, Gh, Gh)``, per row ``(B, Gh, h, Gw, Gw)`` (:class:`AxialAttention`)."""
        a, columns = self.attn_height.forward_with_weights(self.norm1(x))
        x = x + self.drop_path1(a)
        a, rows = self.attn_width.forward_with_weights(self.norm2(x))
        x = x + self.drop_path2(a)
        return x + self.drop_path3(self.mlp(self.norm3(x))), (columns, rows)


@dataclasses.dataclass
class AxialViTConfig(TransformerConfig):
    """Every choice that defines an :class:`AxialViT` (defaults: ViT-B/16 sizes): the fields of
    :class:`~vit_tutorial.vit.TransformerConfig`, ``depth`` counting :class:`AxialEncoderBlock` s,
    ``pos_embed`` ``'learned'`` or ``'sincos2d'`` (fixed); no ``pool``: it averages the tokens."""


class AxialViT(Classifier, nn.Module):
    """A Vision Transformer whose blocks are :class:`AxialEncoderBlock` s.

    Patches plus position, as a grid ``(B, Gh, Gw, D)``, pass ``depth`` blocks; their mean over the
    grid goes through a LayerNorm to the linear head. **No class token:** off the grid, it has no
    row or column to attend along, and would need its own global attention (``O(N)`` per layer,
    cheap, but a third kind of layer). The model averages the tokens instead, as ViT with
    ``pool='mean'``; after one block each token, so the mean too, has seen the whole image.

    Args:
        config: an :class:`AxialViTConfig`, kept as ``config``; ``None``: the defaults.
        **fields: :class:`AxialViTConfig` fields, overriding those of ``config``.

    Example:
        >>> model = AxialViT(image_size=32, patch_size=4, dim=32, depth=2, num_heads=4,
        ...                  num_classes=10)
        >>> model(torch.randn(2, 3, 32, 32)).shape
        torch.Size([2, 10])
    """

    def __init__(self, config: AxialViTConfig | None = None, **fields: Any) -> None:
        super().__init__()
        self.config = c = AxialViTConfig.resolve(config, **fields)
        self.patch_embed = trusted(PatchEmbedding, c.image_size, c.patch_size, c.in_channels, c.dim)
        self.grid_size = self.patch_embed.grid_size
        if c.pos_embed == "learned":
            self.pos_embed = trusted(
                LearnedPositionalEmbedding, self.patch_embed.num_patches, c.dim
            )
        else:
            self.pos_embed = trusted(SinusoidalEmbedding2D, self.grid_size, c.dim, 0)
        self.pos_drop = nn.Dropout(c.dropout)
        rates = c.drop_path_rates()
        self.blocks = nn.ModuleList(trusted(AxialEncoderBlock, c.block, r) for r in rates)
        self.num_features, self.global_pool = c.dim, self._POOL
        self.fc_norm = nn.LayerNorm(c.dim, eps=c.norm_eps)
        self.head = nn.Linear(c.dim, c.num_classes) if c.num_classes else nn.Identity()
        self.apply(init_weights)
        if c.num_classes:
            nn.init.zeros_(self.head.weight)

    def _grid(self, images: Tensor) -> Tensor:
        """Patches plus position, as a grid ``(B, Gh, Gw, D)``."""
        x = self.pos_embed(self.patch_embed(images))  # (B, N, D); checks the images
        return rearrange(self.pos_drop(x), "b (gh gw) d -> b gh gw d", gh=self.grid_size[0])

    def forward_features(self, images: Tensor) -> Tensor:
        """The grid of tokens ``(B, Gh, Gw, D)`` after the last block."""
        x = self._grid(images)
        for block in self.blocks:
            x = block(x)  # (B, Gh, Gw, D)
        return x

    def forward_head(self, features: Tensor, pre_logits: bool = False) -> Tensor:
        """The grid's mean ``(B, D)`` (the grid once ``global_pool`` is ``''``), normalised
        (``pre_logits``: stop here), through the head."""
        pooled = self.fc_norm(features.mean(dim=(1, 2)) if self.global_pool else features)
        return pooled if pre_logits else self.head(pooled)

    def forward(self, images: Tensor) -> Tensor:
        """Logits ``(B, num_classes)`` for images ``(B, C, H, W)``."""
        return self.forward_head(self.forward_features(images))

    no_weight_decay = VisionTransformer.no_weight_decay  # the position table (no class token)

    def _start(self, images: Tensor) -> tuple[Tensor, nn.ModuleList]:
        return self._grid(images), self.blocks

    def _normed(self, i: int, x: Tensor) -> Tensor:
        return x  # the LayerNorm follows the pooling, as a mean-pooled ViT's

    _end = _normed

    def _format(self, x: Tensor, output_fmt: str, images: Tensor) -> Tensor:
        return to_format(x, output_fmt)

    def attention_maps(self, images: Tensor) -> list[Tensor]:
        """The weights of every attention layer on the flattened grid, ``(B, h, N, N)`` each
        (tokens row-major, zero where :func:`axial_mask` is ``False``): per block its height
        (column) layer, then its width (row) layer, ``2 · depth`` in all."""
        x, maps = self._grid(images), []
        for block in self.blocks:
            x, (columns, rows) = block.forward_with_weights(x)
            maps += [on_grid(columns, "height"), on_grid(rows, "width")]
        return maps

    def prune_intermediate_layers(
        self, indices: Indices = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """Drop the blocks after the last of ``indices`` (with ``prune_head``, the pooling, its
        LayerNorm and the head), as a mean-pooled ViT's; ``prune_norm`` is accepted and does
        nothing: no norm acts on the tokens."""
        taken, last = take_indices(len(self.blocks), indices)
        self.blocks = self.blocks[: last + 1]
        if prune_head:
            self.fc_norm = nn.Identity()
            self.reset_classifier(0, "")
        return taken

    _POOL = "avg"  # reset_classifier's name of the mean; the head starts at zero


#: The ViT sizes of :data:`~vit_tutorial.vit.PRESETS` with axial blocks, at 224×224 and 1000
#: classes. timm has no axial model: the names follow its pattern (``vit_tiny_patch16_224``).
AXIAL_PRESETS: dict[str, AxialViTConfig] = {
    "axial_vit_tiny_patch16_224": AxialViTConfig(dim=192, depth=12, num_heads=3),
    "axial_vit_small_patch16_224": AxialViTConfig(dim=384, depth=12, num_heads=6),
    "axial_vit_base_patch16_224": AxialViTConfig(dim=768, depth=12, num_heads=12),
}


def on_grid(weights: Tensor, axis: str) -> Tensor:
    """Axial weights, per column ``(B, Gw, h, Gh, Gh)`` (``axis='height'``) or per row
    ``(B, Gh, h, Gw, Gw)`` (``'width'``), as one map ``(B, h, N, N)`` over the flattened grid.

    Example:
        >>> on_grid(torch.full((1, 3, 1, 2, 2), 0.5), "height")[0, 0, 0]  # 2×3 grid
        tensor([0.5000, 0.0000, 0.0000, 0.5000, 0.0000, 0.0000])
    """
    _check_axis(axis)
    lines, length = weights.shape[1], weights.shape[-1]
    eye = torch.eye(lines, dtype=weights.dtype, device=weights.device)
    if axis == "height":  # query (r, c) and key (s, c): weights[b, c, h, r, s]
        dense = torch.einsum("bchrs,cd->bhrcsd", weights, eye)
    else:  # query (r, c) and key (r, d): weights[b, r, h, c, d]
        dense = torch.einsum("brhcd,rs->bhrcsd", weights, eye)
    n = lines * length
    return dense.reshape(weights.shape[0], weights.shape[2], n, n)


def axial_mask(grid_size: IntOrPair, axis: str) -> Tensor:
    """Which token may attend to which in one axial layer, on the flattened grid.

    A boolean ``(N, N)`` mask over the ``N = Gh·Gw`` tokens of a grid ``G`` or ``(Gh, Gw)``,
    row-major: ``True`` = the query (row) may attend to the key (column) in the same column
    (``axis='height'``) or row (``'width'``); the ``attn_bias`` of a
    :class:`~vit_tutorial.attention.MultiHeadSelfAttention` on the flattened grid ``(B, N, D)``.

    Example:
        >>> axial_mask((2, 3), "width").int()  # two rows of three tokens
        tensor([[1, 1, 1, 0, 0, 0],
                [1, 1, 1, 0, 0, 0],
                [1, 1, 1, 0, 0, 0],
                [0, 0, 0, 1, 1, 1],
                [0, 0, 0, 1, 1, 1],
                [0, 0, 0, 1, 1, 1]], dtype=torch.int32)
    """
    _check_axis(axis)
    line = grid_coordinates(grid_size)[1 if axis == "height" else 0]  # (N,): column or row
    return line[:, None] == line[None, :]  # (N, N)


def attention_flops(grid_size: IntOrPair, dim: int, kind: str) -> int:
    """Floating-point operations of one attention layer on a ``Gh × Gw`` grid, by formula.

    A multiply-add counts as 2 FLOPs; softmax, scaling and biases are left out. With ``N = Gh·Gw``,
    ``kind='full'`` costs ``8·N·D²`` (projections q, k, v, out) plus ``4·N²·D`` (``Q Kᵀ`` and
    ``A V``); ``'axial'``, a height and a width layer, ``16·N·D²`` plus ``4·N·(Gh + Gw)·D``.

    Example:
        >>> full, axial = (attention_flops(64, 64, kind) for kind in ("full", "axial"))
        >>> round(full / 1e9, 2), round(axial / 1e9, 2)  # GFLOPs on a 64×64 grid, D = 64
        (4.43, 0.4)
    """
    gh, gw = pair(grid_size, "grid_size")
    check_int("dim", dim), check_int("grid_size", min(gh, gw))
    n = gh * gw
    if kind == "full":
        return 8 * n * dim**2 + 4 * n * n * dim
    if kind == "axial":
        return 16 * n * dim**2 + 4 * n * (gh + gw) * dim
    raise ValueError(f"kind must be 'full' or 'axial', got {kind!r}")
