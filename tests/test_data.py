"""Tests for vit_tutorial/data.py: the digits split, seeded loaders, CIFAR-10 offline."""

import time

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import TensorDataset

import vit_tutorial.data as data_module
from vit_tutorial.data import cifar10_datasets, digits_datasets, make_loader


@pytest.fixture(scope="module")
def digits():
    return digits_datasets()


def test_digits_split_is_sklearns_stratified_80_20(digits):
    raw = load_digits()
    _, test_idx = train_test_split(
        np.arange(len(raw.target)), test_size=0.2, stratify=raw.target, random_state=0
    )
    labels = torch.stack([y for _, y in digits.test])
    assert torch.equal(labels, torch.from_numpy(raw.target[test_idx]))
    assert len(digits.train) == 1437 and len(digits.test) == 360
    counts = torch.bincount(labels, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # stratified: about 36 per class


def test_digits_images_are_normalised_with_train_statistics(digits):
    x = digits.train.tensors[0]
    assert x.shape == (1437, 1, 8, 8)
    assert abs(x.mean().item()) < 1e-5 and abs(x.std().item() - 1) < 1e-5
    raw = load_digits()
    _, test_idx = train_test_split(
        np.arange(1797), test_size=0.2, stratify=raw.target, random_state=0
    )
    pixels = torch.tensor(raw.images[test_idx], dtype=torch.float32)
    restored = digits.test.tensors[0][:, 0] * digits.std[0] + digits.mean[0]
    torch.testing.assert_close(restored, pixels, atol=1e-4, rtol=0)


def test_digits_metadata(digits):
    assert (digits.image_size, digits.in_channels, digits.num_classes) == (8, 1, 10)
    assert digits.classes == [str(d) for d in range(10)]


def test_split_does_not_depend_on_seed_but_order_does(digits):
    other = digits_datasets(seed=1)
    assert torch.equal(other.test.tensors[1], digits.test.tensors[1])
    first = lambda d: next(iter(d.train_loader))[1]  # noqa: E731
    assert not torch.equal(first(other), first(digits))


def test_loader_order_depends_only_on_seed_and_epoch():
    data = TensorDataset(torch.arange(20))

    def order(seed, epoch):
        loader = make_loader(data, 4, shuffle=True, seed=seed)
        loader.sampler.set_epoch(epoch)
        return torch.cat([b[0] for b in loader])

    assert torch.equal(order(0, 3), order(0, 3))
    assert not torch.equal(order(0, 3), order(0, 4))
    assert not torch.equal(order(0, 3), order(1, 3))
    assert sorted(order(0, 3).tolist()) == list(range(20))  # a permutation


def test_test_loader_keeps_order(digits):
    labels = torch.cat([y for _, y in digits.test_loader])
    assert torch.equal(labels, digits.test.tensors[1])


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        make_loader(TensorDataset(torch.arange(3)), 0, shuffle=False)
    with pytest.raises(ValueError, match=r"test_fraction must be in \(0, 1\), got 1.5"):
        digits_datasets(test_fraction=1.5)


def test_cifar10_missing_without_download_says_so(tmp_path):
    with pytest.raises(RuntimeError, match=f"CIFAR-10 not found in {tmp_path}.*needs a download"):
        cifar10_datasets(tmp_path, download=False)


def test_cifar10_offline_fails_fast_with_a_clear_message(tmp_path, monkeypatch):
    # Port 9 (discard) on localhost refuses connections: an "offline" server, answered at once.
    monkeypatch.setattr(data_module, "CIFAR10_URL", "https://127.0.0.1:9/cifar-10.tar.gz")
    tic = time.perf_counter()
    with pytest.raises(ConnectionError, match="127.0.0.1 cannot be reached.*one-time download"):
        cifar10_datasets(tmp_path, download=True, timeout=2.0)
    assert time.perf_counter() - tic < 5
    assert not any(tmp_path.iterdir())  # nothing half-downloaded left behind
