"""The training engine (chapter 6): AdamW, warm-up + cosine, mixed precision, checkpoints.

:func:`fit` trains any classifier ``model(images) -> logits``. It follows DeiT's optimisation
(AdamW, linear warm-up then cosine decay, label smoothing; Touvron et al. 2021, Table 9); the
ViT paper pre-trained with Adam and a linear decay instead. Its parts:

* **AdamW** with weight decay on the weight matrices only: biases, norm weights and
  the names in ``model.no_weight_decay()`` (class token, position embeddings) are not
  decayed (:func:`param_groups`);
* **linear warm-up, then cosine decay** of the learning rate, built from
  :mod:`torch.optim.lr_scheduler` and stepped once per iteration (:func:`warmup_cosine`);
* label smoothing, gradient clipping, bf16/fp16 autocast on GPUs;
* soft labels (from Mixup or CutMix, as ``(B, K)`` probabilities) as well as class indices;
* DeiT's hard distillation (chapter 8), for a model with a distillation token: pass
  ``teacher=`` (used in eval mode, without gradients); the loss is then the mean of the
  class head's cross-entropy with the labels and the distillation head's with the
  teacher's predicted classes (Touvron et al. 2021, Section 4, "hard-label distillation");
* a checkpoint after every epoch, written atomically; when the file already exists,
  :func:`fit` resumes from it and ends with the same weights as an uninterrupted run;
* under ``torchrun`` (an initialised process group) the model is wrapped in
  :class:`~torch.nn.parallel.DistributedDataParallel`; only rank 0 writes and prints.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import sys
import time
from collections.abc import Callable
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

__all__ = [
    "Device",
    "param_groups",
    "warmup_cosine",
    "resolve_device",
    "predict",
    "evaluate",
    "fit",
]

#: Where to run: ``'auto'`` (see :func:`resolve_device`), a string that
#: :class:`torch.device` reads (``'cpu'``, ``'cuda:1'``, ...), or a :class:`torch.device`.
Device = str | torch.device


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
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def warmup_cosine(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int
) -> LRScheduler:
    """Linear warm-up to the peak ``lr``, then cosine decay towards 0.

    Step ``t`` (counting from 0) uses ``lr · (t + 1) / (w + 1)`` for ``t < w`` and
    ``lr · (1 + cos(π (t - w) / (S - w))) / 2`` after, with ``w = warmup_steps`` and
    ``S = total_steps``. Both parts come from :mod:`torch.optim.lr_scheduler` (``LinearLR``,
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
        raise ValueError(
            f"need 0 <= warmup_steps < total_steps, got warmup_steps={warmup_steps}"
            f" and total_steps={total_steps}"
        )
    cosine = CosineAnnealingLR(optimizer, T_max=total_steps - warmup_steps)
    if warmup_steps == 0:
        return cosine
    warmup = LinearLR(optimizer, start_factor=1 / (warmup_steps + 1), total_iters=warmup_steps)
    return SequentialLR(optimizer, [warmup, cosine], milestones=[warmup_steps])


def resolve_device(device: Device = "auto") -> torch.device:
    """``'auto'`` is the process's GPU when CUDA is available (``cuda:LOCAL_RANK``), else the CPU."""
    if str(device) != "auto":
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def _amp_dtype(amp: str | None, device: torch.device) -> torch.dtype | None:
    """The autocast dtype that ``amp`` asks for on ``device``, or ``None`` for float32."""
    if amp is None:
        return None
    if not isinstance(amp, str) or amp not in ("auto", "bf16", "fp16"):
        raise ValueError(f"amp must be 'auto', 'bf16', 'fp16' or None, got {amp!r}")
    if amp == "auto":
        if device.type != "cuda":
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if amp == "fp16" and device.type != "cuda":
        raise ValueError(f"amp='fp16' needs a CUDA device, got device {device}")
    return torch.bfloat16 if amp == "bf16" else torch.float16


@torch.no_grad()
def predict(
    model: nn.Module, loader: DataLoader, device: Device = "auto", amp: str | None = "auto"
) -> tuple[Tensor, Tensor]:
    """``(logits (B, num_classes), labels (B,))`` over a whole loader, on the CPU, in float32.

    Raises:
        ValueError: ``loader`` yields no batches.
    """
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
    if not logits:
        raise ValueError(
            "the loader yields no batches, so there is nothing to predict (an "
            "empty dataset, or drop_last=True with fewer samples than batch_size)"
        )
    return torch.cat(logits), torch.cat(labels)


def evaluate(
    model: nn.Module, loader: DataLoader, device: Device = "auto", amp: str | None = "auto"
) -> dict[str, float]:
    """Mean cross-entropy ``loss`` and ``accuracy`` (a fraction) of ``model`` on ``loader``.

    Raises:
        ValueError: ``loader`` yields no batches.
    """
    logits, labels = predict(model, loader, device, amp)
    return {
        "loss": F.cross_entropy(logits, labels).item(),
        "accuracy": (logits.argmax(-1) == labels).float().mean().item(),
    }


_HISTORY_KEYS = ("epoch", "train_loss", "train_acc", "val_loss", "val_acc", "lr", "time")


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


#: What each hyperparameter of :func:`fit` must be: a test, and the words for it.
_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "epochs": (
        lambda v: isinstance(v, numbers.Integral) and _is_real(v) and v >= 1,
        "an integer >= 1",
    ),
    "lr": (lambda v: _is_real(v) and 0 < v < math.inf, "a finite number > 0"),
    "weight_decay": (lambda v: _is_real(v) and 0 <= v < math.inf, "a finite number >= 0"),
    "warmup_epochs": (
        lambda v: _is_real(v) and 0 <= v < math.inf,
        "a finite number of epochs >= 0",
    ),
    "label_smoothing": (lambda v: _is_real(v) and 0 <= v < 1, "a number in [0, 1)"),
    "grad_clip": (lambda v: v is None or (_is_real(v) and v > 0), "None or a number > 0"),
}


