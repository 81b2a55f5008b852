"""What a chapter needs to run alike in the book's checkout, on Colab and in plain Jupyter.

The notebooks of the book import three helpers from here:

- :func:`glue` puts a number a cell computed into the book's text (myst-nb's ``glue``);
  where myst-nb is not installed (Colab, plain Jupyter) it prints ``name: value`` instead,
  so that the reader still sees every number the prose cites;
- :func:`online` says whether the online-only cells (those that download weights or data)
  run: on Colab, or where ``VIT_TUTORIAL_ONLINE=1``;
- :func:`repository_file` gives a file of the repository that the package does not hold
  (a result of ``benchmarks/``, a benchmark script): the checkout's own file when the
  notebook runs inside one, else a copy downloaded once from the commit the installed
  package was built from.

That commit is written into the wheel when it is built (``setup.py`` records
``git rev-parse HEAD`` in ``vit_tutorial/_commit.txt``); an install that lacks it falls back
to the commit pip recorded for a ``git+`` install, then to the branch of
:data:`REPOSITORY_URL`.
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

#: The repository the book is published from: ``repository.url`` of ``_config.yml``
#: (a test checks that they agree).
REPOSITORY_URL = "https://github.com/vit-tutorial/vit-tutorial"
#: Its branch: ``repository.branch`` of ``_config.yml``.
REPOSITORY_BRANCH = "main"
#: The folder, in the notebook's working folder, that holds downloaded repository files.
CACHE_FOLDER = "vit_tutorial_files"
# The file that setup.py writes into a built package: the commit it was built from.
_COMMIT_FILE = "_commit.txt"
_COMMIT = re.compile(r"[0-9a-f]{40}")
_ONLINE_VARIABLE = "VIT_TUTORIAL_ONLINE"
_RAW_URL_VARIABLE = "VIT_TUTORIAL_RAW_URL"


def glue(name: str, value: object, display: bool = True) -> None:
    """Make ``value`` available to the book's text under ``name``.

    With myst-nb installed (the book's build) this is myst-nb's ``glue``, and the prose
    shows the value where its ``glue:text`` role names ``name``. Elsewhere (Colab, Jupyter)
    it prints one line, ``name: value``, whatever ``display`` says: there is no text to
    fill, so the reader sees the number in the cell's output instead.

    Args:
        name: the key the text refers to.
        value: the value (a number, a string, a figure...).
        display: whether myst-nb also shows the value in the cell's output.

    Raises:
        TypeError: ``name`` is not a string.
        ValueError: ``name`` is empty.
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

    ``VIT_TUTORIAL_ONLINE=1`` or ``0`` decides when it is set; otherwise they run exactly
    on Colab (``google.colab`` is imported there).

    Returns:
        True when the online-only cells should run.

    Raises:
        ValueError: ``VIT_TUTORIAL_ONLINE`` is set to something other than ``0`` or ``1``.
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
        text = resources.files("vit_tutorial").joinpath(_COMMIT_FILE).read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None
    commit = text.strip()
    return commit if _COMMIT.fullmatch(commit) else None


def _direct_url_commit() -> str | None:
    """The commit pip recorded for a ``git+`` install (``direct_url.json``), if any."""
    try:
        text = metadata.distribution("vit_tutorial").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        commit = json.loads(text or "{}").get("vcs_info", {}).get("commit_id", "")
    except (ValueError, AttributeError):
        return None
    return commit if _COMMIT.fullmatch(str(commit)) else None


def package_commit() -> str:
    """The commit whose repository files match the installed package.

    In order: the commit written into the package when its wheel was built, the commit pip
    recorded for a ``git+`` install, and otherwise :data:`REPOSITORY_BRANCH` (whose files
    may be newer than the package).

    Returns:
        A 40-digit commit hash, or the branch name.
    """
    return _embedded_commit() or _direct_url_commit() or REPOSITORY_BRANCH


def raw_url() -> str:
    """The address repository files are downloaded from, without the trailing slash.

    ``$VIT_TUTORIAL_RAW_URL`` when set (a mirror, or a local server in a test), otherwise
    GitHub's raw-file host for :data:`REPOSITORY_URL`. A file ``path`` of commit ``commit``
    lies at ``{raw_url()}/{commit}/{path}``.

    Returns:
        An ``http(s)://`` or ``file://`` address.

    Raises:
        ValueError: ``VIT_TUTORIAL_RAW_URL`` or :data:`REPOSITORY_URL` is not such an address.
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
    """The checkout of the repository that holds ``start``, if there is one.

    A folder is the repository's root when it holds ``_toc.yml`` and the package's folder
    ``vit_tutorial/``; ``start`` (the current folder by default) and its parents are searched.

    Args:
        start: the folder to search from.

    Returns:
        The root, or None when ``start`` is not inside a checkout.
    """
    here = Path.cwd() if start is None else Path(start)
    for folder in [here.resolve(), *here.resolve().parents]:
        if (folder / "_toc.yml").is_file() and (folder / "vit_tutorial" / "__init__.py").is_file():
            return folder
    return None


def _relative_path(path: str | os.PathLike[str]) -> PurePosixPath:
    """``path`` checked: relative, inside the repository, written with ``/``."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"repository_file: path must be a str or a path, got {path!r}")
    text = os.fspath(path)
    if not isinstance(text, str):
        raise TypeError(f"repository_file: path must be text, got {path!r}")
    relative = PurePosixPath(text)
    if (
        not text.strip()
        or "\\" in text
        or relative.is_absolute()
        or ".." in relative.parts
        or relative == PurePosixPath(".")
    ):
        raise ValueError(
            f"repository_file: {text!r} is not a file path relative to the repository's "
            "root, such as 'benchmarks/results/digits_target.json'"
        )
    return relative


def _download(url: str, target: Path) -> None:
    """Write the file at ``url`` to ``target`` atomically (a partial download never shows)."""

    def copy(file) -> None:
        with urllib.request.urlopen(url, timeout=60) as response:
            expected = response.headers.get("Content-Length")
            shutil.copyfileobj(response, file)
            if expected is not None and file.tell() != int(expected):  # the connection broke
                raise urllib.error.ContentTooShortError(
                    f"{url}: got {file.tell()} of {expected} bytes", None
                )

    write_atomically(target, copy)


def repository_file(path: str | os.PathLike[str]) -> Path:
    """A file of the repository, such as ``"benchmarks/results/digits_ablation.json"``.

    Inside a checkout (the current folder or one of its parents is the repository's root,
    see :func:`find_repository_root`) this is the checkout's own file. Otherwise (Colab, a
    notebook opened on its own) the file is downloaded once, from
    ``{raw_url()}/{package_commit()}/{path}``, into ``vit_tutorial_files/<commit>/`` of the
    current folder, and later calls return that copy. Files of one folder land in one
    folder, so a benchmark script finds its helper module beside it once both are fetched.

    Args:
        path: the file's path from the repository's root, with ``/`` between folders.

    Returns:
        The path of the local file.

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
        _download(url, cached)
    except urllib.error.URLError as error:  # HTTPError is one; a file:// address gives another
        if getattr(error, "code", None) == 404 or isinstance(error.reason, FileNotFoundError):
            raise FileNotFoundError(
                f"repository_file: no file {str(relative)!r} at commit {commit} ({url})"
            ) from error
        raise
    return cached
