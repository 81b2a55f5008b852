"""Masked autoencoders (chapter 9): pre-train a ViT encoder on images without labels.

He et al. (2022), *Masked Autoencoders Are Scalable Vision Learners*, Section 3: embed the
image's patches as a ViT does, with fixed 2D sine-cosine positions (Appendix A.1); keep a random
25% of them (:func:`random_masking`) and run the **encoder on the visible patches only** (3/4 of
the tokens never enter it, though the decoder sees all of them); a **decoder** receives the encoded
visible tokens and one shared, learned **mask token** for every hidden patch, each with its
position, and predicts every patch's pixels; the **loss** is the mean squared error on the
**masked patches only**, each target patch normalised by its own pixel mean and standard
deviation (``norm_pix_loss``, Section 3 "Reconstruction target", Table 1d).

The model computes its loss but knows nothing of training: pre-training is
:func:`~vit_tutorial.engine.fit` with ``loss=``:func:`~vit_tutorial.losses.mae_loss` and MAE's
AdamW betas, ``FitSettings(..., betas=(0.9, 0.95))`` (Appendix A.1). The encoder is a
``pool='mean'`` :class:`~vit_tutorial.vit.VisionTransformer`'s (no class token, mean-pooled,
which works as well: Appendix A.1), and :meth:`to_vit` moves its weights into one to fine-tune.

Shapes: B images, N = Gh·Gw patches, N_keep = int(N · (1 - mask_ratio)) visible patches, D
encoder width, D' decoder width, P patch side, C channels.

Example:
    >>> mae = MaskedAutoencoder(image_size=28, patch_size=4, in_channels=1, dim=32, depth=1,
    ...                         num_heads=2, decoder_dim=16, decoder_depth=1, decoder_heads=2)
    >>> out = mae(torch.randn(2, 1, 28, 28))
    >>> out.pred.shape, out.mask.shape, int(out.mask.sum(1)[0])  # 37 of 49 patches hidden
    (torch.Size([2, 49, 16]), torch.Size([2, 49]), 37)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from vit_tutorial.backbone import Backbone, to_format
from vit_tutorial.encoder import Encoder
from vit_tutorial.losses import masked_patch_loss
from vit_tutorial.patches import PatchEmbedding, image_to_patches, patches_to_image
from vit_tutorial.positional import sinusoidal_2d
from vit_tutorial.validate import check_bool, check_int, check_real, trusted
from vit_tutorial.vit import VisionTransformer, ViTConfig

__all__ = ["MAEOutput", "MaskedAutoencoder", "normalized_patches", "num_visible", "random_masking"]


class MAEOutput(NamedTuple):
    """What :meth:`MaskedAutoencoder.forward` returns: ``loss``, the mean squared error on the
    masked patches (a scalar); ``pred``, every patch's predicted pixels ``(B, N, P·P·C)``
    (normalised per patch when ``norm_pix_loss`` is on); ``mask`` ``(B, N)``, 1.0 = hidden."""

    loss: Tensor
    pred: Tensor
    mask: Tensor


def num_visible(num_patches: int, mask_ratio: float) -> int:
    """N_keep = int(N · (1 - mask_ratio)), the patches kept of N, as MAE's ``random_masking``
    counts them (``len_keep``, ``models_mae.py``), floating point included (``int(20 · (1 -
    0.9))`` is ``int(1.999…)`` = 1); ValueError when that is none."""
    ratio, num_patches = (
        check_real("mask_ratio", mask_ratio, 0, 1, high_open=True),
        check_int("num_patches", num_patches),
    )
    if (keep := int(num_patches * (1 - ratio))) < 1:
        raise ValueError(f"mask_ratio={ratio} hides all {num_patches} tokens; keep at least one")
    return keep


def random_masking(
    tokens: Tensor, mask_ratio: float, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Keep a random subset of each image's tokens, as MAE does (a per-image shuffle):
    ``(visible (B, N_keep, D), mask (B, N), ids_restore (B, N))``.

    Each token of ``tokens`` ``(B, N, D)`` gets uniform noise from ``generator`` (default:
    torch's global one); the N_keep (:func:`num_visible`) tokens with the smallest noise
    are kept, in that random order (``mask_ratio`` in ``[0, 1)``): every image keeps exactly
    N_keep, so a batch's form one dense tensor. ``mask`` is in the original order, 1.0 = hidden;
    ``ids_restore`` is the permutation that puts ``[visible, hidden]`` back into that order.

    Example:
        >>> visible, mask, ids_restore = random_masking(torch.randn(2, 8, 4), 0.75)
        >>> visible.shape, mask.sum(1).tolist()
        (torch.Size([2, 2, 4]), [6.0, 6.0])
    """
    if not isinstance(tokens, Tensor):
        raise TypeError(f"tokens must be a (B, N, D) tensor, got {type(tokens).__name__}")
    if tokens.dim() != 3:
        got = f"a {tokens.dim()}-D tensor of shape {tuple(tokens.shape)}"
        raise ValueError(f"tokens must be a (B, N, D) tensor, got {got}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {generator!r}")
    b, n, d = tokens.shape
    keep = num_visible(n, mask_ratio)
    noise = torch.rand(b, n, generator=generator, device=generator and generator.device)
    ids_shuffle = noise.to(tokens.device).argsort(dim=1)  # ascending: kept ones first
    ids_restore = ids_shuffle.argsort(dim=1)
    visible = tokens.gather(1, ids_shuffle[:, :keep, None].expand(-1, -1, d))
    mask = torch.ones(b, n, device=tokens.device)
    mask[:, :keep] = 0  # in shuffled order: the first N_keep are visible
    return visible, mask.gather(1, ids_restore), ids_restore


