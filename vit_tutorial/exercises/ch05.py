"""Checkers for chapter 5: the parameter count of a ViT, classification done right, pooling
the encoder's tokens into one vector per image, and a prediction of what smaller patches cost."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from vit_tutorial.exercises._common import (
    call_safely,
    checker,
    close,
    expect_number,
    grade_tensor,
    passed,
    refuse,
)
from vit_tutorial.exercises._predictions import grade_prediction
from vit_tutorial.vit import PRESETS, VisionTransformer, ViTConfig, vit_flops

__all__ = ["check_param_count", "check_predict", "check_pooling", "check_patch_flops_prediction"]


def _count(config: ViTConfig) -> int:
    with torch.device("meta"):  # shapes only: no memory, no initialisation cost
        return sum(p.numel() for p in VisionTransformer(config).parameters())


def _by_offset(c: ViTConfig) -> dict[int, str]:
    """The explanation of each amount (got - right) that a usual mistake puts a formula off by.

    Several parts can hold the same number of parameters, so a count that is off by one of
    them cannot tell which part is missing: the explanation then lists every candidate.
    """
    found: dict[int, list[str]] = {}
    for what, delta in _slips(c).items():
        if delta != 0:
            found.setdefault(delta, []).append(what)
    return {delta: "; or ".join(whats) for delta, whats in found.items()}


def _slips(c: ViTConfig) -> dict[str, int]:
    """The usual slips of a ViT parameter count: (what went wrong, got - right)."""
    D, L, K, r = c.dim, c.depth, c.num_classes, int(c.dim * c.mlp_ratio)
    G = c.image_size // c.patch_size  # the grid's side
    T = G * G + 1  # tokens: N = G² patches and the class token
    return {
        "one D-vector is missing: the bias of the patch embedding (one per output "
        "channel of the conv), the class token, or its row of the position table (N + 1 rows "
        "for N patches)": -D,
        "2·D numbers are missing: the final LayerNorm (after the last block, a scale "
        "γ and a shift β of D numbers each), or two D-vectors among the patch embedding's "
        "bias, the class token and its position row": -2 * D,
        "the position embeddings ((Gh·Gw + 1)·D) are missing": -T * D,
        f"the grid has (H/P)² = {G * G} patches, not H/P = {G}: the position "
        "table has N + 1 rows": -(G * G - G) * D,
        "the LayerNorms are missing: two per block and one at the end, "
        "each with a scale γ and a shift β of D numbers": -(L * 4 * D + 2 * D),
        "the LayerNorms' shifts β are missing: each LayerNorm has D of them besides its scale γ": (
            -(2 * L + 1) * D
        ),
        "the biases of the convolution and the Linear layers are missing": (
            -(D + L * (3 * D + D + r + D) + K)
        ),
        "the query, key and value biases are missing (qkv_bias=True: 3·D per block)": -3 * L * D,
        "the MLP's two biases are missing (mlp_ratio·D + D numbers per block)": -L * (r + D),
        "the head's bias is missing (num_classes numbers)": -K,
        "the classification head (D·num_classes + num_classes) is missing": -(D * K + K),
        "the attention's output projection (D² + D per block) is missing": -L * (D * D + D),
        "the attention's input projection makes queries, keys and "
        "values: 3·D² weights and 3·D biases, not D² + D": -(L * (2 * D * D + 2 * D)),
        f"the MLP's hidden width is mlp_ratio·D = {r} here, not 4·D = {4 * D}": (
            L * (4 * D - r) * (2 * D + 1)
        ),
        f"the patch embedding's kernel has C·P²·D weights: C = {c.in_channels} channels": (
            -(c.in_channels - 1) * c.patch_size**2 * D
        ),
    }


def _explain(fn: Callable[[ViTConfig], int], cases: list[ViTConfig], failing: ViTConfig) -> str:
    """The slips that put ``fn`` off by their own amount on every config, named for
    ``failing``; else every slip that fits ``failing`` alone (two can, as the qkv biases and
    the MLP's with mlp_ratio = 2: 3·D against r + D per block)."""
    offs = []
    for c in cases:
        try:
            offs.append(int(fn(c)) - _count(c))
        except Exception:  # the config fn failed on is compared; the others may raise
            offs.append(None)
    table = [list(_slips(c).values()) for c in cases]
    fitting = [
        what
        for i, what in enumerate(_slips(failing))
        if all(off is None or deltas[i] == off for deltas, off in zip(table, offs))
    ]
    general = "compare it term by term with the per-component table of the chapter"
    off = offs[cases.index(failing)]
    return "; or ".join(fitting) if fitting else _by_offset(failing).get(off, general)


@checker
def check_param_count(fn: Callable[[ViTConfig], int]) -> None:
    """Grade a learner's ``fn(config) -> int``, the number of parameters of a ViT by formula.

    The configs have a class token, learned positions, a patch stem, ``qkv_bias=True`` and
    square images; the answer is compared with :class:`~vit_tutorial.vit.VisionTransformer`'s.

    Example:
        >>> check_param_count(_count)
        Correct! check_param_count: exact on 4 configs, from 0.1M to 304.3M parameters.
    """
    small_task = dict(image_size=32, in_channels=1, num_classes=10)  # 32×32 grey, 10 classes
    cases = [
        ViTConfig(**small_task, patch_size=8, dim=64, depth=3, num_heads=4, mlp_ratio=2.0),
        ViTConfig(),  # ViT-B/16
        ViTConfig(patch_size=32),  # ViT-B/32
        ViTConfig(dim=1024, depth=24, num_heads=16),  # ViT-L/16
    ]
    for c in cases:
        what = f"dim={c.dim}, depth={c.depth}"
        want, got = _count(c), expect_number(call_safely(fn, (c,), what), what, "the parameters")
        if got != want:
            keys = ("image_size", "patch_size", "dim", "depth", "mlp_ratio", "num_classes")
            where = ", ".join(f"{key}={getattr(c, key)}" for key in keys)
            off = f"you get {got:,}, the model has {want:,} ({got - want:+,})"
            raise AssertionError(f"for {where} {off}: {_explain(fn, cases, c)}")
    sizes = f"from {min(map(_count, cases)) / 1e6:.1f}M to {max(map(_count, cases)) / 1e6:.1f}M"
    passed(f"exact on {len(cases)} configs, {sizes} parameters.")


def _reference(model: VisionTransformer, images: Tensor, k: int) -> tuple[Tensor, Tensor]:
    model.eval()
    with torch.no_grad():
        return model(images).softmax(dim=-1).topk(k, dim=-1)


def _model_with_dropout() -> VisionTransformer:
    """A small ViT with dropout and drop path, whose head gives confident predictions."""
    small = ViTConfig(image_size=16, patch_size=4, dim=32, depth=2, num_heads=2, num_classes=10)
    model = VisionTransformer(small, dropout=0.3, drop_path=0.3)
    torch.nn.init.normal_(model.head.weight, std=0.5)  # a zero head would predict uniformly
    return model


def _call_in_training_mode(
    fn: Callable[[VisionTransformer, Tensor, int], tuple[Tensor, Tensor]],
    model: VisionTransformer,
    images: Tensor,
    k: int,
) -> tuple[object, list[bool]]:
    """``fn(model, images, k)`` on ``model`` in training mode, and ``model.training`` at each
    forward pass of the model that ``fn`` runs."""
    model.train()
    modes: list[bool] = []
    hook = model.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    torch.manual_seed(1)
    try:
        got = fn(model, images.clone(), k)
    finally:
        hook.remove()
    return got, modes


def _check_top_k(got: object, k: int) -> tuple[Tensor, Tensor]:
    """``got`` as ``(probabilities, classes)``, once checked that both have shape ``(4, k)``."""
    if not (isinstance(got, tuple) and len(got) == 2 and all(isinstance(t, Tensor) for t in got)):
        raise AssertionError("fn must return a tuple (probabilities, classes) of two tensors")
    got_p, got_i = got
    if got_i.is_floating_point() and not got_p.is_floating_point():
        raise AssertionError(
            "the two outputs are swapped: return (probabilities, classes), in the order of "
            "torch.topk's (values, indices)"
        )
    if got_p.shape != (4, k) or got_i.shape != (4, k):
        raise AssertionError(
            f"for 4 images and k={k} both outputs must have shape (4, {k}), got "
            f"{tuple(got_p.shape)} and {tuple(got_i.shape)}; topk over dim=-1"
        )
    return got_p, got_i


@checker
def check_predict(fn: Callable[[VisionTransformer, Tensor, int], tuple[Tensor, Tensor]]) -> None:
    """Grade a learner's ``fn(model, images, k) -> (probabilities, classes)``, the top k.

    ``model`` has dropout and is in training mode: ``fn`` must evaluate it in eval mode,
    without autograd, softmax over the classes, and return both ``(B, k)``.

    Example:
        >>> check_predict(_reference)
        Correct! check_predict: eval mode, no autograd graph, softmax over the classes, top 3.
    """
    model = _model_with_dropout()  # @checker seeds the random state, restores the learner's
    images = torch.randn(4, 3, 16, 16)
    k = 3
    want_p, want_i = _reference(model, images, k)
    with torch.no_grad():
        logits = model(images)  # eval mode, left by _reference
    got, modes = _call_in_training_mode(fn, model, images, k)
    got_p, got_i = _check_top_k(got, k)
    slips = {  # restoring the mode afterwards, as training.predict does, is fine
        "the model ran in training mode: call model.eval() first, or dropout and drop path make "
        "the predictions random": any(modes),
        "the result carries an autograd graph: run the model inside torch.no_grad() (or "
        "torch.inference_mode()) to save memory and time": got_p.requires_grad,
        "these are logits, not probabilities: apply softmax(dim=-1) first": close(
            got_p, logits.topk(k, dim=-1).values
        ),
        "the softmax runs over the batch (dim=0): it must run over the classes (dim=-1), so "
        "each image's probabilities sum to 1": close(got_p, logits.softmax(0).topk(k).values),
        "the top-k probabilities or classes differ from model(images).softmax(-1).topk(k) in "
        "eval mode": not (close(got_p, want_p) and torch.equal(got_i, want_i)),
    }
    refuse(slips)
    passed(f"eval mode, no autograd graph, softmax over the classes, top {k}.")


def _pool(tokens: Tensor, pool: str, num_prefix_tokens: int) -> Tensor:
    """The reference: the class token, or the mean of the tokens after the prefix ones."""
    return tokens[:, 0] if pool == "cls" else tokens[:, num_prefix_tokens:].mean(dim=1)


def _pooling_shape(where: str, tokens: Tensor, got: Tensor) -> str:
    """Why ``got`` does not have the shape ``(B, D)`` of a pooled batch of ``tokens``."""
    B, T, D = tokens.shape
    if got.shape == (T, D):
        if close(got, tokens.mean(dim=0)):
            hint = "you averaged over the batch axis (dim=0): average over the tokens, dim=1"
        else:
            hint = (
                "you indexed the batch axis: the tokens of image b are tokens[b], take tokens[:, i]"
            )
    elif got.shape == (B, T):
        hint = "you reduced the feature axis (dim=-1): each image keeps its D features"
    elif got.shape == (B, 1, D):
        hint = "the token axis is still there: index it, tokens[:, 0], or mean(dim=1)"
    else:
        hint = "pool over the token axis (dim=1) only"
    return f"for {where}: expected shape (B, D) = (2, 8), got {tuple(got.shape)}; {hint}"


def _pooling_slips(tokens: Tensor, pool: str, k: int) -> list[tuple[str, Tensor]]:
    """What the usual wrong poolings return, for ``pool`` with ``k`` prefix tokens."""
    want = _pool(tokens, pool, k)
    normalised = (
        "you normalised the pooled vector: leave that to the model (forward_features "
        "has normalised the tokens for 'cls'; fc_norm normalises the mean for 'mean')",
        torch.nn.functional.layer_norm(want, want.shape[-1:]),
    )
    if pool == "cls":
        average = "pool='cls' takes the class token alone, tokens[:, 0], not an average"
        return [
            normalised,
            ("you took the last token: the class token is put in front, at index 0", tokens[:, -1]),
            (average, tokens.mean(dim=1)),
            (average, tokens[:, k:].mean(dim=1)),
        ]
    skipped = (
        "you skipped token 0, but there is no prefix token here: average all T tokens"
        if k == 0
        else f"you skipped one token, but there are num_prefix_tokens={k} prefix tokens: "
        f"average tokens[:, {k}:]"
    )
    class_token_in = (
        f"you averaged the class token in: skip the num_prefix_tokens={k} prefix "
        f"token(s) and average the patch tokens only, tokens[:, {k}:].mean(dim=1)"
    )
    return [
        normalised,
        *([(class_token_in, tokens.mean(dim=1))] if k > 0 else []),
        (skipped, tokens[:, 1:].mean(dim=1)),
        (
            "you summed the patch tokens: divide by their number, or use mean(dim=1)",
            tokens[:, k:].sum(dim=1),
        ),
        ("pool='mean' averages the patch tokens; tokens[:, 0] is pool='cls'", tokens[:, 0]),
    ]


@checker
def check_pooling(fn: Callable[[Tensor, str, int], Tensor]) -> None:
    """Grade a learner's ``fn(tokens, pool, num_prefix_tokens) -> (B, D)``, the pooled tokens.

    ``pool='cls'`` takes ``tokens[:, 0]``; ``pool='mean'`` averages the tokens after the
    ``num_prefix_tokens`` prefix ones, as timm's ``global_pool='avg'``; no LayerNorm.

    Example:
        >>> check_pooling(_pool)
        Correct! check_pooling: the class token, or the mean of the patch tokens, on 5 cases.
    """
    cases = [("cls", 1, 5), ("mean", 0, 4), ("mean", 1, 5), ("mean", 2, 6), ("cls", 2, 6)]
    for pool, k, T in cases:
        tokens = torch.randn(2, T, 8)
        where = f"pool={pool!r}, num_prefix_tokens={k}, tokens of shape (B, T, D) = (2, {T}, 8)"
        grade_tensor(
            fn,
            (tokens, pool, k),
            _pool(tokens, pool, k),
            f"for {where}",
            _pooling_slips,
            call=where,
            not_tensor=f"for {where}: return a tensor, got {{got}}",
            expected=functools.partial(_pooling_shape, where, tokens),
            otherwise="pool='cls' takes the class token, tokens[:, 0]"
            if pool == "cls"
            else f"pool='mean' is tokens[:, num_prefix_tokens:].mean(dim=1), here tokens[:, {k}:]",
        )
    passed(f"the class token, or the mean of the patch tokens, on {len(cases)} cases.")


@checker
def check_patch_flops_prediction(predicted_flops_factor: Any) -> None:
    """Grade a prediction: how many times ViT-B/16's FLOPs grow with patch size 8 (ViT-B/8).

    Exact, ``vit_flops`` of the two configurations at 224×224; ±5% passes.

    Example:
        >>> check_patch_flops_prediction(4.5)
        Correct! check_patch_flops_prediction: you predicted 4.5 times the FLOPs;
        measured: 4.45 (vit_flops: 35.1 GFLOPs at P = 16, 156.3 at P = 8).
    """
    b16 = PRESETS["vit_base_patch16_224"]
    b8 = dataclasses.replace(b16, patch_size=8)
    (f16, f8), (t16, t8) = (vit_flops(b16), vit_flops(b8)), ((224 // 16) ** 2 + 1, 785)
    quadratic = [b.depth * 4 * t**2 * b.dim / f for b, t, f in ((b16, t16, f16), (b8, t8, f8))]
    share = f"{quadratic[0]:.0%} of the FLOPs at 197 tokens, {quadratic[1]:.0%} at 785"
    slips = {
        f"That is the token ratio ({t8}/{t16}): the linear layers grow by it, but attention's "
        f"T² part by its square ({share}).": t8 / t16,
        f"Only attention's T² part grows with the square of the tokens, and it is {share}: "
        "the linear layers grow 4×.": (t8 / t16) ** 2,
        "Halving P halves both sides of the grid: N grows 4×, not 2×.": 2.0,
        "Smaller patches make more tokens, and more FLOPs, not fewer.": 0.25,
    }
    grade_prediction(
        "check_patch_flops_prediction",
        "predicted_flops_factor",
        predicted_flops_factor,
        f8 / f16,
        what="times the FLOPs",
        tolerance=0.05,
        slips=slips,
        source=f"vit_flops: {f16 / 1e9:.1f} GFLOPs at P = 16, {f8 / 1e9:.1f} at P = 8",
    )
