"""Checker for chapter 8's baseline: torchvision's ResNet-18 with a first convolution
for greyscale images, compared with
:func:`~vit_tutorial.experiments.ch08.resnet18_greyscale`."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from vit_tutorial.exercises._common import (
    call_safely,
    checker,
    close,
    expect_tensor,
    passed,
    refuse,
)
from vit_tutorial.experiments.ch08 import resnet18_greyscale

__all__ = ["check_greyscale_resnet"]


def _pair(value: Any) -> Any:
    """``(v, v)`` for an int, as ``nn.Conv2d`` and ``nn.MaxPool2d`` read their sizes."""
    return (value, value) if isinstance(value, int) else tuple(value)


def _grid(conv: nn.Conv2d, pool: nn.Module, size: int = 28) -> int | None:
    """The side of the grid that ``conv`` then ``pool`` make of a ``size``×``size`` image."""
    if isinstance(conv.padding, str):  # 'same' or 'valid': no formula needed here
        return None
    sizes = (conv.kernel_size, conv.stride, conv.padding, conv.dilation)
    (k, _), (s, _), (p, _), (d, _) = (_pair(v) for v in sizes)
    side = (size + 2 * p - d * (k - 1) - 1) // s + 1  # a dilated kernel spans d·(k-1)+1 pixels
    if isinstance(pool, nn.MaxPool2d):
        (k, _), (s, _), (p, _) = (_pair(v) for v in (pool.kernel_size, pool.stride, pool.padding))
        side = (side + 2 * p - k) // s + 1
    return side


def _check_stem(model: nn.Module, in_channels: int, where: str) -> None:
    """conv1 must be ``Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)``, and the
    max-pool after it torchvision's."""
    conv = model.conv1
    if not isinstance(conv, nn.Conv2d):
        raise AssertionError(
            f"for {where}: model.conv1 must be one nn.Conv2d, got {type(conv).__name__}; replace "
            "it by nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)"
        )
    kernel, stride, grid = _pair(conv.kernel_size), _pair(conv.stride), _grid(conv, model.maxpool)
    yours = f" (yours gives {grid}×{grid})" if grid not in (None, 7) else ""
    span, rgb = 6 * _pair(conv.dilation)[0] + 1, "still " if conv.in_channels == 3 else ""
    slips = {
        f"conv1 {rgb}takes {conv.in_channels} channels, but conv1 must take in_channels = "
        f"{in_channels}: replace model.conv1 by nn.Conv2d(in_channels, 64, kernel_size=7, "
        "stride=2, padding=3, bias=False); repeating a grey image three times to fit an RGB "
        "conv1 is not what is asked": conv.in_channels != in_channels,
        f"conv1 makes {conv.out_channels} channels; it must make 64, the channels that bn1 and "
        "layer1 expect": conv.out_channels != 64,
        f"conv1 is a {kernel[0]}×{kernel[1]} convolution of stride {stride[0]}: the stem must "
        "stay torchvision's 7×7 convolution of stride 2 (padding 3), so that it and the max-pool "
        f"take a 28×28 image to a 7×7 grid{yours}, the ViT's grid of 4×4-pixel patches": (
            kernel != (7, 7) or stride != (2, 2)
        ),
        f"conv1 has padding={conv.padding}; torchvision's 7×7 stem pads by 3, which takes a "
        "28×28 image to 14×14 (then 7×7 after the max-pool)": conv.padding != (3, 3),
        f"conv1 is dilated (dilation={conv.dilation}): its 7×7 taps spread over {span}×{span} "
        f"pixels, and with the max-pool it takes a 28×28 image to a {grid}×{grid} grid, not "
        "7×7; build it without dilation, as torchvision does": _pair(conv.dilation) != (1, 1),
        f"conv1 pads with padding_mode={conv.padding_mode!r}; torchvision's stem pads with "
        "zeros (the default, padding_mode='zeros')": conv.padding_mode != "zeros",
        "conv1 has a bias: build it with bias=False, as torchvision does; the BatchNorm right "
        "after it (bn1) adds its own shift β, which makes a bias redundant": conv.bias is not None,
    }
    refuse(slips, f"for {where}")
    _check_pool(model, where)


