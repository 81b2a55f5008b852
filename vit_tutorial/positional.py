"""Positional encodings: how a set of patch tokens learns where each patch was (chapter 3).

Attention is blind to order (permute the tokens and the output is permuted the same way); these put
the place back: a learned vector per position (ViT, DeiT), fixed sine/cosine codes (Vaswani et al.;
in 2D, MAE and simple ViT), a learned attention bias per 2D offset (Swin, BEiT), and rotations of
queries and keys by the patch's row and column (RoPE, Heo et al., 2024). Shapes: B batch, N = Gh·Gw
patches, T tokens (N plus prefix tokens such as the class token), D model width, h heads, d head
width, Gh×Gw patch grid, numbered row-major (:func:`grid_coordinates`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from vit_tutorial.patches import IntOrPair, grid_coordinates, pair
from vit_tutorial.validate import check_int, check_real

__all__ = [
    "LearnedPositionalEmbedding",
    "SinusoidalEmbedding2D",
    "grid_coordinates",
    "RelativePositionBias",
    "RotaryEmbedding2D",
    "resize_pos_embed",
    "sinusoidal_1d",
    "sinusoidal_2d",
]


class LearnedPositionalEmbedding(nn.Module):
    """A learned table of one D-vector per position, added to the tokens (ViT, DeiT).

    The table ``weight`` ``(1, T, D)``, T = ``num_positions`` with the prefix tokens, starts from a
    normal of std 0.02 truncated at ±2 std (std 0.0176; the reference ViT and timm do not truncate,
    which is immaterial). Given the ``(Gh, Gw)`` ``grid_size`` of the table after its
    ``num_prefix_tokens`` entries (the class token), ``forward`` resamples it for another grid.

    Example:
        >>> LearnedPositionalEmbedding(num_positions=197, dim=768)(torch.zeros(2, 197, 768)).shape
        torch.Size([2, 197, 768])
    """

    def __init__(
        self,
        num_positions: int,
        dim: int,
        grid_size: IntOrPair | None = None,
        num_prefix_tokens: int = 0,
    ) -> None:
        check_int("num_positions", num_positions), check_int("dim", dim)
        check_int("num_prefix_tokens", num_prefix_tokens, 0)
        grid = pair(grid_size, "grid_size") if grid_size is not None else None
        if grid and (want := math.prod(grid) + num_prefix_tokens) != num_positions:
            raise ValueError(f"num_positions must be {want} (prefix + grid), got {num_positions}")
        self._build(num_positions, dim, grid, num_prefix_tokens)

    def _build(self, num_positions, dim, grid_size=None, num_prefix_tokens=0) -> None:
        super().__init__()
        self.num_positions, self.dim, self.num_prefix_tokens = num_positions, dim, num_prefix_tokens
        self.grid_size = pair(grid_size, "grid_size") if grid_size is not None else None
        self.weight = nn.Parameter(torch.empty(1, num_positions, dim))
        nn.init.trunc_normal_(self.weight, std=0.02, a=-0.04, b=0.04)

    def forward(self, x: Tensor, grid_size: IntOrPair | None = None) -> Tensor:
        """Return ``x + weight`` for tokens ``x`` ``(B, T, D)``, the table first resampled with
        :func:`resize_pos_embed` for a ``grid_size`` other than its own."""
        table = self.weight
        if grid_size is not None and self.grid_size is not None:
            table = resize_pos_embed(table, self.grid_size, grid_size, self.num_prefix_tokens)
        if x.dim() != 3 or x.shape[1:] != table.shape[1:]:
            raise ValueError(
                f"expected tokens of shape (B, {table.shape[1]}, {self.dim}), got "
                f"{tuple(x.shape)}; for another grid, resample the table with resize_pos_embed"
            )
        return x + table


def _sincos(positions: Tensor, dim: int, temperature: float) -> Tensor:
    """``(P, dim)``: interleaved ``sin, cos`` of position × ``ω_i = temperature^(-2i/dim)``."""
    omega = temperature ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (dim/2,)
    angles = positions.to(torch.float64)[:, None] * omega  # (P, dim/2)
    codes = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (P, dim/2, 2)
    return rearrange(codes, "n k two -> n (k two)").float()  # even: sin, odd: cos


def sinusoidal_1d(num_positions: int, dim: int, temperature: float = 10000.0) -> Tensor:
    """The fixed code of Vaswani et al.: ``PE[p, 2i] = sin(p / 10000^(2i/D))``, cos in 2i + 1.

    A ``(num_positions, D)`` table, D even. Channel pair ``i`` turns at ``ω_i = 10000^(-2i/D)``
    (``temperature``: that 10000), the first pairs fastest along the sequence, the last slowest.

    Example:
        >>> sinusoidal_1d(3, 4)
        tensor([[ 0.0000,  1.0000,  0.0000,  1.0000],
                [ 0.8415,  0.5403,  0.0100,  0.9999],
                [ 0.9093, -0.4161,  0.0200,  0.9998]])
    """
    check_int("num_positions", num_positions), check_int("dim", dim)
    check_real("temperature", temperature, 0.0, low_open=True)
    if dim % 2:
        raise ValueError(f"sinusoidal_1d needs an even dim (sin and cos pairs), got dim={dim}")
    return _sincos(torch.arange(num_positions), dim, temperature)


def sinusoidal_2d(grid_size: IntOrPair, dim: int, temperature: float = 10000.0) -> Tensor:
    """A 2D sine/cosine code: channels ``[0, D/2)`` encode the row, ``[D/2, D)`` the column.

    A ``(Gh·Gw, D)`` table, row-major, for a grid ``G`` or ``(Gh, Gw)`` and D a multiple of 4.
    Each half is :func:`sinusoidal_1d` of width D/2, so two patches in the same row share the first
    half and two in the same column the second. timm's ``build_sincos2d_pos_embed`` and MAE's table
    hold the same channels in another order (sines before cosines; MAE's column half first).

    Example:
        >>> pe = sinusoidal_2d((14, 14), 768)
        >>> pe.shape, torch.equal(pe[0, :384], pe[5, :384])  # same row, same first half
        (torch.Size([196, 768]), True)
    """
    check_int("dim", dim), check_real("temperature", temperature, 0.0, low_open=True)
    return _sinusoidal_2d(grid_size, dim, temperature)


def _sinusoidal_2d(grid_size: IntOrPair, dim: int, temperature: float = 1e4) -> Tensor:
    """:func:`sinusoidal_2d` for an int ``dim`` and a checked ``temperature``."""
    if dim % 4:
        raise ValueError(
            f"sinusoidal_2d needs dim divisible by 4 (sin and cos for each of two axes), got "
            f"dim={dim}; the nearest valid values are {dim // 4 * 4} and {dim // 4 * 4 + 4}"
        )
    halves = [_sincos(c, dim // 2, temperature) for c in grid_coordinates(grid_size)]
    return torch.cat(halves, 1)  # (N, D/2) for the rows, then (N, D/2) for the columns


class SinusoidalEmbedding2D(nn.Module):
    """The fixed table of :func:`sinusoidal_2d`, added to the tokens; zeros for prefix tokens.

    Nothing is learned: the table is a non-persistent buffer (not in the state dict), recomputed
    for tokens of another grid; ``grid_size`` and ``dim`` are as for :func:`sinusoidal_2d`.

    Example:
        >>> pos = SinusoidalEmbedding2D(grid_size=14, dim=768, num_prefix_tokens=1)
        >>> pos.table.shape, pos(torch.zeros(2, 197, 768)).shape
        (torch.Size([1, 197, 768]), torch.Size([2, 197, 768]))
    """

    def __init__(self, grid_size: IntOrPair, dim: int, num_prefix_tokens: int = 0) -> None:
        check_int("dim", dim), check_int("num_prefix_tokens", num_prefix_tokens, 0)
        self._build(grid_size, dim, num_prefix_tokens)

    def _build(self, grid_size: IntOrPair, dim: int, num_prefix_tokens: int) -> None:
        super().__init__()
        self.grid_size, self.dim = pair(grid_size, "grid_size"), dim
        self.num_prefix_tokens = num_prefix_tokens
        self.register_buffer("table", self._table(self.grid_size), persistent=False)

    def _table(self, grid_size: IntOrPair) -> Tensor:
        """The ``(1, T, D)`` table for ``grid_size``, zeros for the prefix tokens."""
        table = _sinusoidal_2d(grid_size, self.dim)  # (N, D)
        return torch.cat([table.new_zeros(self.num_prefix_tokens, self.dim), table])[None]

    def forward(self, x: Tensor, grid_size: IntOrPair | None = None) -> Tensor:
        """``x + table`` for tokens ``(B, T, D)`` on ``grid_size`` (default: its own)."""
        table = self.table
        if grid_size is not None and pair(grid_size, "grid_size") != self.grid_size:
            table = self._table(grid_size)
        if x.dim() != 3 or x.shape[1:] != table.shape[1:]:
            raise ValueError(
                f"expected tokens of shape (B, {table.shape[1]}, {self.dim}), got {tuple(x.shape)}"
            )
        return x + table.to(x)


class RelativePositionBias(nn.Module):
    """A learned attention bias per head, indexed by the 2D offset between two patches.

    Patches at ``(r, c)`` and ``(r', c')`` of a grid ``G`` or ``(Gh, Gw)`` get the ``table`` entry
    (chapter 3's β) of their offset ``(r - r', c - c')``, one of ``(2Gh - 1)(2Gw - 1)`` per head
    (BEiT; Swin's spans a window, not the grid); prefix tokens (class token, registers) add three,
    as in BEiT: patch → prefix, prefix → patch, prefix → prefix. The table starts from a normal of
    std 0.02 truncated at ±2 std, ±0.04 (std about 0.0176, as
    :func:`~vit_tutorial.encoder.init_weights`; BEiT: zeros). Swin's
    :class:`~vit_tutorial.windows.WindowAttention` builds it with ``bound=2.0``: timm's and
    torchvision's ``trunc_normal_(std=.02)``, whose bounds ±2 cut nothing.

    Example:
        >>> rpb = RelativePositionBias(grid_size=14, num_heads=12, num_prefix_tokens=1)
        >>> rpb.table.shape, rpb().shape
        (torch.Size([732, 12]), torch.Size([12, 197, 197]))
    """

    def __init__(self, grid_size: IntOrPair, num_heads: int, num_prefix_tokens: int = 0) -> None:
        if min(grid := pair(grid_size, "grid_size")) < 1:
            raise ValueError(f"need a positive grid, got grid {grid}, num_heads={num_heads}")
        check_int("num_heads", num_heads), check_int("num_prefix_tokens", num_prefix_tokens, 0)
        self._build(grid_size, num_heads, num_prefix_tokens)

    def _build(self, grid_size: IntOrPair, num_heads: int, p: int, bound: float = 0.04) -> None:
        super().__init__()
        gh, gw = self.grid_size = pair(grid_size, "grid_size")
        self.num_heads, self.num_prefix_tokens = num_heads, p
        num_offsets = (2 * gh - 1) * (2 * gw - 1)  # and 3 for prefix tokens
        self.table = nn.Parameter(torch.empty(num_offsets + (3 if p else 0), num_heads))
        nn.init.trunc_normal_(self.table, std=0.02, a=-bound, b=bound)
        coords = torch.stack(grid_coordinates((gh, gw)))  # (2, Gh·Gw): row, column
        offset = coords[:, :, None] - coords[:, None, :]  # (2, Gh·Gw, Gh·Gw): query - key
        grid_index = (offset[0] + gh - 1) * (2 * gw - 1) + (offset[1] + gw - 1)
        index = F.pad(grid_index, (p, 0, p, 0), value=num_offsets + 1)  # (T, T): patch -> prefix
        index[:p, p:] = num_offsets  # prefix -> patch
        index[:p, :p] = num_offsets + 2  # prefix -> prefix
        self.register_buffer("index", index, persistent=False)

    def forward(self) -> Tensor:
        """The bias of shape ``(h, T, T)`` with ``T = num_prefix_tokens + Gh·Gw``."""
        return rearrange(self.table[self.index], "n m h -> h n m")


def resize_pos_embed(
    pos_embed: Tensor, old_grid: IntOrPair, new_grid: IntOrPair, num_prefix_tokens: int = 1
) -> Tensor:
    """Resample a learned position table ``(1, num_prefix_tokens + Gh·Gw, D)`` to a new grid.

    Bicubic with antialiasing, like timm's ``resample_abs_pos_embed`` and DeiT (the reference ViT
    code: linear, ``scipy.ndimage.zoom(..., order=1)``). From ``old_grid`` ``(Gh, Gw)`` to
    ``new_grid`` ``(Gh', Gw')`` (if equal: ``pos_embed``), the first ``num_prefix_tokens`` copied.

    Example:
        >>> resize_pos_embed(torch.zeros(1, 197, 8), 14, (16, 20)).shape
        torch.Size([1, 321, 8])
    """
    (gh, gw), new = pair(old_grid, "old_grid"), pair(new_grid, "new_grid")
    check_int("num_prefix_tokens", num_prefix_tokens, 0)
    if min(gh, gw, *new) < 1:
        raise ValueError(f"grids must be positive, got old_grid {(gh, gw)} and new_grid {new}")
    if pos_embed.dim() != 3 or pos_embed.shape[1] != num_prefix_tokens + gh * gw:
        raise ValueError(
            f"pos_embed of shape {tuple(pos_embed.shape)} does not match old_grid {(gh, gw)} with "
            f"{num_prefix_tokens} prefix tokens: expected (1, {num_prefix_tokens + gh * gw}, D)"
        )
    if (gh, gw) == new:
        return pos_embed
    prefix, grid = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    grid = rearrange(grid, "b (gh gw) d -> b d gh gw", gh=gh)  # (B, D, Gh, Gw)
    grid = F.interpolate(
        grid.float(), size=new, mode="bicubic", antialias=True, align_corners=False
    ).to(pos_embed.dtype)
    return torch.cat([prefix, rearrange(grid, "b d gh gw -> b (gh gw) d")], dim=1)


class RotaryEmbedding2D(nn.Module):
    """2D rotary position embedding for queries and keys (RoPE-ViT, Heo et al. 2024).

    Channel pair ``j`` of a query or key at grid column ``x`` and row ``y`` is rotated by
    ``x·fx_j + y·fy_j``; rotations compose, so ``q·k`` depends only on the two patches' offset.
    Prefix tokens (the class token) stay unrotated. Call it on queries or keys ``(B, h, T, d)``,
    e.g. through ``attn(x, rope=rope)`` of :class:`~vit_tutorial.attention.MultiHeadSelfAttention`.

    Args:
        head_dim, num_heads: d, a multiple of 4, and h, for the per-head frequencies of "mixed".
        grid_size, num_prefix_tokens: ``G`` or ``(Gh, Gw)``, and the tokens before the grid.
        temperature: the frequencies' base; ``None`` picks 100 (axial) or 10 (mixed), as Heo et al.
        mode: ``"axial"``: fixed frequencies; the first ``d/4`` pairs turn with the column, the
            last ``d/4`` with the row, at ``temperature^(-4j/d)``. ``"mixed"``: learned per head
            (parameter ``freqs``), initialised with the axial magnitudes along two perpendicular
            directions at a random angle per head, so one pair can encode a diagonal.

    Example:
        >>> rope = RotaryEmbedding2D(head_dim=64, grid_size=14, num_prefix_tokens=1)
        >>> q = torch.randn(2, 12, 197, 64)
        >>> rope(q).shape, torch.equal(rope(q)[:, :, 0], q[:, :, 0])
        (torch.Size([2, 12, 197, 64]), True)
    """

    def __init__(
        self,
        head_dim: int,
        grid_size: IntOrPair,
        num_prefix_tokens: int = 0,
        temperature: float | None = None,
        mode: str = "axial",
        num_heads: int = 1,
    ) -> None:
        super().__init__()
        if mode not in ("axial", "mixed"):
            raise ValueError(f"mode must be 'axial' or 'mixed', got {mode!r}")
        check_int("head_dim", head_dim), check_int("num_heads", num_heads)
        check_int("num_prefix_tokens", num_prefix_tokens, 0)
        if head_dim % 4:
            raise ValueError(f"RotaryEmbedding2D needs head_dim divisible by 4, got {head_dim}")
        grid_coordinates(grid_size)  # ValueError unless the grid is positive
        if temperature is not None:
            check_real("temperature", temperature, 0.0, low_open=True)
        self.head_dim, self.grid_size, self.mode = head_dim, pair(grid_size, "grid_size"), mode
        self.num_prefix_tokens, self.num_heads = num_prefix_tokens, num_heads
        self.temperature = temperature or (100.0 if mode == "axial" else 10.0)
        mag = self.temperature ** (-torch.arange(0, head_dim, 4) / head_dim)  # (d/4,)
        if mode == "axial":  # freqs (2, 1, d/2): fx = (mag, 0), fy = (0, mag)
            self.register_buffer("freqs", torch.block_diag(mag, mag)[:, None], persistent=False)
        else:
            theta = torch.rand(num_heads, 1) * 2 * math.pi  # one direction per head
            fx = torch.cat([mag * theta.cos(), mag * (theta + math.pi / 2).cos()], -1)
            fy = torch.cat([mag * theta.sin(), mag * (theta + math.pi / 2).sin()], -1)
            self.freqs = nn.Parameter(torch.stack([fx, fy]))  # (2, h, d/2)

    def angles(self, grid_size: IntOrPair | None = None) -> Tensor:
        """Rotation angles of shape ``(1 or h, Gh·Gw, d/2)``, grid positions row-major."""
        grid = self.grid_size if grid_size is None else grid_size
        y, x = (c.float() for c in grid_coordinates(grid, self.freqs.device))  # row, column
        return x[:, None] * self.freqs[0][:, None] + y[:, None] * self.freqs[1][:, None]

    def forward(self, x: Tensor, grid_size: IntOrPair | None = None) -> Tensor:
        """Rotate ``x`` of shape ``(B, h, T, d)``; ``grid_size`` overrides the built-in grid."""
        gh, gw = pair(grid_size, "grid_size") if grid_size is not None else self.grid_size
        p = self.num_prefix_tokens
        if x.dim() != 4 or x.shape[-1] != self.head_dim or x.shape[-2] != p + gh * gw:
            raise ValueError(
                f"expected queries or keys of shape (B, h, {p + gh * gw}, {self.head_dim}) for "
                f"grid {(gh, gw)} with {p} prefix tokens, got {tuple(x.shape)}"
            )
        if self.mode == "mixed" and x.shape[1] != self.num_heads:
            raise ValueError(f"mixed RoPE was built for {self.num_heads} heads, got {x.shape[1]}")
        angles = self.angles((gh, gw))  # (1 or h, Gh·Gw, d/2)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        x0, x1 = rearrange(x[..., p:, :], "... (j two) -> two ... j", two=2)  # pairs (2j, 2j+1)
        rotated = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
        rotated = rearrange(rotated, "... j two -> ... (j two)")  # (B, h, Gh·Gw, d)
        return torch.cat([x[..., :p, :], rotated], dim=-2)
