"""Tests for vit_tutorial/engine.py and its exercise checkers: groups, schedule, fit, resuming."""

import math
import re
import time

import pytest
import torch
import torch.nn.functional as F
from timm.optim import param_groups_weight_decay
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import vit_tutorial.engine as engine
import vit_tutorial.losses as losses
from vit_tutorial.checkpoint import read_checkpoint
from vit_tutorial.data import make_loader
from vit_tutorial.engine import (
    FitSettings,
    evaluate,
    fit,
    param_groups,
    predict,
    resolve_device,
    warmup_cosine,
)
from vit_tutorial.exercises import (
    check_lr_schedule,
    check_param_groups,
    check_smoothed_cross_entropy,
)
from vit_tutorial.exercises.ch06 import _lr_at
from vit_tutorial.losses import HardDistillation

from checker_messages import wrapped
from tiny_models import Crash, blobs, tiny_vit, wide_vit


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def loaders(batch_size=16, seed=0):
    return (
        make_loader(blobs(), batch_size, shuffle=True, seed=seed),
        make_loader(blobs(48, seed=1), 64, shuffle=False),
    )


ARGS = dict(
    epochs=4,
    lr=3e-3,
    weight_decay=0.05,
    warmup_epochs=1,
    label_smoothing=0.1,
    grad_clip=1.0,
    progress=False,
)


# --- optimiser groups and schedule --------------------------------------------------------


def test_param_groups_exempt_biases_norms_class_token_and_positions():
    model = tiny_vit()
    decay, no_decay = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    exempt = {names[id(p)] for p in no_decay["params"]}
    assert {"cls_token", "pos_embed.weight"} <= exempt
    assert all(
        n.endswith("bias") or "norm" in n or n in {"cls_token", "pos_embed.weight"} for n in exempt
    )
    assert all(names[id(p)].endswith("weight") and p.ndim >= 2 for p in decay["params"])
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.1, 0.0)
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_param_groups_match_timm():
    model = tiny_vit(pool="mean", pos_embed="relative")
    ours = param_groups(model, 0.05)
    theirs = param_groups_weight_decay(model, 0.05, no_weight_decay_list=model.no_weight_decay())
    as_ids = lambda groups: sorted(sorted(map(id, g["params"])) for g in groups)  # noqa: E731
    assert as_ids(ours) == as_ids(theirs)


def test_warmup_cosine_follows_the_formula():
    p = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([p], lr=2.0)
    scheduler = warmup_cosine(optimizer, warmup_steps=5, total_steps=20)
    got = []
    for _ in range(20):
        got.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    want = [
        2.0 * (t + 1) / 6 if t < 5 else 0.5 * 2.0 * (1 + math.cos(math.pi * (t - 5) / 15))
        for t in range(20)
    ]
    assert got == pytest.approx(want, abs=1e-9)
    assert max(got) == pytest.approx(2.0)


def test_warmup_cosine_without_warmup_and_bad_steps():
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    assert isinstance(warmup_cosine(optimizer, 0, 10), torch.optim.lr_scheduler.CosineAnnealingLR)
    with pytest.raises(ValueError, match="warmup_steps=10 and total_steps=10"):
        warmup_cosine(optimizer, 10, 10)


def test_resolve_device_and_amp_choices():
    assert resolve_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        assert resolve_device() == torch.device("cpu")
    cpu = torch.device("cpu")
    assert engine._amp_dtype("auto", cpu) is None  # nothing on the CPU
    assert engine._amp_dtype("bf16", cpu) is torch.bfloat16
    assert engine._amp_dtype(None, cpu) is None
    with pytest.raises(ValueError, match="amp='fp16' needs a CUDA device, got device cpu"):
        engine._amp_dtype("fp16", cpu)
    with pytest.raises(ValueError, match="amp must be .* got 'fp8'"):
        engine._amp_dtype("fp8", cpu)


@pytest.mark.parametrize("amp", [False, True, "none", "off", "fp32", 0])
def test_amp_accepts_only_auto_bf16_fp16_or_none(amp):
    with pytest.raises(
        ValueError, match=rf"amp must be 'auto', 'bf16', 'fp16' or None, got {amp!r}"
    ):
        evaluate(tiny_vit(), loaders()[1], "cpu", amp=amp)


# --- evaluate and fit ----------------------------------------------------------------------


def test_evaluate_matches_a_manual_computation():
    model = tiny_vit()
    data = blobs(40)
    loader = make_loader(data, 16, shuffle=False)
    model.eval()
    with torch.no_grad():
        logits = model(data.tensors[0])
    got = evaluate(model, loader)
    assert got["loss"] == pytest.approx(F.cross_entropy(logits, data.tensors[1]).item(), abs=1e-6)
    acc = (logits.argmax(-1) == data.tensors[1]).float().mean().item()
    assert got["accuracy"] == pytest.approx(acc)
    logits2, labels = predict(model, loader)
    torch.testing.assert_close(logits2, logits)
    assert torch.equal(labels, data.tensors[1])


