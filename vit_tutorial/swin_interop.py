"""Load timm and torchvision Swin Transformers into :class:`~vit_tutorial.swin.SwinTransformer`.

Both libraries hold the same tensors as ours under other names; :func:`timm_key` and
:func:`torchvision_key` give their name for each of ours, for example:

.. code-block:: text

    ours                                  timm                                 torchvision
    patch_embed.proj.weight               patch_embed.proj.weight              features.0.0.weight
    patch_norm.weight                     patch_embed.norm.weight              features.0.2.weight
    stages.1.downsample.reduction.weight  layers.1.downsample.reduction.weight features.2.reduction.weight
    stages.1.blocks.0.attn.qkv.weight     layers.1.blocks.0.attn.qkv.weight    features.3.0.attn.qkv.weight
    ...attn.relative_position_bias.table  ...attn.relative_position_bias_table (the same)
    stages.1.blocks.0.mlp.fc1.weight      layers.1.blocks.0.mlp.fc1.weight     features.3.0.mlp.0.weight
    head.weight                           head.fc.weight                       head.weight

torchvision keeps each stage's blocks at ``features[2s + 1]`` and the merge that
follows at ``features[2s + 2]``, plus a buffer ``relative_position_index`` per block, which ours
computes (:func:`~vit_tutorial.windows.relative_position_index`); timm, as ours, merges at the
start of a stage. All three concatenate the 2×2 neighbours of a merge in the same order, so no
weight is permuted. A conversion refuses to guess: keys without a counterpart, or shapes that
differ, raise one ``ValueError`` listing them all (:func:`~vit_tutorial.interop.load_converted`).

**Where the references differ.** On a grid the window does not divide, torchvision (as ours)
pads before the cyclic shift and timm after it (``SwinTransformerBlock._attn`` in
``timm/models/swin_transformer.py``); on a grid smaller than the window, torchvision (as ours)
pads to the window and timm shrinks the window to the grid (``_calc_window_shift``), with a
smaller bias table. :func:`swin_from_timm` gives ours that stage's shrunk window (a
:class:`~vit_tutorial.swin.SwinConfig` takes one window per stage), and refuses a timm model
that shifts a padded grid rather than give other logits; with the same weights, every other
model gives logits at most 1e-4 apart (``tests/test_swin_interop.py``).
timm and torchvision are never imported here: the functions read the model's attributes.
"""

from __future__ import annotations

import math
import re

from torch import Tensor, nn

from vit_tutorial.interop import load_converted
from vit_tutorial.swin import SwinConfig, SwinTransformer
from vit_tutorial.windows import relative_position_index

__all__ = [
    "timm_key",
    "torchvision_key",
    "swin_state_dict_from",
    "swin_to_timm",
    "swin_to_torchvision",
    "swin_from_timm",
    "swin_from_torchvision",
]

_TABLE = ("attn.relative_position_bias.table", "attn.relative_position_bias_table")
_TV_INDEX = "attn.relative_position_index"  # torchvision's persistent buffer


def timm_key(key: str) -> str:
    """timm's name for our state-dict key ``key``.

    Example:
        >>> timm_key("stages.2.blocks.5.attn.relative_position_bias.table")
        'layers.2.blocks.5.attn.relative_position_bias_table'
    """
    key = re.sub(r"^stages\.", "layers.", key.replace(*_TABLE))
    return re.sub(r"^patch_norm\.", "patch_embed.norm.", re.sub(r"^head\.", "head.fc.", key))


