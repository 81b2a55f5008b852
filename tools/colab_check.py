"""Run every notebook as a Colab reader meets it, on a foreign CPU, strictly (``make colab-check``).

A reader on Colab has the notebook alone, in an empty folder, in a Python that has torch and
torchvision but not this repository; the notebook's first cell installs ``vit_tutorial[book]``
and the chapter fetches the repository files it reads through
``vit_tutorial.notebook.repository_file``. Colab's machine is also not this one: another CPU,
another thread count. This script rebuilds that situation here:

1. it builds the wheel (not editable) from the working tree, with the ``HEAD`` commit
   recorded in it (``setup.py``);
2. it creates a fresh virtual environment in a temporary folder that reuses the torch and
   torchvision of ``.venv``, and all they depend on, through a folder of symbolic links that
   a ``.pth`` file adds to its path (pip sees them installed; nothing is copied or
   downloaded), installs ``ipykernel`` there (from the package index, at the versions of
   ``constraints.txt``), and a stand-in ``google.colab`` that an IPython start-up file
   imports, so every kernel starts "on Colab";
3. for each notebook it serves the repository's files (those git tracks or would track, as
   they are in the working tree) on 127.0.0.1 under ``/<commit>/<path>``, for the wheel's
   commit only;
4. it executes each notebook with nbclient in a fresh kernel of that environment, in an empty
   working folder with a fresh data folder, with ``VIT_TUTORIAL_INSTALL=file://<wheel>`` (so
   the first cell installs the wheel with the ``[book]`` extra, whose other dependencies pip
   takes from the package index at the versions of ``constraints.txt``, as the book's own
   outputs were made), ``VIT_TUTORIAL_ONLINE=0`` and ``VIT_TUTORIAL_RAW_URL`` set to that
   server; and with another CPU's floating point, as ``make foreign-cpu`` sets it: MKL's
   generic code path (``MKL_CBWR=COMPATIBLE``), one thread, and PyTorch's AVX2 kernels in
   place of this CPU's best (``--cpu default``: no vector kernels; ``--cpu native``: this
   CPU's own);
5. it compares every stored output with the new one as strict nbval does (the same outputs,
   streams merged, images left out; cells tagged ``nbval-skip`` or ``nbval-ignore-output``
   and the install cell are not compared), and ``glue``'s values as text: without myst-nb,
   as on Colab, ``glue`` prints ``name: value`` where the book's build stores a display of
   the value, so for the names the stored cell glued the printed value is compared with the
   stored one, and neither with the other outputs.

So one run checks what three would: that every notebook runs on Colab, and that its stored
outputs survive another CPU and one thread. The first notebook runs alone (its first cell
installs the wheel into the fresh environment; the others find it installed), then two at a
time (``--jobs``), each kernel on one thread. It prints one line per notebook (time, pass or fail, and for a failure
the cell and the error or the first output that differs), a summary, and exits with status 1
when a notebook failed. The temporary folder is deleted at the end, also after a failure
(``--keep`` keeps it to look inside).

Usage::

    .venv/bin/python tools/colab_check.py                     # every notebook
    .venv/bin/python tools/colab_check.py book/06_training.ipynb book/solutions/06_*.ipynb
"""

from __future__ import annotations

import argparse
import ast
import copy
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from concurrent.futures import ProcessPoolExecutor
from importlib import metadata
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "vit-tutorial-colab-check"
REUSED = ["torch", "torchvision"]  # linked from .venv with their dependencies, never copied
STARTUP = "import google.colab  # noqa: F401  (what Colab's kernels have imported)\n"
CONSTRAINTS = ROOT / "constraints.txt"  # the versions pip installs in the fresh environment
# Another CPU's floating point (`make foreign-cpu`): MKL's generic path, one thread, and
# PyTorch's kernels for a lesser vector unit ("native": this CPU's own).
CPUS = ["avx2", "avx512", "default", "native"]
# What strict nbval leaves out of the comparison of two outputs (nbval's plugin.py).
NOT_COMPARED = {
    "metadata",
    "traceback",
    "prompt_number",
    "output_type",
    "name",
    "execution_count",
    "application/vnd.jupyter.widget-view+json",
    "image/png",
    "image/jpeg",
}


