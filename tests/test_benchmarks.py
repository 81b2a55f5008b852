"""The benchmark scripts that write result files: each runs in ``--quick`` mode (seconds).

The full runs take minutes; their committed result files in ``benchmarks/results/`` are
what the book loads, so they are checked here for the same keys and provenance.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vit_tutorial.experiments import ch06, ch11
from vit_tutorial.files import sha256

ROOT = Path(__file__).resolve().parents[1]
PROVENANCE = {"command", "git_commit", "git_dirty", "date", "seeds", "versions", "machine"}
VERSIONS = {"python", "torch", "numpy", "sklearn", "vit_tutorial"}
MACHINE = {"platform", "cpu", "cpu_count", "torch_threads"}


def run_quick(script: str, out: Path) -> dict:
    run = subprocess.run(
        [sys.executable, f"benchmarks/{script}", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,  # a guard against a hang, not a speed target: the study's quick
    )  # mode takes about 3 minutes on an idle 2-core machine and 5 or more on a busy one
    assert run.returncode == 0, run.stdout + run.stderr
    assert not list(out.parent.glob("*.tmp")), "the temporary file was left behind"
    return json.loads(out.read_text())


def check_provenance(record: dict, script: str, seeds: list[int]) -> None:
    prov = record["provenance"]
    assert PROVENANCE <= set(prov)
    assert script in prov["command"]
    assert prov["seeds"] == seeds
    assert VERSIONS <= set(prov["versions"]) and MACHINE <= set(prov["machine"])
    assert prov["machine"]["cpu_count"] >= 1
    assert prov["date"][:2] == "20"


def check_runs(runs: list[dict], test_images: int, seeds: list[int]) -> None:
    assert [r["seed"] for r in runs] == seeds
    for r in runs:
        assert 0 <= r["wrong"] <= test_images
        assert r["accuracy"] == pytest.approx(1 - r["wrong"] / test_images, abs=1e-6)
        assert r["train_seconds"] > 0


def check_summary(record: dict) -> None:
    accuracies = [r["accuracy"] for r in record["runs"]]
    assert record["mean_accuracy"] == pytest.approx(sum(accuracies) / len(accuracies))
    assert record["min_accuracy"] <= record["mean_accuracy"] <= record["max_accuracy"]
    assert record["std_accuracy"] >= 0
    assert record["min_wrong"] <= record["mean_wrong"] <= record["max_wrong"]


@pytest.mark.slow
def test_digits_target_quick(tmp_path):
    record = run_quick("digits_target.py", tmp_path / "target.json")
    assert record["benchmark"] == "digits_target" and record["quick"] is True
    check_provenance(record, "digits_target.py", [0])
    assert record["test_images"] == 360 and record["epochs"] == 1
    check_runs(record["runs"], 360, [0])
    check_summary(record)
    assert record["svm_wrong"] == 6  # the RBF SVM's 98.33%, as chapter 6 shows
    assert record["target"]["met"] is None, "a quick run is not a measurement"


@pytest.mark.slow
def test_digits_models_quick(tmp_path):
    run = subprocess.run(
        [sys.executable, "benchmarks/digits_models.py", "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,  # a guard against a hang: about 10 s
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["digits_recipe_seed0.pt"]
    state = torch.load(tmp_path / "digits_recipe_seed0.pt", weights_only=True)
    assert state["epoch"] == 1 and state["extra"]["quick"] is True
    check_provenance(state["extra"], "digits_models.py", [0])
    model = ch06.load_recipe_model(tmp_path / "digits_recipe_seed0.pt")
    assert model.config.stem == "conv" and not model.training


@pytest.mark.slow
def test_digits_ablation_quick(tmp_path):
    record = run_quick("digits_ablation.py", tmp_path / "ablation.json")
    assert record["benchmark"] == "digits_ablation" and record["quick"] is True
    check_provenance(record, "digits_ablation.py", [0])
    assert record["schedule"]["epochs"] == 1 and record["schedule"]["batch_size"] == 64
    assert [v["id"] for v in record["variants"]] == ["patch-4", "stem-conv-2"]
    for variant in record["variants"]:
        assert variant["config"] == {**record["base"], **variant["change"]}
        check_runs(variant["runs"], record["test_images"], [0])
        check_summary(variant)


@pytest.mark.slow
def test_fashion_mnist_target_quick(tmp_path):
    record = run_quick("fashion_mnist_target.py", tmp_path / "fashion.json")
    assert record["benchmark"] == "fashion_mnist_target" and record["quick"] is True
    assert record["preset"] == "fashion-mnist-tiny" and record["target"]["met"] is None
    check_provenance(record, "fashion_mnist_target.py", [0])
    check_runs(record["runs"], record["test_images"], [0])
    check_summary(record)
    assert 0 <= record["runs"][0]["val_accuracy"] <= 1


def test_committed_cnn_run_records_the_model_that_ran():
    record = json.loads((ROOT / "benchmarks" / "results" / "fashion_mnist_cnn.json").read_text())
    assert record["model"] == record["recipe"]["model"]["name"] == "resnet18_greyscale"
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from fashion_mnist_target import RESNET18
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert record["recipe"]["model"] == RESNET18  # what the script records today


@pytest.mark.parametrize("name", ["digits_target", "digits_ablation"])
def test_committed_results_are_full_runs_with_provenance(name):
    record = json.loads((ROOT / "benchmarks" / "results" / f"{name}.json").read_text())
    assert record["benchmark"] == name and record["quick"] is False
    seeds = record["provenance"]["seeds"]
    assert len(seeds) >= 3, "at least 3 seeds, to see the spread"
    check_provenance(record, f"{name}.py", seeds)
    assert record["provenance"]["git_dirty"] is False, "rerun from a committed tree"
    if name == "digits_target":
        check_runs(record["runs"], record["test_images"], seeds)
        check_summary(record)
    else:
        assert record["schedule"]["epochs"] == 15 and len(record["variants"]) == 12
        for variant in record["variants"]:
            check_runs(variant["runs"], record["test_images"], seeds)
            check_summary(variant)


@pytest.mark.slow
def test_fashion_mnist_study_quick(tmp_path):
    record = run_quick("fashion_mnist_study.py", tmp_path / "study.json")
    assert record["benchmark"] == "fashion_mnist_study" and record["quick"] is True
    check_provenance(record, "fashion_mnist_study.py", [0])
    assert record["missing_runs"] == []
    keys = {r["key"] for r in record["runs"]}
    assert keys == {
        "vit-n300-s0-none-t20",
        "hybrid-n300-s0-none-t20",
        "resnet18-n300-s0-none-t20",
        "resnet8-n300-s0-none-t20",
        "swin-n300-s0-none-t20",
        "hybrid-n300-s0-all-t20",
        "vit-n300-s0-none-t20-cls",
        "vit-n300-s0-none-t20-cls-distilled",
    }
    for r in record["runs"]:
        assert r["optimizer_steps"] >= 20 and r["epochs"] == 7  # 300 images: 3 steps each
        assert 0 <= r["test_accuracy"] <= 1 and 0 <= r["val_accuracy"] <= 1
        # its learning curve: 2 points with --quick, after steps 11 and 21 (3 an epoch)
        history = r["history"]
        assert history["step"] == [11, 21], r["key"]
        assert all(math.isfinite(v) and v > 0 for v in history["train_loss"]), r["key"]
        assert all(0 <= v <= 1 for v in history["val_accuracy"]), r["key"]
        assert history["val_accuracy"][-1] == r["val_accuracy"]  # the last point is the run's
    assert record["runs_with_history"] == len(keys)
    assert len(record["configurations"]) == len(keys)  # one seed: one row each
    log = (tmp_path / "study.jsonl").read_text().splitlines()
    assert len(log) == len(keys)
    # a second invocation resumes from the log: nothing runs again
    again = run_quick("fashion_mnist_study.py", tmp_path / "study.json")
    assert (tmp_path / "study.jsonl").read_text().splitlines() == log
    assert again["runs"] == record["runs"]


def test_committed_study_results():
    record = json.loads((ROOT / "benchmarks" / "results" / "fashion_mnist_study.json").read_text())
    assert record["benchmark"] == "fashion_mnist_study" and record["quick"] is False
    assert record["provenance"]["seeds"] == [0, 1, 2]
    assert record["budget"]["steps"] == 13 * 430
    log = (ROOT / "benchmarks" / "results" / "fashion_mnist_study.jsonl").read_text()
    rows = [json.loads(line) for line in log.splitlines()]
    assert sorted(r["key"] for r in rows) == [r["key"] for r in record["runs"]]
    for config in record["configurations"]:
        assert config["seeds"] == [0, 1, 2], config  # every row: three seeds
        accuracies = config["test_accuracy"]
        assert config["mean_test_accuracy"] == pytest.approx(sum(accuracies) / 3)
    # 87 runs of the first study, and 12 of the ResNet-8 of the ViT's size (issue 25)
    assert len(record["runs"]) + len(record["missing_runs"]) == 99
    matched = {r["train_size"] for r in record["runs"] if r["model"] == "resnet8"}
    assert matched == {1000, 4000, 15000, 55000}


def run_pretraining(out: Path, *parts: str) -> subprocess.CompletedProcess:
    command = ["benchmarks/pretraining.py", "--quick", "--seeds", "0", "--out", str(out)]
    return subprocess.run(
        [sys.executable, *command, "--parts", *parts],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def check_pretraining_part(part: dict, seeds: list[int]) -> None:
    check_provenance(part, "pretraining.py", seeds)
    for s in part["summary"]:
        values = [
            r["test_accuracy"]
            for r in part["runs"]
            if (r["mode"], r["start"], r["per_class"]) == (s["mode"], s["start"], s["per_class"])
        ]
        assert s["seeds"] == len(values) == len(seeds)
        assert s["mean"] == pytest.approx(sum(values) / len(values))
        assert s["min"] <= s["mean"] <= s["max"] and s["std"] >= 0


FEW_LABEL_RUNS = {
    ("finetune", "scratch"),
    ("probe", "mae"),
    ("finetune", "mae"),
    ("probe", "supervised"),
    ("finetune", "supervised"),
}


@pytest.mark.slow
def test_pretraining_quick_parts_and_saved_encoders(tmp_path):
    out = tmp_path / "pre.json"
    run = run_pretraining(out, "target")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "target (MAE fine-tuned beats scratch" in run.stdout
    record = json.loads(out.read_text())
    assert record["benchmark"] == "pretraining" and record["quick"] is True
    target = record["target"]
    check_pretraining_part(target, [0])
    assert {(r["mode"], r["start"]) for r in target["runs"]} == FEW_LABEL_RUNS
    assert set(target["target"]) == {"margin", "needed", "mae_seconds", "met"}
    for name, entry in target["pretraining"].items():
        path = tmp_path / entry["weights"]
        assert sha256(path) == entry["sha256"], name
    # the other parts load the saved encoders and leave the target part as it was
    run = run_pretraining(out, "labels", "digits", "resolution", "scratch-budget")
    assert run.returncode == 0, run.stdout + run.stderr
    again = json.loads(out.read_text())
    assert again["target"] == target
    assert {r["per_class"] for r in again["labels"]["runs"]} == {10, 1000}
    assert {r["start"] for r in again["digits"]["runs"]} == {"scratch", "mae"}
    assert {r["start"] for r in again["resolution"]["runs"]} == {
        "mae-interpolated",
        "mae-fresh",
        "mae-sincos",
    }
    budget = again["scratch-budget"]["runs"]
    assert [(r["mode"], r["start"], r["per_class"]) for r in budget] == [
        ("finetune", "scratch", 100)
    ]
    for part in ("labels", "digits", "resolution", "scratch-budget"):
        check_pretraining_part(again[part], [0])
    # weights that do not match their recorded hash are refused
    weights = tmp_path / target["pretraining"]["mae"]["weights"]
    weights.write_bytes(weights.read_bytes()[:-8] + bytes(8))
    run = run_pretraining(out, "digits")
    assert run.returncode != 0 and "does not match the SHA-256" in run.stderr


def test_committed_pretraining_results():
    results = ROOT / "benchmarks" / "results"
    record = json.loads((results / "pretraining.json").read_text())
    assert record["benchmark"] == "pretraining" and record["quick"] is False
    assert "scratch-budget" in record  # the run that set the scratch budget, on the test set
    for name in ("target", "labels", "digits", "resolution", "scratch-budget"):
        if name in record:
            check_pretraining_part(record[name], [0, 1, 2])
            assert record[name]["provenance"]["git_dirty"] is False, name
    target = record["target"]
    assert {(r["mode"], r["start"]) for r in target["runs"]} == FEW_LABEL_RUNS
    assert target["target"]["met"] is True
    assert target["target"]["mae_seconds"] <= 20 * 60
    for name, entry in target["pretraining"].items():
        path = results / entry["weights"]
        assert sha256(path) == entry["sha256"], name


def check_seeded_summary(record: dict) -> None:
    """The summary of pretraining_seeds.json is the one its runs give."""
    groups: dict = {}
    for r in record["runs"]:
        groups.setdefault((r["mode"], r["start"], r["per_class"]), []).append(r)
    assert len(record["summary"]) == len(groups)
    for row in record["summary"]:
        runs = sorted(groups[row["mode"], row["start"], row["per_class"]], key=lambda r: r["seed"])
        assert row["seeds"] == [r["seed"] for r in runs]
        assert row["test_accuracy"] == [r["test_accuracy"] for r in runs]
        assert row["min"] <= row["mean"] <= row["max"]


@pytest.mark.slow
def test_pretraining_seeds_quick_resumes(tmp_path):
    out, weights = tmp_path / "seeds.json", tmp_path / "weights"
    command = [sys.executable, "benchmarks/pretraining_seeds.py", "--quick", "--out", str(out)]
    command += ["--weights", str(weights)]
    first = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    record = json.loads(out.read_text())
    assert record["benchmark"] == "pretraining_seeds" and record["quick"] is True
    check_provenance(record, "pretraining_seeds.py", [0])
    assert {(r["mode"], r["start"]) for r in record["runs"]} == FEW_LABEL_RUNS
    for entry in record["pretraining"]:  # each encoder's weights, with their hash
        assert sha256(weights / f"{entry['start']}-s0.pt") == entry["sha256"]
    check_seeded_summary(record)
    # a second run finds every run in the log and trains nothing
    second = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    assert ": test " not in second.stdout and "pretrain-" not in second.stdout
    assert len(out.with_suffix(".jsonl").read_text().splitlines()) == 7


def test_committed_pretraining_seeds_results():
    record = json.loads((ROOT / "benchmarks/results/pretraining_seeds.json").read_text())
    assert record["benchmark"] == "pretraining_seeds" and record["quick"] is False
    assert record["provenance"]["seeds"] == [0, 1, 2]
    # equal pre-training: both encoders, every seed, the same epochs
    assert {(r["start"], r["seed"], r["epochs"]) for r in record["pretraining"]} == {
        (name, seed, 10) for name in ("mae", "supervised") for seed in (0, 1, 2)
    }
    hashes = {(r["start"], r["seed"]): r["sha256"] for r in record["pretraining"]}
    for r in record["runs"]:  # each fine-tuning started from its seed's encoder
        assert r["encoder_sha256"] == hashes.get((r["start"], r["seed"]))
    assert len(record["runs"]) == 45 and {len(r["seeds"]) for r in record["summary"]} == {3}
    check_seeded_summary(record)


# --- speed against torchvision and timm -----------------------------------------------------

SPEED_CASES_CPU = [
    "b16_infer_b1",
    "b16_infer_b8",
    "b16_infer_b32",
    "s16_train_b8",
    "digits_epoch",
    "fashion_mnist_epoch",
]


def check_speed_cases(record: dict) -> None:
    from vit_tutorial.measure import ratio_to_best

    for case in record["cases"]:
        libraries = set(case["seconds"])
        expected = {"vit_tutorial", "timm"} | (
            {"torchvision"} if case["kind"] != "epoch" else set()
        )
        assert libraries == expected, case["case"]
        assert {len(t) for t in case["seconds"].values()} == {case["rounds"]}
        assert all(t > 0 for times in case["seconds"].values() for t in times)
        # the stored ratio is the one the stored times give
        assert case["ratio_to_best"] == pytest.approx(
            ratio_to_best(case["seconds"], "vit_tutorial")
        )
        assert max(case["max_abs_logit_difference"].values()) <= 1e-4, "identical weights"


@pytest.mark.slow
def test_speed_quick(tmp_path):
    out = tmp_path / "speed.json"
    record = run_quick("speed.py", out)
    assert record["benchmark"] == "speed" and record["quick"] is True
    assert record["mode"] == "cpu_fp32" and record["target_met"] is None
    check_provenance(record, "speed.py", [0])
    assert [c["case"] for c in record["cases"]] == SPEED_CASES_CPU  # no GPU-only case on a CPU
    check_speed_cases(record)
    table = out.with_suffix(".md").read_text()
    for case in SPEED_CASES_CPU:
        assert f"| {case} (batch " in table
    assert "torch " in table and "timm " in table, "the versions are in the table"


def test_speed_refuses_models_that_differ():
    """The timing is refused when a library's logits differ from ours (not the same work)."""
    from vit_tutorial.experiments import speed

    models = speed.vit_trio("b16", quick=True)
    with torch.no_grad():
        models["timm"].head.bias.add_(1.0)
    with pytest.raises(RuntimeError, match="timm computes another function"):
        speed.check_identical(models, torch.randn(2, 3, 32, 32))


