"""Checkers for chapter 6: AdamW's parameter groups, the warm-up + cosine schedule, the
cross-entropy with label smoothing, and a prediction: the ablation's ViT without position."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vit_tutorial.engine import param_groups, warmup_cosine
from vit_tutorial.exercises._common import (
    call_safely,
    checker,
    close,
    diagnose,
    expect_number,
    grade_loss,
    passed,
    refuse,
    scalar_loss,
)
from vit_tutorial.exercises._predictions import grade_prediction
from vit_tutorial.notebook import repository_file
from vit_tutorial.vit import VisionTransformer

__all__ = ["check_param_groups", "check_lr_schedule", "check_smoothed_cross_entropy"]
__all__ += ["check_no_position_prediction"]


def _lr_at(step: int, lr: float, warmup_steps: int, total_steps: int) -> float:
    """The reference, in closed form."""
    if step < warmup_steps:
        return lr * (step + 1) / (warmup_steps + 1)
    return lr * (1 + math.cos(math.pi * (step - warmup_steps) / (total_steps - warmup_steps))) / 2


_FORMULAS = "compare with the two formulas in the chapter"


def _schedule_slips(t: int, lr: float, w: int, S: int) -> dict[str, Callable[[float], bool]]:
    """Tests that recognise the rate of step ``t`` under the usual wrong schedules."""

    def near(rate: float, abs_tol: float = 0.0) -> Callable[[float], bool]:
        return lambda got: math.isclose(got, rate, rel_tol=1e-6, abs_tol=abs_tol)

    if t < w:
        return {
            "your warm-up starts at 0, so the first step does not learn at all; "
            "step t uses lr·(t + 1)/(w + 1), reaching lr at step w": near(lr * t / w),
            f"your warm-up reaches lr one step early, at step w - 1 = {w - 1}, and "
            f"steps w - 1 and w both use the peak; divide by w + 1: step t uses "
            f"lr·(t + 1)/(w + 1), reaching lr at step w, "
            "where the cosine starts": near(lr * (t + 1) / w),
            "there is no warm-up: the rate must rise linearly during the first w steps": near(
                _lr_at(t, lr, 0, S)
            ),
        }
    return {
        "the cosine must start after the warm-up: its phase is π(t - w)/(S - w), "
        "not πt/S, or the peak rate is never used": near(lr * (1 + math.cos(math.pi * t / S)) / 2),
        "the cosine goes negative: use (1 + cos(·)) / 2, which falls from 1 to 0": near(
            lr * math.cos(math.pi * (t - w) / (S - w)), abs_tol=1e-12
        ),
    }


@checker
def check_lr_schedule(fn: Callable[[int, float, int, int], float]) -> None:
    """Grade a learner's ``fn(step, lr, warmup_steps, total_steps) -> float``.

    The rate of step ``t`` (from 0) under :func:`~vit_tutorial.engine.warmup_cosine`, against
    the rates torch's schedulers produce: ``lr · (t + 1) / (w + 1)`` while ``t < w``, then
    ``lr · (1 + cos(π (t - w) / (S - w))) / 2``.

    Example:
        >>> check_lr_schedule(_lr_at)
        Correct! check_lr_schedule: matches torch's LinearLR + CosineAnnealingLR at every
        step of 3 schedules.
    """
    for lr, w, S in [(1e-3, 5, 50), (0.5, 10, 30), (2e-3, 1, 7)]:
        optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)
        scheduler = warmup_cosine(optimizer, w, S)
        for t in range(S):
            want = optimizer.param_groups[0]["lr"]
            optimizer.step()
            scheduler.step()
            where = f"step {t} of lr={lr}, warmup_steps={w}, total_steps={S}"
            got = expect_number(call_safely(fn, (t, lr, w, S), where), where)
            if not math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-12):
                hint = diagnose(got, _schedule_slips(t, lr, w, S), _FORMULAS)
                raise AssertionError(f"{where}: got {got:.6g}, want {want:.6g}; {hint}.")
    passed("matches torch's LinearLR + CosineAnnealingLR at every step of 3 schedules.")


def _as_groups(groups: Any) -> list[dict]:
    """The groups as ``torch.optim`` reads them: any iterable of dicts, each with ``params``
    a tensor or an ordered iterable of tensors (a generator is fine, a set is not)."""
    if isinstance(groups, (Tensor, dict, str)) or not isinstance(groups, Iterable):
        raise AssertionError(
            f"return a list of dicts, got {type(groups).__name__}: one dict per "
            "group, each with 'params' and 'weight_decay'"
        )
    groups = list(groups)
    if not all(isinstance(g, dict) and "params" in g for g in groups):
        raise AssertionError(
            "return a list of dicts, each with 'params' (a list of parameters) and 'weight_decay'"
        )
    normalised = []
    for g in groups:
        params = g["params"]
        if isinstance(params, set):
            raise AssertionError(
                "a group's 'params' is a set, which torch.optim refuses: a set's order changes "
                "from run to run, and the optimiser's state with it; use a list"
            )
        normalised.append({**g, "params": [params] if isinstance(params, Tensor) else list(params)})
    return normalised


def _names(model: nn.Module, groups: list[dict]) -> set[str]:
    """Names of the parameters that ``groups`` decay."""
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)] for g in groups if g.get("weight_decay", 0) > 0 for p in g["params"]}


def _models() -> list[VisionTransformer]:
    """Two small ViTs: a patch stem with a class token, and a conv stem with mean pooling."""
    tiny = dict(image_size=8, in_channels=1, num_classes=10, dim=16, num_heads=2)
    return [
        VisionTransformer(**tiny, patch_size=2, depth=2),
        VisionTransformer(
            **tiny, patch_size=1, depth=1, stem="conv", pool="mean", pos_embed="relative"
        ),
    ]


def _check_partition(model: nn.Module, groups: list[dict]) -> None:
    """Check that ``groups`` hold every parameter once, each group with its ``weight_decay``."""
    seen = [id(p) for g in groups for p in g["params"]]
    missing = {n for n, p in model.named_parameters() if id(p) not in set(seen)}
    rates = {g.get("weight_decay") for g in groups if g.get("weight_decay", 0) > 0}
    slips = {
        "give every group its 'weight_decay': a group without one takes the optimiser's default "
        "(0.01 for AdamW), not 0": not all("weight_decay" in g for g in groups),
        "a parameter is in two groups; each must be in exactly one": len(seen) != len(set(seen)),
        f"parameters missing from every group: {sorted(missing)}": bool(missing),
        f"the decayed group must use the weight_decay argument (0.05), got {sorted(rates)}": bool(
            rates - {0.05}
        ),
    }
    refuse(slips)


def _diagnose_decay(model: nn.Module, decayed: set[str], want_decayed: set[str]) -> str:
    """Why the parameters named ``decayed`` are not the ``want_decayed`` ones."""
    wrongly_decayed, wrongly_exempt = decayed - want_decayed, want_decayed - decayed
    special = set(model.no_weight_decay())
    hints = []
    if wrongly_decayed & special:
        hints.append(
            f"{sorted(wrongly_decayed & special)} are decayed: the class token and "
            "position embeddings are listed by model.no_weight_decay(); decaying "
            "them pulls them to zero, erasing what they encode"
        )
    if wrongly_decayed - special:
        examples = sorted(wrongly_decayed - special)[:3]
        hints.append(
            f"biases and norm weights are decayed ({examples}...): exempt every "
            "parameter with fewer than 2 dimensions"
        )
    if wrongly_exempt:
        hints.append(
            f"weight matrices escape decay ({sorted(wrongly_exempt)[:3]}...): only parameters with "
            "fewer than 2 dimensions, and the no_weight_decay() names, are exempt"
        )
    return "; and ".join(hints)


@checker
def check_param_groups(fn: Callable[[nn.Module, float], Iterable[dict]]) -> None:
    """Grade a learner's ``fn(model, weight_decay) -> list of AdamW parameter groups``.

    Any groups ``torch.optim`` accepts; each parameter in one group: weight matrices and
    kernels decayed, biases, norm weights and ``model.no_weight_decay()`` at 0.

    Example:
        >>> check_param_groups(param_groups)
        Correct! check_param_groups: 2 models, every parameter in the right group.
    """
    models = _models()
    for model in models:
        groups = _as_groups(call_safely(fn, (model, 0.05), "a ViT"))
        _check_partition(model, groups)
        decayed = _names(model, groups)
        want_decayed = _names(model, param_groups(model, 0.05))
        if decayed != want_decayed:
            raise AssertionError(_diagnose_decay(model, decayed, want_decayed))
    passed(f"{len(models)} models, every parameter in the right group.")


_PER_IMAGE = "take their mean over the batch, a single number"


def _smoothed_cross_entropy(logits: Tensor, targets: Tensor, smoothing: float) -> Tensor:
    """The reference, by formula: mean over the batch of -Σ_k q_k log p_k."""
    K = logits.shape[-1]
    q = torch.full_like(logits, smoothing / K)  # ε/K on every class ...
    q[torch.arange(len(targets)), targets] += 1 - smoothing  # ... and 1 - ε on the true one
    return -(q * logits.log_softmax(dim=-1)).sum(dim=-1).mean()


def _loss(q: Tensor, log_p: Tensor) -> Tensor:
    """Mean over the batch of -Σ_k q_k log_p_k."""
    return -(q * log_p).sum(dim=-1).mean()


def _target(targets: Tensor, K: int, on_true: float, elsewhere: float) -> Tensor:
    """``(B, K)`` targets: ``on_true`` on each image's class, ``elsewhere`` on the others."""
    q = torch.full((len(targets), K), elsewhere, dtype=torch.float64)
    q[torch.arange(len(targets)), targets] = on_true
    return q


