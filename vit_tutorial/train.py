"""The command line's older spelling, which the book uses: :mod:`vit_tutorial.cli` without a
subcommand (``python -m vit_tutorial.train --dataset digits``: ``train``), or with
``--finetune SOURCE`` among the options (``finetune SOURCE``)."""

from __future__ import annotations

import sys

from vit_tutorial.cli import main as cli_main
from vit_tutorial.engine import TrainResult

__all__ = ["main"]


def main(argv: list[str] | None = None) -> TrainResult:
    """``finetune SOURCE ...`` when the arguments hold ``--finetune SOURCE``, else ``train ...``."""
    argv, command = list(sys.argv[1:] if argv is None else argv), ["train"]
    for i, arg in enumerate(argv):
        if arg.startswith("--finetune=") or (arg == "--finetune" and i + 1 < len(argv)):
            source, end = (arg.split("=", 1)[1], i + 1) if "=" in arg else (argv[i + 1], i + 2)
            command, argv = ["finetune", source], argv[:i] + argv[end:]
            break
    return cli_main([*command, *argv], prog="python -m vit_tutorial.train")


if __name__ == "__main__":
    main()
