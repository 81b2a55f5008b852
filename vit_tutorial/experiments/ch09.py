"""Chapter 9's experiments: pre-train on Fashion-MNIST, then fine-tune with few labels.

Three starting points (:data:`STARTS`, :func:`start`) for the same ViT (:data:`ENCODER`, chapter
8's plain ViT, mean-pooled): ``'scratch'``, random weights; ``'mae'``, the encoder of a
:class:`~vit_tutorial.mae.MaskedAutoencoder` pre-trained on the 60,000 training images without
their labels (:func:`pretrain_mae`); ``'supervised'``, a ViT pre-trained on them with *other*
labels, the five coarse groups of :data:`COARSE_GROUPS` (:func:`pretrain_supervised`): like
ImageNet pre-training, many labels of another task, silent on the hard distinctions inside
"tops" (T-shirt, pullover, coat, shirt) or "footwear".

Each is then trained on ``per_class`` labelled images per class (:func:`labelled_data`), either
whole (:func:`vit_tutorial.finetune.finetune` with :func:`finetune_settings`, for the epochs of
:func:`budget`) or as a linear probe on frozen features (:func:`linear_probe`), whose
regularisation the fixed 5,000 validation images choose; the test set is scored once per run.

The runs of ``benchmarks/pretraining.py`` and ``benchmarks/pretraining_seeds.py``, their
encoders (:func:`build_encoder`) and summaries are in
:mod:`~vit_tutorial.experiments.ch09_study`.

Example:
    >>> [COARSE_NAMES[g] for g in COARSE_GROUPS]  # Fashion-MNIST's classes 0..9
    ['top', 'trouser', 'top', 'dress', 'top', 'footwear', 'top', 'footwear', 'bag', 'footwear']
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Subset, TensorDataset

from vit_tutorial.data import FASHION_MNIST_MEAN, FASHION_MNIST_STD, DataSplits, digits_datasets
from vit_tutorial.data.core import make_loader, stratified_indices
from vit_tutorial.data.fashion_mnist import fashion_mnist_datasets
from vit_tutorial.engine import Device, FitSettings, fit, predict
from vit_tutorial.experiments import epochs_for
from vit_tutorial.finetune import replace_head, set_image_size
from vit_tutorial.losses import mae_loss
from vit_tutorial.mae import MaskedAutoencoder
from vit_tutorial.positional import sinusoidal_2d
from vit_tutorial.validate import check_int, check_seed
from vit_tutorial.vit import VisionTransformer

__all__ = [
    "COARSE_GROUPS",
    "COARSE_NAMES",
    "DECODER",
    "ENCODER",
    "ENCODERS",
    "STARTS",
    "TABLES",
    "at_resolution",
    "budget",
    "build_encoder",
    "digits_like_fashion_mnist",
    "features",
    "finetune_settings",
    "labelled_data",
    "linear_probe",
    "pretrain_mae",
    "pretrain_supervised",
    "start",
]

#: The ViT every run fine-tunes (chapter 8's ``'vit'``).
ENCODER = dict(
    image_size=28, patch_size=4, in_channels=1, dim=64, depth=4, num_heads=4, mlp_ratio=2.0
)
#: The MAE decoder: one block as wide as the encoder, so it costs more than the masked encoder.
DECODER = dict(decoder_dim=64, decoder_depth=1, decoder_heads=4)
#: Fashion-MNIST class -> coarse group, for the supervised pre-training's "other labels".
COARSE_GROUPS = (0, 1, 0, 2, 0, 3, 0, 3, 4, 3)
COARSE_NAMES = ("top", "trouser", "dress", "footwear", "bag")
STARTS = ("scratch", "mae", "supervised")
#: The pre-trained encoders (:func:`build_encoder`), each a start.
ENCODERS = ("mae", "supervised")
#: Optimiser steps (batches of 64) for a pre-trained start and for the ViT from scratch, which
#: gets over 3 times more: with 480 its accuracy still varied with the seed by several points in
#: a first run (not kept), so equal steps would flatter pre-training.
FINETUNE_STEPS, SCRATCH_STEPS = 480, 1600


def build_encoder(name: str) -> MaskedAutoencoder | VisionTransformer:
    """A fresh encoder ``name`` of :data:`ENCODERS`, as its pre-training builds it (the weights
    a pre-training saves load into it): ``'mae'``, the
    :class:`~vit_tutorial.mae.MaskedAutoencoder` of :data:`ENCODER` and :data:`DECODER`;
    ``'supervised'``, the ViT of :data:`ENCODER` with a head for the coarse groups."""
    if name == "mae":
        return MaskedAutoencoder(**ENCODER, **DECODER)
    if name == "supervised":
        return VisionTransformer(**ENCODER, pool="mean", num_classes=len(COARSE_NAMES))
    raise ValueError(f"unknown encoder {name!r}; expected one of {ENCODERS}")


def budget(start: str, train_size: int, batch_size: int = 64) -> int:
    """Epochs of ``train_size`` images that give ``start`` its steps (at least)."""
    if start not in STARTS:
        raise ValueError(f"unknown start {start!r}; expected one of {STARTS}")
    steps = SCRATCH_STEPS if start == "scratch" else FINETUNE_STEPS
    return epochs_for(train_size, steps, batch_size)


def finetune_settings(epochs: int) -> FitSettings:
    """How every start is fine-tuned for ``epochs``: AdamW at 10^-3, weight decay 0.05,
    label smoothing 0.1, a warm-up of a tenth of the run."""
    epochs = check_int("epochs", epochs)  # before epochs / 10
    return FitSettings(epochs, 1e-3, 0.05, warmup_epochs=epochs / 10, label_smoothing=0.1)


def pretrain_mae(
    *,
    epochs: int,
    seed: int = 0,
    lr: float = 1.5e-3,
    batch_size: int = 256,
    images: int | None = None,
    data_root: str | Path | None = None,
    device: Device = "auto",
    progress: bool = False,
) -> tuple[MaskedAutoencoder, dict[str, list]]:
    """A :class:`~vit_tutorial.mae.MaskedAutoencoder` trained on all 60,000 training images (or
    a class-balanced ``images`` of them), labels unused; ``(model, history)``. The optimiser is
    MAE's (He et al. 2022, Appendix A.1, Table 8): AdamW, betas (0.9, 0.95), weight decay 0.05,
    warm-up then cosine decay."""
    warmup = min(1, check_int("epochs", epochs) / 10)
    settings = FitSettings(epochs, lr, warmup_epochs=warmup, betas=(0.9, 0.95))
    data = fashion_mnist_datasets(
        data_root, train_size=images, val_size=0, seed=seed, batch_size=batch_size
    )
    torch.manual_seed(seed)
    model = build_encoder("mae")
    history = fit(
        model, data.train_loader, None, settings, loss=mae_loss, device=device, progress=progress
    )
    return model.cpu().eval(), history


def pretrain_supervised(
    *,
    epochs: int,
    seed: int = 0,
    lr: float = 2e-3,
    batch_size: int = 128,
    images: int | None = None,
    data_root: str | Path | None = None,
    device: Device = "auto",
    progress: bool = False,
) -> tuple[VisionTransformer, dict[str, list]]:
    """The ViT trained on all 60,000 training images (or a class-balanced ``images`` of
    them) to tell the 5 coarse groups of :data:`COARSE_GROUPS` apart; ``(model, history)``."""
    warmup = min(1, check_int("epochs", epochs) / 10)
    settings = FitSettings(epochs, lr, warmup_epochs=warmup, label_smoothing=0.1)
    data = fashion_mnist_datasets(
        data_root, train_size=images, val_size=0, seed=seed, batch_size=batch_size
    )
    data.train.labels = torch.tensor(COARSE_GROUPS)[data.train.labels]  # the coarse groups
    torch.manual_seed(seed)
    model = build_encoder("supervised")
    history = fit(model, data.train_loader, None, settings, device=device, progress=progress)
    return model.cpu().eval(), history


def start(name: str, seed: int, encoders: dict[str, nn.Module]) -> VisionTransformer:
    """A 10-class ViT to fine-tune for the start ``name`` of :data:`STARTS`: random weights drawn
    with ``seed``; ``encoders['mae'].to_vit(10)``; a copy of ``encoders['supervised']`` with a
    fresh zero head (:func:`~vit_tutorial.finetune.replace_head`), all else kept (``fc_norm``
    too). The encoders are left as they are."""
    if name not in STARTS:
        raise ValueError(f"unknown start {name!r}; expected one of {STARTS}")
    torch.manual_seed(check_seed(seed))
    if name == "scratch":
        return VisionTransformer(**ENCODER, pool="mean", num_classes=10)
    if name == "mae":
        return encoders["mae"].to_vit(10)
    return replace_head(copy.deepcopy(encoders["supervised"]), 10)


def labelled_data(
    per_class: int,
    seed: int,
    *,
    batch_size: int = 64,
    image_size: int = 28,
    eval_size: int | None = None,
    data_root: str | Path | None = None,
) -> DataSplits:
    """Fashion-MNIST with ``per_class`` labelled training images per class, drawn with ``seed``
    from the 55,000 left after the validation split; the validation and test sets whole (or their
    first ``eval_size`` ≤ 5,000, for quick checks); ``image_size`` > 28 upsamples (bicubic)."""
    check_int("per_class", per_class, 1, 5500), check_int("image_size", image_size)
    eval_size is None or check_int("eval_size", eval_size, 1, 5000)  # the validation set's size
    data = fashion_mnist_datasets(data_root, seed=seed, batch_size=batch_size)
    if image_size != 28:
        from torchvision.transforms import v2

        resize = v2.Resize((image_size, image_size), v2.InterpolationMode.BICUBIC, antialias=True)
        for split in (data.train, data.val, data.test):
            split.transform = resize
    picked = stratified_indices(data.train.labels, per_class * 10, seed=seed)
    data.train = Subset(data.train, picked.tolist())
    data.train_loader = make_loader(data.train, batch_size, shuffle=True, seed=seed)
    data.image_size = image_size
    if eval_size is not None:
        for name in ("val", "test"):
            setattr(data, name, Subset(getattr(data, name), range(eval_size)))
            setattr(data, f"{name}_loader", make_loader(getattr(data, name), 1000, shuffle=False))
    return data


def features(model: VisionTransformer, loader: DataLoader, device: Device = "cpu") -> Tensor:
    """The mean of the encoder's output tokens, ``(n, D)``: what a linear probe reads."""
    return predict(_MeanTokens(model), loader, device, None)[0]


