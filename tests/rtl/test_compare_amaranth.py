# amaranth: UnusedElaboratable=no
"""The split signed comparison against Python's ``>``, on every pair of values of small widths."""

import itertools

import pytest
from amaranth.hdl import Module, Signal, signed
from amaranth.sim import Simulator

from heteroreason.rtl.compare import greater_split


@pytest.mark.parametrize("width, parts", [(2, 2), (3, 2), (5, 2), (6, 2), (6, 3), (7, 4), (8, 8)])
def test_greater_split_agrees_with_greater_on_every_pair(width, parts):
    m = Module()
    a, b = Signal(signed(width)), Signal(signed(width))
    out = Signal()
    m.d.comb += out.eq(greater_split(a, b, parts))
    values = range(-(1 << (width - 1)), 1 << (width - 1))
    pairs = list(itertools.product(values, values))
    got = []

    async def testbench(ctx):
        for x, y in pairs:
            ctx.set(a, x)
            ctx.set(b, y)
            got.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(testbench)
    sim.run()
    wrong = [(x, y) for (x, y), g in zip(pairs, got, strict=True) if g != (x > y)]
    assert not wrong, f"greater_split ({parts} parts) differs from > at width {width}: {wrong[:5]}"


@pytest.mark.parametrize("a_width, b_width", [(4, 5), (1, 1)])
def test_greater_split_refuses_values_of_other_widths(a_width, b_width):
    with pytest.raises(ValueError, match=rf"^greater_split needs two values of one width of at "
                                         rf"least 2 bits, not {a_width} and {b_width}$"):
        greater_split(Signal(signed(a_width)), Signal(signed(b_width)))


@pytest.mark.parametrize("parts", [1, 9, True, 2.0])
def test_greater_split_refuses_a_number_of_parts_out_of_range(parts):
    message = rf"^greater_split's parts must be an integer in \[2, 8\], not {parts!r}$"
    with pytest.raises(ValueError, match=message):
        greater_split(Signal(signed(8)), Signal(signed(8)), parts)