@pytest.mark.parametrize("name", ["speed_cpu_fp32", "speed_cpu_fp32_earlier"])
def test_committed_speed_results(name):
    """The latest CPU run, and the earlier one the appendix compares it with."""
    path = ROOT / "benchmarks" / "results" / f"{name}.json"
    record = json.loads(path.read_text())
    assert record["benchmark"] == "speed" and record["quick"] is False
    check_provenance(record, "speed.py", [0])
    assert record["provenance"]["git_dirty"] is False, "rerun from a committed tree"
    assert record["provenance"]["machine"]["gpu"] is None or record["mode"].startswith("cuda")
    assert [c["case"] for c in record["cases"]] == SPEED_CASES_CPU
    assert all(c["rounds"] >= 5 for c in record["cases"])
    check_speed_cases(record)
    worst = max(c["ratio_to_best"]["ratio"] for c in record["cases"])
    assert record["target_met"] is (worst <= 1.0)
    assert path.with_suffix(".md").is_file(), "the Markdown table beside the JSON"


def test_committed_short_study_results():
    """Chapters 8 and 10's re-run at a 13th of the budget, on a CPU, with learning curves."""
    record = json.loads((ROOT / "benchmarks" / "results" / "fashion_mnist_short.json").read_text())
    assert record["benchmark"] == "fashion_mnist_study" and record["quick"] is False
    check_provenance(record, "fashion_mnist_study.py", [0, 1, 2])
    assert record["provenance"]["git_dirty"] is False, "summarise from a committed tree"
    assert record["budget"]["steps"] == 430 and record["missing_runs"] == []
    log = (ROOT / "benchmarks" / "results" / "fashion_mnist_short.jsonl").read_text()
    rows = [json.loads(line) for line in log.splitlines()]
    assert sorted(r["key"] for r in rows) == [r["key"] for r in record["runs"]]
    models = {"vit", "hybrid", "resnet8", "resnet18", "swin", "swin_global", "vit_p2", "vit_rel"}
    assert {(r["model"], r["train_size"], r["seed"]) for r in rows} == {
        (m, n, s) for m in models for n in (1000, 55000) for s in (0, 1, 2)
    }
    # the Swin runs made before its tables were exempt from weight decay, kept for chapter 10
    earlier = ROOT / "benchmarks" / "results" / "fashion_mnist_short_swin_earlier.jsonl"
    earlier = [json.loads(line) for line in earlier.read_text().splitlines()]
    assert sorted(r["key"] for r in earlier) == sorted(
        r["key"] for r in rows if r["model"] == "swin"
    )
    for r in rows:  # every run: the same budget, in whole epochs, and its curve
        assert r["optimizer_steps"] == (432 if r["train_size"] == 1000 else 430), r["key"]
        assert len(r["history"]["step"]) == 13 and r["history"]["step"][-1] == r["optimizer_steps"]
        assert r["history"]["val_accuracy"][-1] == r["val_accuracy"], r["key"]
    assert record["runs_with_history"] == len(rows) == 48
    assert record["provenance"]["runs_on"]["device"] == "cpu"


