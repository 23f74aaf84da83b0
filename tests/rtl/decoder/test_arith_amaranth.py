# amaranth: UnusedElaboratable=no
"""The combinational saturation against the integer reference's ``sat``, exhaustively."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.sim import Simulator

from heteroreason.model.spec.numerics.qwen2_int8 import sat
from heteroreason.rtl.decoder.arith import saturate


@pytest.mark.parametrize("width, bits", [(10, 4), (10, 8), (18, 16), (8, 8), (6, 8)])
def test_saturate_agrees_with_the_reference_on_every_value(width, bits):
    m = Module()
    value = Signal(signed(width))
    out = saturate(m, value, bits)
    assert out.shape() == signed(bits)
    inputs = range(-(1 << (width - 1)), 1 << (width - 1))
    if width > 12:  # every value near the bounds and a spread between
        inputs = sorted(set(range(-(1 << (bits - 1)) - 70, -(1 << (bits - 1)) + 70))
                        | set(range((1 << (bits - 1)) - 70, (1 << (bits - 1)) + 70))
                        | set(range(-(1 << (width - 1)), 1 << (width - 1), 997))
                        | {-(1 << (width - 1)), (1 << (width - 1)) - 1})
    got = []

    async def testbench(ctx):
        for v in inputs:
            ctx.set(value, v)
            got.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(testbench)
    sim.run()
    expected = sat(np.array(list(inputs), dtype=np.int64), bits)
    assert got == [int(e) for e in expected]


def test_saturate_refuses_an_unsigned_value():
    with pytest.raises(TypeError, match=r"^saturate takes a signed value, not unsigned\(8\)$"):
        saturate(Module(), Signal(unsigned(8)), 4)
