"""Chapter 9's studies: which runs, how they run, their summaries; chapter 9's runs are :mod:`~vit_tutorial.experiments.ch09`.

**The study** (``benchmarks/pretraining.py``): both encoders pre-trained once, with seed 0
(:func:`pretrain_encoders`, or their saved weights, checked: :func:`load_encoders`), then, for
each seed, the runs of a part of :data:`PARTS` (:func:`part_runs`): the three starts fine-tuned
and the two encoders probed at :data:`TARGET_PER_CLASS` labelled images per class (``target``),
at 10 and 1,000 (``labels``), on the digits (``digits``), and at a fixed budget, a pre-trained
start's steps, for the MAE encoder at :data:`RESOLUTION` × :data:`RESOLUTION` with each position
table (``resolution``) and for the ViT from scratch (``scratch-budget``); :func:`part_summary`
and :func:`target` summarise them.

**The seeds study** (``benchmarks/pretraining_seeds.py``): for each seed, both encoders
pre-trained with that seed, then fine-tuned and probed with it at 100, 10 and 1,000 labels per
class (:func:`seed_specs`, :class:`SeedRun`), run with
:func:`~vit_tutorial.experiments.runner.run_study` (:func:`run_seeds`): a fine-tuning after the
pre-training it starts from, and again when that encoder changed (:func:`current`).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vit_tutorial.engine import resolve_device
from vit_tutorial.experiments import ch09
from vit_tutorial.experiments.runner import run_study, spread
from vit_tutorial.files import sha256, write_atomically
from vit_tutorial.finetune import finetune

__all__ = ["PARTS", "SeedRun", "current", "load_encoders", "part_runs", "part_summary"]
__all__ += ["pretrain", "pretrain_encoders", "run_seeds", "seed_specs", "seeds_summary"]
__all__ += ["target", "tune"]

PARTS = ("target", "labels", "digits", "resolution", "scratch-budget")
TARGET_PER_CLASS = 100
#: The target's time limit: MAE pre-training and its three fine-tunings, on a 2-core CPU.
TIME_LIMIT_S = 20 * 60
#: Pre-training epochs over the 60,000 images (the seeds study gives both encoders 10).
EPOCHS = {"mae": 10, "supervised": 4}
RESOLUTION = 40
#: The seeds study's labels per class, the chapter's headline first.
SEED_PER_CLASS = (100, 10, 1000)
#: ``quick``: a tiny run of everything, the code path only.
QUICK = dict(images=500, epochs=1, per_class=2, eval_size=200)


def pretrain(name: str, *, epochs: int, seed: int, device: str, quick: bool = False) -> tuple:
    """Pre-train the encoder ``name`` of ``ch09.ENCODERS``; ``(model, info)``, ``info`` its
    ``epochs``, ``seconds`` and ``final_loss``."""
    function = {"mae": ch09.pretrain_mae, "supervised": ch09.pretrain_supervised}[name]
    epochs = QUICK["epochs"] if quick else epochs
    tic = time.perf_counter()
    images = QUICK["images"] if quick else None
    model, history = function(epochs=epochs, images=images, seed=seed, device=device)
    seconds = round(time.perf_counter() - tic, 1)
    return model, {"epochs": epochs, "seconds": seconds, "final_loss": history["train_loss"][-1]}


def save_weights(model: nn.Module, path: str | Path) -> str:
    """Write the weights atomically; return their SHA-256."""
    return sha256(write_atomically(path, lambda f: torch.save(model.state_dict(), f)))


def load_weights(name: str, path: str | Path, expected: str | None = None) -> nn.Module:
    """The encoder ``name`` with the weights saved at ``path``, in eval mode; ``ValueError``
    when their SHA-256 is not ``expected``."""
    if expected is not None and sha256(path) != expected:
        raise ValueError(f"{path} does not match the SHA-256 recorded for it, {expected}")
    model = ch09.build_encoder(name)
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return model.eval()


def pretrain_encoders(
    weights: dict[str, Path], *, save: bool, device: str, quick: bool = False
) -> dict:
    """Both encoders pre-trained with seed 0 (:data:`EPOCHS`), saved at ``weights[name]`` when
    ``save``: per encoder, its ``epochs``, ``seconds``, ``final_loss``, ``weights`` (the file's
    name), ``sha256`` (``None`` unsaved) and ``model``."""
    info = {}
    for name, path in weights.items():
        model, entry = pretrain(name, epochs=EPOCHS[name], seed=0, device=device, quick=quick)
        entry["final_loss"] = round(entry["final_loss"], 4)
        entry.update(weights=path.name, sha256=save_weights(model, path) if save else None)
        print(f"pre-trained {name}: {entry['seconds']:.0f} s, final loss {entry['final_loss']}")
        info[name] = {**entry, "model": model}
    return info


def load_encoders(folder: Path, pretraining: dict) -> dict:
    """The encoders that :func:`pretrain_encoders` saved in ``folder``, as its ``pretraining``
    record names them, each checked against its SHA-256: the record with each ``model``."""
    return {
        name: {**entry, "model": load_weights(name, folder / entry["weights"], entry["sha256"])}
        for name, entry in pretraining.items()
    }


def tune(model: nn.Module, data: Any, epochs: int, device: str) -> dict:
    """Fine-tune every weight for ``epochs`` (no validation): ``test_accuracy``,
    ``train_seconds``, ``epochs``."""
    settings = ch09.finetune_settings(epochs)
    result = finetune(
        model, data, settings, new_head=False, validate=False, device=device, progress=False
    )
    return {
        "test_accuracy": result.test_accuracy,
        "train_seconds": result.train_seconds,
        "epochs": epochs,
    }


def _row(mode: str, name: str, per_class: int | str, seed: int, result: dict) -> dict:
    entry = {"mode": mode, "start": name, "per_class": per_class, "seed": seed, **result}
    print(
        f"{mode:>8} {name:>10} {per_class:>5}/class seed {seed}: "
        f"{100 * entry['test_accuracy']:.2f}%",
        flush=True,
    )
    return entry


def _few_labels(per_class: int, seeds, encoders: dict, device: str, quick: bool) -> list[dict]:
    """The three starts fine-tuned and the two encoders probed, at ``per_class`` labels."""
    rows, q = [], QUICK if quick else {}
    for seed in seeds:
        labels = q.get("per_class", per_class)
        data = ch09.labelled_data(labels, seed, eval_size=q.get("eval_size"))
        for name in ch09.STARTS:
            model = ch09.start(name, seed, encoders)
            if name != "scratch":
                rows.append(_row("probe", name, per_class, seed, ch09.linear_probe(model, data)))
            epochs = q.get("epochs", ch09.budget(name, 10 * per_class))
            rows.append(_row("finetune", name, per_class, seed, tune(model, data, epochs, device)))
    return rows


def _digits(seeds, encoders: dict, device: str, quick: bool) -> list[dict]:
    rows = []
    for seed in seeds:
        data = ch09.digits_like_fashion_mnist(seed)
        for name in ("scratch", "mae"):
            epochs = QUICK["epochs"] if quick else ch09.budget(name, len(data.train))
            result = tune(ch09.start(name, seed, encoders), data, epochs, device)
            rows.append(_row("finetune", name, "digits", seed, result))
    return rows


def _fixed_budget(
    seeds, starts: dict[str, Callable[[int], nn.Module]], image_size: int, device: str, quick: bool
) -> list[dict]:
    """Each of ``starts`` (``name: build(seed)``) fine-tuned at :data:`TARGET_PER_CLASS` labels
    per class on ``image_size`` images for a pre-trained start's epochs, whatever the start."""
    q = QUICK if quick else {}
    epochs = q.get("epochs", ch09.budget("mae", 10 * TARGET_PER_CLASS))
    rows = []
    for seed in seeds:
        per_class, eval_size = q.get("per_class", TARGET_PER_CLASS), q.get("eval_size")
        data = ch09.labelled_data(per_class, seed, image_size=image_size, eval_size=eval_size)
        for name, build in starts.items():
            result = tune(build(seed), data, epochs, device)
            rows.append(_row("finetune", name, TARGET_PER_CLASS, seed, result))
    return rows


