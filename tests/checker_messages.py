"""Matching the messages of the exercise checkers, which wrap them to the page width."""


def wrapped(pattern: str) -> str:
    """``pattern`` for ``pytest.raises(match=...)``, whatever lines the message was wrapped to.

    The checkers break lines at spaces only, so a space in ``pattern`` matches any
    whitespace, and ``.`` matches a line break too.
    """
    return "(?s)" + pattern.replace(" ", r"\s+")
