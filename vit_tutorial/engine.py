"""The training engine (chapter 6): AdamW, warm-up + cosine, mixed precision, checkpoints.

:func:`fit` trains any classifier ``model(images) -> logits``. It is the recipe of the ViT
paper and DeiT, reduced to its parts:

* **AdamW** with weight decay on the weight matrices only: biases, norm weights and
  the names in ``model.no_weight_decay()`` (class token, position embeddings) are not
  decayed (:func:`param_groups`);
* **linear warm-up, then cosine decay** of the learning rate, built from
  :mod:`torch.optim.lr_scheduler` and stepped once per iteration (:func:`warmup_cosine`);
* label smoothing, gradient clipping, bf16/fp16 autocast on GPUs;
* a checkpoint after every epoch, written atomically; when the file already exists,
  :func:`fit` resumes from it and ends with the same weights as an uninterrupted run;
* under ``torchrun`` (an initialised process group) the model is wrapped in
  :class:`~torch.nn.parallel.DistributedDataParallel`; only rank 0 writes and prints.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, LRScheduler, SequentialLR
from torch.utils.data import DataLoader
from tqdm import tqdm

from vit_tutorial.checkpoint import load_checkpoint, save_checkpoint, unwrap_model

__all__ = ["param_groups", "warmup_cosine", "resolve_device", "predict", "evaluate", "fit"]


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Two AdamW parameter groups: decayed weight matrices, and everything else undecayed.

    Not decayed: parameters with fewer than two dimensions (biases, norm weights) and the
    names returned by ``model.no_weight_decay()`` when the model has that method (as timm
    models do: class token, position embeddings).

    Example:
        >>> decay, no_decay = param_groups(nn.Sequential(nn.Linear(4, 2), nn.LayerNorm(2)), 0.05)
        >>> len(decay["params"]), decay["weight_decay"], len(no_decay["params"])
        (1, 0.05, 3)
    """
    model = unwrap_model(model)
    skip = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        exempt = p.ndim < 2 or name in skip or name.split(".")[-1] in skip
        (no_decay if exempt else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def warmup_cosine(optimizer: torch.optim.Optimizer, warmup_steps: int,
                  total_steps: int) -> LRScheduler:
    """Linear warm-up to the peak ``lr``, then cosine decay towards 0.

    Step ``t`` (counting from 0) uses ``lr · (t + 1) / (w + 1)`` for ``t < w`` and
    ``lr · (1 + cos(π (t - w) / (T - w))) / 2`` after, with ``w = warmup_steps`` and
    ``T = total_steps``. Both parts come from :mod:`torch.optim.lr_scheduler` (``LinearLR``,
    ``CosineAnnealingLR``), chained by ``SequentialLR``. Call ``scheduler.step()`` after
    every optimiser step.

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
    if not 0 <= warmup_steps < total_steps:
        raise ValueError(f"need 0 <= warmup_steps < total_steps, got warmup_steps={warmup_steps}"
                         f" and total_steps={total_steps}")
    cosine = CosineAnnealingLR(optimizer, T_max=total_steps - warmup_steps)
    if warmup_steps == 0:
        return cosine
    warmup = LinearLR(optimizer, start_factor=1 / (warmup_steps + 1), total_iters=warmup_steps)
    return SequentialLR(optimizer, [warmup, cosine], milestones=[warmup_steps])


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``'auto'`` is the process's GPU when CUDA is available (``cuda:LOCAL_RANK``), else the CPU."""
    if str(device) != "auto":
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def _amp_dtype(amp: str | bool | None, device: torch.device) -> torch.dtype | None:
    if amp in (None, False, "none", "off"):
        return None
    if amp == "auto":
        if device.type != "cuda":
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if amp == "bf16":
        return torch.bfloat16
    if amp == "fp16":
        if device.type != "cuda":
            raise ValueError(f"amp='fp16' needs a CUDA device, got device {device}")
        return torch.float16
    raise ValueError(f"amp must be 'auto', 'bf16', 'fp16' or None, got {amp!r}")


@torch.no_grad()
def predict(model: nn.Module, loader: DataLoader, device: str | torch.device = "auto",
            amp: str | bool | None = "auto") -> tuple[Tensor, Tensor]:
    """``(logits (B, num_classes), labels (B,))`` over a whole loader, on the CPU, in float32."""
    device = resolve_device(device)
    dtype = _amp_dtype(amp, device)
    was_training = model.training
    model.to(device).eval()
    logits, labels = [], []
    for x, y in loader:
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            logits.append(model(x.to(device, non_blocking=True)).float().cpu())
        labels.append(y)
    model.train(was_training)
    return torch.cat(logits), torch.cat(labels)


def evaluate(model: nn.Module, loader: DataLoader, device: str | torch.device = "auto",
             amp: str | bool | None = "auto") -> dict[str, float]:
    """Mean cross-entropy ``loss`` and ``accuracy`` (a fraction) of ``model`` on ``loader``."""
    logits, labels = predict(model, loader, device, amp)
    return {"loss": F.cross_entropy(logits, labels).item(),
            "accuracy": (logits.argmax(-1) == labels).float().mean().item()}


def fit(model: nn.Module, train_loader: DataLoader, val_loader: DataLoader | None, *,
        epochs: int, lr: float, weight_decay: float = 0.05, warmup_epochs: float = 0,
        label_smoothing: float = 0.0, grad_clip: float | None = None,
        device: str | torch.device = "auto", amp: str | bool | None = "auto",
        progress: bool = True, checkpoint_path: str | Path | None = None) -> dict[str, list]:
    """Train ``model`` with AdamW and warm-up + cosine; return the per-epoch history.

    Args:
        model: any classifier mapping a batch of images to logits.
        train_loader: training batches; when its sampler has ``set_epoch`` (the loaders of
            :mod:`vit_tutorial.data` do), it is called every epoch.
        val_loader: evaluated after every epoch, or ``None``.
        epochs: number of passes over ``train_loader``.
        lr: peak learning rate.
        weight_decay: AdamW weight decay of the weight matrices.
        warmup_epochs: length of the linear warm-up, in epochs (fractions allowed; capped
            below the length of the run).
        label_smoothing: label smoothing of the cross-entropy.
        grad_clip: clip the global gradient norm to this value, or ``None``.
        device: ``'auto'`` (the GPU when there is one), ``'cpu'``, ``'cuda'``, ...
        amp: ``'auto'`` (bf16 autocast on GPUs that support it, else fp16 with a grad
            scaler; nothing on the CPU), ``'bf16'``, ``'fp16'`` or ``None``.
        progress: show a tqdm bar when the output is a terminal, else print one line
            every tenth of the run; ``False`` is silent.
        checkpoint_path: save a checkpoint here after every epoch; if the file already
            exists, resume from it (the other arguments must be the same).

    Returns:
        ``{'epoch', 'train_loss', 'train_acc', 'val_loss', 'val_acc', 'lr', 'time'}``, one
        value per epoch; ``lr`` is the rate of the epoch's last step, ``time`` the seconds
        spent training in that epoch (evaluation excluded).
    """
    if epochs < 1 or lr <= 0:
        raise ValueError(f"need epochs >= 1 and lr > 0, got epochs={epochs} and lr={lr}")
    if len(train_loader) == 0:
        raise ValueError("train_loader yields no batches (an empty dataset, or drop_last=True "
                         "with fewer samples than batch_size)")
    device = resolve_device(device)
    dtype = _amp_dtype(amp, device)
    model.to(device)
    optimizer = torch.optim.AdamW(param_groups(model, weight_decay), lr=lr)
    steps = len(train_loader)
    scheduler = warmup_cosine(optimizer, min(round(warmup_epochs * steps), epochs * steps - 1),
                              epochs * steps)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    settings = {"epochs": epochs, "lr": lr, "weight_decay": weight_decay,
                "warmup_epochs": warmup_epochs, "label_smoothing": label_smoothing,
                "grad_clip": grad_clip, "steps_per_epoch": steps}
    history: dict[str, list] = {k: [] for k in
                                ("epoch", "train_loss", "train_acc", "val_loss", "val_acc",
                                 "lr", "time")}
    start = 0
    if checkpoint_path is not None and Path(checkpoint_path).exists():
        state = load_checkpoint(checkpoint_path, model, optimizer, scheduler, scaler)
        diffs = [k for k in settings if state["extra"].get(k) != settings[k]]
        if diffs:
            raise ValueError(f"cannot resume {checkpoint_path}: it was trained with " + ", ".join(
                f"{k}={state['extra'].get(k)!r}" for k in diffs) + ", not " + ", ".join(
                f"{k}={settings[k]!r}" for k in diffs))
        start, history = state["epoch"], state["history"]
    net = model
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        net = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    verbose = progress and _rank() == 0
    interactive = sys.stderr.isatty()
    bar = tqdm(total=epochs, initial=start, desc="epochs", disable=not (verbose and interactive))
    for epoch in range(start, epochs):
        if hasattr(train_loader.sampler, "set_epoch"):
            train_loader.sampler.set_epoch(epoch)
        net.train()
        tic = time.perf_counter()
        sums = torch.zeros(3, device=device)  # loss sum, correct, count
        for x, y in train_loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                logits = net(x)
                loss = F.cross_entropy(logits.float(), y, label_smoothing=label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            if grad_clip is not None:
                scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            scaler.step(optimizer)
            scaler.update()
            last_lr = optimizer.param_groups[0]["lr"]  # the rate this step used
            scheduler.step()
            sums += torch.stack([loss.detach() * len(y), (logits.argmax(-1) == y).sum(),
                                 torch.tensor(len(y), device=device)]).float()
        if net is not model:
            dist.all_reduce(sums)  # every rank records the same, global, numbers
        seconds = time.perf_counter() - tic
        val = evaluate(model, val_loader, device, amp) if val_loader is not None else {}
        for key, value in (("epoch", epoch + 1), ("train_loss", (sums[0] / sums[2]).item()),
                           ("train_acc", (sums[1] / sums[2]).item()),
                           ("val_loss", val.get("loss", math.nan)),
                           ("val_acc", val.get("accuracy", math.nan)),
                           ("lr", last_lr), ("time", seconds)):
            history[key].append(value)
        if checkpoint_path is not None and _rank() == 0:
            save_checkpoint(checkpoint_path, model, optimizer, scheduler, scaler,
                            epoch + 1, history, settings)
        line = (f"epoch {epoch + 1}/{epochs} loss {history['train_loss'][-1]:.4f} "
                f"train_acc {history['train_acc'][-1]:.4f} val_acc {history['val_acc'][-1]:.4f}")
        bar.set_postfix_str(line.split(" ", 2)[2])
        bar.update()
        if verbose and not interactive and ((epoch + 1) % max(1, epochs // 10) == 0
                                            or epoch + 1 == epochs):
            print(line, flush=True)
    bar.close()
    return history
