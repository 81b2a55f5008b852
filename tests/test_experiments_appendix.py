"""vit_tutorial.experiments.appendix: the records the performance appendix and
benchmarks/appendix_timings.py read (their shape and arithmetic; never a speed)."""

import pytest
import torch

from vit_tutorial.attention import MultiHeadSelfAttention
from vit_tutorial.experiments import appendix
from vit_tutorial.measure import QUIET_SHARE
from vit_tutorial.vit import VisionTransformer

TINY = dict(image_size=16, patch_size=8, dim=32, depth=1, num_heads=2, num_classes=4)


def check_record(record: dict, timed: set[str], blocks: int = 1) -> None:
    assert set(record) == {"case", "rounds", "medians", "cpu", "figures"}
    assert set(record["medians"]) == timed and all(t > 0 for t in record["medians"].values())
    assert len(record["cpu"]) == blocks
    for block in record["cpu"]:
        assert block["quiet"] is (block["share"] >= QUIET_SHARE)


def test_ratios_are_the_ones_the_medians_give():
    torch.manual_seed(0)
    model = VisionTransformer(**TINY)
    r = appendix.adamw_variants(model, rounds=3)
    check_record(r, {"for-loop", "foreach", "fused"})
    ms = {name: seconds * 1e3 for name, seconds in r["medians"].items()}
    assert r["figures"]["fused_gain"] == pytest.approx(ms["for-loop"] / ms["fused"])
    assert r["figures"]["foreach_share"] == pytest.approx(ms["foreach"] / ms["for-loop"])
    assert r["rounds"] == 3 and f"{len(list(model.parameters()))} tensors," in r["case"]
    r = appendix.backward_forward(model, torch.randn(2, 3, 16, 16), rounds=2)
    check_record(r, {"forward", "backward"})
    assert r["figures"]["backward_ratio"] == pytest.approx(
        r["medians"]["backward"] / r["medians"]["forward"]
    )
    assert all(p.grad is None for p in model.parameters()), "the gradients are dropped"


def test_throughput_times_each_thread_count_apart_and_restores_the_count():
    torch.manual_seed(0)
    model = VisionTransformer(**TINY)
    before = torch.get_num_threads()
    r = appendix.throughput(model, batches=(1, 2), threads=2, rounds=2)
    assert torch.get_num_threads() == before
    check_record(r, {f"{n} thread(s), batch {b}" for n in (1, 2) for b in (1, 2)}, blocks=2)
    assert [block["threads"] for block in r["cpu"]] == [1, 2]
    f = r["figures"]
    assert f["batch_gain"] == pytest.approx(f["images_per_s_t1_b2"] / f["images_per_s_t1_b1"])
    assert f["thread_gain"] == pytest.approx(f["images_per_s_t2_b2"] / f["images_per_s_t1_b2"])
    one = appendix.throughput(model, batches=(1, 2), threads=1, rounds=2)
    assert "thread_gain" not in one["figures"] and len(one["cpu"]) == 1


def test_the_comparisons_time_one_function_and_refuse_two(monkeypatch):
    r = appendix.attention_paths(batch=2, tokens=5, dim=16, num_heads=2, rounds=2)
    check_record(r, {"fused", "explicit"})
    ours, tv = appendix.torchvision_pair(16, 8, 1, 2, 16)
    images = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        assert torch.allclose(ours(images), tv(images), atol=1e-5)  # the same weights
    check_record(appendix.fast_path(tv, images, rounds=2), {"fast path", "Python path"})
    copies = appendix.identical_copies(ours.encoder.blocks[0].mlp, torch.randn(2, 5, 16), 3)
    check_record(copies, {"copy A", "copy B"})
    assert copies["figures"]["differ_percent"] == pytest.approx(
        100 * abs(copies["figures"]["ratio"] - 1)
    )
    explicit = MultiHeadSelfAttention.forward_with_weights
    monkeypatch.setattr(
        MultiHeadSelfAttention,
        "forward_with_weights",
        lambda self, x: (explicit(self, x)[0] + 1e-3, None),
    )
    with pytest.raises(RuntimeError, match="the fused and the explicit attention disagree"):
        appendix.attention_paths(batch=2, tokens=5, dim=16, num_heads=2, rounds=2)


def test_the_quick_and_full_scales_name_what_the_appendix_interprets():
    assert appendix.FULL.large.dim == 384 and appendix.FULL.large.image_size == 224  # ViT-S/16
    assert appendix.FULL.attention == (8, 197, 384, 6) and appendix.FULL.rounds is None
    assert appendix.QUICK.rounds == 2
