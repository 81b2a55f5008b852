"""Chapter 6's ablation: which design choices matter for a ViT on the digits.

One plain ViT (:data:`BASE`: 16 tokens of 2×2 pixels) and variants (:data:`VARIANTS`) that each
change one thing: the position encoding, the patch size, the pooling, the stem. Every run uses
the chapter's shortened schedule (:data:`SCHEDULE`, batches of 64) and is tested on the same 360
test images; the seed changes the initial weights and the order of the batches.
``benchmarks/digits_ablation.py`` runs it and writes the result file the chapter loads.

Two probes of where a trained model keeps position: :func:`neighbour_contrast` reads a position
table (do neighbouring positions get similar vectors?), :func:`permuted_token_logits` shuffles
the tokens after the stem, before the position is added.

The models of the chapter's recipe (preset ``digits``) that the probes read, trained with seeds
0, 1 and 2, are kept: :func:`train_recipe_model` trains and saves one
(``benchmarks/digits_models.py`` writes :data:`RECIPE_MODELS`), :func:`load_recipe_model`
reads it back, checked, so that the chapter need not train them again.

Example:
    >>> settings(5).warmup_epochs  # the warm-up stays the first fifth
    1.0
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vit_tutorial.checkpoint import load_checkpoint, save_checkpoint
from vit_tutorial.data import digits_datasets
from vit_tutorial.engine import FitSettings, TrainResult, fit, predict
from vit_tutorial.patches import pair
from vit_tutorial.recipes import RECIPES, train_recipe
from vit_tutorial.validate import check_int, check_seed
from vit_tutorial.vit import VisionTransformer

__all__ = [
    "BASE",
    "AblationRun",
    "BATCH_SIZE",
    "RECIPE_MODELS",
    "SCHEDULE",
    "VARIANTS",
    "ablation",
    "ablation_runs",
    "ablation_work",
    "load_recipe_model",
    "neighbour_contrast",
    "permuted_token_logits",
    "position_similarity",
    "settings",
    "train_once",
    "train_recipe_model",
    "variant_row",
]

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

#: seed: the repository file of the recipe's model trained with it (benchmarks/digits_models.py)
RECIPE_MODELS = {seed: f"benchmarks/results/digits_recipe_seed{seed}.pt" for seed in (0, 1, 2)}


def settings(epochs: int) -> FitSettings:
    """:data:`SCHEDULE` shortened or stretched to ``epochs``: the warm-up stays its first fifth."""
    warmup = SCHEDULE.warmup_epochs * check_int("epochs", epochs) / SCHEDULE.epochs
    return dataclasses.replace(SCHEDULE, epochs=epochs, warmup_epochs=warmup)


def train_once(config: dict, seed: int, epochs: int) -> dict:
    """Train the ViT ``config`` describes with ``seed`` for ``epochs``; its test accuracy,
    its count of wrong test images and its training seconds."""
    split = digits_datasets(seed=check_seed(seed), batch_size=BATCH_SIZE)
    torch.manual_seed(seed)
    model = VisionTransformer(image_size=8, in_channels=1, num_classes=10, **config)
    history = fit(model, split.train_loader, None, settings(epochs), progress=False)
    logits, labels = predict(model, split.test_loader)
    wrong = int((logits.argmax(-1) != labels).sum())
    seconds = round(sum(history["time"]), 2)
    return dict(seed=seed, accuracy=1 - wrong / len(labels), wrong=wrong, train_seconds=seconds)


@dataclasses.dataclass(frozen=True)
class AblationRun:
    """One run of the ablation: the ViT of :data:`BASE` with the fields ``change`` (sorted
    ``(field, value)`` pairs), trained with ``seed`` for ``epochs``. Variants of the same ViT
    (the base is in all four groups) are one run.

    Example:
        >>> AblationRun.of("stem-conv-1", seed=0, epochs=15).key
        'patch_size=1,stem=conv-s0-e15'
    """

    change: tuple[tuple[str, Any], ...]
    seed: int
    epochs: int

    @classmethod
    def of(cls, variant: str, seed: int, epochs: int) -> AblationRun:
        """The run of ``variant`` (an id of :data:`VARIANTS`)."""
        config = {**BASE, **VARIANTS[variant][2]}
        return cls(tuple(sorted((k, v) for k, v in config.items() if BASE[k] != v)), seed, epochs)

    @property
    def key(self) -> str:
        """A name unique to the run, e.g. ``patch_size=4-s0-e15`` (``base-s0-e15``)."""
        change = ",".join(f"{k}={v}" for k, v in self.change) or "base"
        return f"{change}-s{self.seed}-e{self.epochs}"

    @property
    def config(self) -> dict:
        """The ViT's fields."""
        return {**BASE, **dict(self.change)}


