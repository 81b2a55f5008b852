"""Checkers for the book's exercises, one module per chapter.

Each ``check_*`` function takes the learner's function, raises :class:`AssertionError`
with an explanation when it is wrong, and prints a confirmation when it is right.
"""

from vit_tutorial.exercises.attention import check_attention
from vit_tutorial.exercises.axial import check_axial_attention, check_axial_scores
from vit_tutorial.exercises.encoder import check_block_forward, check_drop_path
from vit_tutorial.exercises.patches import check_image_to_patches, check_patch_embedding
from vit_tutorial.exercises.positional import check_relative_position_index, check_sinusoidal_2d
from vit_tutorial.exercises.training import (
    check_lr_schedule,
    check_param_groups,
    check_smoothed_cross_entropy,
)
from vit_tutorial.exercises.vit import check_param_count, check_pooling, check_predict

__all__ = [
    "check_attention",
    # patches
    "check_image_to_patches",
    "check_patch_embedding",
    # positional
    "check_relative_position_index",
    "check_sinusoidal_2d",
    # encoder
    "check_block_forward",
    "check_drop_path",
    # vit
    "check_param_count",
    "check_predict",
    "check_pooling",
    # training
    "check_lr_schedule",
    "check_param_groups",
    "check_smoothed_cross_entropy",
    # axial
    "check_axial_attention",
    "check_axial_scores",
]
