"""Peak memory of Swin-T's shifted first-stage block: the window mask repeated per image, or not.

Issue 34: ``WindowAttention`` used to add the shift's mask to the relative position bias and
repeat the sum for every image, ``(B·nW, h, N, N)``: for Swin-T's shifted first-stage block
(dim 96, 3 heads, a 56×56 grid, M = 7: nW = 64 windows of N = 49 tokens) about 236 MB at batch
128. It now folds each image's windows into the head axis, ``(B, nW·h, N, d)``, so that one
``(1, nW·h, N, N)`` bias broadcasts over the images in the fused kernel.

What runs is :func:`vit_tutorial.experiments.ch10.block_memory`: it builds that block
(``SwinBlock(96, 3, window_size=7, shift_size=3)``, eval mode, under
:func:`torch.inference_mode`, float32 on the CPU) and measures with
:func:`vit_tutorial.measure.peak_memory` (input excluded, output included) the peak of its
attention layer on its windows and of the whole block, both ways: with the bias repeated, by
``ch10.repeated_bias_attention`` (the parent's ``forward`` given the repeated bias, as the
layer was), and with the package's layer. It prints them in MB (10^6 bytes), their differences
and the largest difference of the outputs, and exits with status 1 when the layer's peak drops
by less than the repeated bias takes.

The whole block's peak comes from its MLP (its input, the normalised tokens, the hidden
``(B, H, W, 4C)`` and its GELU, alive at once), above either attention's: the block's peak does
not move with the attention's.

Usage: ``.venv/bin/python benchmarks/swin_block_memory.py [--batch 128]``
"""

from __future__ import annotations

import argparse
import sys

import torch

from vit_tutorial.experiments.ch10 import (
    DIM,
    GRID,
    HEADS,
    SHIFT,
    WINDOW,
    block_memory,
    repeated_bias_bytes,
)

MB = 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=128, help="images B (default 128)")
    args = parser.parse_args()
    if args.batch < 1:
        parser.error(f"--batch must be at least 1, got {args.batch}")
    nW, N = (GRID // WINDOW) ** 2, WINDOW * WINDOW
    repeated = repeated_bias_bytes(args.batch)  # float32 (B·nW, h, N, N)
    print(
        f"SwinBlock({DIM}, {HEADS}, window_size={WINDOW}, shift_size={SHIFT}), a {GRID}×{GRID} "
        f"grid, batch {args.batch}: nW = {nW} windows of N = {N} tokens; float32, CPU, "
        f"torch {torch.__version__.split('+')[0]}"
    )
    print(f"the bias repeated per image, (B·nW, h, N, N): {repeated / MB:.1f} MB")
    results = block_memory(args.batch)
    print(f"\npeak memory (MB)   {'repeated bias':>14} {'folded':>10} {'drop':>10}  max |diff|")
    for name, r in results.items():
        drop = r["repeated"] - r["folded"]
        print(
            f"  {name:<16} {r['repeated'] / MB:14.1f} {r['folded'] / MB:10.1f} "
            f"{drop / MB:10.1f}  {r['max_abs_diff']:.2g}"
        )
    met = results["layer"]["repeated"] - results["layer"]["folded"] >= repeated
    print(
        f"\ntarget (the layer's peak drops by at least the repeated bias's "
        f"{repeated / MB:.1f} MB): {'met' if met else 'MISSED'}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
