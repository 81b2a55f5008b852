"""Tests for vit_tutorial/experiments/: the chapters' experiments (6, 8 and 9)."""

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.models import ResNet, resnet18

from vit_tutorial.checkpoint import save_checkpoint
from vit_tutorial.data import FASHION_MNIST_MEAN, FASHION_MNIST_STD, digits_datasets
from vit_tutorial.engine import predict
from vit_tutorial.experiments import ch06, ch09, epochs_for
from vit_tutorial.experiments.ch08 import (
    AUGMENTATIONS,
    FIT,
    FULL_TRAIN_SIZE,
    STEPS,
    RunSpec,
    build_model,
    eval_every,
    history_steps,
    learning_curves,
    load_teacher,
    plot_learning_curves,
    resnet8_greyscale,
    resnet18_greyscale,
    run,
)
from vit_tutorial.experiments.ch09 import (
    COARSE_GROUPS,
    COARSE_NAMES,
    DECODER,
    ENCODER,
    at_resolution,
    digits_like_fashion_mnist,
    features,
    finetune_settings,
    labelled_data,
    linear_probe,
    pretrain_mae,
    pretrain_supervised,
    start,
)
from vit_tutorial.finetune import finetune
from vit_tutorial.mae import MaskedAutoencoder
from vit_tutorial.positional import sinusoidal_2d
from vit_tutorial.recipes import RECIPES
from vit_tutorial.swin import SWIN_PRESETS, SwinTransformer
from vit_tutorial.vit import VisionTransformer

ROOT = Path(__file__).resolve().parents[1]

# --- chapter 6 ----------------------------------------------------------------------------


def test_ch06_schedule_keeps_its_warmup_fraction_and_every_variant_changes_the_base():
    assert ch06.settings(15) == ch06.SCHEDULE
    short = ch06.settings(3)
    assert (short.epochs, short.warmup_epochs, short.lr) == (3, 0.6, ch06.SCHEDULE.lr)
    for group, name, change in ch06.VARIANTS.values():
        assert set(change) <= set(ch06.BASE) and group and name


def test_ch06_ablation_trains_a_configuration_once_per_seed(monkeypatch):
    calls = []
    monkeypatch.setattr(ch06, "train_once", lambda c, s, e: calls.append(s) or {"seed": s})
    rows = list(ch06.ablation(["pos-learned", "patch-2", "patch-4"], [0, 1], 1))
    assert [r["id"] for r in rows] == ["pos-learned", "patch-2", "patch-4"]
    assert rows[0]["config"] == ch06.BASE and rows[2]["config"]["patch_size"] == 4
    assert rows[0]["runs"] == rows[1]["runs"] and len(calls) == 4  # the base once per seed


def test_ch06_ablation_checks_every_variant_seed_and_epochs_before_training(monkeypatch):
    monkeypatch.setattr(ch06, "train_once", None)  # training would fail the test
    with pytest.raises(ValueError, match=r"unknown variants \['pos-sincos'\]; expected ids"):
        next(ch06.ablation(["pos-none", "pos-sincos"], [0], 1))
    with pytest.raises(TypeError, match="seed must be an integer, got '1'"):
        next(ch06.ablation(["pos-none"], [0, "1"], 1))
    with pytest.raises(ValueError, match="seed must be at least 0, got -1"):
        next(ch06.ablation(["pos-none"], [-1], 1))


def test_ch06_neighbour_contrast_sees_a_grid_in_sincos_and_none_in_noise_or_shuffled_rows():
    table = sinusoidal_2d((8, 8), 64)  # (64, D), row-major
    grid_score = ch06.neighbour_contrast(table, (8, 8))
    assert grid_score > 0.1  # neighbours are more alike than distant positions
    g = torch.Generator().manual_seed(0)
    noise = [ch06.neighbour_contrast(torch.randn(64, 64, generator=g), 8) for _ in range(20)]
    assert abs(float(np.mean(noise))) < 0.01 and max(map(abs, noise)) < 0.05
    shuffled = table[torch.randperm(64, generator=g)]  # the same vectors, the grid lost
    assert ch06.neighbour_contrast(shuffled, (8, 8)) < grid_score / 3
    # a class token's row in front is left out, and a (1, T, D) table reads the same
    with_cls = torch.cat([torch.randn(1, 64, generator=g), table])[None]
    assert ch06.neighbour_contrast(with_cls, (8, 8), num_prefix_tokens=1) == grid_score
    # on a non-square grid, the rows are read row-major: transposing the grid changes it
    wide = sinusoidal_2d((4, 8), 64)
    assert ch06.neighbour_contrast(wide, (4, 8)) > 0.1
    assert ch06.neighbour_contrast(wide, (8, 4)) < ch06.neighbour_contrast(wide, (4, 8)) / 2
    similarity = ch06.position_similarity(table)
    assert similarity.shape == (64, 64) and torch.allclose(
        similarity.diagonal(), torch.ones(64).double()
    )
    with pytest.raises(ValueError, match="expected a table of 0 \\+ 7·8 rows"):
        ch06.neighbour_contrast(table, (7, 8))


