"""Datasets and loaders for training, one module per dataset, every name importable from here.

* :func:`digits_datasets` (:mod:`~vit_tutorial.data.digits`): scikit-learn's 1,797 real 8×8
  handwritten digits, so a ViT trains without any download (chapter 6).
* :func:`fashion_mnist_datasets` (:mod:`~vit_tutorial.data.fashion_mnist`): 70,000 28×28
  images of clothing, Debian's copy offline, with a validation split (chapter 8).
* :func:`cifar10_datasets` (:mod:`~vit_tutorial.data.cifar10`): CIFAR-10 with the standard
  augmentation, downloaded once; offline it fails fast with a clear message.
* :func:`image_folder_datasets` (:mod:`~vit_tutorial.data.folders`): your own images, one
  sub-folder per class, for fine-tuning a pre-trained ViT (chapter 9).

All return a :class:`DataSplits` (:mod:`~vit_tutorial.data.core`). The training loader's
order comes from a :class:`~torch.utils.data.DistributedSampler` seeded with ``seed``: an
epoch's permutation depends only on ``(seed, epoch)``, so runs resume bit for bit, and the
same loader shards the data under ``torchrun``. Images are ``(C, H, W)`` tensors,
normalised per channel.
"""

# ruff: noqa: F401  (the imports are the package's names: __all__ is built from them)
from types import ModuleType as _ModuleType

from vit_tutorial.data.cifar10 import CIFAR10_MEAN, CIFAR10_STD, cifar10_datasets
from vit_tutorial.data.core import (
    DataSplits,
    ImageTensors,
    data_root,
    make_loader,
    stratified_indices,
)
from vit_tutorial.data.digits import digits_datasets
from vit_tutorial.data.fashion_mnist import (
    FASHION_MNIST_DEBIAN_DIR,
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    fashion_mnist_datasets,
)
from vit_tutorial.data.folders import CROP_FRACTION, CROP_SCALE, image_folder_datasets

__all__ = sorted(
    name
    for name, value in globals().items()
    if not name.startswith("_") and not isinstance(value, _ModuleType)
)
