"""The performance appendix's measurements: each figure its text interprets, at any size.

Each function times one comparison inside :func:`~vit_tutorial.measure.cpu_share` and returns
a record of plain data: ``case`` (what was timed), ``rounds``, ``medians`` (seconds by name),
``cpu`` (one :meth:`~vit_tutorial.measure.CpuShare.as_dict` per timed block: one per thread
count for :func:`throughput`) and ``figures``, the numbers the appendix's text cites. The
appendix runs them live on reduced cases; ``benchmarks/appendix_timings.py`` runs
:func:`measure_all` at :data:`FULL`, the sizes the text interprets.

The AdamW figure times ``optimizer.step`` itself: a measurement, not a training loop.

Example:
    >>> r = einops_overhead(rounds=3)
    >>> sorted(r["figures"]), len(r["cpu"])
    (['extra_us', 'rearrange_us', 'view_us'], 1)
"""

from __future__ import annotations

import copy
import dataclasses
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from vit_tutorial import measure
from vit_tutorial.attention import MultiHeadSelfAttention
from vit_tutorial.vit import PRESETS, VisionTransformer, ViTConfig, vit_flops

__all__ = [
    "Scale",
    "FULL",
    "QUICK",
    "adamw_variants",
    "attention_paths",
    "backward_forward",
    "bf16_autocast",
    "compile_gain",
    "einops_overhead",
    "fast_path",
    "identical_copies",
    "matmul_utilisation",
    "measure_all",
    "throughput",
    "torchvision_pair",
]


@dataclasses.dataclass(frozen=True)
class Scale:
    """The sizes of one run of :func:`measure_all`: ``large``, the
    :class:`~vit_tutorial.vit.ViTConfig` of the training step, the AdamW step, the matmul rate
    and the MLP copies, at ``batch``; ``small``, the ViT of the fast path, bf16 and throughput
    (:func:`torchvision_pair`'s arguments), at ``batch``; ``tiny``, the ViT that
    ``torch.compile`` compiles, at ``tiny_batch``; ``attention``, one attention layer's
    (B, T, D, h); ``rounds``, ``None`` for each measurement's own count."""

    large: ViTConfig
    small: Mapping[str, int]
    tiny: Mapping[str, int]
    batch: int = 8
    tiny_batch: int = 16
    batches: tuple[int, ...] = (1, 4, 16)
    matmul: int = 2048
    attention: tuple[int, int, int, int] = (8, 197, 384, 6)
    rounds: int | None = None


#: The sizes the appendix's text interprets: ViT-S/16 at 224×224, the 112-px ViT of the
#: comparison with torchvision and timm, the 2-block ViT that ``torch.compile`` compiles.
FULL = Scale(
    large=PRESETS["vit_small_patch16_224"],
    small=dict(image_size=112, patch_size=16, depth=12, num_heads=4, dim=192),
    tiny=dict(image_size=32, patch_size=4, dim=64, depth=2, num_heads=4),
)
#: A run of seconds that only checks the code path (``--quick``).
QUICK = Scale(
    large=ViTConfig(image_size=32, patch_size=8, dim=64, depth=2, num_heads=4),
    small=dict(image_size=32, patch_size=8, depth=2, num_heads=2, dim=32),
    tiny=dict(image_size=16, patch_size=4, dim=32, depth=1, num_heads=2),
    batch=2,
    tiny_batch=2,
    batches=(1, 2),
    matmul=128,
    attention=(2, 17, 32, 2),
    rounds=2,
)


def _record(
    case: str, times: Mapping[str, list[float]], cpu: list[measure.CpuShare], figures
) -> dict:
    medians = {name: statistics.median(t) for name, t in times.items()}
    rounds = len(next(iter(times.values())))
    cpu = [c.as_dict() for c in cpu]
    return {"case": case, "rounds": rounds, "medians": medians, "cpu": cpu, "figures": figures}


def _timed(fns: Mapping[str, Callable[[], object]], rounds: int) -> tuple[dict, measure.CpuShare]:
    with measure.cpu_share() as cpu:
        times = measure.interleaved_timings(fns, rounds)
    return times, cpu


def _ms(times: Mapping[str, list[float]], name: str) -> float:
    return statistics.median(times[name]) * 1e3


def torchvision_pair(
    image_size: int, patch_size: int, depth: int, num_heads: int, dim: int, seed: int = 0
) -> tuple[VisionTransformer, nn.Module]:
    """torchvision's ViT (MLP 4·D, a random head) and ours converted from it, both in eval
    mode: ``(ours, torchvision's)``, the same function (chapter 5)."""
    import torchvision

    from vit_tutorial.interop import from_torchvision

    torch.manual_seed(seed)
    tv = torchvision.models.VisionTransformer(
        image_size, patch_size, depth, num_heads, dim, 4 * dim
    )
    nn.init.normal_(tv.heads.head.weight, std=0.02)  # a zero head gives zero logits
    return from_torchvision(tv).eval(), tv.eval()


