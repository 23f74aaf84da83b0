"""The integer reference's saturation as combinational logic (one definition for every decoder
unit): ``sat`` of :mod:`heteroreason.model.spec.numerics.qwen2_int8`. The registered arithmetic
(adder tree, requantization) is in :mod:`heteroreason.rtl.decoder.pipeline`."""

from amaranth.hdl import Signal, Value, signed

__all__ = ["saturate"]


def saturate(m, value, bits):
    """``value`` (signed) clamped to the signed ``bits``-bit range, decided from its top bits:
    it fits when bits ``bits - 1`` up to its sign all equal the sign (a LUT per few bits, no
    comparator's carry chain)."""
    value = Value.cast(value)
    if not value.shape().signed:
        raise TypeError(f"saturate takes a signed value, not {value.shape()!r}")
    out = Signal(signed(bits))
    if len(value) <= bits:
        m.d.comb += out.eq(value)
        return out
    top = value[bits - 1:]
    high, low = (1 << (bits - 1)) - 1, -(1 << (bits - 1))
    with m.If(~value[-1] & top.any()):
        m.d.comb += out.eq(high)
    with m.Elif(value[-1] & ~top.all()):
        m.d.comb += out.eq(low)
    with m.Else():
        m.d.comb += out.eq(value[:bits].as_signed())
    return out