@dataclasses.dataclass(frozen=True)
class _Settings:
    """The hyperparameters of a :func:`fit` run: validated once, saved in its checkpoints."""

    epochs: int
    lr: float
    weight_decay: float
    warmup_epochs: float
    label_smoothing: float
    grad_clip: float | None
    steps_per_epoch: int

    def __post_init__(self) -> None:
        for name, (valid, expected) in _RULES.items():
            value = getattr(self, name)
            if not valid(value):
                raise ValueError(f"{name} must be {expected}, got {name}={value!r}")
        if self.steps_per_epoch == 0:
            raise ValueError(
                "train_loader yields no batches (an empty dataset, or "
                "drop_last=True with fewer samples than batch_size)"
            )


@dataclasses.dataclass
class _Run:
    """What one optimisation step needs, built once by :func:`fit`."""

    model: nn.Module  # the model itself: its parameters are clipped and checkpointed
    net: nn.Module  # what is called: the model, its DDP wrapper, or their torch.compile
    optimizer: torch.optim.Optimizer
    scheduler: LRScheduler
    scaler: torch.amp.GradScaler
    device: torch.device
    dtype: torch.dtype | None  # autocast dtype, or None for float32
    settings: _Settings
    teacher: nn.Module | None = None  # DeiT's hard distillation, when given


def fit(
    model: nn.Module,
    train_loader: DataLoader,
    val_loader: DataLoader | None,
    *,
    epochs: int,
    lr: float,
    weight_decay: float = 0.05,
    warmup_epochs: float = 0,
    label_smoothing: float = 0.0,
    grad_clip: float | None = None,
    device: Device = "auto",
    amp: str | None = "auto",
    progress: bool = True,
    checkpoint_path: str | Path | None = None,
    teacher: nn.Module | None = None,
    compile: bool = False,
) -> dict[str, list]:
    """Train ``model`` with AdamW and warm-up + cosine; return the per-epoch history.

    Args:
        model: any classifier mapping a batch of images to logits.
        train_loader: training batches; its sampler's ``set_epoch``, if any, runs every epoch.
        val_loader: evaluated after every epoch, or ``None``.
        epochs: number of passes over ``train_loader``.
        lr: peak learning rate.
        weight_decay: AdamW weight decay of the weight matrices.
        warmup_epochs: linear warm-up length in epochs (fractions allowed; capped below the run).
        label_smoothing: label smoothing of the cross-entropy.
        grad_clip: clip the global gradient norm to this value, or ``None``.
        device: ``'auto'`` (the GPU when there is one), ``'cpu'``, ``'cuda'``, ...
        amp: ``'auto'`` (bf16 autocast on GPUs that support it, else fp16 with a grad
            scaler; nothing on the CPU), ``'bf16'``, ``'fp16'`` or ``None``.
        progress: a tqdm bar on a terminal, else a line every tenth of the run; or silent.
        checkpoint_path: save a checkpoint here every epoch; resume from it if it exists.
        teacher: DeiT's hard-distillation teacher, for ``VisionTransformer(distilled=True)``.
        compile: train through ``torch.compile(model)``; checkpoints stay plain.

    Returns:
        ``{'epoch', 'train_loss', 'train_acc', 'val_loss', 'val_acc', 'lr', 'time'}``, one value
        per epoch: ``lr`` its last step's rate, ``time`` its training seconds (no evaluation).

    Raises:
        ValueError: a hyperparameter out of range (named), an empty ``train_loader``, or a
            checkpoint to resume that was trained with other settings.
        TypeError: ``compile`` is not a bool.
    """
    settings = _Settings(
        epochs, lr, weight_decay, warmup_epochs, label_smoothing, grad_clip, len(train_loader)
    )
    run, start, history = _start(model, settings, device, amp, checkpoint_path, teacher, compile)
    with _progress_bar(epochs, start, progress) as bar:
        for epoch in range(start, epochs):
            train = _train_one_epoch(run, train_loader, epoch)
            val = evaluate(model, val_loader, run.device, amp) if val_loader is not None else {}
            _record(history, epoch + 1, train, val)
            if checkpoint_path is not None and _rank() == 0:
                _save(checkpoint_path, run, epoch + 1, history)
            _log_epoch(bar, history, epochs, progress)
    return history


