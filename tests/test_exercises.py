"""The exercise checkers: they accept every correct answer, explain each usual mistake,
and leave no trace (random state, model mode) behind them."""

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision
from einops import rearrange
from timm.models.vision_transformer import global_pool_nlc

import vit_tutorial.exercises as exercises
from vit_tutorial.attention import scaled_dot_product_attention
from vit_tutorial.axial import AxialAttention, attention_flops, axial_mask
from vit_tutorial.encoder import drop_path
from vit_tutorial.engine import param_groups, predict, warmup_cosine
from vit_tutorial.exercises.ch08 import _distillation_loss, _mixup
from vit_tutorial.exercises.ch09 import _decoder_tokens
from vit_tutorial.exercises.ch11 import (
    _largest_qk_norm_logit,
    _layer_scale_count,
    _map_shapes,
    _prefix_to_grid,
)
from vit_tutorial.experiments.ch08 import resnet18_greyscale
from vit_tutorial.losses import HardDistillation, masked_patch_loss
from vit_tutorial.mae import MaskedAutoencoder, normalized_patches, random_masking
from vit_tutorial.modern import AttentionPool
from vit_tutorial.patches import image_to_patches, patches_to_image
from vit_tutorial.positional import (
    RelativePositionBias,
    resize_pos_embed,
    sinusoidal_1d,
    sinusoidal_2d,
)
from vit_tutorial.vit import VisionTransformer

from checker_messages import wrapped
from tiny_models import tiny_vit

# ---------------------------------------------------------------------------------------
# Correct answers, built from the package itself


def multi_head(q, k, v, num_heads, scale=None):
    """Attention over heads; ``scale`` None is the correct 1/√d."""
    q, k, v = (rearrange(t, "b n (h d) -> b h n d", h=num_heads) for t in (q, k, v))
    if scale is None:
        out, _ = scaled_dot_product_attention(q, k, v)
    else:
        out = (q @ k.transpose(-2, -1) * scale).softmax(-1) @ v
    return rearrange(out, "b h n d -> b n (h d)")


def masked(q, k, v, mask):
    return scaled_dot_product_attention(q, k, v, mask)[0]


def conv_to_linear(conv):
    return rearrange(conv.weight, "d c p1 p2 -> d (p1 p2 c)")


def relative_index(grid_size):
    return RelativePositionBias(grid_size, num_heads=1).index


def resize_table(table, old_grid, new_grid):
    return resize_pos_embed(table[None], old_grid, new_grid, num_prefix_tokens=0)[0]


def token_input(variant="right"):
    """A module for check_class_token_and_position: ``variant`` says which mistake it makes."""

    class TokenInput(torch.nn.Module):
        def __init__(self, num_patches, dim):
            super().__init__()
            batch = 4 if variant == "batch dimension" else 1  # torch.randn(batch, 1, D)
            self.cls_token = torch.nn.Parameter(torch.randn(batch, 1, dim))
            rows = num_patches if variant == "N rows" else num_patches + 1
            self.pos_embed = torch.nn.Parameter(torch.randn(1, rows, dim))

        def forward(self, tokens):
            B, N, _ = tokens.shape
            cls, pos = self.cls_token.expand(B, -1, -1), self.pos_embed
            return {
                "right": lambda: torch.cat([cls, tokens], dim=1) + pos,
                "repeat": lambda: torch.cat([self.cls_token.repeat(B, 1, 1), tokens], 1) + pos,
                "class row apart": lambda: torch.cat([cls + pos[:, :1], tokens + pos[:, 1:]], 1),
                "batch dimension": lambda: torch.cat([self.cls_token, tokens], 1) + pos,
                "N rows": lambda: torch.cat([cls, tokens + pos], 1),
                "before": lambda: torch.cat([cls, tokens + pos[:, :N]], 1),
                "before, crash": lambda: torch.cat([cls, tokens + pos], 1),
                "no class position": lambda: torch.cat([cls, tokens + pos[:, 1:]], 1),
                "at the end": lambda: torch.cat([tokens, cls], 1) + pos,
                "axis 2": lambda: torch.cat([cls, tokens], 2) + pos,
                "axis 0": lambda: torch.cat([cls, tokens], 0) + pos,
                "not expanded": lambda: torch.cat([self.cls_token, tokens], 1) + pos,
                "detached": lambda: torch.cat([cls.detach(), tokens], 1) + pos,
            }[variant]()

    return TokenInput


def layer_norm(x, weight, bias, eps):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)


def param_count(config):
    with torch.device("meta"):
        return sum(p.numel() for p in VisionTransformer(config).parameters())


def top_k(model, images, k):
    """With the package's predict, which restores the model's mode when done."""
    logits, _ = predict(model, [(images, torch.zeros(len(images)))], device="cpu", amp=None)
    return logits.softmax(-1).topk(k, dim=-1)


def pooled(tokens, pool, num_prefix_tokens):
    """timm's pooling: its 'token' is our 'cls', its 'avg' our 'mean'."""
    return global_pool_nlc(tokens, {"cls": "token", "mean": "avg"}[pool], num_prefix_tokens)


def lr_at(step, lr, warmup_steps, total_steps):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = warmup_cosine(optimizer, warmup_steps, total_steps)
    for _ in range(step):
        optimizer.step()
        scheduler.step()
    return optimizer.param_groups[0]["lr"]


def along(x, attend, axis):
    """An AxialAttention with the weights of ``attend``, in the dtype of ``x``."""
    axial = AxialAttention(attend.dim, attend.num_heads, axis).to(x.dtype)
    axial.attn.load_state_dict(attend.state_dict())
    return axial.eval()(x)


def axial_scores(gh, gw):
    # attention_flops counts 4·N·(Gh + Gw)·D for the scores and A·V, plus 16·N·D².
    return (attention_flops((gh, gw), 1, "axial") - 16 * gh * gw) // 4


class FixedTeacher(torch.nn.Module):
    """A teacher that returns ``logits`` whatever the images."""

    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, images):
        return self.logits


def engine_distillation_loss(cls_logits, dist_logits, labels, teacher_logits, smoothing):
    """The package's own loss of a distilled model, its teacher returning ``teacher_logits``."""
    distillation = HardDistillation(FixedTeacher(teacher_logits), smoothing)
    loss, _ = distillation((cls_logits, dist_logits), None, labels)
    return loss


def mixup_by_lerp(images, labels, lam, num_classes):
    """Mixup written with lerp: ``a.lerp(b, lam)`` is ``(1 - lam)·a + lam·b``."""
    one_hot = F.one_hot(labels, num_classes).to(images.dtype)
    return images.roll(1, 0).lerp(images, lam), one_hot.roll(1, 0).lerp(one_hot, lam)


def mae_loss(pred, images, mask, patch_size):
    return masked_patch_loss(pred, normalized_patches(images, patch_size), mask)


def package_decoder_tokens(latent, mask_token, ids_restore):
    """What MaskedAutoencoder.forward_decoder hands its first block, caught by a hook.

    The decoder's embedding is an identity and its position table zeros, so the first
    block receives the visible tokens and the mask tokens, unshuffled, and nothing else.
    """
    n, d = ids_restore.shape[1], latent.shape[-1]
    tiny = dict(image_size=4, patch_size=2, in_channels=1, depth=1, num_heads=1)
    mae = MaskedAutoencoder(dim=d, decoder_dim=d, decoder_depth=1, decoder_heads=1, **tiny)
    mae = mae.to(latent.dtype)
    mae.decoder_embed = torch.nn.Identity()
    mae.decoder_pos_table = torch.zeros(1, n, d, dtype=latent.dtype)
    with torch.no_grad():
        mae.mask_token.copy_(mask_token)
    seen = []
    hook = mae.decoder.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    try:
        mae.forward_decoder(latent, ids_restore)
    finally:
        hook.remove()
    return seen[0]