def ablation_runs(variants: list[str], seeds: list[int], epochs: int) -> list[AblationRun]:
    """The runs of ``variants`` (ids of :data:`VARIANTS`) with every seed, each configuration
    once per seed; every variant, seed and the epochs checked before anything trains."""
    seeds = _checked(variants, seeds, epochs)
    runs = (AblationRun.of(v, seed, epochs) for v in variants for seed in seeds)
    return list({run.key: run for run in runs}.values())


def _checked(variants: list[str], seeds: Iterable[int], epochs: int) -> list[int]:
    """The seeds as ints, once every variant, seed and the epochs are checked."""
    if isinstance(variants, str) or not isinstance(seeds, Iterable):
        raise TypeError(f"variants and seeds must be lists, got {variants!r} and {seeds!r}")
    seeds, _ = [check_seed(seed) for seed in seeds], settings(epochs)
    if unknown := sorted(set(variants) - set(VARIANTS)):
        raise ValueError(f"unknown variants {unknown}; expected ids of VARIANTS: {list(VARIANTS)}")
    return seeds


def ablation_work(run: AblationRun) -> dict:
    """:func:`train_once` of ``run``: what :func:`~vit_tutorial.experiments.runner.run_study`
    calls in its worker processes (``benchmarks/digits_ablation.py``)."""
    return train_once(run.config, run.seed, run.epochs)


def variant_row(variant: str, runs: list[dict]) -> dict:
    """The result file's row of ``variant``: ``id``, ``group``, ``name``, ``change``, ``config``
    and its ``runs`` (one per seed)."""
    group, name, change = VARIANTS[variant]
    return dict(
        id=variant, group=group, name=name, change=change, config={**BASE, **change}, runs=runs
    )


def ablation(variants: list[str], seeds: list[int], epochs: int) -> Iterator[dict]:
    """Each of ``variants`` (ids of :data:`VARIANTS`) trained with every seed, here, one row at
    a time (:func:`variant_row`, :func:`train_once` per seed); a configuration in several groups
    (the base is in all four) is trained once per seed."""
    seeds, done = _checked(variants, seeds, epochs), {}  # everything checked before training
    for variant in variants:
        runs = [AblationRun.of(variant, seed, epochs) for seed in seeds]
        for run in runs:
            if run.key not in done:
                done[run.key] = train_once(run.config, run.seed, run.epochs)
        yield variant_row(variant, [done[run.key] for run in runs])


def position_similarity(table: Tensor, num_prefix_tokens: int = 0) -> Tensor:
    """Cosine similarity ``(N, N)``, in float64, of every grid position's vector with every
    other's, for a position table ``(T, D)`` or ``(1, T, D)`` whose first ``num_prefix_tokens``
    rows (the class token's) are left out, N = T - ``num_prefix_tokens``."""
    start = check_int("num_prefix_tokens", num_prefix_tokens, 0)
    if not isinstance(table, Tensor) or not table.is_floating_point():
        raise TypeError(f"table must be a floating-point tensor, got {type(table).__name__}")
    if table.dim() not in (2, 3) or table.dim() == 3 and len(table) != 1:
        raise ValueError(f"expected one table (T, D) or (1, T, D), got {tuple(table.shape)}")
    if table.shape[-2] <= start:
        raise ValueError(f"a table of {table.shape[-2]} rows has none after {start} prefix rows")
    unit = F.normalize(table.detach()[..., start:, :].reshape(-1, table.shape[-1]).double(), dim=-1)
    return unit @ unit.T  # (N, N)


