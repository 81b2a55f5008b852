"""Fine-tuning a pre-trained ViT on your own images: load it, give it a new head, train it.

The steps, each a function:

1. :func:`load_pretrained` turns a torchvision model, a timm model or one of our checkpoints
   into a :class:`~vit_tutorial.vit.VisionTransformer`, with the normalisation its weights
   expect (ImageNet's mean and std, or timm's 0.5 for its augreg ViTs);
2. :func:`set_image_size` resamples the learned position table for another image size;
3. :func:`replace_head` puts a zero-initialised head for the new classes, as the ViT
   paper does when fine-tuning (Dosovitskiy et al. 2021, Section 3.2), and
   :func:`freeze_for_linear_probe` optionally leaves only that head to train;
4. :func:`image_folder_datasets` reads a folder with one sub-folder per class;
5. :func:`finetune` trains with :func:`~vit_tutorial.engine.fit` and the settings of
   :data:`FINETUNE_DEFAULTS`.

The command line ``python -m vit_tutorial.train --finetune SOURCE --image-folder DIR``
(:mod:`vit_tutorial.train`) runs these steps in this order.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset, Subset

from vit_tutorial.checkpoint import load_checkpoint, save_checkpoint
from vit_tutorial.checks import check_bool, check_int, check_real
from vit_tutorial.data import DataSplits, make_loader, stratified_indices
from vit_tutorial.engine import Device, evaluate, fit
from vit_tutorial.interop import from_timm, from_torchvision
from vit_tutorial.patches import pair
from vit_tutorial.positional import resize_pos_embed
from vit_tutorial.recipes import TrainResult
from vit_tutorial.vit import VisionTransformer, ViTConfig

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "FinetuneSettings",
    "FINETUNE_DEFAULTS",
    "load_pretrained",
    "set_image_size",
    "replace_head",
    "freeze_for_linear_probe",
    "image_folder_datasets",
    "finetune",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
"""ImageNet's per-channel pixel mean and standard deviation, on a 0-1 scale (torchvision's)."""

SOURCES = (
    "'torchvision:NAME' (e.g. 'torchvision:vit_b_16'), 'timm:NAME' (e.g. "
    "'timm:vit_small_patch16_224') or the path of a checkpoint written by "
    "vit_tutorial.checkpoint.save_checkpoint"
)
CROP_SCALE = (0.5, 1.0)
"""Area range of the random training crops, a fraction of the image.