def _small_vit(**options):
    """A one-block ViT on 8×8 greyscale images, 16 patches of 2×2."""
    return VisionTransformer(
        image_size=8,
        patch_size=2,
        in_channels=1,
        num_classes=10,
        dim=32,
        depth=1,
        num_heads=2,
        **options,
    )


def test_ch06_permuted_token_logits_is_the_model_for_the_identity_and_shuffles_the_rest():
    torch.manual_seed(0)
    model = VisionTransformer(
        image_size=8, in_channels=1, num_classes=10, **RECIPES["digits"].model
    )
    images = torch.randn(3, 1, 8, 8)
    model.eval()
    with torch.no_grad():
        assert torch.allclose(
            ch06.permuted_token_logits(model, images, torch.arange(64)), model(images), atol=1e-6
        )
        torch.nn.init.normal_(model.head.weight)  # a non-zero head, so that logits differ
        order = torch.stack([torch.randperm(64) for _ in range(3)])  # (B, N): one per image
        assert not torch.allclose(ch06.permuted_token_logits(model, images, order), model(images))
        # without a position, mean pooling cannot see the order; with a class token, the same
        for pool in ("mean", "cls"):
            torch.manual_seed(0)
            blind = _small_vit(pos_embed="none", pool=pool)
            torch.nn.init.normal_(blind.head.weight)
            blind.eval()
            shuffled = ch06.permuted_token_logits(blind, images, torch.randperm(16))
            assert torch.allclose(shuffled, blind(images), atol=1e-5)
    with pytest.raises(ValueError, match="order must be a permutation of the 64 tokens"):
        ch06.permuted_token_logits(model, images, torch.zeros(64, dtype=torch.long))
    relative = _small_vit(pos_embed="relative")
    with pytest.raises(ValueError, match="needs a position table"):
        ch06.permuted_token_logits(relative, images, torch.arange(16))
    with pytest.raises(TypeError, match="epochs must be an integer, got '3'"):
        next(ch06.ablation(["pos-none"], [0], "3"))


def _patches_in_order(images, order, patch):
    """The images with their patches moved: patch ``n`` becomes patch ``order[b, n]``."""
    b, c, h, w = images.shape
    grid = images.reshape(b, c, h // patch, patch, w // patch, patch).permute(0, 2, 4, 1, 3, 5)
    tokens = grid.reshape(b, -1, c, patch, patch)  # (B, N, C, p, p), row-major
    moved = tokens[torch.arange(b)[:, None], order.expand(b, -1)].reshape(grid.shape)
    return moved.permute(0, 3, 1, 4, 2, 5).reshape(b, c, h, w)


@pytest.mark.parametrize(
    "options, size",
    [
        (dict(dynamic_image_size=True), (12, 16)),  # another grid: the table resampled to it
        (dict(reg_tokens=2, no_embed_class=True), (8, 8)),
        (dict(rope="axial", pos_embed="none", pool="mean"), (8, 8)),
        (dict(distilled=True), (8, 8)),
    ],
)
def test_ch06_permuted_token_logits_equal_the_model_on_images_with_moved_patches(options, size):
    """The stem is patchwise: permuting its tokens is permuting the image's patches, whatever
    the model's prefix tokens, position encoding or image size."""
    torch.manual_seed(0)
    model = _small_vit(**options).eval()
    torch.nn.init.normal_(model.head.weight)
    images = torch.randn(2, 1, *size)
    n = (size[0] // 2) * (size[1] // 2)
    order = torch.stack([torch.randperm(n) for _ in range(2)])
    with torch.no_grad():
        moved = model(_patches_in_order(images, order, 2))
        torch.testing.assert_close(ch06.permuted_token_logits(model, images, order), moved)
        assert not torch.allclose(moved, model(images))


def test_ch06_probes_refuse_what_they_cannot_read():
    model, images = _small_vit(), torch.randn(3, 1, 8, 8)
    for order, error, named in [
        (torch.arange(17), ValueError, r"order must be \(16,\) or \(3, 16\).*got \(17,\)"),
        (torch.arange(16).expand(2, -1), ValueError, r"got \(2, 16\)"),
        (torch.arange(16.0), TypeError, "order must be an integer tensor, got torch.float32"),
        (list(range(16)), TypeError, "order must be an integer tensor, got list"),
        (torch.arange(16) * 1j, TypeError, "order must be an integer tensor, got torch.complex"),
    ]:
        with pytest.raises(error, match=named):
            ch06.permuted_token_logits(model, images, order)
    small = torch.arange(16, dtype=torch.uint8).flip(0)  # an integer order of any width
    assert torch.equal(
        ch06.permuted_token_logits(model.eval(), images, small),
        ch06.permuted_token_logits(model, images, small.long()),
    )
    for variants, seeds in [("pos-none", [0]), (["pos-none"], 0)]:
        with pytest.raises(TypeError, match="variants and seeds must be lists"):
            next(ch06.ablation(variants, seeds, 1))
    swin = SwinTransformer(SWIN_PRESETS["swin_fashion"])
    with pytest.raises(TypeError, match="takes a VisionTransformer .*got SwinTransformer"):
        ch06.permuted_token_logits(swin, torch.randn(1, 1, 28, 28), torch.arange(49))
    stack = torch.randn(3, 16, 8)  # three tables: each is its own similarity, never merged
    with pytest.raises(ValueError, match=r"one table \(T, D\) or \(1, T, D\), got \(3, 16, 8\)"):
        ch06.position_similarity(stack)
    with pytest.raises(ValueError, match="a table of 16 rows has none after 16 prefix rows"):
        ch06.position_similarity(stack[0], num_prefix_tokens=16)
    with pytest.raises(TypeError, match="floating-point tensor, got ndarray"):
        ch06.position_similarity(np.zeros((16, 8)))


def test_ch06_ablation_reads_seeds_once_as_plain_ints(monkeypatch):
    monkeypatch.setattr(ch06, "train_once", lambda c, s, e: {"seed": s})
    seeds = (np.int64(s) for s in (0, 1))  # a generator: read once, for every variant
    rows = list(ch06.ablation(["pos-none", "patch-4"], seeds, 1))
    assert [run["seed"] for row in rows for run in row["runs"]] == [0, 1, 0, 1]
    assert all(type(run["seed"]) is int for row in rows for run in row["runs"])


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: ch06.settings("3"), TypeError, "epochs must be an integer, got '3'"),
        (lambda: ch06.train_once(ch06.BASE, "0", 1), TypeError, "seed must be an integer"),
        (lambda: ch06.train_once(ch06.BASE, 1.5, 1), TypeError, "seed must be an integer"),
    ],
)
def test_ch06_refuses_bad_seeds_and_epochs(call, error, message):
    with pytest.raises(error, match=message):
        call()


