"""Checkpoints (chapter 6): save and resume a training run, safely.

:func:`save_checkpoint` writes the weights, the model's config, the optimiser, scheduler
and grad-scaler states, the history and the RNG states, atomically (a temporary file in the
same folder, then :func:`os.replace`). :func:`load_checkpoint` reads it back with
``torch.load(..., weights_only=True)``, which unpickles only tensors and plain containers,
and refuses a checkpoint saved from a model with another config.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler

__all__ = ["unwrap_model", "save_checkpoint", "load_checkpoint"]


def unwrap_model(model: nn.Module) -> nn.Module:
    """The model inside a :class:`~torch.nn.parallel.DistributedDataParallel`, else ``model``."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _model_config(model: nn.Module) -> dict[str, Any] | None:
    config = getattr(unwrap_model(model), "config", None)
    return dataclasses.asdict(config) if dataclasses.is_dataclass(config) else None


def save_checkpoint(path: str | Path, model: nn.Module,
                    optimizer: torch.optim.Optimizer | None = None,
                    scheduler: LRScheduler | None = None,
                    scaler: torch.amp.GradScaler | None = None, epoch: int = 0,
                    history: dict[str, list] | None = None,
                    extra: dict[str, Any] | None = None) -> None:
    """Write a checkpoint atomically: to a temporary file in the same folder, then rename.

    It holds the weights, ``dataclasses.asdict(model.config)`` when the model has a
    dataclass config, the optimiser/scheduler/grad-scaler states, the epoch, the history,
    ``extra`` (plain values) and the torch RNG states (CPU and CUDA), only tensors and
    plain containers, so that it loads with ``weights_only=True``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "model": unwrap_model(model).state_dict(),
        "config": _model_config(model),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "epoch": epoch,
        "history": history or {},
        "extra": extra or {},
        "rng": {"cpu": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
    }
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
        os.replace(tmp, path)  # atomic: readers see the old file or the new one, never half
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: str | Path, model: nn.Module,
                    optimizer: torch.optim.Optimizer | None = None,
                    scheduler: LRScheduler | None = None,
                    scaler: torch.amp.GradScaler | None = None,
                    restore_rng: bool = True) -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint` into ``model`` (and the others).

    Raises:
        ValueError: the checkpoint was saved from a model with a different config; the
            message lists each differing field.

    Returns:
        The checkpoint dictionary (``epoch``, ``history``, ``extra``, ...).
    """
    state = torch.load(path, map_location="cpu", weights_only=True)
    saved, current = state["config"], _model_config(model)
    if saved is not None and current is not None and saved != current:
        diffs = [f"{k}: checkpoint {saved.get(k)!r} vs model {current.get(k)!r}"
                 for k in sorted(set(saved) | set(current)) if saved.get(k) != current.get(k)]
        raise ValueError(f"checkpoint {path} was saved from a different model config: "
                         + "; ".join(diffs))
    unwrap_model(model).load_state_dict(state["model"])
    for obj, key in ((optimizer, "optimizer"), (scheduler, "scheduler"), (scaler, "scaler")):
        if obj is not None and state[key] is not None:
            obj.load_state_dict(state[key])
    if restore_rng:
        torch.set_rng_state(state["rng"]["cpu"])
        if torch.cuda.is_available() and state["rng"]["cuda"]:
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    return state
