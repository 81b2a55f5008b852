"""Chapter 8's experiments: a ViT, a hybrid ViT and a CNN on Fashion-MNIST, at several
training-set sizes, with augmentation, regularisation and distillation.

Every run gets the same optimisation steps (``steps``, batches of 128) and settings (:data:`FIT`,
its epochs and warm-up scaled to the budget: :attr:`RunSpec.settings`), whatever the model and
the training-set size, so a smaller set is seen for more epochs; the test set, used for no
choice, is evaluated once, at the end.

The models (:func:`build_model`): ``'vit'``, a plain ViT (:data:`VIT_MODEL`: 4×4-pixel patches,
a 7×7 grid); ``'hybrid'``, the same transformer on a convolutional stem (the ``fashion-mnist``
preset's model); ``'resnet18'``, torchvision's with a one-channel first convolution
(:func:`resnet18_greyscale`); ``'resnet8'``, a CNN of torchvision's residual blocks matched to
the ViT in parameters, with a sixth fewer FLOPs (:func:`resnet8_greyscale`). The augmentations
(:data:`AUGMENTATIONS`) are ``torchvision.transforms.v2``'s.

Each run records its learning curve (``history``, scored by ``fit`` every ``eval_every``
steps: at most :data:`HISTORY_POINTS` steps spread over the run, the step, the mean training
loss since the previous point and the validation accuracy); :func:`plot_learning_curves`
draws the curves of several runs, the models side by side (both from
:mod:`vit_tutorial.experiments._history`). The study's runs made before
histories were recorded have none.

Example:
    >>> spec = RunSpec("hybrid", train_size=1000, seed=0, steps=50)
    >>> spec.epochs, spec.settings.epochs
    (7, 7)
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vit_tutorial.checkpoint import load_checkpoint, save_checkpoint
from vit_tutorial.data import fashion_mnist_datasets
from vit_tutorial.engine import Device, FitSettings, evaluate, fit, resolve_device
from vit_tutorial.experiments import epochs_for
from vit_tutorial.experiments._history import (
    HISTORY_POINTS,
    eval_every,
    history_steps,
    learning_curves,
    plot_learning_curves,
)
from vit_tutorial.losses import Classification, HardDistillation
from vit_tutorial.swin import create_swin
from vit_tutorial.validate import check_bool, check_int
from vit_tutorial.vit import VisionTransformer

__all__ = [
    "AUGMENTATIONS",
    "BATCH_SIZE",
    "FIT",
    "FULL_TRAIN_SIZE",
    "HISTORY_POINTS",
    "LATER_MODELS",
    "MODELS",
    "STEPS",
    "VIT_MODEL",
    "Augmentation",
    "RunSpec",
    "build_model",
    "eval_every",
    "history_steps",
    "learning_curves",
    "load_teacher",
    "plot_learning_curves",
    "resnet18_greyscale",
    "resnet8_greyscale",
    "run",
]

#: The training images left after the fixed 5,000-image validation split.
FULL_TRAIN_SIZE = 55_000
BATCH_SIZE = 128
#: The step budget: 13 epochs of the full training set at batch 128 (the CPU recipe's).
STEPS = 13 * math.ceil(FULL_TRAIN_SIZE / BATCH_SIZE)
#: The transformer of ``'vit'`` and ``'hybrid'``.
VIT_MODEL = dict(patch_size=4, dim=64, depth=4, num_heads=4, mlp_ratio=2.0, pool="mean")
#: The settings of every model, as the full training set's run has them: 13 epochs, one of
#: warm-up (a thirteenth of the steps, whatever the size: :attr:`RunSpec.settings`).
FIT = FitSettings(epochs=13, lr=2e-3, weight_decay=0.05, warmup_epochs=1, label_smoothing=0.1)
MODELS = ("vit", "hybrid", "resnet18", "resnet8")
#: Models of later chapters that :func:`build_model` also builds: chapter 10's Swin
#: (``vit_tutorial.swin``'s ``'swin_fashion'`` preset, matched to ``'vit'``) and its three
#: controls: ``'swin_global'``, the same Swin with one window per stage covering its grid
#: (``window_size=(14, 7, 4)``: the pyramid without windows); ``'vit_p2'``, ``'vit'`` with
#: 2×2 patches (the Swin's 196 first-stage tokens, without its pyramid or windows); and
#: ``'vit_rel'``, ``'vit'`` with a relative position bias in every block instead of its
#: absolute table (``pos_embed='relative'``, the Swin's kind of position information).
LATER_MODELS = ("swin", "swin_global", "vit_p2", "vit_rel")
#: The widths of :func:`resnet8_greyscale`'s three stages (14×14, 7×7 and 4×4 grids).
RESNET8_WIDTHS = (32, 40, 80)


def resnet18_greyscale(in_channels: int = 1, num_classes: int = 10) -> nn.Module:
    """torchvision's ResNet-18, its first convolution taking ``in_channels`` channels, initialised
    as torchvision's are (Kaiming normal, ``fan_out``; ``torchvision/models/resnet.py``). The 7×7
    stride-2 convolution and the max-pool take a 28×28 image to a 7×7 grid (the ViT's patch
    grid), the four stages to 7, 4, 2 and 1 pixels."""
    from torchvision.models import resnet18

    in_channels = check_int("in_channels", in_channels)
    model = resnet18(num_classes=check_int("num_classes", num_classes))
    model.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    return model


def resnet8_greyscale(in_channels: int = 1, num_classes: int = 10) -> nn.Module:
    """A CNN the size of the ViT: a 3×3 stride-2 convolution (28×28 to 14×14), then one
    torchvision ResNet ``BasicBlock`` per stage at the widths :data:`RESNET8_WIDTHS` (the
    second and third halve the grid, with a 1×1 projection shortcut, as ResNet's do), global
    average pooling and a linear head: 8 weight layers besides the shortcuts, 137,242 parameters
    and 12.9 MFLOPs per 28×28 image, against the ViT's 138,890 and 15.4 (its widths were matched
    to a count that missed the products inside the ViT's attention: chapter 8 says so).
    Initialised as torchvision's ResNets are (``torchvision/models/resnet.py``)."""
    from torchvision.models.resnet import BasicBlock

    first = RESNET8_WIDTHS[0]
    layers = [
        nn.Conv2d(check_int("in_channels", in_channels), first, 3, 2, 1, bias=False),
        nn.BatchNorm2d(first),
        nn.ReLU(inplace=True),
    ]
    inputs = first
    for stage, width in enumerate(RESNET8_WIDTHS):
        stride, shortcut = 1, None
        if stage > 0:  # the grid halves: ResNet's 1×1 projection shortcut
            stride = 2
            shortcut = nn.Sequential(
                nn.Conv2d(inputs, width, 1, stride, bias=False), nn.BatchNorm2d(width)
            )
        layers.append(BasicBlock(inputs, width, stride, shortcut))
        inputs = width
    head = nn.Linear(RESNET8_WIDTHS[-1], check_int("num_classes", num_classes))
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), head)
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
    return model


