"""Attention in windows: the layers of Swin Transformer (chapter 10).

Swin (Liu et al. 2021) attends within M×M windows (W-MSA, Section 3.2), shifts the windows by
M/2 in every second block so that information crosses their borders (SW-MSA: a cyclic
``torch.roll`` and a mask for the wrapped regions), adds a relative position bias of
``(2M-1)²`` offsets per head, and halves the grid between stages by :class:`PatchMerging`;
:mod:`vit_tutorial.swin` builds the model from these layers.

Tokens stay channels-last ``(B, H, W, C)`` on a grid between blocks; in a window they are
row-major. A grid that the window does not divide is padded with zeros on the right and the
bottom *before* the shift, as torchvision's ``shifted_window_attention``
(``torchvision/models/swin_transformer.py``) does; the padded tokens attend and are attended to,
unmasked, and nothing is shifted along an axis the window covers. (The official classification
code, ``models/swin_transformer.py`` of microsoft/Swin-Transformer, and timm shrink the window
to a grid smaller than it instead; :mod:`vit_tutorial.swin_interop` says where timm differs.)
Shapes: B batch, H×W grid, C width, M window, N = M² tokens of a window, nW windows per image,
h heads.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from vit_tutorial.attention import MultiHeadSelfAttention, Rope, attention_weights, check_heads
from vit_tutorial.encoder import BlockOptions, DropPath
from vit_tutorial.patches import IntOrPair
from vit_tutorial.positional import RelativePositionBias
from vit_tutorial.validate import check_bool, check_int, check_real, trusted

__all__ = [
    "window_partition",
    "window_reverse",
    "relative_position_index",
    "shifted_window_mask",
    "block_diagonal_mask",
    "WindowAttention",
    "SwinBlock",
    "PatchMerging",
]


def _check_tiling(height: int, width: int, window_size: int, shift_size: IntOrPair = 0) -> tuple:
    """``(H, W, M, s_h, s_w)`` as ints, checked before einops sees them (it caches a float's
    recipe): M divides H and W; ``shift_size`` ``s`` or ``(s_h, s_w)``, ``0 <= s < M``."""
    H, W = check_int("height", height), check_int("width", width)
    M = check_int("window_size", window_size)
    if H % M or W % M:
        raise ValueError(
            f"the grid H×W = {H}×{W} is not divisible by the window size M = {M}; "
            f"pad it to {-(-H // M) * M}×{-(-W // M) * M} first"
        )
    two = isinstance(shift_size, (tuple, list)) and len(shift_size) == 2
    sh, sw = (check_int("shift_size", s, 0) for s in (shift_size if two else [shift_size] * 2))
    if sh >= M or sw >= M:
        raise ValueError(f"shift_size must be in [0, {M}) (below window_size), got {(sh, sw)}")
    return H, W, M, sh, sw


def window_partition(x: Tensor, window_size: int) -> Tensor:
    """Cut a grid ``(B, H, W, C)`` into M×M windows ``(B·nW, M·M, C)``: the windows of each
    image in row-major order of the window grid, the tokens row-major inside each window.

    Example:
        >>> grid = torch.arange(16.0).view(1, 4, 4, 1)  # token t at row t // 4, column t % 4
        >>> window_partition(grid, 2)[..., 0]
        tensor([[ 0.,  1.,  4.,  5.],
                [ 2.,  3.,  6.,  7.],
                [ 8.,  9., 12., 13.],
                [10., 11., 14., 15.]])
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a grid tensor (B, H, W, C), got {type(x).__name__}")
    if x.dim() != 4:
        raise ValueError(f"expected a grid (B, H, W, C), got {x.dim()}-D {tuple(x.shape)}")
    M = _check_tiling(x.shape[1], x.shape[2], window_size)[2]
    # (B, nh·M, nw·M, C) -> (B·nh·nw, M·M, C)
    return rearrange(x, "b (nh m1) (nw m2) c -> (b nh nw) (m1 m2) c", m1=M, m2=M)