def test_axial_benchmark_refuses_grids_it_cannot_fit_a_slope_to():
    # grids up to 16 only: one point at 16×16 or above, so no slope (it used to fit one)
    command = [sys.executable, "benchmarks/axial_attention.py", "--grids", "8", "12", "16"]
    refused = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--grids needs two or more grids of 16×16" in refused.stderr
    assert refused.stdout == ""  # refused before measuring anything
    from vit_tutorial.experiments.ch07 import slope

    assert slope([8, 16, 32], [1.0, 4.0, 16.0]) == pytest.approx(1.0)  # time ∝ N
    with pytest.raises(ValueError, match=r"two or more grids .* got \[8, 16, 16\]"):
        slope([8, 16, 16], [1.0, 2.0, 2.0])


@pytest.mark.slow
def test_swin_block_memory_quick():
    command = [sys.executable, "benchmarks/swin_block_memory.py", "--batch", "2"]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr  # the layer's peak drops by the bias
    rows = {line.split()[0]: line.split()[1:] for line in run.stdout.splitlines()[4:6]}
    assert set(rows) == {"layer", "block"} and all(r[3] == "0" for r in rows.values())  # same
    assert "batch 2: nW = 64 windows of N = 49 tokens" in run.stdout and ": met" in run.stdout
    refused = subprocess.run([*command[:2], "--batch", "0"], cwd=ROOT, capture_output=True)
    assert refused.returncode == 2 and b"--batch must be at least 1" in refused.stderr


