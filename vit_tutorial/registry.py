"""Every model family's presets under one name space, as timm's ``create_model``.

:func:`create_model` builds any preset of :data:`~vit_tutorial.vit.PRESETS` (ViT),
:data:`~vit_tutorial.swin.SWIN_PRESETS` (Swin) and :data:`~vit_tutorial.axial.AXIAL_PRESETS`
(axial ViT) by name, its config's fields overridden as keywords; :func:`list_models` lists the
names. The names are timm's (``vit_base_patch16_224``, ``swin_tiny_patch4_window7_224``) where
timm has the model, and follow its pattern where it does not (``axial_vit_tiny_patch16_224``;
``swin_fashion``, the book's own). The masked autoencoder is not here: it is a pre-training
set-up, not a classifier, whose constructor takes decoder fields besides its encoder's
:class:`~vit_tutorial.vit.ViTConfig`, and its presets are the encoder's, through
:meth:`~vit_tutorial.mae.MaskedAutoencoder.to_vit`.
"""

from __future__ import annotations

import difflib
import fnmatch
from typing import Any

from torch import nn

from vit_tutorial.axial import AXIAL_PRESETS, AxialViT
from vit_tutorial.swin import SWIN_PRESETS, SwinTransformer
from vit_tutorial.validate import build_preset
from vit_tutorial.vit import PRESETS, VisionTransformer

__all__ = ["FAMILIES", "create_model", "list_models"]

#: Each family's presets and the class that builds one from its config.
FAMILIES: dict[str, tuple[dict[str, Any], type[nn.Module]]] = {
    "vit": (PRESETS, VisionTransformer),
    "swin": (SWIN_PRESETS, SwinTransformer),
    "axial_vit": (AXIAL_PRESETS, AxialViT),
}


def list_models(pattern: str = "*") -> list[str]:
    """The sorted preset names of every family that match ``pattern`` (:mod:`fnmatch`'s, as
    timm's ``list_models('vit_*')``).

    Example:
        >>> list_models("axial_*")
        ['axial_vit_base_patch16_224', 'axial_vit_small_patch16_224', 'axial_vit_tiny_patch16_224']
    """
    names = [name for presets, _ in FAMILIES.values() for name in presets]
    return sorted(fnmatch.filter(names, pattern))


def create_model(name: str, **overrides: Any) -> nn.Module:
    """The preset ``name`` of any family, any field of its config overridden.

    An unknown ``name`` is a ``ValueError`` naming the close ones (those containing it, else
    :func:`difflib.get_close_matches`'s); an unknown override, the config's ``TypeError`` naming
    the field and the family's fields.

    Example:
        >>> create_model("swin_fashion", num_classes=3).config.num_classes
        3
        >>> create_model("swin_t")
        Traceback (most recent call last):
        ...
        ValueError: unknown model 'swin_t'; close: ['swin_tiny_patch4_window7_224']; ...
    """
    for presets, model in FAMILIES.values():
        if name in presets:
            return build_preset(presets, model, name, **overrides)
    names = list_models()
    close = [n for n in names if name in n] or difflib.get_close_matches(name, names)
    raise ValueError(f"unknown model {name!r}; close: {close}; list_models() lists them all")
