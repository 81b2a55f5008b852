"""Tests for vit_tutorial/mae.py: masking, the visible-only encoder, the masked loss and
the hand-over of the encoder's weights to a VisionTransformer."""

import dataclasses
import math

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import vit_tutorial.mae as mae_module
from vit_tutorial.data import make_loader
from vit_tutorial.engine import FitSettings, fit
from vit_tutorial.losses import mae_loss, masked_patch_loss
from vit_tutorial.mae import MaskedAutoencoder, normalized_patches, num_visible, random_masking
from vit_tutorial.vit import VisionTransformer

from tiny_models import Crash, tiny_vit

SMALL = dict(image_size=16, patch_size=4, in_channels=1, dim=16, depth=2, num_heads=2)
DECODER = dict(decoder_dim=8, decoder_depth=1, decoder_heads=2)


def small_mae(**overrides):
    torch.manual_seed(0)
    return MaskedAutoencoder(**{**SMALL, **DECODER, **overrides})


def test_masking_keeps_exactly_a_quarter_of_each_images_tokens():
    tokens = torch.randn(64, 49, 3)
    visible, mask, ids_restore = random_masking(tokens, 0.75)
    keep = 49 - round(49 * 0.75)
    assert visible.shape == (64, keep, 3)
    assert mask.shape == (64, 49) and set(mask.unique().tolist()) == {0.0, 1.0}
    assert (mask.sum(1) == 49 - keep).all()
    # each visible token is one of the unmasked tokens of its own image, each once
    for b in range(64):
        unmasked = tokens[b, mask[b] == 0]
        assert torch.equal(visible[b].sort(0).values, unmasked.sort(0).values)
    # the masks differ between images, and ids_restore is a permutation of every row
    assert len({tuple(m.tolist()) for m in mask}) == 64
    assert torch.equal(ids_restore.sort(1).values, torch.arange(49).expand(64, -1))


def test_masking_hides_each_position_equally_often():
    mask = random_masking(torch.zeros(20000, 16, 1), 0.75)[1]
    assert torch.allclose(mask.mean(0), torch.full((16,), 0.75), atol=0.015)


@pytest.mark.parametrize("ratio, kept", [(0.0, 20), (0.5, 10), (0.75, 5), (0.9, 1)])
def test_other_mask_ratios_keep_maes_count(ratio, kept):
    # MAE's int(N * (1 - ratio)), floating point included: 20 * (1 - 0.9) is 1.999...
    visible, mask, _ = random_masking(torch.randn(2, 20, 4), ratio)
    assert visible.shape[1] == kept and (mask.sum(1) == 20 - kept).all()


def test_a_generator_fixes_the_mask():
    tokens = torch.randn(3, 10, 2)
    a = random_masking(tokens, 0.5, torch.Generator().manual_seed(1))[1]
    b = random_masking(tokens, 0.5, torch.Generator().manual_seed(1))[1]
    c = random_masking(tokens, 0.5, torch.Generator().manual_seed(2))[1]
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_the_encoder_sees_only_the_visible_patches():
    mae = small_mae().eval()
    seen = []
    mae.encoder.register_forward_hook(lambda m, args, out: seen.append(args[0].shape))
    images = torch.randn(2, 1, 16, 16)
    latent, mask, _ = mae.forward_encoder(images, torch.Generator().manual_seed(0))
    assert seen == [torch.Size([2, 4, 16])] and latent.shape == (2, 4, 16)  # 4 of 16 patches
    # repainting every hidden patch changes nothing the encoder computes
    hidden = mask[:, :, None].bool().expand(-1, -1, 16)
    patches = torch.nn.functional.unfold(images, 4, stride=4).transpose(1, 2)
    repainted = torch.where(hidden, torch.randn_like(patches) * 10, patches)
    other = torch.nn.functional.fold(repainted.transpose(1, 2), 16, 4, stride=4)
    assert not torch.equal(other, images)
    latent2, mask2, _ = mae.forward_encoder(other, torch.Generator().manual_seed(0))
    assert torch.equal(mask, mask2) and torch.allclose(latent, latent2, atol=1e-6)


def test_normalised_targets_match_a_patch_by_patch_computation():
    images = torch.rand(2, 3, 8, 12)
    target = normalized_patches(images, 4)
    assert target.shape == (2, 6, 48)
    for b in range(2):
        for i in range(2):
            for j in range(3):
                patch = images[b, :, 4 * i : 4 * i + 4, 4 * j : 4 * j + 4]
                pixels = patch.permute(1, 2, 0).reshape(-1)  # row, column, channel
                expected = (pixels - pixels.mean()) / (pixels.var() + 1e-6).sqrt()
                assert torch.allclose(target[b, 3 * i + j], expected, atol=1e-5)