def torchvision_key(key: str) -> str:
    """torchvision's name for our state-dict key ``key``.

    Example:
        >>> torchvision_key("stages.2.blocks.5.mlp.fc2.bias"), torchvision_key("patch_norm.bias")
        ('features.5.5.mlp.3.bias', 'features.0.2.bias')
    """
    if match := re.fullmatch(r"stages\.(\d+)\.blocks\.(\d+)\.(.+)", key):
        rest = match[3].replace(*_TABLE).replace("mlp.fc1", "mlp.0").replace("mlp.fc2", "mlp.3")
        return f"features.{2 * int(match[1]) + 1}.{match[2]}.{rest}"
    if match := re.fullmatch(r"stages\.(\d+)\.downsample\.(.+)", key):
        return f"features.{2 * int(match[1])}.{match[2]}"  # the merge after stage s - 1
    key = re.sub(r"^patch_embed\.proj\.", "features.0.0.", key)
    return re.sub(r"^patch_norm\.", "features.0.2.", key)


def swin_state_dict_from(
    state_dict: dict[str, Tensor], model: SwinTransformer, library: str
) -> dict[str, Tensor]:
    """``state_dict`` of the ``library`` (``'timm'`` or ``'torchvision'``) model with ``model``'s
    configuration, renamed to our keys; ``ValueError`` lists keys on either side without a
    counterpart (torchvision's ``relative_position_index`` buffers are left out)."""
    if library not in ("timm", "torchvision"):
        raise ValueError(f"library must be 'timm' or 'torchvision', got {library!r}")
    rename = timm_key if library == "timm" else torchvision_key
    ours = {rename(key): key for key in model.state_dict()}  # their key -> ours
    out = {ours[k]: v for k, v in state_dict.items() if k in ours}
    unmatched = [k for k in state_dict if k not in ours and not k.endswith(_TV_INDEX)]
    missing = [k for k in model.state_dict() if k not in out]
    if unmatched or missing:
        raise ValueError(
            f"the {library} state dict does not fit vit_tutorial's SwinTransformer: "
            f"{library} keys without a counterpart {unmatched}, ours without a value {missing}"
        )
    return out


