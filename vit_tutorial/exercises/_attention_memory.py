"""The count behind chapter 1's prediction exercise: the memory of one layer's attention
weights in ViT-B/16, and the numbers the usual slips give (for
:func:`~vit_tutorial.exercises.attention.check_attention_memory_prediction`)."""

from __future__ import annotations

import dataclasses

import torch

from vit_tutorial.patches import patch_grid
from vit_tutorial.vit import PRESETS


def weights_mib(image_size: int, heads: bool = True, class_token: bool = True) -> float:
    """MiB of one layer's float32 attention weights ``(1, h, T, T)`` of ViT-B/16 at
    ``image_size``; ``heads`` or ``class_token`` False leave that factor out (a slip)."""
    config = dataclasses.replace(PRESETS["vit_base_patch16_224"], image_size=image_size)
    gh, gw = patch_grid(config.image_size, config.patch_size)
    tokens = gh * gw + int(class_token and config.class_token)
    float32_bytes = torch.empty((), dtype=torch.float32).element_size()
    return (config.num_heads if heads else 1) * tokens**2 * float32_bytes / 2**20


def memory_slips() -> tuple[float, list[tuple[str, float]], str]:
    """The exact MiB at 384×384, the usual slips with their numbers, and the count's source."""
    actual, at_224 = weights_mib(384), weights_mib(224)
    config = PRESETS["vit_base_patch16_224"]
    tokens = {size: patch_grid(size, config.patch_size)[0] ** 2 + 1 for size in (224, 384)}
    growth = tokens[384] / tokens[224]
    slips = [
        (
            f"you left out the heads: each of the {config.num_heads} heads has its own "
            f"T × T weights, so the tensor is (1, {config.num_heads}, T, T)",
            weights_mib(384, heads=False),
        ),
        (
            f"you scaled the 224×224 size ({at_224:.2f} MiB) with the number of tokens "
            f"(×{growth:.2f}); the weights are a T × T matrix, so they grow with the "
            f"square: ×{growth**2:.2f}",
            at_224 * growth,
        ),
        (
            "you counted 2 bytes per entry (float16 or bfloat16); the question is about "
            "float32, 4 bytes",
            actual / 2,
        ),
        (
            "that is two T × T tensors, the scaled scores and the weights, which the explicit "
            "path holds at once; the question asks for the weights alone",
            2 * actual,
        ),
        ("you counted bits: a float32 entry takes 4 bytes, not 32", actual * 8),
    ]
    source = f"{config.num_heads} heads · {tokens[384]}² float32 entries"
    return actual, slips, source