def test_the_loss_counts_the_masked_patches_only():
    pred, target = torch.randn(2, 5, 3), torch.randn(2, 5, 3)
    mask = torch.tensor([[1.0, 0, 1, 0, 0], [0, 0, 0, 1, 1]])
    expected = torch.stack(
        [(pred[b, i] - target[b, i]).pow(2).mean() for b, i in [(0, 0), (0, 2), (1, 3), (1, 4)]]
    ).mean()
    assert torch.allclose(masked_patch_loss(pred, target, mask), expected)
    visible_changed = torch.where(mask[:, :, None].bool(), pred, torch.randn_like(pred))
    assert torch.allclose(masked_patch_loss(visible_changed, target, mask), expected)


def test_the_models_loss_has_no_gradient_from_visible_patches():
    mae = small_mae()
    images = torch.randn(3, 1, 16, 16)
    out = mae(images)
    out.pred.retain_grad()
    out.loss.backward()
    grad = out.pred.grad  # (B, N, P·P·C)
    visible = out.mask == 0
    assert (grad[visible] == 0).all() and (grad[~visible].abs().sum(-1) > 0).all()
    assert out.pred.shape == (3, 16, 16) and out.loss.ndim == 0
    assert torch.allclose(out.loss, masked_patch_loss(out.pred, mae.targets(images), out.mask))


def test_raw_pixel_targets_without_norm_pix_loss():
    mae = small_mae(norm_pix_loss=False)
    images = torch.randn(1, 1, 16, 16)
    by_hand = images.reshape(1, 4, 4, 4, 4).permute(0, 1, 3, 2, 4).reshape(1, 16, 16)
    assert torch.equal(mae.targets(images), by_hand)


def test_mae_initialisation():
    mae = small_mae()
    bound = math.sqrt(6 / (16 + 48))  # Xavier-uniform of the first qkv Linear (16 -> 48)
    qkv = mae.encoder.blocks[0].attn.qkv.weight
    assert qkv.abs().max() <= bound and qkv.std() > 0.6 * bound / math.sqrt(3)
    assert mae.encoder.blocks[0].attn.qkv.bias.abs().max() == 0
    assert 0.01 < mae.mask_token.std() < 0.03
    assert "pos_table" not in mae.state_dict()  # the sine-cosine tables are fixed


def test_the_encoder_loads_into_a_vision_transformer():
    mae = small_mae().eval()
    vit = mae.to_vit(num_classes=7).eval()
    assert isinstance(vit, VisionTransformer) and vit.config.pool == "mean"
    assert vit.config.num_classes == 7 and vit.head.weight.abs().max() == 0
    assert torch.equal(vit.pos_embed.weight, mae.pos_table)
    for name, tensor in mae.state_dict().items():
        if name.startswith(("patch_embed.", "encoder.")):
            assert torch.equal(vit.state_dict()[name], tensor), name
    # with nothing masked, the MAE's encoder and the ViT compute the same tokens
    mae.mask_ratio = 0.0
    images = torch.randn(2, 1, 16, 16)
    latent, _, ids_restore = mae.forward_encoder(images)
    in_order = latent.gather(1, ids_restore[:, :, None].expand(-1, -1, 16))
    assert torch.allclose(in_order, mae.norm(vit.forward_features(images)), atol=1e-5)
    sincos = mae.to_vit(num_classes=7, pos_embed="sincos2d").eval()
    assert torch.allclose(sincos.forward_features(images), vit.forward_features(images), atol=1e-6)


def test_reconstructions_keep_the_visible_patches():
    mae = small_mae().eval()
    images = torch.rand(2, 1, 16, 16)
    masked, recon = mae.reconstruct(images, torch.Generator().manual_seed(0))
    mask = mae(images, torch.Generator().manual_seed(0)).mask
    shown = torch.nn.functional.fold(
        (1 - mask)[:, None, :].repeat(1, 16, 1), 16, 4, stride=4
    ).bool()
    assert torch.allclose(recon[shown], images[shown]) and (masked[~shown] == 0).all()
    assert recon.shape == images.shape


MAE_FIT = FitSettings(epochs=15, lr=3e-3, betas=(0.9, 0.95))


def mirrored_images():
    images = torch.rand(64, 1, 16, 16)
    images[:, :, :, 8:] = images[:, :, :, :8]  # a structure to learn: mirrored halves
    return images


