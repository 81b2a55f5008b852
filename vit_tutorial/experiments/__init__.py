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

__all__ = ["epochs_for"]


def epochs_for(train_size: int, steps: int, batch_size: int = 128) -> int:
    """Epochs of ``train_size`` images (batches of ``batch_size``) giving at least ``steps``."""
    for name, value in (("train_size", train_size), ("steps", steps), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {name}={value!r}")
    return math.ceil(steps / math.ceil(train_size / batch_size))
