"""Your own images, one sub-folder per class, read by ``torchvision.datasets.ImageFolder``
and prepared as a pre-trained ViT expects them (chapter 9's fine-tuning)."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Subset

from vit_tutorial.data.core import DataSplits, make_loader, stratified_indices
from vit_tutorial.validate import check_bool, check_int, check_real

__all__ = ["image_folder_datasets", "CROP_SCALE", "CROP_FRACTION"]

CROP_SCALE = (0.5, 1.0)
"""Area range of the random training crops, a fraction of the image: ImageNet training from
scratch goes down to 8 % (``(0.08, 1.0)``, torchvision's and timm's default), but a model
fine-tuned on a few images per class is better served by crops that keep most of the object
(a choice, not a measured optimum)."""
CROP_FRACTION = 0.875
"""Evaluation: resize the shorter side to ``image_size / 0.875``, then crop the centre."""


def _image_transforms(
    image_size: int, mean: tuple[float, ...], std: tuple[float, ...], augment: bool
) -> tuple[Any, Any]:
    """``(train, eval)`` ``transforms.v2`` pipelines from a PIL image to a normalised tensor."""
    if len(mean) != 3 or len(std) != 3 or not all(s > 0 for s in std):
        raise ValueError(f"mean and std need 3 values (R, G, B), std > 0, got {mean=} and {std=}")
    from torchvision.transforms import v2

    resize = int(image_size / CROP_FRACTION)  # 224 -> 256
    centre = [v2.Resize(resize, antialias=True), v2.CenterCrop(image_size)]
    crop = v2.RandomResizedCrop(image_size, scale=CROP_SCALE, antialias=True)
    augmented = [crop, v2.RandomHorizontalFlip()]
    to_tensor = [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std)]
    train = v2.Compose([*(augmented if augment else centre), *to_tensor])
    return train, v2.Compose([*centre, *to_tensor])


def _rgb(path: str) -> Any:
    """``ImageFolder``'s loader: the image at ``path`` in RGB, or a ValueError naming the file."""
    from torchvision.datasets.folder import pil_loader  # ImageFolder's own loader

    try:
        return pil_loader(path)
    except Exception as error:  # OSError, SyntaxError, struct.error...: PIL's for a bad file
        raise ValueError(f"{path} is not an image that can be read ({error})") from error


def _image_folder(path: str | os.PathLike, what: str, transform: Any) -> Any:
    """``torchvision.datasets.ImageFolder`` of ``path`` but hidden folders and files (Jupyter's
    ``.ipynb_checkpoints``), each image decoded once; ValueError for what cannot train."""
    from torchvision.datasets import ImageFolder
    from torchvision.datasets.folder import IMG_EXTENSIONS, has_file_allowed_extension

    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{what} {path} is not a folder; expected one sub-folder per class")
    classes = sorted(e.name for e in os.scandir(path) if e.is_dir() and not e.name.startswith("."))
    if len(classes) < 2:
        raise ValueError(
            f"{what} {path} holds the class folders {classes}: a classifier needs at least "
            "2 (one sub-folder of images per class)"
        )

    def is_image(file: str) -> bool:  # by its name, neither hidden nor in a hidden folder
        hidden = "/." in Path(file).relative_to(path).as_posix()
        return has_file_allowed_extension(file, IMG_EXTENSIONS) and not hidden

    images = ImageFolder.__new__(ImageFolder)  # whose find_classes hook gives those classes
    images.find_classes = lambda root: (classes, {name: i for i, name in enumerate(classes)})
    try:
        images.__init__(path, transform=transform, loader=_rgb, is_valid_file=is_image)
    except FileNotFoundError as error:  # a class folder without images
        raise ValueError(f"{what} {path}: {error}(images: {', '.join(IMG_EXTENSIONS)})") from error
    del images.find_classes  # ImageFolder's own again, so that workers can pickle it
    for file, _ in images.samples:
        _rgb(file)
    return images


