"""The training engine (chapters 6, 8 and 9): one loop, :func:`fit`, for every model.

:func:`fit` trains a classifier, a DeiT student and a masked autoencoder alike: only the **loss**
changes (:mod:`vit_tutorial.losses`). Its optimisation is DeiT's (Touvron et al. 2021, Table 9):
**AdamW** with weight decay on the weight matrices only (:func:`param_groups`), a **linear warm-up,
then cosine decay** of the learning rate, stepped every iteration (:func:`warmup_cosine`); the ViT
paper pre-trained with Adam and a linear decay instead. Also: gradient clipping, bf16/fp16 autocast
on GPUs, a checkpoint every epoch (resumed to the same weights as an uninterrupted run),
DistributedDataParallel under ``torchrun`` (rank 0 alone writes and prints). "How to fit" is one
object, :class:`FitSettings`, checked once when built.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, LRScheduler, SequentialLR
from torch.utils.data import DataLoader

from vit_tutorial.checkpoint import load_checkpoint, plain, save_checkpoint, unwrap_model
from vit_tutorial.losses import Classification, cross_entropy
from vit_tutorial.validate import check_bool, check_int, check_real

__all__ = [
    "Device",
    "FitSettings",
    "TrainResult",
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

#: A loss for :func:`fit`: ``loss(outputs, images, targets) -> (loss, logits or None)``;
#: the logits score the training accuracy (``None``: a loss with no accuracy, as MAE's).
Loss = Callable[[Any, Tensor, Tensor], tuple[Tensor, Tensor | None]]
_EMPTY = "(an empty dataset, or drop_last=True with fewer samples than batch_size)"


@dataclasses.dataclass(frozen=True)
class FitSettings:
    """How to fit: the hyperparameters of a :func:`fit` run, checked once, here. Recipes,
    fine-tuning and the experiments build one; checkpoints keep it, to resume alike.

    Attributes:
        epochs: passes over the training loader.
        lr: peak learning rate.
        weight_decay: AdamW weight decay of the weight matrices.
        warmup_epochs: linear warm-up in epochs (fractions allowed; capped below the run).
        label_smoothing: of the default loss (:class:`~vit_tutorial.losses.Classification`);
            a loss passed to :func:`fit` carries its own.
        grad_clip: clip the global gradient norm to this value, or ``None``.
        betas: AdamW's betas: PyTorch's default ``(0.9, 0.999)``; MAE pre-trains with
            ``(0.9, 0.95)`` (He et al. 2022, Appendix A.1, Table 8).

    Example:
        >>> FitSettings(epochs=0, lr=1e-3)
        Traceback (most recent call last):
        ...
        ValueError: epochs must be at least 1, got 0
    """

    epochs: int
    lr: float
    weight_decay: float = 0.05
    warmup_epochs: float = 0.0
    label_smoothing: float = 0.0
    grad_clip: float | None = None
    betas: tuple[float, float] = (0.9, 0.999)

    def __post_init__(self) -> None:
        check_int("epochs", self.epochs)
        check_real("lr", self.lr, 0.0, low_open=True)
        check_real("weight_decay", self.weight_decay, 0.0)
        check_real("warmup_epochs", self.warmup_epochs, 0.0)
        check_real("label_smoothing", self.label_smoothing, 0.0, 1.0, high_open=True)
        if self.grad_clip is not None:
            check_real("grad_clip", self.grad_clip, 0.0, low_open=True)
        if not isinstance(self.betas, (tuple, list)) or len(self.betas) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2), got {self.betas!r}")
        for i, beta in enumerate(self.betas):
            check_real(f"betas[{i}]", beta, 0, 1, high_open=True)
        object.__setattr__(self, "betas", tuple(map(float, self.betas)))


@dataclasses.dataclass
class TrainResult:
    """A trained model and its scores: what recipes and fine-tuning return.

    Attributes:
        model: the trained model (unwrapped from DDP).
        history: per-epoch history from :func:`fit`.
        test_accuracy: final accuracy on the test (or held-out) split, a fraction.
        train_seconds: seconds spent in training steps (per-epoch evaluation excluded).
    """

    model: nn.Module
    history: dict
    test_accuracy: float
    train_seconds: float


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


def resolve_device(device: Device = "auto") -> torch.device:
    """``'auto'`` is the process's GPU if CUDA is available (``cuda:LOCAL_RANK``), else the CPU;
    another device must be one this machine has (ValueError: 'mps' off a Mac, 'cuda:3' on one
    GPU, 'meta', which holds no data)."""
    if str(device) != "auto":
        try:
            resolved = torch.device(device)
        except (RuntimeError, TypeError):
            expected = "'auto', 'cpu', 'cuda', 'cuda:N', 'mps' ..."
            raise ValueError(f"unknown device {device!r}; expected {expected}") from None
        if resolved.type == "meta":
            raise ValueError("device 'meta' holds no data: nothing can train or run there")
        if not _present(resolved):
            gpus = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
            mps = ["mps"] * bool(torch.backends.mps.is_available())
            here = ", ".join(["cpu", *gpus, *mps])
            raise ValueError(f"device {device!r} is not on this machine (it has {here})") from None
        return resolved
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def _present(device: torch.device) -> bool:
    """Whether this machine has ``device`` (CUDA counted without starting it on a GPU)."""
    if device.type == "cuda":
        return (device.index or 0) < torch.cuda.device_count()
    if device.type == "mps":
        return torch.backends.mps.is_available()
    try:
        torch.empty(0, device=device)  # 'xla' without torch_xla, say, raises
    except Exception:  # RuntimeError, or ModuleNotFoundError for 'hpu' without its module ...
        return False
    return True


def _amp_dtype(amp: str | None, device: torch.device) -> torch.dtype | None:
    """The autocast dtype that ``amp`` asks for on ``device``, or ``None`` for float32."""
    if amp not in (None, "auto", "bf16", "fp16"):
        raise ValueError(f"amp must be 'auto', 'bf16', 'fp16' or None, got {amp!r}")
    if amp == "fp16" and device.type != "cuda":
        raise ValueError(f"amp='fp16' needs a CUDA device, got device {device}")
    if amp == "auto" and device.type == "cuda":
        amp = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)


@torch.no_grad()
def predict(
    model: nn.Module, loader: DataLoader, device: Device = "auto", amp: str | None = "auto"
) -> tuple[Tensor, Tensor]:
    """``(logits (B, num_classes), labels (B,))`` over a whole loader, on the CPU, in float32;
    ValueError when ``loader`` yields no batches. ``'auto'`` runs the model where its weights
    are (a model trained on the CPU stays there, on a GPU machine too); a
    :class:`torch.device` is used as it is."""
    if str(device) == "auto":
        device = next((p.device for p in model.parameters()), None) or resolve_device()
    device = device if isinstance(device, torch.device) else resolve_device(device)
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
        raise ValueError(f"the loader yields no batches, so there is nothing to predict {_EMPTY}")
    return torch.cat(logits), torch.cat(labels)


def evaluate(
    model: nn.Module, loader: DataLoader, device: Device = "auto", amp: str | None = "auto"
) -> dict[str, float]:
    """Mean cross-entropy ``loss`` and ``accuracy`` (a fraction) of ``model`` on ``loader``;
    ValueError when ``loader`` yields no batches."""
    logits, labels = predict(model, loader, device, amp)
    loss = cross_entropy(logits, labels).item()
    return {"loss": loss, "accuracy": (logits.argmax(-1) == labels).float().mean().item()}


def _check_fit_inputs(train_loader, val_loader, path) -> int:
    """The batches an epoch, once what would fail only after training is refused."""
    for name, loader in [("train_loader", train_loader), ("val_loader", val_loader)]:
        if loader is not None and len(loader) == 0:
            raise ValueError(f"{name} yields no batches {_EMPTY}")
    file = path and next((p for p in Path(path).parents if p.exists() and not p.is_dir()), None)
    if path is not None and (file or Path(path).is_dir()):
        where = f"inside {str(file)!r}, a file" if file else "a folder"
        raise ValueError(f"checkpoint_path must name a file, got {str(path)!r}, {where}")
    return len(train_loader)


def fit(
    model: nn.Module,
    train_loader: DataLoader,
    val_loader: DataLoader | None = None,
    settings: FitSettings | None = None,
    *,
    loss: Loss | None = None,
    device: Device = "auto",
    amp: str | None = "auto",
    progress: bool = True,
    checkpoint_path: str | Path | None = None,
    extra: dict[str, Any] | None = None,
    compile: bool = False,
    **hyperparameters: Any,
) -> dict[str, list]:
    """Train ``model`` with AdamW and warm-up + cosine; return the per-epoch history: for each
    of :data:`HISTORY_KEYS` a list of one value per epoch (``lr`` its last step's rate, ``time``
    its training seconds; an accuracy the loss cannot score is NaN).

    Args:
        model: the model; ``loss`` reads its output.
        train_loader: ``(images, targets)`` batches; its sampler's ``set_epoch`` runs each epoch.
        val_loader: a classifier's validation batches, scored after every epoch, or ``None``.
        settings: the :class:`FitSettings`, or its fields as keywords (``epochs=3, lr=1e-3``).
        loss: ``loss(outputs, images, targets) -> (loss, logits or None)``
            (:mod:`vit_tutorial.losses`); by default the cross-entropy with the settings'
            label smoothing, for class indices or soft labels (Mixup, CutMix).
        device: ``'auto'`` (the GPU when there is one), ``'cpu'``, ``'cuda'``, ...
        amp: ``'auto'`` (bf16 autocast on GPUs that support it, else fp16 with a grad scaler;
            nothing on the CPU), ``'bf16'``, ``'fp16'`` or ``None``.
        progress: print a line every tenth of the run (on rank 0), or nothing.
        checkpoint_path: save a checkpoint here every epoch; resume from it if it exists.
        extra: plain values every checkpoint carries (the data's normalisation, say).
        compile: train through ``torch.compile(model)``; checkpoints stay plain.

    Raises:
        ValueError: an empty loader, a checkpoint path that is a folder or in a file, a checkpoint
            trained with other settings, or a hyperparameter out of range (:class:`FitSettings`).
        TypeError: both ``settings`` and keywords, or ``compile`` or ``progress`` not a bool.
    """
    if settings is None:
        settings = FitSettings(**hyperparameters)
    elif hyperparameters:
        raise TypeError(f"pass settings or their fields, not both: got {sorted(hyperparameters)}")
    elif not isinstance(settings, FitSettings):
        raise TypeError(f"settings must be a FitSettings, got {type(settings).__name__}")
    check_bool("compile", compile), check_bool("progress", progress)
    steps = _check_fit_inputs(train_loader, val_loader, checkpoint_path)
    loss = loss if loss is not None else Classification(settings.label_smoothing)
    device = resolve_device(device)
    dtype = _amp_dtype(amp, device)
    model.to(device)
    if isinstance(loss, nn.Module):
        loss.to(device)  # a teacher inside the loss runs where the model runs
    groups = param_groups(model, settings.weight_decay)
    optimizer = torch.optim.AdamW(groups, lr=settings.lr, betas=settings.betas)
    total = settings.epochs * steps
    warmup = min(round(settings.warmup_epochs * steps), total - 1)
    scheduler = warmup_cosine(optimizer, warmup, total)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    state = dict(optimizer=optimizer, scheduler=scheduler, scaler=scaler)
    fitted = {**dataclasses.asdict(settings), "steps": steps}  # what a resume must match
    extra = plain({**(extra or {}), "settings": fitted}, "extra")  # refused now, not at the save
    start, history = 0, {key: [] for key in HISTORY_KEYS}
    if checkpoint_path is not None and Path(checkpoint_path).exists():  # resume
        saved = load_checkpoint(checkpoint_path, model, **state)
        before, wanted = saved["extra"].get("settings", {}), extra["settings"]
        if diffs := [key for key in wanted if before.get(key) != wanted[key]]:
            was, now = (", ".join(f"{k}={d.get(k)!r}" for k in diffs) for d in (before, wanted))
            raise ValueError(
                f"cannot resume {checkpoint_path}: it was trained with {was}, not {now}"
            )
        start, history = saved["epoch"], saved["history"]
    distributed = dist.is_available() and dist.is_initialized()  # under torchrun
    first = not distributed or dist.get_rank() == 0  # the process that writes and prints
    ids = [device.index] if device.type == "cuda" else None
    net = nn.parallel.DistributedDataParallel(model, device_ids=ids) if distributed else model
    net = torch.compile(net) if compile else net

    for epoch in range(start, settings.epochs):
        if hasattr(train_loader.sampler, "set_epoch"):
            train_loader.sampler.set_epoch(epoch)  # a new shuffle each epoch, alike on all ranks
        tic = time.perf_counter()
        net.train()
        sums = torch.zeros(3, device=device)  # loss · B, correct, B, summed over the batches
        for x, y in train_loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            lr = optimizer.param_groups[0]["lr"]  # the rate this step uses
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                value, logits = loss(net(x), x, y)
            if logits is None and val_loader is not None:  # evaluate would fail after the epoch
                raise ValueError("the loss gives no logits for val_loader to score: pass None")
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(value).backward()
            if settings.grad_clip is not None:
                scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
                nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            n = torch.tensor(float(len(y)), device=device)
            labels = y.argmax(-1) if y.dim() == 2 else y  # soft labels: their top class
            correct = (logits.argmax(-1) == labels).sum() if logits is not None else n * math.nan
            sums += torch.stack([value.detach().float() * n, correct.float(), n])
        if distributed:
            dist.all_reduce(sums)  # every rank reports the same, global, numbers
        seconds = time.perf_counter() - tic
        no_val = {"loss": math.nan, "accuracy": math.nan}
        val = evaluate(model, val_loader, device, amp) if val_loader is not None else no_val
        row = (epoch + 1, *(sums[:2] / sums[2]).tolist(), val["loss"], val["accuracy"], lr, seconds)
        for key, value in zip(HISTORY_KEYS, row):
            history[key].append(value)
        if checkpoint_path is not None and first:
            save_checkpoint(checkpoint_path, model, epoch=epoch + 1, history=history,
                            extra=extra, **state)  # fmt: skip
        done, epochs = epoch + 1, settings.epochs
        if progress and first and (done % max(1, epochs // 10) == 0 or done == epochs):
            scores = f"loss {row[1]:.4f} train_acc {row[2]:.4f} val_acc {row[4]:.4f}"
            print(f"epoch {done}/{epochs} {scores}", flush=True)  # every tenth of the run
    return history


#: The keys of :func:`fit`'s history, each a list with a value per epoch.
HISTORY_KEYS = ("epoch", "train_loss", "train_acc", "val_loss", "val_acc", "lr", "time")
