"""Execute chapters top to bottom in place, in this environment (``make notebooks``).

Execution counts then run 1..n and the stored outputs are what nbval compares against.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def coalesce_streams(nb: nbformat.NotebookNode) -> None:
    """Merge consecutive stdout (or stderr) outputs of a cell: how a cell's prints are split
    depends on timing, not on what it printed."""
    for cell in nb.cells:
        merged = []
        for out in cell.get("outputs", []):
            if (
                merged
                and out.output_type == "stream"
                and merged[-1].output_type == "stream"
                and merged[-1].name == out.name
            ):
                merged[-1].text += out.text
            else:
                merged.append(out)
        if cell.cell_type == "code":
            cell.outputs = merged


def execute(path: Path, timeout: int = 1200) -> float:
    """Run every cell of ``path`` in a fresh kernel and write the outputs back; return seconds."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    seconds = time.perf_counter() - start
    coalesce_streams(nb)
    tmp = path.with_suffix(".ipynb.tmp")
    nbformat.write(nb, tmp)
    tmp.replace(path)  # atomic: a failed run never leaves half a notebook
    return seconds


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(f"executing {arg} ...", flush=True)
        print(f"{arg}: {execute(Path(arg)):.1f} s")