def test_fit_learns_and_records_history():
    model = wide_vit()  # learns from every seed tried (tiny_vit stalls near 2/3 from some)
    train_loader, val_loader = loaders()
    history = fit(model, train_loader, val_loader, **{**ARGS, "epochs": 8})
    assert set(history) == {"epoch", "train_loss", "train_acc", "val_loss", "val_acc", "lr", "time"}
    assert all(len(v) == 8 for v in history.values())
    assert history["epoch"] == list(range(1, 9))
    assert history["train_loss"][-1] < history["train_loss"][0]
    assert history["val_acc"][-1] == evaluate(model, val_loader)["accuracy"]
    assert max(history["lr"]) <= ARGS["lr"] and history["lr"][-1] < 1e-4  # cosine to ~0
    assert model.training  # fit leaves the model in training mode, evaluate restores it
    # Chance is 1/3, with a loss of ln 3 = 1.10; from seeds 0 to 9 (with these settings, on the
    # CPU) every run ends at 1.0 with a loss under 0.06.
    assert history["val_acc"][-1] > 0.9 and history["val_loss"][-1] < 0.25, history


def test_fit_without_validation_records_nan():
    history = fit(tiny_vit(), loaders()[0], None, **{**ARGS, "epochs": 1})
    assert math.isnan(history["val_acc"][0]) and history["train_acc"][0] > 0


def test_fit_is_reproducible():
    def run():
        torch.manual_seed(1)
        model = tiny_vit(dropout=0.1)
        fit(model, loaders()[0], None, **ARGS)
        return model.state_dict()

    a, b = run(), run()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_eval_every_trains_the_same_weights_and_records_the_curve():
    def run(**scoring):
        torch.manual_seed(1)
        model = tiny_vit(dropout=0.1)  # dropout: scoring must not move the random stream
        train_loader, val_loader = loaders()
        val_loader = val_loader if scoring else None
        return model, fit(model, train_loader, val_loader, **ARGS, **scoring)

    plain_model, plain_history = run()
    model, history = run(eval_every=4)  # 6 steps an epoch: points inside epochs
    for (name, a), b in zip(plain_model.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), name
    curve = history["curve"]
    assert set(curve) == set(engine.CURVE_KEYS) and curve["step"] == [4, 8, 12, 16, 20, 24]
    assert curve["val_acc"][-1] == evaluate(model, loaders()[1])["accuracy"]
    # a point's training loss is the mean of the steps since the previous point: the first
    # three points' (steps 1 to 12, batches of one size) average to the first two epochs'
    by_points, by_epochs = sum(curve["train_loss"][:3]) / 3, sum(history["train_loss"][:2]) / 2
    assert math.isclose(by_points, by_epochs, rel_tol=1e-5)
    # an epoch's row has the scores of a point at its last step (steps 12 and 24), else NaN
    assert history["val_acc"][1] == curve["val_acc"][2]
    assert history["val_acc"][3] == curve["val_acc"][5]
    assert math.isnan(history["val_acc"][0]) and math.isnan(history["val_loss"][2])
    assert history["train_loss"] == plain_history["train_loss"]


def test_eval_every_keeps_the_scoring_out_of_the_training_seconds(monkeypatch):
    slow = engine.evaluate

    def sleepy(*args):
        time.sleep(0.25)
        return slow(*args)

    monkeypatch.setattr(engine, "evaluate", sleepy)
    history = fit(tiny_vit(), *loaders(), **{**ARGS, "epochs": 2}, eval_every=3)
    assert len(history["curve"]["step"]) == 4 and min(history["curve"]["eval_seconds"]) >= 0.25
    assert sum(history["time"]) < 0.25, history["time"]  # two epochs of six tiny steps


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0, ValueError, "eval_every must be at least 1, got 0"),
        (2.0, TypeError, "eval_every must be an integer"),
        (True, TypeError, "eval_every must be an integer"),
    ],
)
def test_eval_every_is_checked_before_training(value, error, message):
    with pytest.raises(error, match=message):
        fit(tiny_vit(), *loaders(), **ARGS, eval_every=value)


def test_eval_every_needs_a_val_loader():
    with pytest.raises(ValueError, match="eval_every scores val_loader .* pass a val_loader"):
        fit(tiny_vit(), loaders()[0], None, **ARGS, eval_every=2)


def test_a_resumed_run_continues_its_curve(tmp_path):
    args = {**ARGS, "epochs": 3, "eval_every": 4}  # 6 steps an epoch: a point spans two
    torch.manual_seed(3)
    straight = fit(tiny_vit(dropout=0.1), *loaders(), **args)["curve"]
    torch.manual_seed(3)
    model, path = tiny_vit(dropout=0.1), tmp_path / "run.pt"
    with pytest.raises(RuntimeError, match="simulated crash"):  # dies in epoch 2
        fit(model, Crash(loaders()[0], after=6 + 2), loaders()[1], **args, checkpoint_path=path)
    torch.manual_seed(999)
    resumed = fit(tiny_vit(dropout=0.1), *loaders(), **args, checkpoint_path=path)["curve"]
    assert resumed["step"] == straight["step"] == [4, 8, 12, 16, 18]
    for key in ("train_loss", "val_loss", "val_acc"):  # step 8's loss: steps 5 and 6 kept
        assert resumed[key] == pytest.approx(straight[key], rel=1e-6), key
    with pytest.raises(ValueError, match="trained with eval_every=4, not eval_every=5"):
        fit(tiny_vit(dropout=0.1), *loaders(), **{**args, "eval_every": 5}, checkpoint_path=path)


