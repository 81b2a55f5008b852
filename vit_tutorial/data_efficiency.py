"""Chapter 8's experiments: a ViT, a hybrid ViT and a CNN on Fashion-MNIST, at several
training-set sizes, with augmentation, regularisation and distillation.

Every run follows one budget rule: the same number of optimisation steps (``steps``,
batches of 128), whatever the model and the training-set size, so a smaller training
set is seen for more epochs. All models train with the same optimiser, schedule and
label smoothing (:func:`vit_tutorial.engine.fit`); none is tuned on the test set, which is
evaluated once, at the end.

The models (:func:`build_model`):

- ``'vit'``: a plain ViT, 4×4-pixel patches (a 7×7 grid), 4 blocks of width 64;
- ``'hybrid'``: the same transformer on a convolutional stem (the ``fashion-mnist``
  preset's model);
- ``'resnet18'``: torchvision's ResNet-18 with a one-channel first convolution
  (:func:`resnet18_greyscale`).

The augmentations (:data:`AUGMENTATIONS`) all come from ``torchvision.transforms.v2``.

Example:
    >>> spec = RunSpec("hybrid", train_size=1000, seed=0, steps=50)
    >>> epochs_for(spec.train_size, spec.steps, 128)
    7
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vit_tutorial.data import fashion_mnist_datasets
from vit_tutorial.engine import Device, evaluate, fit
from vit_tutorial.vit import VisionTransformer

__all__ = [
    "AUGMENTATIONS",
    "FULL_TRAIN_SIZE",
    "MODELS",
    "RunSpec",
    "STEPS",
    "VIT_MODEL",
    "Augmentation",
    "build_model",
    "epochs_for",
    "load_teacher",
    "resnet18_greyscale",
    "run",
]

#: The training images left after the fixed 5,000-image validation split.
FULL_TRAIN_SIZE = 55_000
BATCH_SIZE = 128
#: The step budget: 13 epochs of the full training set at batch 128 (the CPU recipe's).
STEPS = 13 * math.ceil(FULL_TRAIN_SIZE / BATCH_SIZE)
#: The transformer of ``'vit'`` and ``'hybrid'``.
VIT_MODEL = dict(patch_size=4, dim=64, depth=4, num_heads=4, mlp_ratio=2.0, pool="mean")
#: The optimiser settings shared by every model.
FIT_OPTIONS = dict(lr=2e-3, weight_decay=0.05, label_smoothing=0.1)
WARMUP_FRACTION = 13  # warm up for 1/13 of the steps: one epoch of the full set
MODELS = ("vit", "hybrid", "resnet18")


def resnet18_greyscale(in_channels: int = 1, num_classes: int = 10) -> nn.Module:
    """torchvision's ResNet-18, its first convolution taking ``in_channels`` channels.

    Nothing else changes: the 7×7 stride-2 convolution and the max-pool take a 28×28 image
    to a 7×7 grid (the ViT's patch grid), then the four stages to 7, 4, 2 and 1 pixels.
    The new convolution is initialised as torchvision initialises its convolutions
    (Kaiming normal, ``fan_out``; ``torchvision/models/resnet.py``).
    """
    from torchvision.models import resnet18

    if isinstance(in_channels, bool) or not isinstance(in_channels, int) or in_channels < 1:
        raise ValueError(f"in_channels must be an integer >= 1, got {in_channels!r}")
    model = resnet18(num_classes=num_classes)
    model.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    return model


def build_model(
    name: str,
    *,
    image_size: int = 28,
    in_channels: int = 1,
    num_classes: int = 10,
    pool: str = "mean",
    drop_path: float = 0.0,
    distilled: bool = False,
) -> nn.Module:
    """A fresh model of :data:`MODELS`. For the ViTs: ``pool`` (``'mean'`` or ``'cls'``),
    ``distilled`` (DeiT's distillation token; needs ``pool='cls'``) and ``drop_path``
    (stochastic depth)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; expected one of {MODELS}")
    if name == "resnet18":
        if distilled or drop_path or pool != "mean":
            raise ValueError("pool, distilled and drop_path apply to the ViTs, not to 'resnet18'")
        return resnet18_greyscale(in_channels, num_classes)
    config = {**VIT_MODEL, "pool": pool}
    return VisionTransformer(
        image_size=image_size,
        in_channels=in_channels,
        num_classes=num_classes,
        stem="conv" if name == "hybrid" else "patch",
        drop_path=drop_path,
        distilled=distilled,
        **config,
    )


@dataclasses.dataclass(frozen=True)
class Augmentation:
    """One row of the ablation: a per-image pipeline, a per-batch mix, a stochastic depth."""

    description: str
    image: Callable[[], Any] | None = None  # builds the transforms.v2 pipeline
    batch: bool = False  # MixUp or CutMix on each batch
    drop_path: float = 0.0


def _v2():
    from torchvision.transforms import v2

    return v2


#: The ablation's rows. The strengths are DeiT's (Touvron et al. 2021, Table 9: RandAugment
#: m9, random erasing 0.25, Mixup 0.8, CutMix 1.0, stochastic depth 0.1); the crop pads by
#: 2 pixels of 28.
AUGMENTATIONS: dict[str, Augmentation] = {
    "none": Augmentation("no augmentation"),
    "crop": Augmentation("random crop, padding 2", lambda: _v2().RandomCrop(28, padding=2)),
    "flip": Augmentation("horizontal flip", lambda: _v2().RandomHorizontalFlip()),
    "crop+flip": Augmentation(
        "random crop and flip",
        lambda: _v2().Compose([_v2().RandomCrop(28, padding=2), _v2().RandomHorizontalFlip()]),
    ),
    "trivialaugment": Augmentation("TrivialAugment", lambda: _v2().TrivialAugmentWide()),
    "randaugment": Augmentation(
        "RandAugment (2 ops, magnitude 9)", lambda: _v2().RandAugment(num_ops=2, magnitude=9)
    ),
    "erasing": Augmentation("random erasing, p=0.25", lambda: _v2().RandomErasing(p=0.25)),
    "mixup/cutmix": Augmentation("Mixup (0.8) or CutMix (1.0) per batch", batch=True),
    "drop-path": Augmentation("stochastic depth 0.1", drop_path=0.1),
    "all": Augmentation(
        "crop, flip, RandAugment, erasing, Mixup/CutMix, stochastic depth",
        lambda: _v2().Compose(
            [
                _v2().RandomCrop(28, padding=2),
                _v2().RandomHorizontalFlip(),
                _v2().RandAugment(num_ops=2, magnitude=9),
                _v2().RandomErasing(p=0.25),
            ]
        ),
        batch=True,
        drop_path=0.1,
    ),
}


def _mix(num_classes: int):
    v2 = _v2()
    return v2.RandomChoice(
        [
            v2.MixUp(alpha=0.8, num_classes=num_classes),
            v2.CutMix(alpha=1.0, num_classes=num_classes),
        ]
    )


def epochs_for(train_size: int, steps: int, batch_size: int = BATCH_SIZE) -> int:
    """Epochs of ``train_size`` images that give at least ``steps`` optimisation steps."""
    for name, value in (("train_size", train_size), ("steps", steps), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {name}={value!r}")
    return math.ceil(steps / math.ceil(train_size / batch_size))


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One training run: a model, a training-set size, a seed, a step budget, an
    augmentation of :data:`AUGMENTATIONS`, the ViTs' pooling, and whether the run is
    distilled from the ``'resnet18'`` trained on the same images with the same seed
    (DeiT's distillation token sits next to the class token: ``pool='cls'``)."""

    model: str
    train_size: int = FULL_TRAIN_SIZE
    seed: int = 0
    steps: int = STEPS
    augmentation: str = "none"
    pool: str = "mean"
    distilled: bool = False

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r}; expected one of {MODELS}")
        if self.augmentation not in AUGMENTATIONS:
            raise ValueError(
                f"unknown augmentation {self.augmentation!r}; expected one of "
                f"{sorted(AUGMENTATIONS)}"
            )
        epochs_for(self.train_size, self.steps)  # validates both
        if self.pool not in ("mean", "cls"):
            raise ValueError(f"pool must be 'mean' or 'cls', got {self.pool!r}")
        if self.model == "resnet18" and (self.distilled or self.pool != "mean"):
            raise ValueError("'resnet18' (the teacher) has no class token to pool or distil")
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


def run(
    spec: RunSpec,
    *,
    data_root: str | Path | None = None,
    teacher: nn.Module | None = None,
    device: Device = "auto",
    amp: str | None = "auto",
    num_workers: int = 0,
    save_to: str | Path | None = None,
) -> dict[str, Any]:
    """Train the run ``spec`` describes; its accuracies, time and size.

    Args:
        data_root: where Fashion-MNIST is (:func:`~vit_tutorial.data.fashion_mnist_datasets`).
        teacher: the trained classifier a distilled run learns from.
        device, amp: :func:`~vit_tutorial.engine.fit`'s.
        num_workers: data-loader worker processes.
        save_to: save the trained weights here (a teacher for later runs).

    Returns:
        ``spec``'s fields, ``test_accuracy``, ``val_accuracy``, ``epochs``, ``train_seconds``...
    """
    if spec.distilled and teacher is None:
        raise ValueError(f"run {spec.key} is distilled: pass its teacher ({spec.teacher.key})")
    augmentation = AUGMENTATIONS[spec.augmentation]
    data = _datasets(spec, augmentation, data_root, num_workers)
    torch.manual_seed(spec.seed)
    model = build_model(
        spec.model, pool=spec.pool, drop_path=augmentation.drop_path, distilled=spec.distilled
    )
    epochs = epochs_for(spec.train_size, spec.steps)
    steps_per_epoch = len(data.train_loader)
    history = fit(
        model,
        data.train_loader,
        None,
        epochs=epochs,
        **FIT_OPTIONS,
        warmup_epochs=spec.steps / WARMUP_FRACTION / steps_per_epoch,
        device=device,
        amp=amp,
        progress=False,
        teacher=teacher,
    )
    tic = time.perf_counter()
    result = {
        **dataclasses.asdict(spec),
        "key": spec.key,
        "epochs": epochs,
        "optimizer_steps": epochs * steps_per_epoch,
        "test_accuracy": evaluate(model, data.test_loader, device, amp)["accuracy"],
        "val_accuracy": evaluate(model, data.val_loader, device, amp)["accuracy"],
        "train_seconds": round(sum(history["time"]), 2),
        "final_train_loss": round(history["train_loss"][-1], 4),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    result["eval_seconds"] = round(time.perf_counter() - tic, 2)
    if save_to is not None:
        _save_weights(model, Path(save_to))
    return result


def _datasets(spec: RunSpec, augmentation: Augmentation, data_root, num_workers: int):
    """Fashion-MNIST as ``spec`` and its augmentation row ask."""
    return fashion_mnist_datasets(
        data_root,
        train_size=spec.train_size,
        seed=spec.seed,
        batch_size=BATCH_SIZE,
        num_workers=num_workers,
        train_transform=augmentation.image() if augmentation.image else None,
        batch_transform=_mix(10) if augmentation.batch else None,
    )


def _save_weights(model: nn.Module, path: Path) -> None:
    """The model's weights on the CPU, written atomically: a half-written teacher is never
    read."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save({k: v.cpu() for k, v in model.state_dict().items()}, tmp)
    tmp.replace(path)


def load_teacher(path: str | Path, device: Device = "cpu") -> nn.Module:
    """The ``'resnet18'`` whose weights :func:`run` saved at ``path``."""
    model = resnet18_greyscale()
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return model.to(device).eval()
