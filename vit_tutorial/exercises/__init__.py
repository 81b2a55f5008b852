"""Checkers for the book's exercises, one module per chapter (chapters 8 and 9 have two:
``greyscale_resnet`` and ``data_efficiency``, ``random_masking`` and ``pretraining``).

Each ``check_*`` function takes the learner's function, raises :class:`AssertionError`
with an explanation when it is wrong, and prints a confirmation when it is right.
"""

from vit_tutorial.exercises.attention import (
    check_attention,
    check_masked_attention,
    check_stable_softmax,
)
from vit_tutorial.exercises.axial import check_axial_attention, check_axial_mask, check_axial_scores
from vit_tutorial.exercises.data_efficiency import check_distillation_loss, check_mixup
from vit_tutorial.exercises.encoder import check_block_forward, check_drop_path, check_layer_norm
from vit_tutorial.exercises.greyscale_resnet import check_greyscale_resnet
from vit_tutorial.exercises.patches import (
    check_image_to_patches,
    check_patch_embedding,
    check_patches_to_image,
)
from vit_tutorial.exercises.positional import (
    check_relative_position_index,
    check_resize_table,
    check_sinusoidal_2d,
)
from vit_tutorial.exercises.pretraining import check_decoder_tokens, check_mae_loss
from vit_tutorial.exercises.random_masking import check_random_masking
from vit_tutorial.exercises.training import (
    check_lr_schedule,
    check_param_groups,
    check_smoothed_cross_entropy,
)
from vit_tutorial.exercises.vit import check_param_count, check_pooling, check_predict

__all__ = [
    "check_attention",
    "check_masked_attention",
    "check_stable_softmax",
    # patches
    "check_image_to_patches",
    "check_patch_embedding",
    "check_patches_to_image",
    # positional
    "check_relative_position_index",
    "check_sinusoidal_2d",
    "check_resize_table",
    # encoder
    "check_block_forward",
    "check_drop_path",
    "check_layer_norm",
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
    "check_axial_mask",
    "check_axial_scores",
    # data efficiency
    "check_greyscale_resnet",
    "check_distillation_loss",
    "check_mixup",
    # pre-training
    "check_random_masking",
    "check_mae_loss",
    "check_decoder_tokens",
]