def _start(
    model: nn.Module,
    settings: _Settings,
    device: Device,
    amp: str | None,
    checkpoint_path: str | Path | None,
    teacher: nn.Module | None = None,
    compile: bool = False,
) -> tuple[_Run, int, dict[str, list]]:
    """Move the model, build optimiser, schedule and scaler, and resume: ``(run, epoch, history)``."""
    if not isinstance(compile, bool):
        raise TypeError(f"compile must be True or False, got {compile!r}")
    device = resolve_device(device)
    dtype = _amp_dtype(amp, device)
    model.to(device)
    if teacher is not None:
        if not isinstance(teacher, nn.Module):
            raise TypeError(f"teacher must be an nn.Module, got {type(teacher).__name__}")
        teacher.to(device).eval()
    optimizer, scheduler = _optimizer_and_schedule(model, settings)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    start, history = _resume(checkpoint_path, model, optimizer, scheduler, scaler, settings)
    net = _distributed(model, device)
    net = torch.compile(net) if compile else net
    run = _Run(model, net, optimizer, scheduler, scaler, device, dtype, settings, teacher)
    return run, start, history


def _save(path: str | Path, run: _Run, epoch: int, history: dict[str, list]) -> None:
    """The checkpoint after ``epoch`` epochs, with the settings to check on resuming."""
    extra = dataclasses.asdict(run.settings)
    save_checkpoint(
        path,
        run.model,
        epoch=epoch,
        history=history,
        extra=extra,
        optimizer=run.optimizer,
        scheduler=run.scheduler,
        scaler=run.scaler,
    )


def _optimizer_and_schedule(
    model: nn.Module, settings: _Settings
) -> tuple[torch.optim.Optimizer, LRScheduler]:
    """AdamW over :func:`param_groups`, and its warm-up + cosine schedule, in steps."""
    optimizer = torch.optim.AdamW(param_groups(model, settings.weight_decay), lr=settings.lr)
    total_steps = settings.epochs * settings.steps_per_epoch
    warmup_steps = min(round(settings.warmup_epochs * settings.steps_per_epoch), total_steps - 1)
    return optimizer, warmup_cosine(optimizer, warmup_steps, total_steps)


def _resume(
    path: str | Path | None,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: LRScheduler,
    scaler: torch.amp.GradScaler,
    settings: _Settings,
) -> tuple[int, dict[str, list]]:
    """The epoch to start from and the history so far: the checkpoint's, when it exists.

    Raises:
        ValueError: the checkpoint was trained with other ``settings``.
    """
    if path is None or not Path(path).exists():
        return 0, {key: [] for key in _HISTORY_KEYS}
    state = load_checkpoint(path, model, optimizer, scheduler, scaler)
    saved, wanted = state["extra"], dataclasses.asdict(settings)
    diffs = [key for key in wanted if saved.get(key) != wanted[key]]
    if diffs:
        raise ValueError(
            f"cannot resume {path}: it was trained with "
            + ", ".join(f"{key}={saved.get(key)!r}" for key in diffs)
            + ", not "
            + ", ".join(f"{key}={wanted[key]!r}" for key in diffs)
        )
    return state["epoch"], state["history"]


