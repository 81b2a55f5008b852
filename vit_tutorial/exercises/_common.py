"""Helpers shared by the exercise checkers.

Every checker is wrapped in :func:`checker`, which gives it three properties in one place:
it leaves no trace (the learner's random state is the same afterwards), its messages come
out wrapped to :data:`WIDTH` columns, as a chapter prints them, and an answer that is still
the chapter's stub (it raises :class:`NotImplementedError`) gets a one-line reminder
instead of a traceback.
"""

from __future__ import annotations

import functools
import numbers
import re
import textwrap
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import torch
from torch import Tensor

__all__ = [
    "NOT_ATTEMPTED",
    "WIDTH",
    "as_number",
    "call_safely",
    "checker",
    "close",
    "diagnose",
    "dtype_name",
    "grade_loss",
    "grade_prediction",
    "kind_of",
    "passed",
    "scalar_loss",
    "shape_of",
    "wrap",
]

WIDTH = 75
"""Columns of a checker's message, prefix included: what the book's column shows."""

NOT_ATTEMPTED = "not attempted yet: fill in `{name}` above and re-run"
"""What a checker prints when the learner's function still raises NotImplementedError."""

_PREFIX = "AssertionError: "  # what a chapter prints before the message
# Short formulas stay on one line: a parenthesis without nested ones, or a quoted pattern.
_KEEP_TOGETHER = re.compile(r"\([^()]{1,30}\)|(?<![A-Za-z])'[^']{1,40}'")
_GLUE = "\0"  # stands for a space that must not break while textwrap runs
F = TypeVar("F", bound=Callable[..., None])


def wrap(text: str, first_line_taken: int = 0) -> str:
    """Wrap ``text`` to :data:`WIDTH` columns, each paragraph (line) on its own.

    ``first_line_taken`` columns of the first line are already used by a prefix, such as
    ``"AssertionError: "``. Words are never split, and neither are short formulas: a
    parenthesis such as ``(w + 1)`` or a quoted pattern such as ``'b n (h d)'``.

    Example:
        >>> message = wrap("word " * 30, first_line_taken=len("AssertionError: "))
        >>> [len(line) for line in message.splitlines()]  # 16 + 59, then 74 and the rest
        [59, 74, 14]
        >>> print(wrap("x" * 70 + " lr·(t + 1)/(w + 1)"))
        xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx
        lr·(t + 1)/(w + 1)
    """
    lines: list[str] = []
    for paragraph in text.split("\n"):
        glued = _KEEP_TOGETHER.sub(lambda m: m.group().replace(" ", _GLUE), paragraph)
        taken = first_line_taken if not lines else 0
        wrapped = textwrap.wrap(
            glued, WIDTH, initial_indent="x" * taken, break_long_words=False, break_on_hyphens=False
        )
        if taken and wrapped:
            wrapped[0] = wrapped[0][taken:]
        lines += [line.replace(_GLUE, " ") for line in wrapped] or [""]
    return "\n".join(lines)