def all_notebooks() -> list[Path]:
    """The book's notebooks in the Makefile's order: chapters, appendices, solutions."""
    book = ROOT / "book"
    return [
        *sorted(book.glob("[0-9]*.ipynb")),
        *sorted(book.glob("appendix_*.ipynb")),
        *sorted((book / "solutions").glob("[0-9]*.ipynb")),
    ]


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run ``command``; on failure, raise with its output."""
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}")
    return result


def head_commit() -> str:
    return run(["git", "rev-parse", "HEAD"], cwd=ROOT).stdout.strip()


def build_wheel(tmp: Path, commit: str) -> tuple[Path, str]:
    """Build the wheel from a copy of the working tree's sources (so that the build leaves
    nothing in the tree); return it and the commit it records."""
    src = tmp / "src"
    src.mkdir()
    for name in ["pyproject.toml", "setup.py", "README.md"]:
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "_commit.txt")
    shutil.copytree(ROOT / "vit_tutorial", src / "vit_tutorial", ignore=ignore)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    command += ["--no-index", "-q", "-w", str(tmp / "wheel"), str(src)]
    run(command, env={**os.environ, "GIT_COMMIT": commit}, timeout=300)
    (wheel,) = (tmp / "wheel").glob("vit_tutorial-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        try:
            recorded = archive.read("vit_tutorial/_commit.txt").decode().strip()
        except KeyError:
            raise RuntimeError(f"{wheel.name} records no commit (setup.py)") from None
    return wheel, recorded


def dependency_closure(names: list[str]) -> list[metadata.Distribution]:
    """The installed distributions ``names`` need, themselves included, with the extras that
    requirements ask for (torch's ``cuda-toolkit[cublas,...]``), markers evaluated here."""
    found: dict[str, metadata.Distribution] = {}
    done: set[tuple[str, str]] = set()  # (distribution, extra) whose requirements are queued
    queue = list(names)
    while queue:
        requirement = Requirement(queue.pop())
        key = canonicalize_name(requirement.name)
        if key not in found:
            found[key] = metadata.distribution(requirement.name)
        for extra in {"", *requirement.extras} - {e for k, e in done if k == key}:
            done.add((key, extra))
            for line in found[key].requires or []:
                marker = Requirement(line).marker
                if marker is None or marker.evaluate({"extra": extra}):
                    queue.append(line)
    return list(found.values())


def link_reused(folder: Path) -> int:
    """Symbolic links in ``folder`` to the top-level files and folders (packages and their
    ``.dist-info``) of torch, torchvision and their dependencies in this environment."""
    folder.mkdir()
    distributions = dependency_closure(REUSED)
    for dist in distributions:
        if dist.files is None:
            raise RuntimeError(f"{dist.metadata['Name']} lists no files (no RECORD)")
        for top in {file.parts[0] for file in dist.files}:
            if top in ("..", "__pycache__") or (folder / top).exists():
                continue  # scripts in bin/, byte code; a namespace folder such as nvidia/
            (folder / top).symlink_to(Path(dist.locate_file(top)).resolve())
    return len(distributions)


def create_environment(tmp: Path) -> Path:
    """A fresh virtual environment "on Colab"; return its python."""
    env = tmp / "env"
    run([sys.executable, "-m", "venv", str(env)], timeout=300)
    python = env / "bin" / "python"
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(run([str(python), "-c", code]).stdout.strip())
    count = link_reused(tmp / "reused")
    (site / "colab_check_reused.pth").write_text(f"{tmp / 'reused'}\n")
    colab = site / "google" / "colab"  # google/ stays a namespace package
    colab.mkdir(parents=True)
    (colab / "__init__.py").write_text('"""A stand-in for Colab\'s module (colab_check.py)."""\n')
    startup = tmp / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-colab.py").write_text(STARTUP)
    print(f"  {count} distributions linked from .venv (torch, torchvision and dependencies)")
    print("  installing ipykernel ...", flush=True)
    install = [str(python), "-m", "pip", "install", "-q", "-c", str(CONSTRAINTS), "ipykernel"]
    run(install, timeout=900)
    return python


class RepositoryServer:
    """The repository's files under ``/<commit>/<path>``, on 127.0.0.1, for one commit."""

    def __init__(self, commit: str):
        listed = run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT
        ).stdout
        self.files = {name for name in listed.split("\0") if name}
        self.commit, self.requests = commit, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                commit, _, path = self.path.lstrip("/").partition("/")
                local = ROOT / path
                if commit != server.commit or path not in server.files or not local.is_file():
                    server.requests.append((self.path, 404))
                    self.send_error(404)
                    return
                body = local.read_bytes()
                server.requests.append((self.path, 200))
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def write_kernelspec(tmp: Path, python: Path, env: dict[str, str]) -> None:
    """A kernel of the new environment, found through ``$JUPYTER_PATH``."""
    folder = tmp / "jupyter" / "kernels" / KERNEL
    folder.mkdir(parents=True)
    spec = {
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        + ["--IPKernelApp.log_level=ERROR"],  # not its warning about TCP, once per notebook
        "display_name": "Python 3 (Colab check)",
        "language": "python",
        "env": env,
    }
    (folder / "kernel.json").write_text(json.dumps(spec, indent=1))
    os.environ["JUPYTER_PATH"] = str(tmp / "jupyter")


