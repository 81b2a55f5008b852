"""Where to run (:func:`~vit_tutorial.engine.fit`, :func:`~vit_tutorial.engine.predict` and
the command line's ``--device``, re-exported by :mod:`vit_tutorial.engine`): ``'auto'`` or a
device this machine has, refused by name otherwise.
"""

from __future__ import annotations

import os

import torch

__all__ = ["Device", "resolve_device"]

#: Where to run: ``'auto'`` (see :func:`resolve_device`), a string that
#: :class:`torch.device` reads (``'cpu'``, ``'cuda:1'``, ...), or a :class:`torch.device`.
Device = str | torch.device


def resolve_device(device: Device = "auto") -> torch.device:
    """``'auto'`` is the process's GPU if CUDA is available (``cuda:LOCAL_RANK``), else the CPU;
    another device must be one this machine has (ValueError: 'mps' off a Mac, 'cuda:3' on one
    GPU, 'meta', which holds no data)."""
    if str(device) != "auto":
        try:
            resolved = torch.device(device)
        except (RuntimeError, TypeError):
            expected = "'auto', 'cpu', 'cuda', 'cuda:N', 'mps' ..."
            raise ValueError(f"unknown device {device!r}; expected {expected}") from None
        if resolved.type == "meta":
            raise ValueError("device 'meta' holds no data: nothing can train or run there")
        if not _present(resolved):
            gpus = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
            mps = ["mps"] * bool(torch.backends.mps.is_available())
            here = ", ".join(["cpu", *gpus, *mps])
            raise ValueError(f"device {device!r} is not on this machine (it has {here})") from None
        return resolved
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def _present(device: torch.device) -> bool:
    """Whether this machine has ``device`` (CUDA counted without starting it on a GPU)."""
    if device.type == "cuda":
        return (device.index or 0) < torch.cuda.device_count()
    if device.type == "mps":
        return torch.backends.mps.is_available()
    try:
        torch.empty(0, device=device)  # 'xla' without torch_xla, say, raises
    except Exception:  # RuntimeError, or ModuleNotFoundError for 'hpu' without its module ...
        return False
    return True
