"""Checkers for chapter 11, the ViT of the mid-2020s: the patch grid behind register tokens, the
parameters LayerScale adds, the shapes inside the MAP head, and how large a logit QK-norm allows.

The answers that are a tensor, a count or a shape are graded by one comparison, ``_grade``
(the checkers' shared ``grade_answer``): the answer against the package's, then against what
each usual slip returns, whose explanation it raises. Shapes: B batch, T tokens, p prefix
tokens, D width, h heads, d = D/h, Gh×Gw grid.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor
from torch.overrides import TorchFunctionMode

from vit_tutorial.attention import MultiHeadSelfAttention
from vit_tutorial.backbone import to_format
from vit_tutorial.exercises._common import (
    Slips,
    as_number,
    call_safely,
    checker,
    close,
    diagnose,
    grade_answer,
    kind_of,
    passed,
    shape_of,
)
from vit_tutorial.exercises._predictions import grade_prediction
from vit_tutorial.modern import AttentionPool
from vit_tutorial.vit import VisionTransformer, ViTConfig

__all__ = [
    "check_prefix_to_grid",
    "check_layer_scale_parameters",
    "check_map_head_shapes",
    "check_qk_norm_logit_prediction",
]

_KINDS = {Tensor: "a tensor", numbers.Integral: "an int", tuple: "a shape, a tuple of ints"}


def _shown(value: Any) -> str:
    """A value as a message shows it: a tensor by its shape, a count with separators."""
    if isinstance(value, Tensor):
        return f"shape {shape_of(value)}"
    if isinstance(value, numbers.Integral):
        return f"{value:,}"
    return str(tuple(value) if isinstance(value, tuple) else value)


def _grade(what: str, got: Any, want: Any, slips: Slips = (), otherwise: str = "") -> None:
    """Grade ``got``, a tensor, a count or a shape, against ``want`` (:func:`grade_answer`):
    one of another shape or number is shown beside ``want``, with the explanation of the slip it
    is, or ``otherwise``."""
    kind = next(k for k in _KINDS if isinstance(want, k))
    if kind is numbers.Integral and (n := as_number(got)) is not None and float(n).is_integer():
        got = int(n)  # a NumPy int, a 0-d tensor of one, 384.0: a count
    if not isinstance(got, kind) or isinstance(got, bool):
        raise AssertionError(f"{what}: return {_KINDS[kind]}, got {kind_of(got)}")
    slips = list(slips)

    def expected(got: Any) -> str:
        why = diagnose(got, slips, otherwise, atol=0.0)
        return f"{what}: expected {_shown(want)}, got {_shown(got)}; {why}"

    grade_answer(
        got,
        want,
        what,
        slips,
        expected=expected,
        otherwise="the shape is right but not the values; " + otherwise,
        atol=0.0,
    )


def _prefix_to_grid(tokens: Tensor, num_prefix_tokens: int, grid_size: tuple[int, int]) -> Tensor:
    """The reference, as ``forward_intermediates`` does it: drop the prefix, patches NCHW."""
    return to_format(tokens[:, num_prefix_tokens:], "NCHW", grid_size)  # (B, D, Gh, Gw)


def _grid_slips(tokens: Tensor, p: int, grid: tuple[int, int]) -> list[tuple[str, Tensor]]:
    """What the usual wrong answers return for ``tokens`` ``(B, p + Gh·Gw, D)``."""
    (gh, gw), n, c = grid, grid[0] * grid[1], min(p, 1)  # c: the class token, if any
    patches = tokens[:, p:]  # (B, N, D)
    row_major = "token n of the patches is at row n // Gw, column n % Gw"
    transposed = f"the grid is transposed, (Gw, Gh); grid_size is (Gh, Gw), and {row_major}"
    return [
        (
            f"you kept the first Gh·Gw tokens and dropped the last {p}: the prefix tokens come "
            f"first (class, then registers), so drop tokens[:, :num_prefix_tokens]",
            to_format(tokens[:, :n], "NCHW", grid),
        ),
        (
            f"you dropped the class token only: the {p - 1} registers after it are prefix "
            f"tokens too; drop all num_prefix_tokens = {p}",
            to_format(tokens[:, c : c + n], "NCHW", grid),
        ),
        (
            "that is channels-last (B, Gh, Gw, D), the tokens' layout; forward_intermediates "
            "returns NCHW, channels first: (B, D, Gh, Gw)",
            rearrange(patches, "b (h w) d -> b h w d", h=gh),
        ),
        (
            "a reshape is not a transpose: reshaping (B, N, D) to (B, D, Gh, Gw) mixes tokens "
            "and channels; move D first (transpose(1, 2)), then reshape, or rearrange "
            "'b (h w) d -> b d h w'",
            patches.reshape(len(tokens), -1, gh, gw),
        ),
        (
            f"you filled the grid column by column; the patches are row-major: {row_major}",
            rearrange(patches, "b (w h) d -> b d h w", h=gh),
        ),
        (transposed, rearrange(patches, "b (h w) d -> b d w h", h=gh)),
        (transposed, to_format(patches, "NCHW", (gw, gh))),
    ]


def _crash_hint(fn: Callable, tokens: Tensor, p: int, grid: tuple[int, int]) -> str:
    """Why ``fn`` crashes with ``p`` prefix tokens, when it is right with none or one."""
    hints = {
        0: "it is right without prefix tokens: drop tokens[:, :num_prefix_tokens] first",
        1: f"it is right with one prefix token, the class token; here the class token and "
        f"{p - 1} registers come first: drop all num_prefix_tokens = {p}",
    }
    for q, hint in hints.items():
        try:
            with torch.no_grad():
                got = fn(tokens[:, p - q :].clone(), q, grid) if q < p else None
        except Exception:  # the crash is reported; this only looks for its cause
            continue
        if isinstance(got, Tensor) and close(got, _prefix_to_grid(tokens, p, grid), atol=0.0):
            return hint
    return ""


@checker
def check_prefix_to_grid(fn: Callable[[Tensor, int, tuple[int, int]], Tensor]) -> None:
    """Grade ``fn(tokens, num_prefix_tokens, grid_size) -> (B, D, Gh, Gw)``: the patch grid.

    ``tokens`` ``(B, p + Gh·Gw, D)`` are a ViT's, ``num_prefix_tokens`` ``p`` of them first (the
    class token, then the registers); the patch tokens after them are row-major over the grid
    ``(Gh, Gw)``. The answer drops every prefix token and lays the patches out channels first,
    as timm's ``forward_intermediates`` (``output_fmt='NCHW'``) does.

    Example:
        >>> check_prefix_to_grid(_prefix_to_grid)
        Correct! check_prefix_to_grid: every prefix token dropped, the patches row-major,
        channels first, with 5, 1 and 0 prefix tokens.
    """
    generator = torch.Generator().manual_seed(0)
    cases = [(2, 5, (3, 7), 4), (3, 1, (4, 2), 5), (1, 0, (3, 3), 6)]  # B, p, (Gh, Gw), D
    for B, p, grid, D in cases:
        tokens = torch.randn(B, p + grid[0] * grid[1], D, generator=generator)
        what = f"tokens {tuple(tokens.shape)}, num_prefix_tokens={p}, grid_size={grid}"
        try:
            got = call_safely(fn, (tokens.clone(), p, grid), what)
        except AssertionError as error:
            if not (hint := _crash_hint(fn, tokens, p, grid)):
                raise
            raise AssertionError(f"{error}; {hint}") from error.__cause__
        otherwise = f"cell [b, :, i, j] is patch token i·Gw + j, tokens[b, {p} + i·{grid[1]} + j]"
        _grade(what, got, _prefix_to_grid(tokens, p, grid), _grid_slips(tokens, p, grid), otherwise)
    passed(
        "every prefix token dropped, the patches row-major, channels first, with "
        f"{', '.join(str(c[1]) for c in cases[:-1])} and {cases[-1][1]} prefix tokens."
    )


def _layer_scale_count(dim: int, depth: int) -> int:
    """The parameters LayerScale adds to the package's ViT of width ``dim`` and ``depth``."""
    small = dict(image_size=16, patch_size=8, in_channels=1, num_classes=10, num_heads=1)
    config = ViTConfig(**small, dim=dim, depth=depth)
    with torch.device("meta"):  # shapes only
        models = [VisionTransformer(config, init_values=v) for v in (None, 1e-5)]
    without, with_ = (sum(p.numel() for p in m.parameters()) for m in models)
    return with_ - without