# --- chapter 8 ----------------------------------------------------------------------------


def test_ch06_recipe_model_round_trip_and_refusals(tmp_path):
    path = tmp_path / "seed3.pt"
    result = ch06.train_recipe_model(3, path, epochs=1, extra={"note": "test"})
    kept = ch06.load_recipe_model(path)
    assert not kept.training
    for (name, a), b in zip(result.model.state_dict().items(), kept.state_dict().values()):
        assert torch.equal(a, b), name
    extra = torch.load(path, weights_only=True)["extra"]
    assert extra == {"seed": 3, "test_accuracy": result.test_accuracy, "note": "test"}
    # another model's checkpoint, a damaged file
    other = VisionTransformer(
        image_size=8, patch_size=2, in_channels=1, num_classes=10, dim=32, depth=1, num_heads=2
    )
    save_checkpoint(tmp_path / "other.pt", other)
    with pytest.raises(ValueError, match="different model config"):
        ch06.load_recipe_model(tmp_path / "other.pt")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "damaged.pt").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="damaged.pt"):
        ch06.load_recipe_model(tmp_path / "damaged.pt")


@pytest.mark.parametrize("seed", sorted(ch06.RECIPE_MODELS))
def test_ch06_committed_recipe_models_score_what_they_recorded(seed):
    """The models chapter 6 and its solutions load: the recipe's, each of its seed, full
    length, with the test accuracy it recorded (recomputed here), made by the committed
    benchmark."""
    path = ROOT / ch06.RECIPE_MODELS[seed]
    model = ch06.load_recipe_model(path)
    state = torch.load(path, weights_only=True)
    extra, recipe = state["extra"], RECIPES["digits"]
    assert extra["seed"] == seed and extra["quick"] is False
    assert state["epoch"] == recipe.fit.epochs == len(state["history"]["epoch"])
    assert extra["provenance"]["command"].startswith("python benchmarks/digits_models.py")
    assert extra["provenance"]["git_dirty"] is False
    logits, labels = predict(model, digits_datasets(seed=seed).test_loader)
    accuracy = (logits.argmax(-1) == labels).float().mean().item()
    assert accuracy == pytest.approx(extra["test_accuracy"], abs=1.5 / len(labels))
    assert accuracy > 0.98


def test_greyscale_resnet_is_torchvisions_with_a_one_channel_stem():
    model = resnet18_greyscale(1, 10)
    reference = resnet18(num_classes=10)
    assert isinstance(model, ResNet)
    conv = model.conv1
    assert (conv.in_channels, conv.out_channels, conv.kernel_size) == (1, 64, (7, 7))
    assert (conv.stride, conv.padding, conv.bias) == ((2, 2), (3, 3), None)
    ours = dict(model.named_parameters())
    theirs = dict(reference.named_parameters())
    assert ours.keys() == theirs.keys()
    for name, p in ours.items():
        if name != "conv1.weight":
            assert p.shape == theirs[name].shape, name
    assert (
        sum(p.numel() for p in model.parameters())
        == sum(p.numel() for p in reference.parameters()) - 2 * 64 * 7 * 7
    )  # two input channels fewer in the stem
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    # torchvision's initialisation of convolutions: Kaiming normal, fan_out
    std = math.sqrt(2 / (64 * 7 * 7))
    assert conv.weight.std().item() == pytest.approx(std, rel=0.1)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(in_channels=0), ValueError, "in_channels must be at least 1, got 0"),
        (dict(in_channels=-1), ValueError, "in_channels must be at least 1, got -1"),
        (dict(in_channels=1.5), TypeError, "in_channels must be an integer, got 1.5"),
        (dict(in_channels=True), TypeError, "in_channels must be an integer, got True"),
        (dict(in_channels="1"), TypeError, "in_channels must be an integer, got '1'"),
        (dict(num_classes=0), ValueError, "num_classes must be at least 1, got 0"),
        (dict(num_classes=10.0), TypeError, "num_classes must be an integer, got 10.0"),
    ],
)
def test_greyscale_resnet_rejects_bad_channels_and_classes(kwargs, error, message):
    with pytest.raises(error, match=message):
        resnet18_greyscale(**kwargs)


