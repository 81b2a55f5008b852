"""Load torchvision and timm Vision Transformers into :class:`~vit_tutorial.vit.VisionTransformer`.

The two libraries name the same tensors differently; each has an explicit key map below (``{i}``
a block number, ``{p}`` ``weight`` or ``bias``), used both ways. A conversion renames every key
and checks every shape, refusing to guess: source keys without a counterpart, parameters of ours
left without a value, or shapes that differ raise one ``ValueError`` listing them all. With the
same weights the logits agree to float rounding (at most 1e-4 apart in the tests and chapter 5).
timm is a development dependency, never imported here: the functions read the model's attributes.
"""

from __future__ import annotations

import math
import re

import torch
from torch import Tensor, nn

from vit_tutorial.vit import VisionTransformer

__all__ = [
    "TORCHVISION_KEYS",
    "TIMM_KEYS",
    "torchvision_state_dict_to_ours",
    "timm_state_dict_to_ours",
    "ours_state_dict_to_torchvision",
    "ours_state_dict_to_timm",
    "load_converted",
    "from_torchvision",
    "from_timm",
    "max_abs_logit_difference",
]

_TV_BLOCK = "encoder.layers.encoder_layer_{i}."
#: torchvision ``VisionTransformer`` key -> our key.
TORCHVISION_KEYS: dict[str, str] = {
    "class_token": "cls_token",
    "conv_proj.{p}": "patch_embed.proj.{p}",
    "encoder.pos_embedding": "pos_embed.weight",
    _TV_BLOCK + "ln_1.{p}": "encoder.blocks.{i}.norm1.{p}",
    _TV_BLOCK + "self_attention.in_proj_weight": "encoder.blocks.{i}.attn.qkv.weight",
    _TV_BLOCK + "self_attention.in_proj_bias": "encoder.blocks.{i}.attn.qkv.bias",
    _TV_BLOCK + "self_attention.out_proj.{p}": "encoder.blocks.{i}.attn.proj.{p}",
    _TV_BLOCK + "ln_2.{p}": "encoder.blocks.{i}.norm2.{p}",
    _TV_BLOCK + "mlp.0.{p}": "encoder.blocks.{i}.mlp.fc1.{p}",
    _TV_BLOCK + "mlp.3.{p}": "encoder.blocks.{i}.mlp.fc2.{p}",
    _TV_BLOCK + "mlp.linear_1.{p}": "encoder.blocks.{i}.mlp.fc1.{p}",  # torchvision < 0.13
    _TV_BLOCK + "mlp.linear_2.{p}": "encoder.blocks.{i}.mlp.fc2.{p}",
    "encoder.ln.{p}": "norm.{p}",
    "heads.head.{p}": "head.{p}",
}

_TIMM_SAME = "cls_token dist_token patch_embed.proj.{p} norm.{p} fc_norm.{p} head.{p} head_dist.{p}"
_TIMM_BLOCK = "norm1 attn.qkv attn.proj norm2 mlp.fc1 mlp.fc2"
#: timm ``VisionTransformer`` key -> our key: our names are timm's (``dist_token`` and
#: ``head_dist`` for DeiT's distilled models), the blocks' inside ``encoder``.
TIMM_KEYS: dict[str, str] = {
    **{key: key for key in _TIMM_SAME.split()},
    "pos_embed": "pos_embed.weight",
    **{f"blocks.{{i}}.{m}.{{p}}": f"encoder.blocks.{{i}}.{m}.{{p}}" for m in _TIMM_BLOCK.split()},
}


def _convert(state_dict: dict, key_map: dict[str, str], source: str, target: str) -> dict:
    rules = []
    for theirs, ours in key_map.items():
        pattern = re.escape(theirs).replace(r"\{i\}", r"(?P<i>\d+)")
        rules.append((re.compile(pattern.replace(r"\{p\}", "(?P<p>weight|bias)")), ours))
    out, unmatched = {}, []
    for key, value in state_dict.items():
        for pattern, ours in rules:
            if match := pattern.fullmatch(key):
                out[ours.format(**match.groupdict())] = value
                break
        else:
            unmatched.append(key)
    if unmatched:
        raise ValueError(
            f"{len(unmatched)} {source} keys have no counterpart in {target} "
            f"(an unsupported variant?): {unmatched}"
        )
    return out


