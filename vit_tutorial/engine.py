"""The training engine (chapters 6, 8 and 9): one loop, :func:`fit`, for every model.

:func:`fit` trains a classifier, a DeiT student and a masked autoencoder alike: only the **loss**
changes (:mod:`vit_tutorial.losses`). Its optimisation is DeiT's (Touvron et al. 2021, Table 9):
**AdamW** with weight decay on the weight matrices only (:func:`param_groups`), a **linear warm-up,
then cosine decay** of the learning rate, stepped every iteration (:func:`warmup_cosine`; both in
:mod:`vit_tutorial.optim`); the ViT paper pre-trained with Adam and a linear decay instead. Also:
a learning curve scored every few steps (``eval_every``), gradient clipping, bf16/fp16 autocast on
GPUs, a checkpoint every epoch (resumed to the same weights as an uninterrupted run),
DistributedDataParallel under ``torchrun`` (rank 0 alone writes and prints). "How to fit" is one
object, :class:`FitSettings`, checked once when built; an epoch is :func:`train_one_epoch`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.utils.data import DataLoader

from vit_tutorial.checkpoint import load_checkpoint, plain, save_checkpoint
from vit_tutorial.devices import Device, resolve_device
from vit_tutorial.losses import Classification, cross_entropy
from vit_tutorial.optim import param_groups, warmup_cosine
from vit_tutorial.validate import check_bool, check_int, check_real

#: ``Device``, ``resolve_device``, ``param_groups`` and ``warmup_cosine`` are imported here
#: too, from :mod:`vit_tutorial.devices` and :mod:`vit_tutorial.optim`, which document them.
__all__ = ["FitSettings", "TrainResult", "predict", "evaluate", "train_one_epoch", "fit"]


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


def _check_fit_inputs(train_loader, val_loader, path, eval_every) -> int:
    """The batches an epoch, once what would fail only after training is refused."""
    if eval_every is not None and check_int("eval_every", eval_every) and val_loader is None:
        raise ValueError("eval_every scores val_loader after those steps: pass a val_loader")
    for name, loader in [("train_loader", train_loader), ("val_loader", val_loader)]:
        if loader is not None and len(loader) == 0:
            raise ValueError(f"{name} yields no batches {_EMPTY}")
    file = path and next((p for p in Path(path).parents if p.exists() and not p.is_dir()), None)
    if path is not None and (file or Path(path).is_dir()):
        where = f"inside {str(file)!r}, a file" if file else "a folder"
        raise ValueError(f"checkpoint_path must name a file, got {str(path)!r}, {where}")
    return len(train_loader)


def train_one_epoch(
    net: nn.Module,
    loader: DataLoader,
    loss: Loss,
    state: dict[str, Any],
    settings: FitSettings,
    device: torch.device,
    dtype: torch.dtype | None,
    after_step: Callable[[Tensor, Tensor], None] | None = None,
    need_logits: bool = False,
) -> tuple[Tensor, float]:
    """One pass over ``loader`` (DeiT's ``engine.train_one_epoch``): a step of ``state``'s
    ``optimizer``, ``scheduler`` and ``scaler`` per batch. Returns the sums over the batches of
    (loss · B, correct, B) on ``device``, and the rate of the last step. ``after_step(loss · B,
    B)`` runs after each step (:func:`fit`'s learning curve); ``need_logits``: a loss without
    logits is refused at the first batch (a validation loader could not be scored)."""
    optimizer, scheduler, scaler = state["optimizer"], state["scheduler"], state["scaler"]
    sums, lr = torch.zeros(3, device=device), math.nan  # loss · B, correct, B
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        lr = optimizer.param_groups[0]["lr"]  # the rate this step uses
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            value, logits = loss(net(x), x, y)
        if logits is None and need_logits:  # evaluate would fail after the epoch
            raise ValueError("the loss gives no logits for val_loader to score: pass None")
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(value).backward()
        if settings.grad_clip is not None:
            scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            nn.utils.clip_grad_norm_(net.parameters(), settings.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        n = torch.tensor(float(len(y)), device=device)
        labels = y.argmax(-1) if y.dim() == 2 else y  # soft labels: their top class
        correct = (logits.argmax(-1) == labels).sum() if logits is not None else n * math.nan
        weighted = value.detach().float() * n
        sums += torch.stack([weighted, correct.float(), n])
        if after_step is not None:
            after_step(weighted, n)
    return sums, lr


class _Curve:
    """:func:`fit`'s learning curve: after every ``every``-th optimiser step and the last
    (``total``), the mean training loss of the steps since the previous point and the scores
    on ``val_loader``, appended to the history's ``curve``, resumed from ``step`` with the
    ``pending`` sums a checkpoint kept. Scoring runs on a copy of the random state (a loader
    draws its seed from it), so the run trains the same weights as without it; its seconds are
    kept apart from the training's."""

    def __init__(self, evaluate_args: tuple, every: int, total: int, step: int, history: dict,
                 pending: list[float]) -> None:  # fmt: skip
        self.evaluate_args, self.every, self.total = evaluate_args, every, total
        self.points = history.setdefault("curve", {key: [] for key in CURVE_KEYS})
        self.step, self.scored_at, self.scores = step, -1, {}
        self.seconds = 0.0  # scoring seconds since the counter was last read
        # loss · B, B since the last point (a tensor on the device: no sync per step)
        self.sums = torch.tensor(pending, device=evaluate_args[2])

    def pending(self) -> list[float]:
        """The sums since the last point, ``[loss · B, B]``, that a checkpoint keeps."""
        return self.sums.tolist()

    def __call__(self, weighted: Tensor, n: Tensor) -> None:
        self.step += 1
        self.sums = self.sums + torch.stack([weighted, n])
        if self.step % self.every and self.step != self.total:
            return
        tic = time.perf_counter()
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(self.sums)  # the global mean, as the epoch's row
        with torch.random.fork_rng(devices=[]):
            self.scores = evaluate(*self.evaluate_args)
        train_loss = (self.sums[0] / self.sums[1]).item()
        self.sums, self.scored_at = torch.zeros_like(self.sums), self.step
        self.seconds += time.perf_counter() - tic
        row = (self.step, train_loss, self.scores["loss"], self.scores["accuracy"])
        for key, value in zip(CURVE_KEYS, (*row, time.perf_counter() - tic)):
            self.points[key].append(value)


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
    eval_every: int | None = None,
    **hyperparameters: Any,
) -> dict[str, Any]:
    """Train ``model`` with AdamW and warm-up + cosine; return the per-epoch history: for each
    of :data:`HISTORY_KEYS` a list of one value per epoch (``lr`` its last step's rate, ``time``
    its training seconds, scoring excluded; an accuracy the loss cannot score is NaN).

    Args:
        model: the model; ``loss`` reads its output.
        train_loader: ``(images, targets)`` batches; its sampler's ``set_epoch`` runs each epoch.
        val_loader: a classifier's validation batches, scored after every epoch (or at the
            ``eval_every`` points instead), or ``None``.
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
        eval_every: score ``val_loader`` after every ``eval_every``-th step and the last,
            not after each epoch (nanoGPT's ``eval_interval``): the history's ``curve``, a list
            per :data:`CURVE_KEYS`; an epoch's row has a point's scores at its end, else NaN.
            The same seed trains the same weights as with ``val_loader=None`` (an epoch's
            scoring draws a loader seed from the random state; a point's does not).

    Raises:
        ValueError: an empty loader, a checkpoint path that is a folder or in a file, a checkpoint
            trained with other settings, ``eval_every`` without ``val_loader`` or under 1, or a
            hyperparameter out of range (:class:`FitSettings`).
        TypeError: both ``settings`` and keywords, ``compile`` or ``progress`` not a bool, or
            ``eval_every`` not an integer.
    """
    if settings is None:
        settings = FitSettings(**hyperparameters)
    elif hyperparameters:
        raise TypeError(f"pass settings or their fields, not both: got {sorted(hyperparameters)}")
    elif not isinstance(settings, FitSettings):
        raise TypeError(f"settings must be a FitSettings, got {type(settings).__name__}")
    check_bool("compile", compile), check_bool("progress", progress)
    steps = _check_fit_inputs(train_loader, val_loader, checkpoint_path, eval_every)
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
    fitted = {**dataclasses.asdict(settings), "steps": steps, "eval_every": eval_every}
    extra = plain({**(extra or {}), "settings": fitted}, "extra")  # refused now, not at the save
    start, history, pending = 0, {key: [] for key in HISTORY_KEYS}, [0.0, 0.0]
    if checkpoint_path is not None and Path(checkpoint_path).exists():  # resume
        saved = load_checkpoint(checkpoint_path, model, **state)
        before, wanted = saved["extra"].get("settings", {}), extra["settings"]
        if diffs := [key for key in wanted if before.get(key) != wanted[key]]:
            was, now = (", ".join(f"{k}={d.get(k)!r}" for k in diffs) for d in (before, wanted))
            raise ValueError(
                f"cannot resume {checkpoint_path}: it was trained with {was}, not {now}"
            )
        start, history = saved["epoch"], saved["history"]
        pending = saved["extra"].get("curve_pending", pending)  # since the curve's last point
    where = ((model, val_loader, device, amp), eval_every, total, start * steps, history)
    curve = _Curve(*where, pending) if eval_every is not None else None
    distributed = dist.is_available() and dist.is_initialized()  # under torchrun
    first = not distributed or dist.get_rank() == 0  # the process that writes and prints
    ids = [device.index] if device.type == "cuda" else None
    net = nn.parallel.DistributedDataParallel(model, device_ids=ids) if distributed else model
    net = torch.compile(net) if compile else net
    no_val = {"loss": math.nan, "accuracy": math.nan}

    for epoch in range(start, settings.epochs):
        if hasattr(train_loader.sampler, "set_epoch"):
            train_loader.sampler.set_epoch(epoch)  # a new shuffle each epoch, alike on all ranks
        tic = time.perf_counter()
        net.train()
        sums, lr = train_one_epoch(
            net, train_loader, loss, state, settings, device, dtype, curve, val_loader is not None
        )
        if distributed:
            dist.all_reduce(sums)  # every rank reports the same, global, numbers
        seconds = time.perf_counter() - tic
        if curve is not None:  # its scoring is not training time
            seconds, curve.seconds = seconds - curve.seconds, 0.0
            val = curve.scores if curve.scored_at == (epoch + 1) * steps else no_val
        else:
            val = evaluate(model, val_loader, device, amp) if val_loader is not None else no_val
        row = (epoch + 1, *(sums[:2] / sums[2]).tolist(), val["loss"], val["accuracy"], lr, seconds)
        for key, value in zip(HISTORY_KEYS, row):
            history[key].append(value)
        if checkpoint_path is not None and first:
            pending = {"curve_pending": curve.pending()} if curve else {}
            save_checkpoint(checkpoint_path, model, epoch=epoch + 1, history=history,
                            extra=extra | pending, **state)  # fmt: skip
        done, epochs = epoch + 1, settings.epochs
        if progress and first and (done % max(1, epochs // 10) == 0 or done == epochs):
            scores = f"loss {row[1]:.4f} train_acc {row[2]:.4f} val_acc {row[4]:.4f}"
            print(f"epoch {done}/{epochs} {scores}", flush=True)  # every tenth of the run
    return history


#: The keys of :func:`fit`'s history, each a list with a value per epoch.
HISTORY_KEYS = ("epoch", "train_loss", "train_acc", "val_loss", "val_acc", "lr", "time")
#: The keys of the history's ``curve`` (``fit(eval_every=...)``), each a list with a value per
#: point: the optimiser step, the mean training loss since the previous point, the validation
#: loss and accuracy, and the seconds the scoring took.
CURVE_KEYS = ("step", "train_loss", "val_loss", "val_acc", "eval_seconds")
