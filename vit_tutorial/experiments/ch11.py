"""Chapter 11's experiments: the mid-2020s changes to the ViT, one at a time, on Fashion-MNIST.

**The ladder.** Chapter 8's plain ViT (``ch08.VIT_MODEL``: 4×4 patches, width 64, 4 blocks, mean
pooling) at the short study's budget, each rung adding one change to the rung above, in the order
of the changes ViT-5 keeps (arXiv 2602.08071): :data:`RUNGS`. Then the 2×2 of its claim about
SwiGLU and LayerScale on the last rung (:data:`SWIGLU_ROWS`): SwiGLU for the MLP, with and
without LayerScale, and the MLP without LayerScale; SwiGLU's hidden width is 2/3 of the MLP's,
so the parameters match. Every run is ``ch08.run``: the same data, seeds, steps, optimiser and
learning curve as chapter 8's runs, the baseline's model drawn exactly as its ``'vit'``.

**The controls** (:data:`CONTROLS`), each one change to the baseline alone: QK-norm, run at
learning rates up to 50 times chapter 8's (:data:`QK_RATES`: where logit growth should show), and
patch dropout (half the patches, in training; its speed-up and its cost).

**The probe** (:func:`probe`): after training, on the first :data:`PROBE_IMAGES` validation
images, the largest attention logit ``q·k/√d`` of each block (what QK-norm bounds), and the
norms of the tokens leaving the last block (the high-norm outliers registers absorb).

**The study** (``benchmarks/modern_ladder.py``): the runs of each of :data:`PARTS`
(:func:`specs`), run with :func:`~vit_tutorial.experiments.runner.run_study`
(:func:`run_all`) and summarised per row, size and learning rate (:func:`summarize`).

Example:
    >>> LadderSpec("+qk-norm", train_size=1000, seed=0).key
    '+qk-norm-n1000-s0-t430'
    >>> sorted(row_config("+qk-norm"))
    ['init_values', 'norm', 'qk_norm']
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from vit_tutorial.engine import FitSettings
from vit_tutorial.experiments import ch08
from vit_tutorial.experiments.runner import run_study
from vit_tutorial.validate import check_int, check_real
from vit_tutorial.vit import VisionTransformer

__all__ = [
    "CONTROLS",
    "PARTS",
    "PROBE_IMAGES",
    "QK_RATES",
    "ROWS",
    "RUNGS",
    "SHORT_STEPS",
    "SWIGLU_ROWS",
    "LadderSpec",
    "build_row",
    "probe",
    "row_config",
    "run",
    "run_all",
    "specs",
    "summarize",
]

#: The short study's budget (chapter 8): 430 steps of 128 images, one epoch of the full training
#: set (54 of 1,000 images); the runs measure how fast each model fits, not where it ends.
SHORT_STEPS = 430
#: Each rung adds its change to every rung above it. LayerScale starts at 1e-5, DINOv2's in
#: timm (timm's DeiT III: 1e-6; the official DeiT III and ViT-5 code: 1e-4).
RUNGS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "+layerscale": {"init_values": 1e-5},
    "+rmsnorm": {"norm": "rmsnorm"},
    "+qk-norm": {"qk_norm": True},
    "+rope": {"rope": "axial"},  # 2D RoPE in every block, beside the learned table
    "+registers": {"reg_tokens": 4},
    "-qkv-bias": {"qkv_bias": False},
}
_SWIGLU = {"mlp": "swiglu", "mlp_ratio": ch08.VIT_MODEL["mlp_ratio"] * 2 / 3}
#: On the last rung: SwiGLU with its LayerScale and without, and the MLP without LayerScale.
SWIGLU_ROWS: dict[str, dict[str, Any]] = {
    "+swiglu": _SWIGLU,
    "+swiglu-layerscale": {**_SWIGLU, "init_values": None},
    "-layerscale": {"init_values": None},
}
#: One change to the baseline alone.
CONTROLS: dict[str, dict[str, Any]] = {
    "qk-norm-alone": {"qk_norm": True},
    "patch-drop": {"patch_drop_rate": 0.5},
}
ROWS = (*RUNGS, *SWIGLU_ROWS, *CONTROLS)
#: The learning rates of the QK-norm control (chapter 8's is 2e-3), with the baseline's.
QK_RATES = (2e-3, 1e-2, 3e-2, 1e-1)
#: Validation images the probe looks at.
PROBE_IMAGES = 512
#: The study's parts: the ladder's rows; QK-norm alone and the baseline at :data:`QK_RATES`,
#: on the largest size; patch dropout and the baseline at every size.
PARTS = ("ladder", "qk-norm", "patch-drop")


def row_config(row: str) -> dict[str, Any]:
    """The ViT options of ``row`` of :data:`ROWS` beyond chapter 8's model: the changes of
    its rung and every rung above it (a row of :data:`SWIGLU_ROWS`: of the last rung, then its
    own; a control: its one change)."""
    if row not in ROWS:
        raise ValueError(f"unknown row {row!r}; expected one of {list(ROWS)}")
    if row in CONTROLS:
        return dict(CONTROLS[row])
    options: dict[str, Any] = {}
    for rung, change in RUNGS.items():
        options.update(change)
        if rung == row:
            return options
    return {**options, **SWIGLU_ROWS[row]}


def build_row(row: str) -> VisionTransformer:
    """A fresh ViT of ``row`` for 28×28 grey images and 10 classes (``ch08.build_model('vit')``
    with the row's options)."""
    options = {**ch08.VIT_MODEL, **row_config(row)}
    return VisionTransformer(image_size=28, in_channels=1, num_classes=10, **options)


@dataclasses.dataclass(frozen=True)
class LadderSpec:
    """One run of the ladder: its row, training-set size, seed, step budget and peak learning
    rate (``None``: chapter 8's, ``ch08.FIT.lr``)."""

    row: str
    train_size: int = ch08.FULL_TRAIN_SIZE
    seed: int = 0
    steps: int = SHORT_STEPS
    lr: float | None = None

    def __post_init__(self) -> None:
        row_config(self.row)  # ValueError for an unknown row
        bounds = {"train_size": (10, ch08.FULL_TRAIN_SIZE), "seed": (0, None), "steps": (1, None)}
        for name, (low, high) in bounds.items():
            object.__setattr__(self, name, check_int(name, getattr(self, name), low, high))
        if self.lr is not None:
            check_real("lr", self.lr, 0.0, low_open=True)

    @property
    def key(self) -> str:
        """A name unique to the run, e.g. ``+rope-n1000-s2-t430`` (``-lr0.01`` at another rate)."""
        rate = "" if self.lr is None else f"-lr{self.lr:g}"
        return f"{self.row}-n{self.train_size}-s{self.seed}-t{self.steps}{rate}"


@dataclasses.dataclass(frozen=True)
class _RunAtRate(ch08.RunSpec):
    """Chapter 8's run of its ``'vit'``, at the peak learning rate ``lr``."""

    lr: float = ch08.FIT.lr

    @property
    def settings(self) -> FitSettings:
        return dataclasses.replace(super().settings, lr=self.lr)


def run(spec: LadderSpec, **options: Any) -> dict[str, Any]:
    """Train ``spec``'s row with ``ch08.run`` (``options``: its keywords, e.g. ``device``,
    ``history_points``) and :func:`probe` the trained model: ``ch08.run``'s result with the
    row, its options and the probe's measures."""
    base = _RunAtRate("vit", spec.train_size, spec.seed, spec.steps, lr=spec.lr or ch08.FIT.lr)
    result = ch08.run(base, build=lambda: build_row(spec.row), probe=probe, **options)
    result.update(row=spec.row, key=spec.key, options=row_config(spec.row))
    return result


def _quantiles(norms: Tensor) -> list[float]:
    """Median, 99th percentile and maximum, to 4 digits."""
    q = torch.quantile(norms.flatten().float(), torch.tensor([0.5, 0.99]))
    return [round(v, 4) for v in (*q.tolist(), norms.max().item())]


@torch.no_grad()
def probe(model: VisionTransformer, data: Any, images: int = PROBE_IMAGES) -> dict[str, Any]:
    """Measures of a trained ViT on the first ``images`` validation images of ``data``:
    ``max_attention_logit``, the largest ``q·k/√d`` of each block (after QK-norm and RoPE: the
    scores the softmax sees); ``token_norms``, the median, 99th percentile and maximum norm of
    the patch tokens and of the prefix tokens leaving the last block, before the final norm."""
    batches, seen = [], 0
    for x, _ in data.val_loader:
        batches.append(x)
        seen += len(x)
        if seen >= images:
            break
    x = torch.cat(batches)[:images].to(next(model.parameters()).device)
    logits: list[float] = []

    def record(attn: nn.Module, args: tuple) -> None:  # the attention's (x, bias, rope)
        q, k, _ = attn._heads(args[0], args[2] if len(args) > 2 else None)
        scores = (q @ k.transpose(-2, -1)) / attn.head_dim**0.5
        logits.append(round(scores.max().item(), 4))

    mode = model.training
    model.eval()
    hooks = [b.attn.register_forward_pre_hook(record) for b in model.encoder.blocks]
    try:
        tokens, blocks = model._start(x)  # (B, p + N, D), each block with its bias and RoPE
        for block in blocks:
            tokens = block(tokens)
    finally:
        for hook in hooks:
            hook.remove()
        model.train(mode)
    p = model.num_prefix_tokens
    norms = tokens.norm(dim=-1)  # (B, p + N)
    return {
        "max_attention_logit": logits,
        "token_norms": {
            "patches": _quantiles(norms[:, p:]),
            "prefix": _quantiles(norms[:, :p]) if p else None,
        },
        "probe_images": len(x),
    }


def specs(
    part: str,
    rows: Iterable[str],
    sizes: Iterable[int],
    seeds: Iterable[int],
    steps: int = SHORT_STEPS,
    rates: Iterable[float] = QK_RATES,
) -> list[LadderSpec]:
    """The runs of ``part`` of :data:`PARTS`: the ladder's ``rows`` at ``sizes``, or a control
    (``rows`` unused); every one with each of ``seeds``. At chapter 8's rate the QK-norm part's
    baseline is the ladder's own run (no rate in its key).

    Example:
        >>> [s.key for s in specs("qk-norm", [], [300], [0], 20, rates=[2e-3, 0.1])][2:]
        ['baseline-n300-s0-t20-lr0.1', 'qk-norm-alone-n300-s0-t20-lr0.1']
    """
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}; expected one of {PARTS}")
    sizes, seeds = list(sizes), list(seeds)
    if part == "ladder":
        grid = [(row, size, None) for size in sizes for row in rows]
    elif part == "qk-norm":
        default, pair = ch08.FIT.lr, ("baseline", "qk-norm-alone")
        grid = [(r, max(sizes), None if lr == default else lr) for lr in rates for r in pair]
    else:
        grid = [(row, size, None) for size in sizes for row in ("baseline", "patch-drop")]
    return [LadderSpec(r, n, s, steps, lr) for r, n, lr in grid for s in seeds]


