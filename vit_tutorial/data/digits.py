"""scikit-learn's handwritten digits: the book's first dataset, with no download (chapter 6)."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from vit_tutorial.data.core import DataSplits, make_loader
from vit_tutorial.validate import check_real

__all__ = ["digits_datasets"]


def digits_datasets(seed: int = 0, batch_size: int = 64, test_fraction: float = 0.2) -> DataSplits:
    """scikit-learn's handwritten digits: 1,797 real 8×8 grey images of 0-9, no download.

    The split holds out ``test_fraction`` of the images (20 % by default), stratified, with
    ``random_state=0`` whatever ``seed`` (the training loader's shuffling) is, so every run and
    every seed is tested on the same 360 images. Pixels (0-16) are normalised with the mean and
    standard deviation of the training pixels.

    Example:
        >>> data = digits_datasets()
        >>> len(data.train), len(data.test), data.train[0][0].shape
        (1437, 360, torch.Size([1, 8, 8]))
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    test_fraction = check_real("test_fraction", test_fraction, 0, 1, low_open=True, high_open=True)
    digits = load_digits()
    n = len(digits.target)  # scikit-learn holds out ceil(test_fraction * n): 10 on each side
    check_real("test_fraction", test_fraction, 9 / n, (n - 10) / n, low_open=True)
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1)  # (B, 1, 8, 8)
    labels = torch.tensor(digits.target, dtype=torch.long)
    ids = torch.arange(len(labels)).numpy()
    split = train_test_split(ids, test_size=test_fraction, stratify=labels.numpy(), random_state=0)
    train_idx, test_idx = map(torch.from_numpy, split)
    mean, std = images[train_idx].mean().item(), images[train_idx].std().item()
    images = (images - mean) / std
    train = TensorDataset(images[train_idx], labels[train_idx])
    test = TensorDataset(images[test_idx], labels[test_idx])
    train_loader = make_loader(train, batch_size, shuffle=True, seed=seed)
    test_loader = make_loader(test, 512, shuffle=False)
    about = dict(image_size=8, in_channels=1, num_classes=10, mean=(mean,), std=(std,))
    return DataSplits(train, test, train_loader, test_loader, classes=list("0123456789"), **about)