def part_runs(
    part: str, seeds: Iterable[int], encoders: dict, device: str = "cpu", quick: bool = False
) -> list[dict]:
    """The runs of ``part`` of :data:`PARTS` for each of ``seeds``, from ``encoders`` (``'mae'``
    and ``'supervised'``): one row each, ``mode`` (``'finetune'`` or ``'probe'``), ``start``,
    ``per_class``, ``seed`` and the result (:func:`tune`, ``ch09.linear_probe``)."""
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}; expected one of {PARTS}")
    seeds = list(seeds)
    if part in ("target", "labels"):
        sizes = (TARGET_PER_CLASS,) if part == "target" else (10, 1000)
        return [r for n in sizes for r in _few_labels(n, seeds, encoders, device, quick)]
    if part == "digits":
        return _digits(seeds, encoders, device, quick)
    if part == "scratch-budget":  # the ViT from scratch with a pre-trained start's steps
        starts = {"scratch": lambda seed: ch09.start("scratch", seed, encoders)}
        return _fixed_budget(seeds, starts, 28, device, quick)
    starts = {  # the MAE encoder at 40×40 with each position table
        f"mae-{table}": functools.partial(_at_resolution, encoders=encoders, table=table)
        for table in ch09.TABLES
    }
    return _fixed_budget(seeds, starts, RESOLUTION, device, quick)


