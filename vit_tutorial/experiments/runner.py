"""The one runner of the chapters' studies, and what every result file shares.

A study is a list of runs, each an object with a ``key``, a name unique to the run (chapter 8's
:class:`~vit_tutorial.experiments.ch08.RunSpec`, chapter 11's
:class:`~vit_tutorial.experiments.ch11.LadderSpec`...), and a worker, ``work(run) -> row``, that
trains it and returns its results. :func:`run_study` runs those that its log lacks,
``processes`` at a time, each in a spawned worker process with one torch thread (the processes
share the CPU), and appends each row to the log as it finishes, as DeiT's ``main.py`` appends
each epoch's line to its ``log.txt``: an interrupted study resumes where it stopped, and several
invocations (one seed each, say) may share a log.

**The log**, JSON lines: one object per finished run, ``key``, the worker's row and ``code``
(:func:`code_version`: the commit that ran it, and whether the code differed from it). Logs
written before this runner (chapter 8's study and chapter 9's seeds: no ``code``; chapter 11's
ladder: with it) are read as they are: :func:`read_log` reads a log by ``key`` alone, the last
line of a key winning.

**Prerequisites.** A run may need others finished first, ``after(run)``: a distilled student its
teacher, a fine-tuning its encoder. One that the log lacks runs first; a dependent starts as soon
as its prerequisites have finished, ahead of the runs that wait on nothing. ``stands(run, rows)``
says whether a logged run still stands, and is asked of the logged prerequisites of the runs to
do (are the teacher's weights on disk?) and of the logged runs that have prerequisites (was this
fine-tuning made from the encoder now logged?): one that does not runs again, and so does every
run of the study that depends on a run that runs again.

Result files carry a :func:`provenance` block and are written atomically (:func:`write_json`);
:func:`spread` and :func:`accuracy_summary` summarise runs over their seeds.

Example:
    >>> spread([0.5, 0.75, 1.0], "accuracy")
    {'mean_accuracy': 0.75, 'std_accuracy': 0.25, 'min_accuracy': 0.5, 'max_accuracy': 1.0}
"""

from __future__ import annotations

import datetime
import json
import multiprocessing
import os
import platform
import shlex
import statistics
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, Protocol

import torch

from vit_tutorial.files import write_atomically
from vit_tutorial.validate import check_int

__all__ = [
    "Run",
    "accuracy_summary",
    "code_version",
    "describe",
    "plan",
    "provenance",
    "read_log",
    "run_study",
    "spread",
    "write_json",
]

#: The repository: provenance asks git about it (a copy without ``.git`` names no commit).
ROOT = Path(__file__).resolve().parents[2]


class Run(Protocol):
    """What :func:`run_study` needs of a run: a ``key`` unique to it (and to be picklable)."""

    @property
    def key(self) -> str: ...


def read_log(path: str | Path) -> dict[str, dict]:
    """Every run of the JSON-lines log at ``path`` by its ``key`` (the last line of a key wins);
    empty when there is no log. Blank lines are skipped, and so is an unfinished last line (a
    run killed while its line was written: it runs again), with a warning; ValueError naming
    the line for any other line that is not a JSON object with a ``key``."""
    path = Path(path)
    if not path.exists():
        return {}
    text = path.read_text()
    lines = text.splitlines()
    rows = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines) and not text.endswith("\n"):
                warnings.warn(f"{path}:{number}: an unfinished last line, skipped", stacklevel=2)
                continue
            raise ValueError(f"{path}:{number} is not a line of JSON ({error})") from None
        if not isinstance(row, dict) or "key" not in row:
            raise ValueError(f"{path}:{number} is not a run's row (a JSON object with a 'key')")
        rows[row["key"]] = row
    return rows


