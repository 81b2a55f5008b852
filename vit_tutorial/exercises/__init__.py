"""Checkers for the book's exercises, one module per chapter (chapters 8 and 9 have two:
``greyscale_resnet`` and ``data_efficiency``, ``random_masking`` and ``pretraining``).

Each ``check_*`` function takes the learner's function, raises :class:`AssertionError`
with an explanation when it is wrong, and prints a confirmation when it is right.
"""

from vit_tutorial.exercises.attention import (
    check_attention,
    check_attention_memory_prediction,
    check_masked_attention,
    check_stable_softmax,
)
from vit_tutorial.exercises.axial import (
    check_axial_attention,
    check_axial_flops_prediction,
    check_axial_mask,
    check_axial_scores,
)
from vit_tutorial.exercises.data_efficiency import (
    check_distillation_loss,
    check_mixup,
    check_vit_accuracy_prediction,
)
from vit_tutorial.exercises.encoder import (
    check_block_forward,
    check_block_params_prediction,
    check_drop_path,
    check_layer_norm,
)
from vit_tutorial.exercises.greyscale_resnet import check_greyscale_resnet
from vit_tutorial.exercises.modern import (
    check_layer_scale_parameters,
    check_map_head_shapes,
    check_prefix_to_grid,
    check_qk_norm_logit_prediction,
)
from vit_tutorial.exercises.patches import (
    check_class_token_and_position,
    check_image_to_patches,
    check_patch_embedding,
    check_patches_to_image,
    check_tokens_prediction,
)
from vit_tutorial.exercises.positional import (
    check_bias_table_prediction,
    check_relative_position_index,
    check_resize_table,
    check_sinusoidal_2d,
)
from vit_tutorial.exercises.pretraining import (
    check_decoder_tokens,
    check_mae_gain_prediction,
    check_mae_loss,
)
from vit_tutorial.exercises.random_masking import check_random_masking
from vit_tutorial.exercises.training import (
    check_lr_schedule,
    check_no_position_prediction,
    check_param_groups,
    check_smoothed_cross_entropy,
)
from vit_tutorial.exercises.vit import (
    check_param_count,
    check_patch_flops_prediction,
    check_pooling,
    check_predict,
)
from vit_tutorial.exercises.windows import (
    check_shift_mask,
    check_window_flops_prediction,
    check_window_partition,
    check_window_relative_index,
)

__all__ = [
    "check_attention",
    "check_masked_attention",
    "check_stable_softmax",
    "check_attention_memory_prediction",
    # patches
    "check_image_to_patches",
    "check_patch_embedding",
    "check_patches_to_image",
    "check_class_token_and_position",
    "check_tokens_prediction",
    # positional
    "check_relative_position_index",
    "check_sinusoidal_2d",
    "check_resize_table",
    "check_bias_table_prediction",
    # encoder
    "check_block_forward",
    "check_drop_path",
    "check_layer_norm",
    "check_block_params_prediction",
    # vit
    "check_param_count",
    "check_predict",
    "check_pooling",
    "check_patch_flops_prediction",
    # training
    "check_lr_schedule",
    "check_param_groups",
    "check_smoothed_cross_entropy",
    "check_no_position_prediction",
    # axial
    "check_axial_attention",
    "check_axial_mask",
    "check_axial_scores",
    "check_axial_flops_prediction",
    # data efficiency
    "check_greyscale_resnet",
    "check_distillation_loss",
    "check_mixup",
    "check_vit_accuracy_prediction",
    # pre-training
    "check_random_masking",
    "check_mae_loss",
    "check_decoder_tokens",
    "check_mae_gain_prediction",
    # windows
    "check_window_partition",
    "check_shift_mask",
    "check_window_relative_index",
    "check_window_flops_prediction",
    # the ViT of the mid-2020s
    "check_prefix_to_grid",
    "check_layer_scale_parameters",
    "check_map_head_shapes",
    "check_qk_norm_logit_prediction",
]
