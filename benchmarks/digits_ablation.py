"""The ablation of chapter 6: which design choices matter for a ViT on the digits.

One plain ViT (patch embedding, ``patch_size=2`` so 16 tokens, learned position embeddings,
mean pooling, width 64, 4 blocks) and variants that each change one thing: the position
encoding, the patch size, the pooling, the stem. Every run uses the chapter's shortened
schedule (15 epochs, AdamW at 2e-3 with weight decay 0.05, 3 warm-up epochs, label
smoothing 0.1, batches of 64), and is tested on the same 360 test images; the seed changes
the initial weights and the order of the batches. ``--epochs`` shortens the schedule
(the warm-up stays its first fifth). A configuration that appears in several
groups (the base appears in all four) is trained once per seed.

The result file holds, per variant and seed, the test accuracy and the number of wrong test
images, with the mean and the spread over seeds, and a ``provenance`` block. One test
image is 1/360 = 0.28 points of accuracy: differences of an image or two are noise.

Usage::

    .venv/bin/python benchmarks/digits_ablation.py     # writes results/digits_ablation.json
    .venv/bin/python benchmarks/digits_ablation.py --quick --out /tmp/a.json     # seconds
    .venv/bin/python benchmarks/digits_ablation.py --variants patch-4 stem-conv-1 --seeds 0 \\
        --epochs 3 --out /tmp/b.json
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from vit_tutorial.data import digits_datasets
from vit_tutorial.engine import fit, predict
from vit_tutorial.vit import VisionTransformer

from _results import RESULTS, arguments, provenance, setup, summarize, write_json

DEFAULT_OUT = RESULTS / "digits_ablation.json"
BASE = dict(
    patch_size=2,
    dim=64,
    depth=4,
    num_heads=4,
    mlp_ratio=2.0,
    pool="mean",
    pos_embed="learned",
    stem="patch",
)
SCHEDULE = dict(epochs=15, lr=2e-3, weight_decay=0.05, warmup_epochs=3, label_smoothing=0.1)
BATCH_SIZE = 64
#: id: (what is varied, the variant's name, its change to BASE)
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
QUICK = dict(seeds=[0], epochs=1, variants=["patch-4", "stem-conv-2"])


def schedule(epochs: int) -> dict:
    """The schedule shortened or stretched to ``epochs``: warm-up stays its first fifth."""
    warmup = SCHEDULE["warmup_epochs"] * epochs / SCHEDULE["epochs"]
    return {**SCHEDULE, "epochs": epochs, "warmup_epochs": warmup}


def train_once(config: dict, seed: int, epochs: int) -> dict:
    """Train one configuration with one seed; its test accuracy and count of wrong images."""
    split = digits_datasets(seed=seed, batch_size=BATCH_SIZE)
    torch.manual_seed(seed)
    model = VisionTransformer(image_size=8, in_channels=1, num_classes=10, **config)
    history = fit(model, split.train_loader, None, **schedule(epochs), progress=False)
    logits, labels = predict(model, split.test_loader)
    wrong = int((logits.argmax(-1) != labels).sum())
    return {
        "seed": seed,
        "accuracy": 1 - wrong / len(labels),
        "wrong": wrong,
        "train_seconds": round(sum(history["time"]), 2),
    }


def ablation(variants: list[str], seeds: list[int], epochs: int) -> list[dict]:
    """Every variant with every seed; identical configurations are trained once per seed."""
    cache: dict[tuple, dict] = {}
    rows = []
    print(
        f"{'varied':12s}{'variant':15s}"
        + "".join(f"{'seed ' + str(s):>9s}" for s in seeds)
        + f"{'mean':>8s}{'wrong':>8s}",
        flush=True,
    )
    for key in variants:
        group, name, change = VARIANTS[key]
        config = {**BASE, **change}
        runs = []
        for seed in seeds:
            cached = (tuple(sorted(config.items())), seed)
            if cached not in cache:
                cache[cached] = train_once(config, seed, epochs)
            runs.append(cache[cached])
        row = {
            "id": key,
            "group": group,
            "name": name,
            "change": change,
            "config": config,
            "runs": runs,
            **summarize(runs),
        }
        rows.append(row)
        print(
            f"{group:12s}{name:15s}"
            + "".join(f"{100 * r['accuracy']:9.2f}" for r in runs)
            + f"{100 * row['mean_accuracy']:8.2f}{row['mean_wrong']:8.1f}",
            flush=True,
        )
    print(f"{len(cache)} distinct runs of {epochs} epochs")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--epochs", type=int, default=SCHEDULE["epochs"])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    arguments(parser, DEFAULT_OUT)
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.epochs, args.variants = (
            QUICK["seeds"],
            QUICK["epochs"],
            QUICK["variants"],
        )
    out = setup(args, DEFAULT_OUT)
    record = {
        "benchmark": "digits_ablation",
        "quick": args.quick,
        "provenance": provenance(args.seeds),
    }
    tic = time.perf_counter()
    rows = ablation(args.variants, args.seeds, args.epochs)
    record.update(
        {
            "base": BASE,
            "schedule": {**schedule(args.epochs), "batch_size": BATCH_SIZE},
            "test_images": len(digits_datasets().test),
            "variants": rows,
            "wall_seconds": round(time.perf_counter() - tic, 1),
        }
    )
    print(f"wall time {record['wall_seconds']:.0f} s")
    if out is not None:
        write_json(out, record)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