def einops_overhead(rounds: int = 2001) -> dict:
    """Splitting the heads of the digits model's (B, T, 3·D) = (64, 64, 192) with einops'
    ``rearrange`` against ``view`` + ``permute``: microseconds per call, and the difference."""
    qkv = torch.randn(64, 64, 3 * 64)  # (B, T, 3·D), D = 64 = h·d with h = 4
    pattern = "b n (three h d) -> three b h n d"  # (3, B, h, T, d)
    fns = {"rearrange": lambda: rearrange(qkv, pattern, three=3, h=4)}
    fns["view + permute"] = lambda: qkv.view(64, 64, 3, 4, 16).permute(2, 0, 3, 1, 4)
    times, cpu = _timed(fns, rounds)
    us = {name: _ms(times, name) * 1e3 for name in times}
    figures = {"rearrange_us": us["rearrange"], "view_us": us["view + permute"]}
    figures["extra_us"] = us["rearrange"] - us["view + permute"]
    return _record("(64, 64, 192) split into 4 heads", times, [cpu], figures)


def backward_forward(model: VisionTransformer, images: Tensor, rounds: int = 5) -> dict:
    """Seconds of the forward and the backward pass of a training step (cross-entropy), the
    median of ``rounds`` steps after one warm-up, and their ratio; the gradients are dropped."""
    model.train()
    labels = torch.arange(len(images)) % model.config.num_classes

    def phases() -> tuple[float, float]:
        start = time.perf_counter()
        loss = F.cross_entropy(model(images), labels)
        middle = time.perf_counter()
        loss.backward()
        end = time.perf_counter()
        model.zero_grad(set_to_none=True)
        return middle - start, end - middle

    phases()  # warm-up
    with measure.cpu_share() as cpu:
        runs = [phases() for _ in range(rounds)]
    times = {"forward": [f for f, _ in runs], "backward": [b for _, b in runs]}
    ratio = statistics.median(times["backward"]) / statistics.median(times["forward"])
    figures = {"forward_ms": _ms(times, "forward"), "backward_ms": _ms(times, "backward")}
    case = f"training step, {_describe(model)}, batch {len(images)}"
    return _record(case, times, [cpu], {**figures, "backward_ratio": ratio})


def _describe(model: VisionTransformer) -> str:
    c = model.config
    return f"ViT D={c.dim}, {c.depth} blocks, {c.image_size}px/{c.patch_size}"


def attention_paths(
    batch: int = 8, tokens: int = 197, dim: int = 384, num_heads: int = 6, rounds: int = 9
) -> dict:
    """One :class:`~vit_tutorial.attention.MultiHeadSelfAttention` layer in inference, fused
    (``forward``) against explicit (``forward_with_weights``): milliseconds and their ratio.
    ``RuntimeError`` if the two paths disagree (they would time different work)."""
    torch.manual_seed(0)
    layer = MultiHeadSelfAttention(dim=dim, num_heads=num_heads).eval()
    x = torch.randn(batch, tokens, dim)  # (B, T, D)
    with torch.inference_mode():
        if not torch.allclose(layer(x), layer.forward_with_weights(x)[0], atol=1e-5):
            raise RuntimeError("the fused and the explicit attention disagree")
        fns = {"fused": lambda: layer(x), "explicit": lambda: layer.forward_with_weights(x)}
        times, cpu = _timed(fns, rounds)
    fused, explicit = _ms(times, "fused"), _ms(times, "explicit")
    figures = {"fused_ms": fused, "explicit_ms": explicit, "explicit_over_fused": explicit / fused}
    case = f"attention layer, (B, T, D, h) = {(batch, tokens, dim, num_heads)}"
    return _record(case, times, [cpu], figures)


def fast_path(model: nn.Module, images: Tensor, rounds: int = 9) -> dict:
    """A torchvision ViT in inference with PyTorch's native attention fast path and without it
    (``torch.backends.mha.set_fastpath_enabled``): the fast path's share of the other's time."""

    def slow():
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            return model(images)
        finally:
            torch.backends.mha.set_fastpath_enabled(True)

    model.eval()
    with torch.inference_mode():
        if not torch.allclose(model(images), slow(), atol=1e-4):
            raise RuntimeError("the fast path and the Python path disagree")
        times, cpu = _timed({"fast path": lambda: model(images), "Python path": slow}, rounds)
    fast, python = _ms(times, "fast path"), _ms(times, "Python path")
    figures = {"fast_ms": fast, "python_ms": python, "fast_share": fast / python}
    case = f"torchvision ViT, batch {len(images)}, {images.shape[-1]}px"
    return _record(case, times, [cpu], figures)