def test_fit_uses_no_decay_groups_and_clips(monkeypatch):
    calls = []
    clip = nn.utils.clip_grad_norm_
    monkeypatch.setattr(
        nn.utils,
        "clip_grad_norm_",
        lambda params, max_norm: calls.append(max_norm) or clip(params, max_norm),
    )
    fit(tiny_vit(), loaders()[0], None, **{**ARGS, "epochs": 1, "grad_clip": 0.5})
    assert calls == [0.5] * 6  # 96 samples / 16 per batch
    calls.clear()
    fit(tiny_vit(), loaders()[0], None, **{**ARGS, "epochs": 1, "grad_clip": None})
    assert calls == []


def test_fit_bf16_autocast_on_cpu_runs():
    history = fit(tiny_vit(), loaders()[0], None, **{**ARGS, "epochs": 1}, amp="bf16")
    assert math.isfinite(history["train_loss"][0])


@pytest.mark.parametrize(
    "name, value",
    [
        ("epochs", 0),
        ("epochs", -3),
        ("epochs", 2.5),
        ("epochs", True),
        ("lr", 0),
        ("lr", -1e-3),
        ("lr", math.nan),
        ("lr", math.inf),
        ("weight_decay", -0.1),
        ("weight_decay", math.nan),
        ("warmup_epochs", -1),
        ("warmup_epochs", -0.5),
        ("label_smoothing", 1.0),
        ("label_smoothing", -0.1),
        ("grad_clip", 0),
        ("grad_clip", -1),
        ("grad_clip", math.nan),
    ],
)
def test_fit_rejects_bad_hyperparameters_naming_them(name, value):
    with pytest.raises((ValueError, TypeError), match=rf"^{name} must be ") as error:
        fit(tiny_vit(), loaders()[0], None, **{**ARGS, name: value})
    message = str(error.value)
    assert repr(value) in message or repr(float(value)) in message, message


def test_fit_settings_are_checked_once_when_built_and_reused():
    settings = FitSettings(epochs=2, lr=1e-3, betas=[0.9, 0.95])
    assert settings.betas == (0.9, 0.95)
    with pytest.raises(ValueError, match=r"betas\[1\] must be in \[0, 1\), got 1.0"):
        FitSettings(epochs=2, lr=1e-3, betas=(0.9, 1.0))
    with pytest.raises(TypeError, match="pass settings or their fields, not both"):
        fit(tiny_vit(), loaders()[0], None, settings, lr=1e-2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'teacher'"):
        fit(tiny_vit(), loaders()[0], None, epochs=1, lr=1e-3, teacher=nn.Identity())


def test_fit_reports_warmup_in_epochs_not_steps():
    with pytest.raises(ValueError, match="warmup_epochs must be") as error:
        fit(tiny_vit(), loaders()[0], None, **{**ARGS, "warmup_epochs": -1})
    assert "steps" not in str(error.value)


def test_fit_rejects_an_empty_train_loader():
    empty = DataLoader(blobs(8), 16, drop_last=True)  # make_loader refuses to build it
    with pytest.raises(ValueError, match="train_loader yields no batches"):
        fit(tiny_vit(), empty, None, **ARGS)


def test_fit_rejects_an_empty_val_loader_before_training():
    empty = DataLoader(blobs(8), 16, drop_last=True)
    train = Crash(loaders()[0], after=0)  # training would raise "simulated crash"
    with pytest.raises(ValueError, match="val_loader yields no batches"):
        fit(tiny_vit(), train, empty, **ARGS)


@pytest.mark.parametrize("where", ["file/run.pt", "file/sub/run.pt", "folder"])
def test_fit_refuses_a_checkpoint_path_it_could_not_write_before_training(tmp_path, where):
    (tmp_path / "file").write_text("not a folder")
    (tmp_path / "folder").mkdir()
    train = Crash(loaders()[0], after=0)
    expected = "inside .*file', a file" if where.startswith("file") else "a folder"
    with pytest.raises(ValueError, match=f"checkpoint_path must name a file, got .*{expected}"):
        fit(tiny_vit(), train, None, **ARGS, checkpoint_path=tmp_path / where)
    fit(
        tiny_vit(),
        loaders()[0],
        None,
        **{**ARGS, "epochs": 1},
        checkpoint_path=tmp_path / "new/a.pt",
    )
    assert (tmp_path / "new/a.pt").is_file()  # a missing folder is made


def test_fit_progress_must_be_a_bool():
    with pytest.raises(TypeError, match="progress must be True or False, got 'yes'"):
        fit(tiny_vit(), loaders()[0], None, **{**ARGS, "progress": "yes"})


def test_fit_refuses_settings_of_another_kind_and_an_extra_it_could_not_save(tmp_path):
    model = tiny_vit()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(TypeError, match="settings must be a FitSettings, got dict"):
        fit(model, loaders()[0], None, {"epochs": 1, "lr": 1e-3})
    with pytest.raises(TypeError, match=r"extra\['when'\] is a object"):
        fit(model, loaders()[0], None, **ARGS, extra={"when": object()})
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # nothing trained


def test_evaluate_and_predict_refuse_an_empty_loader():
    nothing = TensorDataset(torch.zeros(0, 1, 4, 4), torch.zeros(0, dtype=torch.long))
    model = tiny_vit()
    for loader in (DataLoader(nothing, 16), DataLoader(blobs(8), 16, drop_last=True)):
        with pytest.raises(ValueError, match="loader yields no batches"):
            evaluate(model, loader)
        with pytest.raises(ValueError, match="loader yields no batches"):
            predict(model, loader)
        assert model.training  # the mode is restored even then


def test_progress_false_is_silent_and_true_prints_lines_when_not_a_terminal(capsys):
    fit(tiny_vit(), loaders()[0], None, **{**ARGS, "epochs": 2})
    assert capsys.readouterr().out == ""
    fit(tiny_vit(), loaders()[0], None, **{**ARGS, "epochs": 2, "progress": True})
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in out] == ["1/2", "2/2"]