def window_reverse(windows: Tensor, window_size: int, height: int, width: int) -> Tensor:
    """The inverse of :func:`window_partition`: windows ``(B·nW, M·M, C)`` to ``(B, H, W, C)``.

    Example:
        >>> x = torch.randn(2, 6, 4, 3)
        >>> torch.equal(window_reverse(window_partition(x, 2), 2, 6, 4), x)
        True
    """
    H, W, M = _check_tiling(height, width, window_size)[:3]
    if not isinstance(windows, Tensor):
        raise TypeError(f"windows must be a tensor (B·nW, M·M, C), got {type(windows).__name__}")
    nh, nw = H // M, W // M
    if windows.dim() != 3 or windows.shape[1] != M * M or windows.shape[0] % (nh * nw):
        raise ValueError(
            f"windows of shape {tuple(windows.shape)} do not tile a {H}×{W} grid with "
            f"M = {M}: expected (B·{nh * nw}, {M * M}, C)"
        )
    # (B·nh·nw, M·M, C) -> (B, nh·M, nw·M, C)
    return rearrange(windows, "(b nh nw) (m1 m2) c -> b (nh m1) (nw m2) c", nh=nh, nw=nw, m1=M)


def relative_position_index(window_size: int) -> Tensor:
    """The paper's index into the table ``B̂`` of ``(2M-1)²`` offsets (Section 3.2, "Relative
    position bias"): entry ``(i, j)`` of ``(M², M²)`` is ``(Δr + M-1)(2M-1) + (Δc + M-1)`` for the
    offset ``Δ`` of query ``i`` from key ``j`` (timm's ``get_relative_position_index``). It is
    :class:`~vit_tutorial.positional.RelativePositionBias`'s index for a grid of one window.

    Example:
        >>> relative_position_index(2)  # 4 tokens, offsets (Δr, Δc) in {-1, 0, 1}²: 9 entries
        tensor([[4, 3, 1, 0],
                [5, 4, 2, 1],
                [7, 6, 4, 3],
                [8, 7, 5, 4]])
    """
    M = check_int("window_size", window_size)
    r, c = torch.arange(M * M).div(M, rounding_mode="floor"), torch.arange(M * M) % M
    dr, dc = r[:, None] - r[None, :], c[:, None] - c[None, :]  # (M², M²): query - key
    return (dr + M - 1) * (2 * M - 1) + (dc + M - 1)


def shifted_window_mask(height: int, width: int, window_size: int, shift_size: IntOrPair) -> Tensor:
    """Which token of a window may attend to which after the cyclic shift: ``(nW, M², M²)``.

    Shifting the grid up and left by ``s`` wraps the first ``s`` rows and columns to the bottom
    and right; a window there holds tokens from up to four regions that were not neighbours.
    Along each axis, tokens before and from ``H - s`` (``W - s``) are apart, as the regions of
    the official code's ``img_mask`` (three slices per axis; only this border falls inside a
    window). ``True`` where query ``i`` and key ``j`` share a region. ``shift_size`` ``s`` or
    ``(s_h, s_w)``, ``0 <= s < M``; without a shift every entry is ``True``.

    Example:
        >>> mask = shifted_window_mask(4, 4, 2, 1)  # four windows, the last three wrapped
        >>> mask.shape, [int(m.sum()) for m in mask]  # pairs allowed of 4 × 4
        (torch.Size([4, 4, 4]), [16, 8, 8, 4])
    """
    H, W, M, sh, sw = _check_tiling(height, width, window_size, shift_size)
    rows = (torch.arange(H) >= H - sh).long()  # 1 for the wrapped rows
    cols = (torch.arange(W) >= W - sw).long()
    region = (2 * rows[:, None] + cols[None, :]).view(1, H, W, 1)  # (1, H, W, 1)
    region = window_partition(region, M)[..., 0]  # (nW, M²)
    return region[:, :, None] == region[:, None, :]  # (nW, M², M²)


