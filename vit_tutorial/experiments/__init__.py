"""The chapters' experiments, apart from the library: one module per chapter.

The library holds the layers, the training loop and the data; what a chapter *measures* with them
(its models, their :class:`~vit_tutorial.engine.FitSettings`, the runs) lives in its ``chNN``
module, which the chapter runs small and ``benchmarks/`` in full, for the result files the book
loads. :func:`epochs_for` is the budget rule: each training-set size gets the same steps.

Example:
    >>> epochs_for(1000, steps=50, batch_size=128)  # 8 batches an epoch
    7
"""

import math

from vit_tutorial.validate import check_int

__all__ = ["epochs_for"]


def epochs_for(train_size: int, steps: int, batch_size: int = 128) -> int:
    """Epochs of ``train_size`` images (batches of ``batch_size``) giving at least ``steps``."""
    train_size, steps = check_int("train_size", train_size), check_int("steps", steps)
    return math.ceil(steps / math.ceil(train_size / check_int("batch_size", batch_size)))
