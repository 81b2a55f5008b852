"""Datasets and loaders for training (chapter 6): real handwritten digits offline, CIFAR-10 online.

* :func:`digits_datasets` wraps scikit-learn's ``load_digits``: 1,797 real 8×8 handwritten
  digits that ship with scikit-learn, so the book trains a ViT without any download.
* :func:`cifar10_datasets` wraps torchvision's CIFAR-10 with the standard augmentation
  (random crop with padding, horizontal flip). It needs the internet the first time and
  fails fast with a clear message when there is none.

Both return a :class:`DataSplits`. The training loader draws its order from a
:class:`~torch.utils.data.DistributedSampler` seeded with ``seed``: the permutation of an
epoch depends only on ``(seed, epoch)``, which makes runs resumable bit for bit, and the
same loader shards the data when several processes train together under ``torchrun``.
Images are ``(C, H, W)`` tensors, normalised per channel.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler, TensorDataset

__all__ = ["DataSplits", "digits_datasets", "cifar10_datasets", "make_loader"]

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


@dataclass
class DataSplits:
    """A train/test pair of datasets, their loaders and what a model needs to know about them.

    Attributes:
        train: the training dataset, items ``(image (C, H, W), label)``.
        test: the test dataset.
        train_loader: shuffled, seeded, sharded under ``torchrun``.
        test_loader: in order, not sharded.
        image_size: H (= W) in pixels.
        in_channels: C.
        num_classes: number of classes.
        classes: class names.
        mean: per-channel mean used to normalise (to undo it for plots).
        std: per-channel standard deviation used to normalise.
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


def make_loader(
    dataset: Dataset,
    batch_size: int,
    *,
    shuffle: bool,
    seed: int = 0,
    num_workers: int = 0,
    drop_last: bool = False,
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


def _check_reachable(url: str, timeout: float) -> None:
    """Raise ConnectionError quickly when ``url``'s host cannot be reached."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=timeout).close()
    except OSError as error:
        raise ConnectionError(
            f"CIFAR-10 is not downloaded yet and {parsed.hostname} cannot be reached "
            f"({error}). It needs a one-time download of about 170 MB: run this on a "
            f"machine with internet access (e.g. Colab), or copy the extracted "
            f"'cifar-10-batches-py' folder into root"
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
    if not (root / "cifar-10-batches-py").is_dir():
        if not download:
            raise RuntimeError(
                f"CIFAR-10 not found in {root}: it needs a download; "
                f"call cifar10_datasets(root, download=True) with internet access"
            )
        _check_reachable(CIFAR10_URL, timeout)
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