def _smoothing_slips(logits: Tensor, targets: Tensor, eps: float) -> dict[str, Tensor]:
    """The loss that each usual mistake computes."""
    logits = logits.double()
    K, log_p = logits.shape[-1], logits.log_softmax(dim=-1)
    q = _target(targets, K, 1 - eps + eps / K, eps / K)
    want = _loss(q, log_p)
    return {
        f"you spread ε over the K - 1 = {K - 1} other classes; the target puts ε/K on "
        "every class, the true one included: q_k = "
        "(1 - ε)·[k = y] + ε/K": _loss(_target(targets, K, 1 - eps, eps / (K - 1)), log_p),
        "the true class must get 1 - ε + ε/K, not 1 - ε: it gets its share ε/K of the "
        "smoothing too": _loss(_target(targets, K, 1 - eps, eps / K), log_p),
        "you used the probabilities p where the loss takes their logarithm: "
        "-Σ q_k log p_k, with log p from log_softmax(dim=-1)": _loss(q, log_p.exp()),
        "the smoothing is missing: this is the cross-entropy of the one-hot target": (
            _loss(_target(targets, K, 1.0, 0.0), log_p)
        ),
        "the log-softmax runs over the batch (dim=0): it must run over the classes (dim=-1)": (
            _loss(q, logits.log_softmax(dim=0))
        ),
        "you summed the losses of the batch: take their mean, as F.cross_entropy does": (
            want * len(targets)
        ),
        "you averaged over the K classes: sum q_k log p_k over the classes, then average "
        "over the batch": want / K,
        "the sign is wrong: the loss is -Σ q_k log p_k, which is positive": -want,
    }


