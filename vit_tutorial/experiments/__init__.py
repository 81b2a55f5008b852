"""The chapters' experiments, apart from the library: one module per chapter.

The library (:mod:`~vit_tutorial.vit`, :mod:`~vit_tutorial.engine`, :mod:`~vit_tutorial.data`,
...) holds the layers, the training loop and the data. What a chapter *measures* with them (the
models it compares, their :class:`~vit_tutorial.engine.FitSettings` and the runs) lives here, so
that the chapter runs it live on a small scale and the scripts of ``benchmarks/`` run the same
code in full, to write the result files the book loads: chapter 6's ablation on the digits
(:mod:`~vit_tutorial.experiments.ch06`), chapter 8's study on Fashion-MNIST
(:mod:`~vit_tutorial.experiments.ch08`), chapter 9's pre-training and fine-tuning with few
labels (:mod:`~vit_tutorial.experiments.ch09`). Shared by the chapters: :func:`epochs_for`, the
budget rule that trains every training-set size for the same number of optimisation steps.

Example:
    >>> epochs_for(1000, steps=50, batch_size=128)  # 8 batches an epoch
    7
"""

import math

__all__ = ["epochs_for"]


def epochs_for(train_size: int, steps: int, batch_size: int = 128) -> int:
    """Epochs of ``train_size`` images, in batches of ``batch_size``, that give at least
    ``steps`` optimisation steps."""
    for name, value in (("train_size", train_size), ("steps", steps), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {name}={value!r}")
    return math.ceil(steps / math.ceil(train_size / batch_size))