def test_pretraining_through_fit_lowers_the_loss_and_ignores_labels():
    torch.manual_seed(0)
    images = mirrored_images()
    mae = small_mae()
    before = mae(images, torch.Generator().manual_seed(0)).loss.item()
    labels = torch.full((64,), -5)  # never read: -5 is no class
    loader = DataLoader(TensorDataset(images, labels), batch_size=16)
    history = fit(mae, loader, None, MAE_FIT, loss=mae_loss, device="cpu", progress=False)
    assert history["epoch"][-1] == 15 and math.isnan(history["train_acc"][-1])
    assert history["train_loss"][-1] < history["train_loss"][0]
    mae.eval()
    assert mae(images, torch.Generator().manual_seed(0)).loss.item() < 0.8 * before


def test_pretraining_resumes_from_its_checkpoint_to_the_same_weights(tmp_path):
    """MAE's random masks draw from torch's RNG, which the checkpoint restores."""
    loader = make_loader(TensorDataset(mirrored_images(), torch.zeros(64)), 16, shuffle=True)
    settings = dataclasses.replace(MAE_FIT, epochs=3)
    args = dict(loss=mae_loss, device="cpu", progress=False)
    torch.manual_seed(0)
    straight = small_mae()
    fit(straight, loader, None, settings, **args)
    torch.manual_seed(0)
    path = tmp_path / "mae.pt"
    with pytest.raises(RuntimeError, match="simulated crash"):  # dies in epoch 3
        fit(
            small_mae(),
            Crash(loader, after=2 * 4 + 1),
            None,
            settings,
            **args,
            checkpoint_path=path,
        )
    torch.manual_seed(999)  # a new process: other RNG state, fresh model
    resumed = small_mae()
    with pytest.raises(ValueError, match="cannot resume .* betas=.0.9, 0.95."):
        fit(
            resumed,
            loader,
            None,
            dataclasses.replace(settings, betas=(0.9, 0.999)),
            **args,
            checkpoint_path=path,
        )
    fit(resumed, loader, None, settings, **args, checkpoint_path=path)
    for a, b in zip(straight.state_dict().values(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(pool="cls"), ValueError, "pool='mean'"),
        (dict(stem="conv"), ValueError, "stem='patch'"),
        (dict(pos_embed="relative"), ValueError, "pos_embed must be 'learned' or 'sincos2d'"),
        (dict(decoder_dim=10), ValueError, "decoder_dim must be a multiple of 4"),
        (dict(decoder_dim=12, decoder_heads=8), ValueError, "decoder_heads=8"),
        (dict(decoder_depth=0), ValueError, "decoder_depth must be at least 1"),
        (dict(decoder_heads=2.0), TypeError, "decoder_heads must be an integer"),
        (dict(mask_ratio=1.0), ValueError, "mask_ratio must be in"),
        (dict(mask_ratio=0.0), ValueError, "mask_ratio=0.0 hides none of the 16 patches"),
        (dict(mask_ratio=0.97), ValueError, "mask_ratio=0.97 hides all 16 tokens"),
        (dict(mask_ratio="0.5"), TypeError, "mask_ratio must be a real number"),
        (dict(patch_size=1, dim=16), ValueError, "norm_pix_loss needs 2\\+ values a patch"),
        (dict(norm_pix_loss=1), TypeError, "norm_pix_loss must be True or False"),
    ],
)
def test_bad_configurations_are_refused(kwargs, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace("[", r"\[")):
        small_mae(**kwargs)


def test_one_count_of_the_kept_patches_moves_every_refusal(monkeypatch):
    assert [num_visible(16, r) for r in (0.0, 0.5, 0.75, 0.9)] == [16, 8, 4, 1]  # int(1.6)
    with pytest.raises(ValueError, match="mask_ratio=0.97 hides all 16 tokens"):
        num_visible(16, 0.97)
    small_mae(mask_ratio=0.05)  # int(16 · 0.95) = 15 kept, 1 hidden
    monkeypatch.setattr(mae_module, "num_visible", lambda n, ratio: n - math.floor(n * ratio))
    assert random_masking(torch.zeros(1, 10, 2), 0.75)[0].shape[1] == 3  # int(2.5) would keep 2
    with pytest.raises(ValueError, match="mask_ratio=0.05 hides none of the 16 patches"):
        small_mae(mask_ratio=0.05)  # floor(0.8) = 0 hidden


