"""The speed benchmark's work: vit_tutorial against torchvision and timm on identical work.

The appendix's comparison (``benchmarks/speed.py`` runs it): :data:`CASES`, each timed for the
three libraries holding the same weights (:func:`vit_trio`, :func:`recipe_pair`; their logits
checked to agree first, :func:`check_identical`), one warm-up then interleaved rounds in
rotating order (:func:`~vit_tutorial.measure.interleaved_timings`), the ratio
:func:`~vit_tutorial.measure.ratio_to_best` (:func:`run_case`), written as a Markdown table
(:func:`markdown`). A training step here is a measured ``optimizer.step``, not a training loop.

The recipes' hybrid ViTs have a convolutional stem, mean pooling and one input channel; timm runs
them with our stem module plugged into its ``VisionTransformer`` (:class:`TimmConvStem`), while
torchvision's ``VisionTransformer`` cannot express them, so those rows compare with timm alone.

Example:
    >>> mode_name(torch.device("cpu"), None, False), CASES["s16_train_b8"].kind
    ('cpu_fp32', 'train')
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Subset

from vit_tutorial.engine import fit
from vit_tutorial.interop import from_torchvision, max_abs_logit_difference, ours_state_dict_to_timm
from vit_tutorial.measure import interleaved_timings, model_flops_utilization, ratio_to_best
from vit_tutorial.patches import ConvStem
from vit_tutorial.recipes import RECIPES, recipe_datasets
from vit_tutorial.vit import VisionTransformer, vit_flops

__all__ = [
    "CASES",
    "PEAK_BF16_FLOPS",
    "Case",
    "SpeedSettings",
    "TimmConvStem",
    "check_identical",
    "markdown",
    "mode_name",
    "recipe_pair",
    "run_case",
    "vit_trio",
]


@dataclasses.dataclass(frozen=True)
class SpeedSettings:
    """How :func:`run_case` times: on ``device``, in ``amp`` (``'bf16'`` autocast, or ``None``),
    through ``torch.compile`` or not, ``quick`` (tiny models, 2 rounds, 3 batches an epoch: the
    code path only), ``rounds`` (``None``: the case's), ``peak_tflops`` (the device's peak, for
    MFU; ``None``: :data:`PEAK_BF16_FLOPS`)."""

    device: str = "cpu"
    amp: str | None = None
    compile: bool = False
    quick: bool = False
    rounds: int | None = None
    peak_tflops: float | None = None


#: Dense bf16 peak of the GPUs the project may be lent, in FLOP/s (NVIDIA's H100 and H200
#: datasheets, SXM: 989.4 TFLOP/s without sparsity).
PEAK_BF16_FLOPS = {"H100": 989.4e12, "H200": 989.4e12}


@dataclasses.dataclass(frozen=True)
class Case:
    """One configuration: ``kind`` is 'infer', 'train' (one step) or 'epoch' (a recipe)."""

    kind: str
    model: str  # 'b16', 's16' or a recipe name
    batch: int = 0
    gpu_only: bool = False
    rounds: int = 5  # more for the cheap cases, whose times are noisier


CASES = {
    "b16_infer_b1": Case("infer", "b16", 1, rounds=21),
    "b16_infer_b8": Case("infer", "b16", 8, rounds=15),
    "b16_infer_b32": Case("infer", "b16", 32, rounds=7),
    "b16_infer_b128": Case("infer", "b16", 128, gpu_only=True),
    "s16_train_b8": Case("train", "s16", 8, rounds=15),
    "b16_train_b128": Case("train", "b16", 128, gpu_only=True),
    "digits_epoch": Case("epoch", "digits", rounds=11),
    "fashion_mnist_epoch": Case("epoch", "fashion-mnist"),
}
#: torchvision ``VisionTransformer`` arguments: layers, heads, width, MLP width.
TORCHVISION_SIZES = {"b16": (12, 12, 768, 3072), "s16": (12, 6, 384, 1536)}
#: --quick: a tiny ViT in place of B/16 and S/16 (32×32 images, patch 8, 2 blocks).
QUICK_SIZE = (2, 2, 32, 64)


def vit_trio(model: str, quick: bool, seed: int = 0) -> dict[str, nn.Module]:
    """Our ViT and torchvision's and timm's, holding the same (random) weights."""
    layers, heads, dim, mlp = QUICK_SIZE if quick else TORCHVISION_SIZES[model]
    import timm
    import torchvision

    size, patch = (32, 8) if quick else (224, 16)
    torch.manual_seed(seed)
    tv = torchvision.models.VisionTransformer(size, patch, layers, heads, dim, mlp)
    nn.init.normal_(tv.heads.head.weight, std=0.02)  # a zero head would make every logit 0
    ours = from_torchvision(tv)
    tm = timm.create_model(
        "vit_base_patch16_224",
        img_size=size,
        patch_size=patch,
        embed_dim=dim,
        depth=layers,
        num_heads=heads,
        mlp_ratio=mlp / dim,
    )
    tm.load_state_dict(ours_state_dict_to_timm(ours.state_dict()))
    return {"vit_tutorial": ours, "torchvision": tv, "timm": tm}


class TimmConvStem(ConvStem):
    """Our :class:`~vit_tutorial.patches.ConvStem` with the constructor timm's
    ``VisionTransformer(embed_layer=...)`` calls, so timm runs the recipes' hybrid ViT."""

    def __init__(self, img_size, patch_size, in_chans, embed_dim, **_ignored) -> None:
        super().__init__(img_size, patch_size, in_chans, embed_dim)
        self.num_patches = self.grid_size[0] * self.grid_size[1]


