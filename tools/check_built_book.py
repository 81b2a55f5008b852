"""Check a built book (``make book``): open every page of ``_toc.yml`` in headless Chromium.

Run after ``jupyter-book build``: ``python tools/check_built_book.py _build/html``.

Without a browser it checks the files: every page present, MathJax served locally, no
script or stylesheet from a CDN. Then it opens each page of ``_toc.yml`` in headless
Chromium (a fresh profile, a 1280-px-wide window, no network: only file:// loads) and checks

- the page renders, with no console error, uncaught exception or failed load;
- MathJax ran: every Sphinx math element holds a typeset ``mjx-container``, no MathJax
  error, and no raw TeX (``$$``, ``\\frac``, ...) is left in the text outside code;
- every image loads (``naturalWidth > 0``) and is shown at 90% or more of its natural width
  (``clientWidth >= 0.9 * naturalWidth``), so that figures stay legible;
- no code or output block scrolls sideways: every ``pre``, every autodoc signature and
  anything else in the text column that can scroll sideways (math aside) fits its box
  (``scrollWidth <= clientWidth``) and the column; a failure names the widest line. Code
  cells fit (75 characters, ``book/ruff.toml``); printed output and the API page's code wrap
  (``_ext/page_width.py``);
- every link to a local file exists, and every ``#fragment`` is an id on the target page;
- every notebook page has the Colab launch link to that notebook in the repository of
  ``_config.yml`` (``repository.url``, ``branch``, ``path_to_book``).

With ``--screenshots DIR`` a screenshot of each page, the whole page, goes to ``DIR``
(``make book`` saves them in ``_build/screenshots/``; ``make test`` takes none, which halves
the browser's time). Chromium is driven over the DevTools protocol on a pipe
(``--remote-debugging-pipe``), with the standard library only.

The browser is ``chromium`` (or ``chromium-browser``) on PATH; set ``CHROMIUM`` to another
executable, or to ``none`` to behave as if it were missing. When it is missing the check
fails under ``CI=true`` and otherwise warns loudly and skips the browser part.
``tools/system_packages.sh chromium`` (run by ``make setup``) installs it.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import yaml

ROOT = Path(__file__).resolve().parents[1]
# A script or stylesheet that the page itself loads from another host.
REMOTE = re.compile(r"<(?:script|link)\b[^>]*\b(?:src|href)=[\"'](https?://[^\"']+)", re.IGNORECASE)
INSTALL = (
    "sudo apt-get update && sudo apt-get install -y --no-install-recommends chromium"
    " (or run `make setup` as root)"
)
WINDOW = (1280, 900)  # the window the figures must fit at 90% of their natural width
MIN_SHOWN = 0.9
WIDE_LINE_SHOWN = 80  # characters of a too-wide block's widest line in its problem
SCREENSHOT_PART = 12000  # px: a taller page is saved in parts (NAME.png, NAME-2.png, ...)
MAX_SCREENSHOT_HEIGHT = 100000  # px
PAGE_TIMEOUT = 90  # s, for loading, typesetting and measuring one page
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--no-default-browser-check",
    "--mute-audio",
    "--force-device-scale-factor=1",
    f"--window-size={WINDOW[0]},{WINDOW[1]}",
    # No network: every http(s) request goes to a closed local port and fails (and is
    # reported below); file:// pages and their files load as usual.
    "--proxy-server=127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--remote-debugging-pipe",
]


def pages_from_toc() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part.get("chapters", [])]
    return files


def check(html: Path) -> list[str]:
    """The checks on the files, without a browser."""
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
    api = html / "book" / "api.html"
    if api.is_file() and "vit_tutorial.attention.MultiHeadSelfAttention" not in api.read_text(
        encoding="utf-8"
    ):
        problems.append("the API page lacks vit_tutorial.attention.MultiHeadSelfAttention")
    return problems


def colab_url(page: str) -> str | None:
    """The Colab launch link of ``page`` when its source is a notebook, else None."""
    if not (ROOT / f"{page}.ipynb").is_file():
        return None
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo = config["repository"]
    owner_name = urlparse(repo["url"]).path.strip("/").removesuffix(".git")
    path = "/".join(p for p in (repo.get("path_to_book", "").strip("/"), f"{page}.ipynb") if p)
    colab = config.get("launch_buttons", {}).get("colab_url", "https://colab.research.google.com")
    return f"{colab.rstrip('/')}/github/{owner_name}/blob/{repo.get('branch', 'main')}/{path}"


def find_browser() -> str | None:
    override = os.environ.get("CHROMIUM")
    if override is not None:
        return None if override in ("", "none") else shutil.which(override)
    return shutil.which("chromium") or shutil.which("chromium-browser")


class BrowserError(RuntimeError):
    pass


class Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe: Chromium reads
    NUL-terminated JSON commands on fd 3 and writes replies and events on fd 4."""

    def __init__(self, executable: str, profile: Path):
        to_browser, self._write_fd = os.pipe()
        self._read_fd, from_browser = os.pipe()

        def child() -> None:  # runs in the child, between fork and exec
            read = fcntl.fcntl(to_browser, fcntl.F_DUPFD, 10)
            write = fcntl.fcntl(from_browser, fcntl.F_DUPFD, 10)
            os.dup2(read, 3)
            os.dup2(write, 4)

        self._log = (profile / "chromium.log").open("wb")
        self.process = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={profile / 'profile'}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            preexec_fn=child,  # no thread runs yet
            close_fds=False,  # our other descriptors are close-on-exec anyway
            start_new_session=True,  # its own process group, to end it with all its helpers
        )
        os.close(to_browser)
        os.close(from_browser)
        self._messages: queue.Queue = queue.Queue()
        self._events: list[dict] = []
        self._id = 0
        threading.Thread(target=self._reader, daemon=True).start()
        try:
            self.version = self.call("Browser.getVersion", timeout=60)["product"]
        except BrowserError as error:
            self.close()
            log = (profile / "chromium.log").read_text(errors="replace")[-2000:]
            raise BrowserError(f"{executable} did not start: {error}\n{log}") from None

    def _reader(self) -> None:
        parts: list[bytes] = []
        try:
            while chunk := os.read(self._read_fd, 1 << 20):
                *done, rest = chunk.split(b"\0")
                for piece in done:
                    self._messages.put(json.loads(b"".join([*parts, piece])))
                    parts = []
                parts.append(rest)
        except OSError:
            pass
        self._messages.put(None)

    def _next(self, deadline: float) -> dict:
        try:
            message = self._messages.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise BrowserError("timed out") from None
        if message is None:
            self._messages.put(None)
            raise BrowserError("the browser exited")
        return message

    def call(
        self,
        method: str,
        params: dict | None = None,
        session: str | None = None,
        timeout: float = PAGE_TIMEOUT,
    ) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        try:
            while data:
                data = data[os.write(self._write_fd, data) :]
        except OSError as error:
            raise BrowserError(f"{method}: {error}") from None
        deadline = time.monotonic() + timeout
        while True:
            reply = self._next(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            if "method" in reply:
                self._events.append(reply)

    def wait_for(self, method: str, session: str, timeout: float = PAGE_TIMEOUT) -> dict:
        deadline = time.monotonic() + timeout
        for event in self._events:
            if event["method"] == method and event.get("sessionId") == session:
                return event
        while True:
            event = self._next(deadline)
            if "method" in event:
                self._events.append(event)
                if event["method"] == method and event.get("sessionId") == session:
                    return event

    def events(self, session: str) -> list[dict]:
        return [e for e in self._events if e.get("sessionId") == session]

    def forget(self, session: str) -> None:
        self._events = [e for e in self._events if e.get("sessionId") != session]

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.call("Browser.close", timeout=10)
            except BrowserError:
                pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        for fd in (self._write_fd, self._read_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()


# Runs in the page once it has loaded: waits for MathJax, fonts and images, then measures.
INSPECT = r"""
(async () => {
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const math = [...document.querySelectorAll(".math")];  // Sphinx's math spans and divs
  let mathjax = "not needed";
  if (math.length) {
    const ready = () => window.MathJax && MathJax.startup && MathJax.startup.promise;
    const loaded = document.querySelector("script[src*='mathjax']");
    for (let i = 0; loaded && i < 300 && !ready(); i++) await sleep(100);
    if (ready()) { await MathJax.startup.promise; mathjax = "ran"; } else mathjax = "missing";
  }
  const images = [...document.images];
  for (const img of images) img.loading = "eager";
  await Promise.all(images.map((img) => img.complete ? null : new Promise((resolve) => {
    img.addEventListener("load", resolve); img.addEventListener("error", resolve);
    setTimeout(resolve, 20000);
  })));
  await document.fonts.ready;
  const skip = "pre, code, script, style, textarea, mjx-container, .math";
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const rawTex = [];
  const texPattern = /\$\$|\\[A-Za-z]{2,}|\\[()[\]]/;
  for (let node; (node = walker.nextNode()); ) {
    if (node.parentElement.closest(skip)) continue;
    const found = node.textContent.match(texPattern);
    if (found) {
      const at = Math.max(0, found.index - 30);
      rawTex.push(node.textContent.slice(at, found.index + 40).replace(/\s+/g, " ").trim());
    }
  }
  const main = document.querySelector("main") || document.body;
  // Code and output blocks wider than the text column: every <pre>, every autodoc
  // signature, and anything else in the column that scrolls sideways, except math
  // (a wide equation is not a code block).
  const column = document.querySelector("article.bd-article") || main;
  const right = column.getBoundingClientRect().right;
  const canvas = document.createElement("canvas").getContext("2d");
  // Measured with every collapsed part open (a hidden cell's input is as wide when shown).
  const closed = [...column.querySelectorAll("details:not([open])")];
  for (const details of closed) details.open = true;
  const candidates = [...column.querySelectorAll("*")].filter((el) => {
    if (el.matches("pre, dt.sig")) return true;
    if (el.closest("mjx-container, .math")) return false;
    return ["auto", "scroll"].includes(getComputedStyle(el).overflowX);
  });
  // A block is the innermost of nested candidates (an output's <div> holds its <pre>).
  const innermost = (els) => els.filter((el) => !els.some((o) => o !== el && el.contains(o)));
  const blocks = innermost(candidates);
  const shown = candidates.filter((el) => el.getClientRects().length > 0);
  const tooWide = innermost(shown.filter((el) => el.scrollWidth > el.clientWidth
    || el.getBoundingClientRect().right > right + 0.5));
  const widest = (el) => {  // the line of el's text that takes the most room
    const style = getComputedStyle(el);
    canvas.font = `${style.fontStyle} ${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
    const text = el.innerText || el.textContent;
    const lines = text.split("\n").map((line) => line.replace(/\s+$/, ""));
    return lines.reduce((a, b) => (canvas.measureText(b).width > canvas.measureText(a).width
      ? b : a), "");
  };
  const kind = (el) => el.closest(".cell_output") ? "output block"
    : el.closest(".cell_input") ? "code cell"
    : el.matches("dt.sig") ? "signature"
    : el.closest(".doctest") ? "doctest"
    : el.tagName === "PRE" ? "code block"
    : `<${el.tagName.toLowerCase()}${el.className ? "." + el.className.split(" ")[0] : ""}>`;
  const wide = tooWide.map((el) => ({
    kind: kind(el), line: widest(el), scroll: el.scrollWidth, client: el.clientWidth,
    right: Math.round(el.getBoundingClientRect().right - right),
  }));
  for (const details of closed) details.open = false;
  return {
    blocks: blocks.length,
    wide,
    title: document.title,
    text: main.innerText.trim().length,
    height: Math.max(document.documentElement.scrollHeight, document.body.scrollHeight),
    mathjax,
    math: math.length,
    untypeset: math.filter((el) => !el.querySelector("mjx-container"))
      .map((el) => el.textContent.trim().slice(0, 80)),
    typeset: document.querySelectorAll("mjx-container").length,
    mathErrors: [...document.querySelectorAll("mjx-merror")]
      .map((el) => el.getAttribute("data-mjx-error") || el.textContent.slice(0, 80)),
    rawTex,
    images: images.map((img) => ({
      src: img.getAttribute("src"), natural: img.naturalWidth, shown: img.clientWidth,
      displayed: img.getClientRects().length > 0 && getComputedStyle(img).visibility !== "hidden",
    })),
    links: [...document.querySelectorAll("a[href], area[href]")]
      .map((a) => ({ href: a.getAttribute("href"), url: a.href })),
    ids: [...document.querySelectorAll("[id]")].map((el) => el.id)
      .concat([...document.querySelectorAll("a[name]")].map((a) => a.name)),
  };
})()
"""


# Resolves after the next two frames are painted.
FRAME = "new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))"


def console_errors(events: list[dict]) -> list[str]:
    errors = []
    for event in events:
        method, params = event["method"], event["params"]
        if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            args = [str(a.get("value", a.get("description", ""))) for a in params["args"]]
            errors.append(f"console.{params['type']}: {' '.join(args)[:300]}")
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            errors.append(f"uncaught exception: {str(text)[:300]}")
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]
            errors.append(f"console error: {entry['text'][:300]} {entry.get('url', '')}".strip())
        elif method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if urlparse(url).scheme not in ("file", "data", "blob", "about"):
                errors.append(f"requested {url[:200]} from the network")
    return list(dict.fromkeys(errors))


class _Ids(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and (name == "id" or (tag == "a" and name == "name")):
                self.ids.add(value)


def ids_in(path: Path, known: dict[Path, set[str]]) -> set[str]:
    if path not in known:
        parser = _Ids()
        parser.feed(path.read_text(encoding="utf-8", errors="replace"))
        known[path] = parser.ids
    return known[path]


def link_problems(links: list[dict], html: Path, known: dict[Path, set[str]]) -> list[str]:
    problems = []
    for link in links:
        url = urlparse(link["url"])
        if url.scheme != "file":
            continue
        target = Path(unquote(url.path))
        if target.is_dir():
            target = target / "index.html"
        where = f"link {link['href']!r}"
        if not target.exists():
            problems.append(f"{where}: {target} does not exist")
        elif url.fragment and target.suffix == ".html":
            if unquote(url.fragment) not in ids_in(target.resolve(), known):
                problems.append(f"{where}: no id {unquote(url.fragment)!r} in {target.name}")
    return list(dict.fromkeys(problems))


def save_screenshots(
    browser: Browser, session: str, metrics: dict, height: int, shot: Path
) -> None:
    """The whole page, in parts of SCREENSHOT_PART px: the window is made as tall as the page
    (so that nothing is left unpainted below the fold), then each part is captured."""
    height = min(height, MAX_SCREENSHOT_HEIGHT)
    browser.call("Emulation.setDeviceMetricsOverride", {**metrics, "height": height}, session)
    browser.call("Runtime.evaluate", {"expression": FRAME, "awaitPromise": True}, session)
    for part, top in enumerate(range(0, height, SCREENSHOT_PART), start=1):
        clip = {"x": 0, "y": top, "width": metrics["width"], "scale": 1}
        clip["height"] = min(SCREENSHOT_PART, height - top)
        image = browser.call("Page.captureScreenshot", {"format": "png", "clip": clip}, session)
        name = shot if part == 1 else shot.with_name(f"{shot.stem}-{part}{shot.suffix}")
        name.write_bytes(base64.b64decode(image["data"]))


def wide_blocks(wide: list[dict]) -> list[str]:
    """A problem for each code or output block wider than the text column, naming the
    line that takes the most room."""
    problems = []
    for block in wide:
        size = f"{block['scroll']} px of content in {block['client']} px"
        if block["right"] > 0:
            size += f", {block['right']} px past the column"
        problems.append(
            f"{block['kind']} wider than its column at a {WINDOW[0]}-px window ({size}): "
            f"{block['line'].strip()[:WIDE_LINE_SHOWN]!r}"
        )
    return problems


def check_page(
    browser: Browser,
    html: Path,
    page: str,
    shot: Path | None,
    known: dict[Path, set[str]],
    counts: dict[str, str],
) -> list[str]:
    """Everything wrong with ``page`` as headless Chromium shows it; saves ``shot`` (if any) and
    notes in ``counts[page]`` what was checked."""
    target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})
    session = session["sessionId"]
    problems = []
    try:
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.call(f"{domain}.enable", session=session)
        metrics = {"width": WINDOW[0], "height": WINDOW[1], "deviceScaleFactor": 1, "mobile": False}
        browser.call("Emulation.setDeviceMetricsOverride", metrics, session)
        path = (html / f"{page}.html").resolve()
        navigated = browser.call("Page.navigate", {"url": path.as_uri()}, session)
        if navigated.get("errorText"):
            return [f"did not load: {navigated['errorText']}"]
        browser.wait_for("Page.loadEventFired", session)
        params = {"expression": INSPECT, "awaitPromise": True, "returnByValue": True}
        result = browser.call("Runtime.evaluate", params, session)
        if "exceptionDetails" in result:
            return [f"the inspection script failed: {result['exceptionDetails']}"]
        found = result["result"]["value"]
        if shot is not None:
            save_screenshots(browser, session, metrics, found["height"], shot)
        counts[page] = (
            f"{found['typeset']} equations, {len(found['images'])} images, "
            f"{len(found['links'])} links, {found['blocks']} code and output blocks"
        )
        problems += wide_blocks(found["wide"])
        problems += console_errors(browser.events(session))
        if found["text"] < 50:
            problems.append(f"renders almost no text ({found['text']} characters in <main>)")
        if found["mathjax"] == "missing":
            problems.append(f"MathJax did not start; {found['math']} math elements not typeset")
        untypeset = found["untypeset"]
        problems += [f"math not typeset: {text!r}" for text in untypeset[:5]]
        if len(untypeset) > 5:
            problems.append(f"... and {len(untypeset) - 5} more math elements not typeset")
        problems += [f"MathJax error: {text!r}" for text in found["mathErrors"]]
        problems += [f"raw TeX left in the text: {text!r}" for text in found["rawTex"]]
        for img in found["images"]:
            if img["natural"] == 0:
                problems.append(f"image {img['src']} did not load (naturalWidth 0)")
            elif img["displayed"] and img["shown"] < MIN_SHOWN * img["natural"]:
                problems.append(
                    f"image {img['src']} shown {img['shown']} px wide of its natural "
                    f"{img['natural']} px ({img['shown'] / img['natural']:.0%} < "
                    f"{MIN_SHOWN:.0%}) at a {WINDOW[0]}-px window"
                )
        known[path] = set(found["ids"])
        problems += link_problems(found["links"], html, known)
        expected = colab_url(page)
        if expected and expected not in {link["url"] for link in found["links"]}:
            colab = [link["url"] for link in found["links"] if "colab" in link["url"]]
            problems.append(f"no Colab launch link to {expected} (found: {colab or 'none'})")
        return problems
    finally:
        try:
            browser.call("Target.closeTarget", {"targetId": target}, timeout=10)
        except BrowserError:
            pass
        browser.forget(session)


