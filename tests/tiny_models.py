"""A model small enough that the training and checkpoint tests run in a fraction of a second."""

from vit_tutorial.vit import VisionTransformer

TINY = dict(
    image_size=4,
    patch_size=2,
    in_channels=1,
    num_classes=3,
    dim=16,
    depth=1,
    num_heads=2,
    mlp_ratio=2.0,
)


def tiny_vit(**fields) -> VisionTransformer:
    """A 4×4-pixel, one-block ViT; ``fields`` override :data:`TINY`."""
    return VisionTransformer(**{**TINY, **fields})
