"""Fashion-MNIST: 70,000 28×28 grey images of 10 kinds of clothing (chapter 8), read from the
four original IDX files where they lie, downloaded by torchvision only when they are nowhere."""

from __future__ import annotations

import functools
import gzip
import math
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import default_collate

from vit_tutorial.data.core import (
    DataSplits,
    ImageTensors,
    data_root,
    download_within,
    make_loader,
    stratified_indices,
)
from vit_tutorial.validate import check_bool, check_int, check_seed

__all__ = [
    "fashion_mnist_datasets",
    "FASHION_MNIST_MEAN",
    "FASHION_MNIST_STD",
    "FASHION_MNIST_DEBIAN_DIR",
]

FASHION_MNIST_DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
"""Where Debian's ``dataset-fashion-mnist`` package puts the original ``.gz`` IDX files."""
FASHION_MNIST_MEAN = (0.2860,)
FASHION_MNIST_STD = (0.3530,)
"""Pixel mean and standard deviation of the 60,000 training images, on a 0-1 scale."""
FILES = {  # the files and their shapes, in the order (train images, labels, test images, labels)
    "train-images-idx3-ubyte": (60000, 28, 28),
    "train-labels-idx1-ubyte": (60000,),
    "t10k-images-idx3-ubyte": (10000, 28, 28),
    "t10k-labels-idx1-ubyte": (10000,),
}
APT = "sudo apt-get install dataset-fashion-mnist"
CLASSES = "T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot".split(",")
ABOUT = dict(  # the fields of DataSplits that describe the images
    image_size=28, in_channels=1, num_classes=10, mean=FASHION_MNIST_MEAN, std=FASHION_MNIST_STD
)


def _read_idx(path: Path, shape: tuple[int, ...]) -> Tensor:
    """The ``uint8`` tensor of an IDX file, gzipped or not, once its header and size (and
    gzip's CRC) show that it is whole."""
    try:
        data = path.read_bytes()
        data = gzip.decompress(data) if path.suffix == ".gz" else data
    except (OSError, EOFError, zlib.error) as error:
        raise ValueError(f"{path} is corrupt ({error}); reinstall it or delete it") from error
    expected = [2051 if len(shape) == 3 else 2049, *shape]  # the magic number, then the shape
    header = [int.from_bytes(data[i : i + 4], "big") for i in range(0, 4 * len(expected), 4)]
    size = 4 * len(expected) + math.prod(shape)
    if header != expected or len(data) != size:
        raise ValueError(
            f"{path} is not the Fashion-MNIST file {path.name}: header {header} and "
            f"{len(data)} bytes, expected {expected} and {size} bytes (reinstall it: "
            f"{APT} --reinstall, or delete it)"
        )
    pixels = torch.frombuffer(bytearray(data), dtype=torch.uint8, offset=4 * len(expected))
    if len(shape) == 1 and pixels.max() >= len(CLASSES):  # a labels file
        raise ValueError(f"{path} holds the label {pixels.max().item()}; expected labels 0 to 9")
    return pixels.view(shape)


def _find(root: Path) -> list[Path] | None:
    """The four files in ``root/FashionMNIST/raw`` (as torchvision leaves them, or gzipped),
    else Debian's ``.gz`` files, else ``None``."""
    for folder in (root / "FashionMNIST" / "raw", FASHION_MNIST_DEBIAN_DIR):
        paths = [folder / name for name in FILES]
        paths = [path if path.is_file() else path.with_name(f"{path.name}.gz") for path in paths]
        if all(path.is_file() for path in paths):
            return paths
    return None


def _tensors(root: Path, download: bool, timeout: float) -> tuple[Tensor, ...]:
    """Train images ``(60000, 1, 28, 28)``, labels, test images and labels, as in the files."""
    paths = _find(root)
    if paths is None:
        from torchvision.datasets import FashionMNIST

        raw = root / "FashionMNIST" / "raw"
        missing = f"Fashion-MNIST is neither in {raw} nor in {FASHION_MNIST_DEBIAN_DIR}"
        if not download:
            raise FileNotFoundError(
                f"{missing}. Install Debian's copy with `{APT}`, or pass download=True on a "
                "machine with internet access"
            )
        advice = (
            f"Install Debian's copy with `{APT}`, or run this on a machine with internet access "
            "(e.g. Colab), where torchvision downloads it (about 30 MB)"
        )
        downloader = FashionMNIST.__new__(FashionMNIST)  # its download alone: _read_idx reads
        downloader.root = str(root)
        download_within(timeout, FashionMNIST.mirrors[0], downloader.download, missing, advice)
        paths = _find(root)
    images, labels, test_images, test_labels = map(_read_idx, paths, FILES.values())
    return images.unsqueeze(1), labels.long(), test_images.unsqueeze(1), test_labels.long()


