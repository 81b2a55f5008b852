"""What a chapter needs to run alike in the book's checkout, on Colab and in plain Jupyter.

- :func:`glue` puts a number a cell computed into the book's text (myst-nb's ``glue``), or
  prints ``name: value`` where myst-nb is not installed (Colab, plain Jupyter);
- :func:`online` says whether the online-only cells (they download weights or data) run;
- :func:`repository_file` gives a file of the repository the package does not hold (a
  result of ``benchmarks/``, a script): the checkout's own, else a copy downloaded once
  from the commit the installed package was built from (:func:`package_commit`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import urllib.error
import urllib.parse
import urllib.request
from importlib import metadata, resources
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from vit_tutorial.files import write_atomically

__all__ = [
    "REPOSITORY_URL",
    "REPOSITORY_BRANCH",
    "CACHE_FOLDER",
    "glue",
    "online",
    "package_commit",
    "raw_url",
    "find_repository_root",
    "repository_file",
]

#: The repository the book is published from: ``repository.url`` of ``_config.yml`` (tested).
REPOSITORY_URL = "https://github.com/vit-tutorial/vit-tutorial"
#: Its branch: ``repository.branch`` of ``_config.yml``.
REPOSITORY_BRANCH = "main"
#: The folder, in the notebook's working folder, that holds downloaded repository files.
CACHE_FOLDER = "vit_tutorial_files"
_COMMIT_FILE = "_commit.txt"  # written by setup.py into a built package: its commit
_COMMIT = re.compile(r"[0-9a-f]{40}")
_ONLINE_VARIABLE = "VIT_TUTORIAL_ONLINE"
_RAW_URL_VARIABLE = "VIT_TUTORIAL_RAW_URL"


def glue(name: str, value: object, display: bool = True) -> None:
    """Make ``value`` (a number, a string, a figure...) available to the book's text as ``name``.

    With myst-nb installed (the book's build) this is myst-nb's ``glue``: the prose shows the
    value where its ``glue:text`` role names ``name``, and ``display`` says whether the cell's
    output shows it too. Elsewhere (Colab, Jupyter) there is no text to fill: it prints
    ``name: value``, whatever ``display`` says. ``TypeError`` for a ``name`` that is not a
    string, ``ValueError`` for an empty one.
    """
    if not isinstance(name, str):
        raise TypeError(f"glue: name must be a string, got {name!r}")
    if not name:
        raise ValueError("glue: name must not be empty")
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        print(f"{name}: {value}")
    else:
        myst_glue(name, value, display=display)


def online() -> bool:
    """Whether the online-only cells run (they download pretrained weights or data).

    ``VIT_TUTORIAL_ONLINE=1`` or ``0`` decides when it is set (anything else is a
    ``ValueError``); otherwise they run exactly on Colab (``google.colab`` is imported there).
    """
    value = os.environ.get(_ONLINE_VARIABLE)
    if value is None:
        return "google.colab" in sys.modules
    if value not in ("0", "1"):
        raise ValueError(f"{_ONLINE_VARIABLE}={value!r}: expected '0' or '1', or leave it unset")
    return value == "1"


def _embedded_commit() -> str | None:
    """The commit that ``setup.py`` wrote into the built package, if any."""
    try:
        commit = resources.files("vit_tutorial").joinpath(_COMMIT_FILE).read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return commit if _COMMIT.fullmatch(commit) else None


def _direct_url_commit() -> str | None:
    """The commit pip recorded for a ``git+`` install (``direct_url.json``), if any."""
    try:
        text = metadata.distribution("vit_tutorial").read_text("direct_url.json")
        commit = json.loads(text or "{}").get("vcs_info", {}).get("commit_id", "")
    except (metadata.PackageNotFoundError, ValueError, AttributeError):
        return None
    return commit if _COMMIT.fullmatch(str(commit)) else None


def package_commit() -> str:
    """The commit whose repository files match the installed package (a hash, or a branch).

    In order: the commit written into the package when its wheel was built (``setup.py``
    records ``git rev-parse HEAD`` in ``vit_tutorial/_commit.txt``), the commit pip recorded
    for a ``git+`` install, else :data:`REPOSITORY_BRANCH` (whose files may be newer).
    """
    return _embedded_commit() or _direct_url_commit() or REPOSITORY_BRANCH


def raw_url() -> str:
    """The ``http(s)://`` or ``file://`` address repository files are downloaded from.

    ``$VIT_TUTORIAL_RAW_URL`` when set (a mirror, or a local server in a test), otherwise
    GitHub's raw-file host for :data:`REPOSITORY_URL`, without the trailing slash. A file
    ``path`` of commit ``commit`` lies at ``{raw_url()}/{commit}/{path}``. ``ValueError`` when
    ``VIT_TUTORIAL_RAW_URL`` or :data:`REPOSITORY_URL` is not such an address.
    """
    base = os.environ.get(_RAW_URL_VARIABLE)
    if base is None:
        parsed = urllib.parse.urlsplit(REPOSITORY_URL.removesuffix(".git"))
        if parsed.netloc != "github.com":
            raise ValueError(
                f"REPOSITORY_URL={REPOSITORY_URL!r} is not on github.com: set "
                f"{_RAW_URL_VARIABLE} to the address its raw files are served from"
            )
        base = f"https://raw.githubusercontent.com{parsed.path}"
    if urllib.parse.urlsplit(base).scheme not in ("http", "https", "file"):
        raise ValueError(
            f"{_RAW_URL_VARIABLE}={base!r}: expected an http://, https:// or file:// address"
        )
    return base.rstrip("/")


def find_repository_root(start: str | os.PathLike[str] | None = None) -> Path | None:
    """The root of the repository's checkout that holds ``start``, or None outside one.

    A folder is the repository's root when it holds ``_toc.yml`` and the package's folder
    ``vit_tutorial/``; ``start`` (the current folder by default) and its parents are searched.
    """
    here = Path.cwd() if start is None else Path(start)
    for folder in [here.resolve(), *here.resolve().parents]:
        if (folder / "_toc.yml").is_file() and (folder / "vit_tutorial" / "__init__.py").is_file():
            return folder
    return None


def _relative_path(path: str | os.PathLike[str]) -> PurePosixPath:
    """``path`` checked: relative, inside the repository, written with ``/``."""
    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not isinstance(text, str):  # neither text nor a path, or a path of bytes
        raise TypeError(f"repository_file: path must be a str or a path, got {path!r}")
    relative = PurePosixPath(text)
    parts = relative.parts  # none for "" and "."
    if not text.strip() or "\\" in text or relative.is_absolute() or ".." in parts or not parts:
        raise ValueError(
            f"repository_file: {text!r} is not a file path relative to the repository's "
            "root, such as 'benchmarks/results/digits_target.json'"
        )
    return relative


def _download(url: str, file: BinaryIO) -> None:
    """Write the file at ``url`` into ``file``; ContentTooShortError if the connection breaks."""
    with urllib.request.urlopen(url, timeout=60) as response:
        expected = response.headers.get("Content-Length")
        shutil.copyfileobj(response, file)
        if expected is not None and file.tell() != int(expected):
            raise urllib.error.ContentTooShortError(
                f"{url}: got {file.tell()} of {expected} bytes", None
            )


def repository_file(path: str | os.PathLike[str]) -> Path:
    """A file of the repository, by its ``path`` from the repository's root with ``/`` between
    folders, such as ``"benchmarks/results/digits_ablation.json"``.

    Inside a checkout (see :func:`find_repository_root`) this is the checkout's own file.
    Otherwise (Colab, a notebook opened on its own) the file is downloaded once, from
    ``{raw_url()}/{package_commit()}/{path}``, into ``vit_tutorial_files/<commit>/`` of the
    current folder, and later calls return that copy. Files of one folder land in one folder,
    so a benchmark script finds its helper module beside it once both are fetched.

    Raises:
        TypeError: ``path`` is not a string or a path.
        ValueError: ``path`` is absolute, empty, or climbs out of the repository (``..``).
        FileNotFoundError: the repository has no such file (at that commit).
        urllib.error.URLError: the download failed for another reason (no network...).
    """
    relative = _relative_path(path)
    root = find_repository_root()
    if root is not None:
        local = root.joinpath(*relative.parts)
        if not local.is_file():
            raise FileNotFoundError(f"repository_file: no file {str(relative)!r} in {root}")
        return local
    commit = package_commit()
    cached = Path.cwd().joinpath(CACHE_FOLDER, *PurePosixPath(commit).parts, *relative.parts)
    if cached.is_file():
        return cached
    url = f"{raw_url()}/{urllib.parse.quote(commit)}/{urllib.parse.quote(str(relative))}"
    try:
        write_atomically(cached, lambda file: _download(url, file))  # never half a file
    except urllib.error.URLError as error:  # HTTPError is one; a file:// address gives another
        if getattr(error, "code", None) == 404 or isinstance(error.reason, FileNotFoundError):
            raise FileNotFoundError(
                f"repository_file: no file {str(relative)!r} at commit {commit} ({url})"
            ) from error
        raise
    return cached
