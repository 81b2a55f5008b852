"""The optimiser's pieces of :func:`~vit_tutorial.engine.fit` (which re-exports them): AdamW's
two parameter groups, weight decay on the weight matrices only (:func:`param_groups`), and the
learning rate's linear warm-up then cosine decay, stepped every iteration (:func:`warmup_cosine`),
as DeiT trains (Touvron et al. 2021, Table 9).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, LRScheduler, SequentialLR

from vit_tutorial.checkpoint import unwrap_model
from vit_tutorial.validate import check_int, check_real

__all__ = ["param_groups", "warmup_cosine"]


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Two AdamW parameter groups: decayed weight matrices, and undecayed parameters with fewer
    than two dimensions (biases, norm weights) or named by ``model.no_weight_decay()`` where the
    model has it (as timm models do: class token, position embeddings); frozen ones left out.

    Example:
        >>> decay, no_decay = param_groups(nn.Sequential(nn.Linear(4, 2), nn.LayerNorm(2)), 0.05)
        >>> len(decay["params"]), decay["weight_decay"], len(no_decay["params"])
        (1, 0.05, 3)
    """
    model, weight_decay = unwrap_model(model), check_real("weight_decay", weight_decay, 0.0)
    skip = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            exempt = p.ndim < 2 or name in skip or name.split(".")[-1] in skip
            (no_decay if exempt else decay).append(p)
    return [dict(params=decay, weight_decay=weight_decay), dict(params=no_decay, weight_decay=0.0)]


def warmup_cosine(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int
) -> LRScheduler:
    """Linear warm-up to the peak ``lr``, then cosine decay towards 0: step ``t`` (from 0) uses
    ``lr · (t + 1) / (w + 1)`` for ``t < w`` and ``lr · (1 + cos(π (t - w) / (S - w))) / 2``
    after, with ``w = warmup_steps`` and ``S = total_steps``: :mod:`torch.optim.lr_scheduler`'s
    ``LinearLR`` then ``CosineAnnealingLR``, chained by ``SequentialLR``. Step it after every
    optimiser step.

    Example:
        >>> optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
        >>> scheduler = warmup_cosine(optimizer, warmup_steps=3, total_steps=7)
        >>> rates = []
        >>> for _ in range(7):
        ...     rates.append(round(optimizer.param_groups[0]["lr"], 3))
        ...     optimizer.step()
        ...     scheduler.step()
        >>> rates
        [0.25, 0.5, 0.75, 1.0, 0.854, 0.5, 0.146]
    """
    warmup_steps, total_steps = (
        check_int("warmup_steps", warmup_steps, 0),
        check_int("total_steps", total_steps),
    )
    if not 0 <= warmup_steps < total_steps:
        raise ValueError(
            f"need 0 <= warmup_steps < total_steps, got {warmup_steps=} and {total_steps=}"
        )
    cosine = CosineAnnealingLR(optimizer, T_max=total_steps - warmup_steps)
    if warmup_steps == 0:
        return cosine
    warmup = LinearLR(optimizer, start_factor=1 / (warmup_steps + 1), total_iters=warmup_steps)
    return SequentialLR(optimizer, [warmup, cosine], milestones=[warmup_steps])