def _check_pool(model: nn.Module, where: str) -> None:
    """The max-pool after conv1 must be torchvision's, untouched."""
    conv, pool = model.conv1, model.maxpool
    if not isinstance(pool, nn.MaxPool2d):
        grid = _grid(conv, pool)
        raise AssertionError(
            f"for {where}: the max-pool after conv1 is gone (model.maxpool is "
            f"{type(pool).__name__}): keep torchvision's 3×3 max-pool of stride 2; with the "
            f"7×7 stride-2 conv1 it takes a 28×28 image to a 7×7 grid (yours: {grid}×{grid})"
        )
    sizes = (_pair(pool.kernel_size), _pair(pool.stride), _pair(pool.padding))
    if sizes != ((3, 3), (2, 2), (1, 1)):
        raise AssertionError(
            f"for {where}: the max-pool must stay torchvision's: kernel 3, stride 2, padding 1; "
            "only conv1 changes"
        )


def _check_head(model: nn.Module, num_classes: int, where: str) -> None:
    """The head ``fc`` must be a ``Linear(512, num_classes)``."""
    fc = model.fc
    if not isinstance(fc, nn.Linear):
        raise AssertionError(
            f"for {where}: model.fc must be the Linear head, got {type(fc).__name__}"
        )
    if fc.out_features == num_classes:
        return
    still, imagenet = ("still ", ", ImageNet's classes,") if fc.out_features == 1000 else ("", ",")
    raise AssertionError(
        f"for {where}: the head fc {still}has {fc.out_features} outputs{imagenet} not "
        f"num_classes = {num_classes}: build the model with resnet18(num_classes=num_classes), "
        "whose fc is a Linear(512, num_classes)"
    )


def _shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def _check_the_rest(model: nn.Module, in_channels: int, num_classes: int, where: str) -> None:
    """Every parameter but conv1's has the name and shape of the reference's."""
    with torch.device("meta"):  # shapes only: no memory, no initialisation cost
        want = _shapes(resnet18_greyscale(in_channels, num_classes))
    got = _shapes(model)
    if got == want:
        return
    missing, extra = sorted(want.keys() - got.keys()), sorted(got.keys() - want.keys())
    reshaped = [
        f"{name} {got[name]} instead of {want[name]}"
        for name in sorted(want.keys() & got.keys())
        if got[name] != want[name]
    ]
    parts = [
        f"{what}: {', '.join(names[:3])}{', ...' if len(names) > 3 else ''}"
        for what, names in [("missing", missing), ("extra", extra), ("reshaped", reshaped)]
        if names
    ]
    count_got = sum(p.numel() for p in model.parameters())
    count_want = sum(torch.Size(shape).numel() for shape in want.values())
    raise AssertionError(
        f"for {where}: the model has {count_got:,} parameters, torchvision's ResNet-18 with "
        f"the new conv1 {count_want:,}; only conv1 may change ({'; '.join(parts)})"
    )


def _trace(model: nn.Module, images: Tensor) -> tuple[dict[tuple[str, int], Tensor], Tensor]:
    """``model(images)``, and what each of its modules returned, by name and call (0, 1, ...),
    in the order they returned it; ``''`` is the model itself."""
    outputs: dict[tuple[str, int], Tensor] = {}
    calls: Counter[str] = Counter()

    def hook(name: str) -> Callable:
        def record(module: nn.Module, args: Any, output: Any) -> None:
            if isinstance(output, Tensor):  # a copy: an in-place ReLU would overwrite it
                outputs[name, calls[name]] = output.detach().clone()
                calls[name] += 1

        return record

    handles = [module.register_forward_hook(hook(name)) for name, module in model.named_modules()]
    try:
        return outputs, model(images)
    finally:
        for handle in handles:
            handle.remove()


def _where(name: str, call: int) -> str:
    """A module as a learner writes it, ``model.layer1[0].relu``, and which call of it."""
    shown = "the model's output" if not name else "model." + re.sub(r"\.(\d+)", r"[\1]", name)
    if call == 0:
        return shown
    return f"{shown} (call {call + 1}{', after adding the shortcut' if 'relu' in name else ''})"


def _divergence(model: nn.Module, reference: nn.Module, name: str, got: Any, want: Tensor) -> str:
    """How the learner's module ``name`` differs from the reference's, which gave ``want``."""
    if got is None:
        return "is never run in your model"
    if got.shape != want.shape:
        what = f"gives {tuple(got.shape)}, torchvision's {tuple(want.shape)}"
    else:
        what = f"gives other values (off by up to {(got - want).abs().max().item():.3g})"
    mine = dict(model.named_modules()).get(name)
    theirs = reference.get_submodule(name)
    if mine is None or next(theirs.children(), None) is not None or repr(mine) == repr(theirs):
        return what
    return f"{what}: yours is {mine!r}, torchvision's {theirs!r}"


