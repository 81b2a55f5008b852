"""From an image to a sequence of patch tokens (chapter 2).

An image of ``C × H × W`` pixels is cut into a ``Gh × Gw`` grid of ``P_h × P_w`` patches,
each patch is flattened to a vector of ``P_h·P_w·C`` numbers, and one shared linear map
projects every vector to the model width D. Two ways compute the same thing:

* the **teaching path**, :func:`image_to_patches` followed by an :class:`torch.nn.Linear`;
* the **fast path**, :class:`PatchEmbedding`: a :class:`torch.nn.Conv2d` whose kernel and
  stride are both the patch size, so its windows are exactly the patches.

:class:`ConvStem` replaces that single convolution by a few small ones (the "hybrid" ViT);
both stems check their input the same way and put their tokens on the same grid.

Conventions, the same as timm and lucidrains' vit-pytorch:

* patches are numbered **row-major** over the grid: token ``n`` is the patch in grid row
  ``n // Gw`` and grid column ``n % Gw``;
* inside a patch the vector is flattened in the order ``(p1 p2 c)``: pixel row, then pixel
  column, then channel, with the **channel fastest** (``R, G, B`` of the top-left pixel
  come first).

Shapes use named axes: B batch, C channels, H×W pixels, P patch size, Gh×Gw patch grid,
N = Gh·Gw patches (one token each; the encoder's sequence has T = N + 1 tokens once a class
token is prepended), D model width.
"""

from __future__ import annotations

import math

import torch
from einops import rearrange
from torch import Tensor, nn

from vit_tutorial.validate import check_int

__all__ = ["PatchEmbedding", "ConvStem", "image_to_patches", "patches_to_image", "patch_grid"]

#: A size given as one int ``P`` (for ``(P, P)``) or as a ``(height, width)`` pair.
IntOrPair = int | tuple[int, int]


def pair(x: IntOrPair | list[int], name: str = "size") -> tuple[int, int]:
    """``x`` as an ``(height, width)`` pair: ``7 -> (7, 7)``, ``(4, 6) -> (4, 6)``.

    ``name`` is the argument's name in the ``TypeError`` raised for anything else.

    Example:
        >>> pair(16), pair((12, 8))
        ((16, 16), (12, 8))
    """
    if isinstance(x, int) and not isinstance(x, bool):
        return (x, x)
    if (
        isinstance(x, (tuple, list))
        and len(x) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in x)
    ):
        return (int(x[0]), int(x[1]))
    raise TypeError(f"{name} must be an int or an (height, width) pair of ints, got {x!r}")


def patch_grid(image_size: IntOrPair, patch_size: IntOrPair) -> tuple[int, int]:
    """The patch grid ``(Gh, Gw) = (H / P_h, W / P_w)``; ``ValueError`` unless it tiles.

    Example:
        >>> patch_grid(224, 16), patch_grid((32, 48), (8, 16))
        ((14, 14), (4, 3))
    """
    (H, W), (ph, pw) = pair(image_size, "image_size"), pair(patch_size, "patch_size")
    if min(H, W, ph, pw) < 1:
        raise ValueError(
            f"image_size and patch_size must be positive, got image_size={(H, W)} and "
            f"patch_size={(ph, pw)}"
        )
    if H % ph or W % pw:
        raise ValueError(
            f"image size {(H, W)} is not divisible by patch size {(ph, pw)}: "
            f"{H} / {ph} = {H / ph:g} and {W} / {pw} = {W / pw:g}; resize or crop the image "
            f"to a multiple of the patch size, e.g. {(H // ph * ph, W // pw * pw)}"
        )
    return H // ph, W // pw