def bf16_autocast(model: nn.Module, images: Tensor, rounds: int = 7) -> dict:
    """Inference in float32 against CPU bf16 autocast: bf16's share of float32's time, the
    largest logit error of bf16 relative to the largest logit, and whether the CPU has bf16
    matrix instructions (``/proc/cpuinfo``'s flags ``avx512_bf16``, ``amx_bf16``)."""
    model.eval()
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.is_file() else []
    flags = next((line for line in lines if line.startswith("flags")), "").split()

    def bf16():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(images)

    with torch.inference_mode():
        exact = model(images)
        error = ((bf16().float() - exact).abs().max() / exact.abs().max()).item()
        times, cpu = _timed({"fp32": lambda: model(images), "bf16 autocast": bf16}, rounds)
    fp32, half = _ms(times, "fp32"), _ms(times, "bf16 autocast")
    figures = {"fp32_ms": fp32, "bf16_ms": half, "bf16_share": half / fp32, "bf16_error": error}
    figures.update({flag: flag in flags for flag in ("avx512_bf16", "amx_bf16")})
    return _record(f"inference, batch {len(images)}", times, [cpu], figures)


def compile_gain(model: nn.Module, images: Tensor, rounds: int = 11) -> dict:
    """Inference through :func:`torch.compile`: the first call's seconds (a cold compile: it
    points ``TORCHINDUCTOR_CACHE_DIR`` at a fresh folder, for the process) and eager's time over the
    compiled model's. The first call's CPU share (``first_call_share``) leaves out the
    compiler's child processes, so it is recorded but is no contention test; ``cpu`` holds
    the timed rounds'."""
    model.eval()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")
    torch.compiler.reset()
    compiled = torch.compile(model)
    with torch.inference_mode():
        with measure.cpu_share() as first_cpu:
            start = time.perf_counter()
            out = compiled(images)
            first = time.perf_counter() - start
        if not torch.allclose(out, model(images), atol=1e-4):
            raise RuntimeError("the compiled model computes another function")
        fns = {"eager": lambda: model(images), "compiled": lambda: compiled(images)}
        times, cpu = _timed(fns, rounds)
    eager, fast = _ms(times, "eager"), _ms(times, "compiled")
    figures = {"first_call_s": first, "first_call_share": first_cpu.share}
    figures.update(eager_ms=eager, compiled_ms=fast, compile_gain=eager / fast)
    return _record(f"inference, batch {len(images)}", times, [cpu], figures)


