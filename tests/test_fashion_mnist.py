"""Tests for vit_tutorial.data.fashion_mnist_datasets: Debian's files, splits, errors.

Most tests use a stand-in for Debian's package written by the fixture below: the four IDX
files with the real shapes, where every image holds its own index, so the tests can tell
exactly which images landed in which split. One test reads the real files; one downloads
the stand-in from a local server.
"""

import functools
import gzip
import os
import re
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.datasets import FashionMNIST
from torchvision.transforms import v2

import vit_tutorial.data.fashion_mnist as data_module
from vit_tutorial.data import (
    FASHION_MNIST_DEBIAN_DIR,
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    data_root,
    fashion_mnist_datasets,
    stratified_indices,
)


def idx_bytes(magic: int, array: torch.Tensor) -> bytes:
    header = [magic, *array.shape]
    return b"".join(n.to_bytes(4, "big") for n in header) + array.numpy().tobytes()


def stand_in_images(n: int, offset: int) -> torch.Tensor:
    """uint8 images whose first three pixels spell index + offset (base 256)."""
    images = torch.zeros(n, 28, 28, dtype=torch.uint8)
    index = torch.arange(n) + offset
    images[:, 0, 0], images[:, 0, 1], images[:, 0, 2] = (
        index // 65536,
        index // 256 % 256,
        index % 256,
    )
    return images


def image_ids(images: torch.Tensor) -> torch.Tensor:
    pixels = images[:, 0, 0, :3].long()
    return pixels[:, 0] * 65536 + pixels[:, 1] * 256 + pixels[:, 2]


@pytest.fixture(scope="module")
def debian_dir(tmp_path_factory):
    """A stand-in for /usr/share/datasets/fashion-mnist: train ids 0.., test ids 100000.."""
    folder = tmp_path_factory.mktemp("debian")
    files = {
        "train-images-idx3-ubyte": idx_bytes(2051, stand_in_images(60000, 0)),
        "train-labels-idx1-ubyte": idx_bytes(2049, (torch.arange(60000) % 10).byte()),
        "t10k-images-idx3-ubyte": idx_bytes(2051, stand_in_images(10000, 100000)),
        "t10k-labels-idx1-ubyte": idx_bytes(2049, (torch.arange(10000) % 10).byte()),
    }
    for name, content in files.items():
        (folder / f"{name}.gz").write_bytes(gzip.compress(content, compresslevel=1))
    return folder


@pytest.fixture
def offline(debian_dir, monkeypatch):
    """The stand-in plays Debian's package; the download mirror refuses connections."""
    monkeypatch.setattr(data_module, "FASHION_MNIST_DEBIAN_DIR", debian_dir)
    monkeypatch.setattr(FashionMNIST, "mirrors", ["http://127.0.0.1:9/"])
    return debian_dir


@pytest.fixture
def splits(offline, tmp_path):
    return fashion_mnist_datasets(tmp_path)


def test_the_debian_files_are_read_where_they_are(splits, tmp_path):
    assert not any(tmp_path.iterdir())  # nothing copied, nothing decompressed to disk
    assert image_ids(splits.train.images).max() < 60000 and len(splits.classes) == 10


def serve(folder, tmp_path, monkeypatch):
    """A local server of ``folder`` as torchvision's mirror (no MD5 checks), Debian's copy
    absent; returns the server, to shut down."""
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(data_module, "FASHION_MNIST_DEBIAN_DIR", tmp_path / "absent")
    monkeypatch.setattr(FashionMNIST, "mirrors", [f"http://127.0.0.1:{server.server_port}/"])
    monkeypatch.setattr(FashionMNIST, "resources", [(n, None) for n, _ in FashionMNIST.resources])
    return server


def test_without_the_files_torchvision_downloads_them_into_root(debian_dir, tmp_path, monkeypatch):
    server = serve(debian_dir, tmp_path, monkeypatch)
    try:
        downloaded = fashion_mnist_datasets(tmp_path / "data", val_size=0)
    finally:
        server.shutdown()
    raw = tmp_path / "data" / "FashionMNIST" / "raw"
    assert all((raw / name).is_file() for name, _ in FashionMNIST.resources)
    assert torch.equal(image_ids(downloaded.train.images), torch.arange(60000))
    monkeypatch.setattr(FashionMNIST, "mirrors", ["http://127.0.0.1:9/"])  # offline now
    again = fashion_mnist_datasets(tmp_path / "data", val_size=0, download=False)
    assert torch.equal(again.test.images, downloaded.test.images)


