"""The one runner of the chapters' studies (vit_tutorial/experiments/runner.py): it skips what its
log holds, resumes, reads the logs written before it, runs prerequisites first, and lets a
worker's error through. The workers are spawned processes: the runs here are module-level
functions of this file, which a spawned process imports by name."""

import dataclasses
import json
import os
import time

import pytest
import torch

from vit_tutorial.experiments import runner
from vit_tutorial.experiments.runner import plan, read_log, run_study


@dataclasses.dataclass(frozen=True)
class Job:
    """A run: its name, what it waits on, and whether it fails."""

    name: str
    waits_on: tuple = ()
    fail: bool = False
    seconds: float = 0.0
    die: bool = False

    @property
    def key(self) -> str:
        return f"job-{self.name}"


def work(job: Job) -> dict:
    time.sleep(job.seconds)
    if job.die:
        os._exit(1)  # the worker process dies (killed for memory, say)
    if job.fail:
        raise ValueError(f"{job.name} failed on purpose")
    return {"name": job.name, "threads": torch.get_num_threads(), "pid": os.getpid()}


def after(job: Job) -> list[Job]:
    return [Job(name) for name in job.waits_on]


def lines(log):
    return [json.loads(line) for line in log.read_text().splitlines()]


# --- plan: what runs, in which order (no process) -------------------------------------------


def test_plan_skips_logged_runs_and_keeps_the_order_given():
    jobs = [Job("a"), Job("b"), Job("c")]
    assert plan(jobs, {}) == jobs
    assert plan(jobs, {"job-b": {"key": "job-b"}}) == [Job("a"), Job("c")]
    assert plan([*jobs, Job("a")], {}) == jobs  # a run named twice runs once


def test_plan_puts_prerequisites_first_and_adds_those_not_asked_for():
    student, other = Job("student", waits_on=("teacher",)), Job("other")
    assert plan([other, student], {}, after) == [Job("teacher"), other, student]
    logged = {"job-teacher": {"key": "job-teacher"}}
    assert plan([other, student], logged, after) == [other, student]


def test_plan_asks_stands_only_of_prerequisites_in_use_and_of_their_dependents():
    asked = []

    def stands(job, rows):
        asked.append(job.name)
        return job.name != "teacher"  # its weights are gone

    rows = {f"job-{n}": {} for n in ("teacher", "student", "lone")}
    # nothing to do: no run in use needs the teacher, the logged student still stands
    assert (
        plan([Job("teacher"), Job("student", ("teacher",)), Job("lone")], rows, after, stands) == []
    )
    assert sorted(asked) == ["student"]
    # a new student needs the teacher, which runs again, and so does the logged student
    jobs = [Job("student", ("teacher",)), Job("new", ("teacher",)), Job("lone")]
    assert plan(jobs, rows, after, stands) == [Job("teacher"), jobs[0], jobs[1]]  # as given


def test_plan_reruns_a_dependent_that_no_longer_stands():
    rows = {"job-encoder": {"sha256": "b"}, "job-tune": {"encoder_sha256": "a"}}

    def stands(job, rows):  # made from the encoder now logged?
        if job.name == "encoder":
            return True  # its weights are there
        return rows[job.key]["encoder_sha256"] == rows["job-encoder"]["sha256"]

    tune = Job("tune", ("encoder",))
    assert plan([Job("encoder"), tune], rows, after, stands) == [tune]
    rows["job-tune"]["encoder_sha256"] = "b"
    assert plan([Job("encoder"), tune], rows, after, stands) == []


def test_plan_refuses_runs_that_wait_on_each_other():
    def other(job):
        return [Job("b", ("a",))] if job.name == "a" else [Job("a", ("b",))]

    with pytest.raises(ValueError, match=r"wait on each other: \['job-a', 'job-b', 'job-a'\]"):
        plan([Job("a", ("b",))], {}, other)


# --- the log --------------------------------------------------------------------------------


def test_read_log_reads_every_schema_by_key_the_last_line_winning(tmp_path):
    log = tmp_path / "log.jsonl"
    assert read_log(log) == {}  # no log yet
    study = {"model": "vit", "train_size": 300, "seed": 0, "key": "vit-n300", "test_accuracy": 0.5}
    seeds = {"key": "pretrain-mae-s0", "mode": "pretrain", "sha256": "ab", "device": "cpu"}
    ladder = {"row": "baseline", "key": "baseline-n300", "code": {"git_commit": "c"}}
    again = {**study, "test_accuracy": 0.75}
    log.write_text("\n".join(json.dumps(r) for r in (study, seeds, ladder, again)) + "\n\n")
    assert read_log(log) == {"vit-n300": again, "pretrain-mae-s0": seeds, "baseline-n300": ladder}


