"""The Transformer encoder block and the stack of blocks (chapter 4).

One block of ViT is two residual branches, each behind a LayerNorm ("pre-norm"):
``x = x + DropPath(Attention(LN(x)))``, then ``x = x + DropPath(MLP(LN(x)))``. Parameter names
follow timm (``norm1``, ``attn.qkv``, ``mlp.fc1`` ...), so its checkpoints map onto these
modules one to one. The block of the mid-2020s (chapter 11) scales each branch
(:class:`LayerScale`), may normalise with RMSNorm, queries and keys too (QK-norm), gate its MLP
(:class:`SwiGLU`) and rotate queries and keys (RoPE): :class:`BlockOptions`' later fields.
Shapes: B batch, T tokens, D model width, h heads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from vit_tutorial.attention import NORMS, MultiHeadSelfAttention, Rope, check_heads, make_norm
from vit_tutorial.validate import check_bool, check_int, check_real, trusted

__all__ = [
    "MLP",
    "SwiGLU",
    "LayerScale",
    "MLPS",
    "DropPath",
    "drop_path",
    "drop_path_rates",
    "BlockOptions",
    "EncoderBlock",
    "PostNormBlock",
    "Encoder",
    "init_weights",
]

#: The feed-forward networks a block may use: ``'gelu'`` (:class:`MLP`), ``'swiglu'``.
MLPS = ("gelu", "swiglu")
Bias = Tensor | None  # an attention bias or boolean mask (True = attend), to (B, h, T, T)
Biases = Bias | Sequence[Bias]  # one bias shared by every block of an Encoder, or one each
Ropes = Rope | Sequence[Rope] | None  # one rotary embedding for every block, or one each


def init_weights(module: nn.Module) -> None:
    """timm's and DeiT's initialisation of a Linear layer; apply it with ``model.apply``.

    Weights from a normal of std 0.02 truncated at ±2 std (std ≈ 0.0176, chapter 3), zero biases;
    others keep PyTorch's. timm's ``init_weights_vit_timm`` keeps ``trunc_normal_``'s absolute
    bounds ±2 (no truncation); the reference ViT (``vit_jax/models_vit.py``) has Xavier-uniform
    kernels, MLP biases from N(0, 1e-6²), other biases zero (chapter 4).

    Example:
        >>> layer = nn.Linear(256, 256).apply(init_weights)
        >>> round(layer.weight.std().item(), 3), layer.bias.abs().max().item()
        (0.018, 0.0)
    """
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=0.02, a=-0.04, b=0.04)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


def drop_path_rates(drop_path: float, depth: int) -> list[float]:
    """Stochastic-depth rates rising linearly from 0 in the first block to ``drop_path``.

    Example:
        >>> drop_path_rates(0.2, 3)
        [0.0, 0.10000000149011612, 0.20000000298023224]
    """
    check_int("depth", depth), check_real("drop_path", drop_path, 0.0, 1.0, high_open=True)
    return torch.linspace(0, drop_path, depth, device="cpu").tolist()


class MLP(nn.Module):
    """The position-wise feed-forward network: Linear, GELU, dropout, Linear, dropout.

    ``dim`` is D (in and out), ``hidden_dim`` is ``mlp_ratio · D`` in ViT (3072 for D = 768). The
    GELU is the exact ``x·Φ(x)`` of timm and torchvision; the reference JAX code calls flax's
    ``nn.gelu``, by default the tanh approximation, at most about 5e-4 away (chapter 4).

    Example:
        >>> MLP(dim=8, hidden_dim=32)(torch.randn(2, 5, 8)).shape
        torch.Size([2, 5, 8])
    """

    def __init__(self, dim: int, hidden_dim: int, dropout: float = 0.0) -> None:
        check_int("dim", dim), check_int("hidden_dim", hidden_dim)
        self._build(dim, hidden_dim, check_real("dropout", dropout, 0.0, 1.0, high_open=True))

    def _build(self, dim: int, hidden_dim: int, dropout: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = nn.GELU()
        self.drop1 = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden_dim, dim)
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """``(..., D) -> (..., D)``, the same map applied to every token."""
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))


class SwiGLU(nn.Module):
    """The gated MLP of LLaMA, EVA-02 and AIMv2 (Shazeer 2020): ``fc2(SiLU(fc1_g(x)) · fc1_x(x))``.

    Two input projections, one gating the other, so ``hidden_dim`` costs ``3·D·hidden_dim``
    weights against the plain :class:`MLP`'s ``2·D·hidden_dim``: the counts match at 2/3 of its
    hidden width (EVA-02's ``mlp_ratio`` of 4·2/3). The layout and names are timm's ``SwiGLU``
    (``timm/layers/mlp.py``; its ``GluMlp`` packs both halves in one ``fc1``), as is the start
    (:meth:`init_gate`): gate weights near zero and gate biases one, so each unit starts as
    ``SiLU(1) · fc1_x(x)``.

    Example:
        >>> SwiGLU(dim=8, hidden_dim=16)(torch.randn(2, 5, 8)).shape
        torch.Size([2, 5, 8])
    """

    def __init__(self, dim: int, hidden_dim: int, dropout: float = 0.0) -> None:
        check_int("dim", dim), check_int("hidden_dim", hidden_dim)
        self._build(dim, hidden_dim, check_real("dropout", dropout, 0.0, 1.0, high_open=True))

    def _build(self, dim: int, hidden_dim: int, dropout: float) -> None:
        super().__init__()
        self.fc1_g, self.fc1_x = nn.Linear(dim, hidden_dim), nn.Linear(dim, hidden_dim)
        self.act = nn.SiLU()
        self.drop1 = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden_dim, dim)
        self.drop2 = nn.Dropout(dropout)

    def init_gate(self) -> None:
        """timm's ``SwiGLU.init_weights``: gate weights from N(0, 1e-6²), gate biases one."""
        nn.init.normal_(self.fc1_g.weight, std=1e-6), nn.init.ones_(self.fc1_g.bias)

    def forward(self, x: Tensor) -> Tensor:
        """``(..., D) -> (..., D)``: the gate, SiLU, times the value projection."""
        hidden = self.act(self.fc1_g(x)) * self.fc1_x(x)
        return self.drop2(self.fc2(self.drop1(hidden)))


class LayerScale(nn.Module):
    """A learned scale per channel on a residual branch (CaiT, Touvron et al. 2021, Section 2.1):
    ``x · γ``, γ of shape ``(D,)`` starting at ``init_values`` (timm: 1e-6 for DeiT III, 1e-5
    for DINOv2; DeiT III's own code 1e-4). timm's ViT names it ``ls1.gamma``, its Eva ``gamma_1``.

    Example:
        >>> LayerScale(dim=4, init_values=0.1)(torch.ones(1, 4))
        tensor([[0.1000, 0.1000, 0.1000, 0.1000]], grad_fn=<MulBackward0>)
    """

    def __init__(self, dim: int, init_values: float = 1e-5) -> None:
        check_int("dim", dim), check_real("init_values", init_values, 0.0, low_open=True)
        self._build(dim, init_values)

    def _build(self, dim: int, init_values: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init_values)))

    def forward(self, x: Tensor) -> Tensor:
        """Scale the last axis ``(..., D)`` channel by channel."""
        return x * self.gamma