@checker
def check_smoothed_cross_entropy(fn: Callable[[Tensor, Tensor, float], Tensor]) -> None:
    """Grade a learner's ``fn(logits, targets, smoothing) -> loss``.

    A 0-dimensional tensor equal to ``F.cross_entropy(logits, targets, label_smoothing=ε)``,
    with its gradient, and finite on large logits.

    Example:
        >>> check_smoothed_cross_entropy(_smoothed_cross_entropy)
        Correct! check_smoothed_cross_entropy: equal to torch's F.cross_entropy with
        label_smoothing, on 3 cases, its gradient too, and finite on large logits.
    """
    cases = [(6, 10, 0.1), (4, 3, 0.3), (5, 7, 0.0)]  # B, K, ε
    for B, K, eps in cases:
        logits, targets = 3 * torch.randn(B, K), torch.randint(K, (B,))
        grade_loss(
            fn,
            (logits, targets, eps),
            F.cross_entropy(logits, targets, label_smoothing=eps),
            f"B={B} images, K={K} classes, smoothing={eps}",
            _smoothing_slips,
            per_image=_PER_IMAGE,
            otherwise="compare with the formula of the chapter, term by term",
        )
    _check_loss_trains(fn)
    passed(
        f"equal to torch's F.cross_entropy with label_smoothing, on {len(cases)} cases, "
        "its gradient too, and finite on large logits."
    )


