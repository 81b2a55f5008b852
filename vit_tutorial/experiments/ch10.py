"""Chapter 10's experiments: Swin's runs and the memory of its shifted windows.

**The runs.** Chapter 10 trains its models in chapter 8's study
(:mod:`~vit_tutorial.experiments.ch08_study`, the ``scaling`` part): :data:`MODELS`, chapter
8's ``LATER_MODELS`` (Swin and its three controls), which ``ch08.build_model`` builds;
``benchmarks/fashion_mnist_study.py --models`` runs them.

**The memory of the shift's mask** (issue 34). ``WindowAttention`` once added the shift's mask
to the relative position bias and repeated the sum for every image, ``(B·nW, h, N, N)``; it now
folds each image's windows into the head axis, so one ``(1, nW·h, N, N)`` bias broadcasts over
the images. :func:`block_memory` measures the peak memory of Swin-T's shifted first-stage block
(:data:`GRID`, :data:`DIM`, :data:`HEADS`, window :data:`WINDOW`, shift :data:`SHIFT`) both
ways, the old one rebuilt by :func:`repeated_bias_attention`; ``benchmarks/swin_block_memory.py``
prints them.

Example:
    >>> repeated_bias_bytes(128) / 1e6  # the bias repeated for 128 images, float32: MB
    236.027904
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor

from vit_tutorial.attention import MultiHeadSelfAttention
from vit_tutorial.experiments.ch08 import LATER_MODELS
from vit_tutorial.measure import peak_memory
from vit_tutorial.windows import SwinBlock, WindowAttention, shifted_window_mask, window_partition

__all__ = [
    "DIM",
    "GRID",
    "HEADS",
    "MODELS",
    "SHIFT",
    "WINDOW",
    "block_memory",
    "repeated_bias_attention",
    "repeated_bias_bytes",
]

#: Chapter 10's models in chapter 8's study: Swin, Swin with one window, the ViT with 2×2
#: patches and the ViT with a relative position bias.
MODELS = LATER_MODELS
#: Swin-T's first stage, its second (shifted) block: a 56×56 grid, width 96, 3 heads, M = 7.
GRID, DIM, HEADS, WINDOW, SHIFT = 56, 96, 3, 7, 3


def repeated_bias_bytes(batch: int) -> int:
    """The bytes of the bias repeated for ``batch`` images, ``(B·nW, h, N, N)`` in float32."""
    windows, tokens = (GRID // WINDOW) ** 2, WINDOW * WINDOW
    return batch * windows * HEADS * tokens * tokens * 4


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


def block_memory(batch: int) -> dict[str, dict[str, float]]:
    """The peak memory of the shifted block's attention layer on its windows (``'layer'``) and
    of the whole block (``'block'``), in bytes, with the bias repeated per image
    (``'repeated'``) and folded (``'folded'``), and the largest difference of their outputs
    (``'max_abs_diff'``); eval mode, :func:`torch.inference_mode`, float32 on the CPU."""
    torch.manual_seed(0)
    block = SwinBlock(DIM, HEADS, window_size=WINDOW, shift_size=SHIFT).eval()
    before = copy.deepcopy(block)  # the same weights, its layer run the old way
    before.attn.forward = lambda windows, mask=None: repeated_bias_attention(
        before.attn, windows, mask
    )
    x = torch.randn(batch, GRID, GRID, DIM)  # (B, H, W, C)
    mask = shifted_window_mask(GRID, GRID, WINDOW, SHIFT)  # (nW, N, N)
    with torch.inference_mode():
        rolled = torch.roll(block.norm1(x), (-SHIFT, -SHIFT), dims=(1, 2))
        windows = window_partition(rolled, WINDOW)  # (B·nW, N, C), as the block attends them
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
