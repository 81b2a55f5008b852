"""Training in float32, bf16 and fp16 on the CPU and on CUDA; CUDA's numbers against the CPU's.

The training tests run on the CPU everywhere (CI included) and on CUDA where there is a GPU;
their CUDA cases, and the tests that compare CUDA with the CPU, are skipped without one
(``tools/gpu_session.sh`` runs this file on a GPU machine). fp16 is CUDA-only in the package
(``engine._amp_dtype`` refuses it on the CPU), but torch has both float16 autocast and the
GradScaler on the CPU: the CPU fp16 cases let ``_amp_dtype`` allow it (:func:`fp16_on_the_cpu`),
so that ``fit``'s fp16 path runs in CI too. The runs that must learn train
:func:`~tiny_models.wide_vit`, which learns from every seed tried: a failure is a fault, not bad
luck. The ``check_*`` functions are also run with a fault planted, to show that they catch it.
"""

import contextlib
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import vit_tutorial.engine as engine
import vit_tutorial.losses as losses
from vit_tutorial.data import make_loader
from vit_tutorial.engine import evaluate, fit, predict
from vit_tutorial.losses import HardDistillation
from vit_tutorial.vit import VisionTransformer

from tiny_models import Crash, blobs, tiny_vit, wide_vit

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]
#: every (device, amp) of the training tests; fp16 on the CPU runs through fp16_on_the_cpu
PRECISIONS = [
    pytest.param(
        device, amp, marks=[CUDA] if device == "cuda" else [], id=f"{device}-{amp or 'fp32'}"
    )
    for device in ("cpu", "cuda")
    for amp in (None, "bf16", "fp16")
]
AUTOCAST = {None: torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

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


def fp16_on_the_cpu(monkeypatch, device, amp):
    """Let ``fit``, ``evaluate`` and ``predict`` run their CUDA-only fp16 path (autocast to
    float16 and an enabled GradScaler) on the CPU, which torch allows; elsewhere, nothing."""
    if device == "cpu" and amp == "fp16":
        with torch.autocast("cpu", dtype=torch.float16):  # an older torch may disable it
            if torch.mm(torch.ones(1, 1), torch.ones(1, 1)).dtype != torch.float16:
                pytest.skip("this torch has no float16 autocast on the CPU")
        amp_dtype = engine._amp_dtype

        def fp16_too(amp, device):
            return torch.float16 if amp == "fp16" else amp_dtype(amp, device)

        monkeypatch.setattr(engine, "_amp_dtype", fp16_too)


ARGS = dict(epochs=8, lr=3e-3, weight_decay=0.05, warmup_epochs=1, progress=False)


@pytest.fixture(autouse=True)
def _subnormals_restored():
    """torch 2.5's CPU float16/bfloat16 kernels leave the thread flushing subnormals to zero
    (FTZ/DAZ) after these runs (torch 2.14's do not): under ``make old-torch`` every later test
    of the same process that needs IEEE subnormals failed (hypothesis refuses to run without
    them). Give them back after each test, as a user's process does not expect to lose them."""
    yield
    torch.set_flush_denormal(False)


# --- the forward pass on CUDA ------------------------------------------------------------


@CUDA
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


@CUDA
def test_evaluate_runs_a_model_where_its_weights_are():
    torch.manual_seed(0)
    model = tiny_vit()
    evaluate(model, loaders()[1])  # "auto": the CPU, where the model is
    assert next(model.parameters()).device.type == "cpu"
    evaluate(model.cuda(), loaders()[1])
    assert next(model.parameters()).device.type == "cuda"


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_autocast_stays_close_to_fp32(device):
    torch.manual_seed(0)
    model = with_random_head(VisionTransformer(**SMALL)).to(device).eval()
    x = torch.randn(8, 3, 16, 16, device=device)
    with torch.no_grad():
        full = model(x)
        with torch.autocast(device, dtype=torch.bfloat16):
            half = model(x)
    assert half.dtype == torch.bfloat16
    assert full.abs().max() > 0.1  # logits worth comparing
    assert (half.float() - full).abs().max() < 0.05 * full.abs().max()


# --- fit in each precision, on the CPU and on CUDA -----------------------------------------


@pytest.mark.parametrize("device, amp", PRECISIONS)
def test_fit_learns_with_each_precision_and_keeps_float32_weights(
    device, amp, tmp_path, monkeypatch
):
    fp16_on_the_cpu(monkeypatch, device, amp)
    torch.manual_seed(0)
    model, path = wide_vit(), tmp_path / "run.pt"
    train_loader, val_loader = loaders()
    history = fit(model, train_loader, val_loader, **ARGS, device=device, amp=amp,
                  checkpoint_path=path)  # fmt: skip
    assert next(model.parameters()).device.type == device
    # Chance is 1/3, with a loss of ln 3 = 1.10; from seeds 0 to 9, on the CPU, every run in
    # each precision ends at 1.0 with a loss under 0.04.
    assert history["val_acc"][-1] > 0.9 and history["val_loss"][-1] < 0.25, history
    # autocast computes on low-precision copies: the weights and AdamW's moments stay float32
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    state = torch.load(path, weights_only=True)
    moments = [t for s in state["optimizer"]["state"].values() for t in s.values() if t.dim()]
    assert moments and {t.dtype for t in moments} == {torch.float32}
    assert bool(state["scaler"]) == (amp == "fp16")  # a GradScaler state only for fp16
    logits, _ = predict(model, val_loader, device, amp)
    assert logits.dtype == torch.float32  # predict hands back float32 logits, whatever the amp


def check_the_loss_is_float32(device, amp):
    """One epoch of ``fit`` with its default loss: fail unless the logits come in the autocast
    dtype (autocast is on), the loss in float32, and ``F.cross_entropy`` takes them cast to
    float32: the loss must not lean on autocast's list of the operations it runs in float32."""
    logits_dtypes, cross_entropy_inputs, loss_dtypes = set(), set(), set()
    cross_entropy = F.cross_entropy

    def spy(logits, *args, **kwargs):
        cross_entropy_inputs.add(logits.dtype)
        return cross_entropy(logits, *args, **kwargs)

    class Recording(engine.Classification):
        def __call__(self, outputs, images, targets):
            value, logits = super().__call__(outputs, images, targets)
            logits_dtypes.add(outputs.dtype), loss_dtypes.add(value.dtype)
            return value, logits

    with pytest.MonkeyPatch.context() as patch:
        fp16_on_the_cpu(patch, device, amp)
        patch.setattr(F, "cross_entropy", spy)
        patch.setattr(engine, "Classification", Recording)
        torch.manual_seed(0)
        fit(wide_vit(), loaders()[0], None, **{**ARGS, "epochs": 1}, device=device, amp=amp)
    assert logits_dtypes == {AUTOCAST[amp]}, f"the model's logits came in {logits_dtypes}"
    assert loss_dtypes == {torch.float32}, f"the loss came in {loss_dtypes}, not float32"
    assert cross_entropy_inputs <= {torch.float32}, (  # if the loss calls it
        f"F.cross_entropy took logits in {cross_entropy_inputs}, not float32"
    )


@pytest.mark.parametrize("device, amp", PRECISIONS)
def test_the_loss_is_float32_under_autocast(device, amp):
    check_the_loss_is_float32(device, amp)


def cast_removed(logits, targets, label_smoothing=0.0):
    """``losses.cross_entropy`` without its ``.float()``: autocast's list still casts on the CPU
    and on CUDA today, but the package no longer says so itself."""
    return F.cross_entropy(logits, targets, label_smoothing=label_smoothing)


def in_the_logits_dtype(logits, targets, label_smoothing=0.0):
    """A cross-entropy computed in the logits' dtype (CPU autocast keeps log_softmax in bf16)."""
    return -logits.log_softmax(-1).gather(1, targets[:, None]).mean()


@pytest.mark.parametrize(
    "device, fault",  # not in_the_logits_dtype on CUDA, whose autocast runs log_softmax in fp32
    [
        ("cpu", cast_removed),
        ("cpu", in_the_logits_dtype),
        pytest.param("cuda", cast_removed, marks=CUDA),
    ],
)
def test_the_loss_check_catches_a_loss_in_the_autocast_dtype(device, fault, monkeypatch):
    monkeypatch.setattr(losses, "cross_entropy", fault)  # Classification calls it
    with pytest.raises(AssertionError, match="not float32"):
        check_the_loss_is_float32(device, "bf16")


def check_fp16_gradients(device, grad_clip):
    """One fp16 step of ``fit`` (GradScaler on) from a fixed start, on one batch, clipping (if at
    all) at a norm it never reaches: fail unless the clipping and AdamW see the float32 gradients
    of that start. The scaler multiplies the loss by 2**16, so a gradient left scaled is 65536
    times too large (and AdamW, nearly blind to a constant factor, would hardly show it)."""
    torch.manual_seed(0)
    model = wide_vit()
    # a zero head leaves the encoder no gradient; a large one overflows float16 at 2**16
    nn.init.normal_(model.head.weight, std=0.02)
    x, y = blobs(16)[:]
    reference = copy.deepcopy(model)
    F.cross_entropy(reference(x), y).backward()
    expected = torch.cat([p.grad.flatten() for p in reference.parameters()])
    norms, clip = [], nn.utils.clip_grad_norm_

    def spy(parameters, max_norm):
        norms.append(clip(parameters, max_norm).item())
        return norms[-1]

    with pytest.MonkeyPatch.context() as patch:
        fp16_on_the_cpu(patch, device, "fp16")
        patch.setattr(nn.utils, "clip_grad_norm_", spy)
        one_batch = DataLoader(TensorDataset(x, y), batch_size=16)
        fit(model, one_batch, None, epochs=1, lr=1e-3, grad_clip=grad_clip, progress=False,
            device=device, amp="fp16")  # fmt: skip
    true = expected.norm().item()
    assert norms == ([] if grad_clip is None else [pytest.approx(true, rel=0.05)]), (
        f"clip_grad_norm_ saw gradients of norm {norms}, the float32 ones' is {true:.4g}"
    )
    # fit leaves the last step's gradients in .grad: what AdamW stepped with
    got = torch.cat([p.grad.flatten().cpu() for p in model.parameters()])
    assert (got - expected).norm() < 0.05 * true, (
        f"AdamW stepped with gradients of norm {got.norm():.4g}, the float32 ones' is {true:.4g}"
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grad_clip", [1e6, None])
def test_fp16_clips_and_steps_with_the_unscaled_gradients(device, grad_clip):
    check_fp16_gradients(device, grad_clip)


class NeverUnscales(torch.amp.GradScaler):
    """A faulty scaler: it scales the loss, then clipping and AdamW get the scaled gradients."""

    def unscale_(self, optimizer):
        pass

    def step(self, optimizer, *args, **kwargs):
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None):
        pass


class UnscalesAfterClipping(torch.amp.GradScaler):
    """A faulty order: ``fit``'s unscale before clipping does nothing, ``step`` unscales."""

    def unscale_(self, optimizer):
        pass

    def step(self, optimizer, *args, **kwargs):
        super().unscale_(optimizer)
        return super().step(optimizer, *args, **kwargs)


@pytest.mark.parametrize(
    "fault, grad_clip, message",
    [
        (NeverUnscales, 1e6, "clip_grad_norm_ saw"),
        (NeverUnscales, None, "AdamW stepped with"),
        (UnscalesAfterClipping, 1e6, "clip_grad_norm_ saw"),
    ],
)
@pytest.mark.parametrize("device", DEVICES)
def test_the_gradient_check_catches_a_scaler_that_does_not_unscale(
    device, fault, grad_clip, message, monkeypatch
):
    monkeypatch.setattr(torch.amp, "GradScaler", fault)  # fit builds torch.amp.GradScaler
    with pytest.raises(AssertionError, match=message):
        check_fp16_gradients(device, grad_clip)


@pytest.mark.parametrize("device", DEVICES)
def test_fp16_resume_restores_the_grad_scaler_and_rng(device, tmp_path, monkeypatch):
    fp16_on_the_cpu(monkeypatch, device, "fp16")
    args = {**ARGS, "epochs": 5, "device": device, "amp": "fp16"}
    torch.manual_seed(3)
    straight = tiny_vit(dropout=0.1, drop_path=0.1)  # dropout: the RNG state matters
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


@pytest.mark.parametrize(
    "device", [pytest.param("cpu", marks=pytest.mark.slow), pytest.param("cuda", marks=CUDA)]
)
def test_compiled_training_matches_eager_training(device):
    """Eager and compiled training end alike (inductor takes ~15 s to compile on the CPU)."""
    results = []
    for compile in (False, True):
        torch.manual_seed(0)
        model = wide_vit()
        history = fit(model, *loaders(), **ARGS, device=device, amp=None, compile=compile)
        results.append((model, history))
    (eager, h_eager), (compiled, h_compiled) = results
    assert h_compiled["val_acc"][-1] > 0.9
    for (name, a), b in zip(eager.state_dict().items(), compiled.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3, msg=name)


@pytest.mark.parametrize("device", DEVICES)
def test_distillation(device):
    torch.manual_seed(0)
    teacher = wide_vit()
    fit(teacher, *loaders(), **ARGS, device=device)
    student = wide_vit(distilled=True)
    loss = HardDistillation(teacher.eval())
    history = fit(student, *loaders(), **ARGS, device=device, loss=loss)
    assert history["val_acc"][-1] > 0.9
    assert evaluate(student, loaders()[1], device)["accuracy"] > 0.9


# --- CUDA against the CPU, step by step ----------------------------------------------------


class Snapshots:
    """A training loader that keeps a CPU copy of ``model``'s weights after every step."""

    def __init__(self, loader, model):
        self.loader, self.model, self.sampler, self.weights = loader, model, loader.sampler, []

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for batch in self.loader:
            yield batch  # fit takes its step before it asks for the next batch
            state = self.model.state_dict()
            self.weights.append({k: v.detach().cpu().clone() for k, v in state.items()})


@contextlib.contextmanager
def no_tf32():
    """Full float32 matmuls and convolutions on CUDA (cuDNN's use TF32 unless told not to)."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@CUDA
@pytest.mark.parametrize("make", [tiny_vit, wide_vit])
def test_cuda_trains_as_the_cpu_step_by_step(make):
    """From one start, 48 steps of float32 training on CUDA and on the CPU give the same weights
    after every step (TF32 off); where they part, the message names the first step and weight.
    On the CPU, two runs that differ only in rounding (fused and explicit attention) stay within
    5e-4 of each other over the 48 steps. tiny_vit is the model that stopped at 2/3 on CUDA."""
    torch.manual_seed(0)
    start = make()
    runs = {}
    for device in ("cpu", "cuda"):
        model, (train_loader, val_loader) = copy.deepcopy(start), loaders()
        snapshots = Snapshots(train_loader, model)
        with no_tf32():
            history = fit(model, snapshots, val_loader, **ARGS, device=device, amp=None)
        runs[device] = snapshots.weights, history["val_acc"]
    (cpu, cpu_acc), (cuda, cuda_acc) = runs["cpu"], runs["cuda"]
    assert len(cpu) == len(cuda) == ARGS["epochs"] * 6
    for step, (a, b) in enumerate(zip(cpu, cuda), 1):
        for name in a:
            where = f"step {step}, {name} (val_acc by epoch: cpu {cpu_acc}, cuda {cuda_acc})"
            torch.testing.assert_close(b[name], a[name], atol=1e-3, rtol=1e-3,
                                       msg=lambda m, where=where: f"{where}: {m}")  # fmt: skip