The crops of ImageNet training from scratch reach down to 8 % (``(0.08, 1.0)``,
torchvision's and timm's default); a pre-trained model fine-tuned on a few images per class
is better served by crops that keep most of the object. This is a choice, not a measured
optimum.
"""
CROP_FRACTION = 0.875
"""Evaluation: resize the shorter side to ``image_size / 0.875``, then crop the centre."""


@dataclasses.dataclass(frozen=True)
class FinetuneSettings:
    """The hyperparameters of a fine-tuning run, in one place.

    Starting points for AdamW on a pre-trained ViT, not tuned on any dataset: a small peak
    learning rate, so that the pre-trained features move little, and a larger one for a
    linear probe, where only a zero-initialised head learns.

    Attributes:
        epochs: passes over the training images.
        lr: peak learning rate of full fine-tuning.
        linear_probe_lr: peak learning rate when only the head trains.
        batch_size: images per batch and per process.
        weight_decay: AdamW weight decay of the weight matrices.
        warmup_epochs: linear warm-up length.
        label_smoothing: label smoothing of the cross-entropy.
    """

    epochs: int = 10
    lr: float = 1e-4
    linear_probe_lr: float = 1e-3
    batch_size: int = 32
    weight_decay: float = 0.05
    warmup_epochs: float = 1
    label_smoothing: float = 0.1


#: The defaults of :func:`finetune` and of ``python -m vit_tutorial.train --finetune``.
FINETUNE_DEFAULTS = FinetuneSettings()


def load_pretrained(
    source: str | os.PathLike, *, pretrained: bool = True
) -> tuple[VisionTransformer, tuple[float, ...], tuple[float, ...]]:
    """Our model from ``source``, and the normalisation ``(mean, std)`` its weights expect.

    ``source`` is one of:

    * ``'torchvision:NAME'``, NAME a torchvision ViT (``vit_b_16``, ...), converted with
      :func:`~vit_tutorial.interop.from_torchvision`; mean and std from the weights'
      transforms (ImageNet's, :data:`IMAGENET_MEAN` and :data:`IMAGENET_STD`);
    * ``'timm:NAME'``, NAME a timm ViT (``vit_small_patch16_224``, ...), converted with
      :func:`~vit_tutorial.interop.from_timm`; mean and std from the model's
      ``pretrained_cfg`` (0.5 and 0.5 for timm's augreg ViTs, ImageNet's for others);
    * the path of a checkpoint of a :class:`~vit_tutorial.vit.VisionTransformer` written by
      :func:`~vit_tutorial.checkpoint.save_checkpoint`, read with
      :func:`~vit_tutorial.checkpoint.load_checkpoint` (``weights_only=True``, SHA-256
      checked); mean and std from its ``extra["mean"]`` and ``extra["std"]``, as
      :func:`finetune` saves them, else ImageNet's.

    ``pretrained=False`` builds the same architecture with random weights and takes the
    same path otherwise: the tests and offline runs use it, since the weights of torchvision
    and timm are downloaded. It changes nothing for a checkpoint.

    Raises:
        ValueError: ``source`` is none of the three forms, names an unknown or non-ViT
            model, or is a file that is not such a checkpoint.
        ImportError: a ``timm:`` source without timm installed.
        TypeError: ``source`` is not a string or a path, or ``pretrained`` not a bool.
    """
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be a string or a path, got {type(source).__name__}")
    check_bool("pretrained", pretrained)
    text = os.fspath(source)
    kind, _, name = text.partition(":")
    if kind == "torchvision" and name:
        return _torchvision_model(name, pretrained)
    if kind == "timm" and name:
        return _timm_model(name, pretrained)
    if Path(text).is_file():
        return _checkpoint_model(Path(text))
    raise ValueError(f"unknown source {text!r}: expected {SOURCES}")


def _torchvision_model(name: str, pretrained: bool) -> tuple[VisionTransformer, Any, Any]:
    """``torchvision:NAME``: the ViT of ``torchvision.models``, converted."""
    from torchvision import models

    names = models.list_models(module=models, include="vit_*")
    if name not in names:
        raise ValueError(f"unknown torchvision ViT {name!r}; expected one of {names}")
    weights = models.get_model_weights(name).DEFAULT if pretrained else None
    reference = models.get_model(name, weights=weights)
    if weights is None:
        return from_torchvision(reference), IMAGENET_MEAN, IMAGENET_STD
    transform = weights.transforms()
    return from_torchvision(reference), tuple(transform.mean), tuple(transform.std)


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
    if not isinstance(reference, timm.models.vision_transformer.VisionTransformer):
        raise ValueError(
            f"timm model {name!r} is a {type(reference).__name__}, not a timm VisionTransformer"
        )
    cfg = reference.pretrained_cfg
    return from_timm(reference), tuple(cfg["mean"]), tuple(cfg["std"])


def _checkpoint_model(path: Path) -> tuple[VisionTransformer, Any, Any]:
    """The model of a checkpoint: its config read first (memory-mapped), then its weights."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # garbage fails in many ways
        raise ValueError(
            f"{path} is not a checkpoint written by vit_tutorial.checkpoint.save_checkpoint: "
            f"torch.load(weights_only=True) fails ({type(error).__name__}: {error})"
        ) from error
    config = state.get("config") if isinstance(state, dict) else None
    try:
        config = ViTConfig(**config) if isinstance(config, dict) else None
    except TypeError:  # another model's config (AxialViT's, say)
        config = None
    if config is None:
        raise ValueError(
            f"{path} holds no VisionTransformer config: expected a checkpoint of a "
            "VisionTransformer written by vit_tutorial.checkpoint.save_checkpoint"
        )
    model = VisionTransformer(config)
    extra = load_checkpoint(path, model, restore_rng=False)["extra"]
    mean, std = extra.get("mean", IMAGENET_MEAN), extra.get("std", IMAGENET_STD)
    return model, tuple(mean), tuple(std)


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
    """``model`` for images of ``image_size``: a copy with its position table resampled.

    The learned table is resampled bicubically to the new patch grid with
    :func:`~vit_tutorial.positional.resize_pos_embed` (a sinusoidal table is recomputed),
    and ``config.image_size`` is updated, so that the model accepts the new size and a
    checkpoint of it rebuilds. Every other weight is copied. At the model's own size,
    ``model`` itself is returned.

    Raises:
        TypeError: ``model`` is not a :class:`~vit_tutorial.vit.VisionTransformer`, or
            ``image_size`` not an int or a pair of ints.
        ValueError: the patch size does not divide ``image_size``, or the model has
            relative position biases (their tables are sized for one grid).
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
    """Give ``model`` a new zero-initialised head of ``num_classes`` logits, in place.

    The head is ``nn.Linear(dim, num_classes)`` with zero weight and bias, as the ViT paper
    attaches for fine-tuning (Section 3.2) and torchvision initialises; ``model.config`` is
    updated, so that a checkpoint of the fine-tuned model rebuilds.

    Returns:
        ``model``.

    Raises:
        TypeError: ``model`` is not a :class:`~vit_tutorial.vit.VisionTransformer`, or
            ``num_classes`` is not an int.
        ValueError: ``num_classes < 1``, or the model is distilled (DeiT's distillation
            token and second head would need a teacher to fine-tune).
    """
    check_int("num_classes", num_classes)
    if _check_model(model).config.distilled:
        raise ValueError(
            "replace_head does not handle distilled models (config.distilled=True): their "
            "second head trains against a teacher; fine-tune a model without a distillation token"
        )
    old = model.head
    model.head = nn.Linear(model.config.dim, num_classes, device=old.weight.device)
    model.head.to(old.weight.dtype)
    nn.init.zeros_(model.head.weight)
    nn.init.zeros_(model.head.bias)
    model.config = dataclasses.replace(model.config, num_classes=num_classes)
    return model


def freeze_for_linear_probe(model: VisionTransformer) -> list[str]:
    """Freeze every parameter but the head's; return the names left trainable.

    A linear probe trains a linear classifier on frozen features, so only ``head`` trains:
    with ``pool='mean'`` the LayerNorm after pooling (``fc_norm``) stays frozen too, as part
    of the features. :func:`~vit_tutorial.engine.fit` gives the optimiser only the
    parameters that require gradients, so the frozen ones do not change, not even by weight
    decay. Dropout and stochastic depth of the frozen blocks still act in training.

    Example:
        >>> model = VisionTransformer(image_size=8, patch_size=4, dim=16, depth=1, num_heads=2)
        >>> freeze_for_linear_probe(model)
        ['head.weight', 'head.bias']
    """
    for name, parameter in _check_model(model).named_parameters():
        parameter.requires_grad_(name.startswith("head."))
    return [name for name, parameter in model.named_parameters() if parameter.requires_grad]


def _image_transforms(
    image_size: int, mean: tuple[float, ...], std: tuple[float, ...], augment: bool
) -> tuple[Any, Any]:
    """``(train, eval)`` ``transforms.v2`` pipelines from a PIL image to a normalised tensor."""
    if len(mean) != 3 or len(std) != 3:
        raise ValueError(f"mean and std need 3 values (R, G, B), got mean={mean} and std={std}")
    from torchvision.transforms import v2

    resize = int(image_size / CROP_FRACTION)  # 224 -> 256
    centre = [v2.Resize(resize, antialias=True), v2.CenterCrop(image_size)]
    crop = v2.RandomResizedCrop(image_size, scale=CROP_SCALE, antialias=True)
    augmented = [crop, v2.RandomHorizontalFlip()]
    to_tensor = [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std)]
    train = v2.Compose([*(augmented if augment else centre), *to_tensor])
    return train, v2.Compose([*centre, *to_tensor])


def _image_folder(path: str | os.PathLike, what: str, transform: Any) -> Any:
    """``torchvision.datasets.ImageFolder`` of ``path``, with ValueError for what cannot train."""
    from torchvision.datasets import ImageFolder

    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{what} {path} is not a folder; expected one sub-folder per class")
    classes = sorted(entry.name for entry in os.scandir(path) if entry.is_dir())
    if len(classes) < 2:
        raise ValueError(
            f"{what} {path} holds the class folders {classes}: a classifier needs at least "
            "2 (one sub-folder of images per class)"
        )
    try:
        return ImageFolder(path, transform=transform)  # its loader converts images to RGB
    except FileNotFoundError as error:  # a class folder without images
        raise ValueError(f"{what} {path}: {error}") from error


def _train_and_held_out(
    train_dir: str | os.PathLike,
    val_dir: str | os.PathLike | None,
    transforms: tuple[Any, Any],
    val_fraction: float,
    seed: int,
) -> tuple[Dataset, Dataset, list[str]]:
    """The training and held-out datasets (``val_dir``'s, or split off), and the classes."""
    train_tf, eval_tf = transforms
    train = _image_folder(train_dir, "train_dir", train_tf)
    if val_dir is None:
        train_idx, held_out_idx = _split(train, val_fraction, seed)
        held_out = _image_folder(train_dir, "train_dir", eval_tf)  # the same files, in order
        return Subset(train, train_idx), Subset(held_out, held_out_idx), list(train.classes)
    held_out = _image_folder(val_dir, "val_dir", eval_tf)
    if held_out.classes != train.classes:
        raise ValueError(
            f"val_dir {val_dir} has classes {held_out.classes}, train_dir {train_dir} has "
            f"{train.classes}: the class folders must be the same"
        )
    return train, held_out, list(train.classes)


def _split(folder: Any, val_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """``(train, held-out)`` indices: a seeded split with each class in proportion."""
    labels = torch.tensor(folder.targets)
    size = round(val_fraction * len(labels))
    if not 0 < size < len(labels):
        raise ValueError(
            f"val_fraction={val_fraction} of {len(labels)} images holds out {size}: "
            "need at least one image on each side"
        )
    held_out = stratified_indices(labels, size, seed=seed)
    keep = torch.ones(len(labels), dtype=torch.bool)
    keep[held_out] = False
    return keep.nonzero().squeeze(1).tolist(), held_out.tolist()


def image_folder_datasets(
    train_dir: str | os.PathLike,
    *,
    val_dir: str | os.PathLike | None = None,
    image_size: int,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    batch_size: int = 32,
    val_fraction: float = 0.2,
    seed: int = 0,
    num_workers: int = 0,
    augment: bool = True,
) -> DataSplits:
    """Your own images, one sub-folder per class, as :class:`~vit_tutorial.data.DataSplits`.

    Read by ``torchvision.datasets.ImageFolder`` (as RGB). Training images: a random crop
    (:data:`CROP_SCALE` of the area) resized to ``image_size``, a random flip; held-out
    ones (and all with ``augment=False``): resized to ``image_size / 0.875``, centre-cropped;
    then scaled to 0-1 and normalised. The held-out images (``val_dir``'s, or
    ``val_fraction`` of each class) are the ``test`` split, on which :func:`finetune` validates.

    Args:
        train_dir: the training images, ``train_dir/<class>/<image>``.
        val_dir: held-out images with the same class folders, or ``None``.
        image_size: side of the square images the model sees.
        mean: per-channel mean of the normalisation the model's weights expect.
        std: per-channel standard deviation of that normalisation.
        batch_size: training batch size per process (held-out batches too).
        val_fraction: share of each class held out when there is no ``val_dir``.
        seed: seed of the held-out split and of the training loader's shuffling.
        num_workers: loader worker processes.
        augment: random crops and flips of the training images.

    Raises:
        ValueError: a folder is missing, has fewer than 2 class folders or an empty one,
            or other classes than the other; ``val_fraction`` is not in (0, 1) or leaves a
            side empty; ``mean`` or ``std`` has not 3 values.
        TypeError: ``image_size``, ``batch_size`` or ``num_workers`` is not an int.
    """
    check_int("image_size", image_size), check_int("batch_size", batch_size)
    check_int("num_workers", num_workers, minimum=0), check_bool("augment", augment)
    check_real("val_fraction", val_fraction, 0.0, 1.0, low_open=True, high_open=True)
    pipelines = _image_transforms(image_size, tuple(mean), tuple(std), augment)
    train, held_out, classes = _train_and_held_out(
        train_dir, val_dir, pipelines, val_fraction, seed
    )
    return DataSplits(
        train=train,
        test=held_out,
        train_loader=make_loader(
            train, batch_size, shuffle=True, seed=seed, num_workers=num_workers
        ),
        test_loader=make_loader(held_out, batch_size, shuffle=False, num_workers=num_workers),
        image_size=image_size,
        in_channels=3,
        num_classes=len(classes),
        classes=classes,
        mean=tuple(mean),
        std=tuple(std),
    )


def finetune(
    model: VisionTransformer,
    data: DataSplits,
    *,
    linear_probe: bool = False,
    epochs: int | None = None,
    lr: float | None = None,
    checkpoint_path: str | Path | None = None,
    device: Device = "auto",
    amp: str | None = "auto",
    progress: bool = True,
) -> TrainResult:
    """Fine-tune ``model`` on ``data`` with :func:`~vit_tutorial.engine.fit`, then score it.

    The head is replaced (:func:`replace_head`) for ``data.num_classes``; with
    ``linear_probe`` only the head trains (:func:`freeze_for_linear_probe`). The
    hyperparameters are :data:`FINETUNE_DEFAULTS`'s, ``epochs`` and ``lr`` overriding them
    when not ``None`` (the default ``lr`` of a linear probe is ``linear_probe_lr``).
    ``data.test_loader`` (the held-out images of :func:`image_folder_datasets`) is evaluated
    after every epoch and at the end. The checkpoint, as :func:`~vit_tutorial.engine.fit`
    writes it every epoch and resumes it, is rewritten at the end with ``data.mean``,
    ``data.std`` and ``data.classes`` in its ``extra``, so that :func:`load_pretrained`
    reads it back with its normalisation; that last copy keeps no optimiser state, which a
    finished run does not need.

    Raises:
        TypeError: ``model`` is not a :class:`~vit_tutorial.vit.VisionTransformer`.
        ValueError: ``data``'s images have another number of channels than the model takes,
            or a hyperparameter is out of range (named).
    """
    channels = _check_model(model).config.in_channels
    if data.in_channels != channels:
        raise ValueError(f"the model takes {channels} channels, the data has {data.in_channels}")
    replace_head(model, data.num_classes)
    if check_bool("linear_probe", linear_probe):
        freeze_for_linear_probe(model)
    s = FINETUNE_DEFAULTS
    history = fit(
        model,
        data.train_loader,
        data.val_loader or data.test_loader,
        epochs=epochs if epochs is not None else s.epochs,
        lr=lr if lr is not None else (s.linear_probe_lr if linear_probe else s.lr),
        weight_decay=s.weight_decay,
        warmup_epochs=s.warmup_epochs,
        label_smoothing=s.label_smoothing,
        device=device,
        amp=amp,
        progress=progress,
        checkpoint_path=checkpoint_path,
    )
    accuracy = evaluate(model, data.test_loader, device, amp)["accuracy"]
    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    if checkpoint_path is not None and rank == 0:
        _add_normalisation(Path(checkpoint_path), model, data)
    return TrainResult(model, history, accuracy, sum(history["time"]))


def _add_normalisation(path: Path, model: VisionTransformer, data: DataSplits) -> None:
    """Rewrite the checkpoint at ``path`` with the data's mean, std and classes in ``extra``."""
    state = load_checkpoint(path, model, restore_rng=False)
    extra = {**state["extra"], "mean": data.mean, "std": data.std, "classes": data.classes}
    save_checkpoint(path, model, epoch=state["epoch"], history=state["history"], extra=extra)
