"""Datasets and loaders for training: digits and Fashion-MNIST offline, CIFAR-10 online.

* :func:`digits_datasets` wraps scikit-learn's ``load_digits``: 1,797 real 8×8 handwritten
  digits that ship with scikit-learn, so the book trains a ViT without any download
  (chapter 6).
* :func:`fashion_mnist_datasets` wraps torchvision's ``FashionMNIST``: 70,000 28×28 images
  of clothing (chapter 8). Offline it reads the files of Debian's ``dataset-fashion-mnist``
  package; online torchvision downloads them. It carves a validation split out of the
  training set and takes ``torchvision.transforms.v2`` augmentations.
* :func:`cifar10_datasets` wraps torchvision's CIFAR-10 with the standard augmentation
  (random crop with padding, horizontal flip). It needs the internet the first time and
  fails fast with a clear message when there is none.

All return a :class:`DataSplits`. The training loader draws its order from a
:class:`~torch.utils.data.DistributedSampler` seeded with ``seed``: the permutation of an
epoch depends only on ``(seed, epoch)``, which makes runs resumable bit for bit, and the
same loader shards the data when several processes train together under ``torchrun``.
Images are ``(C, H, W)`` tensors, normalised per channel.
"""

from __future__ import annotations

import contextlib
import gzip
import math
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
import torch.distributed as dist
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, DistributedSampler, TensorDataset, default_collate

from vit_tutorial.checks import check_int

__all__ = [
    "DataSplits",
    "digits_datasets",
    "fashion_mnist_datasets",
    "cifar10_datasets",
    "make_loader",
    "FASHION_MNIST_DEBIAN_DIR",
]

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
FASHION_MNIST_DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
"""Where Debian's ``dataset-fashion-mnist`` package puts the original ``.gz`` IDX files."""
FASHION_MNIST_APT = "sudo apt-get install dataset-fashion-mnist"


@dataclass
class DataSplits:
    """A train/test pair of datasets, their loaders and what a model needs to know about them.

    Attributes:
        train: the training dataset, items ``(image (C, H, W), label)``.
        test: the test dataset, for the final numbers only.
        train_loader: shuffled, seeded, sharded under ``torchrun``.
        test_loader: in order, not sharded.
        image_size: H (= W) in pixels.
        in_channels: C.
        num_classes: number of classes.
        classes: class names.
        mean: per-channel mean used to normalise (to undo it for plots).
        std: per-channel standard deviation used to normalise.
        val: a validation dataset carved out of the training data, or ``None``.
        val_loader: in order, not sharded, or ``None``.
    """

    train: Dataset
    test: Dataset
    train_loader: DataLoader
    test_loader: DataLoader
    image_size: int
    in_channels: int
    num_classes: int
    classes: list[str]
    mean: tuple[float, ...] = field(default=(0.0,))
    std: tuple[float, ...] = field(default=(1.0,))
    val: Dataset | None = None
    val_loader: DataLoader | None = None


