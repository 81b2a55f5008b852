"""Check a built book (``make book``): every page present, MathJax served locally, no CDN.

Run after ``jupyter-book build``: ``python tools/check_built_book.py _build/html``.
When Chromium is installed it also opens a chapter headless, with networking disabled,
and checks that MathJax typeset its equations.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# A script or stylesheet that the page itself loads from another host.
REMOTE = re.compile(r"<(?:script|link)\b[^>]*\b(?:src|href)=[\"'](https?://[^\"']+)", re.IGNORECASE)


def pages_from_toc() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part.get("chapters", [])]
    return files


def check(html: Path) -> list[str]:
    problems = []
    for page in pages_from_toc():
        if not (html / f"{page}.html").is_file():
            problems.append(f"missing page {page}.html")
    if not (html / "_static" / "mathjax" / "tex-chtml.js").is_file():
        problems.append("MathJax is not served from _static/mathjax/tex-chtml.js")
    for path in sorted(html.rglob("*.html")):
        text = path.read_text(encoding="utf-8")
        for url in REMOTE.findall(text):
            problems.append(f"{path.relative_to(html)} loads {url} from the network")
        if "$$" in text or "\\(" in text or "\\[" in text:
            if "_static/mathjax/tex-chtml.js" not in text:
                problems.append(
                    f"{path.relative_to(html)} has math but does not load local MathJax"
                )
    api = (html / "book" / "api.html").read_text(encoding="utf-8")
    if "vit_tutorial.attention.MultiHeadSelfAttention" not in api:
        problems.append("the API page lacks vit_tutorial.attention.MultiHeadSelfAttention")
    return problems


def typeset_offline(page: Path) -> int | None:
    """Number of typeset equations in ``page`` rendered by headless Chromium with no network,
    or None when Chromium is not installed."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        return None
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--proxy-server=127.0.0.1:9",
                "--proxy-bypass-list=<-loopback>",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=15000",
                "--allow-file-access-from-files",
                "--dump-dom",
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        ).stdout
    return dom.count("<mjx-container")


if __name__ == "__main__":
    html = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "_build" / "html")
    problems = check(html)
    chapter = html / "book" / "01_attention.html"
    typeset = typeset_offline(chapter)
    if typeset is None:
        print("check_built_book: chromium not installed; skipped the offline rendering check")
    elif typeset == 0:
        problems.append(f"headless Chromium with no network typeset no equation in {chapter}")
    else:
        print(f"check_built_book: offline Chromium typeset {typeset} equations in {chapter.name}")
    if problems:
        print("check_built_book: FAILED\n - " + "\n - ".join(problems))
        sys.exit(1)
    print(
        f"check_built_book: {len(pages_from_toc())} pages present, MathJax served locally, no CDN"
    )
