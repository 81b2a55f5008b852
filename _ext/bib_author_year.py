"""A bibliography whose labels read like the in-text citations: [Vaswani et al., 2017].

sphinxcontrib-bibtex cites author-year in the text (``bibtex_reference_style:
author_year``), but its default list style labels entries alpha-style ([VSP+17]). This
extension registers a pybtex formatting style ``authoryear`` (pybtex's ``plain``, sorted
the same way) whose labels are the first author's last name, "and" the second's or
"et al.", and the year, with a, b, ... when two entries would share a label. Select it
with ``bibtex_default_style: authoryear``.
"""

from __future__ import annotations

from collections import Counter

from pybtex.plugin import register_plugin
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle


def _names(entry) -> str:
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    last = [" ".join(p.last_names) for p in people]
    if not last:
        return entry.fields.get("organization", entry.key)
    if len(last) == 1:
        return last[0]
    if len(last) == 2:
        return f"{last[0]} and {last[1]}"
    return f"{last[0]} et al."


class AuthorYearLabels(BaseLabelStyle):
    """Labels ``Last et al., 2021``, made unique with a letter after the year."""

    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        base = [f"{_names(e)}, {e.fields.get('year', 'n.d.')}" for e in entries]
        repeated, seen = Counter(base), Counter()
        for label in base:
            if repeated[label] > 1:
                seen[label] += 1
                label = f"{label}{'abcdefghijklmnopqrstuvwxyz'[seen[label] - 1]}"
            yield label


class AuthorYearStyle(PlainStyle):
    default_label_style = "authoryear"


def setup(app):
    register_plugin("pybtex.style.labels", "authoryear", AuthorYearLabels)
    register_plugin("pybtex.style.formatting", "authoryear", AuthorYearStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
