"""Chapter 9 with the pre-training's own variance: each encoder pre-trained with 3 seeds.

``benchmarks/pretraining.py`` pre-trains each encoder once (seed 0; MAE 10 epochs, the
coarse-label encoder 4), so its 3-seed spreads are the fine-tuning's alone. Here, for each
seed s of ``--seeds``, both encoders are pre-trained with seed s for the same number of
epochs (``--epochs``, 10), then fine-tuned and linearly probed with seed s at 100, 10 and
1,000 labelled images per class (:func:`vit_tutorial.experiments.ch09.labelled_data`), next
to the ViT from scratch with seed s. A start's spread over the seeds then holds both the
pre-training's and the fine-tuning's variance. Every other setting is ``pretraining.py``'s
(:mod:`vit_tutorial.experiments.ch09`).

Each run is one JSON line of ``--log`` (default: the result file with ``.jsonl``), written
as it finishes; a run already there is skipped, so the study resumes. The encoders'
weights go to ``--weights`` (a folder) with their SHA-256 in the log; a fine-tuning line
names the SHA-256 of the encoder it started from, and the summary keeps only lines whose
encoder is the one logged for that seed. Several processes may share a log, one seed
each (``--seeds 1``). ``--summarize-only`` writes the result file from the log without
running (``--runs-machine`` says where the runs were made).

``--quick`` runs one seed tiny (500 images, 1 epoch, 2 labels per class), on the CPU, in
seconds: it checks the code path and writes only with ``--out``.

Usage: ``python benchmarks/pretraining_seeds.py [--seeds 0 1 2] [--device cuda]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from pretraining import QUICK, save_weights, tune

from vit_tutorial.experiments import ch09
from vit_tutorial.files import sha256
from vit_tutorial.mae import MaskedAutoencoder
from vit_tutorial.vit import VisionTransformer

from _results import RESULTS, arguments, provenance, setup, write_json

DEFAULT_OUT = RESULTS / "pretraining_seeds.json"
PER_CLASS = (100, 10, 1000)  # the chapter's headline first
EPOCHS = 10  # MAE's in pretraining.py; the coarse-label encoder's there is 4
ENCODERS = {"mae": ch09.pretrain_mae, "supervised": ch09.pretrain_supervised}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="each encoder's")
    parser.add_argument("--device", default="cpu", help="'cpu', 'cuda', 'auto'")
    parser.add_argument("--log", type=Path, default=None)
    parser.add_argument("--weights", type=Path, default=None, help="the encoders' folder")
    parser.add_argument("--summarize-only", action="store_true")
    parser.add_argument("--runs-machine", type=json.loads, default=None, help="a JSON object")
    arguments(parser, DEFAULT_OUT)
    return parser.parse_args(argv)


def read_log(log: Path) -> dict[str, dict]:
    if not log.exists():
        return {}
    rows = (json.loads(line) for line in log.read_text().splitlines() if line.strip())
    return {row["key"]: row for row in rows}


def append(log: Path, row: dict) -> None:
    with log.open("a") as out:  # one write per line: processes may share the log
        out.write(json.dumps(row) + "\n")


def where(device: str) -> dict:
    """The device and precision a run used (each line carries them)."""
    cuda = torch.device(device).type == "cuda"
    return {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "amp": "bf16 autocast" if cuda else "none (float32)",
        "torch": torch.__version__,
    }


def encoder(name: str, seed: int, args, done: dict, weights: Path) -> tuple[torch.nn.Module, str]:
    """The encoder ``name`` pre-trained with ``seed``: loaded if logged and on disk with its
    SHA-256, else pre-trained now (and logged)."""
    key, path = f"pretrain-{name}-s{seed}", weights / f"{name}-s{seed}.pt"
    if name == "mae":
        model = MaskedAutoencoder(**ch09.ENCODER, **ch09.DECODER)
    else:
        model = VisionTransformer(**ch09.ENCODER, pool="mean", num_classes=5)
    row = done.get(key)
    if row and path.exists() and sha256(path) == row["sha256"]:
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        return model.eval(), row["sha256"]
    quick = QUICK if args.quick else {}
    tic = time.perf_counter()
    model, history = ENCODERS[name](
        epochs=quick.get("epochs", args.epochs),
        images=quick.get("images"),
        seed=seed,
        device=args.device,
    )
    row = {
        "key": key,
        "mode": "pretrain",
        "start": name,
        "seed": seed,
        "epochs": quick.get("epochs", args.epochs),
        "seconds": round(time.perf_counter() - tic, 1),
        "final_loss": round(history["train_loss"][-1], 4),
        "sha256": save_weights(model, path),
        **where(args.device),
    }
    append(args.log, row)
    done[key] = row
    print(f"{key}: {row['seconds']:.0f} s, final loss {row['final_loss']}", flush=True)
    return model, row["sha256"]


def seed_runs(seed: int, args, done: dict, weights: Path) -> None:
    """Every run of one seed that the log lacks."""
    encoders, hashes = {}, {}
    for name in ENCODERS:
        encoders[name], hashes[name] = encoder(name, seed, args, done, weights)
    quick = QUICK if args.quick else {}
    for per_class in PER_CLASS[:1] if args.quick else PER_CLASS:
        data = None
        for name in ch09.STARTS:
            for mode in ("probe", "finetune") if name != "scratch" else ("finetune",):
                key = f"{mode}-{name}-{per_class}-s{seed}"
                if key in done and done[key].get("encoder_sha256") == hashes.get(name):
                    continue
                if data is None:
                    labels = quick.get("per_class", per_class)
                    data = ch09.labelled_data(labels, seed, eval_size=quick.get("eval_size"))
                model = ch09.start(name, seed, encoders)
                if mode == "probe":
                    result = ch09.linear_probe(model, data, args.device)
                else:
                    epochs = quick.get("epochs", ch09.budget(name, 10 * per_class))
                    result = tune(model, data, epochs, args)
                row = {"key": key, "mode": mode, "start": name, "per_class": per_class}
                row.update(seed=seed, encoder_sha256=hashes.get(name), **result)
                row.update(where(args.device))
                if mode == "probe":  # the features are computed in float32
                    row["amp"] = "none (float32)"
                append(args.log, row)
                done[key] = row
                print(f"{key}: test {100 * row['test_accuracy']:.2f}%", flush=True)


def current(rows: dict[str, dict]) -> list[dict]:
    """The runs whose encoder is the one logged for their seed (scratch has none)."""
    logged = {
        (r["start"], r["seed"]): r["sha256"] for r in rows.values() if r["mode"] == "pretrain"
    }
    return [
        r
        for r in rows.values()
        if r["mode"] != "pretrain"
        and (r["start"] == "scratch" or logged.get((r["start"], r["seed"])) == r["encoder_sha256"])
    ]


def summary(runs: list[dict]) -> list[dict]:
    """Per (mode, start, labels per class): the seeds, their accuracies, mean, std, range."""
    groups: dict[tuple, list[dict]] = {}
    for r in sorted(runs, key=lambda r: r["seed"]):
        groups.setdefault((r["mode"], r["start"], r["per_class"]), []).append(r)
    table = []
    for (mode, name, per_class), group in sorted(groups.items()):
        accuracies = [r["test_accuracy"] for r in group]
        table.append(
            {
                "mode": mode,
                "start": name,
                "per_class": per_class,
                "seeds": [r["seed"] for r in group],
                "test_accuracy": accuracies,
                "mean": statistics.fmean(accuracies),
                "std": statistics.stdev(accuracies) if len(group) > 1 else 0.0,
                "min": min(accuracies),
                "max": max(accuracies),
            }
        )
    return table


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.quick:
        args.seeds, args.device = args.seeds[:1], "cpu"
    out = setup(args, DEFAULT_OUT)
    scratch = Path(tempfile.mkdtemp())
    args.log = args.log or (out.with_suffix(".jsonl") if out else scratch / "log.jsonl")
    weights = args.weights or scratch
    weights.mkdir(parents=True, exist_ok=True)
    args.log.parent.mkdir(parents=True, exist_ok=True)
    done = read_log(args.log)
    tic = time.perf_counter()
    if not args.summarize_only:
        for seed in args.seeds:
            seed_runs(seed, args, done, weights)
    done = read_log(args.log)
    runs = [r for r in current(done) if r["seed"] in args.seeds]
    pretrained = [r for r in done.values() if r["mode"] == "pretrain" and r["seed"] in args.seeds]
    table = summary(runs)
    for row in table:
        print(
            f"{row['mode']:>8} {row['start']:>10} {row['per_class']:>5}/class: "
            f"{100 * row['mean']:.2f}% ± {100 * row['std']:.2f} ({len(row['seeds'])} seeds)"
        )
    print(f"{len(runs)} runs in the log; {time.perf_counter() - tic:.0f} s")
    if out is not None:
        record = {
            "benchmark": "pretraining_seeds",
            "quick": args.quick,
            "provenance": {**provenance(args.seeds), "runs_on": args.runs_machine},
            "epochs": args.epochs,
            "pretraining": sorted(pretrained, key=lambda r: r["key"]),
            "summary": table,
            "runs": sorted(runs, key=lambda r: r["key"]),
        }
        write_json(out, record)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