def test_greyscale_resnet_takes_numpy_integers():
    model = resnet18_greyscale(np.int64(1), np.int32(5))
    assert model.conv1.in_channels == 1 and model.fc.out_features == 5


def test_resnet8_matches_the_vit_in_parameters_with_a_sixth_fewer_flops():
    from torch.utils.flop_counter import FlopCounterMode
    from torchvision.models.resnet import BasicBlock

    def cost(model):
        for module in model.modules():  # attention's products counted (no fused kernel)
            if hasattr(module, "fused"):
                module.fused = False
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model.eval()(torch.zeros(1, 1, 28, 28))
        return sum(p.numel() for p in model.parameters()), counter.get_total_flops()

    (params, flops), (vit_params, vit_flops) = (
        cost(build_model("resnet8")),
        cost(build_model("vit")),
    )
    assert abs(params / vit_params - 1) < 0.02  # matched in parameters
    assert (flops, vit_flops) == (12_872_640, 15_405_312)  # a sixth fewer FLOPs (chapter 8)
    model = resnet8_greyscale(3, 5)
    blocks = [m for m in model if isinstance(m, BasicBlock)]  # torchvision's own blocks
    assert [b.conv2.out_channels for b in blocks] == [32, 40, 80]
    assert [b.downsample is None for b in blocks] == [True, False, False]
    assert model(torch.zeros(2, 3, 28, 28)).shape == (2, 5)
    with pytest.raises(TypeError, match="num_classes must be an integer"):
        resnet8_greyscale(num_classes=2.0)


def test_build_model_matches_the_cpu_recipe_and_the_stems():
    hybrid, vit = build_model("hybrid"), build_model("vit")
    assert isinstance(hybrid, VisionTransformer) and isinstance(vit, VisionTransformer)
    recipe = RECIPES["fashion-mnist"].model
    for field, value in recipe.items():  # the study's hybrid is the CPU recipe's model
        assert getattr(hybrid.config, field) == value, field
    assert vit.config.stem == "patch" and vit.config.patch_size == 4
    assert hybrid(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    student = build_model("vit", pool="cls", distilled=True)
    assert student.config.distilled and student.config.pool == "cls"
    assert build_model("hybrid", drop_path=0.1).config.drop_path == 0.1
    swin = build_model("swin")  # chapter 10's, matched to the ViT
    assert swin.config == SWIN_PRESETS["swin_fashion"]
    assert swin(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(name="cnn"), "unknown model 'cnn'; expected one of"),
        (dict(name="resnet18", distilled=True), "apply to the ViTs, not to 'resnet18'"),
        (dict(name="resnet18", pool="cls"), "apply to the ViTs, not to 'resnet18'"),
        (dict(name="resnet18", drop_path=0.1), "apply to the ViTs, not to 'resnet18'"),
        (dict(name="resnet8", pool="cls"), "apply to the ViTs, not to 'resnet8'"),
        (dict(name="swin", distilled=True), "apply to the ViTs, not to 'swin'"),
    ],
)
def test_build_model_errors(kwargs, message):
    name = kwargs.pop("name")
    with pytest.raises(ValueError, match=message):
        build_model(name, **kwargs)


def test_the_budget_rule_gives_every_size_the_same_steps():
    assert STEPS == 13 * math.ceil(FULL_TRAIN_SIZE / 128) == 5590
    for n in (300, 1000, 4000, 15000, 55000):
        epochs = epochs_for(n, STEPS)
        steps_per_epoch = math.ceil(n / 128)
        assert epochs * steps_per_epoch >= STEPS > (epochs - 1) * steps_per_epoch
    assert epochs_for(55000, STEPS) == 13 and epochs_for(1000, STEPS) == 699


@pytest.mark.parametrize(
    "name, value, error, message",
    [
        ("train_size", 0, ValueError, "train_size must be at least 1, got 0"),
        ("steps", True, TypeError, r"steps must be an integer, got True \(bool\)"),
        ("batch_size", 1.0, TypeError, r"batch_size must be an integer, got 1.0 \(float\)"),
        ("steps", "50", TypeError, "steps must be an integer, got '50'"),
    ],
)
def test_epochs_for_rejects_bad_numbers(name, value, error, message):
    args = {"train_size": 1000, "steps": 10, "batch_size": 128, name: value}
    with pytest.raises(error, match=message):
        epochs_for(**args)


