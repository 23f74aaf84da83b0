"""A first-in first-out buffer for wide beats whose write enable reaches its memory a column
of block memories at a time."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model import checks
from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.pipeline import GROUP_BITS, Mirrored
from heteroreason.rtl.limits import MULTIPLE_LIMIT, SIZE_LIMIT, WIDTH_LIMIT

__all__ = ["COLUMN_BITS", "PrefetchFIFO", "column_widths"]

# the data width of an UltraRAM (UG573, "UltraRAM Resources": 4K x 72) and of a 36-Kbit block
# RAM's simple dual-port mode (UG573, "Block RAM Resources": 512 x 72): a column a multiple of it
# wide fills its memories, so the buffer's columns cost the memories one buffer of the full width
# would (its 72-bit words, rounded up once)
COLUMN_BITS = 72


def column_widths(width: int) -> list[int]:
    """The widths of the memories of a :class:`PrefetchFIFO` ``width`` bits wide: as many as
    fit of the most :data:`COLUMN_BITS` multiples within
    :data:`~heteroreason.rtl.decoder.pipeline.GROUP_BITS` (1,008 bits), then the rest (14,336
    bits: 14 of 1,008 and one of 224)."""
    checks.integer("width", width, low=1)
    column = GROUP_BITS // COLUMN_BITS * COLUMN_BITS or GROUP_BITS  # (a narrow group: tests)
    return [column] * (width // column) + ([width % column] if width % column else [])


class PrefetchFIFO(wiring.Component):
    """The interface and the cycle-for-cycle behaviour of Amaranth's
    :class:`~amaranth.lib.fifo.SyncFIFOBuffered` (a memory of ``depth - 1`` entries and its
    read register), with the memory split in columns (:func:`column_widths`) whose write
    enables are apart.

    An UltraRAM's or block RAM's write enable is a pin a byte: one write enable for a
    14,336-bit beat is a net of 1,805 loads (synthesized, the U280 design's weight buffer) and
    3,597 for 28,672 bits (the V80's). Here each column's enable is ``w_en`` and its own copy
    of the registered "not full" flag (``w_rdy``, kept apart in synthesis): no net reaches more
    than one column's pins.

    Parameters
    ----------
    width : int
        Bits of a beat.
    depth : int
        Beats held, at least 2 (the memory's ``depth - 1`` and the read register's one).

    Members
    -------
    w_data : In(width)
    w_en : In(1)
    w_rdy : Out(1)
        Registered: the memory has room.
    w_level : Out(range(depth + 1))
    r_data : Out(width)
    r_en : In(1)
    r_rdy : Out(1)
    r_level : Out(range(depth + 1))

    Latency
    -------
    A beat written is readable (``r_rdy``) two cycles later with the FIFO empty:
    :class:`~amaranth.lib.fifo.SyncFIFOBuffered`'s.

    Throughput
    ----------
    A beat written and one read every cycle.
    """

    def __init__(self, *, width, depth):
        # a beat of the widest datapath: lanes of int8 times the rows it carries
        checks.integer("width", width, low=1, high=WIDTH_LIMIT * MULTIPLE_LIMIT * 8,
                       error=TypeError)
        checks.integer("depth", depth, low=2, high=SIZE_LIMIT, error=TypeError)
        self._width = width
        self._depth = depth
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "w_level": Out(range(depth + 1)),
            "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1),
            "r_level": Out(range(depth + 1)),
        })

    @property
    def width(self):
        return self._width

    @property
    def depth(self):
        return self._depth

    def elaborate(self, platform):
        m = Module()
        inner = self.depth - 1
        widths = column_widths(self.width)
        level = Signal(range(inner + 1))  # the memory's entries
        produce = Signal(range(inner))
        consume = Signal(range(inner))
        # the memory has room: a register and a kept copy a column, next cycle's ``level !=
        # inner`` from tests of this cycle's level (no adder before it: on the ECP5 the sum
        # and its comparison were the decoder core's critical path, 129.8 MHz)
        room = Mirrored(len(widths), name="room", init=1)
        inner_rdy = Signal()
        m.d.comb += [self.w_rdy.eq(room.value), inner_rdy.eq(level != 0)]
        write = self.w_en & room.value
        read = inner_rdy & (~self.r_rdy | self.r_en)
        next_level = Signal(range(inner + 2))
        m.d.comb += next_level.eq(level + write - read)
        # full next cycle: full now and nothing read (nothing is written while full), or one
        # short of it and a write without a read
        full_next = (equals(level, inner) & ~read) | (equals(level, inner - 1) & write & ~read)
        m.d.sync += [level.eq(next_level), *room.eq(~full_next)]
        for pointer, moves in ((produce, write), (consume, read)):
            with m.If(moves):
                m.d.sync += pointer.eq(Mux(pointer == inner - 1, 0, pointer + 1))
        low = 0
        for k, bits in enumerate(widths):
            column = memory.Memory(shape=bits, depth=inner, init=[])
            m.submodules[f"storage{k}"] = column
            w_port, r_port = column.write_port(), column.read_port()
            m.d.comb += [
                w_port.addr.eq(produce), w_port.data.eq(self.w_data[low:low + bits]),
                w_port.en.eq(self.w_en & room.copy(k)),
                r_port.addr.eq(consume), r_port.en.eq(read),
                self.r_data[low:low + bits].eq(r_port.data),
            ]
            low += bits
        with m.If(read):
            m.d.sync += self.r_rdy.eq(1)
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        m.d.comb += [self.w_level.eq(level + self.r_rdy), self.r_level.eq(level + self.r_rdy)]
        return m