def make_loader(
    dataset: Dataset,
    batch_size: int,
    *,
    shuffle: bool,
    seed: int = 0,
    num_workers: int = 0,
    drop_last: bool = False,
    collate_fn: Callable | None = None,
) -> DataLoader:
    """A DataLoader whose order depends only on ``(seed, epoch)``.

    With ``shuffle=True`` the loader uses a :class:`~torch.utils.data.DistributedSampler`
    over the current process group (one replica when there is none). Call
    ``loader.sampler.set_epoch(epoch)`` before each epoch (``fit`` does) to get that
    epoch's permutation; each process then reads its own shard.

    Args:
        dataset: any map-style dataset.
        batch_size: samples per batch and per process.
        shuffle: shuffle (training) or keep the order (evaluation, never sharded).
        seed: seed of the permutation.
        num_workers: worker processes for loading.
        drop_last: drop the last incomplete batch.
        collate_fn: how samples become a batch (default: stacked).

    Example:
        >>> data = TensorDataset(torch.arange(6))
        >>> loader = make_loader(data, 3, shuffle=True, seed=0)
        >>> loader.sampler.set_epoch(1)
        >>> first = [b[0].tolist() for b in loader]
        >>> first == [b[0].tolist() for b in loader]  # same epoch, same order
        True
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
    sampler = None
    if shuffle:
        distributed = dist.is_available() and dist.is_initialized()
        sampler = DistributedSampler(
            dataset,
            num_replicas=dist.get_world_size() if distributed else 1,
            rank=dist.get_rank() if distributed else 0,
            shuffle=True,
            seed=seed,
            drop_last=drop_last,
        )
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        shuffle=False,
        num_workers=num_workers,
        drop_last=drop_last,
        persistent_workers=num_workers > 0,
        collate_fn=collate_fn,
    )


def digits_datasets(seed: int = 0, batch_size: int = 64, test_fraction: float = 0.2) -> DataSplits:
    """scikit-learn's handwritten digits: 1,797 real 8×8 grey images of 0-9, no download.

    The split is stratified 80/20 with ``random_state=0`` whatever ``seed`` is, so every
    run and every seed is tested on the same 360 images. Pixels (0-16) are normalised with
    the mean and standard deviation of the training pixels.

    Args:
        seed: seed of the training loader's shuffling.
        batch_size: training batch size.
        test_fraction: share of the images held out for testing.

    Returns:
        :class:`DataSplits` with images of shape ``(1, 8, 8)``.

    Example:
        >>> data = digits_datasets()
        >>> len(data.train), len(data.test), data.train[0][0].shape
        (1437, 360, torch.Size([1, 8, 8]))
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1)  # (B, 1, 8, 8)
    labels = torch.tensor(digits.target, dtype=torch.long)
    train_idx, test_idx = train_test_split(
        torch.arange(len(labels)).numpy(),
        test_size=test_fraction,
        stratify=labels.numpy(),
        random_state=0,
    )
    train_idx, test_idx = torch.from_numpy(train_idx), torch.from_numpy(test_idx)
    mean, std = images[train_idx].mean().item(), images[train_idx].std().item()
    images = (images - mean) / std
    train = TensorDataset(images[train_idx], labels[train_idx])
    test = TensorDataset(images[test_idx], labels[test_idx])
    return DataSplits(
        train=train,
        test=test,
        train_loader=make_loader(train, batch_size, shuffle=True, seed=seed),
        test_loader=make_loader(test, 512, shuffle=False),
        image_size=8,
        in_channels=1,
        num_classes=10,
        classes=[str(d) for d in range(10)],
        mean=(mean,),
        std=(std,),
    )


FASHION_MNIST_MEAN = (0.2860,)
FASHION_MNIST_STD = (0.3530,)
"""Pixel mean and standard deviation of the 60,000 training images, on a 0-1 scale."""


def data_root(root: str | Path | None = None) -> Path:
    """Where datasets are kept: ``root``, else ``$VIT_TUTORIAL_DATA``, else ``~/.cache/vit_tutorial``."""
    if root is not None:
        return Path(root).expanduser()
    return Path(os.environ.get("VIT_TUTORIAL_DATA", "~/.cache/vit_tutorial")).expanduser()


class ImageTensors(Dataset):
    """Greyscale ``uint8`` images in memory, augmented by a ``transforms.v2`` pipeline.

    ``transform`` (if any) receives a ``uint8`` tensor of shape ``(C, H, W)``, as the
    ``torchvision.transforms.v2`` pipelines expect; the result is then scaled to 0-1 and
    normalised with ``mean`` and ``std``. Items are ``(image (C, H, W) float32, label)``.
    """

    def __init__(
        self,
        images: Tensor,
        labels: Tensor,
        transform: Callable | None = None,
        mean: tuple[float, ...] = (0.0,),
        std: tuple[float, ...] = (1.0,),
    ) -> None:
        if images.dtype != torch.uint8 or images.dim() != 4:
            raise ValueError(
                f"images must be uint8 of shape (n, C, H, W), got {images.dtype} "
                f"{tuple(images.shape)}"
            )
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        self.images, self.labels, self.transform = images, labels, transform
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        image = self.images[index]
        if self.transform is not None:
            image = self.transform(image)
        if image.dtype == torch.uint8:
            image = image.float() / 255
        return (image - self.mean) / self.std, self.labels[index]


def stratified_indices(labels: Tensor, size: int, seed: int = 0) -> Tensor:
    """``size`` indices into ``labels`` with each class in proportion, in a seeded order.

    For one ``seed``, a smaller ``size`` picks a subset of what a larger one picks, so
    training sets of growing size are nested.

    Example:
        >>> labels = torch.arange(10).repeat(100)  # 10 classes of 100
        >>> picked = stratified_indices(labels, 50)
        >>> torch.bincount(labels[picked]).tolist()
        [5, 5, 5, 5, 5, 5, 5, 5, 5, 5]
        >>> set(picked.tolist()) <= set(stratified_indices(labels, 200).tolist())
        True
    """
    if not 0 <= size <= len(labels):
        raise ValueError(f"size must be in [0, {len(labels)}] (the number of labels), got {size}")
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    ordered = labels[order]
    counts = torch.bincount(labels)
    rank = torch.empty_like(order)
    for c in range(len(counts)):
        members = ordered == c
        rank[members] = torch.arange(int(members.sum()))
    share = counts.double() * size / len(labels)
    quota = share.floor().long()
    extra = torch.argsort(share - quota, descending=True, stable=True)[: size - int(quota.sum())]
    quota[extra] += 1
    return order[rank < quota[ordered]]