def block_diagonal_mask(
    height: int, width: int, window_size: int, shift_size: IntOrPair = 0
) -> Tensor:
    """Window attention as a mask of full attention ``(HW, HW)``, tokens in row-major order of
    the grid (not of the windows): ``True`` where two tokens attend to each other. Without a
    shift, exactly when they share a window; with one, when they share a shifted window and a
    region of :func:`shifted_window_mask`.

    Example:
        >>> block_diagonal_mask(2, 4, 2)[0].int()  # token (0, 0) sees its 2×2 window
        tensor([1, 1, 0, 0, 1, 1, 0, 0], dtype=torch.int32)
    """
    H, W, M, sh, sw = _check_tiling(height, width, window_size, shift_size)
    windowed = shifted_window_mask(H, W, M, (sh, sw))
    token = torch.arange(H * W).view(1, H, W, 1)  # grid position of each token
    token = window_partition(torch.roll(token, (-sh, -sw), (1, 2)), M)[..., 0]
    full = torch.zeros(H * W, H * W, dtype=torch.bool)
    full[token[:, :, None], token[:, None, :]] = windowed  # (nW, M², M²) into (HW, HW)
    return full


class WindowAttention(MultiHeadSelfAttention):
    """Multi-head self-attention inside each window, with Swin's relative position bias.

    A :class:`~vit_tutorial.attention.MultiHeadSelfAttention` (fast and teaching path, ``qkv``,
    ``proj``, ``forward(x, attn_bias)``; no ``rope``) over windows ``(B·nW, N, D)``, whose scores
    get the bias of a :class:`~vit_tutorial.positional.RelativePositionBias` over one M×M window,
    ``(2M-1)²`` offsets per head (std 0.02 cut at ±2, which cuts nothing, as timm's and
    torchvision's), and ``attn_bias``, one mask ``(nW, N, N)`` for every image's windows:
    ``-inf`` where a boolean one is ``False``, or added. The references add ``-100``
    (``masked_fill(attn_mask != 0, -100.0)``): the same softmax in float32 to about ``e^-100``.
    With a mask, the windows fold into the head axis, ``(B, nW·h, N, d)``: the bias ``(1, nW·h, N,
    N)`` broadcasts over the images, with no ``(B·nW, h, N, N)`` copy, into the fused kernel.

    Example:
        >>> attn = WindowAttention(dim=32, window_size=4, num_heads=2)
        >>> attn.relative_position_bias.table.shape  # (2·4 - 1)² offsets, 2 heads
        torch.Size([49, 2])
        >>> windows, mask = torch.randn(8, 16, 32), shifted_window_mask(8, 8, 4, 2)  # 2 images
        >>> out, weights = attn.forward_with_weights(windows, mask)  # the teaching path
        >>> out.shape, weights.shape, torch.allclose(attn(windows, mask), out, atol=1e-6)
        (torch.Size([8, 16, 32]), torch.Size([8, 2, 16, 16]), True)
    """

    def __init__(self, dim: int, window_size: int, num_heads: int, qkv_bias: bool = True) -> None:
        check_heads(dim, num_heads), check_bool("qkv_bias", qkv_bias)
        self._build(dim, check_int("window_size", window_size), num_heads, qkv_bias)

    def _build(self, dim: int, window_size: int, num_heads: int, qkv_bias: bool = True) -> None:
        super()._build(dim, num_heads, qkv_bias, 0.0, 0.0)
        self.window_size = window_size
        rpb = trusted(RelativePositionBias, window_size, num_heads, 0, bound=2.0)  # as timm's
        self.relative_position_bias = rpb

    def forward(
        self, x: Tensor, attn_bias: Tensor | None = None, rope: Rope | None = None
    ) -> Tensor:
        """Windows ``(B·nW, N, D)`` in and out; ``attn_bias``, the mask ``(nW, N, N)``, optional."""
        if not self.fused:
            return self.forward_with_weights(x, attn_bias, rope)[0]
        bias = self._bias(x, attn_bias, rope)  # (1, h, N, N) or (1, nW·h, N, N)
        if attn_bias is None:  # (1, h, N, N) broadcasts over the windows
            return super().forward(x, bias)
        q, k, v = self._fold(x, bias.shape[1] // self.num_heads)  # (B, nW·h, N, d)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype))
        del q, k, v  # freed before the projection
        return self._unfold(out)

    def forward_with_weights(
        self, x: Tensor, attn_bias: Tensor | None = None, rope: Rope | None = None
    ) -> tuple[Tensor, Tensor]:
        """:meth:`forward` on the teaching path, and the weights ``(B·nW, h, N, N)``."""
        bias = self._bias(x, attn_bias, rope)
        if attn_bias is None:
            return super().forward_with_weights(x, bias)
        q, k, v = self._fold(x, bias.shape[1] // self.num_heads)
        weights = attention_weights(q, k, bias)  # (B, nW·h, N, N)
        out = self._unfold(self.attn_dropout(weights) @ v)
        return out, weights.view(x.shape[0], self.num_heads, *weights.shape[2:])

    def _bias(self, x: Tensor, attn_bias: Tensor | None, rope: Rope | None) -> Tensor:
        """The scores' additive bias: ``(1, h, N, N)``, or ``(1, nW·h, N, N)`` with a mask."""
        N = self.window_size**2
        if rope is not None:
            raise ValueError(f"WindowAttention takes no rope (its relative bias), got {rope!r}")
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[1:] != (N, self.dim):
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"expected windows (B·nW, {N}, {self.dim}), got {got}")
        bias = self.relative_position_bias()  # (h, N, N)
        if attn_bias is None:
            return bias[None]
        mask, kind = attn_bias, getattr(attn_bias, "dtype", None)
        if not isinstance(mask, Tensor) or not (kind == torch.bool or kind.is_floating_point):
            got = kind if isinstance(mask, Tensor) else type(mask).__name__
            raise TypeError(f"attn_bias must be bool (True = may attend) or float, got {got}")
        nW = mask.shape[0] if mask.dim() == 3 and mask.shape[1:] == (N, N) else 0
        if not nW or x.shape[0] % nW:
            raise ValueError(
                f"attn_bias must be a mask (nW, {N}, {N}), nW dividing the {x.shape[0]} windows "
                f"(B·nW) of x, got {tuple(mask.shape)}"
            )
        mask = mask.to(bias.device)[:, None]  # (nW, 1, N, N)
        bias = torch.where(mask, bias, float("-inf")) if mask.dtype == torch.bool else bias + mask
        return bias.flatten(0, 1)[None]  # (nW, h, N, N) -> (1, nW·h, N, N)

    def _fold(self, x: Tensor, nW: int) -> list[Tensor]:
        """q, k, v ``(B, nW·h, N, d)`` of windows ``(B·nW, N, D)``: projected one at a time from
        ``(B, N, nW, D)``, window and head lie adjacent (in one ``qkv`` output, 3 parts apart)."""
        hW, d = nW * self.num_heads, self.head_dim
        x = x.unflatten(0, (x.shape[0] // nW, nW)).transpose(1, 2).contiguous()  # (B, N, nW, D)
        biases = (None,) * 3 if self.qkv.bias is None else self.qkv.bias.chunk(3)
        heads = [F.linear(x, w, b) for w, b in zip(self.qkv.weight.chunk(3), biases)]
        return [t.view(*t.shape[:2], hW, d).transpose(1, 2) for t in heads]  # (B, nW·h, N, d)

    def _unfold(self, out: Tensor) -> Tensor:
        """Merge the heads of ``(B, nW·h, N, d)`` and project: windows ``(B·nW, N, D)``."""
        out = out.transpose(1, 2).unflatten(2, (-1, self.num_heads)).flatten(3)  # (B, N, nW, D)
        return self.proj_dropout(self.proj(out)).transpose(1, 2).flatten(0, 1)  # (B·nW, N, D)


def _check_grid(x: Tensor, dim: int) -> None:
    if not isinstance(x, Tensor) or x.dim() != 4 or x.shape[-1] != dim:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"expected a grid of tokens (B, H, W, {dim}), got {got}")


class SwinBlock(nn.Module):
    """A Swin Transformer block (Figure 3b): pre-norm (S)W-MSA and MLP, each in a residual branch.

    Attention pads the grid ``(B, H, W, C)`` to a multiple of M, rolls it up and left by the
    shift, attends in windows under :func:`shifted_window_mask`, reverses the windows, rolls back
    and crops. Along an axis the window covers (padded size ``<= M``) nothing is shifted, as in
    timm and torchvision. ``shift_size`` 0 is W-MSA, ``M // 2`` SW-MSA. ``qkv_bias`` and
    ``norm_eps`` (PyTorch's 1e-5, as both references) are those of
    :class:`~vit_tutorial.encoder.BlockOptions`; Swin's blocks have no dropout.

    Example:
        >>> block = SwinBlock(dim=32, num_heads=2, window_size=4, shift_size=2)
        >>> block(torch.randn(2, 8, 12, 32)).shape
        torch.Size([2, 8, 12, 32])
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        window_size: int = 7,
        shift_size: int = 0,
        mlp_ratio: float = 4.0,
        drop_path: float = 0.0,
        *,
        qkv_bias: bool = True,
        norm_eps: float = 1e-5,
    ) -> None:
        o = BlockOptions(dim, num_heads, mlp_ratio, qkv_bias, norm_eps=norm_eps)  # checks them
        M, s = check_int("window_size", window_size), check_int("shift_size", shift_size, 0)
        if s >= M:
            raise ValueError(f"shift_size must be below window_size {M}, got {s}")
        check_real("drop_path", drop_path, 0.0, 1.0, high_open=True)
        self._build(o, M, s, drop_path)

    def _build(self, o: BlockOptions, window_size: int, shift_size: int, drop_path: float) -> None:
        super().__init__()
        self.dim, self.window_size, self.shift_size = o.dim, window_size, shift_size
        self.norm1 = nn.LayerNorm(o.dim, eps=o.norm_eps)
        self.attn = trusted(WindowAttention, o.dim, window_size, o.num_heads, o.qkv_bias)
        self.drop_path1 = trusted(DropPath, drop_path)
        self.norm2 = nn.LayerNorm(o.dim, eps=o.norm_eps)
        self.mlp = o.feed_forward()
        self.drop_path2 = trusted(DropPath, drop_path)

    def shifts(self, height: int, width: int) -> tuple[int, int]:
        """The shift ``(s_h, s_w)`` on a grid ``height × width``: 0 where the window covers it."""
        M = self.window_size
        return tuple(0 if -(-n // M) * M <= M else self.shift_size for n in (height, width))

    def forward(self, x: Tensor) -> Tensor:
        """A grid of tokens ``(B, H, W, C)`` in, the same shape out."""
        _check_grid(x, self.dim)
        x = x + self.drop_path1(self._attend(self.norm1(x)))
        return x + self.drop_path2(self.mlp(self.norm2(x)))

    def forward_with_weights(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`forward` on the teaching path, and the weights of every token on the grid.

        Returns:
            ``(out, maps)``: ``out`` ``(B, H, W, C)`` as :meth:`forward`'s; ``maps`` dense ``(B,
            h, H·W, H·W)``, tokens in row-major order of the grid (rows queries, columns keys),
            zero outside a token's (shifted) window, the shift undone, the padding's rows and
            columns dropped: a row sums to less than 1 where its window held padding.
        """
        _check_grid(x, self.dim)
        out, weights = self.attn.forward_with_weights(*self._windows(self.norm1(x)))
        x = x + self.drop_path1(self._grid(out, x.shape))
        return x + self.drop_path2(self.mlp(self.norm2(x))), self._maps(weights, x.shape)

    def _attend(self, x: Tensor) -> Tensor:
        """(S)W-MSA on a grid ``(B, H, W, C)``."""
        return self._grid(self.attn(*self._windows(x)), x.shape)

    def _windows(self, x: Tensor) -> tuple[Tensor, Tensor | None]:
        """Pad, roll and partition a grid ``(B, H, W, C)``: the windows and the shift's mask."""
        (H, W), M = x.shape[1:3], self.window_size
        x = F.pad(x, (0, 0, 0, -W % M, 0, -H % M))  # (B, Hp, Wp, C): zeros right and below
        sh, sw = self.shifts(H, W)
        mask = shifted_window_mask(*x.shape[1:3], M, (sh, sw)) if sh or sw else None
        x = torch.roll(x, (-sh, -sw), dims=(1, 2))  # the first rows and columns wrap around
        return window_partition(x, M), mask  # (B·nW, M², C), (nW, M², M²) or None

    def _grid(self, windows: Tensor, shape: torch.Size) -> Tensor:
        """Reverse, roll back, crop: windows to the grid ``shape`` ``(B, H, W, C)``."""
        (H, W), M = shape[1:3], self.window_size
        x = window_reverse(windows, M, -(-H // M) * M, -(-W // M) * M)  # (B, Hp, Wp, C)
        return torch.roll(x, self.shifts(H, W), dims=(1, 2))[:, :H, :W]

    def _maps(self, weights: Tensor, shape: torch.Size) -> Tensor:
        """Weights ``(B·nW, h, M², M²)`` on the grid ``shape``: ``(B, h, H·W, H·W)``."""
        B, H, W, _ = shape
        token = torch.arange(1, H * W + 1, device=weights.device).view(1, H, W, 1)  # 0: padding
        token = self._windows(token)[0][..., 0]  # (nW, M²): each window's tokens, as the grid's
        maps = weights.new_zeros(B, weights.shape[1], H * W + 1, H * W + 1)
        by_image = weights.unflatten(0, (B, len(token))).transpose(1, 2)  # (B, h, nW, M², M²)
        maps[:, :, token[:, :, None], token[:, None, :]] = by_image
        return maps[:, :, 1:, 1:]  # the padding's row and column dropped


class PatchMerging(nn.Module):
    """Halve the grid, double the width: ``(B, H, W, C) -> (B, ⌈H/2⌉, ⌈W/2⌉, 2C)`` (Section 3.1).

    Each 2×2 neighbourhood (a zero row or column added to an odd grid) is concatenated into
    ``4C`` channels, normalised and projected by a Linear layer without bias, in the official
    code's order, both references' (torchvision's ``_patch_merging_pad``: ``x[0::2, 0::2]``,
    ``x[1::2, 0::2]``, ``x[0::2, 1::2]``, ``x[1::2, 1::2]``): column offset outer, row inner.

    Example:
        >>> PatchMerging(dim=16)(torch.randn(2, 7, 8, 16)).shape
        torch.Size([2, 4, 4, 32])
    """

    def __init__(self, dim: int, norm_eps: float = 1e-5) -> None:
        self._build(check_int("dim", dim), check_real("norm_eps", norm_eps, 0.0, low_open=True))

    def _build(self, dim: int, norm_eps: float = 1e-5) -> None:
        super().__init__()
        self.dim = dim
        self.norm = nn.LayerNorm(4 * dim, eps=norm_eps)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, H, W, C) -> (B, ⌈H/2⌉, ⌈W/2⌉, 2C)``."""
        _check_grid(x, self.dim)
        x = F.pad(x, (0, 0, 0, x.shape[2] % 2, 0, x.shape[1] % 2))  # even H and W
        x = rearrange(x, "b (h dr) (w dc) c -> b h w (dc dr c)", dr=2, dc=2)  # (B, H/2, W/2, 4C)
        return self.reduction(self.norm(x))