def _split(train: Any, eval_tf: Any, val_fraction: float, seed: int) -> tuple[Subset, Subset]:
    """The training images of ``train`` (an ``ImageFolder``) and the held-out ones, read again
    with ``eval_tf``: a seeded split, ``val_fraction`` of each class held out."""
    labels = torch.tensor(train.targets)
    size = round(val_fraction * len(labels))
    if not 0 < size < len(labels):
        raise ValueError(
            f"val_fraction={val_fraction} of {len(labels)} images holds out {size}: "
            "need at least one image on each side"
        )
    held_out_idx = stratified_indices(labels, size, seed=seed)
    train_idx = torch.arange(len(labels))
    train_idx = train_idx[~torch.isin(train_idx, held_out_idx)].tolist()  # the rest, in order
    held_out = copy.copy(train)  # the same files, in order, read with eval_tf
    held_out.transform = eval_tf
    return Subset(train, train_idx), Subset(held_out, held_out_idx.tolist())


def image_folder_datasets(
    train_dir: str | os.PathLike,
    *,
    val_dir: str | os.PathLike | None = None,
    image_size: int,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    batch_size: int = 32,
    val_fraction: float = 0.2,
    seed: int = 0,
    num_workers: int = 0,
    augment: bool = True,
) -> DataSplits:
    """Your own images, one sub-folder per class, as :class:`~vit_tutorial.data.DataSplits`.

    Read by ``torchvision.datasets.ImageFolder`` (as RGB). Training images: a random crop
    (:data:`CROP_SCALE` of the area) resized to ``image_size``, a random flip; held-out ones (and
    all with ``augment=False``): resized to ``image_size / 0.875``, centre-cropped; then scaled to
    0-1 and normalised. The held-out images (``val_dir``'s, or ``val_fraction`` of each class)
    are the ``test`` split, which :func:`~vit_tutorial.finetune.finetune` scores.

    Args:
        train_dir: the training images, ``train_dir/<class>/<image>``, hidden ones skipped.
        val_dir: held-out images with the same class folders, or ``None``.
        image_size: side of the square images the model sees.
        mean: per-channel mean (R, G, B) of the normalisation the model's weights expect.
        std: per-channel standard deviation of that normalisation.
        batch_size: training batch size per process (held-out batches too).
        val_fraction: share of each class held out when there is no ``val_dir``.
        seed: seed of the held-out split and of the training loader's shuffling.

    Raises:
        ValueError: a folder is missing, has fewer than 2 class folders, an empty one or other
            classes than the other; an image does not decode (each is decoded once, here);
            ``val_fraction`` is not in (0, 1) or leaves a side empty; ``mean``/``std`` not RGB.
        TypeError: ``image_size``, ``batch_size``, ``num_workers`` or ``seed`` is not an int.
    """
    check_int("image_size", image_size), check_int("batch_size", batch_size)
    check_int("num_workers", num_workers, minimum=0), check_bool("augment", augment)
    check_real("val_fraction", val_fraction, 0.0, 1.0, low_open=True, high_open=True)
    mean, std = tuple(mean), tuple(std)
    train_tf, eval_tf = _image_transforms(image_size, mean, std, augment)
    train = _image_folder(train_dir, "train_dir", train_tf)
    classes = list(train.classes)
    if val_dir is None:
        train, held_out = _split(train, eval_tf, val_fraction, seed)
    else:
        held_out = _image_folder(val_dir, "val_dir", eval_tf)
        if held_out.classes != classes:
            raise ValueError(
                f"val_dir {val_dir} has classes {held_out.classes}, train_dir {train_dir} has "
                f"{classes}: the class folders must be the same"
            )
    train_loader = make_loader(train, batch_size, shuffle=True, seed=seed, num_workers=num_workers)
    test_loader = make_loader(held_out, batch_size, shuffle=False, num_workers=num_workers)
    about = dict(image_size=image_size, in_channels=3, num_classes=len(classes), mean=mean, std=std)
    return DataSplits(train, held_out, train_loader, test_loader, classes=classes, **about)