# --- resuming from a checkpoint -------------------------------------------------------------


def test_resumed_run_ends_with_the_same_weights(tmp_path):
    args = {**ARGS, "epochs": 5}
    torch.manual_seed(3)
    straight = tiny_vit(dropout=0.1, drop_path=0.1)  # dropout: the RNG state matters too
    history = fit(straight, *loaders(), **args)

    torch.manual_seed(3)
    model = tiny_vit(dropout=0.1, drop_path=0.1)
    train_loader, val_loader = loaders()
    path = tmp_path / "run.pt"
    with pytest.raises(RuntimeError, match="simulated crash"):  # dies in epoch 3
        fit(model, Crash(train_loader, after=2 * 6 + 3), val_loader, **args, checkpoint_path=path)
    assert torch.load(path, weights_only=True)["epoch"] == 2
    torch.manual_seed(999)  # a new process: other RNG state, fresh model
    resumed = tiny_vit(dropout=0.1, drop_path=0.1)
    resumed_history = fit(resumed, *loaders(), **args, checkpoint_path=path)

    for (name, a), b in zip(
        straight.state_dict().items(), resumed.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
    for key in ("train_loss", "val_acc", "lr"):
        assert resumed_history[key] == history[key]
    assert fit(resumed, *loaders(), **args, checkpoint_path=path)["epoch"] == [1, 2, 3, 4, 5]


def test_resume_with_other_settings_is_refused(tmp_path):
    path = tmp_path / "run.pt"
    fit(tiny_vit(), loaders()[0], None, **{**ARGS, "epochs": 1}, checkpoint_path=path)
    with pytest.raises(ValueError, match="trained with epochs=1, lr=0.003, not epochs=2, lr=0.01"):
        fit(
            tiny_vit(),
            loaders()[0],
            None,
            **{**ARGS, "epochs": 2, "lr": 0.01},
            checkpoint_path=path,
        )
    with pytest.raises(ValueError, match="dim: checkpoint 16 vs model 8"):
        fit(tiny_vit(dim=8), loaders()[0], None, **{**ARGS, "epochs": 1}, checkpoint_path=path)


# --- exercise checkers --------------------------------------------------------------------


def test_check_lr_schedule_accepts_the_formula(capsys):
    check_lr_schedule(_lr_at)
    assert capsys.readouterr().out.startswith("Correct! check_lr_schedule")


@pytest.mark.parametrize(
    "wrong, message",
    [
        (lambda t, lr, w, T: lr * t / w if t < w else _lr_at(t, lr, w, T), "warm-up starts at 0"),
        (lambda t, lr, w, T: _lr_at(t, lr, 0, T), "there is no warm-up"),
        (
            lambda t, lr, w, T: (
                _lr_at(t, lr, w, T) if t < w else lr * (1 + math.cos(math.pi * t / T)) / 2
            ),
            r"phase is π\(t - w\)/\(S - w\)",
        ),
        (
            lambda t, lr, w, T: (
                _lr_at(t, lr, w, T) if t < w else lr * math.cos(math.pi * (t - w) / (T - w))
            ),
            "the cosine goes negative",
        ),
        (lambda t, lr, w, T: lr, r"step 0 of lr=0.001, warmup_steps=5, total_steps=50: got 0.001"),
    ],
)
def test_check_lr_schedule_explains_mistakes(wrong, message):
    with pytest.raises(AssertionError, match=wrapped(message)):
        check_lr_schedule(wrong)


def test_check_param_groups_accepts_the_package(capsys):
    check_param_groups(param_groups)
    assert capsys.readouterr().out.startswith("Correct! check_param_groups")


def _by_rule(rule, rate=0.05):
    def fn(model, weight_decay):
        params = list(model.named_parameters())
        return [
            {"params": [p for n, p in params if rule(n, p)], "weight_decay": rate},
            {"params": [p for n, p in params if not rule(n, p)], "weight_decay": 0.0},
        ]

    return fn


@pytest.mark.parametrize(
    "wrong, message",
    [
        (_by_rule(lambda n, p: True), "biases and norm weights are decayed"),
        (_by_rule(lambda n, p: p.ndim >= 2), r"\['cls_token', 'pos_embed.weight'\] are decayed"),
        (_by_rule(lambda n, p: p.ndim > 2), "weight matrices escape decay"),
        (
            _by_rule(lambda n, p: p.ndim >= 2, rate=0.1),
            r"must use the weight_decay argument \(0.05\)",
        ),
        (
            lambda model, wd: [{"params": list(model.parameters())[1:], "weight_decay": wd}],
            r"missing from every group: \['cls_token'\]",
        ),
        (
            lambda model, wd: [
                {"params": list(model.parameters()), "weight_decay": wd},
                {"params": list(model.parameters())[:1], "weight_decay": 0.0},
            ],
            "in two groups",
        ),
        (lambda model, wd: list(model.parameters()), "list of dicts"),
        (lambda model, wd: [{"params": list(model.parameters())}], r"default \(0.01 for AdamW\)"),
    ],
)
def test_check_param_groups_explains_mistakes(wrong, message):
    with pytest.raises(AssertionError, match=wrapped(message)):
        check_param_groups(wrong)


# --- soft labels and DeiT's hard distillation ---------------------------------------------


def test_fit_takes_soft_labels_and_one_hot_labels_train_as_class_indices():
    x, y = blobs().tensors
    soft = TensorDataset(x, F.one_hot(y, 3).float())  # what Mixup gives with lambda = 1

    def run(dataset):
        torch.manual_seed(1)
        model = tiny_vit()
        history = fit(model, make_loader(dataset, 16, shuffle=True), None, **ARGS)
        return model.state_dict(), history["train_acc"]

    (a, acc_a), (b, acc_b) = run(blobs()), run(soft)
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert acc_a == acc_b  # accuracy is scored against the argmax of the soft labels


class TwoHeads(nn.Module):
    """A stand-in for a distilled ViT: two heads in training, their mean in eval."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(16, 32), nn.GELU())
        self.head, self.head_dist = nn.Linear(32, 3), nn.Linear(32, 3)

    def forward(self, x):
        h = self.body(x)
        if self.training:
            return self.head(h), self.head_dist(h)
        return (self.head(h) + self.head_dist(h)) / 2


class Constant(nn.Module):
    """A teacher that always predicts ``label``."""

    def __init__(self, label):
        super().__init__()
        self.label = label

    def forward(self, x):
        return F.one_hot(torch.full((len(x),), self.label), 3).float()


def one_step_fit(model, images, labels, loss=None):
    """fit one batch; the model's weights are compared before and after by the caller."""
    loader = DataLoader(TensorDataset(images, labels), batch_size=len(images))
    return fit(model, loader, None, epochs=1, lr=1e-2, progress=False, loss=loss)


@pytest.mark.parametrize(
    "labels, message",
    [
        (torch.tensor([0, 1, 3, 2]), r"label 3 is not among the 3 classes \(0 to 2\)"),
        (torch.tensor([0, -1, 2, 2]), r"label -1 is not among the 3 classes"),
        (torch.tensor([[0.5, 0.5, 0.0, 0.0]]).repeat(4, 1), r"\(B, 3\) for 3 classes.*\(4, 4\)"),
        (
            torch.tensor([[1.5, -0.5, 0.0]]).repeat(4, 1),
            r"finite and >= 0, got \(4, 3\) with minimum -0.5",
        ),
        (torch.tensor([[math.nan, 1.0, 0.0]]).repeat(4, 1), "with minimum nan"),
        (torch.zeros(4), r"soft labels must be \(B, 3\).*got \(4,\)"),
    ],
)
def test_fit_refuses_labels_the_model_cannot_have_before_the_optimiser_steps(labels, message):
    images = torch.randn(4, 1, 4, 4)
    for model, loss in [(tiny_vit(), None), (TwoHeads(), HardDistillation(Constant(0)))]:
        before = {k: v.clone() for k, v in model.state_dict().items()}
        with pytest.raises(ValueError, match=message):
            one_step_fit(model, images, labels, loss)
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_evaluate_refuses_a_label_beyond_the_classes():
    loader = DataLoader(TensorDataset(torch.randn(4, 1, 4, 4), torch.tensor([0, 1, 2, 7])), 4)
    with pytest.raises(ValueError, match="label 7 is not among the 3 classes"):
        evaluate(tiny_vit(), loader, "cpu")


def test_a_loss_without_logits_refuses_a_val_loader_at_the_first_batch():
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    before = [p.clone() for p in model.parameters()]
    with pytest.raises(ValueError, match="no logits for val_loader to score"):
        fit(model, *loaders(), **ARGS, loss=lambda out, x, y: (out.pow(2).mean(), None))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_distillation_loss_is_the_mean_of_the_two_heads_cross_entropies():
    loss_fn = HardDistillation(Constant(2), label_smoothing=0.1)
    x, y = torch.randn(5, 1, 4, 4), torch.tensor([0, 1, 2, 0, 1])
    cls, dist = torch.randn(5, 3), torch.randn(5, 3)
    loss, logits = loss_fn((cls, dist), x, y)
    expected = (
        F.cross_entropy(cls, y, label_smoothing=0.1)
        + F.cross_entropy(dist, torch.full((5,), 2))  # the teacher's classes, unsmoothed
    ) / 2
    assert torch.allclose(loss, expected) and torch.allclose(logits, (cls + dist) / 2)


def test_fit_distils_the_teachers_classes_into_the_distillation_head():
    torch.manual_seed(0)
    model = TwoHeads()
    args = {**ARGS, "epochs": 6, "lr": 1e-2}
    fit(model, loaders()[0], None, **args, loss=HardDistillation(Constant(2), 0.1))
    model.train()
    with torch.no_grad():
        cls, dist = model(blobs(48, seed=1).tensors[0])
    assert (dist.argmax(-1) == 2).all()  # learnt the teacher, which always says 2
    assert (cls.argmax(-1) == blobs(48, seed=1).tensors[1]).float().mean() > 0.9


def test_distillation_mistakes_are_named():
    with pytest.raises(ValueError, match=r"loss=HardDistillation\(teacher\)"):
        fit(TwoHeads(), loaders()[0], None, **{**ARGS, "epochs": 1})
    with pytest.raises(ValueError, match="HardDistillation needs a model with a distillation"):
        loss = HardDistillation(Constant(0))
        fit(tiny_vit(), loaders()[0], None, **{**ARGS, "epochs": 1}, loss=loss)
    with pytest.raises(TypeError, match="teacher must be an nn.Module, got function"):
        HardDistillation(lambda x: x)


def test_a_loss_without_logits_reports_no_accuracy_and_its_own_loss():
    """MAE's case: fit trains on whatever the loss returns; train_acc is NaN."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    calls = []

    def mean_square(outputs, images, targets):
        calls.append(len(targets))
        return outputs.pow(2).mean(), None

    history = fit(model, loaders()[0], None, **{**ARGS, "epochs": 2}, loss=mean_square)
    assert sum(calls) == 2 * 96 and all(math.isnan(a) for a in history["train_acc"])
    assert history["train_loss"][-1] < history["train_loss"][0]


def test_extra_is_saved_in_every_checkpoint_beside_the_settings(tmp_path):
    path = tmp_path / "run.pt"
    extra = {"mean": (0.5,), "classes": ["a", "b", "c"]}
    fit(tiny_vit(), loaders()[0], None, **{**ARGS, "epochs": 1}, checkpoint_path=path, extra=extra)
    saved = read_checkpoint(path)["extra"]
    assert saved["mean"] == (0.5,) and saved["classes"] == ["a", "b", "c"]
    assert saved["settings"]["lr"] == ARGS["lr"] and saved["settings"]["steps"] == 6


def smoothed(logits, targets, eps, others=None, true_share=True, log=True, dim=-1):
    """-Σ q log p averaged over the batch, and the usual ways to get it wrong."""
    K = logits.shape[-1]
    q = torch.full_like(logits, eps / (others or K))
    q[torch.arange(len(targets)), targets] = 1 - eps + (eps / K if true_share else 0)
    p = logits.log_softmax(dim) if log else logits.softmax(dim)
    return -(q * p).sum(-1).mean()


def test_check_smoothed_cross_entropy_accepts_the_formula(capsys):
    check_smoothed_cross_entropy(smoothed)
    assert capsys.readouterr().out.startswith("Correct! check_smoothed_cross_entropy")


def test_check_smoothed_cross_entropy_accepts_a_loss_of_shape_1():
    check_smoothed_cross_entropy(lambda logits, y, eps: smoothed(logits, y, eps).reshape(1))


def test_the_formula_is_torchs_label_smoothing():
    logits, targets = torch.randn(8, 5), torch.randint(5, (8,))
    for eps in (0.0, 0.1, 0.5):
        want = F.cross_entropy(logits, targets, label_smoothing=eps)
        assert torch.allclose(smoothed(logits, targets, eps), want, atol=1e-6)


@pytest.mark.parametrize(
    "wrong, message",
    [
        (lambda x, y, e: smoothed(x, y, e, others=x.shape[-1] - 1, true_share=False), "K - 1"),
        (lambda x, y, e: smoothed(x, y, e, true_share=False), "not 1 - ε"),
        (lambda x, y, e: smoothed(x, y, e, log=False), "used the probabilities p"),
        (lambda x, y, e: F.cross_entropy(x, y), "smoothing is missing"),
        (lambda x, y, e: smoothed(x, y, e, dim=0), r"over the batch \(dim=0\)"),
        (lambda x, y, e: smoothed(x, y, e) * len(y), "summed the losses of the batch"),
        (lambda x, y, e: smoothed(x, y, e) / x.shape[-1], "averaged over the K classes"),
        (lambda x, y, e: -smoothed(x, y, e), "the sign is wrong"),
        (
            lambda x, y, e: F.cross_entropy(x, y, label_smoothing=e, reduction="none"),
            r"one loss per image, shape \(6,\)",
        ),
        (lambda x, y, e: smoothed(x, y, e).item(), "return a tensor, got float"),
        (lambda x, y, e: torch.zeros(2), r"one number, got shape \(2,\)"),
        (lambda x, y, e: smoothed(x, y, e) + 0.01, "want 6.3432; compare with the formula"),
    ],
)
def test_check_smoothed_cross_entropy_explains_mistakes(wrong, message):
    with pytest.raises(AssertionError, match=wrapped(message)):
        check_smoothed_cross_entropy(wrong)


class _Compiled(nn.Module):
    """What ``torch.compile`` returns, without compiling: a wrapper whose keys gain a
    prefix (``_orig_mod.``), as an OptimizedModule's do."""

    def __init__(self, module):
        super().__init__()
        self._orig_mod = module

    def forward(self, x):
        return self._orig_mod(x)


def test_fit_compile_trains_through_the_wrapper_and_saves_plain_checkpoints(monkeypatch, tmp_path):
    wrapped_models = []

    def fake_compile(module):
        wrapped_models.append(module)
        return _Compiled(module)

    monkeypatch.setattr(torch, "compile", fake_compile)
    torch.manual_seed(0)
    plain = tiny_vit()
    fit(plain, *loaders(), **{**ARGS, "epochs": 2})
    torch.manual_seed(0)
    model, path = tiny_vit(), tmp_path / "run.pt"
    fit(model, *loaders(), **{**ARGS, "epochs": 2}, compile=True, checkpoint_path=path)
    assert wrapped_models == [model]
    # the same training as without compile (the stand-in computes the same function)
    for (name, a), b in zip(plain.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), name
    saved = torch.load(path, weights_only=True)["model"]
    assert saved.keys() == plain.state_dict().keys()  # no "_orig_mod." prefix


@pytest.mark.parametrize("value", [1, "yes", None])
def test_fit_compile_must_be_a_bool(value):
    with pytest.raises(TypeError, match=f"compile must be True or False, got {value!r}"):
        fit(tiny_vit(), *loaders(), **ARGS, compile=value)


# --- the weight-decay rule of every family, against its reference ---------------------------


def _undecayed(model, groups):
    """The names of the parameters ``groups`` leave undecayed."""
    names = {id(p): n for n, p in model.named_parameters()}
    exempt = {names[id(p)] for g in groups if g["weight_decay"] == 0 for p in g["params"]}
    covered = {names[id(p)] for g in groups for p in g["params"]}
    assert covered == set(names.values())  # every trainable parameter is in a group
    return exempt


def _timm_undecayed(model):
    groups = param_groups_weight_decay(model, 0.05, no_weight_decay_list=model.no_weight_decay())
    return _undecayed(model, groups)


@pytest.mark.parametrize(
    "fields",
    [dict(), dict(pool="mean"), dict(pool="cls", distilled=True)],
    ids=["cls", "mean", "distilled"],
)
def test_vit_decays_what_timm_decays_through_the_key_map(fields):
    from vit_tutorial.interop import TIMM_KEYS, _convert, _inverse

    ours = tiny_vit(**fields)
    options = dict(img_size=4, patch_size=2, in_chans=1, num_classes=3, embed_dim=16, depth=1)
    pool = "avg" if fields.get("pool") == "mean" else "token"
    options |= dict(num_heads=2, mlp_ratio=2.0, global_pool=pool, class_token=pool == "token")
    if fields.get("distilled"):
        from timm.models.deit import VisionTransformerDistilled as TimmViT
    else:
        from timm.models.vision_transformer import VisionTransformer as TimmViT
    timm_model = TimmViT(**options)
    theirs = _convert({n: n for n, _ in ours.named_parameters()}, _inverse(TIMM_KEYS), "", "")
    assert set(theirs) == {n for n, _ in timm_model.named_parameters()}  # same parameters
    rename = {ours_name: timm_name for timm_name, ours_name in theirs.items()}
    timm_exempt = _timm_undecayed(timm_model)
    assert {rename[n] for n in _undecayed(ours, param_groups(ours, 0.05))} == timm_exempt
    assert "pos_embed" in timm_exempt and ("cls_token" in timm_exempt) == (pool == "token")


def test_relative_bias_vit_decays_what_timm_beit_decays():
    """BEiT's tables (``relative_position_bias_table``, one per block) are exempt, as ours
    (``pos_embed.{i}.table``); BEiT's q and v biases are two vectors where ours is one."""
    from timm.models.beit import Beit

    ours = tiny_vit(pos_embed="relative", depth=2)
    beit = Beit(
        img_size=4, patch_size=2, in_chans=1, num_classes=3, embed_dim=16, depth=2, num_heads=2,
        mlp_ratio=2.0, global_pool="token", use_abs_pos_emb=False, use_rel_pos_bias=True,
    )  # fmt: skip

    def beit_names(name):
        name = name.replace("encoder.blocks.", "blocks.")
        if m := re.fullmatch(r"pos_embed\.(\d+)\.table", name):
            return [f"blocks.{m[1]}.attn.relative_position_bias_table"]
        if name.endswith("attn.qkv.bias"):  # BEiT: q and v biases, none for k
            return [name.replace("qkv.bias", "q_bias"), name.replace("qkv.bias", "v_bias")]
        return [name]

    mapped = {n: beit_names(n) for n, _ in ours.named_parameters()}
    assert {b for names in mapped.values() for b in names} == {
        n for n, _ in beit.named_parameters()
    }
    ours_exempt = _undecayed(ours, param_groups(ours, 0.05))
    beit_exempt = _timm_undecayed(beit)
    for name, theirs in mapped.items():
        assert all((t in beit_exempt) == (name in ours_exempt) for t in theirs), name
    assert "pos_embed.0.table" in ours_exempt


def test_swin_decays_what_timm_decays_its_tables_exempt():
    from timm.models.swin_transformer import SwinTransformer as TimmSwin

    from vit_tutorial.swin import SwinTransformer
    from vit_tutorial.swin_interop import timm_key

    config = dict(patch_size=2, embed_dim=16, depths=(2, 2), num_heads=(1, 2), window_size=4)
    timm_model = TimmSwin(img_size=16, in_chans=1, num_classes=3, **config)
    ours = SwinTransformer(
        image_size=16, patch_size=2, in_channels=1, num_classes=3, dim=16, depths=(2, 2),
        num_heads=(1, 2), window_size=4,
    )  # fmt: skip
    rename = {n: timm_key(n) for n, _ in ours.named_parameters()}
    assert set(rename.values()) == {n for n, _ in timm_model.named_parameters()}
    ours_exempt = {rename[n] for n in _undecayed(ours, param_groups(ours, 0.05))}
    assert ours_exempt == _timm_undecayed(timm_model)
    tables = {n for n in ours_exempt if n.endswith("relative_position_bias_table")}
    assert len(tables) == 4  # one per block: the fault this test was written for


def test_swin_tables_start_as_timm_and_torchvision_draw_them():
    """trunc_normal_(std=0.02) with bounds ±2: nothing is cut (std 0.02, not about 0.0176)."""
    from vit_tutorial.windows import WindowAttention

    torch.manual_seed(0)
    table = WindowAttention(dim=8, window_size=64, num_heads=4).relative_position_bias.table
    assert table.numel() == 127**2 * 4
    assert 0.0197 < table.std().item() < 0.0203
    assert table.abs().max().item() > 0.05  # beyond the ±0.04 cut of chapter 3's tables


def test_mae_decays_as_the_official_pretraining_code():
    """MAE's ``main_pretrain.py``: ``add_weight_decay`` with no skip list, so only 1-D parameters
    and biases are exempt; its mask token, of three dimensions, is decayed."""
    from vit_tutorial.mae import MaskedAutoencoder

    mae = MaskedAutoencoder(image_size=8, patch_size=4, in_channels=1, dim=8, depth=1,
                            num_heads=2, decoder_dim=8, decoder_depth=1, decoder_heads=2)  # fmt: skip
    official = {n for n, p in mae.named_parameters() if p.ndim == 1 or n.endswith(".bias")}
    assert _undecayed(mae, param_groups(mae, 0.05)) == official
    assert "mask_token" not in official


def test_axial_vit_rule_is_the_vits_its_position_table_exempt():
    """No reference has an axial ViT: its rule is the ViT's (1-D parameters, biases and the
    position table; it has no class token)."""
    from vit_tutorial.axial import AxialViT

    model = AxialViT(image_size=8, patch_size=4, in_channels=1, num_classes=3, dim=8, depth=1,
                     num_heads=2)  # fmt: skip
    expected = {n for n, p in model.named_parameters() if p.ndim < 2 or n.startswith("pos_embed.")}
    assert _undecayed(model, param_groups(model, 0.05)) == expected
    assert any(n.startswith("pos_embed.") for n in expected)


def test_the_loss_and_the_optimiser_pieces_refuse_bad_numbers():
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\], got 1.5"):
        losses.cross_entropy(torch.randn(2, 3), torch.tensor([0, 1]), label_smoothing=1.5)
    with pytest.raises(TypeError, match="warmup_steps must be an integer, got 2.0"):
        warmup_cosine(optimizer, 2.0, 10)
    with pytest.raises(ValueError, match="weight_decay must be in"):
        param_groups(nn.Linear(2, 2), -1.0)
    for device, message in [("hpu", "is not on this machine"), ("meta", "holds no data")]:
        with pytest.raises(ValueError, match=message):
            resolve_device(device)