# --- the performance appendix's figures, on a quiet machine ----------------------------------

APPENDIX_MEASUREMENTS = [
    "einops",
    "backward_forward",
    "attention",
    "fast_path",
    "bf16",
    "compile",
    "adamw",
    "throughput",
    "matmul",
    "copies",
]


def check_appendix_record(record: dict) -> None:
    assert record["benchmark"] == "appendix_timings"
    assert list(record["measurements"]) == APPENDIX_MEASUREMENTS
    assert set(record["load_average_1min"]) == {"before", "after"}
    blocks = []
    for name, m in record["measurements"].items():
        assert set(m) == {"case", "rounds", "medians", "cpu", "figures"}, name
        assert m["cpu"] and all(t > 0 for t in m["medians"].values()), name
        for block in m["cpu"]:
            assert block["quiet"] is (block["share"] >= record["quiet_share"]), name
            blocks.append((name, block))
    assert record["contended"] == [f"{n} ({b['share']:.2f})" for n, b in blocks if not b["quiet"]]
    assert record["quiet"] is not record["contended"]
    threads = [b["threads"] for b in record["measurements"]["throughput"]["cpu"]]
    assert threads == sorted({1, record["all_threads"]})
    figures = record["measurements"]["throughput"]["figures"]
    assert ("thread_gain" in figures) is (record["all_threads"] > 1)


