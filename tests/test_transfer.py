"""Tests for vit_tutorial/transfer.py: chapter 9's data, starts, probes and resolution."""

import pytest
import torch

from vit_tutorial.data import FASHION_MNIST_MEAN, FASHION_MNIST_STD, digits_datasets
from vit_tutorial.mae import MaskedAutoencoder
from vit_tutorial.transfer import (
    COARSE_GROUPS,
    COARSE_NAMES,
    DECODER,
    ENCODER,
    at_resolution,
    digits_like_fashion_mnist,
    features,
    finetune,
    labelled_data,
    linear_probe,
    new_head,
    pretrain_mae,
    pretrain_supervised,
)
from vit_tutorial.vit import VisionTransformer


def vit(num_classes=10):
    torch.manual_seed(0)
    return VisionTransformer(**ENCODER, pool="mean", num_classes=num_classes)


def test_coarse_groups_split_the_ten_classes_into_five():
    assert len(COARSE_GROUPS) == 10 and sorted(set(COARSE_GROUPS)) == list(range(5))
    tops = [c for c, g in enumerate(COARSE_GROUPS) if COARSE_NAMES[g] == "top"]
    footwear = [c for c, g in enumerate(COARSE_GROUPS) if COARSE_NAMES[g] == "footwear"]
    assert tops == [0, 2, 4, 6] and footwear == [5, 7, 9]  # shirts together, shoes together


def test_new_head_keeps_everything_but_the_head():
    source = vit(5)
    torch.nn.init.normal_(source.head.weight)
    fresh = new_head(source, 10)
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
    fresh = at_resolution(model, 40, interpolate=False)
    assert not torch.allclose(fresh.pos_embed.weight, bigger.pos_embed.weight)
    for name, tensor in bigger.state_dict().items():
        if name != "pos_embed.weight":
            assert torch.equal(fresh.state_dict()[name], tensor), name
    # the interpolated table keeps the coarse layout: its corners are the old corners'
    old = model.pos_embed.weight[0].view(7, 7, 64)
    new = bigger.pos_embed.weight[0].view(10, 10, 64)
    similarity = torch.cosine_similarity(new[0, 0], old[0, 0], dim=0)
    assert similarity > 0.9
    assert bigger(torch.randn(2, 1, 40, 40)).shape == (2, 10)


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
    result = finetune(model, data, epochs=1, device="cpu")
    assert 0 <= result["test_accuracy"] <= 1 and result["train_seconds"] > 0
    assert not torch.equal(model.encoder.blocks[0].attn.qkv.weight, before)  # all trains


def test_pretraining_runs_on_a_subset_without_reading_labels():
    mae, history = pretrain_mae(epochs=1, images=300, device="cpu")
    assert isinstance(mae, MaskedAutoencoder) and not mae.training
    assert len(history["loss"]) == 1 and history["loss"][0] > 0
    assert (
        mae.config.dim == ENCODER["dim"]
        and mae.decoder_embed.out_features == DECODER["decoder_dim"]
    )
    coarse, history = pretrain_supervised(epochs=1, images=300, device="cpu")
    assert coarse.config.num_classes == 5 and len(history["train_loss"]) == 1
