"""The chapters' studies in vit_tutorial/experiments: their runs, their plans and their summaries,
checked against the committed logs and result files they must keep reading and reproducing."""

import json
from pathlib import Path

import pytest
import torch

from vit_tutorial.experiments import ch06, ch07, ch08, ch09, ch10, ch11
from vit_tutorial.experiments import ch08_study as study08
from vit_tutorial.experiments import ch09_study as study09
from vit_tutorial.experiments.runner import plan, read_log
from vit_tutorial.mae import MaskedAutoencoder

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def committed(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def same_numbers(ours, theirs) -> None:
    """The same fields in the same order and the same values, floats to 1e-12 (a mean summed
    in another order)."""
    if isinstance(theirs, dict):
        assert list(ours) == list(theirs)
        for key in theirs:
            same_numbers(ours[key], theirs[key])
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            same_numbers(a, b)
    elif isinstance(theirs, float):
        assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-12)
    else:
        assert ours == theirs and type(ours) is type(theirs)


# --- chapter 6 ------------------------------------------------------------------------------


def test_ch06_ablation_runs_are_one_per_configuration_and_seed():
    runs = ch06.ablation_runs(["pos-learned", "patch-2", "patch-4", "stem-conv-1"], [0, 1], 3)
    assert [r.key for r in runs] == [
        "base-s0-e3",
        "base-s1-e3",
        "patch_size=4-s0-e3",
        "patch_size=4-s1-e3",
        "patch_size=1,stem=conv-s0-e3",
        "patch_size=1,stem=conv-s1-e3",
    ]
    assert runs[5].config == {**ch06.BASE, "patch_size": 1, "stem": "conv"}
    keys = {ch06.AblationRun.of(v, 0, 15).key for v in ch06.VARIANTS}
    assert len(keys) == len(
        {tuple(sorted({**ch06.BASE, **c}.items())) for *_, c in ch06.VARIANTS.values()}
    )
    with pytest.raises(ValueError, match="unknown variants"):
        ch06.ablation_runs(["pos-sincos"], [0], 3)


def test_ch06_ablation_work_trains_the_runs_configuration(monkeypatch):
    calls = []
    monkeypatch.setattr(ch06, "train_once", lambda c, s, e: calls.append((c, s, e)) or {"seed": s})
    run = ch06.AblationRun.of("pool-cls", 2, 4)
    assert ch06.ablation_work(run) == {"seed": 2}
    assert calls == [({**ch06.BASE, "pool": "cls"}, 2, 4)]
    row = ch06.variant_row("pool-cls", [{"seed": 2}])
    assert row == {
        "id": "pool-cls",
        "group": "pooling",
        "name": "class token",
        "change": {"pool": "cls"},
        "config": {**ch06.BASE, "pool": "cls"},
        "runs": [{"seed": 2}],
    }


# --- chapter 7 ------------------------------------------------------------------------------


def test_ch07_measures_the_three_layers_on_each_grid():
    explicit, fused, axial = ch07.layers(16, 2).values()
    assert not explicit.fused and fused.fused and not axial.training
    results = ch07.measure([4, 6], 16, 2, repeats=1)
    assert list(results) == list(ch07.METHODS)
    for method in ch07.METHODS:
        assert len(results[method]["seconds"]) == len(results[method]["bytes"]) == 2
        assert all(t > 0 for t in results[method]["seconds"])
    with pytest.raises(ValueError, match=r"two or more grids of 16×16 or above, got \[8, 16\]"):
        ch07.slope([8, 16], [1.0, 2.0])


# --- chapter 8 ------------------------------------------------------------------------------


def test_ch08_study_specs_hold_each_teacher_once_and_the_quick_set():
    specs = study08.specs(study08.PARTS, [0], [300], 20, quick=True, models=[*ch08.MODELS, "swin"])
    assert {s.key for s in specs} == {
        "vit-n300-s0-none-t20",
        "hybrid-n300-s0-none-t20",
        "resnet18-n300-s0-none-t20",
        "resnet8-n300-s0-none-t20",
        "swin-n300-s0-none-t20",
        "hybrid-n300-s0-all-t20",
        "vit-n300-s0-none-t20-cls",
        "vit-n300-s0-none-t20-cls-distilled",
    }
    assert len(specs) == 8  # the scaling part's resnet18 is the distilled run's teacher
    full = study08.specs()
    assert len(full) == 99 and all(s.steps == ch08.STEPS for s in full)
    with pytest.raises(ValueError, match="unknown part 'scale'"):
        study08.specs(["scale"])


def test_ch08_a_teacher_without_its_weights_runs_again_only_for_a_student(tmp_path):
    teacher = ch08.RunSpec("resnet18", 4000, 0, 100)
    student = ch08.RunSpec("vit", 4000, 0, 100, pool="cls", distilled=True)
    rows = {teacher.key: {}}

    def stands(spec, rows):
        return study08._stands(spec, rows, teachers=str(tmp_path))

    assert plan([teacher], rows, study08._after, stands) == []  # a scaling run: logged is done
    assert plan([teacher, student], rows, study08._after, stands) == [teacher, student]
    study08.teacher_path(tmp_path, teacher).write_bytes(b"weights")
    assert plan([teacher, student], rows, study08._after, stands) == [student]


