"""Scaled dot-product attention and multi-head self-attention (chapter 1).

The **teaching path**, :func:`scaled_dot_product_attention`, writes out ``softmax(Q Kᵀ / √d) V`` and
returns the weights; the **fast path**, the fused
:func:`torch.nn.functional.scaled_dot_product_attention`, avoids materialising the ``T × T`` matrix.
Where it is defined the two agree, also for a query that may attend to nothing (output zero) and for
float16 scores that would overflow before the ``1/√d`` scale (applied to the queries first). Shapes:
B batch, T queries, M keys (M = T in self-attention), D model width, h heads, d head width.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vit_tutorial.validate import check_bool, check_int, check_real

__all__ = [
    "attention_weights",
    "scaled_dot_product_attention",
    "MultiHeadSelfAttention",
    "NORMS",
    "make_norm",
    "attention_rollout",
]

Rope = Callable[[Tensor], Tensor]  # rotates queries or keys (B, h, T, d), e.g. RotaryEmbedding2D


#: The normalisations a block may use: ``'layernorm'`` (ViT) or ``'rmsnorm'`` (chapter 11).
NORMS = ("layernorm", "rmsnorm")


def make_norm(kind: str, dim: int, eps: float = 1e-6) -> nn.Module:
    """``nn.LayerNorm`` or ``nn.RMSNorm`` (no mean subtracted, no bias; Zhang & Sennrich 2019)
    over the last ``dim`` channels, by ``kind`` of :data:`NORMS` (checked by the caller)."""
    return nn.LayerNorm(dim, eps=eps) if kind == "layernorm" else nn.RMSNorm(dim, eps=eps)


def check_heads(dim: int, num_heads: int) -> None:
    """Refuse a ``dim`` or ``num_heads`` that is no positive int, or heads that do not divide it."""
    check_int("dim", dim), check_int("num_heads", num_heads)
    if dim % num_heads:
        divisors = [h for h in range(1, min(dim, 16) + 1) if dim % h == 0]
        raise ValueError(
            f"dim ({dim}) must be divisible by num_heads ({num_heads}); try num_heads in {divisors}"
        )


def check_mask(mask: Tensor, scores_shape: tuple[int, ...]) -> None:
    """Refuse a mask of the wrong kind (``TypeError``: no boolean or floating-point tensor) or
    shape (``ValueError``: it does not broadcast to ``scores_shape`` ``(..., T, M)``)."""
    if not isinstance(mask, Tensor) or (mask.dtype != torch.bool and not mask.is_floating_point()):
        got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise TypeError(
            f"mask must be None or a tensor, bool (True = may attend) or floating point (added "
            f"to the scores), got {got}"
        )
    trailing = zip(mask.shape[::-1], scores_shape[::-1])  # broadcasting aligns the last axes
    if mask.dim() > len(scores_shape) or any(m not in (1, s) for m, s in trailing):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the "
            f"attention scores (..., T, M) = {tuple(scores_shape)}"
        )


def attention_weights(q: Tensor, k: Tensor, mask: Tensor | None = None) -> Tensor:
    """Attention weights ``softmax(Q Kᵀ / √d + M)`` of shape ``(..., T, M)``, one row per query.

    Rows sum to 1, or to 0 (as in the fused kernel, not ``NaN``) for a query with every key masked.

    Args:
        q, k: queries ``(..., T, d)`` and keys ``(..., M, d)``.
        mask: optional, broadcastable to ``(..., T, M)``: boolean (``True`` = may attend) or
            floating point (added to the scores, ``-inf`` blocks).

    Example:
        >>> attention_weights(torch.eye(2), torch.eye(2)).sum(dim=-1)
        tensor([1., 1.])
    """
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"queries and keys need the same head width d, got q "
            f"{tuple(q.shape)} and k {tuple(k.shape)}"
        )
    scores = (q / math.sqrt(q.shape[-1])) @ k.transpose(-2, -1)  # (..., T, M)
    if mask is None:
        return scores.softmax(dim=-1)
    check_mask(mask, scores.shape)
    if mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    else:
        scores = scores + mask.to(scores.dtype)
    weights = scores.softmax(dim=-1)
    blocked = scores.isneginf().all(dim=-1, keepdim=True)  # (..., T, 1): softmax of nothing, NaN
    return weights.masked_fill(blocked, 0.0) if blocked.any() else weights


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The explicit attention of Vaswani et al.: ``softmax(Q Kᵀ / √d + M) V``.

    Args:
        q, k, v: queries ``(..., T, d)``, keys ``(..., M, d)`` and values ``(..., M, d_v)``.
        mask: optional, as for :func:`attention_weights`.

    Returns:
        ``(out, weights)``: ``out`` of shape ``(..., T, d_v)``, ``weights`` ``(..., T, M)``.

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

    One linear layer makes queries, keys and values for all heads at once (its weight has the
    ``[q; k; v]`` layout of :class:`torch.nn.MultiheadAttention`), the heads attend independently,
    and a final linear layer mixes them. ``attn(x)`` takes the fast path (the teaching path once
    ``attn.fused = False``); ``attn.forward_with_weights(x)`` also returns the weights.

    Args:
        dim, num_heads, qkv_bias: D, the heads h (which must divide D), a q/k/v projection bias.
        attn_dropout, proj_dropout: dropout on the attention weights, after the projection.
        qk_norm: ``None``, or one of :data:`NORMS`: normalise each head's queries and keys
            (``q_norm``, ``k_norm``; Henry et al. 2020, ViT-22B §2), as timm's ``qk_norm``.

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
        qk_norm: str | None = None,
    ) -> None:
        check_heads(dim, num_heads), check_bool("qkv_bias", qkv_bias)
        for name, p in [("attn_dropout", attn_dropout), ("proj_dropout", proj_dropout)]:
            check_real(name, p, 0.0, 1.0, high_open=True)
        if qk_norm is not None and qk_norm not in NORMS:
            raise ValueError(f"qk_norm must be None or one of {NORMS}, got {qk_norm!r}")
        self._build(dim, num_heads, qkv_bias, attn_dropout, proj_dropout, qk_norm)

    def _build(self, dim, num_heads, qkv_bias, attn_dropout, proj_dropout, qk_norm=None) -> None:
        super().__init__()
        self.dim, self.num_heads, self.head_dim, self.fused = dim, num_heads, dim // num_heads, True
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        if qk_norm is not None:  # absent otherwise, as the 2020 ViT has none
            self.q_norm = make_norm(qk_norm, self.head_dim)
            self.k_norm = make_norm(qk_norm, self.head_dim)
        self.attn_dropout = nn.Dropout(attn_dropout)
        self.proj = nn.Linear(dim, dim)
        self.proj_dropout = nn.Dropout(proj_dropout)

    def _heads(self, x: Tensor, rope: Rope | None) -> tuple[Tensor, ...]:
        """Queries, keys and values ``(B, h, T, d)`` of tokens ``x`` ``(B, T, D)``."""
        if not isinstance(x, Tensor):
            raise TypeError(f"expected a tensor of tokens (B, T, D), got {type(x).__name__}")
        if x.dim() != 3:
            raise ValueError(f"expected tokens (B, T, D), got {x.dim()}-D {tuple(x.shape)}")
        if x.shape[-1] != self.dim:
            raise ValueError(
                f"expected last dimension dim={self.dim}, got {x.shape[-1]} (x is {tuple(x.shape)})"
            )
        B, T, _ = x.shape
        # "b n (three h d) -> three b h n d" as view and permute: einops costs µs (appendix A)
        qkv = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each (B, h, T, d)
        if hasattr(self, "q_norm"):  # QK-norm: each head's queries and keys, before RoPE
            q, k = self.q_norm(q), self.k_norm(k)
        if rope is not None:
            q, k = rope(q), rope(k)
        return q, k, v

    def _merge(self, out: Tensor) -> Tensor:
        """Merge the heads ``(B, h, T, d) -> (B, T, D)`` and project."""
        return self.proj_dropout(self.proj(out.transpose(1, 2).flatten(2)))  # (B, T, h·d = D)

    def forward(
        self, x: Tensor, attn_bias: Tensor | None = None, rope: Rope | None = None
    ) -> Tensor:
        """Attend: tokens ``(B, T, D)`` in, tokens ``(B, T, D)`` out.

        Args:
            attn_bias: additive float bias (or boolean mask, ``True`` = attend) broadcastable
                to ``(B, h, T, T)``, e.g. a relative position bias.
            rope: a rotary position embedding, applied to queries and keys ``(B, h, T, d)``.
        """
        if not self.fused:
            return self.forward_with_weights(x, attn_bias, rope)[0]
        q, k, v = self._heads(x, rope)
        if attn_bias is not None:
            check_mask(attn_bias, (*q.shape[:3], q.shape[2]))  # the scores' (B, h, T, T)
            attn_bias = attn_bias.to(q.dtype) if attn_bias.is_floating_point() else attn_bias
        dropout_p = self.attn_dropout.p if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias, dropout_p=dropout_p)
        return self._merge(out)  # (B, h, T, d) -> (B, T, D)

    def forward_with_weights(
        self, x: Tensor, attn_bias: Tensor | None = None, rope: Rope | None = None
    ) -> tuple[Tensor, Tensor]:
        """:meth:`forward` on the teaching path, and the weights ``(B, h, T, T)``."""
        q, k, v = self._heads(x, rope)
        weights = attention_weights(q, k, attn_bias)  # (B, h, T, T)
        return self._merge(self.attn_dropout(weights) @ v), weights


def attention_rollout(maps: list[Tensor], residual: float = 0.5) -> Tensor:
    """Attention rollout (Abnar & Zuidema, 2020): how much each token draws on each input.

    Per block, average the heads, mix in the identity for the residual connection
    (``residual · I + (1 - residual) · A``), renormalise the rows, and multiply the blocks:
    ``R = Â_L ··· Â_2 Â_1``, ``(B, T, T)``, its row ``t`` for output token ``t``.

    Args:
        maps: the blocks' attention weights ``(B, h, T, T)``, from
            :meth:`~vit_tutorial.vit.VisionTransformer.attention_maps` (or an axial ViT's, one per layer, or one
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