def _distributed(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` wrapped in DistributedDataParallel under ``torchrun``, else ``model``."""
    if _world_size() > 1:
        return nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    return model


def _world_size() -> int:
    """Processes in the ``torchrun`` group, or 1."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _train_one_epoch(run: _Run, loader: DataLoader, epoch: int) -> dict[str, float]:
    """One pass over ``loader``: ``train_loss``, ``train_acc``, the last step's ``lr``, ``time``.

    ``time`` is the seconds the pass took. Under DDP the sums are reduced over the
    processes, so every rank returns the same, global, numbers.
    """
    if hasattr(loader.sampler, "set_epoch"):
        loader.sampler.set_epoch(epoch)  # a new shuffle every epoch, the same on every rank
    tic = time.perf_counter()
    run.net.train()
    sums = torch.zeros(3, device=run.device)  # loss sum, correct, count
    lr = math.nan
    for x, y in loader:
        x, y = x.to(run.device, non_blocking=True), y.to(run.device, non_blocking=True)
        lr = run.optimizer.param_groups[0]["lr"]  # the rate this step uses
        loss, logits = _train_step(run, x, y)
        sums += torch.stack(
            [
                loss.detach() * len(y),
                (logits.argmax(-1) == (y.argmax(-1) if y.dim() == 2 else y)).sum(),
                torch.tensor(len(y), device=run.device),
            ]
        ).float()
    if _world_size() > 1:
        dist.all_reduce(sums)
    return {
        "train_loss": (sums[0] / sums[2]).item(),
        "train_acc": (sums[1] / sums[2]).item(),
        "lr": lr,
        "time": time.perf_counter() - tic,
    }


def _train_step(run: _Run, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """Forward, backward, (clip), optimiser and scheduler step; the ``(loss, logits)``."""
    with torch.autocast(run.device.type, dtype=run.dtype, enabled=run.dtype is not None):
        loss, logits = _loss(run, run.net(x), x, y)
    run.optimizer.zero_grad(set_to_none=True)
    run.scaler.scale(loss).backward()
    if run.settings.grad_clip is not None:
        run.scaler.unscale_(run.optimizer)  # clip the true gradients, not the scaled ones
        nn.utils.clip_grad_norm_(run.model.parameters(), run.settings.grad_clip)
    run.scaler.step(run.optimizer)
    run.scaler.update()
    run.scheduler.step()
    return loss, logits


def _loss(
    run: _Run, output: Tensor | tuple[Tensor, Tensor], x: Tensor, y: Tensor
) -> tuple[Tensor, Tensor]:
    """The loss of one batch and the logits to score it: ``(loss, logits)``.

    ``y`` holds class indices ``(B,)`` or probabilities ``(B, K)`` (Mixup, CutMix). A model
    with a distillation token returns ``(class logits, distillation logits)`` in training;
    the distillation head then learns the teacher's classes (DeiT's hard distillation,
    with no label smoothing on that head) and the two heads' mean is scored.
    """
    smoothing = run.settings.label_smoothing
    if not isinstance(output, tuple):
        if run.teacher is not None:
            raise ValueError(
                "teacher= needs a model with a distillation token, whose training forward "
                "returns (class logits, distillation logits); this one returned one tensor"
            )
        return F.cross_entropy(output.float(), y, label_smoothing=smoothing), output
    if run.teacher is None:
        raise ValueError(
            "the model returned two heads' logits (a distillation token): pass the teacher "
            "to fit(..., teacher=...)"
        )
    class_logits, distill_logits = output
    with torch.no_grad():
        teacher_classes = run.teacher(x).argmax(-1)
    loss = (
        F.cross_entropy(class_logits.float(), y, label_smoothing=smoothing)
        + F.cross_entropy(distill_logits.float(), teacher_classes)
    ) / 2
    return loss, (class_logits + distill_logits) / 2


def _record(
    history: dict[str, list], epoch: int, train: dict[str, float], val: dict[str, float]
) -> None:
    """Append one epoch to ``history``; without validation, ``val_*`` are NaN."""
    row = {
        "epoch": epoch,
        **train,
        "val_loss": val.get("loss", math.nan),
        "val_acc": val.get("accuracy", math.nan),
    }
    for key in _HISTORY_KEYS:
        history[key].append(row[key])


def _progress_bar(epochs: int, start: int, progress: bool) -> tqdm:
    """A tqdm bar over the epochs, shown only on rank 0, when ``progress``, on a terminal."""
    shown = progress and _rank() == 0 and sys.stderr.isatty()
    return tqdm(total=epochs, initial=start, desc="epochs", disable=not shown)


def _log_epoch(bar: tqdm, history: dict[str, list], epochs: int, progress: bool) -> None:
    """Advance the bar; off a terminal, print a line every tenth of the run instead."""
    epoch = history["epoch"][-1]
    line = (
        f"epoch {epoch}/{epochs} loss {history['train_loss'][-1]:.4f} "
        f"train_acc {history['train_acc'][-1]:.4f} val_acc {history['val_acc'][-1]:.4f}"
    )
    bar.set_postfix_str(line.split(" ", 2)[2])
    bar.update()
    printing = progress and _rank() == 0 and not sys.stderr.isatty()
    if printing and (epoch % max(1, epochs // 10) == 0 or epoch == epochs):
        print(line, flush=True)