def test_ratio_zero_masking_and_one_pixel_patches_without_normalisation_are_fine():
    visible, mask, _ = random_masking(torch.randn(2, 5, 3), 0.0)
    assert visible.shape == (2, 5, 3) and not mask.any()
    assert small_mae(patch_size=1, norm_pix_loss=False)(torch.randn(2, 1, 16, 16)).loss.isfinite()
    assert small_mae(patch_size=1, in_channels=3)(torch.randn(2, 3, 16, 16)).loss.isfinite()


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match=r"tokens must be a \(B, N, D\) tensor, got a 2-D"):
        random_masking(torch.zeros(3, 4), 0.5)
    with pytest.raises(TypeError, match=r"tokens must be a \(B, N, D\) tensor, got list"):
        random_masking([[[0.0]]], 0.5)
    with pytest.raises(TypeError, match="generator must be a torch.Generator or None, got 5"):
        random_masking(torch.zeros(1, 4, 2), 0.5, generator=5)
    with pytest.raises(TypeError, match="generator must be a torch.Generator or None, got 5"):
        small_mae()(torch.zeros(1, 1, 16, 16), generator=5)  # the model's entry point too
    with pytest.raises(ValueError, match="hides all 3 tokens"):
        random_masking(torch.zeros(1, 3, 2), 0.9)
    with pytest.raises(ValueError, match=r"mask \(2, 4\)"):
        masked_patch_loss(torch.zeros(2, 5, 3), torch.zeros(2, 5, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="these fields changed"):
        small_mae().to_vit(10, depth=3)
    with pytest.raises(ValueError, match="mask hides no patch"):
        masked_patch_loss(torch.zeros(2, 5, 3), torch.ones(2, 5, 3), torch.zeros(2, 5))
    for pos_embed in ("relative", "none"):
        message = f"pos_embed must be 'learned' or 'sincos2d' to fine-tune, got '{pos_embed}'"
        with pytest.raises(ValueError, match=message):
            small_mae().to_vit(3, pos_embed=pos_embed)


def test_pretraining_mistakes_are_refused_before_the_optimiser_steps():
    loader = DataLoader(TensorDataset(mirrored_images(), torch.zeros(64)), batch_size=16)
    args = dict(loss=mae_loss, device="cpu", progress=False)
    mae, vit = small_mae(), tiny_vit()
    weights = [{k: v.clone() for k, v in m.state_dict().items()} for m in (mae, vit)]
    with pytest.raises(ValueError, match="amp must be 'auto', 'bf16', 'fp16' or None, got 'yes'"):
        fit(mae, Crash(loader, after=0), None, MAE_FIT, **args, amp="yes")
    with pytest.raises(ValueError, match="train_loader yields no batches"):
        fit(mae, DataLoader(TensorDataset(torch.zeros(0, 1, 16, 16)), 4), None, MAE_FIT, **args)
    with pytest.raises(ValueError, match="no logits for val_loader to score"):
        fit(mae, loader, loader, MAE_FIT, **args)
    images = DataLoader(TensorDataset(torch.randn(8, 1, 4, 4), torch.zeros(8)), batch_size=4)
    with pytest.raises(TypeError, match="mae_loss needs MaskedAutoencoder outputs, got Tensor"):
        fit(vit, images, None, MAE_FIT, **args)
    for model, before in zip((mae, vit), weights):
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_pretraining_through_fit_is_bit_identical_to_the_loop_it_replaced():
    """The committed chapter 9 results were made by mae.pretrain, a loop of its own (commit
    d341dd4). This is that loop; fit must end with the same weights, bit for bit, on the CPU,
    so those results stand for the new code too."""
    from vit_tutorial.engine import param_groups, warmup_cosine

    loader = make_loader(TensorDataset(mirrored_images(), torch.zeros(64)), 16, shuffle=True)
    settings = FitSettings(epochs=2, lr=3e-3, warmup_epochs=0.5, betas=(0.9, 0.95))
    old = small_mae()
    optimizer = torch.optim.AdamW(param_groups(old, 0.05), lr=3e-3, betas=(0.9, 0.95))
    schedule = warmup_cosine(optimizer, 2, 8)
    torch.manual_seed(1)
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for images, _ in loader:
            loss = old(images).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
    new = small_mae()
    torch.manual_seed(1)
    fit(new, loader, None, settings, loss=mae_loss, device="cpu", progress=False)
    for (name, a), b in zip(old.state_dict().items(), new.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_masking_arithmetic_refuses_what_is_not_a_count():
    for patches, error in [(16.0, TypeError), (True, TypeError), (-16, ValueError)]:
        with pytest.raises(error, match="num_patches must be"):
            num_visible(patches, 0.5)
    with pytest.raises(ValueError, match="eps must be positive, got -1.0"):
        normalized_patches(torch.randn(1, 1, 4, 4), 2, eps=-1.0)  # else NaNs
