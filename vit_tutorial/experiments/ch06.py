"""Chapter 6's ablation: which design choices matter for a ViT on the digits.

One plain ViT (:data:`BASE`: 16 tokens of 2×2 pixels) and variants (:data:`VARIANTS`) that each
change one thing: the position encoding, the patch size, the pooling, the stem. Every run uses
the chapter's shortened schedule (:data:`SCHEDULE`, batches of 64) and is tested on the same 360
test images; the seed changes the initial weights and the order of the batches.
``benchmarks/digits_ablation.py`` runs it and writes the result file the chapter loads.

Example:
    >>> settings(5).warmup_epochs  # the warm-up stays the first fifth
    1.0
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import torch

from vit_tutorial.data import digits_datasets
from vit_tutorial.engine import FitSettings, fit, predict
from vit_tutorial.validate import check_int
from vit_tutorial.vit import VisionTransformer

__all__ = ["BASE", "BATCH_SIZE", "SCHEDULE", "VARIANTS", "ablation", "settings", "train_once"]

#: The ViT every variant changes one field of.
BASE = dict(patch_size=2, dim=64, depth=4, num_heads=4, mlp_ratio=2.0, pool="mean")
BASE.update(pos_embed="learned", stem="patch")
SCHEDULE = FitSettings(epochs=15, lr=2e-3, weight_decay=0.05, warmup_epochs=3, label_smoothing=0.1)
BATCH_SIZE = 64
#: id: (what is varied, the variant's name, its change to :data:`BASE`)
VARIANTS = {
    "pos-none": ("position", "none", {"pos_embed": "none"}),
    "pos-learned": ("position", "learned", {}),
    "pos-sincos2d": ("position", "sincos2d", {"pos_embed": "sincos2d"}),
    "pos-relative": ("position", "relative", {"pos_embed": "relative"}),
    "patch-1": ("patch size", "P = 1", {"patch_size": 1}),
    "patch-2": ("patch size", "P = 2", {}),
    "patch-4": ("patch size", "P = 4", {"patch_size": 4}),
    "pool-cls": ("pooling", "class token", {"pool": "cls"}),
    "pool-mean": ("pooling", "mean", {}),
    "stem-patch-2": ("stem", "patch, P = 2", {}),
    "stem-conv-2": ("stem", "conv, P = 2", {"stem": "conv"}),
    "stem-conv-1": ("stem", "conv, P = 1", {"stem": "conv", "patch_size": 1}),
}


def settings(epochs: int) -> FitSettings:
    """:data:`SCHEDULE` shortened or stretched to ``epochs``: the warm-up stays its first fifth."""
    warmup = SCHEDULE.warmup_epochs * check_int("epochs", epochs) / SCHEDULE.epochs
    return dataclasses.replace(SCHEDULE, epochs=epochs, warmup_epochs=warmup)


def train_once(config: dict, seed: int, epochs: int) -> dict:
    """Train the ViT ``config`` describes with ``seed`` for ``epochs``; its test accuracy,
    its count of wrong test images and its training seconds."""
    split = digits_datasets(seed=check_int("seed", seed, 0), batch_size=BATCH_SIZE)
    torch.manual_seed(seed)
    model = VisionTransformer(image_size=8, in_channels=1, num_classes=10, **config)
    history = fit(model, split.train_loader, None, settings(epochs), progress=False)
    logits, labels = predict(model, split.test_loader)
    wrong = int((logits.argmax(-1) != labels).sum())
    seconds = round(sum(history["time"]), 2)
    return dict(seed=seed, accuracy=1 - wrong / len(labels), wrong=wrong, train_seconds=seconds)


def ablation(variants: list[str], seeds: list[int], epochs: int) -> Iterator[dict]:
    """Each of ``variants`` (ids of :data:`VARIANTS`) trained with every seed, one row at a time:
    ``id``, ``group``, ``name``, ``change``, ``config``, ``runs`` (:func:`train_once` per seed);
    a configuration in several groups (the base is in all four) is trained once per seed."""
    seeds, _ = [check_int("seed", seed, 0) for seed in seeds], settings(epochs)  # before training
    if unknown := sorted(set(variants) - set(VARIANTS)):
        raise ValueError(f"unknown variants {unknown}; expected ids of VARIANTS: {list(VARIANTS)}")
    done: dict[tuple, dict] = {}
    for key in variants:
        group, name, change = VARIANTS[key]
        config = {**BASE, **change}
        same = tuple(sorted(config.items()))
        for seed in seeds:
            if (same, seed) not in done:
                done[same, seed] = train_once(config, seed, epochs)
        runs = [done[same, seed] for seed in seeds]
        yield dict(id=key, group=group, name=name, change=change, config=config, runs=runs)