def _at_resolution(seed: int, *, encoders: dict, table: str) -> nn.Module:
    return ch09.at_resolution(ch09.start("mae", seed, encoders), RESOLUTION, table=table)


def part_summary(rows: Iterable[dict]) -> list[dict]:
    """Per (mode, start, per_class), in the rows' order: the mean, sample std, min and max of
    the test accuracy, and the number of seeds."""
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        groups.setdefault((r["mode"], r["start"], r["per_class"]), []).append(r["test_accuracy"])
    return [
        {"mode": mode, "start": name, "per_class": n, **spread(values), "seeds": len(values)}
        for (mode, name, n), values in groups.items()
    ]


def target(rows: list[dict], pretraining: dict) -> dict:
    """The target: MAE fine-tuned beats scratch at :data:`TARGET_PER_CLASS` labels per class by
    more than 3 times the larger std, pre-training and fine-tunings within
    :data:`TIME_LIMIT_S`; printed, and returned as ``margin``, ``needed``, ``mae_seconds``,
    ``met``."""
    table = {(s["mode"], s["start"]): s for s in part_summary(rows)}
    mae, scratch = table["finetune", "mae"], table["finetune", "scratch"]
    margin, needed = mae["mean"] - scratch["mean"], 3 * max(mae["std"], scratch["std"])
    seconds = pretraining["mae"]["seconds"] + sum(
        r["train_seconds"] for r in rows if r["mode"] == "finetune" and r["start"] == "mae"
    )
    met = margin > needed and seconds <= TIME_LIMIT_S
    print(
        f"target (MAE fine-tuned beats scratch at {TARGET_PER_CLASS}/class by > 3 x the larger"
        f" std, pre-training + fine-tuning <= {TIME_LIMIT_S // 60} min): "
        f"{'met' if met else 'missed'}; margin {100 * margin:.2f} points, needed "
        f"{100 * needed:.2f}; MAE pre-training + 3 fine-tunings {seconds / 60:.1f} min"
    )
    return {"margin": margin, "needed": needed, "mae_seconds": seconds, "met": met}


# --- the seeds study --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SeedRun:
    """One run of the seeds study: ``mode`` (``'pretrain'``, ``'probe'`` or ``'finetune'``),
    ``start``, ``seed``, the labels per class (not for a pre-training), the pre-training's
    ``epochs`` and ``quick``; a key names the epochs and ``quick`` only when they are not the
    committed study's (10, full), so another setting never reads that log's rows as its own.

    Example:
        >>> SeedRun("finetune", "mae", 2, per_class=100).key, SeedRun("pretrain", "mae", 2).key
        ('finetune-mae-100-s2', 'pretrain-mae-s2')
        >>> SeedRun("pretrain", "mae", 2, epochs=4, quick=True).key
        'pretrain-mae-s2-e4-quick'
    """

    mode: str
    start: str
    seed: int
    per_class: int | None = None
    epochs: int = 10
    quick: bool = False

    @property
    def key(self) -> str:
        """A name unique to the run (the committed log's)."""
        tail = (f"-e{self.epochs}" if self.epochs != 10 else "") + ("-quick" if self.quick else "")
        if self.mode == "pretrain":
            return f"pretrain-{self.start}-s{self.seed}{tail}"
        return f"{self.mode}-{self.start}-{self.per_class}-s{self.seed}{tail}"

    @property
    def encoder(self) -> SeedRun | None:
        """The pre-training this run starts from (``None`` for scratch and a pre-training)."""
        if self.mode == "pretrain" or self.start == "scratch":
            return None
        return SeedRun("pretrain", self.start, self.seed, epochs=self.epochs, quick=self.quick)


def seed_specs(seeds: Iterable[int], epochs: int = 10, quick: bool = False) -> list[SeedRun]:
    """For each seed: both pre-trainings, then at each of :data:`SEED_PER_CLASS` (only the first
    with ``quick``) every start fine-tuned and each encoder probed."""
    runs = []
    for seed in seeds:
        runs += [SeedRun("pretrain", name, seed, None, epochs, quick) for name in ch09.ENCODERS]
        for per_class in SEED_PER_CLASS[:1] if quick else SEED_PER_CLASS:
            for name in ch09.STARTS:
                for mode in ("probe", "finetune") if name != "scratch" else ("finetune",):
                    runs.append(SeedRun(mode, name, seed, per_class, epochs, quick))
    return runs


