"""Each inline script once per page.

Jupyter Book's build reads the sources in two passes, and sphinx-thebe adds its inline
configuration (``const THEBE_JS_URL = ...``) on each pass. Sphinx removes duplicate script
*files* but not duplicate inline bodies, so every page declared the constant twice, a
JavaScript ``SyntaxError`` in the browser's console. This extension drops exact
duplicates from each page's scripts before the page is written.
"""

from __future__ import annotations


def _dedupe(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        # An inline script's filename is None or "", depending on who added it.
        name = getattr(script, "filename", script) or ""
        key = (str(name), tuple(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app):
    # Late, after the other extensions have added their scripts to the page.
    app.connect("html-page-context", _dedupe, priority=999)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
