"""vit_tutorial against torchvision and timm on identical work: time per call, interleaved.

Target (issue 15): on the CPU, every configuration takes at most 1.00× the time of the
faster of torchvision and timm (vit_tutorial's median time over the median time of the other
library with the smaller median; the per-round ratios give the spread). On a GPU the
script runs the same work in bf16, with and without ``torch.compile``, adds ViT-B/16 at
batch 128, and reports the B/16 training step's model FLOP utilisation (MFU).

Configurations (``--cases``):

* ``b16_infer_b{1,8,32}``: ViT-B/16 inference (``eval``, ``inference_mode``);
* ``s16_train_b8``: one ViT-S/16 training step (AdamW, cross-entropy), batch 8;
* ``digits_epoch``, ``fashion_mnist_epoch``: one epoch of the ``digits`` and
  ``fashion-mnist`` recipes (:mod:`vit_tutorial.recipes`), through
  :func:`vit_tutorial.engine.fit` with the recipe's hyperparameters;
* on a GPU also ``b16_infer_b128`` and ``b16_train_b128``.

Identical work: the three models hold the same weights (ours converted to the others' keys
by :mod:`vit_tutorial.interop`; their logits are checked to agree before timing). The
recipes' hybrid ViTs have a convolutional stem, mean pooling and one input channel;
timm runs them with our stem module plugged into its ``VisionTransformer`` (``embed_layer``),
while torchvision's ``VisionTransformer`` cannot express them (it always classifies a
class token and its stem takes 3 channels), so those rows compare with timm alone.

What runs is :mod:`vit_tutorial.experiments.speed`. How it measures:
:func:`vit_tutorial.measure.interleaved_timings`, one warm-up, then
``--rounds`` rounds (default 5) in rotating order; the ratio is
:func:`vit_tutorial.measure.ratio_to_best`. Results: ``benchmarks/results/speed_<device>_
<precision>[_compile].json`` and a Markdown table beside it, with the provenance.

Usage: ``.venv/bin/python benchmarks/speed.py [--cases ...] [--device cuda --amp bf16
[--compile]] [--quick]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import timm
import torch
import torchvision

from vit_tutorial.experiments import speed
from vit_tutorial.files import write_atomically

from _results import RESULTS, provenance, write_json


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--cases",
        nargs="+",
        choices=sorted(speed.CASES),
        default=None,
        help="default: every case (the GPU-only ones on a GPU only)",
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help="default: the case's (2 with --quick)"
    )
    parser.add_argument("--device", default="cpu", help="'cpu' or 'cuda'")
    parser.add_argument("--amp", choices=["bf16"], default=None, help="bf16 autocast")
    parser.add_argument("--compile", action="store_true", help="time torch.compile'd models")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="the device's peak TFLOP/s, for MFU (default: known GPUs)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny models, 2 rounds, 3 batches per epoch: checks the code path",
    )
    parser.add_argument("--out", type=Path, default=None, help="result JSON (Markdown beside it)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cases = args.cases or [
        n for n, c in speed.CASES.items() if device.type == "cuda" or not c.gpu_only
    ]
    mode = speed.mode_name(device, args.amp, args.compile)
    settings = speed.SpeedSettings(
        args.device, args.amp, args.compile, args.quick, args.rounds, args.peak_tflops
    )
    started = provenance([0])  # the load average before the run, not the run's own
    records = []
    for name in cases:
        record = speed.run_case(name, settings, device)
        q = record["ratio_to_best"]
        print(
            f"{name:>20}: "
            + ", ".join(
                f"{lib} {statistics.median(t) * 1e3:.1f} ms" for lib, t in record["seconds"].items()
            )
            + f"; ratio to {q['best']} {q['ratio']:.3f} "
            f"(rounds {q['round_min']:.3f}-{q['round_max']:.3f})",
            flush=True,
        )
        records.append(record)
    worst = max(records, key=lambda r: r["ratio_to_best"]["ratio"])
    met = worst["ratio_to_best"]["ratio"] <= 1.0
    target = (
        f"{'met' if met else 'missed'}; worst {worst['case']} at "
        f"{worst['ratio_to_best']['ratio']:.3f}×"
    )
    print(f"target (at most 1.00x the faster of torchvision and timm): {target}")
    result = {
        "benchmark": "speed",
        "mode": mode,
        "quick": args.quick,
        "provenance": started,
        "torchvision": torchvision.__version__,
        "timm": timm.__version__,
        "cases": records,
        "target": target,
        "target_met": None if args.quick else met,
    }
    out = args.out or (None if args.quick else RESULTS / f"speed_{mode}.json")
    if out is not None:
        write_json(out, result)
        write_atomically(Path(out).with_suffix(".md"), speed.markdown(result))
        print(f"wrote {out} and {Path(out).with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
