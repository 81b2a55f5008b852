"""Execute every chapter and solutions notebook on a CUDA machine; write a Markdown report.

The GPU checklist of DEVELOPERS.md: each notebook runs top to bottom in a fresh kernel (its
stored outputs are left alone: nothing is written back), then one extra cell reports
whether the kernel used the GPU and how much memory it took. A notebook fails when a cell
raises. Online-only cells stay off (``RUN_ONLINE`` is unset), as on a machine without
internet.

``--jobs N`` runs N notebooks at a time (each in its own process and kernel); the report
is rewritten as each one finishes, so a run cut short still leaves one.

Usage: ``python tools/gpu_checklist.py [--jobs 3] --out REPORT.md book/*.ipynb
book/solutions/*.ipynb``. Exit status 1 when a notebook fails.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import platform
import re
import sys
import time
from pathlib import Path

import nbformat
import torch
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

# "used the GPU": the kernel allocated GPU memory (CUDA merely initialised, by an
# is_available() check say, does not count)
PROBE = """import json as _json, torch as _torch
_peak = _torch.cuda.max_memory_allocated() if _torch.cuda.is_initialized() else 0
print("GPU-PROBE " + _json.dumps({
    "cuda_used": _peak > 0, "max_memory_mib": round(_peak / 2**20, 1),
}))"""


def run(path: Path, timeout: int) -> dict:
    """Execute ``path`` with the probe cell appended; what happened."""
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    tic = time.perf_counter()
    result = {"notebook": str(path), "ok": True, "error": ""}
    try:
        NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        ).execute()
    except CellExecutionError as error:
        last = str(error).strip().splitlines()[-1]
        result.update(ok=False, error=re.sub(r"\x1b\[[0-9;]*m", "", last)[:300])
    result["seconds"] = round(time.perf_counter() - tic, 1)
    for out in nb.cells[-1].get("outputs", []):
        if out.get("name") == "stdout" and "GPU-PROBE " in out.get("text", ""):
            result.update(json.loads(out["text"].split("GPU-PROBE ", 1)[1]))
    return result


def report(rows: list[dict], out: Path) -> None:
    lines = [
        "# Every notebook executed on a CUDA GPU",
        "",
        f"- device: {torch.cuda.get_device_name(0)}",
        f"- date: {datetime.date.today().isoformat()}",
        f"- torch {torch.__version__}, Python {platform.python_version()}",
        f"- command: `python {' '.join(sys.argv)}`",
        "",
        "| notebook | result | seconds | used the GPU | peak GPU memory (MiB) |",
        "|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: r["notebook"]):
        status = "ok" if r["ok"] else f"FAILED: {r['error']}"
        lines.append(
            f"| {r['notebook']} | {status} | {r['seconds']} | "
            f"{'yes' if r.get('cuda_used') else 'no'} | {r.get('max_memory_mib', 0)} |"
        )
    out.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout", type=int, default=900, help="per cell, in seconds")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks at a time")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: this checklist needs a GPU", file=sys.stderr)
        return 2
    rows = []
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run, path, args.timeout) for path in args.notebooks]
        for future in concurrent.futures.as_completed(futures):
            rows.append(r := future.result())
            print(
                f"{r['notebook']}: {'ok' if r['ok'] else 'FAILED'} in {r['seconds']} s, "
                f"GPU used: {r.get('cuda_used')} {r['error']}",
                flush=True,
            )
            report(rows, args.out)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