def normalized_patches(images: Tensor, patch_size: int, eps: float = 1e-6) -> Tensor:
    """MAE's target, ``(B, N, P·P·C)``: each patch's pixels minus their mean, over ``sqrt(var +
    eps)``, the unbiased variance (``torch.var``'s default), as in MAE's ``models_mae.py``."""
    eps, patches = check_real("eps", eps, 0.0, low_open=True), image_to_patches(images, patch_size)
    mean = patches.mean(dim=-1, keepdim=True)
    return (patches - mean) / (patches.var(dim=-1, keepdim=True) + eps).sqrt()


def _check_pos_embed(value: object) -> None:
    if value not in ("learned", "sincos2d"):
        raise ValueError(f"pos_embed must be 'learned' or 'sincos2d' to fine-tune, got {value!r}")


class MaskedAutoencoder(Backbone, nn.Module):
    """A ViT encoder that sees a quarter of the patches, and a light decoder that paints in the
    rest (He et al. 2022, Section 3), initialised as MAE's ``models_mae.py``
    (``initialize_weights``): Xavier-uniform Linear weights (and the patch projection, viewed as
    a Linear), zero biases, the mask token from N(0, 0.02²).

    Args:
        config: the encoder's :class:`~vit_tutorial.vit.ViTConfig` (``num_classes`` unused),
            with ``pool='mean'`` (no class token, so no distillation token; the default when
            ``config`` is ``None``), the patch stem (a convolutional stem would see the hidden
            pixels before masking) and a learned or sine-cosine position table. Kept as
            ``self.config``, from which :meth:`to_vit` builds a ViT; the encoder is
            ``patch_embed``, ``encoder`` and ``norm`` (pre-training only), the decoder the rest.
        decoder_dim, decoder_depth, decoder_heads: D', the decoder's width (a multiple of 4 and
            of ``decoder_heads``), its blocks and its attention heads.
        mask_ratio: the fraction of patches hidden from the encoder (0.75 in the paper).
        norm_pix_loss: predict each patch normalised by its own mean and std (the paper's
            default), else the raw pixels.
        **fields: :class:`~vit_tutorial.vit.ViTConfig` fields overriding ``config``'s.
    """

    def __init__(
        self,
        config: ViTConfig | None = None,
        *,
        decoder_dim: int = 64,
        decoder_depth: int = 2,
        decoder_heads: int = 4,
        mask_ratio: float = 0.75,
        norm_pix_loss: bool = True,
        **fields: Any,
    ) -> None:
        super().__init__()
        if config is None:
            fields.setdefault("pool", "mean")  # ViTConfig's default is 'cls'
        self.config = c = ViTConfig.resolve(config, **fields)
        if c.pool != "mean":
            raise ValueError(
                f"MAE's encoder here has no class token: pass pool='mean', got {c.pool!r}"
            )
        if c.stem != "patch":
            raise ValueError(
                f"MAE needs stem='patch' (a convolutional stem sees hidden pixels), got {c.stem!r}"
            )
        _check_pos_embed(c.pos_embed)
        check_int("decoder_dim", decoder_dim), check_int("decoder_depth", decoder_depth)
        check_int("decoder_heads", decoder_heads)
        if decoder_dim % 4 or decoder_dim % decoder_heads:
            raise ValueError(
                f"decoder_dim must be a multiple of 4 (the sine-cosine table) and of "
                f"decoder_heads={decoder_heads}, got decoder_dim={decoder_dim}"
            )
        self.norm_pix_loss = check_bool("norm_pix_loss", norm_pix_loss)
        self.patch_embed = trusted(PatchEmbedding, c.image_size, c.patch_size, c.in_channels, c.dim)
        grid, patch_pixels = self.patch_embed.grid_size, math.prod(self.patch_embed.patch_size)
        if num_visible(n := math.prod(grid), mask_ratio) == n:
            raise ValueError(f"mask_ratio={mask_ratio} hides none of the {n} patches; hide one")
        if norm_pix_loss and patch_pixels * c.in_channels < 2:  # torch.var of one value: NaN
            raise ValueError("norm_pix_loss needs 2+ values a patch: patch_size=1, in_channels=1")
        self.mask_ratio = float(mask_ratio)
        self.register_buffer("pos_table", sinusoidal_2d(grid, c.dim)[None], persistent=False)
        self.encoder = trusted(Encoder, c.block, c.drop_path_rates())
        self.norm = nn.LayerNorm(c.dim, eps=c.norm_eps)
        self.decoder_embed = nn.Linear(c.dim, decoder_dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_dim))
        table = sinusoidal_2d(grid, decoder_dim)[None]
        self.register_buffer("decoder_pos_table", table, persistent=False)
        opts = dict(dim=decoder_dim, num_heads=decoder_heads, dropout=0.0, attn_dropout=0.0)
        self.decoder = trusted(Encoder, dataclasses.replace(c.block, **opts), [0.0] * decoder_depth)
        self.decoder_norm = nn.LayerNorm(decoder_dim, eps=c.norm_eps)
        self.decoder_pred = nn.Linear(decoder_dim, patch_pixels * c.in_channels)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        proj = self.patch_embed.proj.weight  # (D, C, P, P), initialised as a Linear
        nn.init.xavier_uniform_(proj.view(proj.shape[0], -1))
        nn.init.normal_(self.mask_token, std=0.02)

    @property
    def patch_size(self) -> int:
        """P, the side of a (square) patch."""
        return self.patch_embed.patch_size[0]

    def forward_encoder(
        self, images: Tensor, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Encode the visible patches: ``(latent (B, N_keep, D), mask (B, N), ids_restore)``."""
        tokens = self.patch_embed(images) + self.pos_table  # (B, N, D), checks the images
        visible, mask, ids_restore = random_masking(tokens, self.mask_ratio, generator)
        return self.norm(self.encoder(visible)), mask, ids_restore

    def _start(self, images: Tensor) -> tuple[Tensor, nn.ModuleList]:
        """The encoder's input on the whole image, unmasked, for ``forward_intermediates``."""
        return self.patch_embed(images) + self.pos_table, self.encoder.blocks  # checks images

    def _normed(self, i: int, x: Tensor) -> Tensor:
        return self.norm(x)  # pre-training's final LayerNorm, which to_vit drops

    _end = _normed

    def _format(self, x: Tensor, output_fmt: str, images: Tensor) -> Tensor:
        return to_format(x, output_fmt, self.patch_embed.grid_size)

    def no_weight_decay(self) -> set[str]:
        """None named: MAE's pre-training decays all but biases and norms (``main_pretrain.py``,
        ``add_weight_decay``), its mask token too; the position tables are fixed buffers."""
        return set()

    def forward_decoder(self, latent: Tensor, ids_restore: Tensor) -> Tensor:
        """Predict every patch's pixels ``(B, N, P·P·C)`` from the encoded visible tokens."""
        x = self.decoder_embed(latent)  # (B, N_keep, D')
        b, k, d = x.shape
        hidden = self.mask_token.expand(b, ids_restore.shape[1] - k, -1)  # (B, N - N_keep, D')
        x = torch.cat([x, hidden], dim=1)  # [visible, hidden], in shuffled order
        x = x.gather(1, ids_restore[:, :, None].expand(-1, -1, d))  # original order
        x = self.decoder(x + self.decoder_pos_table)
        return self.decoder_pred(self.decoder_norm(x))

    def targets(self, images: Tensor) -> Tensor:
        """The patches to predict ``(B, N, P·P·C)``, normalised per patch with ``norm_pix_loss``."""
        if self.norm_pix_loss:
            return normalized_patches(images, self.patch_size)
        return image_to_patches(images, self.patch_size)

    def forward(self, images: Tensor, generator: torch.Generator | None = None) -> MAEOutput:
        """Mask, encode, decode, and score the hidden patches (:class:`MAEOutput`)."""
        latent, mask, ids_restore = self.forward_encoder(images, generator)
        pred = self.forward_decoder(latent, ids_restore)
        return MAEOutput(masked_patch_loss(pred, self.targets(images), mask), pred, mask)

    @torch.no_grad()
    def reconstruct(
        self, images: Tensor, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor]:
        """``(masked, reconstruction)`` images ``(B, C, H, W)`` for a figure: the hidden patches
        set to 0; the visible patches as they were and the predictions in the hidden ones (with
        normalised targets, de-normalised by each hidden patch's TRUE mean and std: a leak)."""
        pred, mask = self(images, generator)[1:]
        patches = image_to_patches(images, self.patch_size)
        if self.norm_pix_loss:
            mean = patches.mean(dim=-1, keepdim=True)
            pred = pred * (patches.var(dim=-1, keepdim=True) + 1e-6).sqrt() + mean
        visible, hidden = patches * (1 - mask[:, :, None]), pred * mask[:, :, None]
        size = self.patch_size, images.shape[-2:]
        return patches_to_image(visible, *size), patches_to_image(visible + hidden, *size)

    def to_vit(self, num_classes: int, **fields: Any) -> VisionTransformer:
        """A :class:`~vit_tutorial.vit.VisionTransformer` holding this encoder's weights.

        The patch embedding and the blocks are copied; the sine-cosine table starts the learned
        one (``pos_embed='learned'``, the default; MAE's ``main_finetune.py`` loads it into timm's
        learnable ``pos_embed``) or is the ViT's own (``'sincos2d'``). As in MAE's fine-tuning
        (``models_vit.py`` with ``global_pool``), pre-training's final LayerNorm is dropped and the
        pooled-feature ``fc_norm`` and the zero head (``num_classes``) are new. ``fields``: other
        :class:`~vit_tutorial.vit.ViTConfig` fields (``drop_path``, say), not architecture ones.
        """
        _check_pos_embed(fields.get("pos_embed", self.config.pos_embed))
        vit = VisionTransformer(self.config, num_classes=num_classes, **fields)
        shape = ("image_size", "patch_size", "in_channels", "dim", "depth", "num_heads")
        changed = [
            f"{k}: {getattr(self.config, k)!r} -> {getattr(vit.config, k)!r}"
            for k in (*shape, "mlp_ratio", "qkv_bias", "pool", "stem")
            if getattr(self.config, k) != getattr(vit.config, k)
        ]
        if changed:
            raise ValueError(
                f"to_vit keeps the pre-trained architecture; these fields changed: {changed}"
            )
        encoder = ("patch_embed.", "encoder.")
        weights = {k: v for k, v in self.state_dict().items() if k.startswith(encoder)}
        if vit.config.pos_embed == "learned":
            weights["pos_embed.weight"] = self.pos_table.clone()
        missing, unexpected = vit.load_state_dict(weights, strict=False)
        assert not unexpected and all(k.startswith(("fc_norm.", "head.")) for k in missing)
        return vit