def build_model(
    name: str, *, pool: str = "mean", drop_path: float = 0.0, distilled: bool = False
) -> nn.Module:
    """A fresh model of :data:`MODELS` for 28×28 grey images and 10 classes. For the ViTs:
    ``pool`` (``'mean'`` or ``'cls'``), ``distilled`` (DeiT's distillation token; needs
    ``pool='cls'``) and ``drop_path`` (stochastic depth)."""
    _check_model(name, pool, drop_path, distilled)
    if name == "resnet18":
        return resnet18_greyscale()
    if name == "resnet8":
        return resnet8_greyscale()
    if name == "swin":
        return create_swin("swin_fashion")
    if name == "swin_global":
        return create_swin("swin_fashion", window_size=(14, 7, 4))
    options = dict(VIT_MODEL, pool=pool, drop_path=drop_path, distilled=distilled)
    if name == "vit_p2":
        options["patch_size"] = 2
    if name == "vit_rel":
        options["pos_embed"] = "relative"
    stem = "conv" if name == "hybrid" else "patch"
    return VisionTransformer(image_size=28, in_channels=1, num_classes=10, stem=stem, **options)


def _check_model(name: str, pool: str, drop_path: float, distilled: bool) -> None:
    if name not in MODELS + LATER_MODELS:
        raise ValueError(f"unknown model {name!r}; expected one of {MODELS + LATER_MODELS}")
    vits = ("vit", "hybrid", "vit_p2", "vit_rel")
    if name not in vits and (distilled or drop_path or pool != "mean"):
        raise ValueError(
            f"pool, distilled and drop_path apply to the ViTs, not to {name!r} (it has no "
            "class token)"
        )


@dataclasses.dataclass(frozen=True)
class Augmentation:
    """One row of the ablation: a per-image pipeline, a per-batch mix, a stochastic depth."""

    description: str
    image: Callable[[], Any] | None = None  # builds the transforms.v2 pipeline
    batch: bool = False  # MixUp or CutMix on each batch
    drop_path: float = 0.0