def drop_path(x: Tensor, p: float, training: bool) -> Tensor:
    """Stochastic depth: zero the whole sample with probability ``p``, else scale by 1/(1-p).

    Unlike dropout, which zeroes single numbers, one coin is tossed per sample of a residual
    branch's output ``x`` ``(B, ...)``, so a dropped sample skips the branch entirely; the
    scaling keeps the expected value. ``p`` is in ``[0, 1)``; with ``training=False``, identity.

    Example:
        >>> x = torch.ones(4, 3)
        >>> torch.equal(drop_path(x, 0.5, training=False), x)
        True
        >>> set(drop_path(x, 0.5, training=True).flatten().tolist()) <= {0.0, 2.0}
        True
    """
    check_real("drop path probability p", p, 0.0, 1.0, high_open=True)
    return _drop_path(x, p, check_bool("training", training))


def _drop_path(x: Tensor, p: float, training: bool) -> Tensor:  # drop_path for a checked p
    if p == 0.0 or not training:
        return x
    keep = 1.0 - p
    mask = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(keep)  # (B, 1, ..., 1)
    return x * mask / keep


class DropPath(nn.Module):
    """:func:`drop_path` of probability ``p`` in ``[0, 1)`` as a module, active in ``train()``."""

    def __init__(self, p: float = 0.0) -> None:
        check_real("drop path probability p", p, 0.0, 1.0, high_open=True)
        self._build(p)

    def _build(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        """Drop whole samples of ``x`` (shape ``(B, ...)``) with probability ``p``."""
        return _drop_path(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


@dataclasses.dataclass(frozen=True)
class BlockOptions:
    """Everything an encoder block is built from but its drop path: validated once, here.

    Attributes:
        dim, num_heads: model width D and attention heads h, which must divide D.
        mlp_ratio, qkv_bias: MLP hidden width as a multiple of D; bias in the q/k/v projections.
        dropout, attn_dropout: dropout after the attention projections and in the MLP; on weights.
        norm_eps: the LayerNorm epsilon (1e-6 in ViT, timm and torchvision).
        init_values: :class:`LayerScale` on both branches from this value; ``None``: none.
        qk_norm: normalise each head's queries and keys (QK-norm) with the block's ``norm``.
        norm: ``'layernorm'`` or ``'rmsnorm'`` (:data:`~vit_tutorial.attention.NORMS`).
        mlp: ``'gelu'`` (:class:`MLP`) or ``'swiglu'`` (:class:`SwiGLU`, hidden
            ``mlp_ratio · dim`` as timm's: pass 2/3 of the ratio to match the parameters).

    Example:
        >>> BlockOptions(dim=64, num_heads=4, mlp_ratio=2.0).feed_forward().fc1
        Linear(in_features=64, out_features=128, bias=True)
    """

    dim: int
    num_heads: int
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    dropout: float = 0.0
    attn_dropout: float = 0.0
    norm_eps: float = 1e-6
    init_values: float | None = None
    qk_norm: bool = False
    norm: str = "layernorm"
    mlp: str = "gelu"

    def __post_init__(self) -> None:
        check_heads(self.dim, self.num_heads), check_bool("qkv_bias", self.qkv_bias)
        check_bool("qk_norm", self.qk_norm)
        if self.init_values is not None:
            check_real("init_values", self.init_values, 0.0, low_open=True)
        for name, valid in [("norm", NORMS), ("mlp", MLPS)]:
            if getattr(self, name) not in valid:
                raise ValueError(f"{name} must be one of {valid}, got {getattr(self, name)!r}")
        for name in ("dropout", "attn_dropout"):
            check_real(name, getattr(self, name), 0.0, 1.0, high_open=True)
        check_real("mlp_ratio", self.mlp_ratio, 0.0, low_open=True)
        check_real("norm_eps", self.norm_eps, 0.0, low_open=True)
        if int(self.dim * self.mlp_ratio) < 1:
            raise ValueError(
                f"the MLP needs at least one hidden unit, got hidden_dim="
                f"{int(self.dim * self.mlp_ratio)} (dim={self.dim} × mlp_ratio={self.mlp_ratio!r})"
            )

    def attention(self) -> MultiHeadSelfAttention:
        """The block's :class:`~vit_tutorial.attention.MultiHeadSelfAttention`."""
        args = self.dim, self.num_heads, self.qkv_bias, self.attn_dropout, self.dropout
        return trusted(MultiHeadSelfAttention, *args, self.norm if self.qk_norm else None)

    def feed_forward(self) -> MLP | SwiGLU:
        """The block's :class:`MLP` or :class:`SwiGLU`, of hidden width ``mlp_ratio · dim``."""
        args = self.dim, int(self.dim * self.mlp_ratio), self.dropout
        return trusted(MLP if self.mlp == "gelu" else SwiGLU, *args)

    def normalization(self) -> nn.Module:
        """A fresh ``nn.LayerNorm`` or ``nn.RMSNorm`` of width ``dim``, by ``norm``."""
        return make_norm(self.norm, self.dim, self.norm_eps)

    def layer_scale(self) -> nn.Module:
        """:class:`LayerScale` from ``init_values``, or ``nn.Identity`` (timm's ``ls1``)."""
        if self.init_values is None:
            return nn.Identity()
        return trusted(LayerScale, self.dim, self.init_values)


class EncoderBlock(nn.Module):
    """One pre-norm Transformer encoder block: attention and MLP, each in a residual branch.

    ``dim``, ``num_heads`` and ``**options`` are the fields of :class:`BlockOptions`, ``drop_path``
    each branch's stochastic-depth probability; ``norm_first=False`` makes a :class:`PostNormBlock`.

    Example:
        >>> block, x = EncoderBlock(dim=64, num_heads=4), torch.randn(2, 10, 64)
        >>> out, weights = block.forward_with_weights(x)  # the explicit path, and its weights
        >>> torch.allclose(out, block(x), atol=1e-5), weights.shape
        (True, torch.Size([2, 4, 10, 10]))
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        drop_path: float = 0.0,
        norm_first: bool = True,
        **options: Any,
    ) -> None:
        check_real("drop_path", drop_path, 0.0, 1.0, high_open=True)
        if not check_bool("norm_first", norm_first):
            self.__class__ = PostNormBlock  # the same layers, each LayerNorm after its sum
        self._build(BlockOptions(dim, num_heads, **options), drop_path)

    def _build(self, o: BlockOptions, drop_path: float) -> None:
        super().__init__()  # the layers, in the order of chapter 4's figure
        self.norm1 = o.normalization()  # nn.LayerNorm(dim), or RMSNorm (chapter 11)
        self.attn = o.attention()  # MultiHeadSelfAttention(dim, num_heads), chapter 1
        self.ls1 = o.layer_scale()  # nn.Identity(), or LayerScale (chapter 11)
        self.drop_path1 = trusted(DropPath, drop_path)
        self.norm2 = o.normalization()
        self.mlp = o.feed_forward()  # MLP(dim, mlp_ratio · dim), or SwiGLU
        self.ls2 = o.layer_scale()
        self.drop_path2 = trusted(DropPath, drop_path)

    def forward(self, x: Tensor, attn_bias: Bias = None, rope: Rope | None = None) -> Tensor:
        """Tokens ``x`` ``(B, T, D)`` in and out; ``attn_bias`` broadcasts to ``(B, h, T, T)``,
        ``rope`` rotates queries and keys (:class:`~vit_tutorial.positional.RotaryEmbedding2D`)."""
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x), attn_bias, rope)))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))

    def forward_with_weights(
        self, x: Tensor, attn_bias: Bias = None, rope: Rope | None = None
    ) -> tuple[Tensor, Tensor]:
        """:meth:`forward`, and the attention weights ``(B, h, T, T)`` (explicit path)."""
        a, weights = self.attn.forward_with_weights(self.norm1(x), attn_bias, rope)
        x = x + self.drop_path1(self.ls1(a))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x)))), weights


class PostNormBlock(EncoderBlock):
    """``EncoderBlock(..., norm_first=False)``, post-norm: ``x = LN(x + DropPath(Attention(x)))``,
    then the MLP (Vaswani et al., Section 3.1). A class of its own, as timm's ``ResPostBlock``
    (``timm/models/vision_transformer.py``), which normalises the branch, not the sum."""

    def forward(self, x: Tensor, attn_bias: Bias = None, rope: Rope | None = None) -> Tensor:
        x = self.norm1(x + self.drop_path1(self.ls1(self.attn(x, attn_bias, rope))))
        return self.norm2(x + self.drop_path2(self.ls2(self.mlp(x))))

    def forward_with_weights(
        self, x: Tensor, attn_bias: Bias = None, rope: Rope | None = None
    ) -> tuple[Tensor, Tensor]:
        a, weights = self.attn.forward_with_weights(x, attn_bias, rope)
        x = self.norm1(x + self.drop_path1(self.ls1(a)))
        return self.norm2(x + self.drop_path2(self.ls2(self.mlp(x)))), weights


class Encoder(nn.Module):
    """A stack of ``depth`` pre-norm :class:`EncoderBlock` s with linearly rising drop path.

    Block ``i`` (0-based) drops its branches with probability ``drop_path · i / (depth-1)``, as
    in DeiT and timm: the first block never, the last one most often. ``dim``, ``num_heads``
    and ``**options`` are the fields of :class:`BlockOptions`, the same for every block.

    Example:
        >>> encoder = Encoder(dim=32, depth=3, num_heads=2, drop_path=0.2)
        >>> [round(block.drop_path1.p, 2) for block in encoder.blocks]
        [0.0, 0.1, 0.2]
    """

    def __init__(
        self, dim: int, depth: int, num_heads: int, drop_path: float = 0.0, **options: Any
    ) -> None:
        self._build(BlockOptions(dim, num_heads, **options), drop_path_rates(drop_path, depth))

    def _build(self, o: BlockOptions, rates: list[float]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(trusted(EncoderBlock, o, rate) for rate in rates)

    def _with_biases(self, attn_bias: Biases, rope: Ropes = None) -> Iterator[tuple]:
        n = len(self.blocks)
        per_block = []
        for name, value in [("attention bias", attn_bias), ("rope", rope)]:
            if value is None or isinstance(value, Tensor) or (name == "rope" and callable(value)):
                value = [value] * n
            elif len(value) != n:
                raise ValueError(f"expected one {name} per block ({n}), got {len(value)}")
            per_block.append(value)
        return zip(self.blocks, *per_block, strict=True)

    def forward(self, x: Tensor, attn_bias: Biases = None, rope: Ropes = None) -> Tensor:
        """Apply every block in turn to tokens ``(B, T, D)``, with one ``attn_bias`` or one each,
        and one ``rope`` or one each (chapter 11's mixed RoPE learns one per block)."""
        for block, bias, rotate in self._with_biases(attn_bias, rope):
            x = block(x, bias, rotate)
        return x

    def forward_with_weights(
        self, x: Tensor, attn_bias: Biases = None, rope: Ropes = None
    ) -> tuple[Tensor, list[Tensor]]:
        """:meth:`forward`, and the attention weights of every block, ``(B, h, T, T)`` each."""
        maps = []
        for block, bias, rotate in self._with_biases(attn_bias, rope):
            x, weights = block.forward_with_weights(x, bias, rotate)
            maps.append(weights)
        return x, maps
