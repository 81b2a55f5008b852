"""What the exercise checkers share: the decorator, and the graders.

Every checker is wrapped in :func:`checker`, which gives it three properties in one place:
it leaves no trace (the learner's random state is the same afterwards), its messages come
out wrapped to :data:`WIDTH` columns, as a chapter prints them, and an answer that is still
the chapter's stub (it raises :class:`NotImplementedError`) gets a one-line reminder
instead of a traceback.

A checker grades a learner's function case by case with :func:`grade_tensor` (a tensor, or
a count or a shape, against the reference's) or :func:`grade_loss` (a loss), and a number
the learner predicts with ``_predictions.grade_prediction``.
Each names the usual slip the answer is, from its :data:`Slips`.
"""

from __future__ import annotations

import functools
import numbers
import re
import textwrap
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import torch
from torch import Tensor

WIDTH = 75
"""Columns of a checker's message, prefix included: what the book's column shows."""

NOT_ATTEMPTED = "not attempted yet: fill in `{name}` above and re-run"
"""What a checker prints when the learner's function still raises NotImplementedError."""

_PREFIX = "AssertionError: "  # what a chapter prints before the message
# Short formulas stay on one line: a parenthesis without nested ones, or a quoted pattern.
_KEEP_TOGETHER = re.compile(r"\([^()]{1,30}\)|(?<![A-Za-z])'[^']{1,40}'")
_GLUE = "\0"  # stands for a space that must not break while textwrap runs
F = TypeVar("F", bound=Callable[..., None])
_RUNNING: list[str] = []  # the checkers running, the innermost last, as passed() names them


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

    It runs inside :func:`torch.random.fork_rng` with a fixed seed; an :class:`AssertionError`
    is wrapped after ``"AssertionError: "``; a stub prints :data:`NOT_ATTEMPTED` and returns;
    :func:`passed` names it.

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
            _RUNNING.append(fn.__name__)
            try:
                return fn(*args, **kwargs)
            except (NotImplementedError, AssertionError) as error:
                # a stub raises NotImplementedError; call_safely raises an AssertionError from it
                if any(isinstance(e, NotImplementedError) for e in (error, error.__cause__)):
                    answer = args[0] if args else next(iter(kwargs.values()), None)
                    print(NOT_ATTEMPTED.format(name=getattr(answer, "__name__", "your function")))
                    return None
                error.args = (wrap(str(error), len(_PREFIX)),)
                raise
            finally:
                _RUNNING.pop()

    return wrapper  # type: ignore[return-value]


def call_safely(
    fn: Callable, args: tuple, what: str, grad: bool = False, hint: str | Callable[[], str] = ""
) -> Any:
    """``fn(*args)``, with autograd only if ``grad``; a crash becomes an :class:`AssertionError`.

    The message names the case (``what``) and the learner's error, then ``hint`` (a text, or a
    function that finds one), so that the learner sees their own bug rather than a traceback
    into the checker. (When that error is a :class:`NotImplementedError`, :func:`checker`
    reports "not attempted" instead.)
    """
    try:
        with torch.set_grad_enabled(grad):
            return fn(*args)
    except Exception as error:  # reported to the learner
        if callable(hint):
            hint = "" if isinstance(error, NotImplementedError) else hint()
        message = f"fn crashed on {what}: {type(error).__name__}: {error}{hint}"
        raise AssertionError(message) from error


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
    """True when ``a`` and ``b`` have the same shape and values within ``atol``, compared in
    float64, so that an answer in another floating dtype than the reference is judged by its
    values."""
    a, b = a.detach().to(torch.float64), b.detach().to(torch.float64)
    return a.shape == b.shape and torch.allclose(a, b, atol=atol, rtol=0.0)


Slips = Mapping[str, Any] | Iterable[tuple[str, Any]]
"""A checker's usual slips: {explanation: what the slip returns}, or {explanation: a test}, a
function of the answer that is true when the answer is that slip, or its result, or a list of
such values (any of them); or rows of (explanation, what) pairs."""


def rows(slips: Slips) -> Iterable[tuple[str, Any]]:
    """The (explanation, what) pairs of ``slips`` (:data:`Slips`), in their order."""
    return slips.items() if isinstance(slips, Mapping) else slips