def foreign_cpu(cpu: str) -> dict[str, str]:
    """The environment variables that give a kernel another CPU's floating point."""
    if cpu == "native":
        return {"OMP_NUM_THREADS": "1"}
    return {"MKL_CBWR": "COMPATIBLE", "OMP_NUM_THREADS": "1", "ATEN_CPU_CAPABILITY": cpu}


def first_line(cell: nbformat.NotebookNode) -> str:
    line = next((line for line in cell.source.splitlines() if line.strip()), "")
    return line.strip()[:60]


def failed_cell(nb: nbformat.NotebookNode) -> str:
    """``cell N (first line)`` of the cell that raised."""
    for index, cell in enumerate(nb.cells):
        if any(out.get("output_type") == "error" for out in cell.get("outputs", [])):
            return f"cell {index} ({first_line(cell)})"
    return "no cell"


def glued_names(outputs: list) -> set[str]:
    """The names that myst-nb's ``glue`` recorded in these (stored) outputs."""
    return {
        out["metadata"]["scrapbook"]["name"]
        for out in outputs
        if "scrapbook" in out.get("metadata", {})
    }


def strip_glue(text: str, names: set[str]) -> str:
    """``text`` without the ``name: value`` lines that ``glue`` prints without myst-nb."""
    prefixes = tuple(f"{name}: " for name in names)
    if not prefixes:
        return text
    return "".join(line for line in text.splitlines(True) if not line.startswith(prefixes))


def glued_values(outputs: list, names: set[str]) -> dict[str, list[str]]:
    """The values ``glue`` recorded for ``names``, each as text, sorted: from myst-nb's displays
    (the stored outputs: a literal, as ``repr`` writes it) and from the ``name: value`` lines
    that ``glue`` prints without myst-nb (a run as on Colab)."""
    values: dict[str, list[str]] = {}
    stdout = ""
    for out in outputs:
        record = out.get("metadata", {}).get("scrapbook")
        if record is not None:
            text = next(v for k, v in out["data"].items() if k.endswith("text/plain"))
            values.setdefault(record["name"], []).append(str(ast.literal_eval(text)))
        elif out["output_type"] == "stream" and out["name"] == "stdout":
            stdout += out["text"]
    for line in stdout.splitlines():
        name, sep, value = line.partition(": ")
        if sep and name in names:
            values.setdefault(name, []).append(value)
    return {name: sorted(found) for name, found in values.items()}


