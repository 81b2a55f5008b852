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
from functools import partial

import torch
from torch import Tensor, nn

from vit_tutorial.encoder import drop_path_rates
from vit_tutorial.vit import VisionTransformer

__all__ = ["TORCHVISION_KEYS", "TIMM_KEYS", "EVA_KEYS", "load_converted"]
__all__ += ["max_abs_logit_difference"]
__all__ += ["torchvision_state_dict_to_ours", "timm_state_dict_to_ours", "ours_state_dict_to_timm"]
__all__ += ["ours_state_dict_to_torchvision", "from_torchvision", "from_timm", "from_timm_eva"]

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

_TIMM_SAME = "cls_token dist_token reg_token patch_embed.proj.{p} norm.{p} fc_norm.{p} head.{p}"
_TIMM_SAME += " head_dist.{p} attn_pool.latent" + "".join(
    f" attn_pool.{m}.{{p}}" for m in ("q", "kv", "proj", "norm", "mlp.fc1", "mlp.fc2")
)
_TIMM_BLOCK = "norm1 attn.qkv attn.q_norm attn.k_norm attn.proj norm2 mlp.fc1 mlp.fc2 mlp.fc1_g"
_TIMM_BLOCK += " mlp.fc1_x"
#: timm ``VisionTransformer`` key -> our key: our names are timm's (``dist_token`` and
#: ``head_dist`` for DeiT's distilled models, ``reg_token``, ``ls1.gamma``, ``attn_pool`` ...
#: for chapter 11's), the blocks' inside ``encoder``.
TIMM_KEYS: dict[str, str] = {
    **{key: key for key in _TIMM_SAME.split()},
    "pos_embed": "pos_embed.weight",
    **{f"blocks.{{i}}.{m}.{{p}}": f"encoder.blocks.{{i}}.{m}.{{p}}" for m in _TIMM_BLOCK.split()},
    **{f"blocks.{{i}}.ls{n}.gamma": f"encoder.blocks.{{i}}.ls{n}.gamma" for n in (1, 2)},
}
#: timm ``Eva`` key -> our key, for its RoPE ViTs (``vit_base_patch16_rope_224``): LayerScale is
#: ``gamma_1``/``gamma_2``, the mixed RoPE's frequencies one tensor over the blocks (``rope.freqs``
#: ``(2, depth, h, d/2)``: split by :func:`from_timm_eva`).
EVA_KEYS: dict[str, str] = {
    **{k: v for k, v in TIMM_KEYS.items() if not k.startswith("blocks.{i}.ls")},
    **{f"blocks.{{i}}.gamma_{n}": f"encoder.blocks.{{i}}.ls{n}.gamma" for n in (1, 2)},
    "rope.freqs.{i}": "rope.{i}.freqs",
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
        where = f"have no counterpart in {target} (an unsupported variant?)"
        raise ValueError(f"{len(unmatched)} {source} keys {where}: {unmatched}")
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
    odd = [k for k in ours if k in state_dict and state_dict[k].shape != ours[k].shape]
    shapes = [
        f"{k}: got {tuple(state_dict[k].shape)}, expected {tuple(ours[k].shape)}" for k in odd
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


def _expect(model: object, kind: str, attributes: str, reader: str) -> None:
    """``TypeError`` unless ``model`` has the ``attributes`` of the library's ``kind``."""
    if not all(hasattr(model, name) for name in attributes.split()):
        raise TypeError(f"{reader} takes a {kind}, got {type(model).__name__}")


def _size(hw: tuple[int, int]) -> int | tuple[int, int]:
    return hw[0] if hw[0] == hw[1] else tuple(hw)


def _model(fields: dict, state_dict: dict[str, Tensor], source: nn.Module) -> VisionTransformer:
    """Our model of ``fields`` holding copies of ``state_dict`` (the source's device and dtype),
    in ``source``'s mode; built on the meta device (no initialisation wasted), but with RoPE on
    the source's: its fixed frequencies are a buffer the state dict does not hold."""
    where = next((t.device for t in source.parameters()), torch.device("cpu"))
    with torch.device("meta" if fields.get("rope", "none") == "none" else where):
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
    _expect(model, "torchvision VisionTransformer", "conv_proj encoder", "from_torchvision")
    if not isinstance(model.conv_proj, nn.Conv2d):
        raise ValueError("torchvision's conv_stem_configs stem is not supported, only conv_proj")
    layers, ln = model.encoder.layers, model.encoder.ln
    attn, eps = layers[0].self_attention, getattr(ln, "eps", None)
    with torch.device("meta"):  # torchvision's block of the options read, to compare each with
        norm = partial(nn.LayerNorm, eps=eps or 1e-6)
        options = model.hidden_dim, model.mlp_dim, model.dropout, model.attention_dropout
        like = type(layers[0])(attn.num_heads, *options, norm)
    want = (str(like), model.attention_dropout, attn.num_heads)
    kinds = [(str(b), b.self_attention.dropout, b.self_attention.num_heads) for b in layers]
    if (odd := [i for i, k in enumerate(kinds) if k != want]) or type(ln) is not nn.LayerNorm:
        has = f"{type(ln).__name__} and layers {odd} unlike"
        raise ValueError(f"vit_tutorial has a LayerNorm and the blocks of its options, not {has}")
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
        norm_eps=eps,
    )
    return _model(fields, torchvision_state_dict_to_ours(model.state_dict()), model)


def from_timm(model: nn.Module) -> VisionTransformer:
    """A :class:`~vit_tutorial.vit.VisionTransformer` with the weights of a timm ViT:
    ``timm.create_model("vit_base_patch16_224")`` and the other plain ViTs, DeiT's distilled
    models (``distilled=True``) and chapter 11's (DeiT III, registers, QK-norm, RMSNorm, SwiGLU,
    the MAP head: ``deit3_small_patch16_224``, ``vit_small_patch14_reg4_dinov2``, ``test_vit4``,
    ``vit_base_patch16_siglip_224`` ...), with a head or without (``num_classes=0``); every
    dropout carried over (in training, timm's masks under one seed). Any option the package
    cannot reproduce (another pooling, activation, block, norm or dropout, ``pre_norm``,
    ``dynamic_img_pad`` ..., blocks unlike block 0), or keys/shapes that do not map, raise
    ``ValueError`` naming it; another library's model, ``TypeError``."""
    if type(model).__name__ == "Eva":
        raise ValueError("an Eva model (timm/models/eva.py): load it with from_timm_eva")
    _expect(model, "timm VisionTransformer", "blocks global_pool has_class_token", "from_timm")
    pooling = f"global_pool={model.global_pool!r} with class_token={model.has_class_token}"
    pools = {"'token' with class_token=True": "cls", "'avg' with class_token=False": "mean"}
    pools["'map' with class_token=False"] = "map"
    if (pool := pools.get(pooling.split("=", 1)[1])) is None:
        raise ValueError(f"unsupported timm pooling {pooling}")
    fields = _timm_common(model)
    norms = tuple(not isinstance(getattr(model, n), nn.Identity) for n in ("norm", "fc_norm"))
    if norms != ((False, True) if pool == "mean" else (True, False)):  # timm's final_norm, fc_norm
        where = "after pooling (fc_norm)" if pool == "mean" else "before pooling (final_norm)"
        has = f"final_norm={norms[0]}, fc_norm={norms[1]}"
        raise ValueError(f"for pool={pool!r} vit_tutorial normalises {where} only; timm's: {has}")
    fields.update(
        pool=pool,
        pos_embed="learned" if model.pos_embed is not None else "none",
        dynamic_image_size=bool(getattr(model, "dynamic_img_size", False)),
        distilled=getattr(model, "dist_token", None) is not None,
        reg_tokens=getattr(model, "num_reg_tokens", 0),
        no_embed_class=bool(getattr(model, "no_embed_class", False)),
        pool_include_prefix=bool(getattr(model, "pool_include_prefix", False)),
        init_values=_init_values(getattr(model.blocks[0].ls1, "gamma", None)),
    )
    return _model(fields, timm_state_dict_to_ours(model.state_dict()), model)


def from_timm_eva(model: nn.Module) -> VisionTransformer:
    """Our model with the weights of one of timm's RoPE ViTs, built by its ``Eva`` class
    (``timm/models/eva.py``): ``vit_base_patch16_rope_224`` (axial RoPE, Heo et al. 2024) and
    ``vit_base_patch16_rope_mixed_224`` (mixed), class-token pooling, no position table. Other
    Eva models (EVA-02's SwiGLU and its separate q, k, v biases, its positions rescaled to a
    reference grid, ``ref_feat_shape``; 'ij' grid order ...) raise ``ValueError``."""
    _expect(model, "timm Eva", "blocks patch_embed rope", "from_timm_eva")
    rope_type = type(model.rope).__name__
    kinds = {"RotaryEmbeddingCat": "axial", "RotaryEmbeddingMixed": "mixed"}
    block, rope = model.blocks[0], model.rope
    indexing = getattr(rope, "grid_indexing", "xy")
    checks = {  # what Heo et al.'s models have, and the package's RoPE computes
        f"rope {rope_type}": rope_type in kinds,
        f"attention {type(block.attn).__name__}": type(block.attn).__name__ == "AttentionRope",
        "a position table": model.pos_embed is None,
        f"global_pool={model.global_pool!r}": model.global_pool == "token",
        "no class token": model.cls_token is not None,
        "positions in pixels": getattr(rope, "in_pixels", False) is False,
        f"grid_indexing={indexing!r} (not 'xy')": indexing == "xy",
        "positions rescaled to ref_feat_shape": getattr(rope, "ref_feat_shape", None) is None,
        "rotate_half": getattr(block.attn, "rotate_half", False) is False,
        "qkv_fused=False": getattr(block.attn, "qkv", None) is not None,
        "rope_grid_offset": getattr(rope, "grid_offset", 0.0) == 0.0,
        "linear_bands": not getattr(rope, "linear_bands", False),
        "RoPE coordinate augmentation (rope_shift/jitter/rescale_coords)": not any(
            getattr(rope, f"{kind}_coords", None) for kind in ("shift", "jitter", "rescale")
        ),
    }
    if failed := [name for name, ok in checks.items() if not ok]:
        raise ValueError(
            f"only timm's naver RoPE ViTs are supported (vit_*_rope_224, vit_*_rope_mixed_224); "
            f"this model has {', '.join(failed)}"
        )
    fields = _timm_common(model)
    temperature = getattr(model.rope, "temperature", None)
    if kinds[rope_type] == "axial" and temperature != 100.0:
        raise ValueError(f"axial RoPE at temperature 100 only, got {temperature}")
    fields.update(pool="cls", pos_embed="none", rope=kinds[rope_type])
    fields.update(dynamic_image_size=bool(getattr(model, "dynamic_img_size", False)))
    fields.update(init_values=_init_values(getattr(block, "gamma_1", None)))
    state_dict = dict(model.state_dict())
    if kinds[rope_type] == "mixed":  # (2, depth, h, d/2) -> one (2, h, d/2) per block
        freqs = state_dict.pop("rope.freqs")
        state_dict.update({f"rope.freqs.{i}": freqs[:, i] for i in range(freqs.shape[1])})
    ours = _convert(state_dict, EVA_KEYS, "timm Eva", "vit_tutorial")
    return _model(fields, ours, model)


def _init_values(gamma: Tensor | None) -> float | None:
    """LayerScale's ``init_values`` for the config: ``gamma``'s value while it is constant (a
    fresh model), else 1e-5 (DINOv2's); the loaded ``gamma`` replaces it either way."""
    if gamma is None or gamma.is_meta:  # on the meta device: no value to read
        return None if gamma is None else 1e-5
    first = gamma.detach().flatten()[0]
    constant = bool((gamma == first).all()) and first > 0
    return float(f"{first.item():.6g}") if constant else 1e-5  # float32 1e-5 -> 1e-5


def _timm_common(model: nn.Module) -> dict:
    """The fields timm's ``VisionTransformer`` and ``Eva`` share, with the checks of both."""
    block, identity = model.blocks[0], (type(None), nn.Identity)
    kinds = (type(block).__name__, type(getattr(block, "attn", None)).__name__)
    if kinds[0] not in ("Block", "EvaBlock") or kinds[1] not in ("Attention", "AttentionRope"):
        raise ValueError(f"vit_tutorial has timm's Block with Attention, not {', '.join(kinds)}")
    if odd := [i for i, b in enumerate(model.blocks) if _block_kind(b) != _block_kind(block)]:
        raise ValueError(f"vit_tutorial's blocks are alike; timm's blocks {odd} differ from 0's")
    proj, eps = model.patch_embed.proj, block.norm1.eps
    norms = model.norm, getattr(model, "fc_norm", None), block.norm2, block.attn.q_norm
    epsilons = {getattr(n, "eps", eps) for n in (*norms, block.attn.k_norm)}
    conv = (proj.stride, proj.padding, proj.dilation, proj.groups)
    checks = {  # what the package's block and stem compute; each other option is refused
        "pre_norm=True": isinstance(getattr(model, "norm_pre", None), identity),
        "an embed_norm_layer": isinstance(getattr(model.patch_embed, "norm", None), identity),
        "dynamic_img_pad=True": not getattr(model.patch_embed, "dynamic_img_pad", False),
        "proj_bias=False": block.attn.proj.bias is not None,
        "scale_attn_norm=True": isinstance(getattr(block.attn, "norm", None), identity),
        "scale_mlp_norm=True": isinstance(getattr(block.mlp, "norm", None), identity),
        f"norm_layer={type(block.norm1).__name__}": type(block.norm1).__name__
        in ("LayerNorm", "RmsNorm", "RMSNorm"),
        f"norms of several eps {sorted(epsilons)}": epsilons == {eps},
        "a patch projection other than a stride-P P×P convolution": conv
        == (proj.kernel_size, (0, 0), (1, 1), 1),
    }
    if failed := [name for name, ok in checks.items() if not ok]:
        raise ValueError(f"vit_tutorial cannot reproduce a timm model with {', '.join(failed)}")
    mlp, act = type(block.mlp).__name__, block.mlp.act
    if mlp == "Mlp" and not (isinstance(act, nn.GELU) and act.approximate == "none"):
        raise ValueError(f"only the exact GELU is supported, the timm model uses {act}")
    if mlp not in ("Mlp", "SwiGLU") or (mlp == "SwiGLU" and not isinstance(act, nn.SiLU)):
        raise ValueError(f"only Mlp with GELU or SwiGLU with SiLU is supported, got {mlp}, {act}")
    norm = "rmsnorm" if "rms" in type(block.norm1).__name__.lower() else "layernorm"
    hidden = block.mlp.fc1.out_features if mlp == "Mlp" else block.mlp.fc1_g.out_features
    return dict(
        image_size=_size(model.patch_embed.img_size),
        patch_size=_size(model.patch_embed.patch_size),
        in_channels=proj.in_channels,
        num_classes=model.num_classes,
        dim=model.embed_dim,
        depth=len(model.blocks),
        num_heads=block.attn.num_heads,
        mlp_ratio=_mlp_ratio(model.embed_dim, hidden),
        qkv_bias=block.attn.qkv.bias is not None,
        **_dropout_rates(model),
        norm_eps=block.norm1.eps,
        qk_norm=not isinstance(block.attn.q_norm, nn.Identity),
        norm=norm,
        mlp="gelu" if mlp == "Mlp" else "swiglu",
        patch_drop_rate=float(getattr(getattr(model, "patch_drop", None), "prob", 0.0)),
    )


def _block_kind(block: nn.Module) -> tuple:
    """What a config says of a timm block: its parts' kinds, heads, activation, norm epsilon."""
    attn, mlp = block.attn, block.mlp
    parts = (block, attn, mlp, getattr(mlp, "act", None))
    norms = (block.norm1, block.norm2, attn.q_norm, attn.k_norm)  # a repr names the eps
    return (*map(type, parts), attn.num_heads, str(mlp.act), *map(str, norms))


def _dropout_rates(model: nn.Module) -> dict[str, float]:
    """``dropout``, ``attn_dropout``, ``drop_path`` of a timm model, every dropout in it checked
    against the package's: one rate for the position embedding, projections and MLP, one on the
    attention weights, drop path rising linearly, none before the head or in the MAP head."""
    last = model.blocks[-1]
    rates = dict(dropout=last.attn.proj_drop.p, attn_dropout=last.attn.attn_drop.p)
    rates["drop_path"] = float(f"{getattr(last.drop_path1, 'drop_prob', 0.0):.6g}")
    paths = drop_path_rates(rates["drop_path"], len(model.blocks))
    want = {f"blocks.{i}.drop_path{n}": p for i, p in enumerate(paths) for n in (1, 2)}
    found = dict.fromkeys(want, 0.0)  # an nn.Identity where the rate is 0
    for name, module in model.named_modules():
        if isinstance(module, nn.Dropout) or hasattr(module, "drop_prob"):
            found[name] = module.p if isinstance(module, nn.Dropout) else module.drop_prob
    for name in set(found) - set(want):
        none = name.startswith(("head_drop", "attn_pool"))
        kind = "attn_dropout" if name.endswith("attn_drop") else "dropout"
        want[name] = 0.0 if none else rates[kind]
    close = {n: math.isclose(p, want[n], rel_tol=1e-6, abs_tol=1e-9) for n, p in found.items()}
    if wrong := [f"{n} {p:g} (not {want[n]:g})" for n, p in found.items() if not close[n]]:
        raise ValueError(
            "vit_tutorial has one dropout rate for the position embedding and the blocks, none "
            f"before the head, and drop path rising linearly; the timm model has {wrong}"
        )
    return rates


def max_abs_logit_difference(a: nn.Module, b: nn.Module, images: Tensor) -> float:
    """``max |a(images) - b(images)|`` in eval mode without gradients (both restored after)."""
    modes = a.training, b.training
    a.eval(), b.eval()
    with torch.no_grad():
        diff = (a(images) - b(images)).abs().max().item()
    a.train(modes[0]), b.train(modes[1])
    return diff
