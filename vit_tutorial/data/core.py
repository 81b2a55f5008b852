"""What every dataset of the package shares: :class:`DataSplits`, seeded loaders, in-memory
images, stratified subsets, the data folder and downloads that fail fast."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch
import torch.distributed as dist
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from vit_tutorial.validate import check_bool, check_int, check_seed

__all__ = ["DataSplits", "make_loader", "ImageTensors", "stratified_indices", "data_root"]


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
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
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
    """A DataLoader whose order depends only on ``(seed, epoch)``, ``batch_size`` samples per
    batch and per process. ``shuffle=True`` (training) samples with a
    :class:`~torch.utils.data.DistributedSampler` over the current process group (one replica when
    there is none): ``loader.sampler.set_epoch(epoch)`` before each epoch (``fit`` does it) gives
    that epoch's permutation, each process reading its own shard. ``shuffle=False`` (evaluation)
    keeps the order, never sharded. ``collate_fn`` makes samples a batch (default: stacked).

    Example:
        >>> from torch.utils.data import TensorDataset
        >>> data = TensorDataset(torch.arange(6))
        >>> loader = make_loader(data, 3, shuffle=True, seed=0)
        >>> loader.sampler.set_epoch(1)
        >>> first = [b[0].tolist() for b in loader]
        >>> first == [b[0].tolist() for b in loader]  # same epoch, same order
        True
    """
    batch_size = check_int("batch_size", batch_size)  # an int, DataLoader's only integer
    seed, num_workers = check_seed(seed), check_int("num_workers", num_workers, 0)
    check_bool("shuffle", shuffle), check_bool("drop_last", drop_last)
    sampler = None
    if shuffle:
        distributed = dist.is_available() and dist.is_initialized()
        replicas, rank = (dist.get_world_size(), dist.get_rank()) if distributed else (1, 0)
        sampler = DistributedSampler(dataset, replicas, rank, seed=seed, drop_last=drop_last)
    workers = dict(num_workers=num_workers, persistent_workers=num_workers > 0)
    loader = DataLoader(
        dataset, batch_size, sampler=sampler, drop_last=drop_last, collate_fn=collate_fn, **workers
    )
    if hasattr(dataset, "__len__") and len(loader) == 0:  # empty, or too small for drop_last
        raise ValueError(f"a dataset of {len(dataset)} samples gives no batch of {batch_size}")
    return loader


class ImageTensors(Dataset):
    """Greyscale ``uint8`` images in memory, augmented by a ``transforms.v2`` pipeline.

    ``transform`` (if any) receives a ``uint8`` tensor ``(C, H, W)``, as ``transforms.v2``
    expects; the result is scaled to 0-1 and normalised with ``mean`` and ``std``. Items are
    ``(image (C, H, W) float32, label)``.
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
        self.mean, self.std = (torch.tensor(stat).view(-1, 1, 1) for stat in (mean, std))

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
    """``size`` indices into ``labels`` with each class in proportion, in a seeded order: for one
    ``seed``, a smaller ``size`` picks a subset of what a larger one picks (nested training sets).

    Example:
        >>> labels = torch.arange(10).repeat(100)  # 10 classes of 100
        >>> picked = stratified_indices(labels, 50)
        >>> torch.bincount(labels[picked]).tolist()
        [5, 5, 5, 5, 5, 5, 5, 5, 5, 5]
        >>> set(picked.tolist()) <= set(stratified_indices(labels, 200).tolist())
        True
    """
    if not 0 <= check_int("size", size, 0) <= len(labels):
        raise ValueError(f"size must be in [0, {len(labels)}] (the number of labels), got {size}")
    seed = check_seed(seed)
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


def data_root(root: str | Path | None = None) -> Path:
    """Where datasets are kept: ``root``, else ``$VIT_TUTORIAL_DATA``, else
    ``~/.cache/vit_tutorial``; ``ValueError`` if it is a file."""
    if root is None:
        root = os.environ.get("VIT_TUTORIAL_DATA", "~/.cache/vit_tutorial")
    if (path := Path(root).expanduser()).exists() and not path.is_dir():
        raise ValueError(f"the data folder {path} exists and is not a folder")
    return path


def download_within(
    timeout: float, url: str, download: Callable[[], object], missing: str, advice: str
) -> None:
    """Run ``download`` (of ``url``) with a ``timeout`` on every socket, once ``url``'s host
    has answered within ``timeout`` seconds, so that a stalled download fails instead of hanging;
    else a ``ConnectionError`` "``missing`` and <host> cannot be reached (<error>). ``advice``",
    before anything is written."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=timeout).close()
    except OSError as error:
        raise ConnectionError(
            f"{missing} and {parsed.hostname} cannot be reached ({error}). {advice}"
        ) from error
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(timeout)
    try:
        download()
    finally:
        socket.setdefaulttimeout(previous)