#: AdamW's three implementations of one update (``torch.optim.AdamW`` arguments).
ADAMW = {"for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def adamw_variants(model: nn.Module, rounds: int = 7) -> dict:
    """One AdamW step over copies of ``model``'s parameters with fixed gradients, in each of
    :data:`ADAMW`'s implementations: milliseconds, the fused step's speed-up over the loop and
    ``foreach``'s time over the loop's."""

    def optimizer(**variant) -> torch.optim.Optimizer:
        torch.manual_seed(0)
        params = [p.detach().clone().requires_grad_() for p in model.parameters()]
        for p in params:
            p.grad = torch.randn_like(p) * 1e-3
        return torch.optim.AdamW(params, lr=1e-3, **variant)

    steps = {name: optimizer(**variant).step for name, variant in ADAMW.items()}
    times, cpu = _timed(steps, rounds)
    ms = {name: _ms(times, name) for name in times}
    figures = {f"{name}_ms": value for name, value in ms.items()}
    figures["fused_gain"] = ms["for-loop"] / ms["fused"]
    figures["foreach_share"] = ms["foreach"] / ms["for-loop"]
    tensors = list(model.parameters())
    count = sum(p.numel() for p in tensors)
    case = f"AdamW step, {len(tensors)} tensors, {count / 1e6:.1f} M parameters"
    return _record(case, times, [cpu], figures)


def throughput(
    model: VisionTransformer,
    batches: tuple[int, ...] = (1, 4, 16),
    threads: int = 1,
    rounds: int = 5,
) -> dict:
    """Images per second in inference at each of ``batches``, on one thread and (when
    ``threads`` > 1) on ``threads``, each thread count a timed block of its own:
    ``batch_gain`` is the largest batch's rate over the smallest's on one thread,
    ``thread_gain`` the rate on ``threads`` over one thread's at the largest batch."""
    c, previous = model.config, torch.get_num_threads()
    inputs = {b: torch.randn(b, c.in_channels, c.image_size, c.image_size) for b in batches}
    rates, cpus, times = {}, [], {}
    model.eval()
    try:
        for n in sorted({1, threads}):
            torch.set_num_threads(n)
            fns = {(n, b): (lambda x=x: model(x)) for b, x in inputs.items()}
            with torch.inference_mode():
                block, cpu = _timed(fns, rounds)
            cpus.append(cpu)
            for (n, b), seconds in block.items():
                times[f"{n} thread(s), batch {b}"] = seconds
                rates[n, b] = b / statistics.median(seconds)
    finally:
        torch.set_num_threads(previous)
    low, high = min(batches), max(batches)
    figures = {f"images_per_s_t{n}_b{b}": rate for (n, b), rate in rates.items()}
    figures["batch_gain"] = rates[1, high] / rates[1, low]
    if threads > 1:
        figures["thread_gain"] = rates[threads, high] / rates[1, high]
    return _record(f"inference, {_describe(model)}", times, cpus, figures)


def matmul_utilisation(
    model: VisionTransformer, images: Tensor, size: int = 2048, rounds: int = 5
) -> dict:
    """The rate of one ``size``×``size`` float32 matrix product, and the model's inference
    FLOP rate (:func:`~vit_tutorial.vit.vit_flops`) as a share of it, timed in alternating
    rounds: the utilisation of the measured matmul rate, a CPU's stand-in for MFU."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    model.eval()

    def infer():
        with torch.inference_mode():
            return model(images)

    times, cpu = _timed({"matmul": lambda: a @ b, "model": infer}, rounds)
    rate = 2 * size**3 / statistics.median(times["matmul"])
    flops = vit_flops(model.config) * len(images)
    use = measure.model_flops_utilization(flops, statistics.median(times["model"]), rate)
    figures = {"matmul_gflops": rate / 1e9, "model_gflops": flops / 1e9, "utilisation": use}
    case = f"{size}² matmul; inference, {_describe(model)}, batch {len(images)}"
    return _record(case, times, [cpu], figures)


def identical_copies(module: nn.Module, inputs: Tensor, rounds: int = 51) -> dict:
    """Two deep copies of ``module`` timed in the same interleaved rounds: copy A's median over
    copy B's, the per-round range, and how far the medians differ, in percent."""
    copies = {"copy A": copy.deepcopy(module).eval(), "copy B": copy.deepcopy(module).eval()}
    with torch.inference_mode():
        if not torch.equal(copies["copy A"](inputs), copies["copy B"](inputs)):
            raise RuntimeError("the two copies compute different numbers")
        times, cpu = _timed({n: (lambda m=m: m(inputs)) for n, m in copies.items()}, rounds)
    r = measure.ratio_to_best(times, "copy A")
    figures = {"ratio": r["ratio"], "round_min": r["round_min"], "round_max": r["round_max"]}
    figures["differ_percent"] = 100 * abs(r["ratio"] - 1)
    return _record(f"two copies, input {tuple(inputs.shape)}", times, [cpu], figures)


def measure_all(
    scale: Scale = FULL, threads: int = 1, progress: Callable[[str, dict], object] | None = None
) -> dict[str, dict]:
    """Every measurement at ``scale``, by name (einops, backward_forward, attention, fast_path,
    bf16, compile, adamw, throughput, matmul, copies), on the current thread count but
    :func:`throughput` (1 and ``threads``); ``progress(name, record)`` after each."""
    r = {} if scale.rounds is None else {"rounds": scale.rounds}
    torch.manual_seed(0)
    large = VisionTransformer(scale.large)
    images = torch.randn(scale.batch, 3, large.config.image_size, large.config.image_size)
    gh, gw = large.grid_size
    tokens = torch.randn(scale.batch, gh * gw + large.num_prefix_tokens, large.config.dim)
    small, tv_small = torchvision_pair(**scale.small)
    small_images = torch.randn(scale.batch, 3, *[scale.small["image_size"]] * 2)
    tiny = VisionTransformer(num_classes=10, **scale.tiny)
    tiny_images = torch.randn(scale.tiny_batch, 3, *[scale.tiny["image_size"]] * 2)
    jobs = {
        "einops": lambda: einops_overhead(**r),
        "backward_forward": lambda: backward_forward(large, images, **r),
        "attention": lambda: attention_paths(*scale.attention, **r),
        "fast_path": lambda: fast_path(tv_small, small_images, **r),
        "bf16": lambda: bf16_autocast(small, small_images, **r),
        "compile": lambda: compile_gain(tiny, tiny_images, **r),
        "adamw": lambda: adamw_variants(large, **r),
        "throughput": lambda: throughput(small, scale.batches, threads, **r),
        "matmul": lambda: matmul_utilisation(large, images, scale.matmul, **r),
        "copies": lambda: identical_copies(large.encoder.blocks[0].mlp, tokens, **r),
    }
    results = {}
    for name, job in jobs.items():
        results[name] = job()
        if progress is not None:
            progress(name, results[name])
    return results