def plan(
    runs: Iterable[Run],
    rows: dict[str, dict],
    after: Callable[[Run], Sequence[Run]] | None = None,
    stands: Callable[[Run, dict[str, dict]], bool] | None = None,
) -> list[Run]:
    """The runs to do, given the logged ``rows``: those of ``runs`` that are not logged, the
    prerequisites they need that are not logged, the logged ones of either that ``stands``
    rejects (it is asked only of runs that are or have prerequisites), and the runs of
    ``runs`` whose prerequisites run again. Prerequisites come first, then the rest in the
    order given (see the module's docstring); ``ValueError`` for runs that wait on each other
    and for two different runs of one key (the same run named twice runs once)."""
    after, stands = after or _nothing, stands or _always
    wanted = {}
    for run in runs:
        if wanted.setdefault(run.key, run) != run:  # the same run named twice runs once
            raise ValueError(
                f"two different runs have the key {run.key!r}: {wanted[run.key]}, {run}"
            )
    todo: dict[str, Run] = {}

    def logged(run: Run, needed: bool) -> bool:
        if run.key not in rows:
            return False
        return stands(run, rows) if needed or after(run) else True

    def add(run: Run, chain: tuple[str, ...] = ()) -> None:
        if run.key in chain:
            raise ValueError(f"runs that wait on each other: {[*chain, run.key]}")
        for first in after(run):
            if first.key not in todo and not logged(first, needed=True):
                add(first, (*chain, run.key))
        todo.setdefault(run.key, run)

    for run in wanted.values():
        if not logged(run, needed=False):
            add(run)
    again = True
    while again:  # a run whose prerequisite runs again runs again
        late = [r for r in wanted.values() if r.key not in todo and _waits(r, todo, after)]
        for run in late:
            add(run)
        again = bool(late)
    first, order = {f.key for r in todo.values() for f in after(r)}, list(wanted)
    position = {key: i for i, key in enumerate(order)}
    return sorted(todo.values(), key=lambda run: (run.key not in first, position.get(run.key, -1)))


def _nothing(run: Run) -> Sequence[Run]:
    return ()


def _always(run: Run, rows: dict[str, dict]) -> bool:
    return True


def _waits(run: Run, pending: Iterable[str], after: Callable[[Run], Sequence[Run]]) -> bool:
    """Whether a prerequisite of ``run`` is among the ``pending`` keys."""
    return any(first.key in pending for first in after(run))


def describe(row: dict) -> str:
    """The line :func:`run_study` prints of a finished run: its test accuracy (``test_accuracy``
    or ``accuracy``) and its training seconds, when the row holds them."""
    parts, accuracy = [], row.get("test_accuracy", row.get("accuracy"))
    if accuracy is not None:
        parts.append(f"test {100 * accuracy:.2f}%")
    if "train_seconds" in row:
        parts.append(f"({row['train_seconds']:.0f} s)")
    return " ".join(parts) or "done"


def _one_thread() -> None:
    torch.set_num_threads(1)  # the worker processes share the CPU


def run_study(
    runs: Iterable[Run],
    work: Callable[[Run], dict],
    log: str | Path,
    *,
    processes: int = 1,
    after: Callable[[Run], Sequence[Run]] | None = None,
    stands: Callable[[Run, dict[str, dict]], bool] | None = None,
    report: Callable[[dict], str] = describe,
) -> dict[str, dict]:
    """Run the ``runs`` that ``log`` lacks (:func:`plan`), ``processes`` at a time, each in a
    spawned worker process with one torch thread; every run of ``log`` by key, after.
    ``work(run)`` trains one run and returns its row (a dict of JSON values); it must be
    picklable (a module's function, or a :func:`functools.partial` of one). Each finished row
    gets the run's ``key`` and ``code`` (:func:`code_version`) and is appended to ``log`` as it
    comes, then printed (``key: report(row)``). A worker's error stops new runs; those in
    flight finish and are logged, then the error is raised here. A worker process that dies
    (killed for memory, say) breaks the pool: the runs in flight fail unlogged, and
    ``BrokenProcessPool`` is raised."""
    processes, after = check_int("processes", processes), after or _nothing
    runs, log = list(runs), Path(log)
    rows = read_log(log)
    todo = plan(runs, rows, after, stands)
    done = len({run.key for run in runs} - {run.key for run in todo})
    print(f"{len(runs)} runs, {done} already in {log}", flush=True)
    if not todo:
        return rows
    code, pending, errors = code_version(), {run.key for run in todo}, []
    log.parent.mkdir(parents=True, exist_ok=True)
    _drop_unfinished_line(log)
    context, workers = multiprocessing.get_context("spawn"), min(processes, len(todo))
    with (
        log.open("a") as out,
        ProcessPoolExecutor(workers, mp_context=context, initializer=_one_thread) as pool,
    ):
        in_flight: dict[Future, Run] = {}
        while (todo and not errors) or in_flight:
            while (
                not errors and len(in_flight) < processes and (run := _next(todo, pending, after))
            ):
                todo.remove(run)
                in_flight[pool.submit(work, run)] = run
            if not in_flight:
                raise RuntimeError(f"runs whose prerequisites never ran: {[r.key for r in todo]}")
            finished, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in finished:
                run = in_flight.pop(future)
                if row := _log_row(run, future, code, out, errors):
                    rows[run.key] = row
                    pending.discard(run.key)
                    print(f"{run.key}: {report(row)}", flush=True)
    if errors:
        raise errors[0]
    return rows