class _MeanTokens(nn.Module):
    def __init__(self, model: VisionTransformer) -> None:
        super().__init__()
        self.model, self.training = model, model.training  # predict restores the model's mode

    def forward(self, images: Tensor) -> Tensor:
        return self.model.forward_features(images).mean(dim=1)


def linear_probe(
    model: VisionTransformer, data: DataSplits, device: Device = "cpu"
) -> dict[str, float]:
    """Logistic regression on frozen, standardised :func:`features`, its L2 strength the ``C``
    in 10^-3..10^2 best on the validation split: test accuracy and ``C``. MAE's linear probe
    (Appendix A.1) trains a linear layer after a BatchNorm without affine parameters, by SGD on
    all of ImageNet; on at most 10,000 labelled images a regularised logistic regression solved
    exactly (scikit-learn) is the same model, without a schedule to tune."""
    from sklearn.linear_model import LogisticRegression

    if data.val_loader is None:
        raise ValueError("linear_probe picks C on data.val_loader, which is None: pass a val split")
    loaders = make_loader(data.train, 1000, shuffle=False), data.val_loader, data.test_loader
    (x, y), (x_val, y_val), (x_test, y_test) = (
        predict(_MeanTokens(model), loader, device, None) for loader in loaders
    )
    mean, std = x.mean(0), x.std(0) + 1e-6
    x, x_val, x_test = (((f - mean) / std).numpy() for f in (x, x_val, x_test))
    probes = [LogisticRegression(C=10.0**k, max_iter=2000).fit(x, y.numpy()) for k in range(-3, 3)]
    best = max(probes, key=lambda probe: probe.score(x_val, y_val.numpy()))  # the first if tied
    return {"test_accuracy": best.score(x_test, y_test.numpy()), "C": best.C}


