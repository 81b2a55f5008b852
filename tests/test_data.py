"""Tests for vit_tutorial/data/: the digits split, seeded loaders, CIFAR-10 offline, image
folders (Fashion-MNIST has its own file, test_fashion_mnist.py)."""

import io
import re
import time
from pathlib import Path

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
    with pytest.raises(ValueError, match="batch_size must be at least 1, got 0"):
        make_loader(TensorDataset(torch.arange(3)), 0, shuffle=False)
    with pytest.raises(ValueError, match=r"test_fraction must be in \(0, 1\), got 1.5"):
        digits_datasets(test_fraction=1.5)


@pytest.mark.parametrize(
    "kwargs, error, phrase",
    [
        ({"batch_size": 2.0}, TypeError, r"batch_size must be an integer, got 2.0"),
        ({"batch_size": True}, TypeError, r"batch_size must be an integer, got True"),
        ({"seed": "1"}, TypeError, r"seed must be an integer, got '1'"),
        ({"seed": 1.5}, TypeError, r"seed must be an integer, got 1.5"),
        ({"seed": None}, TypeError, r"seed must be an integer, got None"),
        ({"seed": -1}, ValueError, r"seed must be at least 0, got -1"),
        ({"num_workers": -1}, ValueError, r"num_workers must be at least 0, got -1"),
        ({"shuffle": "no"}, TypeError, r"shuffle must be True or False, got 'no'"),
        ({"drop_last": 1}, TypeError, r"drop_last must be True or False, got 1"),
    ],
)
def test_make_loader_refuses_bad_arguments_with_the_value(kwargs, error, phrase):
    options = {"batch_size": 2, "shuffle": True, **kwargs}
    with pytest.raises(error, match=phrase):
        make_loader(TensorDataset(torch.arange(6)), **options)


def test_make_loader_refuses_a_loader_without_a_batch_and_takes_numpy_integers():
    with pytest.raises(ValueError, match="a dataset of 0 samples gives no batch of 4"):
        make_loader(TensorDataset(torch.arange(0)), 4, shuffle=False)
    with pytest.raises(ValueError, match="a dataset of 3 samples gives no batch of 4"):
        make_loader(TensorDataset(torch.arange(3)), 4, shuffle=True, drop_last=True)
    loader = make_loader(
        TensorDataset(torch.arange(6)), np.int64(4), shuffle=True, seed=np.int64(1)
    )
    assert loader.batch_size == 4 and type(loader.batch_size) is int
    same = make_loader(TensorDataset(torch.arange(6)), 4, shuffle=True, seed=1)
    assert torch.equal(next(iter(loader))[0], next(iter(same))[0])


@pytest.mark.parametrize("seed", ["1", 1.5, None])
def test_digits_refuse_a_seed_that_is_not_an_integer_at_the_call(seed):
    with pytest.raises(TypeError, match=f"seed must be an integer, got {seed!r}"):
        digits_datasets(seed=seed)


def test_digits_refuse_a_test_fraction_that_leaves_a_class_out_naming_the_range(digits):
    for fraction in (0.001, 0.995):
        with pytest.raises(
            ValueError, match=rf"test_fraction must be in \(0.00500835, 0.994435\], got {fraction}"
        ):
            digits_datasets(test_fraction=fraction)
    for fraction, expected in ((0.0051, 10), (0.9944, 1787)):  # the ends of that range work
        assert len(digits_datasets(test_fraction=fraction).test) == expected
    with pytest.raises(ValueError, match=r"test_fraction must be in \(0, 1\), got nan"):
        digits_datasets(test_fraction=float("nan"))
    with pytest.raises(TypeError, match="test_fraction must be a real number, got '0.2'"):
        digits_datasets(test_fraction="0.2")
    numpy_seed = digits_datasets(seed=np.int64(1), test_fraction=np.float32(0.2))
    assert torch.equal(
        next(iter(numpy_seed.train_loader))[1], next(iter(digits_datasets(seed=1).train_loader))[1]
    )


