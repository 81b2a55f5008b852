"""The stored outputs survive another machine: no float printed past what another CPU keeps.

nbval compares every stored output with a re-execution. A residual near 1e-6 printed with
two significant digits (``1.1e-06``) comes out as ``1.3e-06`` on another CPU, thread count or
BLAS, so nbval fails there and not here. Foreign-CPU emulation (``make foreign-cpu``) does not
reproduce every machine, so this test also refuses such prints statically, in every cell whose
output nbval compares: a float below 1e-4 in magnitude may be printed with one significant
digit at most (better: print the bound the cell asserts, ``below 1e-4``).
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("**/*.ipynb"))
NOTEBOOKS = [p for p in NOTEBOOKS if ".ipynb_checkpoints" not in p.parts]
SMALL = 1e-4
# A decimal number, with an optional exponent; not part of a word or a longer number.
FLOAT = re.compile(r"(?<![\w.])[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?(?![\w.])")


def significant_digits(mantissa: str) -> int:
    """Digits of ``mantissa`` from the first non-zero one (``0.00120`` -> 3, ``1.1`` -> 2)."""
    digits = mantissa.replace(".", "").lstrip("+-").lstrip("0")
    return len(digits)


def fragile_floats(text: str) -> list[str]:
    """Floats in ``text`` below 1e-4 in magnitude printed with more than one digit."""
    found = []
    for match in FLOAT.finditer(text):
        mantissa, exponent = match.group(1), match.group(2)
        if "." not in mantissa and not exponent:
            continue  # an integer
        value = abs(float(match.group(0)))
        if 0 < value < SMALL and significant_digits(mantissa) > 1:
            found.append(match.group(0))
    return found


def compared_text(cell: dict) -> str:
    """What nbval compares of a code cell's outputs, as text."""
    parts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            parts.append("".join(out["text"]))
        for mime in ("text/plain", "text/html", "text/latex", "text/markdown"):
            parts.append("".join(out.get("data", {}).get(mime, "")))
    return "\n".join(parts)


def is_compared(cell: dict) -> bool:
    tags = {t.lower() for t in cell["metadata"].get("tags", [])}
    return not tags & {"nbval-ignore-output", "nbval-skip"}


def test_the_detector_finds_fragile_floats_and_passes_stable_ones():
    assert fragile_floats("residual 1.1e-06, max 2.34e-05") == ["1.1e-06", "2.34e-05"]
    assert fragile_floats("0.000012 and -0.0000101") == ["0.000012", "-0.0000101"]
    assert fragile_floats("tensor([1.0e-07, 3.5e+00])") == ["1.0e-07"]
    # one significant digit, larger numbers, integers and zero are stable enough
    assert fragile_floats("1e-06 below 1e-4: 0.00001, 0.5, 1.25e-03, 12, 0.0") == []
    assert fragile_floats("ViT-B/16 v1.2 2.14.1+cu130 3e-3") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT / "book")))
def test_no_compared_output_prints_a_tiny_float_past_one_digit(path):
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    fragile = [
        (i, fragile_floats(compared_text(cell)))
        for i, cell in enumerate(cells)
        if is_compared(cell)
    ]
    fragile = [(i, found) for i, found in fragile if found]
    assert not fragile, (
        "a float below 1e-4 printed with more than one significant digit changes with the "
        "CPU: print the bound the cell asserts instead, or one digit at most. nbval's cell "
        f"numbers and the values: {fragile}"
    )