_IDX_SHAPES = {  # file -> (magic number, shape), as in the dataset's README
    "train-images-idx3-ubyte": (2051, (60000, 28, 28)),
    "train-labels-idx1-ubyte": (2049, (60000,)),
    "t10k-images-idx3-ubyte": (2051, (10000, 28, 28)),
    "t10k-labels-idx1-ubyte": (2049, (10000,)),
}


def _check_idx(name: str, data: bytes, source: Path) -> None:
    """Raise ValueError unless ``data`` is the IDX file ``name`` whole: header and size."""
    magic, shape = _IDX_SHAPES[name]
    header = [int.from_bytes(data[i : i + 4], "big") for i in range(0, 4 * (1 + len(shape)), 4)]
    expected_size = 4 * (1 + len(shape)) + math.prod(shape)
    if header != [magic, *shape] or len(data) != expected_size:
        raise ValueError(
            f"{source} is not the Fashion-MNIST file {name}: header {header} and "
            f"{len(data)} bytes, expected {[magic, *shape]} and {expected_size} bytes "
            f"(reinstall it: sudo apt-get install --reinstall dataset-fashion-mnist)"
        )


def _gunzip_verified(source: Path, target: Path) -> None:
    """Decompress ``source`` into ``target`` atomically, once gzip's CRC and the IDX
    header and size show that it is whole."""
    try:
        with gzip.open(source, "rb") as packed:
            data = packed.read()  # gzip checks the CRC-32 of what it decompresses
    except (OSError, EOFError) as error:
        raise ValueError(f"{source} is corrupt ({error}); reinstall it") from error
    _check_idx(target.name, data, source)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, target)  # atomic: a reader never sees half a file


def _prepare_fashion_mnist(root: Path, download: bool, timeout: float) -> bool:
    """Put the IDX files in ``root/FashionMNIST/raw``; return whether to download them.

    Files already there are used as they are; missing ones come from Debian's package when
    it is installed, and otherwise from the internet (after a quick reachability check).
    """
    from torchvision.datasets import FashionMNIST

    raw = root / "FashionMNIST" / "raw"
    missing = [(n, md5) for n, md5 in FashionMNIST.resources if not (raw / n[:-3]).is_file()]
    if not missing:
        return False
    if all((FASHION_MNIST_DEBIAN_DIR / name).is_file() for name, _ in missing):
        for name, _ in missing:
            _gunzip_verified(FASHION_MNIST_DEBIAN_DIR / name, raw / name[:-3])
        return False
    missing_text = f"Fashion-MNIST is neither in {raw} nor in {FASHION_MNIST_DEBIAN_DIR}"
    offline = f"Install Debian's copy with `{FASHION_MNIST_APT}`"
    if not download:
        raise FileNotFoundError(
            f"{missing_text}. {offline}, or pass download=True on a machine with internet access"
        )
    _check_reachable(
        FashionMNIST.mirrors[0],
        timeout,
        missing_text,
        f"{offline}, or run this on a machine with internet access (e.g. Colab), where "
        f"torchvision downloads it (about 30 MB)",
    )
    return True