def test_ch08_study_summary_reproduces_the_committed_study():
    record = committed("fashion_mnist_study.json")
    rows = read_log(RESULTS / "fashion_mnist_study.jsonl")  # written before the runner
    assert sorted(rows) == [r["key"] for r in record["runs"]]
    same_numbers(study08.summarize(rows.values()), record["configurations"])


# --- chapter 9 ------------------------------------------------------------------------------


def test_ch09_seed_runs_are_the_committed_logs_and_nothing_is_left_to_run(tmp_path):
    rows = read_log(RESULTS / "pretraining_seeds.jsonl")
    runs = study09.seed_specs([0, 1, 2])
    assert sorted(r.key for r in runs) == sorted(rows)

    def stands(run, rows):
        return study09._stands(run, rows, weights=str(tmp_path))  # no weights kept

    # every fine-tuning stands on its logged encoder: nothing runs, the weights are not needed
    assert plan(runs, rows, study09._after, stands) == []
    # one made from another encoder runs again, after that encoder (its weights gone), and so
    # does every other run of that encoder
    rows["finetune-mae-10-s1"] = {**rows["finetune-mae-10-s1"], "encoder_sha256": "another"}
    todo = [r.key for r in plan(runs, rows, study09._after, stands)]
    assert todo == ["pretrain-mae-s1"] + [
        f"{mode}-mae-{n}-s1" for n in (100, 10, 1000) for mode in ("probe", "finetune")
    ]


def test_ch09_seeds_summary_and_current_reproduce_the_committed_file():
    record = committed("pretraining_seeds.json")
    rows = read_log(RESULTS / "pretraining_seeds.jsonl")
    runs = study09.current(rows)
    assert sorted(r["key"] for r in runs) == [r["key"] for r in record["runs"]]
    same_numbers(study09.seeds_summary(runs), record["summary"])
    stale = {**rows, "probe-mae-10-s0": {**rows["probe-mae-10-s0"], "encoder_sha256": "x"}}
    assert len(study09.current(stale)) == len(runs) - 1


def test_ch09_part_summary_and_target_reproduce_the_committed_file(capsys):
    record = committed("pretraining.json")
    for part in study09.PARTS:
        same_numbers(study09.part_summary(record[part]["runs"]), record[part]["summary"])
    target = record["target"]
    same_numbers(study09.target(target["runs"], target["pretraining"]), target["target"])
    assert "target (MAE fine-tuned beats scratch" in capsys.readouterr().out


def test_ch09_encoders_are_built_one_way_and_checked_when_loaded(tmp_path):
    mae, supervised = ch09.build_encoder("mae"), ch09.build_encoder("supervised")
    assert isinstance(mae, MaskedAutoencoder) and not isinstance(supervised, MaskedAutoencoder)
    assert supervised.head.out_features == len(ch09.COARSE_NAMES)
    path = tmp_path / "mae.pt"
    digest = study09.save_weights(mae, path)
    loaded = study09.load_weights("mae", path, digest)
    assert all(
        torch.equal(a, b) for a, b in zip(mae.state_dict().values(), loaded.state_dict().values())
    )
    with pytest.raises(ValueError, match="does not match the SHA-256"):
        study09.load_weights("mae", path, "0" * 64)
    with pytest.raises(ValueError, match="unknown encoder 'vit'"):
        ch09.build_encoder("vit")
    with pytest.raises(ValueError, match="unknown part 'budget'"):
        study09.part_runs("budget", [0], {})


# --- chapter 10 -----------------------------------------------------------------------------


def test_ch10_the_repeated_bias_computes_what_the_layer_computes():
    from vit_tutorial.windows import SwinBlock, shifted_window_mask, window_partition

    torch.manual_seed(0)
    block = SwinBlock(32, 2, window_size=4, shift_size=2).eval()
    windows = window_partition(torch.randn(3, 8, 8, 32), 4)  # (B·nW, N, C)
    mask = shifted_window_mask(8, 8, 4, 2)
    with torch.no_grad():
        old = ch10.repeated_bias_attention(block.attn, windows, mask)
        torch.testing.assert_close(old, block.attn(windows, mask))
        old = ch10.repeated_bias_attention(block.attn, windows, None)
        torch.testing.assert_close(old, block.attn(windows))
    assert ch10.MODELS == ch08.LATER_MODELS
    assert ch10.repeated_bias_bytes(2) == 2 * 64 * 3 * 49 * 49 * 4


# --- chapter 11 -----------------------------------------------------------------------------


def test_ch11_specs_and_summary_reproduce_the_committed_ladder():
    record = committed("modern_ladder.json")
    rows = read_log(RESULTS / "modern_ladder.jsonl")
    wanted = [
        spec.key
        for part in ch11.PARTS
        for spec in ch11.specs(part, [*ch11.RUNGS, *ch11.SWIGLU_ROWS], [1000, 55000], [0, 1, 2])
    ]
    assert sorted(set(wanted)) == sorted(rows) == [r["key"] for r in record["runs"]]
    same_numbers(ch11.summarize(rows.values()), record["configurations"])
    with pytest.raises(ValueError, match="unknown part 'rungs'"):
        ch11.specs("rungs", [], [1000], [0])
