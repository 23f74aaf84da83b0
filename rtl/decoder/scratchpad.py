"""The activation scratchpad and its row readers, for the decoder core's sequencer
(:mod:`heteroreason.rtl.decoder.sequencer`).

The scratchpad reads synchronously (block RAM): each operator streams its consecutive rows
through a :class:`RowReader`, which reads ahead; its writes are registered once on the way to
the memory."""

from amaranth.hdl import Cat, Const, Mux, Shape, Signal, signed
from amaranth.lib import data, memory

from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.pipeline import GROUP_BITS, KEEP

__all__ = ["READ_LATENCY", "SCRATCH_BUFFERS", "BankedScratchpad", "LockstepReaders", "Port",
           "RowReader", "Scratchpad", "SelectedReader", "buffer_output"]

SCRATCH_BUFFERS = ("r", "h", "q", "k", "v", "a", "g", "x")
# a reader started in one cycle has its first row this many cycles after the next: the read,
# the landing register, the reader's register
READ_LATENCY = 3


class Port:
    """The read side of a prefetch buffer: ``valid`` from it, ``ready`` to it, ``data``."""

    def __init__(self, valid, ready, payload):
        self.valid, self.ready, self.data = valid, ready, payload


class Scratchpad:
    """The activations: buffers of 16-bit elements (:data:`SCRATCH_BUFFERS`), ``width`` a row,
    with two synchronous read ports (each behind a :class:`RowReader`) and a write port with a
    per-element enable whose inputs are registered (a write lands a cycle after it is
    issued)."""

    def __init__(self, m, config, width: int, *, prefix: str = ""):
        self.m, self.width, self.shift = m, width, width.bit_length() - 1
        self.start, at = {}, 0
        for name, size in zip(SCRATCH_BUFFERS, (config.hidden, config.hidden, config.q_dim,
                                                config.kv_dim, config.kv_dim, config.q_dim,
                                                config.ffn, config.ffn), strict=True):
            self.start[name] = at  # every size is a multiple of the width: buffers start a row
            at += size
        self.row_of = {name: start >> self.shift for name, start in self.start.items()}
        self.rows = at // width
        row = data.ArrayLayout(signed(16), width)
        m.submodules[f"{prefix}scratch"] = mem = memory.Memory(shape=row, depth=self.rows,
                                                             init=[])
        self.reader0 = RowReader(m, mem.read_port(), self.rows, row, name=f"{prefix}reader0")
        self.reader1 = RowReader(m, mem.read_port(), self.rows, row, name=f"{prefix}reader1")
        wr = mem.write_port(granularity=1)
        # what the operators write this cycle; registered into the port
        self.w_addr = Signal(range(self.rows), name=f"{prefix}w_addr")
        self.w_data = Signal(row, name=f"{prefix}w_data")
        self.w_en = Signal(width, name=f"{prefix}w_en")
        m.d.sync += [wr.addr.eq(self.w_addr), wr.data.eq(self.w_data), wr.en.eq(self.w_en)]

    def element(self, row, index):
        """Element ``index`` (its low bits) of scratchpad ``row`` (a reader's)."""
        if self.shift:
            return row.as_value().word_select(index[:self.shift], 16).as_signed()
        return row[0]

    def span(self, row, index, count: int):
        """The ``count`` elements (a power of two that divides ``width``) of scratchpad ``row``
        from element ``index`` (its low bits; a multiple of ``count``)."""
        if count == self.width:
            return [row[t] for t in range(count)]
        group = row.as_value().word_select(index[count.bit_length() - 1:self.shift], 16 * count)
        return [group.word_select(t, 16).as_signed() for t in range(count)]

    def write(self, base, elements, rows, spans=()) -> None:
        """The write port's inputs from every writer, each selected by a registered flag of
        which at most one is raised: ``elements``, ``(select, enable, index, value)``, write
        the 16-bit ``value`` at element ``base + index``; ``spans`` likewise, ``values`` (a
        power-of-two count that divides ``width``) at the consecutive elements from ``base +
        index``, a multiple of their count; ``rows``, ``(select, enable, index, values)``, the
        ``width`` int8 ``values`` at row ``base / width + index``. (An AND-OR of the flags: the
        program counter's decode reaches none of it.)"""
        m, vw, shift = self.m, self.width, self.shift
        index, element, row_index = _pick(elements, 2), _pick(elements, 3), _pick(rows, 2)
        if spans:
            index = index | _pick(spans, 2)
        address = Signal(range(self.rows * vw), name="w_element")
        row_select = _any(select for select, *_ in rows)
        m.d.comb += address.eq(base + index)
        m.d.comb += self.w_addr.eq(Mux(row_select, (base >> shift) + row_index,
                                       address >> shift))
        span_select = _any(select for select, *_ in spans)
        for k in range(vw):
            lane = 0
            for select, _enable, _index, values in rows:
                lane = lane | Mux(select, values[k], 0)
            if spans:
                spanned = 0
                for select, _enable, _index, values in spans:
                    spanned = spanned | Mux(select, values[k % len(values)], 0)
                element_k = Mux(span_select, spanned, element)
            else:
                element_k = element
            m.d.comb += self.w_data[k].eq(Mux(row_select, lane, element_k))
        lane_bit = Const(1, vw) << address[:shift] if shift else Const(1, 1)
        element_en = _any(select & enable for select, enable, *_ in elements)
        row_en = _any(select & enable for select, enable, *_ in rows)
        written = Mux(element_en, lane_bit, 0)
        for select, enable, _index, values in spans:
            n = len(values)
            if n == vw:
                mask = Const((1 << vw) - 1, vw)
            else:  # the span's group of ``n`` lanes within the row
                low = n.bit_length() - 1
                group = Const(1, vw // n) << address[low:shift]
                mask = Cat(*(bit.replicate(n) for bit in group))
            written = Mux(select & enable, mask, written)
        m.d.comb += self.w_en.eq(Mux(row_en, Const((1 << vw) - 1, vw), written))

    def low_bytes(self, row):
        """The int8 elements of a scratchpad ``row``, packed."""
        return Cat(*(row[k][:8] for k in range(self.width)))


def _pick(writers, field: int):
    """The ``field`` of the writer whose select is raised (zero when none is)."""
    out = 0
    for writer in writers:
        out = out | Mux(writer[0], writer[field], 0)
    return out


def _any(bits):
    out = Const(0, 1)
    for bit in bits:
        out = out | bit
    return out


class RowReader:
    """Consecutive scratchpad rows as a stream, through a synchronous read port that reads
    ahead into four registers. :meth:`start` (from an operator's case) names the first row
    and the count; ``valid``, ``row`` and ``ready`` are the stream; the first row is ``valid``
    :data:`READ_LATENCY` cycles after the cycle that follows the start, then one a cycle
    while ``ready``.

    The port's address is a register (the next row to read): the read happens every cycle, and
    a read is kept (``issue``) when its row will have a register to go to — decided from the
    reader's own registers, so that the consumer's ``ready`` reaches no address. The port's
    data lands in a register with no logic before it (a block RAM's clock-to-output takes most
    of a cycle), and goes from there to the register its place in the queue names."""

    DEPTH = 4

    def __init__(self, m, port, rows: int, layout, *, name: str):
        self.m = m
        self.next = Signal(range(rows + 1), name=f"{name}_next")
        self.left = Signal(range(rows + 1), name=f"{name}_left")  # reads still to keep
        self.valid = Signal(name=f"{name}_valid")
        self.ready = Signal(name=f"{name}_ready")
        # the rows held, the oldest first (``row``, the stream's payload)
        regs = [Signal(layout, name=f"{name}_row{k}", reset_less=True)  # ``held`` counts them
                for k in range(self.DEPTH)]
        self.row = regs[0]
        held = Signal(range(self.DEPTH + 1), name=f"{name}_held")
        read = Signal(name=f"{name}_read")  # the read of the last cycle was kept
        arriving = Signal(name=f"{name}_arriving")  # the landing register holds its row
        landing = Signal(layout, name=f"{name}_landing", reset_less=True)
        issue = Signal(name=f"{name}_issue")
        take = Signal(name=f"{name}_take")
        at = Signal(range(self.DEPTH), name=f"{name}_at")  # where an arriving row goes
        m.d.comb += [port.addr.eq(self.next), self.valid.eq(held != 0),
                     take.eq(self.valid & self.ready),
                     issue.eq((self.left != 0) & (held + read + arriving < self.DEPTH)),
                     at.eq(held - take)]
        m.d.sync += [read.eq(issue), arriving.eq(read), landing.eq(port.data),
                     held.eq(held + arriving - take)]
        with m.If(issue):
            m.d.sync += [self.next.eq(self.next + 1), self.left.eq(self.left - 1)]
        for k, reg in enumerate(regs):
            with m.If(arriving & equals(at, k)):
                m.d.sync += reg.eq(landing)
            if k + 1 < self.DEPTH:
                with m.Elif(take):
                    m.d.sync += reg.eq(regs[k + 1])

    def start(self, first_row, count) -> None:
        """Begin a run of ``count`` rows at ``first_row`` (the previous run must be done)."""
        self.m.d.sync += [self.next.eq(first_row), self.left.eq(count)]


class SelectedReader:
    """The first readers of a scratchpad's banks as one: the bank ``select`` names is started,
    offers its rows and takes ``ready``; the others stay idle. ``select`` is a register that
    changes only between runs, and the rows are chosen after the readers' registers."""

    def __init__(self, m, readers, select, *, name: str):
        self.m, self.readers, self.select = m, readers, select
        self.valid = Signal(name=f"{name}_valid")
        self.ready = Signal(name=f"{name}_ready")
        self.row = Signal(readers[0].row.shape(), name=f"{name}_row")
        valid, row = readers[0].valid, readers[0].row.as_value()
        for b, reader in enumerate(readers):
            m.d.comb += reader.ready.eq(self.ready & equals(select, b))
            if b:
                valid = Mux(equals(select, b), reader.valid, valid)
                row = Mux(equals(select, b), reader.row.as_value(), row)
        m.d.comb += [self.valid.eq(valid), self.row.eq(row)]

    def start(self, first_row, count, bank=None) -> None:
        """Begin a run on bank ``bank`` (default the selected one)."""
        bank = self.select if bank is None else bank
        for b, reader in enumerate(self.readers):
            with self.m.If(bank == b):
                reader.start(first_row, count)


class LockstepReaders:
    """The second readers of a scratchpad's banks, run together (the matrix-vector sinks read
    every token's residual or gate at the same rows): one start, one ``ready``, a row each."""

    def __init__(self, m, readers):
        self.m, self.readers = m, readers
        self.valid = readers[0].valid  # alike: the same runs on memories alike
        self.ready = Signal(name="lockstep_ready")
        self.rows = [reader.row for reader in readers]
        for reader in readers:
            m.d.comb += reader.ready.eq(self.ready)

    def start(self, first_row, count) -> None:
        for reader in self.readers:
            reader.start(first_row, count)


class BankedScratchpad:
    """A :class:`Scratchpad` per token of a batch, alike in layout: ``reader0`` reads the bank
    of the token ``select`` names (:class:`SelectedReader`), ``reader1`` every bank at once
    (:class:`LockstepReaders`); writes are per bank (:meth:`Sequencer.writes`)."""

    def __init__(self, m, config, width: int, banks: int, select):
        self.banks = [Scratchpad(m, config, width, prefix=f"bank{b}_") for b in range(banks)]
        first = self.banks[0]
        self.width, self.shift, self.start, self.row_of, self.rows = \
            first.width, first.shift, first.start, first.row_of, first.rows
        self.element, self.span, self.low_bytes = first.element, first.span, first.low_bytes
        self.reader0 = SelectedReader(m, [bank.reader0 for bank in self.banks], select,
                                      name="reader0")
        self.reader1 = LockstepReaders(m, [bank.reader1 for bank in self.banks])


def buffer_output(m, buffer, shape, name: str) -> Port:
    """``buffer``'s read side through registers (the core's :data:`~heteroreason.rtl.decoder.
    core.BUFFER_OUTPUT_LATENCY` cycles; used by its prefetch buffers): a block
    RAM's clock-to-output leaves no time for logic or a long route behind it in the same
    cycle. Its output lands in a register of its own (loaded every cycle, nothing before it),
    then in one of three entries taken in turn. The buffer is read while the entries have room
    for every beat in flight (a registered condition, so the consumer's ready reaches no read
    enable). Full throughput: a beat read, one landing and one held as another is taken.

    The entries' selects are replicated: every :data:`GROUP_BITS` bits of the beat have their
    own copies of the landed flag and the two entry pointers (kept apart in synthesis), so no
    select drives more than a group's multiplexers and enables (:data:`MAX_FANOUT`)."""
    width = Shape.cast(shape).width
    groups = -(-width // GROUP_BITS)
    landed = Signal(shape, name=f"{name}_landed", reset_less=True)
    entries = [Signal(shape, name=f"{name}_{k}", reset_less=True) for k in range(3)]
    valid = Signal(name=f"{name}_valid")
    payload = Signal(shape, name=f"{name}_data")
    held = Signal(range(4), name=f"{name}_held")
    room = Signal(name=f"{name}_room", init=1)  # held + landed < 3, registered
    landed_valid = Signal(name=f"{name}_landed_valid")
    port = Port(valid, Signal(name=f"{name}_ready"), payload)
    arrive, take, after = Signal(), Signal(), Signal(range(4))
    m.d.comb += [buffer.r_en.eq(room), arrive.eq(buffer.r_rdy & room),
                 take.eq(valid & port.ready), after.eq(held + landed_valid - take)]
    m.d.sync += [landed.eq(buffer.r_data), landed_valid.eq(arrive), held.eq(after),
                 valid.eq(after != 0), room.eq(after + arrive < 3)]
    for g in range(groups):
        bits = slice(g * GROUP_BITS, min(width, (g + 1) * GROUP_BITS))
        suffix = f"_g{g}" if groups > 1 else ""
        # the group's copies: the landed flag, the entry it goes to, the entry the consumer sees
        lands = Signal(name=f"{name}_lands{suffix}", attrs=KEEP)
        front = Signal(range(3), name=f"{name}_front{suffix}", attrs=KEEP)
        back = Signal(range(3), name=f"{name}_back{suffix}", attrs=KEEP)
        m.d.sync += lands.eq(arrive)
        with m.Switch(front):
            for k, entry in enumerate(entries):
                with m.Case(k):
                    m.d.comb += payload.as_value()[bits].eq(entry.as_value()[bits])
        for k, entry in enumerate(entries):
            with m.If(lands & (back == k)):
                m.d.sync += entry.as_value()[bits].eq(landed.as_value()[bits])
        with m.If(lands):
            m.d.sync += back.eq(Mux(back == 2, 0, back + 1))
        with m.If(take):
            m.d.sync += front.eq(Mux(front == 2, 0, front + 1))
    return port