def _inverse(key_map: dict[str, str]) -> dict[str, str]:
    """Our key -> their key; where two of theirs share one of ours, the first (current) one."""
    return {ours: theirs for theirs, ours in reversed(key_map.items())}


def torchvision_state_dict_to_ours(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
    """A torchvision ViT's state dict, its keys renamed by :data:`TORCHVISION_KEYS`."""
    return _convert(state_dict, TORCHVISION_KEYS, "torchvision", "vit_tutorial")


def timm_state_dict_to_ours(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
    """A timm ViT's state dict, its keys renamed by :data:`TIMM_KEYS`."""
    return _convert(state_dict, TIMM_KEYS, "timm", "vit_tutorial")


def ours_state_dict_to_torchvision(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
    """Our state dict with torchvision's keys (today's ``mlp.0``/``mlp.3``); a mean-pooled
    model's ``fc_norm`` has none (torchvision's ViT always classifies a class token)."""
    return _convert(state_dict, _inverse(TORCHVISION_KEYS), "vit_tutorial", "torchvision")


def ours_state_dict_to_timm(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
    """Our state dict with timm's keys, for the timm model of the same configuration."""
    return _convert(state_dict, _inverse(TIMM_KEYS), "vit_tutorial", "timm")


def load_converted(
    model: VisionTransformer, state_dict: dict[str, Tensor], assign: bool = False
) -> VisionTransformer:
    """Load a state dict with our keys into ``model`` after checking every key and shape (a
    ``ValueError`` lists missing keys, unexpected keys and shape mismatches); ``assign=True``
    takes the tensors themselves (:meth:`torch.nn.Module.load_state_dict`; a meta-device model)."""
    ours = model.state_dict()
    missing, unexpected = sorted(set(ours) - set(state_dict)), sorted(set(state_dict) - set(ours))
    shapes = [
        f"{k}: got {tuple(state_dict[k].shape)}, expected {tuple(ours[k].shape)}"
        for k in ours
        if k in state_dict and state_dict[k].shape != ours[k].shape
    ]
    if missing or unexpected or shapes:
        raise ValueError(
            f"state dict does not fit the model: missing keys {missing}, "
            f"unexpected keys {unexpected}, shape mismatches {shapes}"
        )
    model.load_state_dict(state_dict, assign=assign)
    return model


def _mlp_ratio(dim: int, hidden_dim: int) -> float:
    """The ``mlp_ratio`` whose ``int(dim * mlp_ratio)`` is ``hidden_dim``."""
    ratio = hidden_dim / dim
    if int(dim * ratio) != hidden_dim:  # dim · (hidden / dim) rounded just below hidden
        ratio = math.nextafter(ratio, math.inf)
    return ratio


def _size(hw: tuple[int, int]) -> int | tuple[int, int]:
    return hw[0] if hw[0] == hw[1] else tuple(hw)


def _model(fields: dict, state_dict: dict[str, Tensor], source: nn.Module) -> VisionTransformer:
    """Our model of ``fields`` holding copies of ``state_dict`` (the source's device and dtype),
    in ``source``'s train/eval mode; built on the meta device, so no random initialisation is
    wasted (its position table is learned or absent: no buffer is left there)."""
    with torch.device("meta"):
        model = VisionTransformer(**fields)  # validates the fields once
    load_converted(model, {k: v.detach().clone() for k, v in state_dict.items()}, assign=True)
    return model.train(source.training)


def from_torchvision(model: nn.Module) -> VisionTransformer:
    """A :class:`~vit_tutorial.vit.VisionTransformer` with the weights of a torchvision ViT:
    ``torchvision.models.vit_b_16`` and its siblings (patch stem, no ``representation_size``); a
    convolutional stem, or keys/shapes that do not map, raise ``ValueError``. Online only::

        from torchvision.models import ViT_B_16_Weights, vit_b_16
        ours = from_torchvision(vit_b_16(weights=ViT_B_16_Weights.IMAGENET1K_V1))
    """
    if not isinstance(model.conv_proj, nn.Conv2d):
        raise ValueError("torchvision's conv_stem_configs stem is not supported, only conv_proj")
    attn = model.encoder.layers[0].self_attention
    fields = dict(
        image_size=model.image_size,
        patch_size=model.patch_size,
        in_channels=model.conv_proj.in_channels,
        num_classes=model.num_classes,
        dim=model.hidden_dim,
        depth=len(model.encoder.layers),
        num_heads=attn.num_heads,
        mlp_ratio=_mlp_ratio(model.hidden_dim, model.mlp_dim),
        qkv_bias=attn.in_proj_bias is not None,
        dropout=model.dropout,
        attn_dropout=model.attention_dropout,
        norm_eps=model.encoder.ln.eps,
    )
    return _model(fields, torchvision_state_dict_to_ours(model.state_dict()), model)


def from_timm(model: nn.Module) -> VisionTransformer:
    """A :class:`~vit_tutorial.vit.VisionTransformer` with the weights of a timm ViT:
    ``timm.create_model("vit_base_patch16_224")`` and the other plain ViTs (class-token pooling,
    ``global_pool='token'``, or average pooling without a class token, ``global_pool='avg',
    class_token=False``; exact GELU; no registers or layer scale) and DeiT's distilled models
    (``deit_base_distilled_patch16_224``: ``distilled=True``), with a head or without
    (``num_classes=0``: the pooled features). Another pooling, activation, head or dropout, or
    keys/shapes that do not map, raise ``ValueError``."""
    pooling = (model.global_pool, model.has_class_token)
    pool = {("token", True): "cls", ("avg", False): "mean"}.get(pooling)
    if pool is None:
        raise ValueError(
            f"unsupported timm pooling global_pool={pooling[0]!r} with class_token={pooling[1]}"
        )
    block = model.blocks[0]
    if not (isinstance(block.mlp.act, nn.GELU) and block.mlp.act.approximate == "none"):
        raise ValueError(f"only the exact GELU is supported, the timm model uses {block.mlp.act}")
    last = model.blocks[-1]
    dropout = last.attn.proj_drop.p
    others = {"pos_drop_rate": model.pos_drop.p, "drop_rate (head)": model.head_drop.p}
    if others["pos_drop_rate"] != dropout or others["drop_rate (head)"] != 0.0:
        raise ValueError(
            "vit_tutorial has one dropout rate for the position embedding and the blocks and "
            f"none before the head; the timm model uses proj_drop_rate={dropout} and {others}"
        )
    fields = dict(
        image_size=_size(model.patch_embed.img_size),
        patch_size=_size(model.patch_embed.patch_size),
        in_channels=model.patch_embed.proj.in_channels,
        num_classes=model.num_classes,
        dim=model.embed_dim,
        depth=len(model.blocks),
        num_heads=block.attn.num_heads,
        mlp_ratio=_mlp_ratio(model.embed_dim, block.mlp.fc1.out_features),
        qkv_bias=block.attn.qkv.bias is not None,
        pool=pool,
        dropout=dropout,
        attn_dropout=last.attn.attn_drop.p,
        drop_path=float(f"{getattr(last.drop_path1, 'drop_prob', 0.0):.6g}"),
        pos_embed="learned" if model.pos_embed is not None else "none",
        dynamic_image_size=bool(getattr(model, "dynamic_img_size", False)),
        norm_eps=block.norm1.eps,
        distilled=getattr(model, "dist_token", None) is not None,
    )
    return _model(fields, timm_state_dict_to_ours(model.state_dict()), model)


def max_abs_logit_difference(a: nn.Module, b: nn.Module, images: Tensor) -> float:
    """``max |a(images) - b(images)|`` in eval mode without gradients (both restored after)."""
    modes = a.training, b.training
    a.eval(), b.eval()
    with torch.no_grad():
        diff = (a(images) - b(images)).abs().max().item()
    a.train(modes[0]), b.train(modes[1])
    return diff