def test_epochs_for_takes_numpy_integers():
    epochs = epochs_for(np.int64(1000), np.int32(50), np.int64(128))
    assert epochs == epochs_for(1000, 50) == 7 and type(epochs) is int
    assert ch09.budget("mae", np.int64(100)) == ch09.budget("mae", 100) == 240


def test_run_spec_settings_follow_the_budget():
    assert RunSpec("hybrid").settings == FIT  # the full set: 13 epochs, one of warm-up
    small = RunSpec("vit", 1000, steps=STEPS).settings
    assert small.epochs == 699 and small.warmup_epochs == pytest.approx(430 / 8)
    assert dataclasses.replace(small, epochs=13, warmup_epochs=1) == FIT


def test_run_spec_keys_and_teacher():
    spec = RunSpec("vit", 4000, 2, 100, pool="cls", distilled=True)
    assert spec.key == "vit-n4000-s2-none-t100-cls-distilled"
    assert spec.teacher == RunSpec("resnet18", 4000, 2, 100)
    assert RunSpec("hybrid", augmentation="erasing").key == "hybrid-n55000-s0-erasing-t5590"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(model="vgg"), "unknown model 'vgg'"),
        (dict(model="vit", augmentation="cutout"), "unknown augmentation 'cutout'"),
        (dict(model="vit", pool="max"), "pool must be 'mean' or 'cls', got 'max'"),
        (dict(model="vit", distilled=True), "a distilled run pools the class token"),
        (dict(model="resnet18", pool="cls"), "has no class token"),
        (dict(model="resnet18", augmentation="drop-path"), "has no class token"),
        (dict(model="vit", train_size=0), "train_size must be at least 10, got 0"),
        (dict(model="vit", train_size=9), "train_size must be at least 10, got 9"),
        (dict(model="vit", train_size=60000), "train_size must be at most 55000, got 60000"),
        (dict(model="vit", seed=-1), "seed must be at least 0, got -1"),
        (dict(model="vit", steps=0), "steps must be at least 1, got 0"),
    ],
)
def test_run_spec_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RunSpec(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(seed="0"), "seed must be an integer, got '0'"),
        (dict(seed=1.0), "seed must be an integer, got 1.0"),
        (dict(train_size=1000.0), "train_size must be an integer, got 1000.0"),
        (dict(steps="50"), "steps must be an integer, got '50'"),
        (dict(pool="cls", distilled="yes"), "distilled must be True or False, got 'yes'"),
    ],
)
def test_run_spec_refuses_values_of_the_wrong_type(kwargs, message):
    with pytest.raises(TypeError, match=message):
        RunSpec("vit", **kwargs)


def test_run_spec_keeps_numpy_integers_as_ints():
    spec = RunSpec("vit", np.int64(1000), np.int64(2), np.int32(50))
    assert spec == RunSpec("vit", 1000, 2, 50) and spec.key == "vit-n1000-s2-none-t50"
    assert all(type(v) is int for v in (spec.train_size, spec.seed, spec.steps))  # JSON rows


@pytest.mark.parametrize("where", ["folder", "inside a file"])
def test_run_refuses_a_save_to_it_cannot_write_before_training(tmp_path, monkeypatch, where):
    monkeypatch.setattr("vit_tutorial.experiments.ch08.fashion_mnist_datasets", None)  # no data
    (tmp_path / "file").write_text("not a folder")
    path = tmp_path if where == "folder" else tmp_path / "file" / "teacher.pt"
    with pytest.raises(ValueError, match=re.escape(f"save_to='{path}' is a folder")):
        run(RunSpec("resnet18", 300, 0, 5), device="cpu", save_to=path)


@pytest.mark.parametrize("name", sorted(AUGMENTATIONS))
def test_each_augmentation_maps_a_uint8_image_to_a_uint8_image(name):
    augmentation = AUGMENTATIONS[name]
    image = torch.randint(0, 256, (1, 28, 28), dtype=torch.uint8)
    if augmentation.image is not None:
        torch.manual_seed(0)
        out = augmentation.image()(image)
        assert out.dtype == torch.uint8 and out.shape == (1, 28, 28)
    assert augmentation.drop_path in (0.0, 0.1)
    assert augmentation.description


def test_the_all_row_uses_every_lever():
    row = AUGMENTATIONS["all"]
    assert row.image is not None and row.batch and row.drop_path == 0.1
    names = [type(t).__name__ for t in row.image().transforms]
    assert names == ["RandomCrop", "RandomHorizontalFlip", "RandAugment", "RandomErasing"]


def test_a_distilled_run_needs_its_teacher():
    spec = RunSpec("vit", 300, 0, 5, pool="cls", distilled=True)
    with pytest.raises(ValueError, match="pass its teacher \\(resnet18-n300-s0-none-t5\\)"):
        run(spec, device="cpu")


def test_load_teacher_round_trip(tmp_path):
    model = resnet18_greyscale()
    path = tmp_path / "teacher.pt"
    save_checkpoint(path, model)
    loaded = load_teacher(path)
    assert not loaded.training
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name
    assert next(load_teacher(path, "auto").parameters()).device.type in ("cpu", "cuda")


