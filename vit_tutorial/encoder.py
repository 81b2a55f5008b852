"""The Transformer encoder block and the stack of blocks (chapter 4).

One block of ViT is two residual branches, each behind a LayerNorm ("pre-norm"):

.. code-block:: text

    x = x + DropPath(Attention(LN(x)))
    x = x + DropPath(MLP(LN(x)))

:class:`EncoderBlock` also offers the original post-norm arrangement of Vaswani et al.
(``norm_first=False``, ``x = LN(x + Attention(x))``) so the two can be compared; the
:class:`Encoder` stacks pre-norm blocks with a stochastic-depth rate rising linearly
from 0 in the first block to ``drop_path`` in the last, as in DeiT and timm.

Parameter names follow timm (``norm1``, ``attn.qkv``, ``mlp.fc1`` ...), so its checkpoints
map onto these modules one to one. Shapes: B batch, N tokens, D model width, h heads.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from vit_tutorial.attention import MultiHeadSelfAttention

__all__ = ["MLP", "DropPath", "drop_path", "EncoderBlock", "Encoder"]


class MLP(nn.Module):
    """The position-wise feed-forward network: Linear, GELU, dropout, Linear, dropout.

    Args:
        dim: model width D (input and output).
        hidden_dim: width of the hidden layer, ``mlp_ratio · D`` in ViT (3072 for D = 768).
        dropout: dropout after the activation and after the second layer.

    Example:
        >>> MLP(dim=8, hidden_dim=32)(torch.randn(2, 5, 8)).shape
        torch.Size([2, 5, 8])
    """

    def __init__(self, dim: int, hidden_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = nn.GELU()  # the exact GELU x·Φ(x), as in ViT, timm and torchvision
        self.drop1 = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden_dim, dim)
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """``(..., D) -> (..., D)``, the same map applied to every token."""
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))


def drop_path(x: Tensor, p: float, training: bool) -> Tensor:
    """Stochastic depth: zero the whole sample with probability ``p``, else scale by 1/(1-p).

    Unlike dropout, which zeroes single numbers, one coin is tossed per sample (per row of
    the batch), so a dropped sample skips the residual branch entirely. The scaling keeps
    the expected value unchanged; at evaluation (``training=False``) it is the identity.

    Args:
        x: the output of a residual branch, shape ``(B, ...)``.
        p: probability of dropping, in ``[0, 1)``.
        training: apply only when ``True``.

    Example:
        >>> x = torch.ones(4, 3)
        >>> torch.equal(drop_path(x, 0.5, training=False), x)
        True
        >>> sorted(set(drop_path(x, 0.5, training=True).flatten().tolist())) in ([0.0, 2.0], [0.0], [2.0])
        True
    """
    if p == 0.0 or not training:
        return x
    keep = 1.0 - p
    mask = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(keep)  # (B, 1, ..., 1)
    return x * mask / keep


class DropPath(nn.Module):
    """:func:`drop_path` as a module, active in ``train()`` mode only.

    Args:
        p: probability of dropping a sample's residual branch, in ``[0, 1)``.
    """

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"drop path probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        """Drop whole samples of ``x`` (shape ``(B, ...)``) with probability ``p``."""
        return drop_path(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class EncoderBlock(nn.Module):
    """One Transformer encoder block: attention and MLP, each in a residual branch.

    Args:
        dim: model width D.
        num_heads: attention heads h.
        mlp_ratio: MLP hidden width as a multiple of D.
        qkv_bias: bias in the query/key/value projection.
        dropout: dropout after the attention projection and inside the MLP.
        attn_dropout: dropout on the attention weights.
        drop_path: stochastic-depth probability of each residual branch.
        norm_eps: the LayerNorm epsilon (1e-6 in ViT, timm and torchvision).
        norm_first: ``True`` (the default, ViT) puts LayerNorm before each branch
            ("pre-norm"); ``False`` puts it after each residual sum ("post-norm", the
            original Transformer), for comparison.

    Example:
        >>> block = EncoderBlock(dim=64, num_heads=4)
        >>> out, weights = block(torch.randn(2, 10, 64), return_attention=True)
        >>> out.shape, weights.shape
        (torch.Size([2, 10, 64]), torch.Size([2, 4, 10, 10]))
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        drop_path: float = 0.0,
        norm_eps: float = 1e-6,
        norm_first: bool = True,
    ) -> None:
        super().__init__()
        if mlp_ratio <= 0:
            raise ValueError(f"mlp_ratio must be positive, got {mlp_ratio}")
        self.norm_first = norm_first
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = MultiHeadSelfAttention(dim, num_heads, qkv_bias, attn_dropout, dropout)
        self.drop_path1 = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = MLP(dim, int(dim * mlp_ratio), dropout)
        self.drop_path2 = DropPath(drop_path)

    def _attend(
        self, x: Tensor, attn_bias: Tensor | None, return_attention: bool
    ) -> tuple[Tensor, Tensor | None]:
        if return_attention:
            return self.attn(x, attn_bias, return_attention=True)
        return self.attn(x, attn_bias), None

    def forward(
        self, x: Tensor, attn_bias: Tensor | None = None, return_attention: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Apply the block to tokens ``x`` of shape ``(B, N, D)``.

        Args:
            x: tokens, shape ``(B, N, D)``.
            attn_bias: additive attention bias broadcastable to ``(B, h, N, N)``, passed
                to the attention (e.g. a relative position bias).
            return_attention: also return the attention weights ``(B, h, N, N)``.

        Returns:
            Tokens ``(B, N, D)``, or ``(tokens, weights)`` when ``return_attention``.
        """
        if self.norm_first:
            a, weights = self._attend(self.norm1(x), attn_bias, return_attention)
            x = x + self.drop_path1(a)
            x = x + self.drop_path2(self.mlp(self.norm2(x)))
        else:
            a, weights = self._attend(x, attn_bias, return_attention)
            x = self.norm1(x + self.drop_path1(a))
            x = self.norm2(x + self.drop_path2(self.mlp(x)))
        return (x, weights) if return_attention else x


class Encoder(nn.Module):
    """A stack of ``depth`` pre-norm :class:`EncoderBlock` s with linearly rising drop path.

    Block ``i`` (0-based) drops its branches with probability ``drop_path · i / (depth-1)``,
    so the first block is never dropped and the last one most often.

    Args:
        dim: model width D.
        depth: number of blocks.
        num_heads: attention heads h.
        mlp_ratio: MLP hidden width as a multiple of D.
        qkv_bias: bias in the query/key/value projections.
        dropout: dropout inside each block.
        attn_dropout: dropout on the attention weights.
        drop_path: stochastic-depth probability of the last block.
        norm_eps: the LayerNorm epsilon.

    Example:
        >>> encoder = Encoder(dim=32, depth=3, num_heads=2, drop_path=0.2)
        >>> [round(block.drop_path1.p, 2) for block in encoder.blocks]
        [0.0, 0.1, 0.2]
    """

    def __init__(
        self,
        dim: int,
        depth: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        drop_path: float = 0.0,
        norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        rates = torch.linspace(0, drop_path, depth, device="cpu").tolist()
        self.blocks = nn.ModuleList(
            EncoderBlock(dim, num_heads, mlp_ratio, qkv_bias, dropout, attn_dropout, rate, norm_eps)
            for rate in rates
        )

    def forward(
        self,
        x: Tensor,
        attn_bias: Tensor | Sequence[Tensor | None] | None = None,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Apply every block in turn to tokens ``x`` of shape ``(B, N, D)``.

        Args:
            x: tokens, shape ``(B, N, D)``.
            attn_bias: one bias shared by all blocks, or a sequence with one per block.
            return_attention: also return the list of attention weights, one
                ``(B, h, N, N)`` tensor per block.

        Returns:
            Tokens ``(B, N, D)``, or ``(tokens, weights)`` when ``return_attention``.
        """
        if attn_bias is None or isinstance(attn_bias, Tensor):
            attn_bias = [attn_bias] * len(self.blocks)
        elif len(attn_bias) != len(self.blocks):
            raise ValueError(
                f"expected one attention bias per block ({len(self.blocks)}), got {len(attn_bias)}"
            )
        maps = []
        for block, bias in zip(self.blocks, attn_bias, strict=True):
            if return_attention:
                x, weights = block(x, bias, return_attention=True)
                maps.append(weights)
            else:
                x = block(x, bias)
        return (x, maps) if return_attention else x