def _where(device: str) -> dict:
    """The device and precision a run used (each line carries them)."""
    cuda = resolve_device(device).type == "cuda"
    return {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "amp": "bf16 autocast" if cuda else "none (float32)",
        "torch": torch.__version__,
    }


def seed_work(run: SeedRun, *, device: str, weights: str) -> dict:
    """One run of the seeds study, in a worker process: a pre-training saves its encoder to
    ``weights`` (a folder); a fine-tuning or probe loads it and names its SHA-256."""
    path = Path(weights) / f"{run.start}-s{run.seed}.pt"
    row = {"mode": run.mode, "start": run.start}
    if run.mode == "pretrain":
        model, info = pretrain(
            run.start, epochs=run.epochs, seed=run.seed, device=device, quick=run.quick
        )
        info["final_loss"] = round(info["final_loss"], 4)
        row.update(seed=run.seed, **info, sha256=save_weights(model, path))
        return {**row, **_where(device)}
    encoder = None if run.encoder is None else sha256(path)  # the file it loads
    encoders = {} if encoder is None else {run.start: load_weights(run.start, path)}
    q = QUICK if run.quick else {}
    labels = q.get("per_class", run.per_class)
    data = ch09.labelled_data(labels, run.seed, eval_size=q.get("eval_size"))
    model = ch09.start(run.start, run.seed, encoders)
    if run.mode == "probe":
        result = ch09.linear_probe(model, data, device)
    else:
        epochs = q.get("epochs", ch09.budget(run.start, 10 * run.per_class))
        result = tune(model, data, epochs, device)
    row.update(per_class=run.per_class, seed=run.seed, encoder_sha256=encoder, **result)
    row.update(_where(device))
    if run.mode == "probe":  # the features are computed in float32
        row["amp"] = "none (float32)"
    return row


def _after(run: SeedRun) -> list[SeedRun]:
    return [] if run.encoder is None else [run.encoder]


def _stands(run: SeedRun, rows: dict[str, dict], *, weights: str) -> bool:
    """A pre-training stands while its weights are on disk with their SHA-256; a fine-tuning
    or probe while the encoder it started from is the one logged for its seed."""
    if run.mode == "pretrain":
        path = Path(weights) / f"{run.start}-s{run.seed}.pt"
        return path.exists() and sha256(path) == rows[run.key]["sha256"]
    logged = rows.get(run.encoder.key, {}).get("sha256")
    return rows[run.key].get("encoder_sha256") == logged


def run_seeds(
    runs: Iterable[SeedRun], log: str | Path, *, weights: str | Path, device: str, processes=1
) -> dict[str, dict]:
    """Run the ``runs`` that ``log`` lacks (:func:`~vit_tutorial.experiments.runner.run_study`),
    the encoders' weights in the folder ``weights``; every run of ``log`` by key."""
    weights = str(weights)
    work = functools.partial(seed_work, device=device, weights=weights)
    stands = functools.partial(_stands, weights=weights)
    return run_study(
        runs, work, log, processes=processes, after=_after, stands=stands, report=_report
    )


def _report(row: dict) -> str:
    if row["mode"] == "pretrain":
        return f"{row['seconds']:.0f} s, final loss {row['final_loss']}"
    return f"test {100 * row['test_accuracy']:.2f}%"


def current(rows: dict[str, dict]) -> list[dict]:
    """The fine-tunings and probes whose encoder is the one logged for their seed (scratch has
    none)."""
    logged = {
        (r["start"], r["seed"]): r["sha256"] for r in rows.values() if r["mode"] == "pretrain"
    }
    return [
        r
        for r in rows.values()
        if r["mode"] != "pretrain"
        and (r["start"] == "scratch" or logged.get((r["start"], r["seed"])) == r["encoder_sha256"])
    ]


def seeds_summary(runs: Iterable[dict]) -> list[dict]:
    """Per (mode, start, labels per class): the seeds, their accuracies, mean, std, range."""
    groups: dict[tuple, list[dict]] = {}
    for r in sorted(runs, key=lambda r: r["seed"]):
        groups.setdefault((r["mode"], r["start"], r["per_class"]), []).append(r)
    table = []
    for (mode, name, per_class), group in sorted(groups.items()):
        accuracies = [r["test_accuracy"] for r in group]
        seeds = [r["seed"] for r in group]
        table.append(
            {"mode": mode, "start": name, "per_class": per_class, "seeds": seeds}
            | {"test_accuracy": accuracies, **spread(accuracies)}
        )
    return table
