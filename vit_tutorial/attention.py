"""Scaled dot-product attention and multi-head self-attention (chapter 1).

Two paths compute the same function:

* the **teaching path**, :func:`scaled_dot_product_attention`, writes out
  ``softmax(Q Kᵀ / √d) V`` and returns the attention weights;
* the **fast path**, :func:`torch.nn.functional.scaled_dot_product_attention`,
  is fused and never materialises the ``T × T`` matrix when it can avoid it.

:class:`MultiHeadSelfAttention` takes the fast path in ``forward`` and the teaching path
in ``forward_with_weights``, which also returns the weights. Where the fast path is
defined the two agree, also for a query that may attend to nothing (its output is zero)
and for float16 scores that would overflow before the ``1/√d`` scale (the scale is
applied to the queries first). Shapes: B batch, T tokens (the queries), M keys (M = T in
self-attention), D model width, h heads, d head width.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vit_tutorial.validate import check_bool, check_int, check_real

__all__ = ["attention_weights", "scaled_dot_product_attention", "MultiHeadSelfAttention"]


def check_heads(dim: int, num_heads: int) -> None:
    """Refuse a ``dim`` or ``num_heads`` that is no positive int, or heads that do not divide dim."""
    check_int("dim", dim), check_int("num_heads", num_heads)
    if dim % num_heads:
        divisors = [h for h in range(1, min(dim, 16) + 1) if dim % h == 0]
        raise ValueError(
            f"dim ({dim}) must be divisible by num_heads ({num_heads}); try num_heads in {divisors}"
        )


def check_mask(mask: Tensor | None, scores_shape: tuple[int, ...]) -> None:
    """Refuse a mask of the wrong dtype or of a shape that does not broadcast to the scores.

    Raises:
        TypeError: ``mask`` is not a tensor, or neither boolean nor floating point.
        ValueError: ``mask`` does not broadcast to ``scores_shape`` ``(..., T, M)``.
    """
    if mask is None:
        return
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a tensor or None, got {type(mask).__name__}")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(
            f"mask must be bool (True = may attend) or floating point (added to "
            f"the scores), got {mask.dtype}"
        )
    try:
        shape = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        shape = None
    if shape != torch.Size(scores_shape):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the "
            f"attention scores (..., T, M) = {tuple(scores_shape)}"
        )


def attention_weights(q: Tensor, k: Tensor, mask: Tensor | None = None) -> Tensor:
    """Attention weights ``softmax(Q Kᵀ / √d + M)``, one row per query.

    A query whose every key is masked gets a row of zeros (as the fused kernel does),
    not the ``NaN`` of a softmax over nothing.

    Args:
        q: queries, shape ``(..., T, d)``.
        k: keys, shape ``(..., M, d)``.
        mask: optional, broadcastable to ``(..., T, M)``. Boolean: ``True`` means
            "may attend". Floating point: added to the scores (``-inf`` blocks).

    Returns:
        Weights of shape ``(..., T, M)``; each row sums to 1 (or to 0 when fully masked).

    Example:
        >>> q = k = torch.eye(2)
        >>> attention_weights(q, k).sum(dim=-1)
        tensor([1., 1.])
    """
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"queries and keys need the same head width d, got q "
            f"{tuple(q.shape)} and k {tuple(k.shape)}"
        )
    scores = (q / math.sqrt(q.shape[-1])) @ k.transpose(-2, -1)  # (..., T, M)
    check_mask(mask, scores.shape)
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask.to(scores.dtype)
    weights = scores.softmax(dim=-1)
    if mask is not None:  # a row masked everywhere is a softmax over nothing: NaN, made 0
        blocked = scores.isneginf().all(dim=-1, keepdim=True)  # (..., T, 1)
        if blocked.any():
            weights = weights.masked_fill(blocked, 0.0)
    return weights


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The explicit attention of Vaswani et al.: ``softmax(Q Kᵀ / √d + M) V``.

    Args:
        q: queries, shape ``(..., T, d)``.
        k: keys, shape ``(..., M, d)``.
        v: values, shape ``(..., M, d_v)``.
        mask: optional boolean (``True`` = attend) or additive float mask,
            broadcastable to ``(..., T, M)``.

    Returns:
        ``(out, weights)`` with ``out`` of shape ``(..., T, d_v)`` and
        ``weights`` of shape ``(..., T, M)``.

    Example:
        >>> q = k = v = torch.ones(1, 3, 4)
        >>> out, weights = scaled_dot_product_attention(q, k, v)
        >>> out.shape, weights[0, 0]
        (torch.Size([1, 3, 4]), tensor([0.3333, 0.3333, 0.3333]))
    """
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"keys and values need the same number of tokens, got k "
            f"{tuple(k.shape)} and v {tuple(v.shape)}"
        )
    weights = attention_weights(q, k, mask)  # (..., T, M)
    return weights @ v, weights


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention over a sequence of tokens, as in ViT and timm.

    One linear layer makes queries, keys and values for all heads at once
    (its weight has the ``[q; k; v]`` layout of :class:`torch.nn.MultiheadAttention`),
    the heads attend independently, and a final linear layer mixes them.

    ``attn(x)`` takes the fused kernel; ``attn.forward_with_weights(x)`` takes the
    explicit path and also returns the attention weights.

    Args:
        dim: model width D.
        num_heads: number of heads h; ``dim`` must be divisible by it.
        qkv_bias: whether the query/key/value projection has a bias.
        attn_dropout: dropout on the attention weights.
        proj_dropout: dropout after the output projection.

    Attributes:
        fused: ``forward`` uses :func:`torch.nn.functional.scaled_dot_product_attention`
            (default ``True``); set it to ``False`` to take the explicit path there too.

    Example:
        >>> attn = MultiHeadSelfAttention(dim=64, num_heads=4)
        >>> out, weights = attn.forward_with_weights(torch.randn(2, 10, 64))
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
        check_heads(dim, num_heads), check_bool("qkv_bias", qkv_bias)
        for name, p in [("attn_dropout", attn_dropout), ("proj_dropout", proj_dropout)]:
            check_real(name, p, 0.0, 1.0, high_open=True)
        self._build(dim, num_heads, qkv_bias, attn_dropout, proj_dropout)

    def _build(self, dim, num_heads, qkv_bias, attn_dropout, proj_dropout) -> None:
        super().__init__()
        self.dim, self.num_heads, self.head_dim = dim, num_heads, dim // num_heads
        self.fused = True
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.attn_dropout = nn.Dropout(attn_dropout)
        self.proj = nn.Linear(dim, dim)
        self.proj_dropout = nn.Dropout(proj_dropout)

    def _heads(
        self, x: Tensor, rope: Callable[[Tensor], Tensor] | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values ``(B, h, T, d)`` of tokens ``x`` ``(B, T, D)``."""
        if not isinstance(x, Tensor):
            raise TypeError(f"expected a tensor of tokens (B, T, D), got {type(x).__name__}")
        if x.dim() != 3:
            raise ValueError(
                f"expected tokens of shape (B, T, D), got {x.dim()}-D {tuple(x.shape)}"
            )
        if x.shape[-1] != self.dim:
            raise ValueError(
                f"expected last dimension dim={self.dim}, got {x.shape[-1]} (x is {tuple(x.shape)})"
            )
        B, T, _ = x.shape
        # "b n (three h d) -> three b h n d" as a view and a permute: einops' rearrange
        # computes the same with a few µs more Python per call (appendix A measures it)
        qkv = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each (B, h, T, d)
        if rope is not None:
            q, k = rope(q), rope(k)
        return q, k, v

    def _merge(self, out: Tensor) -> Tensor:
        """Merge the heads ``(B, h, T, d) -> (B, T, D)`` and project."""
        B, h, T, d = out.shape
        return self.proj_dropout(self.proj(out.transpose(1, 2).reshape(B, T, h * d)))

    def forward(
        self,
        x: Tensor,
        attn_bias: Tensor | None = None,
        rope: Callable[[Tensor], Tensor] | None = None,
    ) -> Tensor:
        """Attend: tokens ``(B, T, D)`` in, tokens ``(B, T, D)`` out.

        Args:
            x: tokens, shape ``(B, T, D)``.
            attn_bias: additive float bias (or boolean mask, ``True`` = attend)
                broadcastable to ``(B, h, T, T)``, e.g. a relative position bias.
            rope: optional rotary position embedding, a function applied to the
                queries and keys of shape ``(B, h, T, d)`` after the head split.
        """
        if not self.fused:
            return self.forward_with_weights(x, attn_bias, rope)[0]
        q, k, v = self._heads(x, rope)
        check_mask(attn_bias, (*q.shape[:3], q.shape[2]))  # the scores' (B, h, T, T)
        if attn_bias is not None and attn_bias.is_floating_point():
            attn_bias = attn_bias.to(q.dtype)
        dropout_p = self.attn_dropout.p if self.training else 0.0
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_bias, dropout_p=dropout_p
        )  # (B, h, T, d)
        return self._merge(out)

    def forward_with_weights(
        self,
        x: Tensor,
        attn_bias: Tensor | None = None,
        rope: Callable[[Tensor], Tensor] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """The explicit path: the output ``(B, T, D)`` and the weights ``(B, h, T, T)``.

        Takes the same arguments as :meth:`forward` and returns the same output.
        """
        q, k, v = self._heads(x, rope)
        weights = attention_weights(q, k, attn_bias)  # (B, h, T, T)
        return self._merge(self.attn_dropout(weights) @ v), weights