def grid_coordinates(
    grid_size: IntOrPair, device: torch.device | str | None = None
) -> tuple[Tensor, Tensor]:
    """Row and column of every position of a ``Gh × Gw`` grid numbered row-major.

    Returns:
        ``(rows, cols)``, two integer tensors of shape ``(Gh·Gw,)``.

    Example:
        >>> grid_coordinates((2, 3))
        (tensor([0, 0, 0, 1, 1, 1]), tensor([0, 1, 2, 0, 1, 2]))
    """
    gh, gw = pair(grid_size, "grid_size")
    if gh < 1 or gw < 1:
        raise ValueError(f"grid_size must be positive, got {(gh, gw)}")
    rows = torch.arange(gh, device=device).repeat_interleave(gw)  # 0 0 ... 1 1 ...
    cols = torch.arange(gw, device=device).repeat(gh)  # 0 1 ... 0 1 ...
    return rows, cols


def check_images(images: object, in_channels: int | None = None) -> None:
    """Refuse anything but a floating-point ``(B, C, H, W)`` tensor with ``in_channels`` C.

    Raises:
        TypeError: not a tensor (a NumPy array, a list), or integer/boolean pixels.
        ValueError: not 4-D, or the wrong number of channels.
    """
    if not isinstance(images, Tensor):
        raise TypeError(
            f"images must be a torch.Tensor of shape (B, C, H, W), got "
            f"{type(images).__name__}; convert with torch.as_tensor(...).float()"
        )
    if not images.is_floating_point():
        raise TypeError(
            f"images must be floating point, got {images.dtype}; convert them, "
            f"e.g. images.float() / 255 for 8-bit pixels"
        )
    if images.dim() != 4:
        raise ValueError(
            f"expected images of shape (B, C, H, W), got {images.dim()}-D {tuple(images.shape)}"
        )
    if in_channels is not None and images.shape[1] != in_channels:
        raise ValueError(
            f"expected {in_channels} input channels, got {images.shape[1]} "
            f"(images of shape {tuple(images.shape)})"
        )


def image_to_patches(images: Tensor, patch_size: IntOrPair) -> Tensor:
    """Cut images into non-overlapping patches and flatten each one.

    Args:
        images: shape ``(B, C, H, W)``; H and W must be multiples of the patch size.
        patch_size: ``P`` or ``(P_h, P_w)``.

    Returns:
        Patches of shape ``(B, N, P_h·P_w·C)`` with ``N = (H / P_h)·(W / P_w)``, numbered
        row-major over the grid and flattened in ``(p1 p2 c)`` order (channel fastest).

    Example:
        >>> images = torch.arange(16.0).reshape(1, 1, 4, 4)
        >>> image_to_patches(images, 2)[0]  # four 2×2 patches, row-major
        tensor([[ 0.,  1.,  4.,  5.],
                [ 2.,  3.,  6.,  7.],
                [ 8.,  9., 12., 13.],
                [10., 11., 14., 15.]])
    """
    check_images(images)
    ph, pw = pair(patch_size, "patch_size")
    patch_grid(tuple(images.shape[-2:]), (ph, pw))
    # (B, C, Gh·P_h, Gw·P_w) -> (B, Gh·Gw, P_h·P_w·C)
    return rearrange(images, "b c (gh p1) (gw p2) -> b (gh gw) (p1 p2 c)", p1=ph, p2=pw)


def patches_to_image(patches: Tensor, patch_size: IntOrPair, image_size: IntOrPair) -> Tensor:
    """The inverse of :func:`image_to_patches`: put flattened patches back on the grid.

    Args:
        patches: shape ``(B, N, P_h·P_w·C)`` in the layout of :func:`image_to_patches`.
        patch_size: ``P`` or ``(P_h, P_w)``.
        image_size: ``H`` or ``(H, W)`` of the image to rebuild.

    Returns:
        Images of shape ``(B, C, H, W)``; ``C`` is inferred from the patch width.

    Example:
        >>> images = torch.randn(2, 3, 8, 12)
        >>> torch.equal(patches_to_image(image_to_patches(images, 4), 4, (8, 12)), images)
        True
    """
    if patches.dim() != 3:
        raise ValueError(
            f"expected patches of shape (B, N, P_h·P_w·C), got "
            f"{patches.dim()}-D {tuple(patches.shape)}"
        )
    (ph, pw), (H, W) = pair(patch_size), pair(image_size)
    gh, gw = patch_grid((H, W), (ph, pw))
    N, width = patches.shape[1:]
    if N != gh * gw or width % (ph * pw):
        raise ValueError(
            f"patches of shape {tuple(patches.shape)} do not fit image size {(H, W)} with "
            f"patch size {(ph, pw)}: expected N = {gh}·{gw} = {gh * gw} patches of a width "
            f"divisible by {ph}·{pw} = {ph * pw}"
        )
    # (B, Gh·Gw, P_h·P_w·C) -> (B, C, Gh·P_h, Gw·P_w)
    return rearrange(patches, "b (gh gw) (p1 p2 c) -> b c (gh p1) (gw p2)", gh=gh, p1=ph, p2=pw)