def recipe_pair(name: str, image_size: int, in_channels: int, num_classes: int, seed: int = 0):
    """The recipe's ViT, ours and timm's (our stem in it), with the same weights."""
    fields = RECIPES[name].model
    torch.manual_seed(seed)
    ours = VisionTransformer(
        image_size=image_size, in_channels=in_channels, num_classes=num_classes, **fields
    )
    nn.init.normal_(ours.head.weight, std=0.02)
    if fields.get("stem") != "conv" or fields.get("pool") != "mean":
        raise ValueError(f"recipe {name!r}: only the conv-stem, mean-pooled ViT is mapped")
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    tm = TimmViT(
        img_size=image_size,
        patch_size=fields["patch_size"],
        in_chans=in_channels,
        num_classes=num_classes,
        embed_dim=fields["dim"],
        depth=fields["depth"],
        num_heads=fields["num_heads"],
        mlp_ratio=fields["mlp_ratio"],
        class_token=False,
        global_pool="avg",
        embed_layer=TimmConvStem,
    )
    weights = ours.state_dict()
    stem = {k: v for k, v in weights.items() if k.startswith("patch_embed.")}  # same module
    rest = {k: v for k, v in weights.items() if k not in stem}
    tm.load_state_dict({**stem, **ours_state_dict_to_timm(rest)})
    return {"vit_tutorial": ours, "timm": tm}


def check_identical(models: dict[str, nn.Module], images: torch.Tensor) -> dict[str, float]:
    """The largest absolute logit difference of each model from ours; refuse to time
    different work."""
    ours = models["vit_tutorial"]
    diffs = {
        name: max_abs_logit_difference(ours, m, images)
        for name, m in models.items()
        if name != "vit_tutorial"
    }
    with torch.no_grad():
        scale = ours.eval()(images).abs().max().item()
    for name, diff in diffs.items():
        if not diff <= 1e-4 * max(1.0, scale):
            raise RuntimeError(f"{name} computes another function: max |Δ logit| = {diff:.3g}")
    return diffs


def autocast(device: torch.device, amp: str | None):
    """bf16 autocast on ``device`` when ``amp == 'bf16'``, else nothing."""
    if amp is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def inference_fns(models, batch, image_size, device, amp, compile_):
    """``{library: fn}``, each one forward pass of the same batch in ``inference_mode``."""
    images = torch.randn(batch, 3, image_size, image_size, device=device)
    fns = {}
    for name, model in models.items():
        net = model.to(device).eval()
        net = torch.compile(net) if compile_ else net

        def fn(net=net):
            with torch.inference_mode(), autocast(device, amp):
                return net(images)

        fns[name] = fn
    return fns