def test_load_teacher_refuses_truncated_edited_or_other_files(tmp_path):
    path = tmp_path / "teacher.pt"
    save_checkpoint(path, resnet18_greyscale())
    (tmp_path / "cut.pt").write_bytes(path.read_bytes()[:5000])
    with pytest.raises(
        ValueError, match=re.escape(f"{tmp_path / 'cut.pt'} cannot be read") + ".* truncated"
    ):
        load_teacher(tmp_path / "cut.pt")
    state = torch.load(path, weights_only=True)
    state["model"]["fc.bias"] += 1  # edited weights, the SHA-256 left as it was
    torch.save(state, tmp_path / "edited.pt")
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'edited.pt'} is corrupted")):
        load_teacher(tmp_path / "edited.pt")
    save_checkpoint(tmp_path / "vit.pt", build_model("vit"))
    with pytest.raises(ValueError, match=r"vit.pt is not a checkpoint of run\(\)'s 'resnet18'"):
        load_teacher(tmp_path / "vit.pt")
    save_checkpoint(tmp_path / "rgb.pt", resnet18_greyscale(3))
    with pytest.raises(ValueError, match="rgb.pt is not a checkpoint .* size mismatch for conv1"):
        load_teacher(tmp_path / "rgb.pt")


@pytest.mark.slow
def test_a_short_run_on_the_real_data_saves_its_weights(tmp_path):
    path = tmp_path / "vit.pt"
    torch.manual_seed(0)
    result = run(RunSpec("vit", 300, 0, 6), device="cpu", save_to=path, history_points=2)
    assert result["epochs"] == 2 and result["optimizer_steps"] == 6
    assert result["key"] == "vit-n300-s0-none-t6"
    assert result["parameters"] == sum(p.numel() for p in build_model("vit").parameters())
    assert 0 <= result["test_accuracy"] <= 1 and 0 <= result["val_accuracy"] <= 1
    assert not list(tmp_path.glob("*.tmp"))
    saved = torch.load(path, weights_only=True)["model"]  # a checkpoint, hashed
    torch.manual_seed(0)
    initial = build_model("vit").state_dict()
    assert saved.keys() == initial.keys()
    assert not torch.equal(saved["head.weight"], initial["head.weight"])  # it trained
    # its learning curve: 2 points, at the end of its 2 epochs, the last one the run's own
    assert result["history"]["step"] == [3, 6]
    assert result["history"]["val_accuracy"][-1] == result["val_accuracy"]
    assert result["history"]["train_loss"][-1] == result["final_train_loss"]
    # scoring the validation split mid-run changes nothing of the training
    alone = run(RunSpec("vit", 300, 0, 6), device="cpu", history_points=1)
    assert alone["history"]["step"] == [6]
    both = (result["history"]["train_loss"][0] + result["final_train_loss"]) / 2
    assert alone["history"]["train_loss"][0] == pytest.approx(both, abs=2e-4)
    for key in ("test_accuracy", "val_accuracy", "final_train_loss"):
        assert alone[key] == result[key], key
    # nor does scoring it inside an epoch (3 steps an epoch: a point after every step)
    inside = run(RunSpec("vit", 300, 0, 6), device="cpu", history_points=6)
    assert inside["history"]["step"] == [1, 2, 3, 4, 5, 6]
    assert len(set(inside["history"]["val_accuracy"])) > 1  # scored at other weights
    for key in ("test_accuracy", "val_accuracy", "final_train_loss"):
        assert inside[key] == result[key], key
    # the training loss of each step: steps 4 and 5 (128 images each) and step 6 (44)
    # make the last epoch
    a, b, c = inside["history"]["train_loss"][3:]
    total = 128 * a + 128 * b + 44 * c
    assert total / 300 == pytest.approx(result["final_train_loss"], abs=2e-4)


def test_history_steps_spread_the_points_and_end_at_the_last_step():
    assert history_steps(13) == list(range(1, 14)) and history_steps(2, 13) == [1, 2]
    assert history_steps(5590) == list(range(430, 5591, 430))  # one an epoch of 55,000
    assert history_steps(432) == [*range(34, 432, 34), 432]  # every ⌈432 / 13⌉ = 34 steps
    assert history_steps(6, 4) == [2, 4, 6] and eval_every(432) == 34
    with pytest.raises(ValueError, match="points"):
        history_steps(10, 0)


def test_learning_curves_average_the_seeds_and_refuse_runs_without_history():
    def record(model, seed, accuracy, history=True):
        row = {"key": f"{model}-s{seed}", "model": model, "seed": seed, "train_size": 1000}
        row.update(steps=STEPS, augmentation="none", pool="mean", distilled=False)
        if history:
            row["history"] = {"step": [8, 16], "train_loss": [2.0, 1.0], "val_accuracy": accuracy}
        return row

    runs = [record("resnet8", 0, [0.5, 0.7]), record("vit", 1, [0.2, 0.6])]
    runs.append(record("vit", 0, [0.4, 0.8]))
    curves = learning_curves(runs)
    assert list(curves) == ["vit", "resnet8"] and curves["vit"]["seeds"] == [0, 1]
    assert curves["vit"]["val_accuracy"] == {
        "mean": pytest.approx([0.3, 0.7]),
        "min": [0.2, 0.6],
        "max": [0.4, 0.8],
    }
    pytest.importorskip("matplotlib")  # the book extra's, not a runtime dependency
    fig = plot_learning_curves(runs)
    assert [ax.get_ylabel() for ax in fig.axes] == ["training loss", "validation accuracy (%)"]
    with pytest.raises(ValueError, match=r"no history .*\['vit-s2'\]"):
        learning_curves([*runs, record("vit", 2, None, history=False)])
    with pytest.raises(ValueError, match="several configurations"):
        learning_curves([*runs, {**record("vit", 2, [0.1, 0.2]), "train_size": 4000}])