class _Stem(nn.Module):
    """What both stems share: the grid geometry, the input checks, the token layout.

    A subclass builds ``self.proj`` (its last layer) and implements :meth:`embed`,
    images ``(B, C, H, W)`` to a feature map ``(B, D, Gh, Gw)``.
    """

    def __init__(
        self, image_size: IntOrPair, patch_size: IntOrPair, in_channels: int, dim: int, strict: bool
    ) -> None:
        super().__init__()
        self.grid_size = patch_grid(image_size, patch_size)
        self.image_size, self.patch_size = pair(image_size), pair(patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.in_channels, self.dim = in_channels, dim
        self.strict_image_size = strict

    def grid_size_for(self, image_size: IntOrPair) -> tuple[int, int]:
        """The grid ``(Gh, Gw)`` for another image size; ``ValueError`` if it does not tile."""
        return patch_grid(image_size, self.patch_size)

    def embed(self, images: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, images: Tensor) -> Tensor:
        """Embed images of shape ``(B, C, H, W)`` as patch tokens of shape ``(B, N, D)``.

        Floating-point images of another dtype than the weights (float64, say) are cast
        to the weights' dtype; integer, boolean and non-tensor images raise ``TypeError``.
        """
        check_images(images, self.in_channels)
        H, W = images.shape[-2:]
        if self.strict_image_size and (H, W) != self.image_size:
            raise ValueError(
                f"expected image size {self.image_size}, got {(H, W)}; resize the images, "
                f"build the model for image_size={(H, W)}, or let it take any size divisible "
                f"by the patch size (VisionTransformer: dynamic_image_size=True; a stem: "
                f"strict_image_size=False)"
            )
        if (H, W) != self.image_size:
            self.grid_size_for((H, W))  # non-divisible sizes always raise
        x = self.embed(images.to(self.proj.weight.dtype))  # (B, D, Gh, Gw)
        return x.flatten(2).transpose(1, 2)  # "b d gh gw -> b (gh gw) d": row-major (B, N, D)


class PatchEmbedding(_Stem):
    """Cut, flatten and project patches in one strided convolution, as in ViT and timm.

    ``Conv2d(in_channels, dim, kernel_size=P, stride=P)`` applies the same linear map to
    every non-overlapping ``P × P`` window, which is exactly :func:`image_to_patches`
    followed by ``nn.Linear(P_h·P_w·C, dim)``; :meth:`linear_weight` gives that linear
    map's matrix.

    Args:
        image_size: ``H`` or ``(H, W)`` of the images the model is built for.
        patch_size: ``P`` or ``(P_h, P_w)``; must divide the image size.
        in_channels: C, e.g. 3 for RGB.
        dim: model width D.
        bias: whether the projection has a bias.
        strict_image_size: when ``True`` (the default), inputs must have exactly
            ``image_size``; when ``False``, any size divisible by the patch size is
            accepted (for models that resample their position embedding on the fly).

    Attributes:
        image_size: ``(H, W)``.
        patch_size: ``(P_h, P_w)``.
        grid_size: ``(Gh, Gw) = (H / P_h, W / P_w)``.
        num_patches: ``N = Gh·Gw``.
        proj: the strided convolution, weight of shape ``(D, C, P_h, P_w)``.

    Example:
        >>> embed = PatchEmbedding(image_size=224, patch_size=16, dim=768)
        >>> embed.grid_size, embed.num_patches
        ((14, 14), 196)
        >>> embed(torch.randn(2, 3, 224, 224)).shape
        torch.Size([2, 196, 768])
    """

    def __init__(
        self,
        image_size: IntOrPair,
        patch_size: IntOrPair,
        in_channels: int = 3,
        dim: int = 768,
        bias: bool = True,
        strict_image_size: bool = True,
    ) -> None:
        check_int("in_channels", in_channels), check_int("dim", dim)
        self._build(image_size, patch_size, in_channels, dim, bias, strict_image_size)

    def _build(self, image_size, patch_size, in_channels, dim, bias=True, strict_image_size=True):
        super().__init__(image_size, patch_size, in_channels, dim, strict_image_size)
        self.proj = nn.Conv2d(in_channels, dim, self.patch_size, stride=self.patch_size, bias=bias)

    def linear_weight(self) -> Tensor:
        """The projection as a ``(D, P_h·P_w·C)`` matrix acting on :func:`image_to_patches`.

        The convolution stores its weight as ``(D, C, P_h, P_w)``; flattening it in the
        ``(p1 p2 c)`` order of :func:`image_to_patches` makes ``patches @ W.T + b`` equal
        to the convolution.
        """
        return rearrange(self.proj.weight, "d c p1 p2 -> d (p1 p2 c)")

    def embed(self, images: Tensor) -> Tensor:
        """The strided convolution: ``(B, C, H, W) -> (B, D, Gh, Gw)``."""
        return self.proj(images)


class ConvStem(_Stem):
    """A convolutional stem (Xiao et al., 2021) in place of the single patchifying convolution.

    ``log2(P)`` blocks of 3×3 convolution (stride 2), BatchNorm and GELU, topped up with
    stride-1 blocks to at least two, widths doubling up to D/2, then a 1×1 convolution to D.
    The total stride is P, so the output lies on the same ``Gh × Gw`` grid as
    :class:`PatchEmbedding`'s; small P (1, 2, 4) suits tiny images.

    Args:
        image_size: ``H`` or ``(H, W)``.
        patch_size: P, a power of 2 (the total stride): one number, as the stem's strides
            are square (a config's square pair ``(P, P)`` is accepted too).
        in_channels: C.
        dim: D.
        strict_image_size: as for :class:`PatchEmbedding`.

    Example:
        >>> stem = ConvStem(image_size=8, patch_size=2, in_channels=1, dim=32)
        >>> stem(torch.randn(4, 1, 8, 8)).shape
        torch.Size([4, 16, 32])
    """

    def __init__(
        self,
        image_size: IntOrPair,
        patch_size: int,
        in_channels: int = 3,
        dim: int = 768,
        strict_image_size: bool = True,
    ) -> None:
        check_int("in_channels", in_channels), check_int("dim", dim)
        self._build(image_size, patch_size, in_channels, dim, strict_image_size)

    def _build(self, image_size, patch_size, in_channels, dim, strict_image_size=True):
        p, pw = pair(patch_size, "patch_size")
        if p != pw or p < 1 or p & (p - 1):
            raise ValueError(f"the conv stem needs a square power-of-2 patch size, got {(p, pw)}")
        super().__init__(image_size, patch_size, in_channels, dim, strict_image_size)
        strides = [2] * int(math.log2(p))
        strides += [1] * (2 - len(strides))  # at least two 3×3 blocks
        layers, width = [], in_channels
        for i, stride in enumerate(strides):
            out = max(dim // 2 ** (len(strides) - i), 8)
            layers += [
                nn.Conv2d(width, out, 3, stride, padding=1, bias=False),
                nn.BatchNorm2d(out),
                nn.GELU(),
            ]
            width = out
        self.convs = nn.Sequential(*layers)
        self.proj = nn.Conv2d(width, dim, kernel_size=1)

    def embed(self, images: Tensor) -> Tensor:
        """The convolutions, then the 1×1 projection: ``(B, C, H, W) -> (B, D, Gh, Gw)``."""
        return self.proj(self.convs(images))