def check_in_browser(
    executable: str, html: Path, screenshots: Path | None
) -> tuple[int, list[str]]:
    if screenshots is not None:
        screenshots.mkdir(parents=True, exist_ok=True)
        for old in screenshots.glob("*.png"):
            old.unlink()
    problems = []
    known: dict[Path, set[str]] = {}
    counts: dict[str, str] = {}
    pages = [p for p in pages_from_toc() if (html / f"{p}.html").is_file()]
    with tempfile.TemporaryDirectory(prefix="check-book-") as tmp:
        browser = Browser(executable, Path(tmp))
        print(f"check_built_book: {browser.version}, headless, no network, {WINDOW[0]}-px window")
        try:
            for page in pages:
                name = page.replace("/", "__") + ".png"
                shot = None if screenshots is None else screenshots / name
                try:
                    found = check_page(browser, html, page, shot, known, counts)
                except BrowserError as error:
                    found = [f"the browser failed on this page: {error}"]
                problems += [f"{page}: {problem}" for problem in found]
                verdict = f"{len(found)} problem(s)" if found else "ok"
                print(f"  {page}: {verdict} ({counts.get(page, 'not measured')})")
        finally:
            browser.close()
    return len(pages), problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("html", nargs="?", type=Path, default=ROOT / "_build" / "html")
    parser.add_argument(
        "--screenshots", type=Path, help="save a screenshot of each page in this folder"
    )
    args = parser.parse_args()
    html = args.html.resolve()
    screenshots = None if args.screenshots is None else args.screenshots.resolve()
    start = time.monotonic()
    problems = check(html)
    executable = find_browser()
    pages = 0
    if executable is None:
        message = (
            f"Chromium is not installed, so no page of the book was opened. Install it: {INSTALL}"
        )
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            problems.append(f"{message}. CI=true requires the browser check.")
        else:
            bar = "!" * 78
            print(
                f"{bar}\ncheck_built_book: WARNING: {message}\n"
                f"check_built_book: SKIPPED the browser check of every page.\n{bar}",
                file=sys.stderr,
            )
    else:
        try:
            pages, found = check_in_browser(executable, html, screenshots)
            problems += found
        except BrowserError as error:
            problems.append(str(error))
    elapsed = time.monotonic() - start
    summary = f"{pages} pages checked in Chromium in {elapsed:.1f} s"
    if pages and screenshots is not None:
        summary += f"; screenshots in {screenshots}"
    if problems:
        print(f"check_built_book: FAILED ({len(problems)} problems; {summary})")
        print(" - " + "\n - ".join(problems))
        return 1
    print(
        f"check_built_book: {len(pages_from_toc())} pages present, MathJax served locally, "
        f"no CDN; {summary}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