def swin_to_timm(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
    """Our state dict with timm's keys, for the timm model of the same configuration."""
    return {timm_key(k): v for k, v in state_dict.items()}


def swin_to_torchvision(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
    """Our state dict with torchvision's keys and its ``relative_position_index`` buffers."""
    out = {}
    for key, value in state_dict.items():
        out[torchvision_key(key)] = value
        if key.endswith(_TABLE[0]):  # (2M - 1)² rows
            M = (math.isqrt(value.shape[0]) + 1) // 2
            index = relative_position_index(M).flatten().to(value.device)
            out[torchvision_key(key).replace(_TABLE[1], _TV_INDEX)] = index
    return out


def _mlp_ratio(widths: list[tuple[int, int]], library: str) -> float:
    """The shortest decimal ``r`` with ``int(dim * r) == hidden`` for every stage's MLP ``(dim,
    hidden)`` in ``widths``, as ours, timm and torchvision size it; else ``ValueError``."""
    for s in range(len(widths)):
        low = max(h / d for d, h in widths[: s + 1])
        ratios = [math.ceil(low * 10**k) / 10**k for k in range(17)] + [
            math.nextafter(low, math.inf)
        ]
        fit = [r for r in ratios if all(int(d * r) == h for d, h in widths[: s + 1])]
        if not fit:
            raise ValueError(
                f"the {library} model's stage {s} has an MLP of width {widths[s][1]} at width "
                f"{widths[s][0]}: no one mlp_ratio r gives every stage's int(dim · r) of "
                f"{widths[: s + 1]} (dim, hidden), as vit_tutorial's Swin needs"
            )
    return fit[0]


def _size(hw: tuple[int, int]) -> int | tuple[int, int]:
    return hw[0] if hw[0] == hw[1] else tuple(hw)


def _load(config: SwinConfig, state_dict: dict, library: str, source: nn.Module) -> SwinTransformer:
    """Our model of ``config`` holding copies of ``state_dict``, in ``source``'s mode, dtype and
    device (built on the CPU: its index buffers must be computed, not left on a meta device)."""
    weight = next(source.parameters())
    model = SwinTransformer(config).to(weight.device, weight.dtype)
    converted = swin_state_dict_from(state_dict, model, library)
    load_converted(model, {k: v.detach().clone() for k, v in converted.items()})
    return model.train(source.training)


def _check_kind(model: object, name: str, attributes: tuple[str, ...]) -> None:
    if not isinstance(model, nn.Module) or not all(hasattr(model, a) for a in attributes):
        raise TypeError(f"expected a {name} Swin Transformer (V1), got {type(model).__name__}")


def _check_blocks(model: nn.Module, library: str) -> None:
    """Refuse dropout, LayerNorms of unequal epsilons and an MLP activation other than the exact
    GELU in every layer, not the first block's."""
    rates = {}
    for name, m in model.named_modules():
        for attr in ("p",) if isinstance(m, nn.Dropout) else ("attention_dropout", "dropout"):
            if isinstance(p := getattr(m, attr, None), float) and p:
                rates[f"{name}.{attr}"] = p
    if rates:
        raise ValueError(
            f"vit_tutorial's Swin has no dropout, the {library} model has {len(rates)} rates, "
            f"first {dict(list(rates.items())[:3])}"
        )
    if len(eps := {m.eps for m in model.modules() if isinstance(m, nn.LayerNorm)}) > 1:
        raise ValueError(f"the {library} model's LayerNorms differ in eps {sorted(eps)}")
    mlps = [m for name, m in model.named_modules() if name.endswith("mlp")]
    leaves = {m for mlp in mlps for m in mlp.modules() if not list(m.children())}
    acts = {str(m) for m in leaves if not isinstance(m, (nn.Linear, nn.Dropout, nn.Identity))}
    if acts != {"GELU(approximate='none')"}:
        raise ValueError(f"vit_tutorial's Swin MLP has the exact GELU; the {library} one {acts}")


def swin_from_timm(model: nn.Module) -> SwinTransformer:
    """A :class:`~vit_tutorial.swin.SwinTransformer` with the weights of a timm Swin (V1):
    ``timm.create_model("swin_tiny_patch4_window7_224")`` and its siblings, at any size where
    timm's windows agree with ours (see the module's notes; else ``ValueError``, as for another
    pooling, head or dropout). Another kind of model raises ``TypeError``. Online only::

        ours = swin_from_timm(timm.create_model("swin_tiny_patch4_window7_224", pretrained=True))
    """
    _check_kind(model, "timm", ("layers", "patch_embed", "global_pool", "head"))
    fc = model.head.fc  # nn.Identity with num_classes=0: no head, as ours
    if model.global_pool != "avg" or not isinstance(fc, (nn.Linear, nn.Identity)):
        raise ValueError(
            f"only average pooling and a linear head are supported, got "
            f"global_pool={model.global_pool!r} and head {model.head.fc}"
        )
    blocks = [(s, i, b) for s, stage in enumerate(model.layers) for i, b in enumerate(stage.blocks)]
    a = blocks[0][2].attn
    if not hasattr(a, "relative_position_bias_table"):
        raise TypeError(f"expected a timm Swin Transformer V1, got {type(a).__name__}")
    _check_blocks(model, "timm")
    fc1 = [stage.blocks[0].mlp.fc1 for stage in model.layers]
    config = SwinConfig(
        image_size=_size(model.patch_embed.img_size),
        patch_size=_size(model.patch_embed.patch_size),
        in_channels=model.patch_embed.proj.in_channels,
        num_classes=getattr(fc, "out_features", 0),
        dim=model.patch_embed.proj.out_channels,
        depths=tuple(len(stage.blocks) for stage in model.layers),
        num_heads=tuple(stage.blocks[0].attn.num_heads for stage in model.layers),
        window_size=_windows([max(b.window_size) for _, i, b in blocks if i == 0]),
        mlp_ratio=_mlp_ratio([(fc.in_features, fc.out_features) for fc in fc1], "timm"),
        qkv_bias=a.qkv.bias is not None,
        drop_path=float(f"{getattr(blocks[-1][2].drop_path1, 'drop_prob', 0.0):.6g}"),
        norm_eps=model.norm.eps,
    )
    _check_timm_windows(config, blocks)
    return _load(config, model.state_dict(), "timm", model)


def _windows(per_stage: list[int]) -> int | tuple[int, ...]:
    """One window if every stage has it, else one per stage (timm shrinks a small grid's)."""
    return per_stage[0] if len(set(per_stage)) == 1 else tuple(per_stage)


def _check_timm_windows(config: SwinConfig, blocks: list) -> None:
    """Refuse a timm model whose windows or shifts are not ours: a window shrunk to a small grid,
    or a shift along an axis that is padded (timm rolls before padding, ours after)."""
    grids = config.stage_grids()
    for stage, i, block in blocks:
        M = config.stage_window(stage)
        grid, window, shift = grids[stage], tuple(block.window_size), tuple(block.shift_size)
        ours = tuple(0 if i % 2 == 0 or -(-n // M) * M <= M else M // 2 for n in grid)
        padded_shift = any(s and n % M for n, s in zip(grid, shift, strict=True))
        where = f"timm's stage {stage}, block {i}, on a {grid[0]}×{grid[1]} grid"
        if window != (M, M):
            raise ValueError(
                f"{where} shrinks the window to {window}; vit_tutorial (as torchvision) pads "
                f"the grid to the window {M}: the logits would differ"
            )
        if shift != ours or padded_shift:
            raise ValueError(
                f"{where} shifts by {shift} before padding to a multiple of the window {M}; "
                f"vit_tutorial (as torchvision) pads first, then shifts by {ours}: the logits "
                f"would differ"
            )


def swin_from_torchvision(
    model: nn.Module, image_size: int | tuple[int, int] = 224
) -> SwinTransformer:
    """A :class:`~vit_tutorial.swin.SwinTransformer` with the weights of a torchvision Swin (V1):
    ``torchvision.models.swin_t`` and its siblings. torchvision takes any image size; ours is
    built for ``image_size``. Another kind of model (Swin V2 included) raises ``TypeError``,
    dropout or a window unlike ours ``ValueError``. Online only::

        ours = swin_from_torchvision(swin_t(weights=Swin_T_Weights.IMAGENET1K_V1))
    """
    _check_kind(model, "torchvision", ("features", "head", "norm", "avgpool"))
    stages = list(model.features[1::2])
    first = stages[0][0]
    if type(first).__name__ != "SwinTransformerBlock" or hasattr(first.attn, "logit_scale"):
        raise TypeError(f"expected a torchvision Swin Transformer V1, got {type(first).__name__}")
    _check_blocks(model, "torchvision")
    conv, fc1 = model.features[0][0], [stage[0].mlp[0] for stage in stages]
    config = SwinConfig(
        image_size=image_size,
        patch_size=_size(conv.kernel_size),
        in_channels=conv.in_channels,
        num_classes=model.head.out_features,
        dim=conv.out_channels,
        depths=tuple(len(stage) for stage in stages),
        num_heads=tuple(stage[0].attn.num_heads for stage in stages),
        window_size=_windows([max(stage[0].attn.window_size) for stage in stages]),
        mlp_ratio=_mlp_ratio([(fc.in_features, fc.out_features) for fc in fc1], "torchvision"),
        qkv_bias=first.attn.qkv.bias is not None,
        drop_path=float(f"{stages[-1][-1].stochastic_depth.p:.6g}"),
        norm_eps=model.norm.eps,
    )
    for s, stage in enumerate(stages):  # every block: its stage's square window, our shifts
        M = config.stage_window(s)
        for i, b in enumerate(stage):
            if [*b.attn.window_size, *b.attn.shift_size] != [M, M] + [i % 2 * (M // 2)] * 2:
                raise ValueError(
                    f"torchvision's stage {s}, block {i} has window {b.attn.window_size} and "
                    f"shift {b.attn.shift_size}; vit_tutorial's stage has window {M}, shifted by "
                    f"{M // 2} in odd blocks"
                )
    return _load(config, model.state_dict(), "torchvision", model)
