"""Scaled dot-product attention and multi-head self-attention (chapter 1).

Two paths compute the same thing:

* the **teaching path**, :func:`scaled_dot_product_attention`, writes out
  ``softmax(Q Kᵀ / √d) V`` and returns the attention weights;
* the **fast path**, :func:`torch.nn.functional.scaled_dot_product_attention`,
  is fused and never materialises the ``N × N`` matrix when it can avoid it.

:class:`MultiHeadSelfAttention` uses the fast path unless the weights are asked
for. Shapes use named axes: B batch, N tokens, D model width, h heads, d head width.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

__all__ = ["attention_weights", "scaled_dot_product_attention", "MultiHeadSelfAttention"]


def attention_weights(q: Tensor, k: Tensor, mask: Tensor | None = None) -> Tensor:
    """Attention weights ``softmax(Q Kᵀ / √d + M)``, one row per query.

    Args:
        q: queries, shape ``(..., N, d)``.
        k: keys, shape ``(..., M, d)``.
        mask: optional, broadcastable to ``(..., N, M)``. Boolean: ``True`` means
            "may attend". Floating point: added to the scores (``-inf`` blocks).

    Returns:
        Weights of shape ``(..., N, M)``; each row sums to 1.

    Example:
        >>> q = k = torch.eye(2)
        >>> attention_weights(q, k).sum(dim=-1)
        tensor([1., 1.])
    """
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"queries and keys need the same head width d, got q {tuple(q.shape)} "
            f"and k {tuple(k.shape)}"
        )
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., N, M)
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        elif mask.is_floating_point():
            scores = scores + mask
        else:
            raise TypeError(f"mask must be bool or floating point, got {mask.dtype}")
    return scores.softmax(dim=-1)


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The explicit attention of Vaswani et al.: ``softmax(Q Kᵀ / √d + M) V``.

    Args:
        q: queries, shape ``(..., N, d)``.
        k: keys, shape ``(..., M, d)``.
        v: values, shape ``(..., M, d_v)``.
        mask: optional boolean (``True`` = attend) or additive float mask,
            broadcastable to ``(..., N, M)``.

    Returns:
        ``(out, weights)`` with ``out`` of shape ``(..., N, d_v)`` and
        ``weights`` of shape ``(..., N, M)``.

    Example:
        >>> q = k = v = torch.ones(1, 3, 4)
        >>> out, weights = scaled_dot_product_attention(q, k, v)
        >>> out.shape, weights[0, 0]
        (torch.Size([1, 3, 4]), tensor([0.3333, 0.3333, 0.3333]))
    """
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"keys and values need the same number of tokens, got k {tuple(k.shape)} "
            f"and v {tuple(v.shape)}"
        )
    weights = attention_weights(q, k, mask)  # (..., N, M)
    return weights @ v, weights


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention over a sequence of tokens, as in ViT and timm.

    One linear layer makes queries, keys and values for all heads at once
    (its weight has the ``[q; k; v]`` layout of :class:`torch.nn.MultiheadAttention`),
    the heads attend independently, and a final linear layer mixes them.

    Args:
        dim: model width D.
        num_heads: number of heads h; ``dim`` must be divisible by it.
        qkv_bias: whether the query/key/value projection has a bias.
        attn_dropout: dropout on the attention weights.
        proj_dropout: dropout after the output projection.

    Attributes:
        fused: use :func:`torch.nn.functional.scaled_dot_product_attention` when
            the weights are not requested (default ``True``). Set it to ``False``
            to always take the explicit path.

    Example:
        >>> attn = MultiHeadSelfAttention(dim=64, num_heads=4)
        >>> out, weights = attn(torch.randn(2, 10, 64), return_attention=True)
        >>> out.shape, weights.shape
        (torch.Size([2, 10, 64]), torch.Size([2, 4, 10, 10]))
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        qkv_bias: bool = True,
        attn_dropout: float = 0.0,
        proj_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if num_heads < 1 or dim % num_heads != 0:
            raise ValueError(
                f"dim ({dim}) must be divisible by num_heads ({num_heads}); "
                f"try num_heads in {[h for h in range(1, min(dim, 16) + 1) if dim % h == 0]}"
            )
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.fused = True
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.attn_dropout = nn.Dropout(attn_dropout)
        self.proj = nn.Linear(dim, dim)
        self.proj_dropout = nn.Dropout(proj_dropout)

    def forward(
        self,
        x: Tensor,
        attn_bias: Tensor | None = None,
        return_attention: bool = False,
        rope: Callable[[Tensor], Tensor] | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend.

        Args:
            x: tokens, shape ``(B, N, D)``.
            attn_bias: additive float bias (or boolean mask, ``True`` = attend)
                broadcastable to ``(B, h, N, N)``, e.g. a relative position bias.
            return_attention: also return the attention weights; this takes
                the explicit path.
            rope: optional rotary position embedding, a function applied to the
                queries and keys of shape ``(B, h, N, d)`` after the head split.

        Returns:
            The output ``(B, N, D)``, or ``(out, weights)`` with weights of
            shape ``(B, h, N, N)`` when ``return_attention`` is set.
        """
        if x.dim() != 3:
            raise ValueError(f"expected tokens of shape (B, N, D), got {x.dim()}-D {tuple(x.shape)}")
        if x.shape[-1] != self.dim:
            raise ValueError(
                f"expected last dimension dim={self.dim}, got {x.shape[-1]} (x is {tuple(x.shape)})"
            )
        qkv = rearrange(self.qkv(x), "b n (three h d) -> three b h n d", three=3, h=self.num_heads)
        q, k, v = qkv.unbind(0)  # each (B, h, N, d)
        if rope is not None:
            q, k = rope(q), rope(k)

        if return_attention or not self.fused:
            weights = attention_weights(q, k, attn_bias)  # (B, h, N, N)
            out = self.attn_dropout(weights) @ v  # (B, h, N, d)
        else:
            dropout_p = self.attn_dropout.p if self.training else 0.0
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias, dropout_p=dropout_p)
            weights = None

        out = rearrange(out, "b h n d -> b n (h d)")  # merge heads: (B, N, D)
        out = self.proj_dropout(self.proj(out))
        return (out, weights) if return_attention else out