def test_cifar10_refuses_a_root_that_is_a_file(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(ValueError, match=f"the data folder {tmp_path / 'file'} exists and is not"):
        cifar10_datasets(tmp_path / "file", download=True)


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
    with pytest.raises(ValueError, match=r"mean and std need 3 values \(R, G, B\), std > 0"):
        image_folder_datasets(folder, image_size=8, mean=(0.5,), std=(0.5,))
    with pytest.raises(ValueError, match=r"std > 0, got .*std=\(0.0, 0.5, 0.5\)"):
        image_folder_datasets(folder, image_size=8, mean=MEAN, std=(0.0, 0.5, 0.5))
    with pytest.raises(TypeError, match="image_size must be an integer, got '8'"):
        image_folder_datasets(folder, image_size="8", mean=MEAN, std=STD)


def write_bad_image(path, kind):
    """A file at ``path`` that PIL cannot decode: a truncated JPEG or PNG, or text."""
    noise = torch.randint(0, 256, (32, 32, 3), generator=torch.Generator().manual_seed(0))
    buffer = io.BytesIO()
    Image.fromarray(noise.byte().numpy()).save(buffer, "JPEG" if kind == "jpg" else "PNG")
    data = buffer.getvalue()
    path.write_bytes(b"not an image at all" if kind == "text" else data[: len(data) // 2])


@pytest.mark.parametrize("kind, name", [("jpg", "7.jpg"), ("png", "7.png"), ("text", "7.png")])
def test_a_bad_image_is_refused_at_load_naming_the_file(tmp_path, kind, name):
    folder, options = (
        write_image_folder(tmp_path / "photos"),
        dict(image_size=8, mean=MEAN, std=STD),
    )
    write_bad_image(folder / "class1" / name, kind)
    bad = re.escape(str(folder / "class1" / name))
    with pytest.raises(ValueError, match=f"{bad} is not an image that can be read"):
        image_folder_datasets(folder, **options)
    with pytest.raises(ValueError, match=f"{bad} is not an image that can be read"):
        image_folder_datasets(write_image_folder(tmp_path / "good"), val_dir=folder, **options)


def test_an_image_spoilt_after_load_fails_its_batch_naming_the_file(tmp_path):
    folder = write_image_folder(tmp_path / "photos")
    data = image_folder_datasets(folder, val_dir=folder, image_size=8, mean=MEAN, std=STD)
    path = data.train.samples[3][0]
    write_bad_image(Path(path), "jpg")
    with pytest.raises(ValueError, match=f"{re.escape(path)} is not an image that can be read"):
        data.train[3]
    with pytest.raises(ValueError, match=f"{re.escape(path)} is not an image that can be read"):
        list(data.test_loader)


def test_hidden_folders_and_files_are_not_read(tmp_path):
    folder = write_image_folder(tmp_path / "photos")
    (folder / ".ipynb_checkpoints").mkdir()  # Jupyter makes one in every folder it opens
    (folder / ".thumbnails" / "x").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(folder / ".thumbnails" / "x" / "0.png")
    (folder / "class0" / ".hidden").mkdir()
    Image.new("RGB", (8, 8)).save(folder / "class0" / ".hidden" / "0.png")
    write_bad_image(folder / "class1" / "._0.jpg", "text")  # macOS' AppleDouble file
    data = image_folder_datasets(folder, val_dir=folder, image_size=8, mean=MEAN, std=STD)
    assert data.classes == ["class0", "class1", "class2"] and len(data.train) == 18
    assert not any("/." in path for path, _ in data.train.samples)
    hidden_root = write_image_folder(tmp_path / ".cache" / "photos")  # a hidden folder above
    assert len(image_folder_datasets(hidden_root, image_size=8, mean=MEAN, std=STD).train) == 14


def test_image_folder_paths_that_cannot_train_are_named(tmp_path):
    folder = write_image_folder(tmp_path / "photos")
    options = dict(image_size=8, mean=MEAN, std=STD)
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(ValueError, match=f"train_dir {tmp_path / 'file'} is not a folder"):
        image_folder_datasets(tmp_path / "file", **options)
    with pytest.raises(ValueError, match=f"val_dir {tmp_path / 'file'} is not a folder"):
        image_folder_datasets(folder, val_dir=tmp_path / "file", **options)
    with pytest.raises(ValueError, match=f"val_dir {tmp_path / 'nope'} is not a folder"):
        image_folder_datasets(folder, val_dir=tmp_path / "nope", **options)
    (tmp_path / "one" / "class0").mkdir(parents=True)
    (tmp_path / "one" / ".ipynb_checkpoints").mkdir()
    with pytest.raises(
        ValueError, match=rf"val_dir {tmp_path / 'one'} holds the class folders \['class0'\]"
    ):
        image_folder_datasets(folder, val_dir=tmp_path / "one", **options)
    for path in (folder / "class2").iterdir():
        path.rename(path.with_name(f".{path.name}"))  # only hidden images left in class2
    with pytest.raises(ValueError, match=f"train_dir {folder}: .*no valid file .*class2.*png"):
        image_folder_datasets(folder, **options)


@pytest.mark.parametrize("seed", ["1", 1.5, None])
def test_image_folders_refuse_a_seed_that_is_not_an_integer(tmp_path, seed):
    folder = write_image_folder(tmp_path / "photos")
    with pytest.raises(TypeError, match=f"seed must be an integer, got {seed!r}"):
        image_folder_datasets(folder, image_size=8, mean=MEAN, std=STD, seed=seed)