def _fashion_mnist_tensors(
    root: Path, download: bool, timeout: float
) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor], list[str]]:
    """``((train images, labels), (test images, labels), classes)`` as uint8 tensors."""
    from torchvision.datasets import FashionMNIST

    fetch = _prepare_fashion_mnist(root, download, timeout)
    with _socket_timeout(timeout):  # a stalled download fails instead of hanging
        train = FashionMNIST(root, train=True, download=fetch)
        test = FashionMNIST(root, train=False, download=fetch)
    return (
        (train.data.unsqueeze(1), train.targets),
        (test.data.unsqueeze(1), test.targets),
        list(train.classes),
    )


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
    """Fashion-MNIST: 60,000 training and 10,000 test 28×28 grey images of 10 kinds of clothing.

    Read by ``torchvision.datasets.FashionMNIST`` from ``root/FashionMNIST/raw``; missing
    files come from Debian's ``dataset-fashion-mnist`` (:data:`FASHION_MNIST_DEBIAN_DIR`,
    each checked whole), else torchvision downloads them; with neither, a clear error comes
    within ``timeout`` seconds. ``val_size`` training images (500 per class by default) are
    held out for validation, always the same ones; ``train_size`` keeps a class-balanced
    subset of the rest, nested across sizes. The test set is the official 10,000 images.
    ``seed`` only shuffles the training loader.

    Args:
        root: folder of the data (default :func:`data_root`: ``$VIT_TUTORIAL_DATA`` or
            ``~/.cache/vit_tutorial``).
        train_size: training images to keep, or ``None`` for all that remain.
        val_size: training images held out for validation (0: no validation split).
        train_transform: a ``transforms.v2`` pipeline for each training image (a ``uint8``
            tensor ``(1, 28, 28)``); validation and test images are never augmented.
        batch_transform: applied to each collated training batch ``(images, labels)``,
            e.g. ``v2.RandomChoice([v2.MixUp(...), v2.CutMix(...)])``.
        seed: seed of the training loader's shuffling.
        batch_size: training batch size per process.
        num_workers: loader worker processes.
        download: download the files when they are in neither place.
        timeout: seconds to wait for the download server before giving up.

    Returns:
        :class:`DataSplits` with ``val``; normalised by :data:`FASHION_MNIST_MEAN` and ``_STD``.

    Raises:
        ValueError: ``train_size`` or ``val_size`` out of range.
        FileNotFoundError: the files are missing and ``download`` is false.
        ConnectionError: the files are missing and the server cannot be reached.
    """
    _check_sizes(train_size, val_size)
    sets = _fashion_mnist_sets(data_root(root), download, timeout, train_size, val_size)
    sets["train"].transform = train_transform
    collate = _BatchTransform(batch_transform) if batch_transform else None
    return _fashion_mnist_splits(
        **sets, seed=seed, batch_size=batch_size, num_workers=num_workers, collate=collate
    )


def _fashion_mnist_sets(
    root: Path, download: bool, timeout: float, train_size: int | None, val_size: int
) -> dict[str, Any]:
    """The ``train``, ``val`` (or ``None``) and ``test`` :class:`ImageTensors`, and ``classes``."""
    (images, labels), (test_images, test_labels), classes = _fashion_mnist_tensors(
        root, download, timeout
    )
    train_idx, val_idx = _train_val_indices(labels, train_size, val_size)
    stats = {"mean": FASHION_MNIST_MEAN, "std": FASHION_MNIST_STD}
    return {
        "train": ImageTensors(images[train_idx], labels[train_idx], **stats),
        "val": ImageTensors(images[val_idx], labels[val_idx], **stats) if val_size else None,
        "test": ImageTensors(test_images, test_labels, **stats),
        "classes": classes,
    }


def _fashion_mnist_splits(
    train: Dataset,
    val: Dataset | None,
    test: Dataset,
    classes: list[str],
    *,
    seed: int,
    batch_size: int,
    num_workers: int,
    collate: Callable | None,
) -> DataSplits:
    """The :class:`DataSplits` of Fashion-MNIST's datasets, with their loaders."""
    return DataSplits(
        train=train,
        test=test,
        train_loader=make_loader(
            train, batch_size, shuffle=True, seed=seed, num_workers=num_workers, collate_fn=collate
        ),
        test_loader=make_loader(test, 1000, shuffle=False, num_workers=num_workers),
        image_size=28,
        in_channels=1,
        num_classes=10,
        classes=classes,
        mean=FASHION_MNIST_MEAN,
        std=FASHION_MNIST_STD,
        val=val,
        val_loader=make_loader(val, 1000, shuffle=False) if val is not None else None,
    )


def _check_sizes(train_size: int | None, val_size: int) -> None:
    """Raise TypeError or ValueError, naming the value, for sizes Fashion-MNIST cannot give."""
    check_int("val_size", val_size, minimum=0)
    if val_size > 50_000:
        raise ValueError(f"val_size must be at most 50000 of the 60000 images, got {val_size}")
    if train_size is not None:
        check_int("train_size", train_size, minimum=10)
        if train_size > 60_000 - val_size:
            raise ValueError(
                f"train_size must be at most {60_000 - val_size} (60000 images minus "
                f"val_size={val_size}), got {train_size}"
            )