@pytest.mark.slow
def test_appendix_timings_quick(tmp_path):
    record = run_quick("appendix_timings.py", tmp_path / "appendix.json")
    assert record["quick"] is True and record["threads"] == 1
    check_provenance(record, "appendix_timings.py", [0])
    check_appendix_record(record)


def fake_measurements(share: float) -> dict:
    from vit_tutorial.measure import QUIET_SHARE

    block = {"threads": 1, "cpu_seconds": share, "wall_seconds": 1.0, "share": share}
    record = {"case": "x", "rounds": 1, "medians": {"a": 1.0}, "figures": {}}
    return {"einops": {**record, "cpu": [{**block, "quiet": share >= QUIET_SHARE}]}}


@pytest.mark.parametrize("share, written, status", [(0.5, False, 1), (0.99, True, 0)])
def test_appendix_timings_refuses_to_commit_a_busy_machines_figures(
    tmp_path, monkeypatch, capsys, share, written, status
):
    """Without --out the script writes the committed file only when every block was quiet;
    with --out it writes a busy run there, marked so, and still exits with status 1."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import appendix_timings

        import _results
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    monkeypatch.setattr(_results, "ROOT", tmp_path)  # the help names the file under ROOT
    committed = tmp_path / "appendix_cpu_fp32.json"
    monkeypatch.setattr(appendix_timings, "DEFAULT_OUT", committed)
    monkeypatch.setattr(appendix_timings, "measure_all", lambda *a: fake_measurements(share))
    monkeypatch.setattr(sys, "argv", ["appendix_timings.py"])
    assert appendix_timings.main() == status
    assert committed.is_file() is written
    if not written:
        assert "not written" in capsys.readouterr().err
    elsewhere = tmp_path / "busy.json"
    monkeypatch.setattr(sys, "argv", ["appendix_timings.py", "--out", str(elsewhere)])
    assert appendix_timings.main() == status
    record = json.loads(elsewhere.read_text())
    assert record["quiet"] is written and record["quick"] is False


def test_committed_appendix_timings_are_a_quiet_full_run():
    path = ROOT / "benchmarks" / "results" / "appendix_cpu_fp32.json"
    if not path.is_file():
        pytest.skip("not recorded yet: run benchmarks/appendix_timings.py on an idle machine")
    record = json.loads(path.read_text())
    assert record["quick"] is False and record["quiet"] is True and record["threads"] == 1
    check_provenance(record, "appendix_timings.py", [0])
    assert record["provenance"]["git_dirty"] is False, "rerun from a committed tree"
    check_appendix_record(record)


@pytest.mark.slow
def test_modern_ladder_quick(tmp_path):
    record = run_quick("modern_ladder.py", tmp_path / "ladder.json")
    assert record["benchmark"] == "modern_ladder" and record["quick"] is True
    check_provenance(record, "modern_ladder.py", [0])
    assert record["missing_runs"] == [] and record["parts"] == ["ladder", "qk-norm", "patch-drop"]
    keys = {r["key"] for r in record["runs"]}
    assert keys == {
        "baseline-n300-s0-t20",
        "-qkv-bias-n300-s0-t20",
        "patch-drop-n300-s0-t20",
        "baseline-n300-s0-t20-lr0.1",
        "qk-norm-alone-n300-s0-t20-lr0.1",
    }
    for r in record["runs"]:
        assert r["options"] == ch11.row_config(r["row"])
        assert len(r["max_attention_logit"]) == 4  # one per block
        patches = r["token_norms"]["patches"]
        assert patches[0] <= patches[1] <= patches[2]  # median, 99th percentile, maximum
        assert (r["token_norms"]["prefix"] is None) == (r["row"] != "-qkv-bias")  # registers
        assert r["code"]["git_commit"] == record["provenance"]["git_commit"]
    last = next(r for r in record["runs"] if r["row"] == "-qkv-bias")
    assert last["options"]["reg_tokens"] == 4 and last["options"]["qkv_bias"] is False
    configurations = {(c["row"], c["lr"]) for c in record["configurations"]}
    assert ("baseline", 0.1) in configurations and ("baseline", 0.002) in configurations
    assert len(record["configurations"]) == len(keys)  # one seed: one row each


def test_committed_modern_ladder():
    results = ROOT / "benchmarks" / "results"
    record = json.loads((results / "modern_ladder.json").read_text())
    assert record["benchmark"] == "modern_ladder" and record["quick"] is False
    check_provenance(record, "modern_ladder.py", [0, 1, 2])
    assert record["budget"]["steps"] == ch11.SHORT_STEPS == 430
    assert set(record["parts"]) == {"ladder", "qk-norm", "patch-drop"}
    assert record["missing_runs"] == []
    log = [json.loads(line) for line in (results / "modern_ladder.jsonl").read_text().splitlines()]
    assert sorted(r["key"] for r in log) == [r["key"] for r in record["runs"]]
    # 10 rows x 2 sizes; QK-norm alone at 4 rates and the baseline at 3 more (at chapter 8's
    # rate it is the ladder's); patch dropout at both sizes: 20 + 7 + 2 configurations
    assert len(record["runs"]) == 3 * (20 + 7 + 2)
    for r in record["runs"]:
        assert r["options"] == ch11.row_config(r["row"]), r["key"]  # the rows as the code has them
        assert r["code"]["git_dirty"] is False, r["key"]
        assert r["optimizer_steps"] >= 430 and len(r["max_attention_logit"]) == 4
    for config in record["configurations"]:
        assert config["seeds"] == [0, 1, 2], config
