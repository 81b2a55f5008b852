"""Checkpoints (chapter 6): save and resume a training run, safely. :func:`save_checkpoint` writes
a run's state atomically (a temporary file in the same folder, then :func:`os.replace`), with the
SHA-256 of its contents. :func:`load_checkpoint` reads it back with ``torch.load(...,
weights_only=True)``, which unpickles only tensors and plain containers, checks the SHA-256, and
refuses a checkpoint saved from a model with another config."""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler

from vit_tutorial.files import write_atomically
from vit_tutorial.validate import check_int

__all__ = ["unwrap_model", "plain", "save_checkpoint", "read_checkpoint", "load_checkpoint"]

_KEYS = "model config optimizer scheduler scaler epoch history extra rng sha256".split()
_EXPECTED = "a checkpoint written by vit_tutorial's save_checkpoint"
_PAIRS = ("image_size", "patch_size")  # config fields where 4 means (4, 4)


def unwrap_model(model: nn.Module) -> nn.Module:
    """The model inside a :class:`~torch.nn.parallel.DistributedDataParallel`, else ``model``."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _model_config(model: nn.Module) -> dict[str, Any] | None:
    config = getattr(unwrap_model(model), "config", None)
    return dataclasses.asdict(config) if dataclasses.is_dataclass(config) else None


def _with_defaults(saved: dict[str, Any], model: nn.Module) -> dict[str, Any]:
    """``saved``, each field of the model's config it lacks (one added after it was written,
    as chapter 11's) at that field's default."""
    fields = dataclasses.fields(unwrap_model(model).config)
    absent = {f.name: f.default for f in fields if f.name not in saved}
    return {**{k: v for k, v in absent.items() if v is not dataclasses.MISSING}, **saved}


def save_checkpoint(
    path: str | Path,
    model: nn.Module,
    *,
    epoch: int = 0,
    history: dict[str, list] | None = None,
    extra: dict[str, Any] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: LRScheduler | None = None,
    scaler: torch.amp.GradScaler | None = None,
) -> None:
    """Write a checkpoint atomically holding the weights, ``dataclasses.asdict(model.config)``
    when the model has a dataclass config, the epoch, the history, ``extra``, the optimiser,
    scheduler and grad-scaler states, the torch RNG states (CPU and CUDA), and the SHA-256 of all
    that, which :func:`load_checkpoint` checks: only tensors and plain containers (NumPy scalars
    become Python numbers), so that it loads with ``weights_only=True``; a value of ``history``
    or ``extra`` that could not (a datetime, a path, an array...) is a ``TypeError`` naming it.

    Args:
        path: the file to write; its folder is created if needed.
        model: the model, or its DistributedDataParallel wrapper.
        epoch, history: epochs done so far, and :func:`~vit_tutorial.engine.fit`'s history.
        extra: any other plain values (the run's settings, say).
        optimizer, scheduler, scaler: the training objects whose state to keep, or ``None``.
    """
    training = {"optimizer": optimizer, "scheduler": scheduler, "scaler": scaler}
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    state = {
        "model": unwrap_model(model).state_dict(),
        "config": plain(_model_config(model), "config"),  # NumPy sizes as Python numbers
        **{k: None if obj is None else plain(obj.state_dict(), k) for k, obj in training.items()},
        "epoch": check_int("epoch", epoch, 0),
        "history": plain(history or {}, "history"),
        "extra": plain(extra or {}, "extra"),
        "rng": {"cpu": torch.get_rng_state(), "cuda": cuda},
    }
    state["sha256"] = _sha256(state)
    write_atomically(path, lambda f: torch.save(state, f))


def plain(value: Any, where: str) -> Any:
    """``value`` with NumPy scalars as Python numbers and subclasses of the plain types as
    those types (``torch.__version__`` as a ``str``); TypeError for what cannot be stored."""
    if isinstance(value, (np.generic, np.ndarray)) and np.ndim(value) == 0:
        return value.item()  # np.float32(0.5) -> 0.5, np.array(3) -> 3
    if value is None or isinstance(value, (bool, torch.Tensor)):
        return value
    for kind in (int, float, str):  # a subclass would be pickled by its own class
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, dict):
        return {
            plain(key, f"{where} key {key!r}"): plain(item, f"{where}[{key!r}]")
            for key, item in value.items()
        }
    if type(value) in (list, tuple):
        return type(value)(plain(item, f"{where}[{i}]") for i, item in enumerate(value))
    raise TypeError(
        f"{where} is a {type(value).__name__} ({value!r:.60}): a checkpoint holds "
        "only tensors, numbers, strings, None, and lists, tuples and dicts of them, "
        "so that torch.load(weights_only=True) can read it back"
    )


def _sha256(state: dict[str, Any]) -> str:
    """The SHA-256 of everything in ``state`` but its ``sha256`` entry: tensors by dtype, shape
    and bytes, the rest by ``repr``."""
    digest = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu().contiguous()
            digest.update(f"tensor {tensor.dtype} {tuple(tensor.shape)}\0".encode())
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
        elif isinstance(value, dict):
            digest.update(f"dict {len(value)}\0".encode())
            for key, item in value.items():
                feed(key)
                feed(item)
        elif isinstance(value, (list, tuple)):  # one kind: torch.load may give back either
            digest.update(f"sequence {len(value)}\0".encode())
            for item in value:
                feed(item)
        else:
            digest.update(f"{type(value).__name__} {value!r}\0".encode())

    feed({key: value for key, value in state.items() if key != "sha256"})
    return digest.hexdigest()


def load_checkpoint(
    path: str | Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: LRScheduler | None = None,
    scaler: torch.amp.GradScaler | None = None,
    restore_rng: bool = True,
) -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint` into ``model`` (and the others);
    return the checkpoint dictionary (``epoch``, ``history``, ``extra``, ...).

    Configs compare as values: an ``image_size`` or ``patch_size`` of ``4`` is ``(4, 4)``, and
    a list is the tuple with the same items; a field the checkpoint's config lacks (one added to
    the config since) counts at its default. A ``ValueError`` naming the file refuses one that
    is empty, truncated, corrupted (its SHA-256 does not match), unsafe to unpickle, not a
    checkpoint of :func:`save_checkpoint` (a plain state dict, say), or saved from a model with
    another config (listing each differing field).
    """
    state = read_checkpoint(path)
    saved, current = state["config"], _model_config(model)
    if saved is not None and current is not None:
        saved = _with_defaults(saved, model)
        diffs = [
            f"{key}: checkpoint {saved.get(key)!r} vs model {current.get(key)!r}"
            for key in sorted(set(saved) | set(current))
            if _comparable(key, saved.get(key)) != _comparable(key, current.get(key))
        ]
        if diffs:
            raise ValueError(
                f"checkpoint {path} was saved from a different model config: " + "; ".join(diffs)
            )
    unwrap_model(model).load_state_dict(state["model"])
    for obj, key in ((optimizer, "optimizer"), (scheduler, "scheduler"), (scaler, "scaler")):
        if obj is not None and state[key] is not None:
            obj.load_state_dict(state[key])
    if restore_rng:
        torch.set_rng_state(state["rng"]["cpu"])
        if torch.cuda.is_available() and state["rng"]["cuda"]:
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    return state


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint at ``path`` as a dictionary, once its layout and SHA-256 are checked, as
    :func:`load_checkpoint` reads it (``ValueError`` alike); read it yourself to build the model
    from its ``config`` first (as :func:`~vit_tutorial.finetune.load_pretrained` does)."""
    path = Path(path)
    if path.is_file() and path.stat().st_size == 0:
        raise ValueError(f"{path} is empty, not {_EXPECTED}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except pickle.UnpicklingError:  # torch's text advises weights_only=False: never pass it on
        raise ValueError(f"{path} does not load safely: it is not {_EXPECTED}") from None
    except Exception as error:  # garbage fails in many ways: OSError, EOFError, KeyError...
        raise ValueError(
            f"{path} cannot be read by torch.load(weights_only=True): it is "
            f"truncated, or not {_EXPECTED} ({type(error).__name__}: {error})"
        ) from error
    if not isinstance(state, dict):
        raise ValueError(f"{path} holds a {type(state).__name__}, not {_EXPECTED}")
    missing = [key for key in _KEYS if key not in state]
    if missing and state and all(isinstance(v, torch.Tensor) for v in state.values()):
        keys = ", ".join(repr(key) for key in list(state)[:2])
        raise ValueError(
            f"{path} is a plain state dict (keys {keys}, ...), not {_EXPECTED}: "
            "load it with model.load_state_dict(torch.load(path, weights_only=True))"
        )
    if missing:
        raise ValueError(f"{path} lacks {sorted(missing)}: it is not {_EXPECTED}")
    if _sha256(state) != state["sha256"]:
        raise ValueError(
            f"{path} is corrupted: the SHA-256 of its contents differs from the "
            "one saved with it (a damaged copy, or a file edited by hand)"
        )
    return state


def _comparable(key: str, value: Any) -> Any:
    """A config value as compared: a list as a tuple, an int image_size/patch_size as a pair."""
    if key in _PAIRS and isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    return tuple(value) if isinstance(value, list) else value
