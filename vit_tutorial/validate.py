"""Argument checks shared by the modules: one wording for every "wrong value" error.

Each check raises ``TypeError`` for a value of the wrong kind and ``ValueError`` for one out
of range, naming the argument, the value and what was expected. A value is checked once,
where the reader hands it in; layers built from a validated config use :func:`trusted`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = [
    "check_int",
    "check_seed",
    "check_real",
    "check_bool",
    "trusted",
    "ModelConfig",
    "build_preset",
]


def check_int(name: str, value: object, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` (an integer, NumPy's too, not a bool) as an int from ``minimum`` to ``maximum``.

    Example:
        >>> check_int("depth", 0)
        Traceback (most recent call last):
        ...
        ValueError: depth must be at least 1, got 0
    """
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value}")
    return int(value)


#: The largest seed: torch's generators take 64 bits, and a loader adds the epoch to the seed.
MAX_SEED = 2**63 - 1


def check_seed(value: object, name: str = "seed") -> int:
    """``value`` as a seed: an integer from 0 to :data:`MAX_SEED` (2**63 - 1)."""
    return check_int(name, value, 0, MAX_SEED)


def check_real(
    name: str,
    value: object,
    low: float = -math.inf,
    high: float = math.inf,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` (a NumPy float too) as a finite float (NaN and infinities are refused) from ``low``
    to ``high``, ``low_open``/``high_open`` excluding the bound.

    Example:
        >>> check_real("dropout", 1.0, 0.0, 1.0, high_open=True)
        Traceback (most recent call last):
        ...
        ValueError: dropout must be in [0, 1), got 1.0
    """
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    value = float(value)
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if not math.isfinite(value) or too_low or too_high:
        if low == 0 and low_open and high == math.inf:
            raise ValueError(f"{name} must be positive, got {value}")
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ValueError(f"{name} must be in {interval}, got {value}")
    return value


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is a bool; ``TypeError`` otherwise."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def trusted(cls: type, *args: Any, **kwargs: Any) -> Any:
    """An instance of ``cls`` from arguments checked already: ``_build(*args, **kwargs)`` alone.

    A layer checks its arguments in ``__init__``, then makes itself in ``_build``, which checks
    nothing: ``Layer(...)`` still refuses bad input, and a model builds its layers from its
    validated config with ``trusted(Layer, ...)``, so no value is checked twice.
    """
    instance = cls.__new__(cls)
    instance._build(*args, **kwargs)
    return instance


class ModelConfig:
    """The base of every model family's config dataclass (``ViTConfig``, ``SwinConfig`` ...):
    one way to build a config from another and keywords, and one error for an unknown field."""

    @classmethod
    def resolve(cls, config: ModelConfig | None = None, **fields: Any) -> Any:
        """``config`` (default: the defaults) with ``fields`` replaced, validated once."""
        name = cls.__name__
        if config is not None and not isinstance(config, cls):
            hint = f"; rebuild it: {name}(**config)" if isinstance(config, dict) else ""
            raise TypeError(f"config must be a {name} or None, got {type(config).__name__}{hint}")
        valid = [f.name for f in dataclasses.fields(cls)]
        if unknown := sorted(set(fields) - set(valid)):
            raise TypeError(f"unknown {name} fields {unknown}; valid fields: {valid}")
        return cls(**fields) if config is None else dataclasses.replace(config, **fields)


_Model = TypeVar("_Model")


def build_preset(
    presets: Mapping[str, ModelConfig], model: Callable[..., _Model], name: str, /, **overrides: Any
) -> _Model:
    """``model(presets[name], **overrides)``: how every family builds a preset by name (its
    ``create_*`` function, :func:`~vit_tutorial.registry.create_model`); an unknown ``name`` is a
    ``ValueError`` listing ``presets``, an unknown override the config's ``TypeError``."""
    if name not in presets:
        raise ValueError(f"unknown preset {name!r}; valid presets: {sorted(presets)}")
    return model(presets[name], **overrides)
