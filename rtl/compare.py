"""Comparisons with constants that export to width-clean Verilog.

Amaranth narrows a constant operand to its minimal width, so ``x == 1`` on a 3-bit ``x`` is
written as ``x == 1'h1`` and ``x == 0`` as ``! x``; Verilator's WIDTH lint rejects both. Comparing
through an XOR against a constant of ``x``'s own width and a reduction keeps every operand at
full width in the generated Verilog.
"""

from amaranth.hdl import Const, Shape, Value

__all__ = ["equals", "is_zero"]


def equals(value, const):
    """``value == const`` for a constant (an int or an int-valued enum member)."""
    value = Value.cast(value)
    width = Shape.cast(value.shape()).width
    return ~(value ^ Const(int(const), width)).any()


def is_zero(value):
    """``value == 0``."""
    return ~Value.cast(value).any()