def fashion_mnist_datasets(
    root: str | Path | None = None,
    *,
    train_size: int | None = None,
    val_size: int = 5000,
    train_transform: Callable | None = None,
    batch_transform: Callable | None = None,
    seed: int = 0,
    batch_size: int = 128,
    num_workers: int = 0,
    download: bool = True,
    timeout: float = 10.0,
) -> DataSplits:
    """Fashion-MNIST: 60,000 training and 10,000 test 28×28 grey images of 10 kinds of clothing,
    as :class:`~vit_tutorial.data.DataSplits` with ``val``, normalised by ``FASHION_MNIST_*``.

    The files come from ``root/FashionMNIST/raw`` (where torchvision puts them), else the
    ``.gz`` files of Debian's ``dataset-fashion-mnist`` (:data:`FASHION_MNIST_DEBIAN_DIR`),
    else torchvision downloads them into ``root`` (without internet a clear error comes within
    ``timeout`` seconds); each is checked whole. ``val_size`` training images (500 per class by
    default, 0 for no validation split) are held out for validation, always the same ones;
    ``train_size`` keeps a class-balanced subset of the rest (``None``: all of it), nested across
    sizes. The test set is the official 10,000 images. ``seed`` only shuffles the training loader.

    Args:
        root: folder of the data (default :func:`~vit_tutorial.data.data_root`:
            ``$VIT_TUTORIAL_DATA`` or ``~/.cache/vit_tutorial``).
        train_transform: a ``transforms.v2`` pipeline for each training image (a ``uint8``
            tensor ``(1, 28, 28)``); validation and test images are never augmented.
        batch_transform: applied to each collated training batch ``(images, labels)``,
            e.g. ``v2.RandomChoice([v2.MixUp(...), v2.CutMix(...)])``.
        batch_size: training batch size per process.
        download: download the files when they are in neither place.

    Raises:
        ValueError: ``train_size`` or ``val_size`` out of range; a file is corrupt.
        FileNotFoundError: the files are missing and ``download`` is false.
        ConnectionError: the files are missing and the server cannot be reached.
    """
    check_seed(seed), check_int("batch_size", batch_size)  # before any download
    train, val, test = _datasets(data_root(root), download, timeout, train_size, val_size)
    train.transform = train_transform
    collate = functools.partial(_collate_then, batch_transform) if batch_transform else None
    train_loader = make_loader(
        train, batch_size, shuffle=True, seed=seed, num_workers=num_workers, collate_fn=collate
    )
    test_loader = make_loader(test, 1000, shuffle=False, num_workers=num_workers)
    val_loader = make_loader(val, 1000, shuffle=False) if val is not None else None
    fields = dict(val=val, val_loader=val_loader, classes=list(CLASSES), **ABOUT)
    return DataSplits(train, test, train_loader, test_loader, **fields)


def _datasets(
    root: Path, download: bool, timeout: float, train_size: int | None, val_size: int
) -> tuple[ImageTensors, ImageTensors | None, ImageTensors]:
    """The ``train``, ``val`` (or ``None``) and ``test`` :class:`ImageTensors`: a fixed
    stratified validation split, then a fixed class-balanced subset of the rest (nested
    across sizes). Sizes Fashion-MNIST cannot give raise TypeError or ValueError first."""
    check_int("val_size", val_size, minimum=0), check_bool("download", download)
    if val_size > 50_000:
        raise ValueError(f"val_size must be at most 50000 of the 60000 images, got {val_size}")
    if train_size is not None:
        check_int("train_size", train_size, minimum=10)
        if train_size > 60_000 - val_size:
            raise ValueError(
                f"train_size must be at most {60_000 - val_size} (60000 images minus "
                f"val_size={val_size}), got {train_size}"
            )
    images, labels, test_images, test_labels = _tensors(root, download, timeout)
    val_idx = stratified_indices(labels, val_size, seed=0)
    train_idx = torch.arange(len(labels))
    train_idx = train_idx[~torch.isin(train_idx, val_idx)]  # the rest, in order
    if train_size is not None:
        train_idx = train_idx[stratified_indices(labels[train_idx], train_size, seed=1)]
    stats = {"mean": FASHION_MNIST_MEAN, "std": FASHION_MNIST_STD}
    train = ImageTensors(images[train_idx], labels[train_idx], **stats)
    val = ImageTensors(images[val_idx], labels[val_idx], **stats) if val_size else None
    return train, val, ImageTensors(test_images, test_labels, **stats)


def _collate_then(transform: Callable, batch: list) -> Any:
    """A loader's ``collate_fn``: the default collation, then ``transform(images, labels)``."""
    return transform(*default_collate(batch))
