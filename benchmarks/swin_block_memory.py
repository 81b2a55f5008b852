"""Peak memory of Swin-T's shifted first-stage block: the window mask repeated per image, or not.

Issue 34: ``WindowAttention`` used to add the shift's mask to the relative position bias and
repeat the sum for every image, ``(B·nW, h, N, N)``: for Swin-T's shifted first-stage block
(dim 96, 3 heads, a 56×56 grid, M = 7: nW = 64 windows of N = 49 tokens) about 236 MB at batch
128. It now folds each image's windows into the head axis, ``(B, nW·h, N, d)``, so that one
``(1, nW·h, N, N)`` bias broadcasts over the images in the fused kernel.

This script builds that block (``SwinBlock(96, 3, window_size=7, shift_size=3)``, eval mode,
under :func:`torch.inference_mode`, float32 on the CPU) and measures with
:func:`vit_tutorial.measure.peak_memory` (input excluded, output included) the peak of its
attention layer on its windows and of the whole block, both ways: with the bias repeated, by
:func:`repeated_bias_attention` below (the parent's ``forward`` given the repeated bias, as the
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
import copy
import sys

import torch
from torch import Tensor

from vit_tutorial.attention import MultiHeadSelfAttention
from vit_tutorial.measure import peak_memory
from vit_tutorial.windows import SwinBlock, WindowAttention, shifted_window_mask, window_partition

GRID, DIM, HEADS, M, SHIFT = 56, 96, 3, 7, 3  # Swin-T's first stage, its second (shifted) block
MB = 1e6


def repeated_bias_attention(attn: WindowAttention, windows: Tensor, mask: Tensor | None) -> Tensor:
    """``attn`` on windows ``(B·nW, N, D)`` as the layer was: the bias ``(nW, h, N, N)`` of the
    mask ``(nW, N, N)`` repeated for every image, ``(B·nW, h, N, N)``, into the parent's fused
    ``forward``."""
    bias = attn.relative_position_bias()  # (h, N, N)
    if mask is None:
        return MultiHeadSelfAttention.forward(attn, windows, bias[None])
    bias = bias.masked_fill(~mask[:, None], float("-inf"))  # (nW, h, N, N)
    bias = bias.repeat(windows.shape[0] // mask.shape[0], 1, 1, 1)  # (B·nW, h, N, N)
    return MultiHeadSelfAttention.forward(attn, windows, bias)


def measure(batch: int) -> dict[str, dict[str, float]]:
    """``{"layer" | "block": {"repeated" | "folded" | "max_abs_diff": ...}}``, peaks in bytes."""
    torch.manual_seed(0)
    block = SwinBlock(DIM, HEADS, window_size=M, shift_size=SHIFT).eval()
    before = copy.deepcopy(block)  # the same weights, its layer run the old way
    before.attn.forward = lambda windows, mask=None: repeated_bias_attention(
        before.attn, windows, mask
    )
    x = torch.randn(batch, GRID, GRID, DIM)  # (B, H, W, C)
    mask = shifted_window_mask(GRID, GRID, M, SHIFT)  # (nW, N, N)
    with torch.inference_mode():
        rolled = torch.roll(block.norm1(x), (-SHIFT, -SHIFT), dims=(1, 2))
        windows = window_partition(rolled, M)  # (B·nW, N, C), as the block attends them
        del rolled
        runs = {
            "layer": (lambda: before.attn(windows, mask), lambda: block.attn(windows, mask)),
            "block": (lambda: before(x), lambda: block(x)),
        }
        results = {}
        for name, (old, new) in runs.items():
            diff = (old() - new()).abs().max().item()
            results[name] = {
                "repeated": peak_memory(old),
                "folded": peak_memory(new),
                "max_abs_diff": diff,
            }
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=128, help="images B (default 128)")
    args = parser.parse_args()
    if args.batch < 1:
        parser.error(f"--batch must be at least 1, got {args.batch}")
    nW, N = (GRID // M) ** 2, M * M
    repeated = args.batch * nW * HEADS * N * N * 4  # float32 (B·nW, h, N, N)
    print(
        f"SwinBlock({DIM}, {HEADS}, window_size={M}, shift_size={SHIFT}), a {GRID}×{GRID} grid, "
        f"batch {args.batch}: nW = {nW} windows of N = {N} tokens; float32, CPU, "
        f"torch {torch.__version__.split('+')[0]}"
    )
    print(f"the bias repeated per image, (B·nW, h, N, N): {repeated / MB:.1f} MB")
    results = measure(args.batch)
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