def official_window_partition(x, M):
    """The official code's window_partition (view, permute, view), flattened to (B·nW, M², C)."""
    B, H, W, C = x.shape
    x = x.view(B, H // M, M, W // M, M, C).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, M * M, C)


def official_shift_mask(height, width, M, s):
    """The official code's attn_mask as booleans: nine regions of img_mask by slices."""
    img_mask = torch.zeros(1, height, width, 1)
    slices = (slice(0, -M), slice(-M, -s), slice(-s, None))
    for label, (h, w) in enumerate((h, w) for h in slices for w in slices):
        img_mask[:, h, w, :] = label
    windows = official_window_partition(img_mask, M)[..., 0]  # (nW, M²)
    return windows[:, None, :] == windows[:, :, None]


def official_relative_index(M):
    """The official code's relative_position_index, by meshgrid."""
    coords = torch.stack(torch.meshgrid(torch.arange(M), torch.arange(M), indexing="ij"))
    flat = coords.flatten(1)  # (2, M²)
    rel = (flat[:, :, None] - flat[:, None, :]).permute(1, 2, 0) + (M - 1)
    return rel[..., 0] * (2 * M - 1) + rel[..., 1]


def partition_by(pattern):
    return lambda x, M: rearrange(x, f"b (nh m1) (nw m2) c -> {pattern}", m1=M, m2=M)


def shift_mask_with(mistake):
    """The shifted-window mask, or one of its usual mistakes."""

    def fn(height, width, M, s):
        if mistake == "additive":
            return (~official_shift_mask(height, width, M, s)).float() * -100.0
        first = mistake == "first s"
        rows = torch.arange(height) < s if first else torch.arange(height) >= height - s
        cols = torch.arange(width) < s if first else torch.arange(width) >= width - s
        if mistake == "rows only":
            cols = torch.zeros(width, dtype=torch.bool)
        region = (2 * rows[:, None].long() + cols[None, :].long()).view(1, height, width, 1)
        region = official_window_partition(region, M)[..., 0]
        return region[:, :, None] == region[:, None, :]

    return fn


def relative_index_with(mistake):
    def fn(M):
        r, c = torch.arange(M * M) // M, torch.arange(M * M) % M
        dr, dc = r[:, None] - r[None, :], c[:, None] - c[None, :]
        return {
            "2M+1": (dr + M - 1) * (2 * M + 1) + dc + M - 1,
            "M": (dr + M - 1) * M + dc + M - 1,
            "no offset": dr * (2 * M - 1) + dc,
            "key - query": (M - 1 - dr) * (2 * M - 1) + M - 1 - dc,
            "float": ((dr + M - 1) * (2 * M - 1) + dc + M - 1).float(),
        }[mistake]

    return fn


def prefix_to_grid(tokens, num_prefix_tokens, grid_size):
    """The patch tokens after every prefix token, as timm's forward_intermediates lays them out."""
    return rearrange(tokens[:, num_prefix_tokens:], "b (h w) d -> b d h w", h=grid_size[0])


def map_head_shapes(batch, tokens, dim, heads):
    """The MAP head's shapes by formula: one learned query (L = 1) per head, d = D/h."""
    d = dim // heads
    return {
        "queries": (batch, heads, 1, d),
        "keys": (batch, heads, tokens, d),
        "weights": (batch, heads, 1, tokens),
        "pooled": (batch, dim),
    }


REFERENCES = {
    "check_attention": multi_head,
    "check_masked_attention": masked,
    "check_stable_softmax": torch.softmax,
    "check_image_to_patches": image_to_patches,
    "check_patch_embedding": conv_to_linear,
    "check_patches_to_image": patches_to_image,
    "check_sinusoidal_2d": sinusoidal_2d,
    "check_relative_position_index": relative_index,
    "check_resize_table": resize_table,
    "check_class_token_and_position": token_input(),
    "check_tokens_prediction": 785,  # (224 / 8)² patches and the class token
    "check_bias_table_prediction": 26_544,  # ((2·24 - 1)² + 3)·12
    "check_drop_path": drop_path,
    "check_block_forward": lambda block, x: block(x),
    "check_layer_norm": layer_norm,
    "check_param_count": param_count,
    "check_predict": top_k,
    "check_pooling": pooled,
    "check_block_params_prediction": 12 * 192**2 + 13 * 192,  # EncoderBlock(192, 3): 444,864
    "check_patch_flops_prediction": 156_296_675_328 / 35_127_656_448,  # vit_flops, B/8 / B/16
    "check_lr_schedule": lr_at,
    "check_param_groups": param_groups,
    "check_smoothed_cross_entropy": lambda logits, targets, eps: F.cross_entropy(
        logits, targets, label_smoothing=eps
    ),
    "check_axial_attention": along,
    "check_axial_scores": axial_scores,
    "check_axial_mask": axial_mask,
    "check_attention_memory_prediction": 12 * 577**2 * 4 / 2**20,  # ViT-B/16 at 384×384
    "check_axial_flops_prediction": attention_flops(14, 768, "full")
    / attention_flops(14, 768, "axial"),
    "check_no_position_prediction": 92.6,  # the committed digits_ablation.json, pos-none
    "check_greyscale_resnet": resnet18_greyscale,
    "check_distillation_loss": engine_distillation_loss,
    "check_mixup": mixup_by_lerp,
    "check_vit_accuracy_prediction": 74.44,  # fashion_mnist_study.json: vit, 1,000 images
    "check_random_masking": random_masking,
    "check_mae_loss": mae_loss,
    "check_decoder_tokens": package_decoder_tokens,
    "check_mae_gain_prediction": 6.37,  # pretraining.json: MAE minus scratch, 100 per class
    "check_window_partition": official_window_partition,
    "check_shift_mask": official_shift_mask,
    "check_window_relative_index": official_relative_index,
    "check_window_flops_prediction": 482 / 6656,  # (4C + 2M²) / (4C + 2hw), 56×56, C = 96
    "check_prefix_to_grid": prefix_to_grid,
    "check_layer_scale_parameters": lambda dim, depth: 2 * dim * depth,  # ls1, ls2 per block
    "check_map_head_shapes": map_head_shapes,
    "check_qk_norm_logit_prediction": 8.0,  # √d: LayerNorm'd q and k have norm √64 each
}
CHECKERS = sorted(exercises.__all__)


def flat(message: str) -> str:
    """The message with its line breaks undone, for matching phrases."""
    return " ".join(message.split())


def test_every_checker_has_a_reference_answer():
    assert sorted(REFERENCES) == CHECKERS


@pytest.mark.parametrize("name", CHECKERS)
def test_accepts_the_packages_own_implementation(name, capsys):
    getattr(exercises, name)(REFERENCES[name])
    assert capsys.readouterr().out.startswith(f"Correct! {name}")


# ---------------------------------------------------------------------------------------
# float64 answers


def sincos_float64(grid_size, dim):
    """The 2D table computed in float64 throughout (as MAE does, in NumPy)."""
    gh, gw = grid_size
    omega = 10000.0 ** (-torch.arange(0, dim // 2, 2, dtype=torch.float64) / (dim // 2))

    def code(positions):
        angles = positions.double()[:, None] * omega
        return rearrange(torch.stack([angles.sin(), angles.cos()], -1), "n k two -> n (k two)")

    rows, cols = torch.arange(gh).repeat_interleave(gw), torch.arange(gw).repeat(gh)
    return torch.cat([code(rows), code(cols)], 1)


def distillation_float64(cls_logits, dist_logits, labels, teacher_logits, smoothing):
    """DeiT's hard-label distillation loss, by formula, in float64."""
    class_term = F.cross_entropy(cls_logits.double(), labels, label_smoothing=smoothing)
    teacher_classes = teacher_logits.double().argmax(-1)
    return (class_term + F.cross_entropy(dist_logits.double(), teacher_classes)) / 2


FLOAT64 = {
    "check_attention": lambda q, k, v, h: multi_head(q.double(), k.double(), v.double(), h),
    "check_masked_attention": lambda q, k, v, mask: masked(
        q.double(), k.double(), v.double(), mask
    ),
    "check_stable_softmax": lambda x, dim: torch.softmax(x.double(), dim),
    "check_image_to_patches": lambda images, p: image_to_patches(images.double(), p),
    "check_patch_embedding": lambda conv: conv_to_linear(conv).double(),
    "check_patches_to_image": lambda patches, p, size: patches_to_image(patches.double(), p, size),
    "check_sinusoidal_2d": sincos_float64,
    "check_resize_table": lambda table, old, new: resize_table(table.double(), old, new),
    "check_drop_path": lambda x, p, training: drop_path(x.double(), p, training),
    "check_block_forward": lambda block, x: copy.deepcopy(block).double()(x.double()),
    "check_layer_norm": lambda x, w, b, eps: layer_norm(x.double(), w.double(), b.double(), eps),
    "check_predict": lambda model, images, k: top_k(model.double(), images.double(), k),
    "check_pooling": lambda tokens, pool, k: pooled(tokens.double(), pool, k),
    "check_smoothed_cross_entropy": lambda logits, targets, eps: F.cross_entropy(
        logits.double(), targets, label_smoothing=eps
    ),
    "check_axial_attention": lambda x, attend, axis: along(x.double(), attend, axis),
    "check_axial_mask": lambda grid_size, axis: axial_mask(grid_size, axis).double(),
    "check_greyscale_resnet": lambda in_channels, k: resnet18_greyscale(in_channels, k).double(),
    "check_distillation_loss": distillation_float64,
    "check_mixup": lambda images, y, lam, k: mixup_by_lerp(images.double(), y, lam, k),
    "check_random_masking": lambda tokens, ratio, g: random_masking(tokens.double(), ratio, g),
    "check_mae_loss": lambda pred, images, mask, p: mae_loss(
        pred.double(), images.double(), mask.double(), p
    ),
    "check_decoder_tokens": lambda latent, token, ids: package_decoder_tokens(
        latent.double(), token.double(), ids
    ),
    "check_prefix_to_grid": lambda tokens, p, grid: prefix_to_grid(tokens.double(), p, grid),
}


@pytest.mark.parametrize("name", sorted(FLOAT64))
def test_accepts_a_correct_answer_computed_in_float64(name, capsys):
    getattr(exercises, name)(FLOAT64[name])
    assert capsys.readouterr().out.startswith(f"Correct! {name}")


# ---------------------------------------------------------------------------------------
# Other correct answers that used to be rejected


@pytest.mark.parametrize("variant", ["repeat", "class row apart"])
def test_check_class_token_and_position_accepts_repeat_and_the_class_row_added_apart(
    variant, capsys
):
    exercises.check_class_token_and_position(token_input(variant))
    assert capsys.readouterr().out.startswith("Correct! check_class_token_and_position")


def test_check_predict_accepts_an_answer_that_restores_training_mode():
    def restoring(model, images, k):
        was_training = model.training
        model.eval()
        with torch.no_grad():
            out = model(images).softmax(-1).topk(k, dim=-1)
        model.train(was_training)
        return out

    exercises.check_predict(restoring)


def test_check_predict_still_rejects_a_model_left_in_training_mode():
    def in_training(model, images, k):
        with torch.no_grad():
            return model(images).softmax(-1).topk(k, dim=-1)

    with pytest.raises(AssertionError, match="training mode"):
        exercises.check_predict(in_training)


@pytest.mark.parametrize("shape", ["generator params", "generator of groups", "tuple params"])
def test_check_param_groups_accepts_what_torch_optim_accepts(shape):
    def groups(model, weight_decay):
        made = param_groups(model, weight_decay)
        if shape == "generator params":
            return [{**g, "params": (p for p in g["params"])} for g in made]
        if shape == "tuple params":
            return [{**g, "params": tuple(g["params"])} for g in made]
        return (g for g in made)

    exercises.check_param_groups(groups)


def test_check_greyscale_resnet_accepts_its_own_relu_in_training_mode(capsys):
    """A ReLU not in place computes the same; the model's training mode is left as it was."""
    models = []

    def build(in_channels, k):
        model = resnet18_greyscale(in_channels, k)
        model.relu = torch.nn.ReLU()
        models.append(model)
        return model

    exercises.check_greyscale_resnet(build)
    assert capsys.readouterr().out.startswith("Correct! check_greyscale_resnet")
    assert all(model.training for model in models)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_the_distillation_reference_is_the_packages_loss_of_a_distilled_vit(smoothing):
    torch.manual_seed(0)
    student, teacher = tiny_vit(distilled=True, pool="cls").train(), tiny_vit().eval()
    images, labels = torch.randn(8, 1, 4, 4), torch.randint(3, (8,))
    cls_logits, dist_logits = student(images)  # both heads, in training
    want, _ = HardDistillation(teacher, smoothing)((cls_logits, dist_logits), images, labels)
    with torch.no_grad():
        teacher_logits = teacher(images)
    assert (teacher_logits.argmax(-1) != labels).any()  # the two targets differ somewhere
    got = _distillation_loss(cls_logits, dist_logits, labels, teacher_logits, smoothing)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("alpha, seed", [(0.8, 1), (1.0, 0), (1.0, 4), (0.5, 3)])
def test_the_mixup_reference_is_torchvisions_mixup_with_the_same_lam(alpha, seed):
    """v2.MixUp draws lam from Beta(α, α) on the global generator: the same seed, the same lam."""
    from torchvision.transforms import v2

    images, labels = torch.randn(5, 3, 4, 4), torch.tensor([0, 3, 1, 1, 4])
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        beta = torch.distributions.Beta(torch.tensor([alpha]), torch.tensor([alpha]))
        lam = float(beta.sample(()))
        torch.manual_seed(seed)
        mixed, soft_labels = v2.MixUp(alpha=alpha, num_classes=6)(images, labels)
    assert 0.05 < lam < 0.95 and abs(lam - 0.5) > 0.05  # a lam that tells the sides apart
    want_mixed, want_soft_labels = _mixup(images, labels, lam, 6)
    torch.testing.assert_close(mixed, want_mixed)
    torch.testing.assert_close(soft_labels, want_soft_labels)


def masking_by_randperm(tokens, mask_ratio, generator):
    """Another correct answer: a permutation per image, the kept tokens sorted by position."""
    b, n, d = tokens.shape
    keep = int(n * (1 - mask_ratio))  # MAE's count
    perms = [torch.randperm(n, generator=generator) for _ in range(b)]
    ids_shuffle = torch.stack([torch.cat([p[:keep].sort()[0], p[keep:]]) for p in perms])
    ids_restore = ids_shuffle.argsort(dim=1)
    visible = torch.stack([t[i[:keep]] for t, i in zip(tokens, ids_shuffle)])
    mask = (ids_restore >= keep).float()
    return visible, mask, ids_restore


def test_check_random_masking_accepts_kept_tokens_in_any_order_that_ids_restore_undoes():
    exercises.check_random_masking(masking_by_randperm)


@pytest.mark.parametrize("variant", ["eps outside", "mse on hidden", "per-image mean"])
def test_check_mae_loss_accepts_other_ways_to_write_it(variant):
    def loss(pred, images, mask, p):
        patches = image_to_patches(images, p)
        mean, var = patches.mean(-1, keepdim=True), patches.var(-1, keepdim=True)
        if variant == "eps outside":
            target = (patches - mean) / (var.sqrt() + 1e-6)
        else:
            target = (patches - mean) / (var + 1e-6).sqrt()
        if variant == "mse on hidden":  # equal patches, so the mean over pixels is the same
            return F.mse_loss(pred[mask.bool()], target[mask.bool()])
        per_patch = (pred - target).pow(2).mean(-1)
        if variant == "per-image mean":  # every image hides as many patches
            return ((per_patch * mask).sum(1) / mask.sum(1)).mean()
        return (per_patch * mask).sum() / mask.sum()

    exercises.check_mae_loss(loss)


@pytest.mark.parametrize("variant", ["scatter", "N mask tokens"])
def test_check_decoder_tokens_accepts_other_ways_to_write_it(variant):
    def tokens(latent, mask_token, ids_restore):
        (b, _, d), n = latent.shape, ids_restore.shape[1]
        x = torch.cat([latent, mask_token.expand(b, n, -1)], dim=1)  # K + N tokens
        if variant == "N mask tokens":  # gather reads the first N of them only
            return x.gather(1, ids_restore[:, :, None].expand(-1, -1, d))
        index = ids_restore.argsort(dim=1)[:, :, None].expand(-1, -1, d)
        return torch.empty_like(x[:, :n]).scatter_(1, index, x[:, :n])

    exercises.check_decoder_tokens(tokens)


@pytest.mark.parametrize("seed", range(3))
def test_the_decoder_tokens_reference_is_forward_decoders(seed):
    g = torch.Generator().manual_seed(seed)
    latent, mask_token = torch.randn(3, 4, 8, generator=g), torch.randn(1, 1, 8, generator=g)
    ids_restore = torch.rand(3, 9, generator=g).argsort(1).argsort(1)
    want = package_decoder_tokens(latent, mask_token, ids_restore)
    torch.testing.assert_close(_decoder_tokens(latent, mask_token, ids_restore), want)
    assert torch.equal(want[0, ids_restore[0] >= 4], mask_token[0].expand(5, -1))


@pytest.mark.parametrize("variant", ["transpose, reshape", "the last N", "NHWC permuted"])
def test_check_prefix_to_grid_accepts_other_ways_to_write_it(variant):
    def grid(tokens, p, grid_size):
        patches = tokens[:, tokens.shape[1] - grid_size[0] * grid_size[1] :]  # the last N
        if variant == "the last N":
            return rearrange(patches, "b (h w) d -> b d h w", h=grid_size[0])
        if variant == "NHWC permuted":
            return tokens[:, p:].reshape(len(tokens), *grid_size, -1).permute(0, 3, 1, 2)
        return tokens[:, p:].transpose(1, 2).reshape(len(tokens), -1, *grid_size)

    exercises.check_prefix_to_grid(grid)


@pytest.mark.parametrize("kind", [list, torch.Size])
def test_check_map_head_shapes_accepts_lists_and_torch_sizes(kind):
    exercises.check_map_head_shapes(
        lambda *args: {name: kind(shape) for name, shape in map_head_shapes(*args).items()}
    )


# ---------------------------------------------------------------------------------------
# Chapter 11's references are measured on the package's model


def test_the_grid_reference_is_forward_intermediates_of_a_vit_with_registers():
    torch.manual_seed(0)
    images = torch.randn(2, 1, 8, 6)  # a 4×3 grid of 2×2 patches
    model = tiny_vit(image_size=(8, 6), patch_size=2, reg_tokens=3, depth=2).eval()
    seen = []
    hook = model.encoder.blocks[-1].register_forward_hook(lambda m, args, out: seen.append(out))
    with torch.no_grad():
        want = model.forward_intermediates(images, indices=1, intermediates_only=True)[0]
    hook.remove()
    assert model.num_prefix_tokens == 4 and want.shape == (2, 16, 4, 3)
    torch.testing.assert_close(_prefix_to_grid(seen[0], 4, (4, 3)), want, rtol=0, atol=0)
    torch.testing.assert_close(prefix_to_grid(seen[0], 4, (4, 3)), want, rtol=0, atol=0)


@pytest.mark.parametrize("dim, depth", [(16, 1), (64, 3)])
def test_the_layer_scale_count_is_the_gammas_of_the_model(dim, depth):
    model = tiny_vit(dim=dim, depth=depth, init_values=1e-5)
    gammas = sum(p.numel() for name, p in model.named_parameters() if ".ls" in name)
    assert _layer_scale_count(dim, depth) == gammas == 2 * dim * depth


def test_the_map_shapes_are_those_of_attention_pool():
    pool, x = AttentionPool(dim=24, num_heads=3), torch.randn(2, 7, 24)
    shapes = _map_shapes(2, 7, 24, 3)
    assert shapes == map_head_shapes(2, 7, 24, 3)
    assert shapes["weights"] == pool.weights(x).shape and shapes["pooled"] == pool(x).shape


@pytest.mark.parametrize("head_dim", [16, 64])
def test_the_largest_qk_norm_logit_is_the_square_root_of_the_head_width(head_dim):
    normed, raw = _largest_qk_norm_logit(head_dim, 1e4)
    assert normed == pytest.approx(math.sqrt(head_dim), rel=1e-5)
    assert raw == pytest.approx(1e8 / math.sqrt(head_dim), rel=1e-5)  # |q|² / √d without it


# ---------------------------------------------------------------------------------------
# Mistakes that must be named


def attention_times_sqrt_d(q, k, v, h):
    return multi_head(q, k, v, h, scale=math.sqrt(q.shape[-1] // h))


def scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def masked_with_nan_rows(q, k, v, mask):
    """Correct where a query sees a key; nan where it sees none."""
    return scores(q, k).masked_fill(~mask, float("-inf")).softmax(-1) @ v


def naive_softmax(x, dim):
    return x.exp() / x.exp().sum(dim, keepdim=True)


def softmax_minus_global_max(x, dim):
    e = (x - x.max()).exp()
    return e / e.sum(dim, keepdim=True)


def patches_back(pattern):
    def rebuild(patches, patch_size, image_size):
        (p1, p2), (H, _) = ((s, s) if isinstance(s, int) else s for s in (patch_size, image_size))
        return rearrange(patches, pattern, gh=H // p1, p1=p1, p2=p2)

    return rebuild


def sin_cos_swapped(grid_size, dim):
    table = rearrange(sinusoidal_2d(grid_size, dim), "n (k two) -> n k two", two=2)
    return rearrange(table.flip(-1), "n k two -> n (k two)")  # cos on even, sin on odd


def one_coin_per_batch(x, p, training):
    if not training or p == 0:
        return x
    return x * (torch.rand(()) >= p) / (1 - p)


def no_attention_residual(block, x):
    x = block.attn(block.norm1(x))
    return x + block.mlp(block.norm2(x))


def no_mlp_residual(block, x):
    x = x + block.attn(block.norm1(x))
    return block.mlp(block.norm2(x))


def warmup_one_step_early(step, lr, warmup_steps, total_steps):
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    return lr_at(step, lr, warmup_steps, total_steps)


def count_without(term):
    """The parameter count with one usual slip: a part left out, or a size misread."""

    def count(c):
        D, L, K, r = c.dim, c.depth, c.num_classes, int(c.dim * c.mlp_ratio)
        grid = c.image_size // c.patch_size
        off = {
            "final LayerNorm": 2 * D,
            "bias": D,
            "qkv bias": 3 * L * D,
            "head bias": K,
            "LayerNorm shifts": (2 * L + 1) * D,
            "N not squared": (grid * grid - grid) * D,
            "MLP ratio 4": -L * (4 * D - r) * (2 * D + 1),
            "MLP biases": L * (r + D),  # = 3·L·D, the qkv biases, at mlp_ratio 2
            "in_channels": (c.in_channels - 1) * c.patch_size**2 * D,
        }[term]
        return param_count(c) - off

    return count


def axial_mask_column_major(grid_size, axis):
    gh, gw = grid_size
    n = torch.arange(gh * gw)
    line = n // gh if axis == "height" else n % gh  # column, or row, of token n = col·Gh + row
    return line[:, None] == line[None, :]


def relative_index_column_major(grid_size):
    """Patch n read at (n % Gh, n // Gh), as torch.meshgrid(..., indexing="xy") gives it."""
    gh, gw = grid_size
    coords = torch.stack(torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="xy"))
    offset = coords.flatten(1)[:, :, None] - coords.flatten(1)[:, None, :]  # (2, N, N)
    return (offset[0] + gh - 1) * (2 * gw - 1) + offset[1] + gw - 1


def sinusoidal_column_major(grid_size, dim):
    """Patch n read at (n % Gh, n // Gh): the grid flattened column by column."""
    gh, gw = grid_size
    n = torch.arange(gh * gw)
    half = dim // 2
    return torch.cat([sinusoidal_1d(gh, half)[n % gh], sinusoidal_1d(gw, half)[n // gh]], 1)


def square_only(grid_size, dim):
    """Right on a square grid only: row and column read with Gh where Gw belongs."""
    gh, gw = grid_size
    n = torch.arange(gh * gw)
    codes = sinusoidal_2d((gw, gh), dim).reshape(gw, gh, dim)
    return codes[n // gh, n % gh]


def reshaped_not_permuted(table, old_grid, new_grid):
    image = table.reshape(1, table.shape[1], *old_grid)  # mixes channels and patches
    resized = torch.nn.functional.interpolate(image, new_grid, mode="bicubic", antialias=True)
    return rearrange(resized, "1 d gh gw -> (gh gw) d")


def resized_with(**options):
    def resize(table, old_grid, new_grid):
        image = rearrange(table, "(gh gw) d -> 1 d gh gw", gh=old_grid[0])
        resized = torch.nn.functional.interpolate(image, new_grid, mode="bicubic", **options)
        return rearrange(resized, "1 d gh gw -> (gh gw) d")

    return resize


def layer_norm_by(var, eps_outside=False, dims=-1):
    def norm(x, weight, bias, eps):
        centred = x - x.mean(dims, keepdim=True)
        if eps_outside:
            return weight * centred / (var(x, dims).sqrt() + eps) + bias
        return weight * centred / (var(x, dims) + eps).sqrt() + bias

    return norm


def biased(x, dims):
    return x.var(dims, unbiased=False, keepdim=True)


def mean_with_class_token(tokens, pool, num_prefix_tokens):
    return tokens[:, 0] if pool == "cls" else tokens.mean(dim=1)


def smoothed_target(logits, targets, eps, others):
    """ε/others on every class, plus 1 - ε on the true one."""
    q = torch.full_like(logits, eps / others)
    q[torch.arange(len(targets)), targets] += 1 - eps
    return q


def smoothed_over_k_minus_1(logits, targets, eps):
    q = smoothed_target(logits, targets, eps, logits.shape[-1] - 1)
    q[torch.arange(len(targets)), targets] = 1 - eps  # the true class gets no share
    return -(q * logits.log_softmax(-1)).sum(-1).mean()


def smoothed_with_probabilities(logits, targets, eps):
    q = smoothed_target(logits, targets, eps, logits.shape[-1])
    return -(q * logits.softmax(-1)).sum(-1).mean()  # p where log p belongs


def smoothed_from_a_number(logits, targets, eps):
    """The right value, rebuilt from a Python number: no gradient reaches the logits."""
    return torch.tensor(F.cross_entropy(logits, targets, label_smoothing=eps).item())


def smoothed_log_of_softmax(logits, targets, eps):
    """log(softmax(...)): right on small logits, -inf where the softmax underflows to 0."""
    q = smoothed_target(logits, targets, eps, logits.shape[-1])
    return -(q * torch.log(torch.softmax(logits, -1))).sum(-1).mean()


def pooling_with(pool, mistake):
    """A pooling that is right except for ``mistake`` when ``pool`` is asked for."""
    wrong = {
        "normalised": lambda x, k: torch.nn.functional.layer_norm(x[:, 0], x.shape[-1:]),
        "sum": lambda x, k: x[:, k:].sum(dim=1),
        "mean": lambda x, k: x[:, k:].mean(dim=1),
        "skip one": lambda x, k: x[:, 1:].mean(dim=1),
        "keep axis": lambda x, k: x[:, k:].mean(dim=1, keepdim=True),
    }[mistake]

    def answer(tokens, kind, num_prefix_tokens):
        if kind == pool:
            return wrong(tokens, num_prefix_tokens)
        return pooled(tokens, kind, num_prefix_tokens)

    return answer


def smoothed_loss(mistake):
    """The label-smoothed loss with one usual mistake."""

    def loss(logits, targets, eps):
        K, rows = logits.shape[-1], torch.arange(len(targets))
        q = smoothed_target(logits, targets, eps, K)
        if mistake == "no share":
            q[rows, targets] = 1 - eps
        if mistake == "one-hot":
            q = torch.nn.functional.one_hot(targets, K).to(logits.dtype)
        log_p = logits.log_softmax(0 if mistake == "dim=0" else -1)
        per_class = -(q * log_p)
        value = (per_class.mean(-1) if mistake == "class mean" else per_class.sum(-1)).mean()
        return -value if mistake == "sign" else value

    return loss


def resnet_with(num_classes=None, maxpool=True, **conv1):
    """torchvision's ResNet-18, its conv1 built with ``conv1`` overriding the right options."""

    def build(in_channels, k):
        model = torchvision.models.resnet18(num_classes=num_classes or k)
        options = {**dict(kernel_size=7, stride=2, padding=3, bias=False), **conv1}
        model.conv1 = torch.nn.Conv2d(in_channels, 64, **options)
        if not maxpool:
            model.maxpool = torch.nn.Identity()
        return model

    return build


class BlockWithoutShortcut(torchvision.models.resnet.BasicBlock):
    """torchvision's residual block with its shortcut dropped: relu(bn2(conv2(...)))."""

    def forward(self, x):
        return self.relu(self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))))


def resnet_changed(fault):
    """The right answer, then one change that keeps every parameter's name and shape."""

    def build(in_channels, k):
        model = resnet18_greyscale(in_channels, k)
        if fault == "stem relu":
            model.relu = torch.nn.Identity()
        if fault == "stride moved":  # layer2's first block downsamples in conv2, not conv1
            model.layer2[0].conv1.stride, model.layer2[0].conv2.stride = (1, 1), (2, 2)
        if fault == "no shortcut":
            model.layer3[1].__class__ = BlockWithoutShortcut
        if fault == "max pooled":
            model.avgpool = torch.nn.AdaptiveMaxPool2d(1)
        if fault == "eps":
            model.bn1.eps = 0.1
        return model

    return build


def distillation_with(mistake):
    """DeiT's hard-label distillation loss with one usual mistake."""

    def loss(c, d, y, t, eps):
        ce, hard = F.cross_entropy, t.argmax(-1)
        return {
            "soft": lambda: (ce(c, y, label_smoothing=eps) + ce(d, t.softmax(-1))) / 2,
            "kl": lambda: (
                (
                    ce(c, y, label_smoothing=eps)
                    + F.kl_div(d.log_softmax(-1), t.softmax(-1), reduction="batchmean")
                )
                / 2
            ),
            "smoothed": lambda: (
                (ce(c, y, label_smoothing=eps) + ce(d, hard, label_smoothing=eps)) / 2
            ),
            "sum": lambda: ce(c, y, label_smoothing=eps) + ce(d, hard),
            "swapped": lambda: (ce(d, y, label_smoothing=eps) + ce(c, hard)) / 2,
            "teacher": lambda: (ce(t, y, label_smoothing=eps) + ce(d, hard)) / 2,
            "per image": lambda: (
                (ce(c, y, label_smoothing=eps, reduction="none") + ce(d, hard, reduction="none"))
                / 2
            ),
        }[mistake]()

    return loss


def mixup_with(mistake):
    """Mixup with one usual mistake."""

    def mix(images, labels, lam, num_classes):
        one_hot = F.one_hot(labels, num_classes).to(images.dtype)
        partner = {
            "randperm": torch.randperm(len(images)),
            "flip": torch.arange(len(images)).flip(0),
            "roll -1": torch.arange(len(images)).roll(-1, 0),
        }.get(mistake, torch.arange(len(images)).roll(1, 0))
        mixed = lam * images + (1 - lam) * images[partner]
        soft = lam * one_hot + (1 - lam) * one_hot[partner]
        if mistake == "images 1 - lam":
            mixed = (1 - lam) * images + lam * images[partner]
        if mistake == "labels 1 - lam":
            soft = (1 - lam) * one_hot + lam * one_hot[partner]
        if mistake == "hard labels":
            soft = labels
        if mistake == "one-hot":
            soft = one_hot
        if mistake == "no num_classes":
            one_hot = F.one_hot(labels).to(images.dtype)
            soft = lam * one_hot + (1 - lam) * one_hot[partner]
        return mixed, soft

    return mix


def masking_with(mistake):
    """MAE's random masking with one usual mistake."""

    def mask_tokens(tokens, mask_ratio, generator):
        b, n, d = tokens.shape
        x = n * mask_ratio
        keep = {  # MAE's count, int(N·(1 - mask_ratio)), unless the mistake is the count
            "int": n - int(x),
            "round": n - round(x),
            "half up": n - int(x + 0.5),
            "round kept": round(n - x),
        }.get(mistake, int(n * (1 - mask_ratio)))
        noise = {
            "one mask": lambda: torch.rand(1, n, generator=generator).expand(b, n),
            "global": lambda: torch.rand(b, n),
            "seed 0": lambda: torch.rand(b, n, generator=torch.Generator().manual_seed(0)),
        }.get(mistake, lambda: torch.rand(b, n, generator=generator))()
        ids_shuffle = torch.arange(n).expand(b, n) if mistake == "first" else noise.argsort(1)
        if mistake == "twice":
            ids_shuffle = torch.cat([ids_shuffle[:, :1], ids_shuffle[:, :-1]], dim=1)
        ids_restore = ids_shuffle.argsort(dim=1)
        source = tokens.roll(1, 0) if mistake == "other image" else tokens
        visible = source.gather(1, ids_shuffle[:, :keep, None].expand(-1, -1, d))
        mask = torch.ones(b, n)
        mask[:, :keep] = 0
        if mistake != "shuffled":
            mask = mask.gather(1, ids_restore)
        mask = {"inverted": 1 - mask, "bool": mask.bool()}.get(mistake, mask)
        return visible, mask, ids_shuffle if mistake == "ids_shuffle" else ids_restore

    return mask_tokens


def mae_loss_with(mistake):
    """MAE's loss with one usual mistake."""

    def loss(pred, images, mask, p):
        if mistake == "(c p1 p2)":
            patches = rearrange(images, "b c (gh p1) (gw p2) -> b (gh gw) (c p1 p2)", p1=p, p2=p)
        else:
            patches = image_to_patches(images, p)
        dims = {"image": (1, 2), "batch": (0, 1, 2)}.get(mistake, -1)
        mean = patches.mean(dims, keepdim=True)
        var = patches.var(dims, keepdim=True, unbiased=mistake != "biased")
        target = {
            "raw": lambda: patches,
            "no eps": lambda: (patches - mean) / var.sqrt(),
            "variance": lambda: (patches - mean) / (var + 1e-6),
        }.get(mistake, lambda: (patches - mean) / (var + 1e-6).sqrt())()
        error = (pred - target).pow(2)
        per_patch = error.sum(-1) if mistake == "pixel sum" else error.mean(-1)
        if mistake == "visible":
            mask = 1 - mask
        return {
            "all": lambda: per_patch.mean(),
            "per image": lambda: (per_patch * mask).sum(1) / mask.sum(1),
            "per patch": lambda: per_patch * mask,
            "all count": lambda: (per_patch * mask).sum() / mask.numel(),
            "sum": lambda: (per_patch * mask).sum(),
        }.get(mistake, lambda: (per_patch * mask).sum() / mask.sum())()

    return loss


def decoder_tokens_with(mistake):
    """The decoder's input with one usual mistake."""

    def tokens(latent, mask_token, ids_restore):
        b, k, d = latent.shape
        n = ids_restore.shape[1]
        hidden = mask_token.expand(b if mistake != "no copies" else 1, n - k, -1)
        if mistake == "zeros":
            hidden = torch.zeros_like(hidden)
        parts = [hidden, latent] if mistake == "mask first" else [latent, hidden]
        x = torch.cat(parts, dim=1)
        ids = ids_restore.argsort(1) if mistake == "ids_shuffle" else ids_restore
        index = ids[:, :, None] if mistake == "no expand" else ids[:, :, None].expand(-1, -1, d)
        return {"shuffled": lambda: x, "dim 2": lambda: x.gather(2, index)}.get(
            mistake, lambda: x.gather(1, index)
        )()

    return tokens


def grid_with(mistake):
    """The patch grid of chapter 11 with one usual mistake."""

    def grid(tokens, p, grid_size):
        (gh, gw), n = grid_size, grid_size[0] * grid_size[1]
        x = {
            "no drop": tokens,
            "class only": tokens[:, 1:],
            "class only, sliced": tokens[:, 1 : 1 + n],
            "last p": tokens[:, :n],
        }.get(mistake, tokens[:, p:])
        return {
            "channels last": lambda: rearrange(x, "b (h w) d -> b h w d", h=gh),
            "reshape": lambda: x.reshape(len(x), -1, gh, gw),
            "column-major": lambda: rearrange(x, "b (w h) d -> b d h w", h=gh),
            "axes swapped": lambda: rearrange(x, "b (h w) d -> b d w h", h=gh),
            "(Gw, Gh)": lambda: x.transpose(1, 2).reshape(len(x), -1, gw, gh),
            "zeros": lambda: torch.zeros(len(x), x.shape[-1], gh, gw),
            "numpy": lambda: prefix_to_grid(tokens, p, grid_size).numpy(),
        }.get(mistake, lambda: prefix_to_grid(x, 0, grid_size))()

    return grid


def map_shapes_with(**wrong):
    """The MAP head's shapes with the entries of ``wrong``, each a function of (B, T, D, h, d)."""

    def shapes(B, T, D, h):
        made = {name: at(B, T, D, h, D // h) for name, at in wrong.items()}
        return {**map_head_shapes(B, T, D, h), **made}

    return shapes


def post_norm(block, x):
    x = block.norm1(x + block.attn(x))
    return block.norm2(x + block.mlp(x))


MISTAKES = [  # (checker, wrong answer, phrase the message must contain)
    ("check_attention", attention_times_sqrt_d, "multiplied"),
    ("check_masked_attention", lambda q, k, v, m: masked(q, k, v, ~m), "mask is inverted"),
    (
        "check_masked_attention",
        lambda q, k, v, m: scores(q, k).softmax(-1).masked_fill(~m, 0) @ v,
        "you masked after the softmax",
    ),
    (
        "check_masked_attention",
        lambda q, k, v, m: scores(q, k).masked_fill(~m, 0).softmax(-1) @ v,
        "set the blocked scores to 0",
    ),
    (
        "check_masked_attention",
        lambda q, k, v, m: (scores(q, k) + m).softmax(-1) @ v,
        "added the boolean mask",
    ),
    ("check_masked_attention", lambda q, k, v, m: masked(q, k, v, m.mT), "mask is transposed"),
    (
        "check_masked_attention",
        lambda q, k, v, m: masked(q * math.sqrt(q.shape[-1]), k, v, m),
        "not scaled",
    ),
    ("check_masked_attention", masked_with_nan_rows, "its output is nan"),
    (
        "check_masked_attention",
        lambda q, k, v, m: scores(q, k).masked_fill(~m, torch.finfo(q.dtype).min).softmax(-1) @ v,
        "plain mean of the values",
    ),
    ("check_stable_softmax", naive_softmax, "Subtract the maximum along dim"),
    ("check_stable_softmax", softmax_minus_global_max, "one maximum for the whole tensor"),
    ("check_stable_softmax", lambda x, dim: torch.softmax(x, -1), "not dim=0"),
    (
        "check_patches_to_image",
        patches_back("b (gh gw) (c p1 p2) -> b c (gh p1) (gw p2)"),
        "(c p1 p2), channel slowest",
    ),
    (
        "check_patches_to_image",
        patches_back("b (gw gh) (p1 p2 c) -> b c (gh p1) (gw p2)"),
        "column-major",
    ),
    (
        "check_patches_to_image",
        patches_back("b (gh gw) (p2 p1 c) -> b c (gh p1) (gw p2)"),
        "transposed",
    ),
    (
        "check_patches_to_image",
        patches_back("b (gh gw) (p1 p2 c) -> b c (p1 gh) (p2 gw)"),
        "interleaved",
    ),
    (
        "check_patches_to_image",
        lambda patches, p, size: patches.reshape(
            len(patches), -1, *((size,) * 2 if isinstance(size, int) else size)
        ),
        "you reshaped the patches",
    ),
    ("check_sinusoidal_2d", sinusoidal_column_major, "indexed with Gh where Gw belongs"),
    ("check_sinusoidal_2d", sin_cos_swapped, "sin and cos are swapped"),
    ("check_drop_path", one_coin_per_batch, "one coin for the whole batch"),
    ("check_sinusoidal_2d", square_only, "indexed with Gh where Gw belongs"),
    ("check_resize_table", reshaped_not_permuted, "a reshape is not a transpose"),
    (
        "check_resize_table",
        lambda table, old_grid, new_grid: resize_table(table, old_grid[::-1], new_grid),
        "the grid is taken as (Gw, Gh)",
    ),
    ("check_resize_table", resized_with(antialias=True, align_corners=True), "align_corners=True"),
    ("check_resize_table", resized_with(antialias=False), "antialias is off"),
    (
        "check_layer_norm",
        layer_norm_by(lambda x, dims: x.var(dims, keepdim=True)),
        "divides by (D - 1)",
    ),
    ("check_layer_norm", layer_norm_by(biased, eps_outside=True), "eps is added outside"),
    ("check_layer_norm", layer_norm_by(biased, dims=-2), "taken over the tokens (axis -2)"),
    ("check_block_forward", no_attention_residual, "attention branch has no residual"),
    ("check_block_forward", no_mlp_residual, "MLP branch has no residual"),
    ("check_lr_schedule", warmup_one_step_early, "one step early"),
    ("check_param_count", count_without("final LayerNorm"), "final LayerNorm"),
    ("check_param_count", count_without("bias"), "bias of the patch embedding"),
    ("check_param_count", count_without("qkv bias"), "query, key and value biases"),
    ("check_param_count", count_without("head bias"), "the head's bias is missing"),
    ("check_param_count", count_without("LayerNorm shifts"), "shifts β are missing"),
    ("check_param_count", count_without("N not squared"), "not H/P = 4"),
    ("check_param_count", count_without("MLP ratio 4"), "not 4·D = 256"),
    ("check_param_count", count_without("MLP biases"), "the MLP's two biases are missing"),
    ("check_param_count", count_without("in_channels"), "C·P²·D weights: C = 3"),
    ("check_predict", lambda model, x, k: tuple(top_k(model, x, k))[::-1], "outputs are swapped"),
    ("check_pooling", mean_with_class_token, "averaged the class token in"),
    ("check_pooling", lambda x, pool, k: x[:, -1], "took the last token"),
    ("check_pooling", lambda x, pool, k: x[:, 0] if pool == "cls" else x.mean(0), "batch axis"),
    ("check_pooling", lambda x, pool, k: x.mean(-1), "feature axis"),
    ("check_smoothed_cross_entropy", smoothed_over_k_minus_1, "over the K - 1 = 9 other classes"),
    (
        "check_smoothed_cross_entropy",
        lambda logits, y, eps: F.cross_entropy(logits, y, label_smoothing=eps, reduction="none"),
        "one loss per image",
    ),
    (
        "check_smoothed_cross_entropy",
        lambda logits, y, eps: F.cross_entropy(logits, y, label_smoothing=eps, reduction="sum"),
        "summed the losses of the batch",
    ),
    ("check_smoothed_cross_entropy", smoothed_with_probabilities, "the probabilities p"),
    ("check_smoothed_cross_entropy", smoothed_from_a_number, "your loss has no gradient"),
    ("check_smoothed_cross_entropy", smoothed_log_of_softmax, "softmax underflows to 0"),
    ("check_pooling", pooling_with("cls", "normalised"), "normalised the pooled vector"),
    ("check_pooling", pooling_with("mean", "sum"), "summed the patch tokens"),
    ("check_pooling", pooling_with("cls", "mean"), "not an average"),
    ("check_pooling", pooling_with("mean", "skip one"), "skipped token 0"),
    ("check_pooling", pooling_with("mean", "keep axis"), "token axis is still there"),
    ("check_smoothed_cross_entropy", smoothed_loss("no share"), "not 1 - ε"),
    ("check_smoothed_cross_entropy", smoothed_loss("one-hot"), "smoothing is missing"),
    ("check_smoothed_cross_entropy", smoothed_loss("dim=0"), "over the batch (dim=0)"),
    ("check_smoothed_cross_entropy", smoothed_loss("class mean"), "averaged over the K classes"),
    ("check_smoothed_cross_entropy", smoothed_loss("sign"), "the sign is wrong"),
    (
        "check_greyscale_resnet",
        lambda in_channels, k: torchvision.models.resnet18(num_classes=k),
        "conv1 must take in_channels",
    ),
    (
        "check_greyscale_resnet",
        lambda in_channels, k: torch.nn.Sequential(
            torch.nn.Conv2d(in_channels, 3, 1), torchvision.models.resnet18(num_classes=k)
        ),
        "rather than wrapping it",
    ),
    ("check_greyscale_resnet", resnet_with(num_classes=1000), "still has 1000 outputs"),
    ("check_greyscale_resnet", resnet_with(stride=1), "must stay torchvision's 7×7"),
    ("check_greyscale_resnet", resnet_with(kernel_size=3, padding=1), "conv1 is a 3×3"),
    ("check_greyscale_resnet", resnet_with(bias=True), "bias=False"),
    ("check_greyscale_resnet", resnet_with(maxpool=False), "max-pool after conv1 is gone"),
    ("check_greyscale_resnet", resnet_with(dilation=2), "dilated (dilation=(2, 2))"),
    ("check_greyscale_resnet", resnet_with(dilation=2), "to a 6×6 grid, not 7×7"),
    ("check_greyscale_resnet", resnet_with(padding_mode="reflect"), "padding_mode='reflect'"),
    ("check_greyscale_resnet", resnet_changed("stem relu"), "model.relu gives other values"),
    (
        "check_greyscale_resnet",
        resnet_changed("stem relu"),
        "yours is Identity(), torchvision's ReLU(inplace=True); only conv1 may change",
    ),
    (
        "check_greyscale_resnet",
        resnet_changed("stride moved"),
        "model.layer2[0].conv1 gives (2, 128, 16, 16), torchvision's (2, 128, 8, 8)",
    ),
    (
        "check_greyscale_resnet",
        resnet_changed("no shortcut"),
        "model.layer3[1].relu (call 2, after adding the shortcut) gives other values",
    ),
    ("check_greyscale_resnet", resnet_changed("max pooled"), "yours is AdaptiveMaxPool2d"),
    ("check_greyscale_resnet", resnet_changed("eps"), "model.bn1 gives other values"),
    ("check_distillation_loss", distillation_with("soft"), "not its probabilities"),
    ("check_distillation_loss", distillation_with("kl"), "the teacher's hard labels"),
    ("check_distillation_loss", distillation_with("smoothed"), "for the class head only"),
    ("check_distillation_loss", distillation_with("sum"), "summed the two terms"),
    ("check_distillation_loss", distillation_with("swapped"), "heads are swapped"),
    ("check_distillation_loss", distillation_with("teacher"), "uses the teacher's logits"),
    ("check_distillation_loss", distillation_with("per image"), "one loss per image"),
    ("check_mixup", mixup_with("images 1 - lam"), "1 - lam is on the wrong side"),
    ("check_mixup", mixup_with("labels 1 - lam"), "wrong side of the labels"),
    ("check_mixup", mixup_with("hard labels"), "labels are not mixed"),
    ("check_mixup", mixup_with("one-hot"), "you returned one-hot labels"),
    ("check_mixup", mixup_with("randperm"), "random permutation"),
    ("check_mixup", mixup_with("flip"), "timm's Mixup"),
    ("check_mixup", mixup_with("roll -1"), "roll(-1, 0)"),
    ("check_mixup", mixup_with("no num_classes"), "not num_classes"),
    ("check_random_masking", masking_with("int"), "hiding int(N·mask_ratio)"),
    ("check_random_masking", masking_with("round"), "hiding round(N·mask_ratio)"),
    ("check_random_masking", masking_with("half up"), "keep N_keep = int(N·(1 - mask_ratio))"),
    ("check_random_masking", masking_with("round kept"), "keeping round(N·(1 - mask_ratio))"),
    ("check_random_masking", masking_with("int"), "as MAE's code (len_keep in models_mae.py)"),
    ("check_random_masking", masking_with("one mask"), "same mask for the whole batch"),
    ("check_random_masking", masking_with("first"), "you keep the first N_keep"),
    ("check_random_masking", masking_with("shuffled"), "mask is in shuffled order"),
    ("check_random_masking", masking_with("inverted"), "mask is inverted"),
    ("check_random_masking", masking_with("bool"), "mask must be float"),
    ("check_random_masking", masking_with("ids_shuffle"), "that is ids_shuffle"),
    ("check_random_masking", masking_with("other image"), "it is a token of image"),
    ("check_random_masking", masking_with("twice"), "twice"),
    ("check_random_masking", masking_with("global"), "not from torch's global one"),
    ("check_random_masking", masking_with("seed 0"), "different seeds hid the same tokens"),
    ("check_mae_loss", mae_loss_with("all"), "the loss is over all patches"),
    ("check_mae_loss", mae_loss_with("visible"), "over the visible patches"),
    ("check_mae_loss", mae_loss_with("raw"), "per-patch normalisation is missing"),
    ("check_mae_loss", mae_loss_with("image"), "normalised over each whole image"),
    ("check_mae_loss", mae_loss_with("batch"), "normalised over the whole batch"),
    ("check_mae_loss", mae_loss_with("biased"), "the biased one"),
    ("check_mae_loss", mae_loss_with("variance"), "divided by the variance"),
    ("check_mae_loss", mae_loss_with("no eps"), "variance 0"),
    ("check_mae_loss", mae_loss_with("all count"), "number of all patches"),
    ("check_mae_loss", mae_loss_with("pixel sum"), "summed the squared errors"),
    ("check_mae_loss", mae_loss_with("sum"), "summed over the hidden patches"),
    ("check_mae_loss", mae_loss_with("per image"), "one loss per image"),
    ("check_mae_loss", mae_loss_with("per patch"), "return one number"),
    ("check_mae_loss", mae_loss_with("(c p1 p2)"), "(c p1 p2) order"),
    ("check_decoder_tokens", decoder_tokens_with("shuffled"), "left in shuffled order"),
    ("check_decoder_tokens", decoder_tokens_with("ids_shuffle"), "unshuffled with ids_shuffle"),
    ("check_decoder_tokens", decoder_tokens_with("mask first"), "mask tokens first"),
    ("check_decoder_tokens", decoder_tokens_with("dim 2"), "along the features (dim 2)"),
    ("check_decoder_tokens", decoder_tokens_with("no copies"), "copied for every image"),
    ("check_decoder_tokens", decoder_tokens_with("no expand"), "expand gather's index"),
    ("check_decoder_tokens", decoder_tokens_with("zeros"), "hidden places hold zeros"),
    # Mistakes the chapters demonstrate, kept here for the line-width test below.
    ("check_block_forward", post_norm, "post-norm"),
    (
        "check_drop_path",
        lambda x, p, training: torch.nn.functional.dropout(x, p, training),
        "that is dropout",
    ),
    (
        "check_image_to_patches",
        lambda images, p: rearrange(
            images,
            "b c (gh p1) (gw p2) -> b (gh gw) (c p1 p2)",
            p1=p if isinstance(p, int) else p[0],
            p2=p if isinstance(p, int) else p[1],
        ),
        "(c p1 p2)",
    ),
    ("check_patch_embedding", lambda conv: conv.weight.flatten(1), "(c p1 p2) order"),
    (
        "check_axial_attention",
        lambda x, attend, axis: attend(x.reshape(-1, x.shape[1], x.shape[3])).reshape(x.shape),
        "does not gather columns",
    ),
    (
        "check_axial_mask",
        lambda grid_size, axis: axial_mask(grid_size, "width" if axis == "height" else "height"),
        "that is the 'width' mask",
    ),
    ("check_axial_mask", axial_mask_column_major, "numbered the tokens column-major"),
    ("check_axial_mask", lambda grid_size, axis: ~axial_mask(grid_size, axis), "inverted"),
    ("check_class_token_and_position", token_input("batch dimension"), "a batch dimension"),
    ("check_class_token_and_position", token_input("N rows"), "pos_embed has N = 6 rows"),
    ("check_class_token_and_position", token_input("before"), "added before the class token"),
    ("check_class_token_and_position", token_input("before, crash"), "added to the N patch"),
    ("check_class_token_and_position", token_input("no class position"), "gets no position"),
    ("check_class_token_and_position", token_input("at the end"), "at the end of the sequence"),
    ("check_class_token_and_position", token_input("axis 2"), "along dimension 2"),
    ("check_class_token_and_position", token_input("axis 0"), "along dimension 0"),
    ("check_class_token_and_position", token_input("not expanded"), "expanded to the batch"),
    ("check_class_token_and_position", token_input("detached"), "no gradient reaches"),
    (
        "check_relative_position_index",
        relative_index_column_major,
        "offsets of column-major coordinates",
    ),
    ("check_window_partition", lambda x, M: x.reshape(-1, M * M, x.shape[-1]), "pieces of rows"),
    ("check_window_partition", partition_by("(b nw nh) (m1 m2) c"), "column by column"),
    ("check_window_partition", partition_by("(b nh nw) (m2 m1) c"), "(m1 m2), not (m2 m1)"),
    ("check_window_partition", partition_by("(nh nw b) (m1 m2) c"), "the outer axis"),
    ("check_window_partition", partition_by("b (nh nw) m1 m2 c"), "flatten each window"),
    ("check_shift_mask", lambda h, w, M, s: torch.ones(h * w // M**2, M * M, M * M), "every entry"),
    ("check_shift_mask", lambda *a: ~official_shift_mask(*a), "inverted"),
    ("check_shift_mask", shift_mask_with("first s"), "a roll the other way, by +s"),
    ("check_shift_mask", shift_mask_with("rows only"), "the wrapped rows only"),
    ("check_shift_mask", shift_mask_with("additive"), "an additive mask"),
    (
        "check_shift_mask",
        lambda h, w, M, s: torch.ones(h * w, h * w, dtype=torch.bool),
        "one per window",
    ),
    ("check_window_relative_index", relative_index_with("2M+1"), "2M + 1 = 7"),
    ("check_window_relative_index", relative_index_with("M"), "by M = 3"),
    ("check_window_relative_index", relative_index_with("no offset"), "forgot to add M - 1"),
    ("check_window_relative_index", relative_index_with("key - query"), "key minus query"),
    ("check_window_relative_index", relative_index_with("float"), "must hold integers"),
    ("check_prefix_to_grid", grid_with("no drop"), "right without prefix tokens"),
    ("check_prefix_to_grid", grid_with("class only"), "class token and 4 registers come first"),
    ("check_prefix_to_grid", grid_with("class only, sliced"), "dropped the class token only"),
    ("check_prefix_to_grid", grid_with("last p"), "dropped the last 5"),
    ("check_prefix_to_grid", grid_with("channels last"), "that is channels-last"),
    ("check_prefix_to_grid", grid_with("reshape"), "a reshape is not a transpose"),
    ("check_prefix_to_grid", grid_with("column-major"), "filled the grid column by column"),
    ("check_prefix_to_grid", grid_with("axes swapped"), "the grid is transposed, (Gw, Gh)"),
    ("check_prefix_to_grid", grid_with("(Gw, Gh)"), "got shape (2, 4, 7, 3)"),
    ("check_prefix_to_grid", grid_with("zeros"), "the shape is right but not the values"),
    ("check_prefix_to_grid", grid_with("numpy"), "return a tensor, got ndarray"),
    ("check_layer_scale_parameters", lambda dim, depth: dim * depth, "one γ per block"),
    ("check_layer_scale_parameters", lambda dim, depth: 2 * depth, "not one number per branch"),
    ("check_layer_scale_parameters", lambda dim, depth: dim, "one γ for the whole model"),
    ("check_layer_scale_parameters", lambda dim, depth: 2 * dim, "that is one block's two"),
    ("check_layer_scale_parameters", lambda dim, depth: 2 * dim**2 * depth, "diag(λ)"),
    ("check_layer_scale_parameters", lambda dim, depth: 3 * dim * depth, "expected 384, got 576"),
    ("check_layer_scale_parameters", lambda dim, depth: 2 * dim * depth + 0.5, "return an int"),
    (
        "check_map_head_shapes",
        map_shapes_with(queries=lambda B, T, D, h, d: (B, h, T, d)),
        "T rows of queries as in self-attention",
    ),
    (
        "check_map_head_shapes",
        map_shapes_with(weights=lambda B, T, D, h, d: (B, h, T, T)),
        "a T × T map as in self-attention",
    ),
    (
        "check_map_head_shapes",
        map_shapes_with(pooled=lambda B, T, D, h, d: (B, 1, D)),
        "the query axis is still there",
    ),
    (
        "check_map_head_shapes",
        map_shapes_with(queries=lambda B, T, D, h, d: (B, h, 1, D)),
        "'queries': expected (2, 4, 1, 8), got (2, 4, 1, 32); the heads split D",
    ),
    (
        "check_map_head_shapes",
        map_shapes_with(keys=lambda B, T, D, h, d: (B, h, T, D)),
        "'keys': expected (2, 4, 10, 8), got (2, 4, 10, 32); the heads split D",
    ),
    (
        "check_map_head_shapes",
        map_shapes_with(queries=lambda B, T, D, h, d: (1, h, 1, d)),
        "it is expanded to B",
    ),
    (
        "check_map_head_shapes",
        map_shapes_with(weights=lambda B, T, D, h, d: (B, h, T, 1)),
        "one row per query, one column per key",
    ),
    (
        "check_map_head_shapes",
        map_shapes_with(pooled=lambda B, T, D, h, d: torch.zeros(B, D)),
        "return a shape, a tuple of ints, got Tensor",
    ),
    ("check_map_head_shapes", lambda B, T, D, h: {"queries": (B, h, 1, D // h)}, "lacks ['keys'"),
    ("check_map_head_shapes", lambda B, T, D, h: [(B, D)], "return a dict of shapes"),
]


@pytest.mark.parametrize("name, wrong, phrase", MISTAKES, ids=[f"{m[0]}-{m[2]}" for m in MISTAKES])
def test_names_the_mistake(name, wrong, phrase):
    with pytest.raises(AssertionError) as error:
        getattr(exercises, name)(wrong)
    assert phrase in flat(str(error.value)), str(error.value)


def test_param_count_does_not_blame_the_class_token_for_the_final_layernorm():
    with pytest.raises(AssertionError) as error:
        exercises.check_param_count(count_without("final LayerNorm"))
    assert "class token is missing twice" not in flat(str(error.value))


def test_param_count_tells_the_qkv_biases_from_the_mlp_biases_of_the_same_count():
    """At mlp_ratio 2 both are 3·D per block; the other configurations tell them apart."""
    for term, other in (("qkv bias", "MLP's two biases"), ("MLP biases", "query, key")):
        with pytest.raises(AssertionError) as error:
            exercises.check_param_count(count_without(term))
        assert other not in flat(str(error.value)), term


# ---------------------------------------------------------------------------------------
# No trace


def consumes_randomness(*args):
    torch.rand(100)  # a learner's answer that draws from the global generator, then fails
    return None


@pytest.mark.parametrize("name", CHECKERS)
@pytest.mark.parametrize("answer", ["reference", "wrong"])
def test_leaves_the_global_random_state_unchanged(name, answer):
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    fn = REFERENCES[name] if answer == "reference" else consumes_randomness
    try:
        getattr(exercises, name)(fn)
    except Exception:
        assert answer == "wrong"
    assert torch.equal(torch.get_rng_state(), before)


# ---------------------------------------------------------------------------------------
# Messages read well in the book


WIDTH = 80  # the chapters print "AssertionError: " + message; the book shows about 88


@pytest.mark.parametrize("name, wrong, phrase", MISTAKES, ids=[f"{m[0]}-{m[2]}" for m in MISTAKES])
def test_failure_messages_fit_the_page(name, wrong, phrase):
    with pytest.raises(AssertionError) as error:
        getattr(exercises, name)(wrong)
    printed = f"AssertionError: {error.value}"
    assert max(len(line) for line in printed.splitlines()) <= WIDTH, printed


@pytest.mark.parametrize("name", CHECKERS)
def test_confirmations_fit_the_page(name, capsys):
    getattr(exercises, name)(REFERENCES[name])
    printed = capsys.readouterr().out
    assert max(len(line) for line in printed.splitlines()) <= WIDTH, printed


# ---------------------------------------------------------------------------------------
# The chapter's stub, untouched


def untouched_stub(*args):
    raise NotImplementedError


def stub_that_fails_later(*args):
    """An answer that calls a helper the learner has not written yet."""
    raise NotImplementedError("a helper is still to be written")


@pytest.mark.parametrize("name", [n for n in CHECKERS if not n.endswith("_prediction")])
def test_an_untouched_stub_is_reported_as_not_attempted(name, capsys):
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    getattr(exercises, name)(untouched_stub)  # prints, does not raise
    assert capsys.readouterr().out == (
        "not attempted yet: fill in `untouched_stub` above and re-run\n"
    )
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("name", [n for n in CHECKERS if n.endswith("_prediction")])
def test_an_untouched_prediction_is_reported_as_not_attempted(name, capsys):
    getattr(exercises, name)(...)  # the chapter's stub: `predicted_x = ...`
    assert capsys.readouterr().out.startswith("not attempted yet: fill in `predicted_")


def test_not_attempted_names_the_learners_function_whatever_its_name(capsys):
    exercises.check_attention(stub_that_fails_later)
    assert "`stub_that_fails_later`" in capsys.readouterr().out


def test_other_errors_in_an_answer_are_still_reported_as_crashes():
    def crashes(q, k, v, num_heads):
        raise RuntimeError("shape mismatch")

    with pytest.raises(AssertionError) as error:
        exercises.check_attention(crashes)
    assert "crashed" in str(error.value) and "RuntimeError: shape mismatch" in flat(
        str(error.value)
    )


# ---------------------------------------------------------------------------------------
# "predict, then measure": the shared grader


def test_grade_prediction_shows_the_measured_value_and_names_a_slip(capsys):
    from vit_tutorial.exercises._predictions import grade_prediction

    grade_prediction("check_x", "x", 105, 100, what="tokens", tolerance=0.1)
    assert capsys.readouterr().out.startswith("Correct! check_x: you predicted 105 tokens")
    with pytest.raises(AssertionError, match=r"measured: 100\. counted twice"):
        grade_prediction(
            "check_x", "x", 200, 100, what="tokens", tolerance=0.1, slips=[("counted twice", 200)]
        )
    with pytest.raises(AssertionError, match="within ±10%"):
        grade_prediction("check_x", "x", 150, 100, what="tokens", tolerance=0.1)
    with pytest.raises(AssertionError, match="the right sign"):
        grade_prediction("check_x", "x", 0.5, -0.2, what="points", tolerance="sign")
    with pytest.raises(AssertionError, match="x must be a number, got str"):
        grade_prediction("check_x", "x", "100", 100, what="tokens", tolerance=0.1)
    grade_prediction("check_x", "x", ..., 100, what="tokens", tolerance=0.1)
    assert capsys.readouterr().out == "not attempted yet: fill in `x` above and re-run\n"


@pytest.mark.parametrize(
    "number",
    [np.float32(0.0724), np.float64(0.0724), np.array(0.0724), torch.tensor(0.0724)],
    ids=["np.float32", "np.float64", "0-d ndarray", "0-d tensor"],
)
def test_prediction_checkers_accept_numpy_and_torch_numbers(number, capsys):
    exercises.check_window_flops_prediction(number)
    assert capsys.readouterr().out.startswith("Correct! check_window_flops_prediction")


@pytest.mark.parametrize(
    "whole",
    [np.int64(785), np.array(785), torch.tensor(785)],
    ids=["np.int64", "0-d ndarray", "0-d tensor"],
)
def test_prediction_checkers_accept_numpy_and_torch_whole_numbers(whole, capsys):
    exercises.check_tokens_prediction(whole)
    assert capsys.readouterr().out.startswith("Correct! check_tokens_prediction")
    with pytest.raises(AssertionError) as error:
        exercises.check_tokens_prediction(whole - 1)
    assert "You left out the class token" in flat(str(error.value))


@pytest.mark.parametrize("kind", [np.int64, torch.tensor], ids=["np.int64", "0-d tensor"])
def test_count_checkers_take_numpy_and_torch_whole_numbers(kind, capsys):
    exercises.check_axial_scores(lambda gh, gw: kind(gh * gw * (gh + gw)))
    exercises.check_layer_scale_parameters(lambda dim, depth: kind(2 * dim * depth))
    assert capsys.readouterr().out.count("Correct!") == 2
    with pytest.raises(AssertionError, match=wrapped("that is N²")):
        exercises.check_axial_scores(lambda gh, gw: kind((gh * gw) ** 2))
    with pytest.raises(AssertionError, match=wrapped("that is one γ per block")):
        exercises.check_layer_scale_parameters(lambda dim, depth: kind(dim * depth))


def test_a_count_written_as_a_whole_float_is_a_count(capsys):
    exercises.check_layer_scale_parameters(lambda dim, depth: torch.tensor(2.0 * dim * depth))
    exercises.check_layer_scale_parameters(lambda dim, depth: 2.0 * dim * depth)
    assert capsys.readouterr().out.count("Correct!") == 2


def test_the_formula_checkers_explain_an_answer_that_is_no_number():
    with pytest.raises(
        AssertionError, match=wrapped("dim=64, depth=3: return the parameters, got NoneType")
    ):
        exercises.check_param_count(lambda config: None)
    with pytest.raises(AssertionError, match=wrapped("return a number, got str")):
        exercises.check_lr_schedule(lambda step, lr, warmup, total: "0.1")
    with pytest.raises(AssertionError, match=wrapped("fn crashed on dim=64, depth=3: ZeroDiv")):
        exercises.check_param_count(lambda config: 1 / 0)


def test_count_checkers_reject_what_is_not_a_whole_number():
    with pytest.raises(AssertionError, match=wrapped("return a number, got NoneType")):
        exercises.check_axial_scores(lambda gh, gw: None)
    with pytest.raises(AssertionError, match=wrapped("return an int, got float")):
        exercises.check_layer_scale_parameters(lambda dim, depth: 2.0 * dim * depth + 0.5)
    with pytest.raises(AssertionError, match=wrapped("return an int, got bool")):
        exercises.check_layer_scale_parameters(lambda dim, depth: np.bool_(True))


def test_an_unbounded_logit_is_named_whatever_its_number_type():
    for unbounded in (np.float32("inf"), torch.tensor(1e9), np.array(float("nan"))):
        with pytest.raises(AssertionError) as error:
            exercises.check_qk_norm_logit_prediction(unbounded)
        assert "QK-norm bounds it" in flat(str(error.value))


@pytest.mark.parametrize(
    "value, kind",
    [
        (True, "got bool"),
        (np.bool_(True), "got bool"),
        (torch.tensor(True), "got bool"),
        (torch.tensor([785]), "got Tensor of shape (1,)"),
        (np.array([785, 786]), "got ndarray of shape (2,)"),
        (785j, "got complex"),
        ("785", "got str"),
    ],
)
def test_prediction_checkers_reject_what_is_not_one_number(value, kind):
    with pytest.raises(AssertionError) as error:
        exercises.check_tokens_prediction(value)
    assert f"predicted_tokens must be a number, {kind}" in flat(str(error.value))


def test_grade_prediction_names_the_nearest_slip_and_an_exact_one():
    from vit_tutorial.exercises._predictions import grade_prediction

    slips = [("the first", 100), ("the second", 110), ("the third", 130)]
    for guess, named in [(108, "the second"), (103, "the first"), (110, "the second")]:
        with pytest.raises(AssertionError, match=f"measured: 200. {named}$"):
            grade_prediction("check_x", "x", guess, 200, what="", tolerance=0.1, slips=slips)


@pytest.mark.parametrize(
    "name, exact, slip",
    [
        ("check_window_flops_prediction", 1.0, "the projections alone"),  # not the grid's side
        (
            "check_axial_flops_prediction",
            attention_flops(14, 64, "full") / attention_flops(14, 64, "axial"),
            "that is the ratio at D = 64",  # not one set of projections
        ),
    ],
)
def test_prediction_checkers_name_the_slip_a_prediction_is_exactly(name, exact, slip):
    with pytest.raises(AssertionError) as error:
        getattr(exercises, name)(exact)
    assert slip in flat(str(error.value))


@pytest.mark.parametrize(
    "name, wrong, slip",
    [
        ("check_attention_memory_prediction", 1.78, "within ±10%"),  # the 224×224 size
        ("check_attention_memory_prediction", 577**2 * 4 / 2**20, "you left out the heads"),
        ("check_attention_memory_prediction", 1.7765 * 577 / 197, "grow with the square"),
        ("check_attention_memory_prediction", 6 * 577**2 * 4 / 2**20, "2 bytes per entry"),
        ("check_axial_flops_prediction", 3.0, "within ±10%"),
        ("check_tokens_prediction", 786, "Count the patches, then the class token"),
        ("check_tokens_prediction", 784, "You left out the class token"),
        ("check_tokens_prediction", 393, "N grows 4×, not 2×"),
        ("check_tokens_prediction", 788, "not (4·197)"),
        ("check_bias_table_prediction", 30_000, "Count the 2D offsets"),
        ("check_bias_table_prediction", 26_508, "left out the class token's 3 entries"),
        ("check_bias_table_prediction", (24 * 24 + 3) * 12, "an offset, not a position"),
        ("check_bias_table_prediction", 732 * 12, "the table of the 14×14 grid"),
        ("check_axial_flops_prediction", 7.0, "you counted the scores alone"),
        ("check_axial_flops_prediction", 0.5, "the projections alone"),
        ("check_axial_flops_prediction", 1.79, "that is axial / full"),
        ("check_no_position_prediction", 60, "within ±15%"),
        ("check_no_position_prediction", 44.6, "the ViT with its learned table"),
        ("check_no_position_prediction", 324, "that is guessing"),
        ("check_no_position_prediction", 74.28, "the accuracy in %"),
        ("check_block_params_prediction", 12 * 192**2 * 1.06, "within ±5%"),
        ("check_block_params_prediction", 4 * 192**2 + 4 * 192, "the attention alone"),
        ("check_block_params_prediction", 10 * 192**2, "a D×D matrix each"),
        ("check_block_params_prediction", 20 * 192**2, "heads split D"),
        ("check_patch_flops_prediction", 5.0, "within ±5%"),
        ("check_patch_flops_prediction", 4, "the token ratio"),
        ("check_patch_flops_prediction", 16, "Only attention's T² part"),
        ("check_patch_flops_prediction", 2, "N grows 4×, not 2×"),
        ("check_vit_accuracy_prediction", 70.0, "within ±4%"),
        ("check_vit_accuracy_prediction", 0.744, "in percent"),
        ("check_vit_accuracy_prediction", 25.6, "the test error"),
        ("check_vit_accuracy_prediction", 88.7, "with all 55,000 images"),
        ("check_vit_accuracy_prediction", 10, "that is chance"),
        ("check_mae_gain_prediction", 3.0, "within ±30%"),
        ("check_mae_gain_prediction", 0.064, "in points"),
        ("check_mae_gain_prediction", 79.3, "the accuracy of the pre-trained ViT"),
        ("check_mae_gain_prediction", -6.4, "the sign the other way"),
        ("check_window_flops_prediction", 0.5, "within ±10%"),
        ("check_window_flops_prediction", 49 / 3136, "the scores alone"),
        ("check_window_flops_prediction", 13.8, "that is MSA / W-MSA"),
        ("check_window_flops_prediction", 398 / 6656, "M for M²"),
        ("check_window_flops_prediction", 0.97, "the side of the grid"),
        ("check_window_flops_prediction", 0.054, "at C = 64"),
        ("check_qk_norm_logit_prediction", 10, "within ±5%"),
        ("check_qk_norm_logit_prediction", 64, "64 is q·k itself"),
        ("check_qk_norm_logit_prediction", 1, "the bound of unit vectors"),
        ("check_qk_norm_logit_prediction", 0.125, "a vector's norm is √d, not 1"),
        ("check_qk_norm_logit_prediction", float("inf"), "QK-norm bounds it"),
        ("check_qk_norm_logit_prediction", 1e9, "QK-norm bounds it"),
    ],
)
def test_prediction_checkers_reject_a_wrong_prediction_and_name_the_slip(name, wrong, slip):
    with pytest.raises(AssertionError) as error:
        getattr(exercises, name)(wrong)
    message = flat(str(error.value))
    assert "measured:" in message and slip in message


# ---------------------------------------------------------------------------------------
# The shared grader of the learner's functions: grade_tensor


def doubled(x):
    """The slips of a function that should return ``x + 1``."""
    return [("you doubled x", 2 * x), ("that is x itself", lambda got: torch.equal(got, x))]


def grade_x_plus_one(fn):
    from vit_tutorial.exercises._common import grade_tensor

    x = torch.arange(1.0, 4.0)
    grade_tensor(
        fn,
        (x,),
        x + 1,
        "case x",
        doubled,
        not_tensor="return a tensor, got {got}",
        expected="return shape (3,), got {got}",
        otherwise="off by up to {diff}",
    )
    return x


def test_grade_tensor_passes_a_right_answer_on_copies_of_the_case():
    x = grade_x_plus_one(lambda t: t.add_(1))  # in place, on its copy
    assert torch.equal(x, torch.arange(1.0, 4.0))
    grade_x_plus_one(lambda t: t.double() + 1 + 1e-7)  # another dtype, within atol


@pytest.mark.parametrize(
    "answer, message",
    [
        (lambda t: 2 * t, "case x: you doubled x"),
        (lambda t: t.clone(), "case x: that is x itself"),  # a test of the answer
        (lambda t: t + 2, "case x: off by up to 1"),  # no slip: the largest difference
    ],
)
def test_grade_tensor_names_the_slip_the_answer_is(answer, message):
    with pytest.raises(AssertionError) as error:
        grade_x_plus_one(answer)
    assert str(error.value) == message


def test_grade_tensor_reports_a_crash_in_the_learners_function_as_theirs():
    def crashes(t):
        raise ValueError("bad axis")

    with pytest.raises(AssertionError) as error:
        grade_x_plus_one(crashes)
    assert str(error.value) == "fn crashed on case x: ValueError: bad axis"
    assert isinstance(error.value.__cause__, ValueError)


@pytest.mark.parametrize(
    "answer, message",
    [
        (lambda t: (t + 1)[None], "return shape (3,), got (1, 3)"),
        (lambda t: t[:2] + 1, "return shape (3,), got (2,)"),
        (lambda t: (t + 1).tolist(), "return a tensor, got list"),
    ],
)
def test_grade_tensor_refuses_another_shape_or_type(answer, message):
    with pytest.raises(AssertionError) as error:
        grade_x_plus_one(answer)
    assert str(error.value) == message