def neighbour_contrast(
    table: Tensor, grid_size: int | tuple[int, int], num_prefix_tokens: int = 0
) -> float:
    """Does a position table know the grid? The mean cosine similarity of 4-neighbour pairs of
    positions minus that of the pairs at Chebyshev distance 3 or more.

    ``table`` is ``(T, D)`` or ``(1, T, D)`` with T = ``num_prefix_tokens`` + Gh·Gw, its grid rows
    in row-major order; the prefix rows (the class token's) are left out. About 0 when
    similarity ignores the grid (a random table), positive when neighbours are more alike than
    distant positions, at most 2.

    Example:
        >>> from vit_tutorial.positional import sinusoidal_2d
        >>> round(neighbour_contrast(sinusoidal_2d((8, 8), 64), (8, 8)), 2)
        0.17
    """
    gh, gw = pair(grid_size, "grid_size")
    similarity = position_similarity(table, num_prefix_tokens)  # (N, N)
    if similarity.shape[0] != gh * gw or min(gh, gw) < 2 or max(gh, gw) < 4:
        raise ValueError(
            f"expected a table of {num_prefix_tokens} + {gh}·{gw} rows on a grid with 4-neighbours"
            f" and pairs 3 apart, got {similarity.shape[0] + num_prefix_tokens} rows"
        )
    rows, cols = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
    dr = (rows.flatten()[:, None] - rows.flatten()[None]).abs()  # (N, N)
    dc = (cols.flatten()[:, None] - cols.flatten()[None]).abs()  # (N, N)
    near, far = similarity[dr + dc == 1], similarity[torch.maximum(dr, dc) >= 3]
    return float(near.mean() - far.mean())


def permuted_token_logits(model: VisionTransformer, images: Tensor, order: Tensor) -> Tensor:
    """The logits ``(B, num_classes)`` of ``model`` when the stem's tokens ``(B, N, D)`` are put
    in ``order`` before the prefix tokens and the positions are added (d2l's shuffle probe).

    ``model`` is a :class:`~vit_tutorial.vit.VisionTransformer` with a position table, RoPE or
    none (not ``pos_embed='relative'``); ``order`` is an integer tensor ``(N,)`` or ``(B, N)``:
    token ``n`` of image ``b`` becomes the stem's token ``order[b, n]``. With the identity
    order these are the model's own logits; a model with mean pooling and no position encoding
    gives the same logits for every order. The model's own forward runs, with the stem's
    output permuted, so any image size it takes is taken here.
    """
    if not isinstance(model, VisionTransformer):
        raise TypeError(
            "permuted_token_logits takes a VisionTransformer (a position table, RoPE or none), "
            f"got {type(model).__name__}"
        )
    if model.config.pos_embed == "relative":
        raise ValueError("permuted_token_logits needs a position table, not pos_embed='relative'")
    kind = getattr(order, "dtype", None)
    if (
        not isinstance(order, Tensor)
        or kind.is_floating_point
        or kind.is_complex
        or kind == torch.bool
    ):
        raise TypeError(f"order must be an integer tensor, got {kind or type(order).__name__}")
    order = order.long()  # uint8 and int16 index too

    def permute(module: nn.Module, args: tuple, x: Tensor) -> Tensor:  # (B, N, D), permuted
        (b, n), shape = x.shape[:2], tuple(order.shape)
        if len(shape) not in (1, 2) or shape[-1] != n or len(shape) == 2 and shape[0] != b:
            raise ValueError(f"order must be ({n},) or ({b}, {n}) for these images, got {shape}")
        index = order.to(x.device).expand(b, -1)  # (B, N)
        if not torch.equal(index.sort(-1).values, torch.arange(n, device=x.device).expand(b, n)):
            raise ValueError(f"order must be a permutation of the {n} tokens")
        return x.gather(1, index[..., None].expand_as(x))

    handle = model.patch_embed.register_forward_hook(permute)
    try:
        return model(images)
    finally:
        handle.remove()


def train_recipe_model(
    seed: int, path: str | Path, epochs: int | None = None, extra: dict | None = None
) -> TrainResult:
    """Train the recipe ``digits`` with ``seed`` on the CPU in float32, as chapter 6 trains it
    (``epochs``: the recipe's when ``None``), and save the model to ``path`` with
    :func:`~vit_tutorial.checkpoint.save_checkpoint`: weights, config, history, and in
    ``extra`` the seed, the test accuracy and ``extra`` (a provenance, say); no optimiser."""
    result = train_recipe("digits", seed=seed, epochs=epochs, device="cpu", progress=False)
    record = {"seed": seed, "test_accuracy": result.test_accuracy, **(extra or {})}
    epochs_done = len(result.history["epoch"])
    save_checkpoint(path, result.model, epoch=epochs_done, history=result.history, extra=record)
    return result


def load_recipe_model(path: str | Path) -> VisionTransformer:
    """The model that :func:`train_recipe_model` saved to ``path``, in eval mode. The file is
    read with ``weights_only=True`` and checked (its SHA-256, and a config equal to the
    recipe's); ``ValueError`` for one that is not such a checkpoint. Building the model draws
    from torch's global generator, as any model does."""
    model = VisionTransformer(
        image_size=8, in_channels=1, num_classes=10, **RECIPES["digits"].model
    )
    load_checkpoint(path, model, restore_rng=False)
    return model.eval()