def test_read_log_skips_an_unfinished_last_line_and_names_a_bad_one(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"key": "a", "v": 1}\n{"key": "b", "v"')  # killed while writing b
    with pytest.warns(UserWarning, match="log.jsonl:2: an unfinished last line"):
        assert read_log(log) == {"a": {"key": "a", "v": 1}}
    log.write_text('{"key": "a"}\n{"key": \n{"key": "c"}\n')
    with pytest.raises(ValueError, match="log.jsonl:2 is not a line of JSON"):
        read_log(log)
    log.write_text('{"key": "a"}\n{"name": "b"}\n')
    with pytest.raises(ValueError, match="log.jsonl:2 is not a run's row"):
        read_log(log)


def test_a_run_after_an_unfinished_line_starts_a_line_of_its_own(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"key": "job-a", "name": "a"}\n{"key": "job-b", "na')  # b was killed
    with pytest.warns(UserWarning, match="unfinished last line"):
        run_study([Job("a"), Job("b")], work, log)
    assert [row["key"] for row in lines(log)] == ["job-a", "job-b"]  # the fragment is gone


def test_plan_refuses_two_different_runs_of_one_key():
    with pytest.raises(ValueError, match="two different runs have the key 'job-a'"):
        plan([Job("a"), Job("a", fail=True)], {})


# --- run_study: spawned workers, one thread each --------------------------------------------


def test_run_study_logs_each_run_once_and_resumes(tmp_path, capsys):
    log = tmp_path / "sub" / "log.jsonl"
    older = {"key": "job-a", "name": "a", "value": "made before the runner"}  # no "code"
    log.parent.mkdir()
    log.write_text(json.dumps(older) + "\n")
    jobs = [Job("a"), Job("b"), Job("c")]
    rows = run_study(jobs, work, log, processes=2)
    written = lines(log)
    assert written[0] == older and rows["job-a"] == older  # kept as it was, not run again
    assert sorted(r["key"] for r in written[1:]) == ["job-b", "job-c"]
    code = runner.code_version()
    for row in written[1:]:
        assert row["threads"] == 1 and row["pid"] != os.getpid()  # a worker, one thread
        assert row["code"] == code and rows[row["key"]] == row
    out = capsys.readouterr().out
    assert "3 runs, 1 already in" in out and "job-b: done" in out
    again = run_study(jobs, work, log, processes=2)  # everything logged: nothing runs
    assert lines(log) == written and again == rows
    assert "3 runs, 3 already in" in capsys.readouterr().out


def test_run_study_runs_a_dependent_as_soon_as_its_prerequisite_is_done(tmp_path):
    jobs = [Job("a"), Job("student", ("teacher",)), Job("c")]
    rows = run_study(jobs, work, tmp_path / "log.jsonl", after=after)
    order = [row["key"] for row in lines(tmp_path / "log.jsonl")]
    assert order == ["job-teacher", "job-student", "job-a", "job-c"]
    assert set(rows) == set(order)


def test_a_failing_worker_stops_the_study_and_its_error_surfaces(tmp_path):
    log = tmp_path / "log.jsonl"
    with pytest.raises(ValueError, match="b failed on purpose"):
        run_study([Job("a"), Job("b", fail=True), Job("c")], work, log)
    assert [row["key"] for row in lines(log)] == ["job-a"]  # what finished before it is kept
    rows = run_study([Job("a"), Job("b"), Job("c")], work, log)  # fixed, it resumes
    assert [row["key"] for row in lines(log)] == ["job-a", "job-b", "job-c"] == sorted(rows)


def test_a_failure_lets_the_runs_in_flight_finish_and_logs_them(tmp_path):
    log = tmp_path / "log.jsonl"
    jobs = [Job("slow", seconds=1.0), Job("b", fail=True), Job("c")]
    with pytest.raises(ValueError, match="b failed on purpose"):
        run_study(jobs, work, log, processes=2)
    # the slow run, in flight when b failed, finished and was logged; c never started
    assert [row["key"] for row in lines(log)] == ["job-slow"]


def test_a_worker_process_that_dies_is_an_error_not_a_hang(tmp_path):
    from concurrent.futures.process import BrokenProcessPool

    with pytest.raises(BrokenProcessPool):
        run_study([Job("a", die=True)], work, tmp_path / "log.jsonl")


def test_run_study_refuses_a_row_of_another_run_and_bad_processes(tmp_path):
    with pytest.raises(TypeError, match="processes must be an integer"):
        run_study([Job("a")], work, tmp_path / "log.jsonl", processes=1.5)
    with pytest.raises(RuntimeError, match="the row of 'job-z' for run 'job-a'"):
        run_study([Job("a")], wrong_key, tmp_path / "log.jsonl")


def wrong_key(job: Job) -> dict:
    return {"key": "job-z"}


# --- summaries ------------------------------------------------------------------------------


def test_spread_and_the_accuracy_summary():
    assert runner.spread([0.5]) == {"mean": 0.5, "std": 0.0, "min": 0.5, "max": 0.5}
    assert runner.spread([1, 3], "wrong")["std_wrong"] == pytest.approx(2**0.5)
    runs = [{"accuracy": 0.5, "wrong": 4}, {"accuracy": 1.0, "wrong": 0}]
    assert runner.accuracy_summary(runs) == {
        "mean_accuracy": 0.75,
        "std_accuracy": pytest.approx(0.5**0.5 / 2),
        "min_accuracy": 0.5,
        "max_accuracy": 1.0,
        "mean_wrong": 2,
        "min_wrong": 0,
        "max_wrong": 4,
    }
    with pytest.raises(ValueError, match="at least one value"):
        runner.spread([])


def test_provenance_names_the_command_the_code_and_the_machine():
    record = runner.provenance(range(3))
    assert record["seeds"] == [0, 1, 2] and record["command"].startswith("python ")
    assert {"git_commit", "git_dirty"} <= set(record) and record["machine"]["cpu_count"] >= 1
    assert record["versions"]["torch"] == torch.__version__
