"""From an image to a sequence of patch tokens (chapter 2).

An image of ``C × H × W`` pixels is cut into a ``Gh × Gw`` grid of ``P_h × P_w`` patches, each
flattened to ``P_h·P_w·C`` numbers, and one shared linear map projects every vector to the model
width D: the **teaching path** is :func:`image_to_patches` and an :class:`torch.nn.Linear`, the
**fast path** :class:`PatchEmbedding`, one strided convolution, which :class:`ConvStem` replaces by
a few small ones (the "hybrid" ViT). Conventions, as in timm and lucidrains' vit-pytorch: patches
are numbered **row-major** (token ``n`` is grid row ``n // Gw``, column ``n % Gw``), and a patch is
flattened in the order ``(p1 p2 c)``, pixel row, then column, then channel: the **channel fastest**
(``R, G, B`` of the top-left pixel come first). Shapes: B batch, C channels, H×W pixels, P patch
size, Gh×Gw patch grid, N = Gh·Gw patches (T = N + 1 with a class token), D model width.
"""

from __future__ import annotations

import numbers

import torch
from einops import rearrange
from torch import Tensor, nn

from vit_tutorial.validate import check_bool, check_int

__all__ = ["PatchEmbedding", "ConvStem", "image_to_patches", "patches_to_image", "patch_grid"]

IntOrPair = int | tuple[int, int]  # a size: one int P for (P, P), or a (height, width) pair


def pair(x: IntOrPair | list[int], name: str = "size") -> tuple[int, int]:
    """``x`` as an ``(height, width)`` pair; ``name`` is the argument named in the ``TypeError``.

    Example:
        >>> pair(16), pair((12, 8))
        ((16, 16), (12, 8))
    """
    hw = (x, x) if isinstance(x, numbers.Integral) else x  # NumPy's integers too
    if isinstance(hw, (tuple, list)) and len(hw) == 2:
        if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in hw):
            return (int(hw[0]), int(hw[1]))
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
    """``(rows, cols)``, each ``(Gh·Gw,)``: row and column of every grid position, row-major.

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
    """Refuse anything but a floating-point ``(B, C, H, W)`` tensor with ``in_channels`` C:
    ``TypeError`` for no tensor or integer/boolean pixels, ``ValueError`` for a wrong shape."""
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
    """Cut images ``(B, C, H, W)`` into flattened patches ``(B, N, P_h·P_w·C)``; ``patch_size``,
    ``P`` or ``(P_h, P_w)``, must divide H and W.

    Example:
        >>> image_to_patches(torch.arange(16.0).reshape(1, 1, 4, 4), 2)[0]  # 2×2 patches, row-major
        tensor([[ 0.,  1.,  4.,  5.],
                [ 2.,  3.,  6.,  7.],
                [ 8.,  9., 12., 13.],
                [10., 11., 14., 15.]])
    """
    check_images(images)
    gh, gw = patch_grid(tuple(images.shape[-2:]), patch_size)
    # (B, C, Gh·P_h, Gw·P_w) -> (B, Gh·Gw, P_h·P_w·C)
    return rearrange(images, "b c (gh p1) (gw p2) -> b (gh gw) (p1 p2 c)", gh=gh, gw=gw)


def patches_to_image(patches: Tensor, patch_size: IntOrPair, image_size: IntOrPair) -> Tensor:
    """The inverse of :func:`image_to_patches`: patches ``(B, N, P_h·P_w·C)`` to images of
    ``image_size`` ``H`` or ``(H, W)``; the channels C follow from the patch width.

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
    if patches.shape[1] != gh * gw or patches.shape[2] % (ph * pw):
        raise ValueError(
            f"patches of shape {tuple(patches.shape)} do not fit image size {(H, W)} with "
            f"patch size {(ph, pw)}: expected N = {gh}·{gw} = {gh * gw} patches of a width "
            f"divisible by {ph}·{pw} = {ph * pw}"
        )
    # (B, Gh·Gw, P_h·P_w·C) -> (B, C, Gh·P_h, Gw·P_w)
    return rearrange(patches, "b (gh gw) (p1 p2 c) -> b c (gh p1) (gw p2)", gh=gh, p1=ph, p2=pw)


