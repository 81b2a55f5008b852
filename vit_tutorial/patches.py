"""From an image to a sequence of patch tokens (chapter 2).

An image of ``C × H × W`` pixels is cut into a ``Gh × Gw`` grid of ``P_h × P_w`` patches,
each patch is flattened to a vector of ``P_h·P_w·C`` numbers, and one shared linear map
projects every vector to the model width D. Two ways compute the same thing:

* the **teaching path**, :func:`image_to_patches` followed by an :class:`torch.nn.Linear`;
* the **fast path**, :class:`PatchEmbedding`: a :class:`torch.nn.Conv2d` whose kernel and
  stride are both the patch size, so its windows are exactly the patches.

Conventions, the same as timm and lucidrains' vit-pytorch:

* patches are numbered **row-major** over the grid: token ``n`` is the patch in grid row
  ``n // Gw`` and grid column ``n % Gw``;
* inside a patch the vector is flattened in the order ``(p1 p2 c)``: pixel row, then pixel
  column, then channel, with the **channel fastest** (``R, G, B`` of the top-left pixel
  come first).

Shapes use named axes: B batch, C channels, H×W pixels, P patch size, Gh×Gw patch grid,
N = Gh·Gw tokens, D model width.
"""

from __future__ import annotations

import torch  # noqa: F401  (the doctests use it)
from einops import rearrange
from torch import Tensor, nn

__all__ = ["PatchEmbedding", "image_to_patches", "pair", "patches_to_image"]


def pair(x: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    """``x`` as an ``(height, width)`` pair: ``7 -> (7, 7)``, ``(4, 6) -> (4, 6)``.

    Example:
        >>> pair(16), pair((12, 8))
        ((16, 16), (12, 8))
    """
    if isinstance(x, int) and not isinstance(x, bool):
        return (x, x)
    if isinstance(x, (tuple, list)) and len(x) == 2 and all(isinstance(v, int) for v in x):
        return (int(x[0]), int(x[1]))
    raise TypeError(f"expected an int or an (height, width) pair of ints, got {x!r}")


def _grid(image_size: tuple[int, int], patch_size: tuple[int, int]) -> tuple[int, int]:
    """The patch grid ``(Gh, Gw)``; ``ValueError`` naming the numbers if it does not tile."""
    (H, W), (ph, pw) = image_size, patch_size
    if min(H, W, ph, pw) < 1:
        raise ValueError(f"sizes must be positive, got image {image_size} and patch {patch_size}")
    if H % ph or W % pw:
        raise ValueError(
            f"image size {image_size} is not divisible by patch size {patch_size}: "
            f"{H} / {ph} = {H / ph:g} and {W} / {pw} = {W / pw:g}; resize or crop the image "
            f"to a multiple of the patch size, e.g. {(H // ph * ph, W // pw * pw)}"
        )
    return H // ph, W // pw


def image_to_patches(images: Tensor, patch_size: int | tuple[int, int]) -> Tensor:
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
    if images.dim() != 4:
        raise ValueError(f"expected images of shape (B, C, H, W), got {images.dim()}-D "
                         f"{tuple(images.shape)}")
    ph, pw = pair(patch_size)
    _grid(tuple(images.shape[-2:]), (ph, pw))
    # (B, C, Gh·P_h, Gw·P_w) -> (B, Gh·Gw, P_h·P_w·C)
    return rearrange(images, "b c (gh p1) (gw p2) -> b (gh gw) (p1 p2 c)", p1=ph, p2=pw)


def patches_to_image(
    patches: Tensor, patch_size: int | tuple[int, int], image_size: int | tuple[int, int]
) -> Tensor:
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
        raise ValueError(f"expected patches of shape (B, N, P_h·P_w·C), got {patches.dim()}-D "
                         f"{tuple(patches.shape)}")
    (ph, pw), (H, W) = pair(patch_size), pair(image_size)
    gh, gw = _grid((H, W), (ph, pw))
    N, width = patches.shape[1:]
    if N != gh * gw or width % (ph * pw):
        raise ValueError(
            f"patches of shape {tuple(patches.shape)} do not fit image size {(H, W)} with patch "
            f"size {(ph, pw)}: expected N = {gh}·{gw} = {gh * gw} patches of a width divisible "
            f"by {ph}·{pw} = {ph * pw}"
        )
    # (B, Gh·Gw, P_h·P_w·C) -> (B, C, Gh·P_h, Gw·P_w)
    return rearrange(patches, "b (gh gw) (p1 p2 c) -> b c (gh p1) (gw p2)", gh=gh, p1=ph, p2=pw)


class PatchEmbedding(nn.Module):
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
        image_size: int | tuple[int, int],
        patch_size: int | tuple[int, int],
        in_channels: int = 3,
        dim: int = 768,
        bias: bool = True,
        strict_image_size: bool = True,
    ) -> None:
        super().__init__()
        self.image_size, self.patch_size = pair(image_size), pair(patch_size)
        self.grid_size = _grid(self.image_size, self.patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.in_channels, self.dim = in_channels, dim
        self.strict_image_size = strict_image_size
        self.proj = nn.Conv2d(in_channels, dim, self.patch_size, stride=self.patch_size, bias=bias)

    def grid_size_for(self, image_size: int | tuple[int, int]) -> tuple[int, int]:
        """The grid ``(Gh, Gw)`` for another image size; ``ValueError`` if it does not tile."""
        return _grid(pair(image_size), self.patch_size)

    def linear_weight(self) -> Tensor:
        """The projection as a ``(D, P_h·P_w·C)`` matrix acting on :func:`image_to_patches`.

        The convolution stores its weight as ``(D, C, P_h, P_w)``; flattening it in the
        ``(p1 p2 c)`` order of :func:`image_to_patches` makes ``patches @ W.T + b`` equal
        to the convolution.
        """
        return rearrange(self.proj.weight, "d c p1 p2 -> d (p1 p2 c)")

    def forward(self, images: Tensor) -> Tensor:
        """Embed images of shape ``(B, C, H, W)`` as tokens of shape ``(B, N, D)``."""
        if images.dim() != 4:
            raise ValueError(f"expected images of shape (B, C, H, W), got {images.dim()}-D "
                             f"{tuple(images.shape)}")
        C, H, W = images.shape[1:]
        if C != self.in_channels:
            raise ValueError(f"expected {self.in_channels} input channels, got {C} "
                             f"(images of shape {tuple(images.shape)})")
        if self.strict_image_size and (H, W) != self.image_size:
            raise ValueError(
                f"expected image size {self.image_size}, got {(H, W)}; resize the images, or "
                f"build with strict_image_size=False (and resample the position embedding)"
            )
        self.grid_size_for((H, W))  # non-divisible sizes always raise
        x = self.proj(images)  # (B, D, Gh, Gw)
        return rearrange(x, "b d gh gw -> b (gh gw) d")  # row-major tokens: (B, N, D)