def test_splits_have_the_documented_sizes_and_never_share_an_image(splits):
    assert (len(splits.train), len(splits.val), len(splits.test)) == (55000, 5000, 10000)
    train, val = (
        set(image_ids(splits.train.images).tolist()),
        set(image_ids(splits.val.images).tolist()),
    )
    assert not train & val and len(train | val) == 60000
    assert image_ids(splits.test.images).min() == 100000  # the official test images, all
    assert torch.bincount(splits.val.labels).tolist() == [500] * 10


def test_validation_split_does_not_depend_on_the_seed(offline, tmp_path):
    a = fashion_mnist_datasets(tmp_path, seed=0).val.images
    b = fashion_mnist_datasets(tmp_path, seed=7).val.images
    assert torch.equal(a, b)


def test_smaller_training_sets_are_balanced_and_nested(offline, tmp_path):
    sets = {n: fashion_mnist_datasets(tmp_path, train_size=n).train for n in (1000, 4000)}
    assert torch.bincount(sets[1000].labels).tolist() == [100] * 10
    small, large = (set(image_ids(sets[n].images).tolist()) for n in (1000, 4000))
    assert small < large


def test_items_are_normalised_floats_and_only_training_images_are_augmented(offline, tmp_path):
    flip = v2.RandomHorizontalFlip(p=1.0)
    splits = fashion_mnist_datasets(tmp_path, train_transform=flip)
    image, label = splits.train[0]
    assert image.shape == (1, 28, 28) and image.dtype == torch.float32
    raw = splits.train.images[0].float() / 255
    expected = (raw.flip(-1) - FASHION_MNIST_MEAN[0]) / FASHION_MNIST_STD[0]
    assert torch.allclose(image, expected)
    val_image, _ = splits.val[0]
    assert torch.allclose(val_image, (splits.val.images[0] / 255 - 0.2860) / 0.3530)


def test_a_batch_transform_such_as_mixup_gives_soft_labels(offline, tmp_path):
    mixup = v2.MixUp(alpha=1.0, num_classes=10)
    splits = fashion_mnist_datasets(tmp_path, batch_size=8, batch_transform=mixup)
    images, labels = next(iter(splits.train_loader))
    assert images.shape == (8, 1, 28, 28) and labels.shape == (8, 10)
    assert torch.allclose(labels.sum(-1), torch.ones(8))


def test_a_corrupt_debian_file_is_refused_and_nothing_is_written(tmp_path, monkeypatch):
    broken = tmp_path / "debian"
    broken.mkdir()
    for name, _ in FashionMNIST.resources:
        (broken / name).write_bytes(gzip.compress(b"\x00\x00\x08\x03 not an IDX file"))
    monkeypatch.setattr(data_module, "FASHION_MNIST_DEBIAN_DIR", broken)
    with pytest.raises(ValueError, match="is not the Fashion-MNIST file .*reinstall it"):
        fashion_mnist_datasets(tmp_path / "data")
    raw = tmp_path / "data" / "FashionMNIST" / "raw"
    assert not raw.exists() or not any(raw.iterdir())


def test_a_truncated_gzip_is_refused(tmp_path, monkeypatch, debian_dir):
    broken = tmp_path / "debian"
    broken.mkdir()
    for name, _ in FashionMNIST.resources:
        (broken / name).write_bytes((debian_dir / name).read_bytes()[:1000])
    monkeypatch.setattr(data_module, "FASHION_MNIST_DEBIAN_DIR", broken)
    with pytest.raises(ValueError, match="is corrupt"):
        fashion_mnist_datasets(tmp_path / "data")