def _train_val_indices(
    labels: Tensor, train_size: int | None, val_size: int
) -> tuple[Tensor, Tensor]:
    """``(train, validation)`` indices: a fixed stratified validation split, then a fixed
    class-balanced subset of the rest (nested across sizes)."""
    val_idx = stratified_indices(labels, val_size, seed=0)
    rest = torch.ones(len(labels), dtype=torch.bool)
    rest[val_idx] = False
    rest_idx = rest.nonzero().squeeze(1)
    if train_size is not None:
        rest_idx = rest_idx[stratified_indices(labels[rest_idx], train_size, seed=1)]
    return rest_idx, val_idx


class _BatchTransform:
    """A loader's ``collate_fn``: the default collation, then ``transform(images, labels)``."""

    def __init__(self, transform: Callable) -> None:
        self.transform = transform

    def __call__(self, batch: list) -> Any:
        return self.transform(*default_collate(batch))


def _check_reachable(url: str, timeout: float, missing: str, advice: str) -> None:
    """Raise ConnectionError quickly when ``url``'s host cannot be reached.

    The message reads "``missing`` and <host> cannot be reached (<error>). ``advice``".
    """
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=timeout).close()
    except OSError as error:
        raise ConnectionError(
            f"{missing} and {parsed.hostname} cannot be reached ({error}). {advice}"
        ) from error


def _cifar10_transforms() -> tuple[Callable, Callable]:
    """Training (random crop with 4 pixels of padding, flip) and test transforms."""
    from torchvision import transforms

    normalize = transforms.Normalize(CIFAR10_MEAN, CIFAR10_STD)
    train = [transforms.RandomCrop(32, padding=4), transforms.RandomHorizontalFlip()]
    return (
        transforms.Compose([*train, transforms.ToTensor(), normalize]),
        transforms.Compose([transforms.ToTensor(), normalize]),
    )


def _check_cifar10_available(root: Path, download: bool, timeout: float) -> None:
    """Raise unless CIFAR-10 is in ``root`` or its server can be reached for a download."""
    if (root / "cifar-10-batches-py").is_dir():
        return
    if not download:
        raise RuntimeError(
            f"CIFAR-10 not found in {root}: it needs a download; "
            f"call cifar10_datasets(root, download=True) with internet access"
        )
    _check_reachable(
        CIFAR10_URL,
        timeout,
        "CIFAR-10 is not downloaded yet",
        "It needs a one-time download of about 170 MB: run this on a machine with internet "
        "access (e.g. Colab), or copy the extracted 'cifar-10-batches-py' folder into root",
    )


@contextlib.contextmanager
def _socket_timeout(seconds: float) -> Iterator[None]:
    """Give every socket opened inside the block a timeout of ``seconds``."""
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def cifar10_datasets(
    root: str | Path,
    download: bool = True,
    *,
    seed: int = 0,
    batch_size: int = 128,
    num_workers: int = 2,
    timeout: float = 10.0,
) -> DataSplits:
    """CIFAR-10 (50,000 train / 10,000 test 32×32 colour images) with standard augmentation.

    Training images get a random 32×32 crop of the image padded by 4 pixels and a random
    horizontal flip; both splits are normalised with the usual per-channel statistics.

    Args:
        root: folder that holds (or will hold) ``cifar-10-batches-py``.
        download: download the data when it is missing.
        seed: seed of the training loader's shuffling.
        batch_size: training batch size per process.
        num_workers: loader worker processes.
        timeout: seconds to wait for the download server before giving up.

    Raises:
        RuntimeError: the data is missing and ``download`` is false.
        ConnectionError: the data is missing and the server cannot be reached.
    """
    from torchvision import datasets

    root = Path(root)
    train_tf, test_tf = _cifar10_transforms()
    _check_cifar10_available(root, download, timeout)
    with _socket_timeout(timeout):  # a stalled download fails instead of hanging
        train = datasets.CIFAR10(root, train=True, transform=train_tf, download=download)
        test = datasets.CIFAR10(root, train=False, transform=test_tf, download=download)
    return DataSplits(
        train=train,
        test=test,
        train_loader=make_loader(
            train, batch_size, shuffle=True, seed=seed, num_workers=num_workers, drop_last=True
        ),
        test_loader=make_loader(test, 2 * batch_size, shuffle=False, num_workers=num_workers),
        image_size=32,
        in_channels=3,
        num_classes=10,
        classes=list(train.classes),
        mean=CIFAR10_MEAN,
        std=CIFAR10_STD,
    )