@checker
def check_layer_scale_parameters(fn: Callable[[int, int], int]) -> None:
    """Grade ``fn(dim, depth) -> int``: the parameters LayerScale adds to a ViT.

    The count is that of :class:`~vit_tutorial.vit.VisionTransformer` with ``init_values``
    less the same model without (built on the meta device): each block scales both residual
    branches, attention and MLP, with a γ of its own (timm's ``ls1.gamma``, ``ls2.gamma``).

    Example:
        >>> check_layer_scale_parameters(_layer_scale_count)
        Correct! check_layer_scale_parameters: exact on 3 configs, 9,216 for ViT-S
        (dim=384, depth=12), as the model counts them.
    """
    counts = []
    for D, L in [(64, 3), (384, 12), (96, 5)]:
        what = f"dim={D}, depth={L}"
        want = _layer_scale_count(D, L)
        counts.append(want)
        slips = [
            (
                "that is one γ per block: a block has two residual branches, attention and "
                "MLP, and each has its own (ls1 and ls2)",
                D * L,
            ),
            ("γ is a vector, a scale per channel (D numbers), not one number per branch", 2 * L),
            ("that is one γ for the whole model; each branch of each block has its own", D),
            ("that is one block's two; each of the depth blocks has its own", 2 * D),
            (
                "CaiT writes diag(λ), a D×D matrix, but only its D diagonal entries are learned",
                2 * D * D * L,
            ),
        ]
        got = call_safely(fn, (D, L), what)
        _grade(what, got, want, slips, "count the γ vectors, and the numbers in each")
    passed(
        f"exact on {len(counts)} configs, {counts[1]:,} for ViT-S (dim=384, depth=12), as the "
        "model counts them."
    )