def _is(got: Any, wrong: Any, atol: float) -> bool:
    """Whether ``got`` is the slip ``wrong``: a tensor within ``atol``, an equal count or shape,
    a test of the answer that holds (or a test's result), or a list holding one of them."""
    if isinstance(wrong, list):
        return any(_is(got, one, atol) for one in wrong)
    if isinstance(wrong, bool):
        return wrong
    if callable(wrong):
        return bool(wrong(got))
    if isinstance(wrong, Tensor):
        return isinstance(got, Tensor) and close(got, wrong, atol)
    return bool(got == wrong)


def diagnose(got: Any, slips: Slips, otherwise: str, atol: float = 1e-5) -> str:
    """The explanation of the first of ``slips`` that ``got`` is, else ``otherwise``.

    Example:
        >>> diagnose(torch.tensor(2.0), {"doubled": torch.tensor(2.0)}, "compare")
        'doubled'
    """
    with torch.no_grad():
        return next((why for why, wrong in rows(slips) if _is(got, wrong, atol)), otherwise)


def refuse(wrong: Mapping[str, bool], what: str = "") -> None:
    """Raise an AssertionError (after ``what`` and a colon, if given) with the first explanation
    in ``wrong``, ``{explanation: whether the answer is that slip}``, whose condition holds."""
    if why := next((why for why, holds in wrong.items() if holds), None):
        raise AssertionError(f"{what}: {why}" if what else why)


def gap(got: Tensor, want: Tensor) -> float:
    """The largest difference between ``got`` and ``want``, in float64, for a message."""
    return (got.detach().double() - want.detach().double()).abs().max().item()


Message = str | Callable[[Any], str]
"""A message about a wrong answer: a text in which ``{got}`` stands for the answer's shape (or
type) and ``{diff}`` for its largest difference from the right one, or a function of the
answer that writes the message."""


def _written(message: Message, got: Any, want: Any = None) -> str:
    """``message`` about the answer ``got`` (:data:`Message`), ``want`` being the right one."""
    if callable(message):
        return message(got)
    if "{diff}" in message:
        message = message.replace("{diff}", f"{gap(got, want):.3g}")
    return message.replace("{got}", str(shape_of(got)))


def expect_tensor(
    got: Any, shape: tuple, expected: Message, not_tensor: Message | None = None
) -> Tensor:
    """``got``, once it is a tensor of ``shape``; else an AssertionError: ``not_tensor`` for an
    answer that is not a tensor, if given, and otherwise ``expected`` (:data:`Message`)."""
    if not_tensor is not None and not isinstance(got, Tensor):
        raise AssertionError(_written(not_tensor, got))
    if not isinstance(got, Tensor) or tuple(got.shape) != tuple(shape):
        raise AssertionError(_written(expected, got))
    return got


def grade_answer(
    got: Any,
    want: Any,
    what: str,
    slips: Slips | Callable[[], Slips] = (),
    *,
    expected: Message = "",
    otherwise: Message,
    not_tensor: Message | None = None,
    atol: float = 1e-5,
) -> None:
    """Grade an answer ``got`` against ``want``: a tensor, or a count or a shape.

    Another type or shape fails with ``expected`` (:func:`expect_tensor`; a count or a shape
    unless equal; leave it out where the shape is checked already). Values within ``atol`` of
    ``want`` pass (:func:`close`; ``atol=0``: exact); others fail with ``what``, a colon, and
    the explanation of the first of ``slips`` (or of ``slips()``) that ``got`` is, else
    ``otherwise`` (:data:`Message`).

    Example:
        >>> slips = [("you doubled it", torch.tensor([2.0, 4.0]))]
        >>> grade_answer(torch.tensor([2.0, 4.0]), torch.tensor([1.0, 2.0]), "case x", slips,
        ...              expected="return (2,), got {got}", otherwise="off by {diff}")
        Traceback (most recent call last):
        ...
        AssertionError: case x: you doubled it
    """
    if isinstance(want, Tensor):
        expect_tensor(got, tuple(want.shape), expected, not_tensor)
    elif got != want:
        raise AssertionError(_written(expected, got))
    if _is(got, want, atol):
        return
    why = diagnose(got, slips() if callable(slips) else slips, "", atol)
    why = why or _written(otherwise, got, want)
    raise AssertionError(f"{what}: {why}" if what else why)