def _log_row(run: Run, future: Future, code: dict, out: Any, errors: list) -> dict | None:
    """The finished ``run``'s row, appended to the log ``out``; ``None``, its error appended to
    ``errors``, when the worker (or the row) failed."""
    try:
        row = _row(run, future.result(), code)
        line = json.dumps(row)
    except Exception as error:  # the worker's, a dead worker's, or a row's
        errors.append(error)
        print(f"{run.key}: failed ({type(error).__name__}: {error})", flush=True)
        return None
    out.write(line + "\n")  # one write: processes may share the log
    out.flush()
    return row


def _drop_unfinished_line(log: Path) -> None:
    """Cut an unfinished last line off ``log`` (a run killed while writing it, which
    :func:`read_log` skipped and which runs again), so that the next row starts a line."""
    if log.exists() and log.stat().st_size:
        text = log.read_bytes()
        if not text.endswith(b"\n"):
            with log.open("rb+") as file:
                file.truncate(text.rfind(b"\n") + 1)


def _next(todo: list[Run], pending: set[str], after: Callable) -> Run | None:
    """The next run to start: the first whose prerequisites have all finished, one that waited
    on some first."""
    ready = [run for run in todo if not _waits(run, pending, after)]
    return next((run for run in ready if after(run)), None) or next(iter(ready), None)


def _row(run: Run, row: dict, code: dict) -> dict:
    if row.setdefault("key", run.key) != run.key:
        raise RuntimeError(f"the worker returned the row of {row['key']!r} for run {run.key!r}")
    row["code"] = code
    return row


def _git(*command: str) -> str | None:
    try:
        run = subprocess.run(
            ["git", *command], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return run.stdout.strip()


def code_version() -> dict[str, Any]:
    """``git_commit``, the commit of the repository (``$GIT_COMMIT`` in a copy without
    ``.git``), and ``git_dirty``, whether the code that runs (the package, the benchmark
    scripts) differs from it; result files and the book are not code. ``None`` when unknown."""
    status = _git(
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        "vit_tutorial",
        "benchmarks",
        ":(exclude)benchmarks/results",
    )
    return {
        "git_commit": _git("rev-parse", "HEAD") or os.environ.get("GIT_COMMIT"),
        "git_dirty": None if status is None else bool(status),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def provenance(seeds: Iterable[int]) -> dict[str, Any]:
    """How a result was made: ``command``, :func:`code_version`, ``date``, ``seeds``,
    ``versions`` (Python, torch, NumPy, scikit-learn, this package) and ``machine``."""
    import numpy
    import sklearn

    import vit_tutorial

    return {
        "command": shlex.join(["python", *sys.argv]),
        **code_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "seeds": list(seeds),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": numpy.__version__,
            "sklearn": sklearn.__version__,
            "vit_tutorial": getattr(vit_tutorial, "__version__", None),
        },
        "machine": {
            "platform": platform.platform(),
            "cpu": _cpu_model(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "load_average_1min_at_start": round(os.getloadavg()[0], 2),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        },
    }


def write_json(path: str | Path, data: dict) -> None:
    """Write ``data`` to ``path`` as indented JSON, atomically
    (:func:`~vit_tutorial.files.write_atomically`)."""
    write_atomically(path, json.dumps(data, indent=1) + "\n")


def spread(values: Iterable[float], name: str | None = None) -> dict[str, float]:
    """``mean``, ``std`` (the sample standard deviation over seeds; 0 for one value), ``min``
    and ``max`` of ``values``, each key ending in ``_name`` when ``name`` is given. The mean of
    integers (counts of wrong images) is exact, an int when it is a whole number."""
    values = list(values)
    if not values:
        raise ValueError("spread needs at least one value")
    exact = all(isinstance(v, int) for v in values)
    stats = {
        "mean": statistics.mean(values) if exact else statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }
    return {f"{k}_{name}" if name else k: v for k, v in stats.items()}


def accuracy_summary(runs: Sequence[dict]) -> dict[str, float]:
    """Mean and per-seed spread (:func:`spread`) of runs that each hold ``accuracy`` and
    ``wrong`` (chapter 6's result files, the targets'): ``mean_accuracy``, ``std_accuracy``,
    ``min_accuracy``, ``max_accuracy``, ``mean_wrong``, ``min_wrong``, ``max_wrong``."""
    wrong = spread([r["wrong"] for r in runs], "wrong")
    del wrong["std_wrong"]
    return {**spread([r["accuracy"] for r in runs], "accuracy"), **wrong}
