"""The grader of the "predict, then measure" exercises: the learner's number against an exact
count or a committed result, with the usual slips named."""

from __future__ import annotations

from typing import Any

from vit_tutorial.exercises._common import NOT_ATTEMPTED, Slips, as_number, kind_of, passed, rows


def _number(x: float) -> str:
    """``x`` as a message shows it: a whole number with thousands separators, else 3 digits."""
    if float(x).is_integer() and abs(x) < 1e7:
        return f"{int(x):,}"
    return f"{x:.3g}"


def grade_prediction(
    name: str,
    variable: str,
    predicted: Any,
    actual: float,
    *,
    what: str,
    tolerance: float | str,
    slips: Slips = (),
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
        ...                  slips={"count the class token": 196})
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
        passed(shown, name)
        return
    if tolerance == "sign":
        margin = "the right sign"
    else:
        margin = f"within ±{float(tolerance):.0%}" if tolerance else "the exact number"
    hint = _nearest_slip(predicted, actual, tolerance, slips)
    raise AssertionError(f"{shown} {hint or otherwise or f'the exercise asks for {margin}'}")


def _nearest_slip(guess: float, actual: float, tolerance: float | str, slips: Slips) -> str | None:
    """The explanation of the slip whose number ``guess`` is nearest to, among those it is
    within the exercise's margin of (their exact number when the margin is 0 or a sign) and
    nearer to than to ``actual``; None when there is none. An exact slip is the nearest; of
    two slips equally near, the first listed."""
    fits = [
        (abs(guess - wrong), why)
        for why, wrong in rows(slips)
        if abs(guess - wrong) <= (0.0 if tolerance == "sign" else float(tolerance) * abs(wrong))
        and abs(guess - wrong) < abs(guess - actual)
    ]
    return min(fits, key=lambda fit: fit[0])[1] if fits else None
