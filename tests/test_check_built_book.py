"""tools/check_built_book.py: the width check fails on a block wider than its column.

The browser part runs on a small page made here, styled like the book (a 600-px column, a
14-px monospace, ``_ext/static/page_width.css``), in headless Chromium; it is skipped where
Chromium is not installed (``make`` installs it).
"""

from __future__ import annotations

from pathlib import Path

import check_built_book
import pytest

ROOT = Path(__file__).resolve().parents[1]
CSS = ROOT / "_ext" / "static" / "page_width.css"
LONG_CODE = "wide_code = " + " + ".join(f"term_{i}" for i in range(20))
LONG_OUTPUT = "printed: " + " ".join(f"value_{i}" for i in range(30))
LONG_SIGNATURE = "vit_tutorial.example.function(" + ",".join(f"p{i}=0" for i in range(30))
HIDDEN_CODE = "hidden_code = " + " * ".join(f"factor_{i}" for i in range(20))

PAGE = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8">
<style>
  body {{ margin: 0; font: 16px sans-serif; }}
  article.bd-article {{ width: 600px; }}
  pre {{ font: 14px monospace; overflow: auto; padding: 8px; }}
</style>
<link rel="stylesheet" href="{CSS.as_uri()}">
</head><body><main><div class="bd-content"><article class="bd-article">
<p>A page made by the test: some prose, then code and output blocks of every kind.</p>
<div class="cell_input"><pre>{LONG_CODE}</pre></div>
<div class="cell_input"><pre>short = 1</pre></div>
<div class="cell_output"><pre>{LONG_OUTPUT}</pre></div>
<dl class="py function"><dt class="sig sig-object py">{LONG_SIGNATURE})</dt>
<dd><p>A signature without a space to break at: the stylesheet wraps it anywhere.</p></dd></dl>
<details class="hide above-input"><summary>Show code</summary>
<div class="cell_input"><pre>{HIDDEN_CODE}</pre></div></details>
</article></div></main></body></html>
"""


def test_wide_blocks_names_the_kind_and_the_widest_line():
    line = "x" * 120
    [problem] = check_built_book.wide_blocks(
        [{"kind": "code cell", "line": line, "scroll": 900, "client": 600, "right": 0}]
    )
    assert problem.startswith("code cell wider than its column")
    assert "900 px of content in 600 px" in problem
    assert repr("x" * check_built_book.WIDE_LINE_SHOWN) in problem
    assert check_built_book.wide_blocks([]) == []


@pytest.mark.skipif(check_built_book.find_browser() is None, reason="Chromium is not installed")
def test_the_browser_check_reports_wide_code_and_not_wrapped_output(tmp_path):
    html = tmp_path / "html"
    html.mkdir()
    (html / "page.html").write_text(PAGE, encoding="utf-8")
    profile = tmp_path / "profile"
    profile.mkdir()
    browser = check_built_book.Browser(check_built_book.find_browser(), profile)
    counts: dict[str, str] = {}
    try:
        problems = check_built_book.check_page(
            browser, html, "page", tmp_path / "page.png", {}, counts
        )
    finally:
        browser.close()
    wide = [p for p in problems if "wider than its column" in p]
    # the code cell's line and the collapsed cell's line; output and signature wrap
    assert len(wide) == 2, problems
    assert wide[0].startswith("code cell wider than its column") and LONG_CODE[:80] in wide[0]
    assert HIDDEN_CODE[:80] in wide[1]
    assert not any(LONG_OUTPUT[:40] in p or "example.function" in p for p in problems)
    assert "5 code and output blocks" in counts["page"]
