"""Checkers for the book's exercises, one module per chapter.

Each ``check_*`` function takes the learner's function, raises :class:`AssertionError`
with an explanation when it is wrong, and prints a confirmation when it is right.
"""

from vit_tutorial.exercises.attention import check_attention

__all__ = ["check_attention"]
