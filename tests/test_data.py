"""Tests for vit_tutorial/data/: the digits split, seeded loaders, CIFAR-10 offline, image
folders (Fashion-MNIST has its own file, test_fashion_mnist.py)."""

import time

import numpy as np
import pytest
import torch
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import TensorDataset

import vit_tutorial.data.cifar10 as cifar10_module
from vit_tutorial.data import cifar10_datasets, digits_datasets, image_folder_datasets, make_loader

from tiny_models import write_image_folder

MEAN, STD = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)


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
    monkeypatch.setattr(cifar10_module, "CIFAR10_URL", "https://127.0.0.1:9/cifar-10.tar.gz")
    tic = time.perf_counter()
    with pytest.raises(ConnectionError, match="127.0.0.1 cannot be reached.*one-time download"):
        cifar10_datasets(tmp_path, download=True, timeout=2.0)
    assert time.perf_counter() - tic < 5
    assert not any(tmp_path.iterdir())  # nothing half-downloaded left behind


# --- image_folder_datasets -----------------------------------------------------------------


def test_image_folder_split_is_stratified_seeded_and_normalised(tmp_path):
    folder = write_image_folder(tmp_path / "photos")
    data = image_folder_datasets(folder, image_size=16, mean=MEAN, std=STD, batch_size=4)
    assert (len(data.train), len(data.test), data.val) == (14, 4, None)
    assert data.classes == ["class0", "class1", "class2"] and data.num_classes == 3
    assert (data.in_channels, data.image_size, data.mean, data.std) == (3, 16, MEAN, STD)
    held_out = [data.test[i][1] for i in range(len(data.test))]
    assert sorted(set(held_out)) == [0, 1, 2]  # every class held out in proportion
    assert sorted(data.train.indices + data.test.indices) == list(range(18))
    again = image_folder_datasets(folder, image_size=16, mean=MEAN, std=STD)
    assert again.test.indices == data.test.indices  # the same seed, the same split
    other = image_folder_datasets(folder, image_size=16, mean=MEAN, std=STD, seed=1)
    assert other.test.indices != data.test.indices
    images, labels = next(iter(data.train_loader))
    assert images.shape == (4, 3, 16, 16) and images.dtype == torch.float32
    # Uniform images stay uniform through resize and crop: each pixel is (v / 255 - mean) / std.
    image, label = data.test[0]
    path = data.test.dataset.samples[data.test.indices[0]][0]
    rgb = torch.tensor(Image.open(path).convert("RGB").getpixel((0, 0))) / 255
    expected = (rgb - torch.tensor(MEAN)) / torch.tensor(STD)
    torch.testing.assert_close(image, expected.view(3, 1, 1).expand(3, 16, 16))


def test_greyscale_images_become_rgb(tmp_path):
    folder = write_image_folder(tmp_path / "photos")
    data = image_folder_datasets(folder, val_dir=folder, image_size=8, mean=MEAN, std=STD)
    grey, _ = data.test[0]  # class0/0.png, an 'L' image
    assert grey.shape == (3, 8, 8)
    # Three equal channels: undoing the normalisation gives the grey level everywhere.
    pixels = grey * torch.tensor(STD).view(3, 1, 1) + torch.tensor(MEAN).view(3, 1, 1)
    torch.testing.assert_close(pixels, torch.full_like(pixels, 90 / 255))


def test_a_val_folder_is_used_whole_and_without_augment_train_is_eval(tmp_path):
    folder = write_image_folder(tmp_path / "photos")
    data = image_folder_datasets(
        folder, val_dir=folder, image_size=8, mean=MEAN, std=STD, augment=False
    )
    assert len(data.train) == len(data.test) == 18
    assert all(torch.equal(data.train[i][0], data.test[i][0]) for i in (0, 7, 17))


def test_image_folder_errors(tmp_path):
    folder = write_image_folder(tmp_path / "photos")
    options = dict(image_size=8, mean=MEAN, std=STD)
    with pytest.raises(ValueError, match=f"train_dir {tmp_path / 'nope'} is not a folder"):
        image_folder_datasets(tmp_path / "nope", **options)
    (tmp_path / "one" / "class0").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"class folders \['class0'\]: a classifier needs at"):
        image_folder_datasets(tmp_path / "one", **options)
    (tmp_path / "empty" / "a").mkdir(parents=True), (tmp_path / "empty" / "b").mkdir()
    with pytest.raises(ValueError, match=f"train_dir {tmp_path / 'empty'}: .*no valid file"):
        image_folder_datasets(tmp_path / "empty", **options)
    other = write_image_folder(tmp_path / "other")
    (other / "class2").rename(other / "zebra")
    with pytest.raises(ValueError, match=r"val_dir .* has classes \['class0', 'class1', 'zebra'\]"):
        image_folder_datasets(folder, val_dir=other, **options)
    for fraction in (0, 1, 1.5):
        with pytest.raises(ValueError, match=r"val_fraction must be in \(0, 1\)"):
            image_folder_datasets(folder, val_fraction=fraction, **options)
    with pytest.raises(ValueError, match="val_fraction=0.01 of 18 images holds out 0"):
        image_folder_datasets(folder, val_fraction=0.01, **options)
    with pytest.raises(
        ValueError, match=r"mean and std need 3 values \(R, G, B\), got mean=\(0.5,\)"
    ):
        image_folder_datasets(folder, image_size=8, mean=(0.5,), std=(0.5,))
    with pytest.raises(TypeError, match="image_size must be an integer, got '8'"):
        image_folder_datasets(folder, image_size="8", mean=MEAN, std=STD)