def checker(fn: F) -> F:
    """Decorate a ``check_*`` function: no trace on the random state, wrapped messages.

    The checker runs inside :func:`torch.random.fork_rng` with a fixed seed, so what it
    draws, and what the learner's answer draws, is reproducible and invisible afterwards.
    An :class:`AssertionError` it raises gets its message wrapped to fit the page after
    ``"AssertionError: "``. When the learner's answer raises :class:`NotImplementedError`
    (the chapter's stub, untouched), the checker prints :data:`NOT_ATTEMPTED` and returns.

    Example:
        >>> @checker
        ... def check_double(answer):
        ...     assert answer(2) == 4, "double 2 is 4"
        >>> def double(x):
        ...     raise NotImplementedError
        >>> check_double(double)
        not attempted yet: fill in `double` above and re-run
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            try:
                return fn(*args, **kwargs)
            except (NotImplementedError, AssertionError) as error:
                if _is_stub(error):
                    print(NOT_ATTEMPTED.format(name=_answer_name(args, kwargs)))
                    return None
                error.args = (wrap(str(error), len(_PREFIX)),)
                raise

    return wrapper  # type: ignore[return-value]


def _is_stub(error: BaseException) -> bool:
    """True when ``error`` is, or was raised from, a :class:`NotImplementedError`."""
    return isinstance(error, NotImplementedError) or isinstance(
        error.__cause__, NotImplementedError
    )


def _answer_name(args: tuple, kwargs: dict) -> str:
    """The name of the learner's function: the checker's first argument."""
    answer = args[0] if args else next(iter(kwargs.values()), None)
    return getattr(answer, "__name__", "your function")


def call_safely(fn: Callable, args: tuple, what: str, grad: bool = False) -> Any:
    """``fn(*args)``, with autograd only if ``grad``; a crash becomes an :class:`AssertionError`.

    The message names the case (``what``) and the learner's error, so that the learner
    sees their own bug rather than a traceback into the checker. (When that error is a
    :class:`NotImplementedError`, :func:`checker` reports "not attempted" instead.)
    """
    try:
        with torch.set_grad_enabled(grad):
            return fn(*args)
    except Exception as error:  # reported to the learner
        raise AssertionError(f"fn crashed on {what}: {type(error).__name__}: {error}") from error


def scalar_loss(got: Any, where: str, batch: int, per_image: str) -> Tensor:
    """A learner's loss as a 0-dimensional tensor; an AssertionError when it is not a tensor,
    is one loss per image (``per_image`` says what to do instead), or has another shape."""
    if not isinstance(got, Tensor):
        raise AssertionError(
            f"for {where}: return a tensor, got {type(got).__name__}; a loss must stay "
            "a tensor for loss.backward()"
        )
    if got.shape == (batch,):
        raise AssertionError(
            f"for {where}: you return one loss per image, shape ({batch},); {per_image}"
        )
    if got.numel() != 1:
        raise AssertionError(f"for {where}: return one number, got shape {tuple(got.shape)}")
    return got.reshape(())


def close(a: Tensor, b: Tensor, atol: float = 1e-5) -> bool:
    """True when ``a`` and ``b`` have the same shape and values within ``atol``.

    Both are compared in float64, so an answer computed in another floating dtype than
    the reference (float64, say) is judged by its values.
    """
    if a.shape != b.shape:
        return False
    return torch.allclose(
        a.detach().to(torch.float64), b.detach().to(torch.float64), atol=atol, rtol=0.0
    )


def diagnose(
    got: Tensor, mistakes: Iterable[tuple[str, Tensor]], otherwise: str, atol: float = 1e-5
) -> str:
    """The explanation of the first mistake whose result ``got`` matches, else ``otherwise``.

    ``mistakes`` pairs an explanation with what that mistake computes.

    Example:
        >>> diagnose(torch.tensor(2.0), [("doubled", torch.tensor(2.0))], "compare")
        'doubled'
    """
    return next((why for why, wrong in mistakes if close(got, wrong, atol)), otherwise)


def grade_loss(
    fn: Callable,
    reference: Callable[..., Tensor],
    mistakes: Callable[..., Iterable[tuple[str, Tensor]]],
    args: tuple,
    where: str,
    *,
    per_image: str,
    otherwise: str,
    atol: float = 1e-5,
    not_finite: str | None = None,
) -> None:
    """Grade one case of a learner's loss: ``fn(*args)`` against ``reference(*args)``.

    ``fn`` gets copies of the tensors of ``args`` (the first one batch-first) and must return
    the reference's 0-dimensional loss within ``atol`` (:func:`scalar_loss`, with
    ``per_image``). Otherwise an :class:`AssertionError` gives both values and the explanation
    of the first of ``mistakes(*args)`` that the answer matches (:func:`diagnose`), else
    ``otherwise``; a non-finite answer is explained by ``not_finite``, when given.

    Example:
        >>> def mean(x):
        ...     return x.mean()
        >>> summed = lambda x: [("you summed: take the mean", x.sum())]
        >>> grade_loss(torch.sum, mean, summed, (torch.ones(3),), "x", per_image="", otherwise="")
        Traceback (most recent call last):
        ...
        AssertionError: for x: got 3.0000, want 1.0000; you summed: take the mean
    """
    copies = tuple(a.clone() if isinstance(a, Tensor) else a for a in args)
    got = scalar_loss(call_safely(fn, copies, where), where, len(args[0]), per_image)
    want = reference(*args)
    if close(got, want, atol):
        return
    if not_finite is not None and not torch.isfinite(got):
        raise AssertionError(f"for {where}: the loss is {got.item()}: {not_finite}")
    hint = diagnose(got, mistakes(*args), otherwise, atol)
    raise AssertionError(f"for {where}: got {got.item():.4f}, want {want.item():.4f}; {hint}")


def dtype_name(dtype: torch.dtype) -> str:
    """``'float32'`` for ``torch.float32``, as a message names a dtype."""
    return str(dtype).removeprefix("torch.")


def zero_one_mask(got: Tensor, what: str) -> Tensor:
    """A learner's mask of 0s and 1s (or False and True) as booleans; an AssertionError naming
    ``what`` when it holds anything else."""
    if not ((got == 0) | (got == 1)).all():
        raise AssertionError(f"{what}: the mask must hold True/False (or 1/0) only")
    return got == 1


def shape_of(value: Any) -> Any:
    """A tensor's shape as a tuple, anything else by its type's name, for a message."""
    return tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__


def passed(name: str, detail: str) -> None:
    """Print the confirmation a learner sees when a checker passes, wrapped to the page."""
    print(wrap(f"Correct! {name}: {detail}"))


def _number(x: float) -> str:
    """``x`` as a message shows it: a whole number with thousands separators, else 3 digits."""
    if float(x).is_integer() and abs(x) < 1e7:
        return f"{int(x):,}"
    return f"{x:.3g}"


def as_number(value: Any) -> int | float | None:
    """``value`` as a Python int or float when it is one number, else None.

    A number is an int or a float, a NumPy scalar (``np.float32(0.07)``, ``np.int64(785)``),
    or a 0-d NumPy array or tensor holding one. A bool is not a number, nor is a tensor of
    shape ``(1,)``: that is a vector.

    Example:
        >>> import numpy as np
        >>> as_number(np.float32(0.5)), as_number(torch.tensor(785)), as_number(True)
        (0.5, 785, None)
    """
    if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
        value = value.item()  # a NumPy scalar, a 0-d array or tensor: its Python number
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def expect_number(value: Any, what: str, name: str = "a number") -> int | float:
    """``value`` as a number (:func:`as_number`), or an AssertionError naming ``what`` and
    what ``value`` is instead."""
    if (number := as_number(value)) is None:
        raise AssertionError(f"{what}: return {name}, got {kind_of(value)}")
    return number


def kind_of(value: Any) -> str:
    """What ``value`` is, for a message that rejects it: its type, and its shape if it has one.

    Example:
        >>> kind_of(torch.zeros(1)), kind_of(torch.tensor(True))
        ('Tensor of shape (1,)', 'bool')
    """
    if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
        return type(value.item()).__name__  # a 0-d tensor of a bool is a bool
    shape = getattr(value, "shape", None)
    shown = f" of shape {tuple(shape)}" if isinstance(shape, tuple) else ""
    return type(value).__name__ + shown


def grade_prediction(
    name: str,
    variable: str,
    predicted: Any,
    actual: float,
    *,
    what: str,
    tolerance: float | str,
    slips: Iterable[tuple[str, float]] = (),
    source: str = "",
    otherwise: str | None = None,
) -> None:
    """Grade a "predict, then measure" exercise: the learner's number against ``actual``.

    ``predicted`` is what the learner assigned to ``variable`` (``...``, the chapter's stub,
    prints :data:`NOT_ATTEMPTED`). ``actual`` is an exact count or a committed result, never
    a live timing, so the verdict is the same on every machine. ``tolerance`` is a relative
    margin (``0.1`` accepts ±10%) or ``"sign"`` (the right direction of a change). Either way
    the measured value is shown; a wrong prediction that is one of ``slips`` (within the same
    margin of the slip's number, and nearer to it than to ``actual``; of several, the one it
    is nearest) gets that slip's explanation; any other wrong one gets ``otherwise`` (by
    default, the margin asked for). ``predicted`` may be any number :func:`as_number` reads.

    Example:
        >>> grade_prediction("check_tokens", "tokens", 197, 197, what="tokens", tolerance=0)
        Correct! check_tokens: you predicted 197 tokens; measured: 197.
        >>> grade_prediction("check_tokens", "tokens", 196, 197, what="tokens", tolerance=0,
        ...                  slips=[("count the class token", 196)])
        Traceback (most recent call last):
        ...
        AssertionError: you predicted 196 tokens; measured: 197. count the class token
    """
    if predicted is Ellipsis:
        print(NOT_ATTEMPTED.format(name=variable))
        return
    number = as_number(predicted)
    if number is None:
        raise AssertionError(f"{variable} must be a number, got {kind_of(predicted)}")
    predicted = number

    def agrees(guess: float) -> bool:
        if tolerance == "sign":
            return (guess > 0) == (actual > 0) and (guess < 0) == (actual < 0)
        return abs(guess - actual) <= float(tolerance) * abs(actual)

    shown = f"you predicted {_number(predicted)} {what}; measured: {_number(actual)}"
    shown += f" ({source})." if source else "."
    if agrees(predicted):
        passed(name, shown)
        return
    if tolerance == "sign":
        margin = "the right sign"
    else:
        margin = f"within ±{float(tolerance):.0%}" if tolerance else "the exact number"
    hint = _nearest_slip(predicted, actual, tolerance, slips)
    raise AssertionError(f"{shown} {hint or otherwise or f'the exercise asks for {margin}'}")


def _nearest_slip(
    guess: float, actual: float, tolerance: float | str, slips: Iterable[tuple[str, float]]
) -> str | None:
    """The explanation of the slip whose number ``guess`` is nearest to, among those it is
    within the exercise's margin of (their exact number when the margin is 0 or a sign) and
    nearer to than to ``actual``; None when there is none. An exact slip is the nearest; of
    two slips equally near, the first listed."""
    fits = [
        (abs(guess - wrong), why)
        for why, wrong in slips
        if abs(guess - wrong) <= (0.0 if tolerance == "sign" else float(tolerance) * abs(wrong))
        and abs(guess - wrong) < abs(guess - actual)
    ]
    return min(fits, key=lambda fit: fit[0])[1] if fits else None