_v2 = functools.partial(importlib.import_module, "torchvision.transforms.v2")  # when first used
#: The ablation's rows, DeiT's list (Touvron et al. 2021, Table 9: RandAugment m9, random erasing
#: 0.25, Mixup 0.8, CutMix 1.0, stochastic depth 0.1) at torchvision's strengths, not DeiT's: its
#: RandAugment m9 of 31 bins is 9/30 of each range (timm's is 9/10), erasing fills zeros (DeiT's
#: random pixels); the crop pads 2 pixels.
AUGMENTATIONS: dict[str, Augmentation] = {
    "none": Augmentation("no augmentation"),
    "crop": Augmentation("random crop, padding 2", lambda: _v2().RandomCrop(28, padding=2)),
    "flip": Augmentation("horizontal flip", lambda: _v2().RandomHorizontalFlip()),
    "crop+flip": Augmentation("random crop and flip", lambda: _pipeline("crop", "flip")),
    "trivialaugment": Augmentation("TrivialAugment", lambda: _v2().TrivialAugmentWide()),
    "randaugment": Augmentation(
        "RandAugment (2 ops, magnitude 9)", lambda: _v2().RandAugment(num_ops=2, magnitude=9)
    ),
    "erasing": Augmentation("random erasing, p=0.25", lambda: _v2().RandomErasing(p=0.25)),
    "mixup/cutmix": Augmentation("Mixup (0.8) or CutMix (1.0) per batch", batch=True),
    "drop-path": Augmentation("stochastic depth 0.1", drop_path=0.1),
    "all": Augmentation(
        "crop, flip, RandAugment, erasing, Mixup/CutMix, stochastic depth",
        lambda: _pipeline("crop", "flip", "randaugment", "erasing"),
        batch=True,
        drop_path=0.1,
    ),
}


def _pipeline(*rows: str):
    return _v2().Compose([AUGMENTATIONS[row].image() for row in rows])