def _report(row: dict) -> str:
    return (
        f"test {100 * row['test_accuracy']:.2f}%, final loss {row['final_train_loss']:.3f} "
        f"({row['train_seconds']:.0f} s)"
    )


def run_all(
    runs: Iterable[LadderSpec], log: str | Path, *, processes: int = 1, **options: Any
) -> dict[str, dict]:
    """:func:`run` each of ``runs`` that ``log`` lacks, with ``options`` (``device``,
    ``history_points``...), ``processes`` at a time
    (:func:`~vit_tutorial.experiments.runner.run_study`); every run of ``log`` by key."""
    work = functools.partial(run, **options)
    return run_study(runs, work, log, processes=processes, report=_report)


def summarize(rows: Iterable[dict]) -> list[dict]:
    """Per row, training-set size and learning rate (learning rate first, then size, then
    the rows' order): the per-seed test and validation accuracy and final training loss (seed
    order) and their medians, the largest attention logit and the patch tokens' largest norm
    over their median, per seed."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        key = (row["row"], row["train_size"], row.get("lr", ch08.FIT.lr))
        groups.setdefault(key, []).append(row)
    order = {name: i for i, name in enumerate(ROWS)}
    summary = []
    for (name, size, lr), group in sorted(
        groups.items(), key=lambda g: (g[0][2], g[0][1], order[g[0][0]])
    ):
        group.sort(key=lambda r: r["seed"])
        per_seed = {
            key: [r[key] for r in group]
            for key in ("test_accuracy", "val_accuracy", "final_train_loss")
        }
        norms = [r["token_norms"]["patches"] for r in group]
        summary.append(
            {
                "row": name,
                "train_size": size,
                "lr": lr,
                "seeds": [r["seed"] for r in group],
                **per_seed,
                **{f"median_{k}": statistics.median(v) for k, v in per_seed.items()},
                "max_attention_logit": [max(r["max_attention_logit"]) for r in group],
                "patch_norm_max_over_median": [round(n[2] / n[0], 3) for n in norms],
                "parameters": group[0]["parameters"],
                "options": group[0]["options"],
            }
        )
    return summary