class _Caught(TorchFunctionMode):
    """Catches the arguments of the calls of ``F.scaled_dot_product_attention`` it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.args: tuple = ()

    def __torch_function__(
        self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        if func is F.scaled_dot_product_attention:
            self.args = args
        return func(*args, **(kwargs or {}))


def _map_shapes(batch: int, tokens: int, dim: int, heads: int) -> dict[str, tuple[int, ...]]:
    """The shapes measured in the package's :class:`~vit_tutorial.modern.AttentionPool`: the
    queries and keys its attention gets, its weights and its output."""
    with torch.device("meta"):  # shapes only
        pool, x = AttentionPool(dim, heads), torch.zeros(batch, tokens, dim)
        with _Caught() as caught:
            pooled = pool(x)
        weights = pool.weights(x)
    q, k = caught.args[:2]
    shapes = {"queries": q, "keys": k, "weights": weights, "pooled": pooled}
    return {name: tuple(t.shape) for name, t in shapes.items()}


#: What each shape holds, for a message.
_MEANING = {
    "queries": "(B, h, 1, d): the one learned query, for each image and head",
    "keys": "(B, h, T, d): a key for each token, for each image and head",
    "weights": "(B, h, 1, T): the query's row of weights over the T tokens",
    "pooled": "(B, D): the query's output, one vector per image",
}


def _map_slips(B: int, T: int, D: int, h: int) -> dict[str, list[tuple[str, tuple]]]:
    """The usual wrong shapes of each entry, with their explanations."""
    d = D // h
    self_attention = "as in self-attention; the MAP head has one learned query (L = 1), not T"
    width = f"the heads split D: each has width d = D/h = {d}, not D = {D}"
    return {
        "queries": [
            (f"T rows of queries {self_attention}", (B, h, T, d)),
            (width, (B, h, 1, D)),
            ("the learned query (1, 1, D) serves every image: it is expanded to B", (1, h, 1, d)),
            ("split the query into h heads of width d: (B, h, 1, d)", (B, 1, D)),
        ],
        "keys": [
            (width, (B, h, T, D)),
            ("the keys come from the T tokens; only the query is learned", (B, h, 1, d)),
            ("split the keys into h heads of width d: (B, h, T, d)", (B, T, D)),
        ],
        "weights": [
            (f"a T × T map {self_attention}", (B, h, T, T)),
            ("one row per query, one column per key: (B, h, L, T) with L = 1", (B, h, T, 1)),
        ],
        "pooled": [
            ("the query axis is still there: the head returns its output, out[:, 0]", (B, 1, D)),
            ("that is one vector per token; the MAP head pools them into one per image", (B, T, D)),
        ],
    }


def _as_shapes(got: Any, what: str) -> dict[str, Any]:
    """The learner's dict with every shape as a tuple, or an AssertionError."""
    if not isinstance(got, Mapping):
        raise AssertionError(f"{what}: return a dict of shapes, got {type(got).__name__}")
    if missing := [name for name in _MEANING if name not in got]:
        raise AssertionError(f"{what}: the dict lacks {missing}; its keys are {list(_MEANING)}")
    return {k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in got.items()}