def training_fns(models, batch, image_size, device, amp, compile_):
    """``{library: fn}``, each one AdamW step on the same batch (cross-entropy)."""
    images = torch.randn(batch, 3, image_size, image_size, device=device)
    labels = torch.randint(0, 1000, (batch,), device=device) % 2
    fns = {}
    for name, model in models.items():
        model = model.to(device).train()
        net = torch.compile(model) if compile_ else model
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        # a measured step, not a training loop (fit is the one loop)
        def fn(net=net, optimizer=optimizer, step=optimizer.step):
            optimizer.zero_grad(set_to_none=True)
            with autocast(device, amp):
                loss = F.cross_entropy(net(images), labels)
            loss.backward()
            step()

        fns[name] = fn
    return fns


def epoch_fns(models, recipe_name, loader, device, amp, compile_):
    """``{library: fn}``, each one epoch of ``fit`` with the recipe's hyperparameters."""
    settings = dataclasses.replace(RECIPES[recipe_name].fit, epochs=1, warmup_epochs=0)
    return {
        name: (
            lambda m=model: fit(
                m, loader, None, settings, device=device, amp=amp, compile=compile_, progress=False
            )
        )
        for name, model in models.items()
    }


def first_batches(loader: DataLoader, batches: int) -> DataLoader:
    """A loader over the first ``batches`` batches' worth of ``loader``'s dataset."""
    size = min(len(loader.dataset), batches * loader.batch_size)
    return DataLoader(Subset(loader.dataset, range(size)), batch_size=loader.batch_size)


def prepare(name: str, settings: SpeedSettings, device: torch.device) -> dict:
    """The functions to time for case ``name``, and what the result record needs."""
    case = CASES[name]
    compile_ = settings.compile
    if case.kind in ("infer", "train"):
        models = vit_trio(case.model, settings.quick)
        size = 32 if settings.quick else 224
        batch = 2 if settings.quick else case.batch
        diffs = check_identical(models, torch.randn(2, 3, size, size))
        make = inference_fns if case.kind == "infer" else training_fns
        fns = make(models, batch, size, device, settings.amp, compile_)
        flops = (
            vit_flops(models["vit_tutorial"].config) * batch * (3 if case.kind == "train" else 1)
        )
        return {"fns": fns, "diffs": diffs, "batch": batch, "flops": flops, "warmup": None}
    data = recipe_datasets(RECIPES[case.model], seed=0)
    models = recipe_pair(case.model, data.image_size, data.in_channels, data.num_classes)
    images = next(iter(data.test_loader))[0][:8]
    diffs = check_identical(models, images)
    loader = first_batches(data.train_loader, 3) if settings.quick else data.train_loader
    fns = epoch_fns(models, case.model, loader, device, settings.amp, compile_)
    warmup = epoch_fns(
        models, case.model, first_batches(loader, 10), device, settings.amp, compile_
    )
    return {
        "fns": fns,
        "diffs": diffs,
        "batch": loader.batch_size,
        "flops": None,
        "warmup": warmup,
        "steps": len(loader),
    }