#: The position tables :func:`at_resolution` can give a ViT at a new resolution.
TABLES = ("interpolated", "fresh", "sincos")


def at_resolution(
    model: VisionTransformer, image_size: int, *, table: str = "interpolated"
) -> VisionTransformer:
    """``model`` for ``image_size`` × ``image_size`` images, the same patches (a larger grid),
    with one of :data:`TABLES` as its position table: ``'interpolated'``, the trained table
    resampled (:func:`~vit_tutorial.finetune.set_image_size`, the ViT paper's Section 3.2);
    ``'fresh'``, a new ViT's random one (what resampling keeps); ``'sincos'``, the exact 2D
    sine-cosine code of the new grid (MAE's table is that code, fixed, and
    :meth:`~vit_tutorial.mae.MaskedAutoencoder.to_vit` starts the learned table at it)."""
    if table not in TABLES:
        raise ValueError(f"table must be one of {TABLES}, got {table!r}")
    bigger = set_image_size(model, image_size)
    if table != "interpolated":  # on a copy at the same size, not the caller's
        if (kind := bigger.config.pos_embed) != "learned":
            raise ValueError(f"table={table!r} replaces a learned table; pos_embed is {kind!r}")
        bigger = copy.deepcopy(model) if bigger is model else bigger
        weight = bigger.pos_embed.weight
        with torch.no_grad():
            if table == "fresh":
                nn.init.trunc_normal_(weight, std=0.02, a=-0.04, b=0.04)
            else:
                weight.copy_(sinusoidal_2d(bigger.grid_size, bigger.config.dim)[None])
    return bigger


def digits_like_fashion_mnist(seed: int = 0, batch_size: int = 64) -> DataSplits:
    """scikit-learn's digits (chapter 6's split: 1,437 training and 360 test images) as the
    Fashion-MNIST encoder expects them: pixels 0-16 scaled to 0-1, resized bilinearly from 8×8
    to 28×28, normalised with Fashion-MNIST's mean and standard deviation."""
    data = digits_datasets(seed=seed, batch_size=batch_size)
    for name in ("train", "test"):
        images, labels = getattr(data, name).tensors
        pixels = (images * data.std[0] + data.mean[0]) / 16
        big = nn.functional.interpolate(pixels, size=28, mode="bilinear", antialias=True)
        normalised = (big.clamp(0, 1) - FASHION_MNIST_MEAN[0]) / FASHION_MNIST_STD[0]
        setattr(data, name, TensorDataset(normalised, labels))
    data.train_loader = make_loader(data.train, batch_size, shuffle=True, seed=seed)
    data.test_loader = make_loader(data.test, 512, shuffle=False)
    data.image_size, data.mean, data.std = 28, FASHION_MNIST_MEAN, FASHION_MNIST_STD
    return data
