"""Comparisons with constants that export to width-clean Verilog.

Amaranth narrows a constant operand to its minimal width, so ``x == 1`` on a 3-bit ``x`` is
written as ``x == 1'h1`` and ``x == 0`` as ``! x``; Verilator's WIDTH lint rejects both. Comparing
through an XOR against a constant of ``x``'s own width and a reduction keeps every operand at
full width in the generated Verilog.
"""

from amaranth.hdl import Const, Shape, Value

from heteroreason.model import checks

__all__ = ["equals", "greater_split", "is_zero"]


def equals(value, const):
    """``value == const`` for a constant (an int or an int-valued enum member)."""
    value = Value.cast(value)
    width = Shape.cast(value.shape()).width
    return ~(value ^ Const(int(const), width)).any()


def is_zero(value):
    """``value == 0``."""
    return ~Value.cast(value).any()


def greater_split(a, b, parts: int = 2):
    """``a > b`` for two signed values of one width, from ``parts`` slices compared side by side
    (the top one signed, the others unsigned): carry chains of a ``parts``-th of the length,
    then the slices' verdicts merged from the top, a slice deciding when those above it are
    equal."""
    a, b = Value.cast(a), Value.cast(b)
    width = len(a)
    if len(b) != width or width < 2:
        raise ValueError(f"greater_split needs two values of one width of at least 2 bits, "
                         f"not {width} and {len(b)}")
    checks.integer("greater_split's parts", parts, low=2, high=width)
    bounds = [width * k // parts for k in range(parts + 1)]
    verdict = None
    for k in range(parts):  # from the lowest slice up
        lo, hi = bounds[k], bounds[k + 1]
        x, y = a[lo:hi], b[lo:hi]
        greater = x.as_signed() > y.as_signed() if k == parts - 1 else x > y
        verdict = greater if verdict is None else greater | ((x == y) & verdict)
    return verdict