def comparable(outputs: list, glued: set[str]) -> dict[str, list]:
    """What strict nbval compares of a cell's outputs: each stream merged into one text (with
    ``\\r`` and ``\\b`` applied), each other field and MIME type a list in order; ``glue``'s
    displays (stored) and lines (printed without myst-nb) left out."""
    streams: dict[str, str] = {}
    fields: dict[str, list] = {}
    for out in outputs:
        if out["output_type"] == "stream":
            streams[out["name"]] = streams.get(out["name"], "") + out["text"]
        elif "scrapbook" not in out.get("metadata", {}):
            for key, value in out.items():
                items = value.items() if key == "data" else [(key, value)]
                for field, item in items:
                    if field not in NOT_COMPARED:
                        fields.setdefault(field, []).append(item)
    for name, text in streams.items():
        while (shorter := re.sub(r"[^\n]\x08", "", text)) != text:
            text = shorter
        text = strip_glue(re.sub(r"^.*\r(?=[^\n])", "", text, flags=re.MULTILINE), glued)
        if text:
            fields.setdefault(name, []).append(text)
    return fields


def first_difference(stored: object, ran: object) -> str:
    """The first line where two outputs differ, both sides shown."""
    if isinstance(stored, str) and isinstance(ran, str):
        a, b = stored.splitlines(), ran.splitlines()
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return f"line {i + 1}: stored {x[:200]!r}, ran {y[:200]!r}"
        return f"stored {len(a)} lines, ran {len(b)}"
    return f"stored {str(stored)[:200]!r}, ran {str(ran)[:200]!r}"


def compare(stored: nbformat.NotebookNode, ran: nbformat.NotebookNode) -> list[str]:
    """Each compared cell whose new outputs differ from its stored ones, in words."""
    differences = []
    for index, (old, new) in enumerate(zip(stored.cells, ran.cells)):
        tags = set(old.get("metadata", {}).get("tags", []))
        install_cell = old.source.startswith("# Colab only: installs vit_tutorial")
        if old.cell_type != "code" or install_cell or tags & {"nbval-skip", "nbval-ignore-output"}:
            continue
        glued = glued_names(old.outputs)
        want, got = comparable(old.outputs, glued), comparable(new.outputs, glued)
        where = f"cell {index} ({first_line(old)})"
        stored_glue, ran_glue = glued_values(old.outputs, glued), glued_values(new.outputs, glued)
        if stored_glue != ran_glue:
            name = next(n for n in sorted(glued) if stored_glue.get(n) != ran_glue.get(n))
            shown = f"stored {stored_glue.get(name)}, ran {ran_glue.get(name)}"
            differences.append(f"{where}: glue {name!r}: {shown}")
            continue
        if set(want) != set(got):
            missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
            differences.append(f"{where}: outputs missing {missing}, unexpected {extra}")
            continue
        for field in want:
            if len(want[field]) != len(got[field]):
                counts = f"{len(want[field])} stored, {len(got[field])} ran"
                differences.append(f"{where}: {field}: {counts}")
                break
            pair = next(((a, b) for a, b in zip(want[field], got[field]) if a != b), None)
            if pair is not None:
                differences.append(f"{where}: {field}: {first_difference(*pair)}")
                break
    return differences


def execute(path: Path, workdir: Path, timeout: int) -> str | None:
    """Execute ``path`` in ``workdir`` and compare its outputs with the stored ones; None when
    it passed, else what failed."""
    stored = nbformat.read(path, as_version=4)
    nb = copy.deepcopy(stored)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=KERNEL,
        record_timing=False,
        resources={"metadata": {"path": str(workdir)}},
    )
    try:
        client.execute()
    except CellExecutionError as error:
        message = f"{error.ename}: {error.evalue}".strip()
        return f"{failed_cell(nb)}: {message[:600]}"
    except Exception as error:  # a timeout, a kernel that died
        return f"{failed_cell(nb)}: {type(error).__name__}: {str(error)[:600]}"
    differences = compare(stored, nb)
    if differences:
        more = f" (and {len(differences) - 3} more cells)" if len(differences) > 3 else ""
        return "stored outputs differ: " + "; ".join(differences[:3]) + more
    return None