def test_with_neither_files_nor_internet_the_error_comes_fast_and_says_what_to_do(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(data_module, "FASHION_MNIST_DEBIAN_DIR", tmp_path / "absent")
    monkeypatch.setattr(FashionMNIST, "mirrors", ["http://127.0.0.1:9/"])
    tic = time.perf_counter()
    with pytest.raises(ConnectionError, match="127.0.0.1 cannot be reached.*apt-get install"):
        fashion_mnist_datasets(tmp_path / "data", timeout=2.0)
    assert time.perf_counter() - tic < 5
    with pytest.raises(FileNotFoundError, match="dataset-fashion-mnist.*download=True"):
        fashion_mnist_datasets(tmp_path / "data", download=False)


@pytest.mark.parametrize(
    "kwargs, error, phrase",
    [
        ({"train_size": 0}, ValueError, "train_size must be at least 10, got 0"),
        ({"train_size": 55001}, ValueError, "train_size must be at most 55000"),
        ({"train_size": 1e3}, TypeError, "train_size must be an integer, got 1000.0"),
        ({"val_size": -1}, ValueError, "val_size must be at least 0, got -1"),
        ({"val_size": 50001}, ValueError, "val_size must be at most 50000"),
        ({"seed": "1"}, TypeError, "seed must be an integer, got '1'"),
        ({"seed": 1.5}, TypeError, "seed must be an integer, got 1.5"),
        ({"seed": None}, TypeError, "seed must be an integer, got None"),
        ({"batch_size": 0}, ValueError, "batch_size must be at least 1, got 0"),
        ({"download": "no"}, TypeError, "download must be True or False, got 'no'"),
    ],
)
def test_bad_sizes_are_refused_with_the_value(offline, tmp_path, kwargs, error, phrase):
    with pytest.raises(error, match=phrase):
        fashion_mnist_datasets(tmp_path, **kwargs)


def test_no_validation_split_when_val_size_is_zero(offline, tmp_path):
    splits = fashion_mnist_datasets(tmp_path, val_size=0)
    assert splits.val is None and splits.val_loader is None and len(splits.train) == 60000


def test_stratified_indices_refuses_a_size_it_cannot_give():
    with pytest.raises(ValueError, match=r"size must be in \[0, 10\].*got 11"):
        stratified_indices(torch.arange(10), 11)
    with pytest.raises(TypeError, match="size must be an integer, got 1.5"):
        stratified_indices(torch.arange(10), 1.5)
    with pytest.raises(TypeError, match="seed must be an integer, got '1'"):
        stratified_indices(torch.arange(10), 5, seed="1")
    numpy = stratified_indices(torch.arange(10), np.int64(5), seed=np.int64(3))
    assert torch.equal(numpy, stratified_indices(torch.arange(10), 5, seed=3))


def test_data_root_follows_the_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("VIT_TUTORIAL_DATA", str(tmp_path))
    assert data_root() == tmp_path
    assert data_root("~/x") == Path("~/x").expanduser()


def test_a_data_root_that_is_a_file_is_refused(offline, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(ValueError, match=f"the data folder {tmp_path / 'file'} exists and is not"):
        fashion_mnist_datasets(tmp_path / "file")  # though Debian's copy is there
    monkeypatch.setenv("VIT_TUTORIAL_DATA", str(tmp_path / "file"))
    with pytest.raises(ValueError, match=f"the data folder {tmp_path / 'file'} exists and is not"):
        data_root()


def test_a_numpy_seed_is_an_integer(offline, tmp_path):
    numpy = fashion_mnist_datasets(tmp_path, val_size=0, seed=np.int64(3), batch_size=np.int64(8))
    plain = fashion_mnist_datasets(tmp_path, val_size=0, seed=3, batch_size=8)
    assert torch.equal(next(iter(numpy.train_loader))[1], next(iter(plain.train_loader))[1])


def raw_copy(debian_dir, root, name=None, content=None):
    """The stand-in's four files, uncompressed, where torchvision keeps them in ``root``, with
    ``name``'s content replaced by ``content``."""
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for file, _ in FashionMNIST.resources:
        plain = file.removesuffix(".gz")
        data = gzip.decompress((debian_dir / file).read_bytes())
        (raw / plain).write_bytes(content(data) if plain == name else data)
    return raw


def test_a_good_copy_in_root_loads_byte_for_byte_as_debians(offline, splits, tmp_path):
    raw_copy(offline, tmp_path / "data")
    copy = fashion_mnist_datasets(tmp_path / "data")
    for split in ("train", "val", "test"):
        assert torch.equal(getattr(copy, split).images, getattr(splits, split).images)
        assert torch.equal(getattr(copy, split).labels, getattr(splits, split).labels)


def labels_with(label: int) -> bytes:
    labels = (torch.arange(10000) % 10).byte()
    labels[1234] = label
    return idx_bytes(2049, labels)


IMAGES, LABELS = "train-images-idx3-ubyte", "train-labels-idx1-ubyte"
FAULTS = {  # name: (file, its content from the good one, the error's words)
    "100 images": (
        IMAGES,
        lambda data: idx_bytes(2051, torch.zeros(100, 28, 28, dtype=torch.uint8)),
        r"header \[2051, 100, 28, 28\] and 78416 bytes, expected \[2051, 60000, 28, 28\]",
    ),
    "90 labels": (
        LABELS,
        lambda data: idx_bytes(2049, torch.zeros(90, dtype=torch.uint8)),
        r"header \[2049, 90\] and 98 bytes, expected \[2049, 60000\]",
    ),
    "14x28 images": (
        IMAGES,
        lambda data: idx_bytes(2051, torch.zeros(60000, 14, 28, dtype=torch.uint8)),
        r"header \[2051, 60000, 14, 28\] .*expected \[2051, 60000, 28, 28\]",
    ),
    "truncated": (IMAGES, lambda data: data[:-5], "47040011 bytes, expected .* 47040016 bytes"),
    "wrong magic": (
        IMAGES,
        lambda data: (2049).to_bytes(4, "big") + data[4:],
        r"header \[2049, 60000, 28, 28\]",
    ),
    "labels file of images": (
        LABELS,
        lambda data: idx_bytes(2051, stand_in_images(60000, 0)),
        r"header \[2051, 60000\] .*expected \[2049, 60000\]",
    ),
    "images file of labels": (
        IMAGES,
        lambda data: idx_bytes(2049, torch.zeros(60000, dtype=torch.uint8)),
        r"header \[2049, 60000, 0, 0\]",
    ),
    "label 10": ("t10k-labels-idx1-ubyte", lambda data: labels_with(10), "holds the label 10"),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_every_copy_is_checked_naming_the_file_and_what_was_expected(offline, tmp_path, fault):
    name, content, phrase = FAULTS[fault]
    raw = raw_copy(offline, tmp_path / "data", name, content)  # read before Debian's copy
    with pytest.raises(ValueError, match=f"{re.escape(str(raw / name))} .*{phrase}"):
        fashion_mnist_datasets(tmp_path / "data")


def test_a_bad_download_is_refused_by_the_same_check(debian_dir, tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for file, _ in FashionMNIST.resources:
        data = (debian_dir / file).read_bytes()
        if file.startswith("train-images"):
            data = gzip.compress(gzip.decompress(data)[:-100], compresslevel=1)
        (mirror / file).write_bytes(data)
    server = serve(mirror, tmp_path, monkeypatch)
    try:
        with pytest.raises(ValueError, match="train-images-idx3-ubyte is not the Fashion-MNIST"):
            fashion_mnist_datasets(tmp_path / "data")
    finally:
        server.shutdown()


@pytest.mark.skipif(
    not FASHION_MNIST_DEBIAN_DIR.is_dir() and os.environ.get("CI") != "true",
    reason="Debian's dataset-fashion-mnist is not installed (make setup installs it)",
)
def test_the_real_files_load_with_the_documented_statistics(tmp_path):
    splits = fashion_mnist_datasets(tmp_path, download=False)
    pixels = torch.cat([splits.train.images, splits.val.images]).float() / 255
    assert round(pixels.mean().item(), 4) == FASHION_MNIST_MEAN[0]
    assert round(pixels.std().item(), 4) == FASHION_MNIST_STD[0]
    assert splits.classes[0] == "T-shirt/top" and len(splits.test) == 10000
