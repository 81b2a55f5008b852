"""What every model family shares as a backbone: timm's model interface (chapter 5).

The classifiers (:class:`~vit_tutorial.vit.VisionTransformer`,
:class:`~vit_tutorial.axial.AxialViT`, :class:`~vit_tutorial.swin.SwinTransformer`) speak timm's
interface, with timm's argument names and meaning (``timm/models/vision_transformer.py``, ``swin_transformer.py``):

- ``forward_features(images)``, ``forward_head(features, pre_logits=False)``, ``forward``;
- ``forward_intermediates(images, indices=None, norm=False, stop_early=False,
  output_fmt='NCHW', intermediates_only=False)``: the features after chosen blocks (a ViT) or
  stages (Swin), and ``prune_intermediate_layers(indices)``, which drops what comes after;
- ``no_weight_decay()``, ``reset_classifier(num_classes, global_pool=None)``, ``num_features``.

The encoder of :class:`~vit_tutorial.mae.MaskedAutoencoder` has ``forward_intermediates`` and
``no_weight_decay`` only; its ``to_vit`` makes a ViT with the rest. This module holds what the
families share: :class:`Backbone` (``forward_intermediates``, once), :class:`Classifier`
(``reset_classifier``), which layers ``indices`` selects, the formats, and a fresh head. Shapes:
B batch, Gh×Gw a grid, N = Gh·Gw its tokens, C width.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Sequence

from torch import Tensor, nn

from vit_tutorial.encoder import init_weights

__all__ = ["Backbone", "Classifier", "take_indices", "run_layers", "to_format", "new_head"]

Indices = int | Sequence[int] | None


def take_indices(num_layers: int, indices: Indices) -> tuple[list[int], int]:
    """The layers ``indices`` selects, as timm's ``feature_take_indices``
    (``timm/models/_features.py``): ``None`` all ``L``, an int ``n`` the last ``n``, a sequence
    those layers (negative ones count from the end). Returns them and the largest.

    Example:
        >>> take_indices(12, 3), take_indices(12, [0, -1])
        (([9, 10, 11], 11), ([0, 11], 11))
    """
    if indices is None:
        indices = num_layers
    if isinstance(indices, bool) or not isinstance(indices, (numbers.Integral, Sequence)):
        raise TypeError(
            f"indices must be None, an int (the last n layers) or a sequence of ints, "
            f"got {type(indices).__name__}"
        )
    if isinstance(indices, numbers.Integral):  # NumPy's too
        indices = int(indices)
        if not 0 < indices <= num_layers:
            raise ValueError(f"last-n indices={indices} is out of range (1 to {num_layers})")
        taken = list(range(num_layers - indices, num_layers))
    else:
        taken = []
        for i in indices:
            if isinstance(i, bool) or not isinstance(i, numbers.Integral):
                raise TypeError(f"indices must hold ints, got {i!r} in {indices!r}")
            if not -num_layers <= i < num_layers:
                raise ValueError(
                    f"index {i} of indices={list(indices)} is out of range for {num_layers} "
                    f"layers (-{num_layers} to {num_layers - 1})"
                )
            taken.append(int(i) % num_layers)
        if not taken:
            raise ValueError("indices is an empty sequence; pass None for every layer")
    return taken, max(taken)


def run_layers(
    layers: Sequence[Callable[[Tensor], Tensor]],
    x: Tensor,
    indices: Indices,
    stop_early: bool,
    keep: Callable[[int, Tensor], Tensor],
) -> tuple[Tensor, list[Tensor], int]:
    """Run ``x`` through ``layers``, keeping ``keep(i, x)`` after each layer ``i`` that
    ``indices`` selects; with ``stop_early``, stop after the last of them. Returns the output,
    the kept features and the index of the last layer run."""
    taken, last = take_indices(len(layers), indices)
    kept, i = [], -1
    for i, layer in enumerate(layers[: last + 1] if stop_early else layers):
        x = layer(x)
        if i in taken:
            kept.append(keep(i, x))
    return x, kept, i


def to_format(x: Tensor, output_fmt: str, grid: tuple[int, int] | None = None) -> Tensor:
    """Features as ``'NCHW'`` ``(B, C, Gh, Gw)`` or ``'NLC'`` ``(B, N, C)``, from tokens
    ``(B, N, C)`` on a grid ``(Gh, Gw)`` or a grid of tokens ``(B, Gh, Gw, C)`` (``grid=None``)."""
    if output_fmt not in ("NCHW", "NLC"):
        raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}")
    if grid is None:  # (B, h, w, C)
        return x.permute(0, 3, 1, 2).contiguous() if output_fmt == "NCHW" else x.flatten(1, 2)
    if output_fmt == "NLC":
        return x
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], *grid).contiguous()


def new_head(width: int, num_classes: int, like: nn.Module, zero: bool) -> nn.Module:
    """A classifier ``width -> num_classes`` on ``like``'s device and dtype: an ``nn.Identity``
    for 0 classes (timm's feature extractor), else a Linear, zero when ``zero`` (the ViT paper's
    fine-tuning head, Section 3.2) or drawn as :func:`~vit_tutorial.encoder.init_weights` draws."""
    if num_classes == 0:
        return nn.Identity()
    p = next(like.parameters())
    head = nn.Linear(width, num_classes, device=p.device, dtype=p.dtype)
    if zero:
        nn.init.zeros_(head.weight), nn.init.zeros_(head.bias)
    else:
        init_weights(head)
    return head


class Backbone:
    """The mixin that gives a family timm's ``forward_intermediates``. The family says

    - ``_start(images) -> (x, layers)``: what enters the first block or stage, and the blocks
      or stages as callables;
    - ``_normed(i, x)``: layer ``i``'s output ``x`` under ``norm=True``; ``_end(i, x)``: the
      features ``forward_features`` returns, from ``x``, the output of ``i``, the last layer
      that ran (in every family here, ``_end = _normed``);
    - ``_format(x, output_fmt, images)``: a layer's output in ``output_fmt``.
    """

    def forward_intermediates(
        self,
        images: Tensor,
        indices: Indices = None,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
    ) -> list[Tensor] | tuple[Tensor, list[Tensor]]:
        """The features after the blocks (or stages) ``indices`` selects, as timm's.

        Args:
            indices: ``None`` every layer, an int ``n`` the last ``n``, a list of layers
                (negative ones from the end): :func:`take_indices`.
            norm: apply the final LayerNorm where timm does (every intermediate of a ViT with a
                class token or of the MAE's encoder; Swin's last stage alone; nothing where the
                norm follows the pooling: a mean-pooled ViT, the axial ViT).
            stop_early: run no layer after the last one selected (the features are then that
                layer's, normalised as they would be, except Swin's when its last stage did not
                run: its norm is sized for the last stage).
            output_fmt: ``'NCHW'``, a grid ``(B, C, Gh, Gw)``, or ``'NLC'``, tokens ``(B, N, C)``;
                a ViT's prefix tokens are split off either way.
            intermediates_only: return the list alone, else ``(forward_features, list)``.
        """
        final, kept = self._intermediates(images, indices, norm, stop_early)
        features = [self._format(y, output_fmt, images) for y in kept]
        return features if intermediates_only else (final, features)

    def _intermediates(
        self, images: Tensor, indices: Indices, norm: bool, stop_early: bool
    ) -> tuple[Tensor, list[Tensor]]:
        x, layers = self._start(images)
        keep = self._normed if norm else lambda i, y: y
        x, kept, ran = run_layers(layers, x, indices, stop_early, keep)
        return self._end(ran, x), kept


class Classifier(Backbone):
    """A :class:`Backbone` with a head: the ViT, the axial ViT and Swin. The family sets
    ``num_features``, ``global_pool`` (its pooling, named as timm names it: ``'token'``, the
    class token, or ``'avg'``, the mean; ``''`` none) and ``_POOL`` (its own), ``ZERO_HEAD``, and
    pools in ``forward_head`` unless ``global_pool`` is ``''``."""

    ZERO_HEAD = True

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """A new head for ``num_classes`` (0: none), as timm's; ``config.num_classes`` follows.

        ``global_pool``: ``None`` keeps the pooling, ``''`` stops it (``forward`` then returns
        every token, or the grid, as timm's), the model's own name restores it. The head starts at
        zero in the ViTs (the ViT paper's fine-tuning head, Section 3.2, where timm draws it) and
        is drawn as the model's other Linear layers in Swin.
        """
        if global_pool not in (None, "", self._POOL):
            raise ValueError(
                f"global_pool must be None (keep it), '' (no pooling) or this model's "
                f"{self._POOL!r}, got {global_pool!r}"
            )
        self.config = dataclasses.replace(self.config, num_classes=num_classes)  # checks it
        self.head = new_head(self.num_features, num_classes, self, zero=self.ZERO_HEAD)
        self.global_pool = self.global_pool if global_pool is None else global_pool