class _Stem(nn.Module):
    """What both stems share: grid, input checks, token layout. A subclass builds ``self.proj``
    (its last layer) and ``embed``, ``(B, C, H, W) -> (B, D, Gh, Gw)``."""

    #: How the owner lets the stem take other sizes, named in the error (a model without: None).
    size_option: str | None = None

    def __init__(self, image_size, patch_size, in_channels, dim, strict) -> None:
        super().__init__()
        self.grid_size = patch_grid(image_size, patch_size)
        self.image_size, self.patch_size = pair(image_size), pair(patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.in_channels, self.dim, self.strict_image_size = in_channels, dim, strict

    def grid_size_for(self, image_size: IntOrPair) -> tuple[int, int]:
        """The grid ``(Gh, Gw)`` for another image size; ``ValueError`` if it does not tile."""
        return patch_grid(image_size, self.patch_size)

    def forward(self, images: Tensor) -> Tensor:
        """Embed images ``(B, C, H, W)`` as tokens ``(B, N, D)``, cast to the weights' float dtype;
        integer, boolean and non-tensor images raise ``TypeError``."""
        check_images(images, self.in_channels)
        H, W = images.shape[-2:]
        if self.strict_image_size and (H, W) != self.image_size:
            raise ValueError(
                f"expected image size {self.image_size}, got {(H, W)}; resize the images or "
                f"build the model for image_size={(H, W)}"
                + (
                    f", or pass {self.size_option} (any size the patches tile)"
                    * bool(self.size_option)
                )
            )
        if (H, W) != self.image_size:
            self.grid_size_for((H, W))  # non-divisible sizes always raise
        x = self.embed(images.to(self.proj.weight.dtype))  # (B, D, Gh, Gw)
        return x.flatten(2).transpose(1, 2)  # "b d gh gw -> b (gh gw) d": row-major (B, N, D)


class PatchEmbedding(_Stem):
    """Cut, flatten and project patches in one strided convolution, as in ViT and timm.

    ``Conv2d(C, D, kernel_size=P, stride=P)`` is :func:`image_to_patches` followed by
    ``nn.Linear(P_h·P_w·C, D)``, whose matrix :meth:`linear_weight` gives.

    Args:
        image_size, patch_size: ``H`` or ``(H, W)``, and ``P`` or ``(P_h, P_w)``, which divides it.
        in_channels, dim, bias: C, D, and whether the projection has a bias.
        strict_image_size: ``True``: inputs must have exactly ``image_size``; ``False``: any
            size divisible by the patch size (for models that resample their position table).

    Attributes:
        image_size, patch_size, grid_size, num_patches: ``(H, W)``, ``(P_h, P_w)``, ``(Gh, Gw)``, N.
        proj: the strided convolution, weight ``(D, C, P_h, P_w)``.

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
        check_int("in_channels", in_channels), check_int("dim", dim), check_bool("bias", bias)
        check_bool("strict_image_size", strict_image_size)
        self._build(image_size, patch_size, in_channels, dim, bias, strict_image_size)
        self.size_option = "strict_image_size=False"

    def _build(self, image_size, patch_size, in_channels, dim, bias=True, strict_image_size=True):
        super().__init__(image_size, patch_size, in_channels, dim, strict_image_size)
        self.proj = nn.Conv2d(in_channels, dim, self.patch_size, stride=self.patch_size, bias=bias)

    def linear_weight(self) -> Tensor:
        """The convolution's ``(D, C, P_h, P_w)`` weight as the ``(D, P_h·P_w·C)`` matrix ``W`` in
        the ``(p1 p2 c)`` order of :func:`image_to_patches`: ``patches @ W.T + b`` is the conv."""
        return rearrange(self.proj.weight, "d c p1 p2 -> d (p1 p2 c)")

    def embed(self, images: Tensor) -> Tensor:
        """The strided convolution: ``(B, C, H, W) -> (B, D, Gh, Gw)``."""
        return self.proj(images)


class ConvStem(_Stem):
    """A convolutional stem (Xiao et al., 2021) in place of the single patchifying convolution.

    ``log2(P)`` blocks of 3×3 convolution (stride 2), BatchNorm and GELU, topped up with stride-1
    blocks to at least two, widths doubling up to D/2, then a 1×1 convolution to D. The total stride
    is ``patch_size`` P, a power of 2 (or ``(P, P)``), so the tokens lie on the grid of
    :class:`PatchEmbedding`, whose other arguments it takes; small P (1, 2, 4) suits tiny images.

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
        check_bool("strict_image_size", strict_image_size)
        self._build(image_size, patch_size, in_channels, dim, strict_image_size)
        self.size_option = "strict_image_size=False"

    def _build(self, image_size, patch_size, in_channels, dim, strict_image_size=True):
        p, pw = pair(patch_size, "patch_size")
        if p != pw or p < 1 or p & (p - 1):
            raise ValueError(f"the conv stem needs a square power-of-2 patch size, got {(p, pw)}")
        super().__init__(image_size, patch_size, in_channels, dim, strict_image_size)
        strides = [2] * (p.bit_length() - 1) + [1] * (3 - p.bit_length())  # log2(P), at least 2
        layers, width = [], in_channels
        for i, stride in enumerate(strides):
            out = max(dim // 2 ** (len(strides) - i), 8)
            conv = nn.Conv2d(width, out, 3, stride, padding=1, bias=False)
            layers, width = [*layers, conv, nn.BatchNorm2d(out), nn.GELU()], out
        self.convs = nn.Sequential(*layers)
        self.proj = nn.Conv2d(width, dim, kernel_size=1)

    def embed(self, images: Tensor) -> Tensor:
        """The convolutions, then the 1×1 projection: ``(B, C, H, W) -> (B, D, Gh, Gw)``."""
        return self.proj(self.convs(images))