def run_case(name: str, settings: SpeedSettings, device: torch.device) -> dict:
    """Time case ``name``; return its record (times, ratio, logit check, MFU on a GPU)."""
    job = prepare(name, settings, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    if job["warmup"] is not None:  # an epoch's warm-up: a few batches of each library
        interleaved_timings(job["warmup"], rounds=1, warmup=0, synchronize=sync)
    warmup = 0 if job["warmup"] is not None else (2 if settings.compile else 1)
    rounds = settings.rounds or (2 if settings.quick else CASES[name].rounds)
    times = interleaved_timings(job["fns"], rounds, warmup, synchronize=sync)
    record = {
        "case": name,
        **dataclasses.asdict(CASES[name]),
        "batch": job["batch"],
        "rounds": rounds,
        "steps": job.get("steps"),
        "seconds": times,
        "ratio_to_best": ratio_to_best(times, "vit_tutorial"),
        "max_abs_logit_difference": job["diffs"],
    }
    peak = peak_flops(settings, device)
    if job["flops"] and peak:
        record["mfu"] = {
            lib: model_flops_utilization(job["flops"], statistics.median(t), peak)
            for lib, t in times.items()
        }
    return record


def peak_flops(settings: SpeedSettings, device: torch.device) -> float | None:
    """The device's dense bf16 peak FLOP/s: ``--peak-tflops``, else the table, else None."""
    if settings.peak_tflops:
        return settings.peak_tflops * 1e12
    if device.type != "cuda" or settings.amp != "bf16":
        return None
    gpu = torch.cuda.get_device_name(device)
    return next((p for key, p in PEAK_BF16_FLOPS.items() if key in gpu), None)


def mode_name(device: torch.device, amp: str | None, compile_: bool) -> str:
    """``cpu_fp32``, ``cuda_bf16_compile``, ...: the result file's stem after ``speed_``."""
    return f"{device.type}_{amp or 'fp32'}" + ("_compile" if compile_ else "")


def markdown(result: dict) -> str:
    """The result as a Markdown table with its provenance."""
    p = result["provenance"]
    m, v = p["machine"], p["versions"]
    lines = [
        f"# Speed against torchvision and timm: {result['mode']}",
        "",
        f"- **Machine:** {m['gpu'] or m['cpu']} ({m['cpu_count']} CPU cores, "
        f"{m['torch_threads']} torch threads), {m['platform']}",
        f"- **Versions:** torch {v['torch']}, torchvision {result['torchvision']}, "
        f"timm {result['timm']}, Python {v['python']}",
        f"- **Date:** {p['date']}; **commit** {p['git_commit']} (dirty: {p['git_dirty']})",
        f"- **Command:** `{p['command']}`",
        "- **Method:** one warm-up, then interleaved rounds in rotating order; times are "
        "medians; the ratio is vit_tutorial's median over the faster other library's "
        "(by median), with the range of the per-round ratios to that library.",
        "",
        "| configuration | rounds | vit_tutorial | torchvision | timm | ratio to the faster "
        "| per-round range | max abs Δ logit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["cases"]:
        ms = {lib: f"{statistics.median(t) * 1e3:.1f} ms" for lib, t in r["seconds"].items()}
        q = r["ratio_to_best"]
        diff = max(r["max_abs_logit_difference"].values())
        lines.append(
            f"| {r['case']} (batch {r['batch']}) | {r['rounds']} | {ms['vit_tutorial']} | "
            f"{ms.get('torchvision', 'n/a (see below)')} | {ms['timm']} | "
            f"{q['ratio']:.3f} ({q['best']}) | {q['round_min']:.2f}–{q['round_max']:.2f} "
            f"| {diff:.1e} |"
        )
    lines += ["", f"**Target** (at most 1.00× the best anchor on every row): {result['target']}"]
    if any("mfu" in r for r in result["cases"]):
        lines += [
            "",
            "| configuration | MFU vit_tutorial | MFU torchvision | MFU timm |",
            "|---|---|---|---|",
        ]
        for r in (r for r in result["cases"] if "mfu" in r):
            f = {lib: f"{100 * u:.1f}%" for lib, u in r["mfu"].items()}
            lines.append(
                f"| {r['case']} | {f['vit_tutorial']} | {f.get('torchvision', '')} | {f['timm']} |"
            )
    lines += [
        "",
        "torchvision has no row for the recipes: its `VisionTransformer` always "
        "classifies a class token and its stem takes 3 channels, so it cannot run the "
        "recipes' mean-pooled, one-channel hybrid ViT; timm runs it with our stem.",
    ]
    return "\n".join(lines) + "\n"
