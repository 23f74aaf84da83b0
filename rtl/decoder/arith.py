"""The integer reference's rounding and saturation as combinational logic (one definition for
every decoder unit): ``rshift_round`` and ``sat`` of
:mod:`heteroreason.model.numerics.qwen2_int8`."""

from amaranth.hdl import Const, Signal, signed, unsigned

__all__ = ["requantize", "round_shift", "saturate", "tree_sum"]


def tree_sum(terms):
    """The sum of ``terms`` as a balanced tree of adders (depth ``log2(len(terms))``; a chain
    of ``sum`` would be as deep as the terms are many)."""
    terms = list(terms)
    if not terms:
        raise ValueError("tree_sum needs at least one term")
    while len(terms) > 1:
        terms = [terms[k] + terms[k + 1] if k + 1 < len(terms) else terms[k]
                 for k in range(0, len(terms), 2)]
    return terms[0]


def round_shift(m, value, shift):
    """``(value + 2**(shift - 1)) >> shift`` for a run-time ``shift`` of 1..63 bits."""
    width = len(value) + 1
    half = Signal(unsigned(64))
    result = Signal(signed(width))
    m.d.comb += [half.eq(Const(1, 64) << (shift - 1)[:6]),
                 result.eq((value + half) >> shift)]
    return result


def saturate(m, value, bits):
    """``value`` clamped to the signed ``bits``-bit range."""
    out = Signal(signed(bits))
    high, low = (1 << (bits - 1)) - 1, -(1 << (bits - 1))
    with m.If(value > high):
        m.d.comb += out.eq(high)
    with m.Elif(value < low):
        m.d.comb += out.eq(low)
    with m.Else():
        m.d.comb += out.eq(value)
    return out


def requantize(m, acc, mult, shift, bits):
    """``sat(rshift_round(acc * mult, shift), bits)``."""
    product = Signal(signed(len(acc) + len(mult) + 1))
    m.d.comb += product.eq(acc * mult)
    return saturate(m, round_shift(m, product, shift), bits)