def _check_computation(model: nn.Module, in_channels: int, num_classes: int, where: str) -> None:
    """With the learner's weights loaded into the reference, each module must compute what the
    reference's module of that name computes, on a seeded 64×64 batch (every pool at work)."""
    weight = model.conv1.weight
    reference = resnet18_greyscale(in_channels, num_classes).to(weight.device, weight.dtype)
    wanted = reference.state_dict()
    learned = {
        k: v for k, v in model.state_dict().items() if k in wanted and wanted[k].shape == v.shape
    }
    reference.load_state_dict(learned, strict=False)
    reference.eval()
    seeded = torch.Generator().manual_seed(0)
    images = torch.randn(2, in_channels, 64, 64, generator=seeded).to(weight.device, weight.dtype)
    batch, was_training = f"a (2, {in_channels}, 64, 64) batch", model.training
    try:
        got, _ = call_safely(_trace, (model.eval(), images), batch)
    finally:
        model.train(was_training)
    for (name, call), want in _trace(reference, images)[0].items():
        scale = 1e-4 * (1.0 + want.abs().max().item())  # float32 through 20 layers
        if got.get((name, call)) is None or not close(got[name, call], want, atol=scale):
            problem = _divergence(model, reference, name, got.get((name, call)), want)
            raise AssertionError(
                f"for {where}: with the same weights, on {batch}, {_where(name, call)} "
                f"{problem}; only conv1 may change"
            )


@checker
def check_greyscale_resnet(fn: Callable[[int, int], nn.Module]) -> None:
    """Grade a learner's ``fn(in_channels, num_classes) -> nn.Module``.

    torchvision's ResNet-18 with ``conv1`` replaced by ``nn.Conv2d(in_channels, 64, 7,
    stride=2, padding=3, bias=False)``, nothing else changed: compared in structure with
    :func:`~vit_tutorial.experiments.ch08.resnet18_greyscale`, then layer by layer with its
    weights loaded into the reference.

    Example:
        >>> check_greyscale_resnet(resnet18_greyscale)
        Correct! check_greyscale_resnet: torchvision's ResNet-18 with a 7×7 stride-2
        conv1 of 1 and 3 channels; 11,175,370 parameters for 1 channel and 10 classes.
    """
    from torchvision.models import ResNet  # an optional dependency: imported when needed

    counts = []
    for in_channels, num_classes in [(1, 10), (3, 5)]:
        where = f"in_channels={in_channels}, num_classes={num_classes}"
        model = call_safely(fn, (in_channels, num_classes), where)
        if not isinstance(model, ResNet):
            wrapped = isinstance(model, nn.Module) and any(
                isinstance(m, ResNet) for m in model.modules()
            )
            hint = (
                ": replace its conv1 rather than wrapping it; conv1 must take in_channels"
                if wrapped
                else ", from torchvision.models.resnet18(num_classes=num_classes)"
            )
            raise AssertionError(
                f"for {where}: return the ResNet itself (a torchvision.models.ResNet), got "
                f"{type(model).__name__}{hint}"
            )
        _check_stem(model, in_channels, where)
        _check_head(model, num_classes, where)
        _check_the_rest(model, in_channels, num_classes, where)
        images = torch.randn(2, in_channels, 28, 28, dtype=model.conv1.weight.dtype)
        was_training = model.training
        logits = call_safely(model.eval(), (images,), f"a (2, {in_channels}, 28, 28) batch")
        model.train(was_training)
        expect_tensor(
            logits,
            (2, num_classes),
            f"for {where}: a (2, {in_channels}, 28, 28) batch gives {{got}}, not the "
            f"logits (2, {num_classes}), one row per image",
        )
        _check_computation(model, in_channels, num_classes, where)
        counts.append(sum(p.numel() for p in model.parameters()))
    passed(
        "torchvision's ResNet-18 with a 7×7 stride-2 conv1 of 1 and 3 channels; "
        f"{counts[0]:,} parameters for 1 channel and 10 classes."
    )