@checker
def check_map_head_shapes(fn: Callable[[int, int, int, int], Mapping[str, tuple]]) -> None:
    """Grade ``fn(batch, tokens, dim, heads) -> dict``: the shapes inside the MAP head.

    The dict gives, as tuples, the shapes of the ``"queries"``, ``"keys"`` and attention
    ``"weights"`` of :class:`~vit_tutorial.modern.AttentionPool` (timm's
    ``AttentionPoolLatent``, one learned query), and of the ``"pooled"`` vectors it returns,
    each measured on the package's head.

    Example:
        >>> check_map_head_shapes(_map_shapes)
        Correct! check_map_head_shapes: one learned query per head attends over the T
        tokens, on 2 cases.
    """
    cases = [(2, 10, 32, 4), (3, 197, 768, 12)]  # B, T, D, h
    for B, T, D, h in cases:
        what = f"batch={B}, tokens={T}, dim={D}, heads={h}"
        got = _as_shapes(call_safely(fn, (B, T, D, h), what), what)
        want, slips = _map_shapes(B, T, D, h), _map_slips(B, T, D, h)
        for name, meaning in _MEANING.items():
            _grade(f"{what}, {name!r}", got[name], want[name], slips[name], f"{name}: {meaning}")
    passed(f"one learned query per head attends over the T tokens, on {len(cases)} cases.")


def _largest_qk_norm_logit(head_dim: int, scale: float) -> tuple[float, float]:
    """The largest ``q·k/√d`` of aligned queries and keys (``q = k``) of norm about ``scale``,
    after the ``q_norm`` and ``k_norm`` of the package's attention, and before them."""
    attn = MultiHeadSelfAttention(dim=head_dim, num_heads=1, qk_norm="layernorm")
    x = torch.randn(64, head_dim, generator=torch.Generator().manual_seed(0))
    x = scale * x / x.norm(dim=-1, keepdim=True)  # (64, d): 64 directions, each as q and k
    with torch.no_grad():
        normed = (attn.q_norm(x) @ attn.k_norm(x).T).max() / math.sqrt(head_dim)
    raw = (x @ x.T).max() / math.sqrt(head_dim)
    return float(normed), float(raw)


@checker
def check_qk_norm_logit_prediction(predicted_max_logit: Any) -> None:
    """Grade a prediction: the largest attention logit ``q·k/√d`` that QK-norm allows, d = 64.

    With LayerNorm (unit gain, zero bias) on each head's queries and keys, as
    ``MultiHeadSelfAttention(qk_norm='layernorm')``, the logit is measured on aligned queries
    and keys 10,000 times the size of unit vectors: without QK-norm it grows with their square,
    with it stays near 8. A prediction within ±5% passes; the usual slips (d, 1, 1/√d, no
    bound at all) are named.

    Example:
        >>> check_qk_norm_logit_prediction(8)
        Correct! check_qk_norm_logit_prediction: you predicted 8 as the largest
        logit; measured: 8 (MultiHeadSelfAttention's q_norm and k_norm, d = 64, on
        aligned queries and keys (q = k) of norm 1e+04; without them: 1e+07).
    """
    d, scale = 64, 1e4
    actual, raw = _largest_qk_norm_logit(d, scale)
    slips = [
        (f"{d} is q·k itself, |q|·|k| = √d·√d; the logit divides it by √d.", d),
        (
            "That is the bound of unit vectors (a cosine); LayerNorm leaves each vector with "
            "mean 0 and variance 1 over its d entries: its norm is √d.",
            1,
        ),
        (
            "After LayerNorm a vector's norm is √d, not 1: q·k ≤ d, then divide by √d.",
            1 / math.sqrt(d),
        ),
    ]
    unbounded = not abs(as_number(predicted_max_logit) or 0) <= 10 * d  # inf and nan too
    grade_prediction(
        "check_qk_norm_logit_prediction",
        "predicted_max_logit",
        predicted_max_logit,
        actual,
        what="as the largest logit",
        tolerance=0.05,
        slips=slips,
        source=f"MultiHeadSelfAttention's q_norm and k_norm, d = {d}, on aligned queries and "
        f"keys (q = k) of norm {scale:.0e}; without them: {raw:.0e}",
        otherwise=(
            "QK-norm bounds it: whatever the size of q and k, LayerNorm gives each the norm "
            "√d, and q·k ≤ |q|·|k|."
            if unbounded
            else None
        ),
    )