def _check_loss_trains(fn: Callable[[Tensor, Tensor, float], Tensor]) -> None:
    """A loss that training can use: finite on large logits, with F.cross_entropy's gradient."""
    logits = torch.tensor([[120.0, 0.0, -5.0], [0.0, 3.0, 1.0]])
    targets = torch.tensor([1, 1])
    where = "logits [[120, 0, -5], [0, 3, 1]], targets [1, 1], smoothing=0.1"
    got = call_safely(fn, (logits.clone(), targets.clone(), 0.1), where)
    got = scalar_loss(got, where, 2, _PER_IMAGE)
    if not torch.isfinite(got):
        raise AssertionError(
            f"for {where}: your loss is {got.item()}; softmax underflows to 0 on such logits "
            "and its log is -inf: use log_softmax, which subtracts the largest logit first"
        )
    logits = (3 * torch.randn(4, 5)).requires_grad_()
    targets = torch.randint(5, (4,))
    where = "B=4 images, K=5 classes, smoothing=0.1, logits that require a gradient"
    got = call_safely(fn, (logits, targets, 0.1), where, grad=True)
    got = scalar_loss(got, where, 4, _PER_IMAGE)
    if not got.requires_grad:
        raise AssertionError(
            f"for {where}: your loss has no gradient, so loss.backward() cannot reach the "
            "logits: keep every step a tensor operation on them (no .item(), float() or NumPy)"
        )
    (grad,) = torch.autograd.grad(got, logits)
    (want,) = torch.autograd.grad(F.cross_entropy(logits, targets, label_smoothing=0.1), logits)
    if not close(grad, want, atol=1e-5):
        raise AssertionError(
            f"for {where}: the loss is right but its gradient is not F.cross_entropy's; a "
            "step is cut from the graph (.detach(), or a tensor rebuilt from values)"
        )


@checker
def check_no_position_prediction(predicted_wrong: Any) -> None:
    """Grade a prediction: the test images (of 360) chapter 6's ablation ViT gets wrong
    without position encoding, the mean of five seeds in ``digits_ablation.json``; ±15% passes.

    Example:
        >>> check_no_position_prediction(90)
        Correct! check_no_position_prediction: you predicted 90 wrong test images;
        measured: 92.6 (mean of 5 seeds; 44.6 with the learned table).
    """
    record = json.loads(repository_file("benchmarks/results/digits_ablation.json").read_text())
    variants = {v["id"]: v for v in record["variants"]}
    none, learned = variants["pos-none"], variants["pos-learned"]
    actual, images = none["mean_wrong"], record["test_images"]
    slips = {
        "that is the ViT with its learned table: without it the encoder gets a bag of 16 "
        "patches, and attention and mean pooling give the same output for every order of them, so "
        "digits made of the same patches in other places look alike": learned["mean_wrong"],
        f"that is guessing ({images} · 9/10): a bag of 2×2 patches still tells a lot "
        "about a digit, how much ink and which pieces of strokes it holds": images * 9 / 10,
        "that is the accuracy in %; the question asks for the number of wrong test "
        f"images, of {images}": 100 * none["mean_accuracy"],
        f"that is the share of wrong images in %; the question asks for their number, of "
        f"{images}": 100 * (1 - none["mean_accuracy"]),
    }
    grade_prediction(
        "check_no_position_prediction",
        "predicted_wrong",
        predicted_wrong,
        actual,
        what="wrong test images",
        tolerance=0.15,
        slips=slips,
        source=f"mean of {len(none['runs'])} seeds; {learned['mean_wrong']:g} with the learned "
        "table",
    )
