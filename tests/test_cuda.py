"""The package on a CUDA GPU: the same numbers as on the CPU, and the GPU-only training paths.

Skipped on a machine without CUDA (CI has none): run them where there is a GPU, with
``pytest tests/test_cuda.py`` (``tools/gpu_checklist.py`` does).
"""

import pytest
import torch

from vit_tutorial.data import make_loader
from vit_tutorial.engine import evaluate, fit
from vit_tutorial.losses import HardDistillation
from vit_tutorial.vit import VisionTransformer

from tiny_models import Crash, blobs, tiny_vit

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

SMALL = dict(
    image_size=16, patch_size=4, in_channels=3, num_classes=5, dim=64, depth=2, num_heads=4
)


def loaders():
    return make_loader(blobs(), 16, shuffle=True, seed=0), make_loader(
        blobs(48, 1), 64, shuffle=False
    )


def with_random_head(model):
    """The head starts at zero (as in the paper): give it weights, or every logit is 0."""
    torch.nn.init.normal_(model.head.weight, std=0.5)
    return model


ARGS = dict(epochs=8, lr=3e-3, weight_decay=0.05, warmup_epochs=1, progress=False)


@pytest.mark.parametrize("stem", ["patch", "conv"])
@pytest.mark.parametrize("fused", [True, False])
def test_forward_on_cuda_matches_the_cpu(stem, fused):
    torch.manual_seed(0)
    model = with_random_head(VisionTransformer(**SMALL, stem=stem)).eval()
    for block in model.encoder.blocks:
        block.attn.fused = fused
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        cpu = model(x)
        gpu = model.cuda()(x.cuda()).cpu()
    torch.testing.assert_close(gpu, cpu, atol=1e-4, rtol=1e-4)


def test_evaluate_runs_a_model_where_its_weights_are():
    torch.manual_seed(0)
    model = tiny_vit()
    evaluate(model, loaders()[1])  # "auto": the CPU, where the model is
    assert next(model.parameters()).device.type == "cpu"
    evaluate(model.cuda(), loaders()[1])
    assert next(model.parameters()).device.type == "cuda"


def test_bf16_autocast_stays_close_to_fp32():
    torch.manual_seed(0)
    model = with_random_head(VisionTransformer(**SMALL)).cuda().eval()
    x = torch.randn(8, 3, 16, 16, device="cuda")
    with torch.no_grad():
        full = model(x)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            half = model(x)
    assert half.dtype == torch.bfloat16
    assert full.abs().max() > 0.1  # logits worth comparing
    assert (half.float() - full).abs().max() < 0.05 * full.abs().max()


@pytest.mark.parametrize("amp", ["bf16", "fp16", None])
def test_fit_learns_on_cuda_with_each_precision(amp, tmp_path):
    torch.manual_seed(0)
    model, path = tiny_vit(), tmp_path / "run.pt"
    history = fit(model, *loaders(), **ARGS, device="cuda", amp=amp, checkpoint_path=path)
    assert next(model.parameters()).device.type == "cuda"
    assert history["val_acc"][-1] > 0.9
    state = torch.load(path, weights_only=True)
    assert bool(state["scaler"]) == (amp == "fp16")  # a GradScaler state only for fp16


def test_fp16_resume_restores_the_grad_scaler_and_cuda_rng(tmp_path):
    args = {**ARGS, "epochs": 5, "device": "cuda", "amp": "fp16"}
    torch.manual_seed(3)
    straight = tiny_vit(dropout=0.1, drop_path=0.1)  # dropout: the CUDA RNG state matters
    fit(straight, *loaders(), **args)
    torch.manual_seed(3)
    model, path = tiny_vit(dropout=0.1, drop_path=0.1), tmp_path / "run.pt"
    train_loader, val_loader = loaders()
    with pytest.raises(RuntimeError, match="simulated crash"):  # dies in epoch 3
        fit(model, Crash(train_loader, after=2 * 6 + 3), val_loader, **args, checkpoint_path=path)
    assert torch.load(path, weights_only=True)["scaler"]["scale"] > 0
    torch.manual_seed(999)
    resumed = tiny_vit(dropout=0.1, drop_path=0.1)
    fit(resumed, *loaders(), **args, checkpoint_path=path)
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name


def test_compiled_training_matches_eager_training():
    results = []
    for compile in (False, True):
        torch.manual_seed(0)
        model = tiny_vit()
        history = fit(model, *loaders(), **ARGS, device="cuda", amp=None, compile=compile)
        results.append((model, history))
    (eager, h_eager), (compiled, h_compiled) = results
    assert h_compiled["val_acc"][-1] > 0.9
    for (name, a), b in zip(eager.state_dict().items(), compiled.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3, msg=name)


def test_distillation_on_cuda():
    torch.manual_seed(0)
    teacher = tiny_vit()
    fit(teacher, *loaders(), **ARGS, device="cuda")
    student = tiny_vit(distilled=True)
    loss = HardDistillation(teacher.eval())
    history = fit(student, *loaders(), **ARGS, device="cuda", loss=loss)
    assert history["val_acc"][-1] > 0.9
    assert evaluate(student, loaders()[1], "cuda")["accuracy"] > 0.9


@pytest.mark.parametrize("fused", [True, False])
def test_swin_on_cuda_matches_the_cpu_with_the_folded_window_mask(fused):
    """The shifted blocks' mask, folded into the head axis ``(1, nW·h, N, N)``, in CUDA's fused
    kernel (and on the explicit path): the same logits, intermediates and maps as on the CPU."""
    from vit_tutorial.swin import create_swin

    torch.manual_seed(0)
    model = create_swin("swin_fashion").eval()
    for stage in model.stages:
        for block in stage.blocks:
            block.attn.fused = fused
    x = torch.randn(4, 1, 28, 28)
    with torch.no_grad():
        cpu = [model(x), *model.forward_intermediates(x, intermediates_only=True)]
        cpu_maps = model.attention_maps(x)
        model, x = model.cuda(), x.cuda()
        gpu = [model(x), *model.forward_intermediates(x, intermediates_only=True)]
        gpu_maps = model.attention_maps(x)
    for a, b in zip(gpu + gpu_maps, cpu + cpu_maps, strict=True):
        torch.testing.assert_close(a.cpu(), b, atol=1e-4, rtol=1e-4)