def grade_tensor(
    fn: Callable,
    args: tuple,
    want: Any,
    what: str,
    slips: Slips | Callable[..., Slips] = (),
    *,
    expected: Message,
    otherwise: Message,
    not_tensor: Message | None = None,
    atol: float = 1e-5,
    call: str | None = None,
    crash: str | Callable[[], str] = "",
) -> Any:
    """Grade one case of a learner's function, ``fn(*args)``, and return its answer.

    ``fn`` runs without autograd on copies of the tensors of ``args``; a crash is reported as
    the learner's (:func:`call_safely`, naming the case ``call`` or ``what``, then ``crash``).
    :func:`grade_answer` grades the answer with ``slips``, or with ``slips(*args)``: what
    usual wrong versions of ``fn`` return for these arguments.
    """
    copies = tuple(a.clone() if isinstance(a, Tensor) else a for a in args)
    got = call_safely(fn, copies, what if call is None else call, hint=crash)
    listed = (lambda: slips(*args)) if callable(slips) else slips
    options = dict(expected=expected, otherwise=otherwise, not_tensor=not_tensor, atol=atol)
    grade_answer(got, want, what, listed, **options)
    return got


def grade_loss(
    fn: Callable,
    args: tuple,
    want: Tensor,
    where: str,
    slips: Callable[..., Slips],
    *,
    per_image: str,
    otherwise: str,
    atol: float = 1e-5,
    not_finite: str | None = None,
) -> None:
    """Grade one case of a learner's loss: ``fn(*args)`` against the 0-dimensional ``want``.

    As :func:`grade_tensor`, but the answer must be one number (:func:`scalar_loss`, with
    ``per_image``; the first of ``args`` is batch-first), and a wrong one is shown beside
    ``want``; a non-finite one is explained by ``not_finite``, when given.

    Example:
        >>> summed = lambda x: [("you summed: take the mean", x.sum())]
        >>> grade_loss(torch.sum, (torch.ones(3),), torch.tensor(1.0), "x", summed,
        ...            per_image="", otherwise="")
        Traceback (most recent call last):
        ...
        AssertionError: for x: got 3.0000, want 1.0000; you summed: take the mean
    """
    copies = tuple(a.clone() if isinstance(a, Tensor) else a for a in args)
    got = scalar_loss(call_safely(fn, copies, where), where, len(args[0]), per_image)
    if close(got, want, atol):
        return
    if not_finite is not None and not torch.isfinite(got):
        raise AssertionError(f"for {where}: the loss is {got.item()}: {not_finite}")
    hint = diagnose(got, slips(*args), otherwise, atol)
    raise AssertionError(f"for {where}: got {got.item():.4f}, want {want.item():.4f}; {hint}")


def dtype_name(dtype: torch.dtype) -> str:
    """``'float32'`` for ``torch.float32``, as a message names a dtype."""
    return str(dtype).removeprefix("torch.")


def as_mask(
    got: Any, shape: tuple, what: str, expected: Message, additive: tuple[Callable, str]
) -> Tensor:
    """A learner's mask as booleans: a tensor of ``shape`` (else ``expected``) of True/False or
    1/0; an additive mask of floats, which the test ``additive[0]`` recognises, is refused with
    the explanation ``additive[1]``."""
    expect_tensor(got, shape, expected, not_tensor=f"{what}: return a tensor, got {{got}}")
    if got.dtype == torch.bool:
        return got
    if got.is_floating_point() and additive[0](got):
        raise AssertionError(f"{what}: {additive[1]}")
    if not ((got == 0) | (got == 1)).all():
        raise AssertionError(f"{what}: the mask must hold True/False (or 1/0) only")
    return got == 1


def shape_of(value: Any) -> Any:
    """A tensor's shape as a tuple, anything else by its type's name, for a message."""
    return tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__


def passed(detail: str, name: str = "") -> None:
    """Print the confirmation a learner sees when a checker passes, wrapped to the page, naming
    ``name`` or else the :func:`checker` running."""
    print(wrap(f"Correct! {name or _RUNNING[-1]}: {detail}"))


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