def check_one(notebook: Path, tmp: Path, commit: str, timeout: int) -> tuple[str, list[str]]:
    """Run ``notebook`` alone (in a worker process): its own empty folder, data folder and
    server. Return its line of the report, and ``[name]`` when it failed (else ``[]``)."""
    name = str(notebook.relative_to(ROOT)) if notebook.is_relative_to(ROOT) else str(notebook)
    workdir = tmp / "run" / name.replace("/", "_")
    workdir.mkdir(parents=True)
    server = RepositoryServer(commit)
    # the kernel inherits these (the kernel spec holds what every notebook shares)
    os.environ["VIT_TUTORIAL_RAW_URL"] = server.url
    os.environ["VIT_TUTORIAL_DATA"] = str(workdir.with_name(workdir.name + ".data"))
    began = time.perf_counter()
    try:
        failure = execute(notebook, workdir, timeout)
    finally:
        server.close()
    seconds = time.perf_counter() - began
    fetched = [p for p, status in server.requests if status == 200]
    missing = [p for p, status in server.requests if status == 404]
    files = f"{len(fetched)} repository file{'s' * (len(fetched) != 1)}"
    line = f"{'PASS' if failure is None else 'FAIL'}  {name:50s} {seconds:7.1f} s  {files}"
    if failure is not None:
        line += f"\n      {failure}"
        if missing:
            line += f"\n      not served (404): {', '.join(missing)}"
    return line, [] if failure is None else [name]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "notebooks", nargs="*", type=Path, help="notebooks to run (default: all of the book)"
    )
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    parser.add_argument(
        "--cpu",
        choices=CPUS,
        default=os.environ.get("FOREIGN_CPU", "avx2"),
        help="PyTorch's kernels (ATEN_CPU_CAPABILITY), with MKL's generic path and one "
        "thread; native: this CPU's own, one thread (default: $FOREIGN_CPU or avx2)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="notebooks run at a time")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    notebooks = list(dict.fromkeys(p.resolve() for p in args.notebooks)) or all_notebooks()
    for notebook in notebooks:
        if not notebook.is_file() or notebook.suffix != ".ipynb":
            parser.error(f"{notebook}: not a notebook")
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")

    start = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="colab-check-"))
    failed: list[str] = []
    done = 0
    try:
        print(f"colab-check: building the wheel in {tmp}", flush=True)
        wheel, commit = build_wheel(tmp, head_commit())
        print(f"  {wheel.name}, commit {commit[:12]}")
        print("colab-check: a fresh environment that has torch and torchvision", flush=True)
        python = create_environment(tmp)
        for name in ("PYTHONPATH", "PYTHONHOME"):
            os.environ.pop(name, None)  # the kernel sees only its own environment
        cpu = foreign_cpu(args.cpu)
        write_kernelspec(
            tmp,
            python,
            {
                "VIT_TUTORIAL_INSTALL": wheel.as_uri(),
                "VIT_TUTORIAL_ONLINE": "0",
                "PIP_CONSTRAINT": str(CONSTRAINTS),
                "IPYTHONDIR": str(tmp / "ipython"),
                "MPLCONFIGDIR": str(tmp / "matplotlib"),
                "PYTHONNOUSERSITE": "1",
                **cpu,
            },
        )
        shown = " ".join(f"{k}={v}" for k, v in cpu.items())
        print(
            f"colab-check: {len(notebooks)} notebooks, each alone in an empty folder, "
            f"{args.jobs} at a time, with {shown}; stored outputs compared strictly",
            flush=True,
        )
        # The first notebook runs alone: its first cell installs the wheel and the [book]
        # extra into the fresh environment, which two pips at once could garble; the others
        # find them installed.
        for batch, jobs in ((notebooks[:1], 1), (notebooks[1:], args.jobs)):
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                futures = [pool.submit(check_one, nb, tmp, commit, args.timeout) for nb in batch]
                for future in futures:  # in the notebooks' order
                    line, failures = future.result()
                    print(line, flush=True)
                    failed += failures
                    done += 1
    except RuntimeError as error:  # the wheel or the environment could not be made
        print(f"colab-check: {error}")
        return 2
    finally:
        if args.keep:
            print(f"colab-check: kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    total = time.perf_counter() - start
    print(
        f"colab-check: {done - len(failed)} of {len(notebooks)} notebooks passed, "
        f"{len(failed)} failed, in {total:.0f} s"
    )
    return 1 if failed or done != len(notebooks) else 0


if __name__ == "__main__":
    sys.exit(main())