# --- chapter 9 ----------------------------------------------------------------------------


def vit(num_classes=10):
    torch.manual_seed(0)
    return VisionTransformer(**ENCODER, pool="mean", num_classes=num_classes)


def test_coarse_groups_split_the_ten_classes_into_five():
    assert len(COARSE_GROUPS) == 10 and sorted(set(COARSE_GROUPS)) == list(range(5))
    tops = [c for c, g in enumerate(COARSE_GROUPS) if COARSE_NAMES[g] == "top"]
    footwear = [c for c, g in enumerate(COARSE_GROUPS) if COARSE_NAMES[g] == "footwear"]
    assert tops == [0, 2, 4, 6] and footwear == [5, 7, 9]  # shirts together, shoes together


def test_the_supervised_start_keeps_everything_but_the_head():
    source = vit(5)
    torch.nn.init.normal_(source.head.weight)
    fresh = start("supervised", 0, {"supervised": source})
    assert fresh.head.out_features == 10 and fresh.config.num_classes == 10
    assert fresh.head.weight.abs().max() == 0 and source.head.out_features == 5
    for name, tensor in source.state_dict().items():
        if not name.startswith("head."):
            assert torch.equal(fresh.state_dict()[name], tensor), name


def test_at_resolution_interpolates_or_replaces_the_position_table():
    model = vit().eval()
    bigger = at_resolution(model, 40).eval()
    assert bigger.grid_size == (10, 10) and bigger.config.image_size == 40
    assert bigger.pos_embed.weight.shape == (1, 100, 64)
    fresh = at_resolution(model, 40, table="fresh")
    exact = at_resolution(model, 40, table="sincos")
    assert not torch.allclose(fresh.pos_embed.weight, bigger.pos_embed.weight)
    assert torch.equal(exact.pos_embed.weight[0], sinusoidal_2d((10, 10), 64))
    for name, tensor in bigger.state_dict().items():
        if name != "pos_embed.weight":
            assert torch.equal(fresh.state_dict()[name], tensor), name
            assert torch.equal(exact.state_dict()[name], tensor), name
    # the interpolated table keeps the coarse layout: its corners are the old corners'
    old = model.pos_embed.weight[0].view(7, 7, 64)
    new = bigger.pos_embed.weight[0].view(10, 10, 64)
    similarity = torch.cosine_similarity(new[0, 0], old[0, 0], dim=0)
    assert similarity > 0.9
    assert bigger(torch.randn(2, 1, 40, 40)).shape == (2, 10)


def test_at_resolution_leaves_the_callers_model_alone():
    model = vit()
    before = {name: t.clone() for name, t in model.state_dict().items()}
    fresh = at_resolution(model, 28, table="fresh")  # the same size: a new table
    assert fresh is not model and not torch.equal(fresh.pos_embed.weight, model.pos_embed.weight)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    at_resolution(model, 40, table="sincos")
    assert torch.equal(model.pos_embed.weight, before["pos_embed.weight"])


def test_at_resolution_refuses_a_table_it_cannot_redraw():
    with pytest.raises(ValueError, match="table must be one of .*, got 'no'"):
        at_resolution(vit(), 40, table="no")
    sincos = VisionTransformer(**ENCODER, pool="mean", num_classes=10, pos_embed="sincos2d")
    with pytest.raises(ValueError, match="replaces a learned table; pos_embed is 'sincos2d'"):
        at_resolution(sincos, 40, table="fresh")


@pytest.mark.parametrize("training", [False, True])
def test_features_and_linear_probe_keep_the_callers_mode(training):
    model = vit().train(training)
    data = labelled_data(2, seed=0, eval_size=20)
    features(model, data.test_loader)
    assert model.training is training
    linear_probe(model, data)
    assert model.training is training and model.encoder.training is training


