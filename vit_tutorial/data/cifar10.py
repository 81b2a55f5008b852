"""CIFAR-10: 60,000 32×32 colour images of 10 classes, downloaded once by torchvision."""

from __future__ import annotations

from pathlib import Path

from vit_tutorial.data.core import DataSplits, data_root, download_within, make_loader

__all__ = ["cifar10_datasets", "CIFAR10_MEAN", "CIFAR10_STD"]

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
"""Per-channel pixel mean and standard deviation of the training images, on a 0-1 scale."""


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
    horizontal flip; both splits are normalised with :data:`CIFAR10_MEAN` and :data:`CIFAR10_STD`.

    Args:
        root: folder that holds (or will hold) ``cifar-10-batches-py``.
        download: download the data when it is missing (else a ``RuntimeError``); without
            a server reachable within ``timeout`` seconds, a ``ConnectionError``.
        seed: seed of the training loader's shuffling.
        batch_size: training batch size per process (test batches are twice as large).
    """
    from torchvision import datasets, transforms

    root = data_root(root)  # refused if a file
    if not (root / "cifar-10-batches-py").is_dir():
        if not download:
            raise RuntimeError(
                f"CIFAR-10 not found in {root}: it needs a download; "
                f"call cifar10_datasets(root, download=True) with internet access"
            )
        advice = (
            "It needs a one-time download of about 170 MB: run this on a machine with internet "
            "access (e.g. Colab), or copy the extracted 'cifar-10-batches-py' folder into root"
        )
        fetch = lambda: datasets.CIFAR10(root, download=True)  # noqa: E731
        download_within(timeout, CIFAR10_URL, fetch, "CIFAR-10 is not downloaded yet", advice)
    end = [transforms.ToTensor(), transforms.Normalize(CIFAR10_MEAN, CIFAR10_STD)]
    flip_crop = [transforms.RandomCrop(32, padding=4), transforms.RandomHorizontalFlip()]
    train = datasets.CIFAR10(root, train=True, transform=transforms.Compose([*flip_crop, *end]))
    test = datasets.CIFAR10(root, train=False, transform=transforms.Compose(end))
    train_loader = make_loader(
        train, batch_size, shuffle=True, seed=seed, num_workers=num_workers, drop_last=True
    )
    test_loader = make_loader(test, 2 * batch_size, shuffle=False, num_workers=num_workers)
    about = dict(image_size=32, in_channels=3, num_classes=10, mean=CIFAR10_MEAN, std=CIFAR10_STD)
    return DataSplits(train, test, train_loader, test_loader, classes=list(train.classes), **about)
