"""The model-level parts of the ViT of the mid-2020s (chapter 11): attention pooling and patch
dropout. The block-level parts (LayerScale, RMSNorm, QK-norm, SwiGLU) are in
:mod:`vit_tutorial.encoder` and :mod:`vit_tutorial.attention`, register tokens and RoPE in the
whole model in :class:`~vit_tutorial.vit.VisionTransformer`. Shapes: B batch, T tokens, D model
width, h heads, d = D / h, L learned queries.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vit_tutorial.attention import NORMS, attention_weights, check_heads, make_norm
from vit_tutorial.encoder import MLP
from vit_tutorial.validate import check_int, check_real

__all__ = ["AttentionPool", "PatchDropout", "patch_dropout"]


class AttentionPool(nn.Module):
    """Multihead attention pooling, the "MAP" head (Zhai et al. 2022, Section 3.2; SigLIP): ``L``
    learned queries attend over the tokens, then a residual MLP, and the first query's output is
    the image's vector. timm's ``AttentionPoolLatent`` (``timm/layers/attention_pool.py``), whose
    names it keeps: ``latent`` ``(1, L, D)``, ``q``, ``kv`` (keys and values packed), ``proj``,
    ``norm`` (before the MLP, its kind by ``norm``), ``mlp``.

    Args:
        dim, num_heads: D and h; mlp_ratio: the MLP's hidden width as a multiple of D.
        norm, norm_eps: one of :data:`~vit_tutorial.attention.NORMS`, and its epsilon.
        latent_len: L, the learned queries (timm's default, 1).

    Example:
        >>> pool = AttentionPool(dim=32, num_heads=4)
        >>> pool(torch.randn(2, 10, 32)).shape, pool.weights(torch.randn(2, 10, 32)).shape
        (torch.Size([2, 32]), torch.Size([2, 4, 1, 10]))
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        norm: str = "layernorm",
        norm_eps: float = 1e-6,
        latent_len: int = 1,
    ) -> None:
        check_heads(dim, num_heads), check_int("latent_len", latent_len)
        check_real("mlp_ratio", mlp_ratio, 0.0, low_open=True)
        check_real("norm_eps", norm_eps, 0.0, low_open=True)
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
        self._build(dim, num_heads, mlp_ratio, norm, norm_eps, latent_len)

    def _build(self, dim, num_heads, mlp_ratio, norm, norm_eps, latent_len=1) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.latent = nn.Parameter(torch.zeros(1, latent_len, dim))
        self.q, self.kv = nn.Linear(dim, dim), nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm = make_norm(norm, dim, norm_eps)
        self.mlp = MLP(dim, max(1, int(dim * mlp_ratio)))
        self.reset_latent()

    def reset_latent(self) -> None:
        """timm's start: the queries from a normal of std ``D^-0.5`` truncated at ±2 std."""
        std = self.latent.shape[-1] ** -0.5
        nn.init.trunc_normal_(self.latent, std=std, a=-2 * std, b=2 * std)

    def _heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries ``(B, h, L, d)`` of the latent, keys and values ``(B, h, T, d)`` of ``x``."""
        if x.dim() != 3 or x.shape[-1] != self.latent.shape[-1]:
            raise ValueError(
                f"expected tokens (B, T, {self.latent.shape[-1]}), got {tuple(x.shape)}"
            )
        B, T, _ = x.shape
        q = self.q(self.latent).view(1, -1, self.num_heads, self.head_dim).transpose(1, 2)
        kv = self.kv(x).view(B, T, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return q.expand(B, -1, -1, -1), kv[0], kv[1]

    def forward(self, x: Tensor) -> Tensor:
        """Pool tokens ``(B, T, D)`` to ``(B, D)``: the first learned query's output."""
        q, k, v = self._heads(x)
        out = F.scaled_dot_product_attention(q, k, v)  # (B, h, L, d)
        out = self.proj(out.transpose(1, 2).flatten(2))  # (B, L, D)
        out = out + self.mlp(self.norm(out))
        return out[:, 0]

    def weights(self, x: Tensor) -> Tensor:
        """The queries' attention over the tokens, ``(B, h, L, T)``: where the head looks."""
        q, k, _ = self._heads(x)
        return attention_weights(q, k)


def patch_dropout(x: Tensor, rate: float, num_prefix_tokens: int = 0) -> Tensor:
    """Keep a random ``max(1, int(N · (1 - rate)))`` of the ``N`` patch tokens of each image
    (Liu et al. 2022, "PatchDropout"; timm's ``patch_drop_rate``), in a random order, and every
    prefix token: tokens ``(B, T, D)`` to ``(B, p + kept, D)``. Attention is order-free, and the
    positions were added before, so the encoder works on fewer tokens, not on the wrong ones.

    Example:
        >>> patch_dropout(torch.randn(2, 1 + 16, 8), rate=0.75, num_prefix_tokens=1).shape
        torch.Size([2, 5, 8])
    """
    check_real("rate", rate, 0.0, 1.0, high_open=True)
    if not isinstance(x, Tensor) or x.dim() != 3:
        raise ValueError(f"x must be tokens (B, T, D), got {getattr(x, 'shape', type(x))}")
    check_int("num_prefix_tokens", num_prefix_tokens, 0, x.shape[1] - 1)  # a patch is left
    prefix, patches = x[:, :num_prefix_tokens], x[:, num_prefix_tokens:]
    B, N = patches.shape[:2]
    keep = max(1, int(N * (1.0 - rate)))
    index = torch.randn(B, N, device=x.device).argsort(dim=-1)[:, :keep]  # (B, kept)
    kept = patches.gather(1, index[..., None].expand(-1, -1, patches.shape[-1]))
    return torch.cat([prefix, kept], dim=1)


class PatchDropout(nn.Module):
    """:func:`patch_dropout` as a module, active in ``train()`` only (identity in ``eval()``)."""

    def __init__(self, rate: float, num_prefix_tokens: int = 0) -> None:
        super().__init__()
        self.rate = check_real("rate", rate, 0.0, 1.0, high_open=True)
        self.num_prefix_tokens = check_int("num_prefix_tokens", num_prefix_tokens, 0)

    def forward(self, x: Tensor) -> Tensor:
        """Drop patch tokens of ``x`` ``(B, T, D)`` while training."""
        if not self.training or self.rate == 0.0:
            return x
        return patch_dropout(x, self.rate, self.num_prefix_tokens)

    def extra_repr(self) -> str:
        return f"rate={self.rate}, num_prefix_tokens={self.num_prefix_tokens}"
