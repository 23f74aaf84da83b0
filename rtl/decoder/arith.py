"""The integer reference's saturation as combinational logic (one definition for every decoder
unit): ``sat`` of :mod:`heteroreason.model.numerics.qwen2_int8`. The registered arithmetic
(adder tree, requantization) is in :mod:`heteroreason.rtl.decoder.pipeline`."""

from amaranth.hdl import Signal, signed

__all__ = ["saturate"]


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
