"""Fine-tuning a pre-trained ViT on your own images: load it, give it a new head, train it.

The steps, each a function, run in this order by ``python -m vit_tutorial.cli finetune SOURCE
--image-folder DIR`` (:mod:`vit_tutorial.cli`):

1. :func:`load_pretrained` turns a torchvision model, a timm model or one of our checkpoints
   into a :class:`~vit_tutorial.vit.VisionTransformer`, with the normalisation its weights
   expect (ImageNet's mean and std, or timm's 0.5 for its augreg ViTs);
2. :func:`set_image_size` resamples the learned position table for another image size;
3. :func:`replace_head` puts a zero-initialised head for the new classes, as the ViT paper
   does when fine-tuning (Dosovitskiy et al. 2021, Section 3.2), and
   :func:`freeze_for_linear_probe` optionally leaves only that head to train;
4. :func:`finetune` trains with :func:`~vit_tutorial.engine.fit` and :data:`FINETUNE`, on the
   images of :func:`~vit_tutorial.data.image_folder_datasets` (one sub-folder per class).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vit_tutorial.checkpoint import read_checkpoint
from vit_tutorial.data import DataSplits
from vit_tutorial.engine import Device, FitSettings, TrainResult, evaluate, fit
from vit_tutorial.interop import from_timm, from_timm_eva, from_torchvision, load_converted
from vit_tutorial.mae import MaskedAutoencoder
from vit_tutorial.patches import pair
from vit_tutorial.positional import resize_pos_embed
from vit_tutorial.validate import check_bool, check_int
from vit_tutorial.vit import VisionTransformer, ViTConfig

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "FINETUNE",
    "LINEAR_PROBE",
    "FINETUNE_BATCH_SIZE",
    "load_pretrained",
    "set_image_size",
    "replace_head",
    "freeze_for_linear_probe",
    "finetune",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
"""ImageNet's per-channel pixel mean and standard deviation, on a 0-1 scale (torchvision's)."""

#: The defaults of :func:`finetune` and of ``python -m vit_tutorial.cli finetune``: starting
#: points for AdamW on a pre-trained ViT, not tuned on any dataset. A small peak learning
#: rate, so that the pre-trained features move little.
FINETUNE = FitSettings(epochs=10, lr=1e-4, weight_decay=0.05, warmup_epochs=1, label_smoothing=0.1)
#: A linear probe's: a larger rate, since only a zero-initialised head learns.
LINEAR_PROBE = dataclasses.replace(FINETUNE, lr=1e-3)
#: Images per batch and per process of the command line's fine-tuning.
FINETUNE_BATCH_SIZE = 32


def load_pretrained(
    source: str | os.PathLike, *, pretrained: bool = True
) -> tuple[VisionTransformer, tuple[float, ...], tuple[float, ...]]:
    """Our model from ``source``, and the normalisation ``(mean, std)`` its weights expect.
    ``source`` is one of:

    * ``'torchvision:NAME'``, NAME a torchvision ViT (``vit_b_16``, ...), converted with
      :func:`~vit_tutorial.interop.from_torchvision`; mean and std from the weights' transforms
      (ImageNet's, :data:`IMAGENET_MEAN` and :data:`IMAGENET_STD`);
    * ``'timm:NAME'``, NAME a timm ViT (``vit_small_patch16_224``, ...), converted with
      :func:`~vit_tutorial.interop.from_timm`; mean and std from the model's ``pretrained_cfg``
      (0.5 and 0.5 for timm's augreg ViTs, ImageNet's for others);
    * the path of a :class:`~vit_tutorial.vit.VisionTransformer`'s checkpoint (or of a
      :class:`~vit_tutorial.mae.MaskedAutoencoder`'s: its encoder, as ``to_vit`` gives it), read
      with :func:`~vit_tutorial.checkpoint.read_checkpoint` (``weights_only=True``, SHA-256
      checked before the model is built);
      mean and std from the ``extra["mean"]`` and ``extra["std"]`` that :func:`finetune` saves,
      else ImageNet's.

    ``pretrained=False`` builds the same architecture with random weights (offline runs and the
    tests use it); it changes nothing for a checkpoint. ``ValueError`` for a ``source`` of none
    of the three forms, naming an unknown or non-ViT model, or a file that is no such checkpoint;
    ``ImportError`` for ``timm:`` without timm installed; ``TypeError`` for a ``source`` that is
    no string or path, or a non-bool ``pretrained``.
    """
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be a string or a path, got {type(source).__name__}")
    check_bool("pretrained", pretrained)
    text = os.fspath(source)
    kind, _, name = text.partition(":")
    converters = {"torchvision": _torchvision_model, "timm": _timm_model}
    if kind in converters and name:
        return converters[kind](name, pretrained)
    if Path(text).is_file():
        return _checkpoint_model(Path(text))
    found = "is a folder" if Path(text).is_dir() else "does not exist"
    raise ValueError(
        (f"unknown source {text!r}" if kind in converters else f"{text} {found}")
        + ": expected 'torchvision:NAME' (e.g. 'torchvision:vit_b_16'), "
        "'timm:NAME' (e.g. 'timm:vit_small_patch16_224') or the path of a checkpoint written by "
        "vit_tutorial.checkpoint.save_checkpoint"
    )


def _torchvision_model(name: str, pretrained: bool) -> tuple[VisionTransformer, Any, Any]:
    """``torchvision:NAME``: the ViT of ``torchvision.models``, converted."""
    from torchvision import models

    names = models.list_models(module=models, include="vit_*")
    if name not in names:
        raise ValueError(f"unknown torchvision ViT {name!r}; expected one of {names}")
    weights = models.get_model_weights(name).DEFAULT if pretrained else None
    model = from_torchvision(models.get_model(name, weights=weights))
    if weights is None:
        return model, IMAGENET_MEAN, IMAGENET_STD
    transform = weights.transforms()
    return model, tuple(transform.mean), tuple(transform.std)


def _timm_model(name: str, pretrained: bool) -> tuple[VisionTransformer, Any, Any]:
    """``timm:NAME``: the ViT of ``timm.create_model``, converted."""
    try:
        import timm
    except ImportError as error:
        raise ImportError(
            f"'timm:{name}' needs timm: pip install timm (or vit_tutorial[dev])"
        ) from error
    if not timm.is_model(name):
        raise ValueError(
            f"unknown timm model {name!r}; list the ViTs with timm.list_models('vit_*')"
        )
    reference = timm.create_model(name, pretrained=pretrained)
    kind = type(reference).__name__  # timm's RoPE ViTs are Eva models
    if kind != "Eva" and not isinstance(
        reference, timm.models.vision_transformer.VisionTransformer
    ):
        raise ValueError(f"timm model {name!r} is a {kind}, not a timm VisionTransformer or Eva")
    cfg, convert = reference.pretrained_cfg, from_timm_eva if kind == "Eva" else from_timm
    return convert(reference), tuple(cfg["mean"]), tuple(cfg["std"])


def _checkpoint_model(path: Path) -> tuple[VisionTransformer, Any, Any]:
    """The model of a checkpoint, built from its config, then given its weights."""
    state = read_checkpoint(path)  # read once: weights_only, layout and SHA-256 checked
    try:
        config = ViTConfig(**state["config"])
    except TypeError:  # no config (None), or another model's (AxialViT's, say)
        raise ValueError(
            f"{path} holds no VisionTransformer config: expected a checkpoint of a "
            "VisionTransformer written by vit_tutorial.checkpoint.save_checkpoint"
        ) from None
    if "mask_token" in (weights := state["model"]):  # a MaskedAutoencoder's: to_vit's encoder
        depth = len({key.split(".")[2] for key in weights if key.startswith("decoder.blocks.")})
        decoder = dict(decoder_dim=len(weights["mask_token"][0, 0]), decoder_depth=depth)
        mae = MaskedAutoencoder(config, **decoder, decoder_heads=1)  # heads shape no weight
        model = _fill(mae, weights, path).to_vit(config.num_classes)
    else:
        model = _fill(VisionTransformer(config), weights, path)
    extra = state["extra"]
    return model, tuple(extra.get("mean", IMAGENET_MEAN)), tuple(extra.get("std", IMAGENET_STD))


def _fill(model: nn.Module, weights: dict, path: Path) -> Any:
    """``model`` with ``weights``; ValueError naming the keys when they are another model's
    (an ``AxialViT``'s config has only fields a ``ViTConfig`` has: its weights tell them apart)."""
    try:
        return load_converted(model, weights)
    except ValueError as error:
        kind = type(model).__name__
        raise ValueError(
            f"{path} holds the weights of another model than a {kind}: {error}"
        ) from None


def _check_model(model: object) -> VisionTransformer:
    """``model``, or TypeError unless it is our VisionTransformer."""
    if not isinstance(model, VisionTransformer):
        raise TypeError(
            f"model must be a vit_tutorial VisionTransformer, got {type(model).__name__}"
        )
    return model


def set_image_size(
    model: VisionTransformer, image_size: int | tuple[int, int]
) -> VisionTransformer:
    """``model`` for images of ``image_size``: a copy with its position table resampled bicubically
    to the new patch grid (:func:`~vit_tutorial.positional.resize_pos_embed`; a sinusoidal one is
    recomputed), every other weight copied, and ``config.image_size`` updated, so that a checkpoint
    rebuilds. At the model's own size, ``model`` itself is returned. ``TypeError`` for a model not
    ours or an ``image_size`` not an int or a pair of ints; ``ValueError`` when the patch size does
    not divide it, or for relative position biases (their tables are sized for one grid).
    """
    config = _check_model(model).config
    if pair(image_size, "image_size") == pair(config.image_size):
        return model
    if config.pos_embed == "relative":
        raise ValueError(
            f"cannot change the image size of a model with pos_embed='relative' (its tables are "
            f"sized for the grid {model.grid_size}); got image_size={image_size!r}"
        )
    weight = next(model.parameters())
    with torch.device(weight.device):
        resized = VisionTransformer(dataclasses.replace(config, image_size=image_size))
    state = model.state_dict()
    if config.pos_embed == "learned":
        state["pos_embed.weight"] = resize_pos_embed(
            state["pos_embed.weight"], model.grid_size, resized.grid_size, model.num_prefix_tokens
        )
    resized.load_state_dict(state)
    return resized.to(weight.dtype).train(model.training)


def replace_head(model: VisionTransformer, num_classes: int) -> VisionTransformer:
    """Give ``model`` a new zero-initialised head of ``num_classes`` logits, in place; return it:
    ``nn.Linear(dim, num_classes)`` with zero weight and bias, as the ViT paper attaches for
    fine-tuning (Section 3.2) and torchvision initialises; ``model.config`` is updated, so that a
    checkpoint of the fine-tuned model rebuilds. ``TypeError`` for a model not ours or a
    ``num_classes`` not an int; ``ValueError`` for ``num_classes < 1`` or a distilled model (DeiT's
    distillation token and second head would need a teacher).
    """
    num_classes = check_int("num_classes", num_classes)
    if _check_model(model).config.distilled:
        raise ValueError(
            "replace_head does not handle distilled models (config.distilled=True): their "
            "second head trains against a teacher; fine-tune a model without a distillation token"
        )
    model.reset_classifier(num_classes)
    return model


def freeze_for_linear_probe(model: VisionTransformer) -> list[str]:
    """Freeze every parameter but the head's; return the names left trainable.

    A linear probe trains a linear classifier on frozen features, so only ``head`` trains: with
    ``pool='mean'`` the LayerNorm after pooling (``fc_norm``) stays frozen too, as part of the
    features. :func:`~vit_tutorial.engine.fit` optimises only parameters that require gradients,
    so the frozen ones do not change, not even by weight decay. Dropout and stochastic depth of
    the frozen blocks still act in training.

    Example:
        >>> model = VisionTransformer(image_size=8, patch_size=4, dim=16, depth=1, num_heads=2)
        >>> freeze_for_linear_probe(model)
        ['head.weight', 'head.bias']
    """
    for name, parameter in _check_model(model).named_parameters():
        parameter.requires_grad_(name.startswith("head."))
    return [name for name, parameter in model.named_parameters() if parameter.requires_grad]


def finetune(
    model: VisionTransformer,
    data: DataSplits,
    settings: FitSettings | None = None,
    *,
    new_head: bool = True,
    linear_probe: bool = False,
    validate: bool = True,
    checkpoint_path: str | Path | None = None,
    extra: dict[str, Any] | None = None,
    device: Device = "auto",
    amp: str | None = "auto",
    progress: bool = True,
) -> TrainResult:
    """Fine-tune ``model`` on ``data`` with :func:`~vit_tutorial.engine.fit`, then score it;
    ``TypeError`` for a model not ours, ``ValueError`` when the data's channels are not the model's.

    Args:
        model: our ViT, trained in place.
        data: its training images and the held-out ones (``data.test_loader``, scored at the
            end; :func:`~vit_tutorial.data.image_folder_datasets` gives them).
        settings: by default :data:`FINETUNE`, or :data:`LINEAR_PROBE` with ``linear_probe``.
        new_head: first give the model a zero-initialised head for ``data.num_classes``
            (:func:`replace_head`); ``False`` keeps the head it has.
        linear_probe: train only the head (:func:`freeze_for_linear_probe`).
        validate: score ``data.val_loader`` (or ``data.test_loader``) after every epoch.
        checkpoint_path, device, amp, progress: :func:`~vit_tutorial.engine.fit`'s; the
            checkpoint also carries ``data.mean``, ``data.std`` and ``data.classes``, which
            :func:`load_pretrained` reads back, and ``extra`` (the command line's seed).
    """
    channels = _check_model(model).config.in_channels
    if data.in_channels != channels:
        raise ValueError(f"the model takes {channels} channels, the data has {data.in_channels}")
    if check_bool("new_head", new_head):
        replace_head(model, data.num_classes)
    if check_bool("linear_probe", linear_probe):
        freeze_for_linear_probe(model)
    settings = settings or (LINEAR_PROBE if linear_probe else FINETUNE)
    held_out = (data.val_loader or data.test_loader) if check_bool("validate", validate) else None
    extra = {"mean": data.mean, "std": data.std, "classes": data.classes, **(extra or {})}
    options = dict(device=device, amp=amp, progress=progress, checkpoint_path=checkpoint_path)
    history = fit(model, data.train_loader, held_out, settings, extra=extra, **options)
    accuracy = evaluate(model, data.test_loader, device, amp)["accuracy"]
    return TrainResult(model, history, accuracy, sum(history["time"]))