def test_linear_probe_needs_a_validation_split():
    data = labelled_data(1, seed=0, eval_size=20)
    data.val, data.val_loader = None, None
    with pytest.raises(ValueError, match="picks C on data.val_loader, which is None"):
        linear_probe(vit(), data)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: start("mea", 0, {}), ValueError, "unknown start 'mea'; expected one of"),
        (lambda: start("scratch", "1", {}), TypeError, "seed must be an integer, got '1'"),
        (lambda: start("scratch", -1, {}), ValueError, "seed must be at least 0, got -1"),
        (lambda: labelled_data(1.5, 0), TypeError, "per_class must be an integer, got 1.5"),
        (lambda: labelled_data(1, 0, image_size="40"), TypeError, "image_size must be an int"),
        (lambda: labelled_data(1, 0, eval_size=0), ValueError, "eval_size must be at least 1"),
        (lambda: labelled_data(1, 0, eval_size=6000), ValueError, "at most 5000, got 6000"),
        (lambda: pretrain_mae(epochs="3"), TypeError, "epochs must be an integer, got '3'"),
        (lambda: finetune_settings("3"), TypeError, "epochs must be an integer, got '3'"),
        (lambda: pretrain_supervised(epochs=0), ValueError, "epochs must be at least 1, got 0"),
        (lambda: pretrain_mae(epochs=1, lr=float("nan")), ValueError, "lr must be positive"),
    ],
)
def test_ch09_refuses_bad_arguments_before_loading_or_training(monkeypatch, call, error, message):
    monkeypatch.setattr(ch09, "fashion_mnist_datasets", None)  # no data is read
    with pytest.raises(error, match=message):
        call()


def test_labelled_data_draws_exactly_per_class_images_per_seed():
    a = labelled_data(3, seed=0, eval_size=50)
    b = labelled_data(3, seed=1, eval_size=50)
    labels = torch.stack([a.train[i][1] for i in range(len(a.train))])
    assert torch.bincount(labels).tolist() == [3] * 10
    assert set(a.train.indices) != set(b.train.indices)
    assert len(a.test) == len(a.val) == 50 and len(a.train_loader.dataset) == 30
    assert a.train[0][0].shape == (1, 28, 28)
    assert labelled_data(1, seed=0, image_size=40, eval_size=5).test[0][0].shape == (1, 40, 40)
    with pytest.raises(ValueError, match="per_class must be at most 5500"):
        labelled_data(5501, seed=0)
    with pytest.raises(ValueError, match="per_class must be at least 1"):
        labelled_data(0, seed=0)


def test_digits_are_resized_and_normalised_like_fashion_mnist():
    data = digits_like_fashion_mnist(seed=0)
    original = digits_datasets(seed=0)
    assert len(data.train) == len(original.train) == 1437 and len(data.test) == 360
    images, labels = data.train.tensors
    assert images.shape == (1437, 1, 28, 28) and data.image_size == 28
    assert torch.equal(labels, original.train.tensors[1])
    pixels = images * FASHION_MNIST_STD[0] + FASHION_MNIST_MEAN[0]
    assert pixels.min() >= -1e-6 and pixels.max() <= 1 + 1e-6 and pixels.max() > 0.9


def test_features_are_the_mean_of_the_encoders_tokens():
    model = vit().eval()
    data = labelled_data(1, seed=0, eval_size=20)
    got = features(model, data.test_loader)
    images = torch.stack([data.test[i][0] for i in range(20)])
    with torch.no_grad():
        expected = model.forward_features(images).mean(dim=1)
    assert got.shape == (20, 64) and torch.allclose(got, expected, atol=1e-5)


def test_linear_probe_and_finetune_report_test_accuracy():
    data = labelled_data(2, seed=0, eval_size=100)
    probe = linear_probe(vit(), data)
    assert 0 <= probe["test_accuracy"] <= 1 and probe["C"] in (1e-3, 1e-2, 1e-1, 1, 10, 100)
    model = vit()
    before = model.encoder.blocks[0].attn.qkv.weight.clone()
    result = finetune(
        model, data, finetune_settings(1), new_head=False, validate=False, device="cpu"
    )
    assert 0 <= result.test_accuracy <= 1 and result.train_seconds > 0
    assert not torch.equal(model.encoder.blocks[0].attn.qkv.weight, before)  # all trains


def test_pretraining_runs_on_a_subset_without_reading_labels():
    mae, history = pretrain_mae(epochs=1, images=300, device="cpu")
    assert isinstance(mae, MaskedAutoencoder) and not mae.training
    assert len(history["train_loss"]) == 1 and history["train_loss"][0] > 0
    assert (
        mae.config.dim == ENCODER["dim"]
        and mae.decoder_embed.out_features == DECODER["decoder_dim"]
    )
    coarse, history = pretrain_supervised(epochs=1, images=300, device="cpu")
    assert coarse.config.num_classes == 5 and len(history["train_loss"]) == 1


def test_chapter_10_controls_differ_from_their_model_in_one_thing():
    """'swin_global': the Swin with one window per stage (its grids 14, 7, 4); 'vit_p2': the
    ViT with 2×2 patches; 'vit_rel': the ViT with a relative bias instead of its table."""
    from vit_tutorial.experiments import ch08

    vit, swin = ch08.build_model("vit"), ch08.build_model("swin")
    for name, base, change in [
        ("swin_global", swin, {"window_size": (14, 7, 4)}),
        ("vit_p2", vit, {"patch_size": 2}),
        ("vit_rel", vit, {"pos_embed": "relative"}),
    ]:
        model = ch08.build_model(name)
        assert name in ch08.LATER_MODELS
        assert dataclasses.replace(base.config, **change) == model.config, name
        assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
