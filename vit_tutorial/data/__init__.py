"""Datasets and loaders for training, one module per dataset, every name importable from here.

* :func:`digits_datasets` (:mod:`~vit_tutorial.data.digits`): scikit-learn's 1,797 real 8×8
  handwritten digits, so a ViT trains without any download (chapter 6).
* :func:`fashion_mnist_datasets` (:mod:`~vit_tutorial.data.fashion_mnist`): 70,000 28×28
  images of clothing, Debian's copy offline, with a validation split (chapter 8).
* :func:`cifar10_datasets` (:mod:`~vit_tutorial.data.cifar10`): CIFAR-10 with the standard
  augmentation, downloaded once; offline it fails fast with a clear message.
* :func:`image_folder_datasets` (:mod:`~vit_tutorial.data.folders`): your own images, one
  sub-folder per class, for fine-tuning a pre-trained ViT (chapter 9).

All return a :class:`DataSplits` of ``(C, H, W)`` images normalised per channel; the
training loader's order depends only on ``(seed, epoch)`` (:func:`make_loader`), so runs
resume bit for bit, and it shards the data under ``torchrun``.
"""

# ruff: noqa: F403  (the package's names are its modules' __all__, each written once there)
from vit_tutorial.data import cifar10, core, digits, fashion_mnist, folders
from vit_tutorial.data.cifar10 import *
from vit_tutorial.data.core import *
from vit_tutorial.data.digits import *
from vit_tutorial.data.fashion_mnist import *
from vit_tutorial.data.folders import *

__all__ = sorted(
    name for module in (cifar10, core, digits, fashion_mnist, folders) for name in module.__all__
)
