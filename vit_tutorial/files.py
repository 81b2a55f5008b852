"""Files that are never half-written, and their SHA-256: one way each, for the whole project
(checkpoints, downloaded repository files, trained teachers, the benchmarks' results)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["write_atomically", "sha256"]


def write_atomically(
    path: str | os.PathLike, write: bytes | str | Callable[[BinaryIO], object]
) -> Path:
    """Write ``path`` (its folder created when needed) through a temporary file in the same
    folder, then rename it; return ``path`` as a :class:`~pathlib.Path`. ``write`` is the bytes
    or text (UTF-8) to write, or a function that writes into the open binary file it is given
    (``lambda f: torch.save(state, f)``).

    A reader sees the old file or the new one, never half of one: :func:`os.replace` is atomic
    within a file system, and a failed write removes its temporary file.

    Example:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / "sub" / "a.txt"
        >>> write_atomically(target, "hello").read_text()
        'hello'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(write):
                write(f)
            else:
                f.write(write.encode() if isinstance(write, str) else write)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of the file at ``path``, as 64 hexadecimal digits."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