def _mix():
    v2 = _v2()
    mixes = [v2.MixUp(alpha=0.8, num_classes=10), v2.CutMix(alpha=1.0, num_classes=10)]
    return v2.RandomChoice(mixes)


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One training run: model, training-set size, seed, step budget, augmentation (of
    :data:`AUGMENTATIONS`), the ViTs' pooling, and whether it learns from the ``'resnet18'`` of the
    same images and seed (DeiT's distillation token, next to the class token: ``pool='cls'``)."""

    model: str
    train_size: int = FULL_TRAIN_SIZE
    seed: int = 0
    steps: int = STEPS
    augmentation: str = "none"
    pool: str = "mean"
    distilled: bool = False

    def __post_init__(self) -> None:
        if self.augmentation not in AUGMENTATIONS:
            known = sorted(AUGMENTATIONS)
            raise ValueError(f"unknown augmentation {self.augmentation!r}; expected one of {known}")
        bounds = {"train_size": (10, FULL_TRAIN_SIZE), "seed": (0, None), "steps": (1, None)}
        for name, (low, high) in bounds.items():  # NumPy integers become ints
            object.__setattr__(self, name, check_int(name, getattr(self, name), low, high))
        if self.pool not in ("mean", "cls"):
            raise ValueError(f"pool must be 'mean' or 'cls', got {self.pool!r}")
        drop_path = AUGMENTATIONS[self.augmentation].drop_path
        _check_model(self.model, self.pool, drop_path, check_bool("distilled", self.distilled))
        if self.distilled and self.pool != "cls":
            raise ValueError("a distilled run pools the class token: pass pool='cls'")

    @property
    def key(self) -> str:
        """A name unique to the run, e.g. ``hybrid-n55000-s0-none-t5590``."""
        tail = ("-cls" if self.pool == "cls" else "") + ("-distilled" if self.distilled else "")
        return (
            f"{self.model}-n{self.train_size}-s{self.seed}-{self.augmentation}-t{self.steps}{tail}"
        )

    @property
    def teacher(self) -> RunSpec:
        """The run that trains this run's teacher."""
        return RunSpec("resnet18", self.train_size, self.seed, self.steps)

    @property
    def epochs(self) -> int:
        """The epochs of the budget rule."""
        return epochs_for(self.train_size, self.steps, BATCH_SIZE)

    @property
    def settings(self) -> FitSettings:
        """:data:`FIT` for this run: its epochs, and a warm-up of a thirteenth of its steps."""
        warmup = self.steps / FIT.epochs / math.ceil(self.train_size / BATCH_SIZE)
        return dataclasses.replace(FIT, epochs=self.epochs, warmup_epochs=warmup)


def run(
    spec: RunSpec,
    *,
    data_root: str | Path | None = None,
    teacher: nn.Module | None = None,
    device: Device = "auto",
    amp: str | None = "auto",
    num_workers: int = 0,
    save_to: str | Path | None = None,
    history_points: int = HISTORY_POINTS,
    build: Callable[[], nn.Module] | None = None,
    probe: Callable[[nn.Module, Any], dict] | None = None,
) -> dict[str, Any]:
    """Train the run ``spec`` describes (``device``, ``amp``: :func:`~vit_tutorial.engine.fit`'s):
    ``spec``'s fields, ``test_accuracy``, ``val_accuracy``, ``epochs``, ``train_seconds``... A
    distilled run learns from ``teacher`` (:class:`~vit_tutorial.losses.HardDistillation`);
    ``save_to`` gets the weights' checkpoint (a later run's teacher: :func:`load_teacher`).
    ``history`` is the learning curve at at most ``history_points`` steps spread over the run
    (:func:`history_steps`): ``fit`` scores the validation split every so many steps
    (``eval_every``), which changes no weight; ``history_seconds`` is that scoring's time,
    left out of ``train_seconds``, and ``eval_seconds`` the test set's. Chapter 11 passes ``build`` (its model, drawn after the
    seed) and ``probe`` (``probe(model, data)``: measures of the trained model, added)."""
    if spec.distilled and teacher is None:
        raise ValueError(f"run {spec.key} is distilled: pass its teacher ({spec.teacher.key})")
    _check_save_to(save_to)
    data = _data(spec, data_root, num_workers)
    torch.manual_seed(spec.seed)
    model = build() if build is not None else _model(spec)
    settings = spec.settings
    steps = settings.epochs * len(data.train_loader)
    every = eval_every(steps, history_points)  # refuses 0 points
    loss = _loss(spec, teacher, settings.label_smoothing)
    options = dict(loss=loss, device=device, amp=amp, progress=False, eval_every=every)
    history = fit(model, data.train_loader, data.val_loader, settings, **options)
    curve = history["curve"]
    tic = time.perf_counter()
    result = {
        **dataclasses.asdict(spec),
        "key": spec.key,
        "epochs": settings.epochs,
        "optimizer_steps": steps,
        "test_accuracy": evaluate(model, data.test_loader, device, amp)["accuracy"],
        "val_accuracy": curve["val_acc"][-1],  # the final model's: the last point is the end
        "train_seconds": round(sum(history["time"]), 2),
        "final_train_loss": round(history["train_loss"][-1], 4),
        "parameters": sum(p.numel() for p in model.parameters()),
        "history": {
            "step": curve["step"],
            "train_loss": [round(value, 4) for value in curve["train_loss"]],
            "val_accuracy": curve["val_acc"],
        },
        "history_seconds": round(sum(curve["eval_seconds"]), 2),
    }
    result["eval_seconds"] = round(time.perf_counter() - tic, 2)
    if probe is not None:
        result.update(probe(model, data))
    if save_to is not None:
        save_checkpoint(save_to, model)
    return result


def _model(spec: RunSpec) -> nn.Module:
    """A fresh model of the run: its pooling, stochastic depth and distillation token."""
    drop_path = AUGMENTATIONS[spec.augmentation].drop_path
    return build_model(spec.model, pool=spec.pool, drop_path=drop_path, distilled=spec.distilled)


def _data(spec: RunSpec, data_root: str | Path | None, num_workers: int) -> Any:
    """The run's Fashion-MNIST splits and loaders, with its augmentation."""
    augmentation = AUGMENTATIONS[spec.augmentation]
    return fashion_mnist_datasets(
        data_root,
        train_size=spec.train_size,
        seed=spec.seed,
        batch_size=BATCH_SIZE,
        num_workers=num_workers,
        train_transform=augmentation.image() if augmentation.image else None,
        batch_transform=_mix() if augmentation.batch else None,
    )


def _loss(spec: RunSpec, teacher: nn.Module | None, smoothing: float) -> Any:
    """The run's loss: DeiT's hard distillation from ``teacher``, or fit's default."""
    return HardDistillation(teacher, smoothing) if spec.distilled else Classification(smoothing)


def _check_save_to(save_to: str | Path | None) -> None:
    """Refuse, before any training, a ``save_to`` that is a folder or inside a file."""
    target = Path(save_to or "")
    if save_to is not None and (target.is_dir() or any(map(Path.is_file, target.parents))):
        raise ValueError(f"save_to={str(save_to)!r} is a folder or inside a file, not a file")


def load_teacher(path: str | Path, device: Device = "cpu") -> nn.Module:
    """The ``'resnet18'`` whose weights :func:`run` saved at ``path``, in evaluation mode;
    the checkpoint's SHA-256 is checked (:func:`~vit_tutorial.checkpoint.load_checkpoint`)."""
    model = resnet18_greyscale()
    try:
        load_checkpoint(path, model, restore_rng=False)
    except RuntimeError as error:  # load_state_dict: the weights of another model
        details = str(error).partition("\n")[2].strip()[:120]
        raise ValueError(f"{path} is not a checkpoint of run()'s 'resnet18': {details}") from error
    return model.to(resolve_device(device)).eval()
