"""The decoder core's control: the units it sequences, the prefetch buffers' read ports, the
activation scratchpad, and the sequencer — a program counter over the operator table
(:data:`heteroreason.rtl.decoder.operators.OPERATORS`) with one method per unit that
elaborates an operator's case. Used by :class:`heteroreason.rtl.decoder.core.DecoderCore`.

The scratchpad reads synchronously (block RAM): each operator streams its consecutive rows
through a :class:`RowReader`, which reads ahead; its writes are registered once on the way to
the memory."""

from amaranth.hdl import Cat, Const, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory

from heteroreason.model.numerics.qwen2_int8 import QuantizedModel
from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.arith import saturate
from heteroreason.rtl.decoder.mvu import OutBits
from heteroreason.rtl.decoder.operators import (
    OPERATORS,
    Operator,
    Sink,
    Unit,
    first_layer_pc,
    last_layer_pc,
    lm_head_pc,
)
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.rtl.decoder.pipeline import REQUANT_LATENCY, delay, requantize_pipelined

__all__ = ["EMBED_LATENCY", "LEAVE_LATENCY", "LOGIT_LATENCY", "READ_LATENCY", "SCRATCH_BUFFERS",
           "Port", "RowReader", "Scratchpad", "Sequencer", "Units"]

SCRATCH_BUFFERS = ("r", "h", "q", "k", "v", "a", "g", "x")
# the registered flags the handshakes and writes follow (:meth:`Sequencer.feeds`,
# :meth:`Sequencer.writes`): the embedding's row parameter and its beats, the norm's rows and
# gains, a product's vector load, the rows RoPE rotates, a head's rows gathered, its query and
# its KV write sent, the attention's results drained, the SiLU table's entries; the units'
# commands (the LM head's, ``cmd_sample``, waits for the sampler); the embedding's writes
FEEDS = ("embed_param", "embed_row", "feed_norm", "loading", "feed_rope", "gather", "send_q",
         "send_kv", "draining", "silu", "cmd_norm", "cmd_mvu", "cmd_sample", "cmd_rope", "cmd_att",
         "embedding")
# an operator's first phase sends its unit a command: the flag of its valid
COMMAND_FLAGS = {Unit.NORM: "cmd_norm", Unit.MATVEC: "cmd_mvu", Unit.ROPE: "cmd_rope",
                 Unit.ATTENTION: "cmd_att"}
# the operators a batch runs token by token (the matrix-vector ones take every token's vector
# in one job; the SiLU table is the layer's)
PER_TOKEN = frozenset({Unit.EMBED, Unit.NORM, Unit.ROPE, Unit.KV_WRITE, Unit.ATTENTION})
# a reader started in one cycle has its first row this many cycles after the next: the read,
# the landing register, the reader's register
READ_LATENCY = 3
LOGIT_LATENCY = 1  # an LM head result -> the sampler's input
LEAVE_LATENCY = 1  # an operator's last handshake -> the next operator's first cycle, less one
EMBED_LATENCY = 1 + REQUANT_LATENCY  # an embedding element picked -> stored


class Units:
    def __init__(self, **units):
        for name, unit in units.items():
            setattr(self, name, unit)


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
        regs = [Signal(layout, name=f"{name}_row{k}") for k in range(self.DEPTH)]
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


class Sequencer:
    """The operators' control: a program counter over :data:`OPERATORS` (the per-layer ones
    repeated with a layer counter), the counters every operator shares, and one method per
    unit that elaborates an operator's case."""

    def __init__(self, m, model: QuantizedModel, params: DecoderParams, units: Units, token,
                 weights: Port, param_port: Port):
        c, p = model.config, params
        self.m, self.c, self.p, self.units, self.token = m, c, p, units, token
        self.q_model = model
        self.w, self.param = weights, param_port
        self.batch = p.ingest_batch
        if self.batch == 1:
            self.sp = Scratchpad(m, c, p.vector_width)
            self.pos = token.pos
        else:
            # the batch's token being run (its bank) and its position; the batch's last
            self.tok = Signal(range(self.batch), name="tok")
            self.last_tok = Signal(range(self.batch), name="last_tok")
            self.pos = Signal(token.pos.shape(), name="tok_pos")
            self.sp = BankedScratchpad(m, c, p.vector_width, self.batch, self.tok)
            self.first_tok = Signal(name="first_tok")
            m.d.comb += self.first_tok.eq(equals(self.tok, 0))
            # a norm's gains come once a pass: the first token's are kept and replayed for
            # the others
            depth = c.hidden // p.param_width
            m.submodules.gains = gains = memory.Memory(shape=param_port.data.shape(),
                                                       depth=depth, init=[])
            self.gain_write = gains.write_port()
            self.gain_count = Signal(range(depth + 1), name="gain_count")
            self.replay = RowReader(m, gains.read_port(), depth, param_port.data.shape(),
                                    name="gain_replay")
        self.n_layers = len(model.layers)
        self.pc = Signal(range(len(OPERATORS) + 1), name="pc")
        self.layer = Signal(range(self.n_layers), name="layer")
        layers = model.layers
        self.exp_mult = self._per_layer([ql.exp_req[0] for ql in layers], unsigned(31))
        self.exp_shift = self._per_layer([ql.exp_req[1] for ql in layers], unsigned(6))
        self.out_mult = self._per_layer([ql.attn_req[0] for ql in layers], unsigned(31))
        self.out_shift = self._per_layer([ql.attn_req[1] for ql in layers], unsigned(6))
        self.act_mult = self._per_layer([ql.act_req[0] for ql in layers], unsigned(31))
        self.act_shift = self._per_layer([ql.act_req[1] for ql in layers], unsigned(6))
        self.phase = Signal(range(8))
        self.i = Signal(range(max(c.vocab, c.ffn, 256) + 1))
        self.j = Signal(range(max(c.vocab, c.ffn, 256) + 1))
        self.k = Signal(range(c.ffn + 1))  # SwiGLU results stored (they trail ``j``)
        self.lane = Signal(range(p.beat_bytes + 1))
        self.head = Signal(range(max(c.heads, 1) + 1))
        # a product's vector beat (``lanes``), or the embedding's weight beat (a whole one)
        self.beat = Signal(data.ArrayLayout(signed(8), p.beat_bytes))
        self.row = Signal(data.ArrayLayout(signed(8), c.head_dim))
        self.krow = Signal(data.ArrayLayout(signed(8), c.head_dim))
        # a gather's rows go to ``krow`` (a head's K rows for its KV write) or ``row``:
        # registered as the gather begins (see :meth:`gathers`)
        self.gather_k = Signal(name="gather_k")
        self.have = Signal()
        # a product's vector: the rows loaded from now on are past it (registered as its last
        # is loaded; cleared as an operator begins)
        self.padding = Signal(name="padding")
        self.p_mult, self.p_shift = Signal(unsigned(31)), Signal(unsigned(6))
        # a matrix-vector operator's weights flow, and where its results go: registered as
        # the operator enters its streaming phase, so that no program-counter decode lies
        # between the streams and the unit's take (see :meth:`matvec_streams`)
        self.streaming = Signal(name="streaming")
        self.sink_of = {sink: Signal(name=f"sink_{sink.value}") for sink in Sink}
        # likewise every other handshake with a prefetch buffer, a reader or a unit's data
        # stream: a flag registered as the operator enters the phase that makes it (see
        # :meth:`feeds`)
        self.flag = {name: Signal(name=name) for name in FEEDS}
        self.head_rows = c.head_dim // p.vector_width  # scratchpad rows of a head
        self.index_bits = max(1, (self.head_rows - 1).bit_length())
        # the first element of the buffer the operator writes (registered as it begins)
        self.w_base = Signal(range(self.sp.rows * p.vector_width), name="w_base")
        # the operator's matrix-vector command and its readers' first rows and counts,
        # registered as it begins (see :meth:`_arrive`): no program-counter decode reaches a
        # unit's command or a read address
        self.mvu_cmd = Signal(units.mvu.cmd.payload.shape(), name="mvu_cmd")
        rows = self.sp.rows
        self.first = [Signal(range(rows + 1), name=f"reader{k}_first") for k in (0, 1)]
        self.count = [Signal(range(rows + 1), name=f"reader{k}_count") for k in (0, 1)]
        # an operator's first cycle: the counters ``i``, ``j``, ``k`` are cleared then rather
        # than with the last handshake of the operator before (see :meth:`next_op`), so that
        # no unit's handshake reaches their next-state logic; an operator's own assignments
        # in that cycle take precedence (elaborated after these)
        self.fresh = Signal(name="fresh")
        m.d.sync += self.fresh.eq(0)
        # an operator's last handshake raises ``leaving`` and nothing else: the next cycle
        # (:data:`LEAVE_LATENCY`), with the operator's case idle, its flags are lowered and the
        # next operator's raised (see :meth:`leave`), so that no unit's handshake reaches the
        # many registers an operator's change sets
        self.leaving = Signal(name="leaving")
        m.d.sync += self.leaving.eq(0)
        with m.If(self.fresh):
            m.d.sync += [self.i.eq(0), self.j.eq(0), self.k.eq(0), self.padding.eq(0)]
        self._embed_pipeline()

    def param_entry(self, index: int):
        """Entry ``index`` of the parameter buffer's beat."""
        return self.param.data if self.p.param_width == 1 else self.param.data[index]

    @property
    def silu_index(self):
        """The SiLU table's entry this cycle: it may take one in its first (``fresh``)."""
        return Mux(self.fresh, 0, self.i)

    def _per_layer(self, values, shape):
        """The current layer's entry of a constant table, registered (the layer changes
        operators before any of them reads it)."""
        out = Signal(shape)
        with self.m.Switch(self.layer):
            for k, v in enumerate(values):
                with self.m.Case(k):
                    self.m.d.sync += out.eq(int(v))
        return out

    def _counters(self):
        """The state every operator starts from, but the counters ``fresh`` clears."""
        return [self.phase.eq(0), self.lane.eq(0),
                self.head.eq(0), self.have.eq(0), self.streaming.eq(0), self.gather_k.eq(0),
                *(flag.eq(0) for flag in self.sink_of.values()),
                *(flag.eq(0) for flag in self.flag.values())]

    def _stream(self, op: Operator):
        """Assignments that enter ``op``'s streaming phase (phase 2)."""
        return [self.phase.eq(2), self.streaming.eq(1), self.sink_of[op.sink].eq(1),
                self.flag["loading"].eq(0)]

    def _enter(self, name: str, phase: int | None = None, *, leave: str | None = None):
        """Assignments that raise flag ``name`` (and lower ``leave``), entering ``phase``."""
        out = [self.flag[name].eq(1)]
        if leave is not None:
            out.append(self.flag[leave].eq(0))
        if phase is not None:
            out.append(self.phase.eq(phase))
        return out

    def feeds(self) -> None:
        """The handshakes of the prefetch buffers, the first reader and the units' data
        streams outside the matrix-vector unit, from the registered flags (elaborated once,
        outside the operators' cases): the first reader's ``ready`` and the buffers' depend
        on no program-counter decode."""
        m, f, sp, u, w, param = self.m, self.flag, self.sp, self.units, self.w, self.param
        # the sampler's ready a cycle late: only the LM head's logits make it busy, and they
        # follow this command, so an idle sampler stays idle until then
        self.sampler_idle = Signal(name="sampler_idle")
        m.d.sync += self.sampler_idle.eq(u.sampler.logits.ready)
        reader, mvu, norm, rope, att, swiglu = (sp.reader0, u.mvu, u.norm, u.rope, u.att,
                                                u.swiglu)
        # the beat: the embedding's row from the weights; a product's vector, a scratchpad row
        # at a time (``i`` counts them, ``lane`` within the beat; rows past the vector, from
        # ``count[0]`` on, are zeros)
        beat, vw = self.beat.as_value(), self.p.vector_width
        with m.If(f["embed_row"] & ~self.have & w.valid):
            m.d.sync += beat.eq(w.data)
        with m.If(f["loading"] & ~self.have & (self.padding | reader.valid)):
            m.d.sync += beat.word_select(self.lane, 8 * vw).eq(
                Mux(self.padding, 0, sp.low_bytes(reader.row)))
            with m.If(self.i + 1 == self.count[0]):  # the vector's last row
                m.d.sync += self.padding.eq(1)
        m.d.comb += [
            w.ready.eq((self.streaming & mvu.weights.ready) | (f["embed_row"] & ~self.have)),
            param.ready.eq((self.streaming & mvu.rowparam.ready) | f["embed_param"]
                           | (self._gains_from_memory() & norm.gain.ready) | f["silu"]),
            # a vector loads while it has no beat; rows past it are zeros, and the reader
            # holds no more rows then
            reader.ready.eq((f["feed_norm"] & norm.x.ready) | (f["loading"] & ~self.have)
                            | (f["feed_rope"] & rope.x.ready) | f["gather"]),
            norm.x.payload.eq(reader.row), norm.x.valid.eq(f["feed_norm"] & reader.valid),
            norm.gain.valid.eq(f["feed_norm"] & (param.valid if self.batch == 1 else
                                                 Mux(self.first_tok, param.valid,
                                                     self.replay.valid))),
            norm.y.ready.eq(f["feed_norm"]),
            mvu.vec.payload.eq(self.beat if self.p.rows_per_beat == 1
                               else self.beat.as_value()[:8 * self.p.lanes]),
            mvu.vec.valid.eq(f["loading"] & self.have),
            rope.x.payload.value.eq(sp.low_bytes(reader.row)),
            rope.x.valid.eq(f["feed_rope"] & reader.valid), rope.y.ready.eq(f["feed_rope"]),
            att.q.payload.eq(self.row), att.q.valid.eq(f["send_q"]),
            att.out.ready.eq(f["draining"]), att.kv_write.valid.eq(f["send_kv"]),
            swiglu.params.valid.eq(f["silu"]), swiglu.table.valid.eq(f["silu"] & param.valid),
            swiglu.params.payload.mult.eq(self.act_mult),
            swiglu.params.payload.shift.eq(self.act_shift),
            swiglu.table.payload.addr.eq(self.silu_index[:8]),
            norm.cmd.valid.eq(f["cmd_norm"]),
            # the commands' payloads: registers and constants, whatever the operator
            norm.cmd.payload.length.eq(self.c.hidden),
            norm.cmd.payload.eps_q.eq(self.q_model.eps_q),
            mvu.cmd.payload.eq(self.mvu_cmd), rope.cmd.payload.eq(self.pos),
            *self._attention_payloads(),
            # the LM head begins when the sampler is idle: it takes a logit every cycle then
            mvu.cmd.valid.eq(f["cmd_mvu"] | (f["cmd_sample"] & self.sampler_idle)),
            rope.cmd.valid.eq(f["cmd_rope"]), att.cmd.valid.eq(f["cmd_att"]),
        ]

    def _attention_payloads(self):
        """The attention's command (a job's query heads from ``head``) and its KV write (KV
        head ``head``), from registers."""
        c, att, head = self.c, self.units.att, self.head
        group = c.heads // c.kv_heads
        cmd, kv = att.cmd.payload, att.kv_write.payload
        return [cmd.layer.eq(self.layer),
                cmd.kv_head.eq(head // group if group > 1 else head),
                cmd.length.eq(self.pos + 1),
                cmd.exp_mult.eq(self.exp_mult), cmd.exp_shift.eq(self.exp_shift),
                cmd.out_mult.eq(self.out_mult), cmd.out_shift.eq(self.out_shift),
                kv.layer.eq(self.layer), kv.kv_head.eq(head), kv.pos.eq(self.pos),
                kv.k.eq(self.krow), kv.v.eq(self.row)]

    def gathers(self) -> None:
        """A gathered row into ``krow`` or ``row`` (element ``i``'s row of a head), on the
        registered ``gather`` flag and ``gather_k`` (elaborated once, outside the operators'
        cases: no program-counter decode reaches the rows' enables); the cases count the rows
        and end the gathers."""
        m, sp, reader, vw = self.m, self.sp, self.sp.reader0, self.p.vector_width
        index = self.i[:self.index_bits]
        with m.If(self.flag["gather"] & reader.valid):
            with m.If(self.gather_k):
                m.d.sync += self.krow.as_value().word_select(index, 8 * vw).eq(
                    sp.low_bytes(reader.row))
            with m.Else():
                m.d.sync += self.row.as_value().word_select(index, 8 * vw).eq(
                    sp.low_bytes(reader.row))

    def matvec_streams(self) -> None:
        """The prefetch buffers' payloads to the units, the weight and row-parameter streams'
        valid to the matrix-vector unit (their ready: :meth:`feeds`) and where its results go,
        from the registered flags (elaborated once, outside the operators' cases)."""
        m, mvu, w, param, sp = self.m, self.units.mvu, self.w, self.param, self.sp
        # the prefetch buffers' payloads go to every unit that reads them ungated (a block
        # RAM's output has most of a cycle's time spent before it): only valid and ready
        # follow the operator
        norm, swiglu = self.units.norm, self.units.swiglu
        entry, g, r = self.param_entry(0), self.p.param_width, self.p.rows_per_beat
        source = param.data
        if self.batch > 1:  # the first token's gains from memory, the others' replayed
            source = Signal(param.data.shape(), name="gain_source")
            m.d.comb += source.eq(Mux(self.first_tok, param.data.as_value(),
                                      self.replay.row.as_value()))
        gains = [(norm.gain.payload, source)] if g == 1 else \
            [(norm.gain.payload[t], source[t]) for t in range(g)]
        rowparams = [(mvu.rowparam.payload, entry)] if r == 1 else \
            [(mvu.rowparam.payload[t], param.data[t]) for t in range(r)]
        m.d.comb += [mvu.weights.payload.eq(w.data),
                     *(x for row, e in rowparams for x in (row.bias.eq(e.value),
                                                           row.mult.eq(e.mult),
                                                           row.shift.eq(e.shift))),
                     *(x for gain, e in gains for x in (gain.mult.eq(e.mult),
                                                         gain.shift.eq(e.shift))),
                     swiglu.table.payload.value.eq(entry.value[:16])]
        m.d.comb += [mvu.weights.valid.eq(self.streaming & w.valid),
                     mvu.rowparam.valid.eq(self.streaming & param.valid)]
        # the results: to the sampler, added to the residual, through SwiGLU with the gate
        # (both read by the second reader as the results leave), or stored
        flag, reader, j = self.sink_of, sp.reader1, self.j
        sampler, swiglu = self.units.sampler, self.units.swiglu
        value, last = mvu.out.payload.value, mvu.out.payload.last
        # the LM head's logits reach the sampler through a register (:data:`LOGIT_LATENCY`):
        # the running maximum's comparison has the cycle to itself. The sampler takes every
        # one (it is idle when the LM head begins: ``cmd_sample``)
        self.logit = Signal(sampler.logits.payload.shape(), name="logit")
        self.logit_valid = Signal(name="logit_valid")
        m.d.sync += [self.logit_valid.eq(flag[Sink.SAMPLE] & mvu.out.valid),
                     self.logit.value.eq(value if self.batch == 1 else self._last_tokens(value)),
                     self.logit.last.eq(last)]
        # the reader's row is done with its last element (or the vector's)
        row_done = (equals(j[:sp.shift], self.p.vector_width - r) if sp.shift else 1) | last
        m.d.comb += [
            mvu.out.ready.eq(flag[Sink.SAMPLE]  # the sampler is ready (see ``cmd_sample``)
                             | (flag[Sink.ADD] & reader.valid)
                             | (flag[Sink.SWIGLU] & swiglu.x.ready & reader.valid)
                             | flag[Sink.STORE]),
            sampler.logits.valid.eq(self.logit_valid), sampler.logits.payload.eq(self.logit),
            swiglu.x.valid.eq(flag[Sink.SWIGLU] & mvu.out.valid & reader.valid),
            *self._swiglu_inputs(reader, value),
            swiglu.x.payload.last.eq(last),
            reader.ready.eq(mvu.out.valid & row_done
                            & (flag[Sink.ADD] | (flag[Sink.SWIGLU] & swiglu.x.ready))),
            swiglu.y.ready.eq(flag[Sink.SWIGLU]),
        ]

    def _gains_from_memory(self):
        """The norm takes its gains from memory, i.e. from the parameter stream (with a batch,
        only the first token's; the others' come from the on-chip copy, see
        :meth:`_keep_gains`)."""
        if self.batch == 1:
            return self.flag["feed_norm"]
        return self.flag["feed_norm"] & self.first_tok

    def _keep_gains(self) -> None:
        """A batch's first token's norm gains into the gain memory as the norm takes them; the
        other tokens' norms read them back (``replay``, started with the norm)."""
        m, norm, param = self.m, self.units.norm, self.param
        taken = self._gains_from_memory() & param.valid & norm.gain.ready
        m.d.comb += [self.gain_write.addr.eq(self.gain_count),
                     self.gain_write.data.eq(param.data), self.gain_write.en.eq(taken),
                     self.replay.ready.eq(self.flag["feed_norm"] & ~self.first_tok
                                          & norm.gain.ready)]
        with m.If(taken):
            m.d.sync += self.gain_count.eq(self.gain_count + 1)

    def _swiglu_inputs(self, reader, value):
        """SwiGLU's gate (the second reader's element or span) and up (the result) of every
        lane: ``rows_per_beat`` of each of the batch's tokens."""
        sp, j, r, x = self.sp, self.j, self.p.rows_per_beat, self.units.swiglu.x.payload
        if self.batch == 1 and r == 1:
            return [x.gate.eq(sp.element(reader.row, j)[:8]), x.up.eq(value[:8])]
        rows = [reader.row] if self.batch == 1 else reader.rows
        return [a for b, row in enumerate(rows) for t, gate in enumerate(sp.span(row, j, r))
                for a in (x.gate[b * r + t].eq(gate[:8]), x.up[b * r + t].eq(value[b * r + t][:8]))]

    def _last_tokens(self, value):
        """The batch's last token's ``rows_per_beat`` results of the matrix-vector unit's
        ``value`` (the logits a batch keeps)."""
        width = 32 * self.p.rows_per_beat
        chosen = value.as_value()[:width]
        for b in range(1, self.batch):
            chosen = Mux(equals(self.last_tok, b), value.as_value()[b * width:(b + 1) * width],
                         chosen)
        return chosen

    def reset(self) -> None:
        """A new token: the first operator, the first layer."""
        assert OPERATORS[0].unit is Unit.EMBED
        self.m.d.sync += [*self._counters(), self.i.eq(0), self.j.eq(0), self.k.eq(0),
                          self.padding.eq(0),
                          self.pc.eq(0), self.layer.eq(0),
                          self.flag["embed_param"].eq(1), self.flag["embedding"].eq(1),
                          self.w_base.eq(self.sp.start[OPERATORS[0].dst])]
        if self.batch > 1:
            self.m.d.sync += [self.tok.eq(0), self.pos.eq(self.token.pos),
                              self.last_tok.eq(self.token.count - 1)]

    def run(self, op: Operator) -> None:
        """Elaborate operator ``op``'s case of the program counter."""
        {Unit.EMBED: self.embed, Unit.NORM: self.norm, Unit.MATVEC: self.linear,
         Unit.ROPE: self.rope, Unit.KV_WRITE: self.kv_write, Unit.ATTENTION: self.attention,
         Unit.SILU_TABLE: self.silu_table}[op.unit](op)

    def next_op(self, op: Operator) -> None:
        """``op`` is done (its last handshake): on to the next operator a cycle later."""
        self.m.d.sync += self.leaving.eq(1)

    def leave(self) -> None:
        """The cycle after an operator's last handshake (``leaving``; its case is idle then):
        on to the next operator (after a layer's last, the next layer). Elaborated once,
        outside the operators' cases."""
        m = self.m
        with m.If(self.leaving):
            m.d.sync += [*self._counters(), self.fresh.eq(1)]
            with m.Switch(self.pc):
                for pc in range(len(OPERATORS)):
                    with m.Case(pc):
                        if self.batch > 1 and OPERATORS[pc].unit in PER_TOKEN:
                            # the batch's next token through the same operator, or on
                            with m.If(self.tok != self.last_tok):
                                m.d.sync += [self.tok.eq(self.tok + 1),
                                             self.pos.eq(self.pos + 1), *self._arrive(pc)]
                            with m.Else():
                                m.d.sync += [self.tok.eq(0), self.pos.eq(self.token.pos)]
                                self._advance(pc)
                        else:
                            self._advance(pc)

    def _advance(self, pc: int) -> None:
        """The assignments that move on from operator ``pc`` (after a layer's last, to the
        next layer)."""
        m = self.m
        if pc == last_layer_pc():  # the next layer, or the final norm
            with m.If(self.layer == self.n_layers - 1):
                m.d.sync += [self.pc.eq(pc + 1), *self._arrive(pc + 1)]
            with m.Else():
                m.d.sync += [self.pc.eq(first_layer_pc()), self.layer.eq(self.layer + 1),
                             *self._arrive(first_layer_pc())]
        else:
            m.d.sync += [self.pc.eq(pc + 1), *self._arrive(pc + 1)]

    def _arrive(self, pc: int):
        """Assignments that raise the flags operator ``pc`` starts with — its unit's command
        (the LM head's only when the token keeps its logits), the SiLU table's entries — and
        register the first element of the buffer it writes."""
        if pc >= len(OPERATORS):
            return []
        op = OPERATORS[pc]
        out = [self.w_base.eq(self.sp.start[op.dst])] if op.dst is not None else []
        for k, run in enumerate(self._reads(op)):
            if run is not None:
                out += [self.first[k].eq(run[0]), self.count[k].eq(run[1])]
        if op.unit is Unit.MATVEC:
            cols, rows = getattr(self.c, op.cols), getattr(self.c, op.rows)
            command = {"rows": rows // self.p.rows_per_beat, "beats": -(-cols // self.p.lanes),
                       "out_bits": OutBits[f"INT{op.out_bits}"], "reuse": op.reuse}
            out.append(self.mvu_cmd.eq(self.mvu_cmd.shape().const(command)))
            if self.batch > 1:  # every token's vector
                out.append(self.mvu_cmd.vectors.eq(self.token.count))
        if op.unit is Unit.EMBED:  # a batch's later tokens (the first's: :meth:`reset`)
            out += [self.flag["embed_param"].eq(1), self.flag["embedding"].eq(1)]
        if op.unit is Unit.SILU_TABLE:
            out.append(self.flag["silu"].eq(1))
        elif pc == lm_head_pc():  # it waits for the sampler (:meth:`matvec_streams`)
            out.append(self.flag["cmd_sample"].eq(self.token.keep))
        elif op.unit in COMMAND_FLAGS:
            out.append(self.flag[COMMAND_FLAGS[op.unit]].eq(1))
        return out

    def _reads(self, op: Operator):
        """``(first row, rows)`` of the runs ``op``'s two readers make (``None``: no run).
        The attention's and the KV write's first run; each later one follows from it."""
        c, vw, row_of = self.c, self.p.vector_width, self.sp.row_of
        if op.unit is Unit.NORM:
            return (row_of[op.src], c.hidden // vw), None
        if op.unit is Unit.ROPE:
            return (row_of[op.src], getattr(c, op.heads) * c.head_dim // vw), None
        if op.unit is Unit.KV_WRITE:
            return (row_of["k"], self.head_rows), None
        if op.unit is Unit.ATTENTION:
            return (row_of[op.src], self.p.heads_parallel * self.head_rows), None
        if op.unit is Unit.MATVEC:
            load = None if op.reuse else (row_of[op.src], getattr(c, op.cols) // vw)
            rows = getattr(c, op.rows) // vw  # the residual's rows, or the gate's
            if op.sink is Sink.ADD:
                return load, (row_of[op.dst], rows)
            if op.sink is Sink.SWIGLU:
                return load, (row_of["g"], rows)
            return load, None
        return None, None

    def _start(self, k: int) -> None:
        """Reader ``k`` begins the run registered for it."""
        (self.sp.reader0, self.sp.reader1)[k].start(self.first[k], self.count[k])

    def _embed_pipeline(self) -> None:
        """The embedding's requantizer: an element picked from the row's beat is requantized
        in :data:`EMBED_LATENCY` cycles (it never stalls) and stored where its index says."""
        m, c = self.m, self.c
        self.embed_pick = Signal(name="embed_pick")  # an element enters this cycle
        element = Signal(signed(8), name="embed_element", reset_less=True)
        m.d.sync += element.eq(self.beat.as_value().word_select(self.lane, 8).as_signed())
        self.embed_value = requantize_pipelined(m, element, self.p_mult, self.p_shift,
                                                Const(1, 2), name="embed")
        self.embed_stored = delay(m, self.embed_pick, EMBED_LATENCY, name="embed_valid")
        self.embed_index = delay(m, self.i, EMBED_LATENCY, name="embed_index", reset_less=True)
        self.embed_last = delay(m, self.embed_pick & equals(self.i, c.hidden - 1),
                                EMBED_LATENCY, name="embed_last")

    def embed(self, op: Operator) -> None:
        m, w, param = self.m, self.w, self.param
        phase, have, lane, i = self.phase, self.have, self.lane, self.i
        with m.If(equals(phase, 0) & param.valid):  # the row's multiplier (``embed_param``)
            entry = self.param_entry(0)
            m.d.sync += [self.p_mult.eq(entry.mult), self.p_shift.eq(entry.shift),
                         *self._enter("embed_row", 1, leave="embed_param")]
        with m.If(equals(phase, 1)):
            with m.If(~have & w.valid):  # ``embed_row``: the beat taken (:meth:`feeds`)
                m.d.sync += [have.eq(1), lane.eq(0)]
            with m.Elif(have):  # an element a cycle into the requantizer
                m.d.comb += self.embed_pick.eq(1)
                m.d.sync += [i.eq(i + 1), lane.eq(lane + 1)]
                with m.If(equals(lane, self.p.beat_bytes - 1)):
                    m.d.sync += have.eq(0)
                with m.If(equals(i, self.c.hidden - 1)):
                    m.d.sync += [phase.eq(2), self.flag["embed_row"].eq(0)]
        with m.If(self.embed_last):  # the element stored (:meth:`writes`)
            self.next_op(op)

    def norm(self, op: Operator) -> None:
        m, norm, phase, j = self.m, self.units.norm, self.phase, self.j
        with m.If(equals(phase, 0) & norm.cmd.ready):  # the command: ``cmd_norm``
            self._start(0)
            m.d.sync += self._enter("feed_norm", 1, leave="cmd_norm")
            if self.batch > 1:  # the gains kept from the first token, or kept now
                m.d.sync += self.gain_count.eq(0)
                with m.If(~self.first_tok):
                    self.replay.start(0, self.c.hidden // self.p.param_width)
        # rows in from the reader (``feed_norm``), ``j`` counts elements out
        with m.If(equals(phase, 1) & norm.y.valid):
            m.d.sync += j.eq(j + self.p.param_width)
            with m.If(norm.y.payload.last):
                self.next_op(op)

    def linear(self, op: Operator) -> None:
        m, sp, mvu = self.m, self.sp, self.units.mvu
        phase, i, j, lane, have = self.phase, self.i, self.j, self.lane, self.have
        lanes, vw = self.p.lanes, self.p.vector_width
        cols = getattr(self.c, op.cols)
        beats = -(-cols // lanes)
        reader = sp.reader0
        # the command (``mvu_cmd``, :meth:`feeds`)
        with m.If(equals(phase, 0) & mvu.cmd.valid & mvu.cmd.ready):
            m.d.sync += [self.flag["cmd_mvu"].eq(0), self.flag["cmd_sample"].eq(0),
                         *(self._stream(op) if op.reuse else self._enter("loading", 1))]
            if not op.reuse:
                self._start(0)
            if op.sink in (Sink.ADD, Sink.SWIGLU):  # the residual's rows, the gate's
                self._start(1)
        if not op.reuse:
            # load the vector (``loading``), ``vw`` elements (one scratchpad row) a cycle and
            # ``lanes`` a beat; ``i`` counts rows, ``lane`` the rows of the beat; rows past the
            # vector are zeros
            with m.If(equals(phase, 1)):
                with m.If(~have & (self.padding | reader.valid)):  # into the beat: feeds()
                    m.d.sync += [i.eq(i + 1), lane.eq(lane + 1)]
                    with m.If(equals(lane, lanes // vw - 1)):
                        m.d.sync += [have.eq(1), lane.eq(0)]
                with m.Elif(have & mvu.vec.ready):
                    m.d.sync += have.eq(0)
                    with m.If(i >= beats * lanes // vw):
                        if self.batch == 1:
                            m.d.sync += self._stream(op)
                        else:  # the batch's next token's vector, from its bank
                            with m.If(self.tok != self.last_tok):
                                sp.reader0.start(self.first[0], self.count[0],
                                                 bank=self.tok + 1)
                                m.d.sync += [self.tok.eq(self.tok + 1), i.eq(0),
                                             self.padding.eq(0)]
                            with m.Else():
                                m.d.sync += [self.tok.eq(0), *self._stream(op)]
        with m.If(equals(phase, 2)):  # the streams: :meth:`matvec_streams`
            self._sink(op)
            with m.If(mvu.out.valid & mvu.out.ready):
                m.d.sync += j.eq(j + self.p.rows_per_beat)
                if op.sink is not Sink.SWIGLU:
                    with m.If(mvu.out.payload.last):
                        self.next_op(op)

    def _sink(self, op: Operator) -> None:
        """Where the matrix-vector results go, one a cycle (``j`` counts them); the
        handshakes are :meth:`matvec_streams`'s."""
        m = self.m
        if op.sink is Sink.SWIGLU:  # x[k] = swiglu(g[k], up[k]), g read as up[j] leaves
            swiglu = self.units.swiglu
            # the unit's results trail its inputs by its pipeline: ``k`` counts them
            with m.If(swiglu.y.valid):
                m.d.sync += self.k.eq(self.k + self.p.rows_per_beat)
                with m.If(swiglu.y.payload.last):
                    self.next_op(op)

    def writes(self) -> None:
        """Every operator's writes into the scratchpad (elaborated once, outside the cases;
        :meth:`Scratchpad.write`): the embedding's elements, the norm's, a product's results
        stored, added into the residual (``r[j] = sat16(r[j] + value)``, the residual read by
        the second reader as the results leave) or through SwiGLU, RoPE's rows in place, the
        attention's output rows."""
        m, sp, f, sink, u, j = self.m, self.sp, self.flag, self.sink_of, self.units, self.j
        reader, value = sp.reader1, u.mvu.out.payload.value
        # the norm's results: an element a cycle, or ``param_width`` (a span of a row)
        norm = (f["feed_norm"], u.norm.y.valid, j, u.norm.y.payload.value)
        wide = self.p.param_width > 1
        r = self.p.rows_per_beat
        if self.batch > 1:
            self._keep_gains()
            self._banked_writes(norm)
            return
        if r == 1:
            total = Signal(signed(18))
            m.d.comb += total.eq(sp.element(reader.row, j) + value)
            products = [
                (sink[Sink.STORE], u.mvu.out.valid, j, value[:16]),
                (sink[Sink.ADD], u.mvu.out.valid & reader.valid, j, saturate(m, total, 16)),
                (sink[Sink.SWIGLU], u.swiglu.y.valid, self.k, u.swiglu.y.payload.value)]
        else:  # ``rows_per_beat`` results a cycle: spans of a row
            totals = []
            for t, residual in enumerate(sp.span(reader.row, j, r)):
                total = Signal(signed(18), name=f"total{t}")
                m.d.comb += total.eq(residual + value[t])
                totals.append(saturate(m, total, 16))
            products = [
                (sink[Sink.STORE], u.mvu.out.valid, j, [value[t][:16] for t in range(r)]),
                (sink[Sink.ADD], u.mvu.out.valid & reader.valid, j, totals),
                (sink[Sink.SWIGLU], u.swiglu.y.valid, self.k,
                 [u.swiglu.y.payload.value[t] for t in range(r)])]
        sp.write(self.w_base, [
            (f["embedding"], self.embed_stored, self.embed_index, self.embed_value),
            *([] if wide else [norm]),
            *(products if r == 1 else []),
        ], [
            (f["feed_rope"], u.rope.y.valid, j, u.rope.y.payload.value),
            (f["draining"], u.att.out.valid, self.head * self.head_rows + j,
             u.att.out.payload.value),
        ], ([norm] if wide else []) + ([] if r == 1 else products))

    def _banked_writes(self, norm) -> None:
        """:meth:`writes` with a bank per token: the operators that run token by token write
        the bank of the token (``tok``), the matrix-vector sinks every bank at once, each its
        token's ``rows_per_beat`` results (spans of a row, one element wide at one a beat)."""
        m, sp, f, sink, u, j = self.m, self.sp, self.flag, self.sink_of, self.units, self.j
        reader, value, r = sp.reader1, u.mvu.out.payload.value, self.p.rows_per_beat
        wide = self.p.param_width > 1
        for b, bank in enumerate(sp.banks):
            mine = equals(self.tok, b)
            totals = []
            for t, residual in enumerate(sp.span(reader.rows[b], j, r)):
                total = Signal(signed(18), name=f"total{b}_{t}")
                m.d.comb += total.eq(residual + value[b * r + t])
                totals.append(saturate(m, total, 16))
            products = [
                (sink[Sink.STORE], u.mvu.out.valid, j, [value[b * r + t][:16] for t in range(r)]),
                (sink[Sink.ADD], u.mvu.out.valid & reader.valid, j, totals),
                (sink[Sink.SWIGLU], u.swiglu.y.valid, self.k,
                 [u.swiglu.y.payload.value[b * r + t] for t in range(r)])]
            norm_b = (norm[0] & mine, *norm[1:])
            bank.write(self.w_base, [
                (f["embedding"] & mine, self.embed_stored, self.embed_index, self.embed_value),
                *([] if wide else [norm_b]),
            ], [
                (f["feed_rope"] & mine, u.rope.y.valid, j, u.rope.y.payload.value),
                (f["draining"] & mine, u.att.out.valid, self.head * self.head_rows + j,
                 u.att.out.payload.value),
            ], ([norm_b] if wide else []) + products)

    def rope(self, op: Operator) -> None:  # in place, a scratchpad row a beat
        m, rope = self.m, self.units.rope
        phase, i, j = self.phase, self.i, self.j
        n = getattr(self.c, op.heads) * self.c.head_dim // self.p.vector_width
        with m.If(equals(phase, 0) & rope.cmd.ready):  # the command: ``cmd_rope``
            self._start(0)
            m.d.sync += self._enter("feed_rope", 1, leave="cmd_rope")
        with m.If(equals(phase, 1)):  # ``feed_rope``: the rows in, the results out
            m.d.comb += rope.x.payload.last.eq(equals(i, n - 1))
            with m.If(rope.x.valid & rope.x.ready):
                m.d.sync += i.eq(i + 1)
            with m.If(rope.y.valid):
                m.d.sync += j.eq(j + 1)
                with m.If(rope.y.payload.last):
                    self.next_op(op)

    def kv_write(self, op: Operator) -> None:
        # per KV head: its K rows gathered (phases 0-1), its V rows (2-3), the write (4)
        m, sp, att, reader = self.m, self.sp, self.units.att, self.sp.reader0
        i, head, phase, head_rows = self.i, self.head, self.phase, self.head_rows
        # the head's K rows from ``first`` into ``krow``, its V rows as far on as V's buffer is
        # from K's into ``row`` (:meth:`gathers`)
        for start_phase, offset in ((0, 0), (2, sp.row_of["v"] - sp.row_of["k"])):
            with m.If(equals(phase, start_phase)):
                reader.start(self.first[0] + offset, head_rows)
                m.d.sync += [*self._enter("gather", start_phase + 1), i.eq(0),
                             self.gather_k.eq(start_phase == 0)]
            # ``gather``: every row taken
            with m.If(equals(phase, start_phase + 1) & reader.valid):
                m.d.sync += i.eq(i + 1)
                with m.If(equals(i, head_rows - 1)):
                    m.d.sync += [phase.eq(start_phase + 2), self.flag["gather"].eq(0)]
                    if start_phase == 2:
                        m.d.sync += self.flag["send_kv"].eq(1)
        # the write (``send_kv``; its payload: :meth:`feeds`)
        with m.If(equals(phase, 4) & att.kv_write.ready):
            m.d.sync += [phase.eq(0), head.eq(head + 1), self.flag["send_kv"].eq(0),
                         self.first[0].eq(self.first[0] + head_rows)]
            with m.If(equals(head, self.c.kv_heads - 1)):
                self.next_op(op)

    def attention(self, op: Operator) -> None:
        # ``head`` is the job's first query head, ``lane`` counts its query beats sent
        m, c, sp, att = self.m, self.c, self.sp, self.units.att
        phase, i, j, lane, head = self.phase, self.i, self.j, self.lane, self.head
        hp, head_rows = self.p.heads_parallel, self.head_rows
        reader = sp.reader0
        with m.If(equals(phase, 0)):  # the command (``cmd_att``, :meth:`feeds`)
            with m.If(att.cmd.ready):
                # the job's query heads are consecutive rows
                self._start(0)
                m.d.sync += self._enter("gather", 1, leave="cmd_att")
            # a job's counters cleared while it waits (not under the unit's ready)
            m.d.sync += [i.eq(0), j.eq(0), lane.eq(0)]
        # gather a query head into ``row``, a scratchpad row a cycle (:meth:`gathers`)
        with m.If(equals(phase, 1) & reader.valid):
            m.d.sync += i.eq(i + 1)
            with m.If(equals(i, head_rows - 1)):
                m.d.sync += self._enter("send_q", 2, leave="gather")
        with m.If(equals(phase, 2)):
            m.d.sync += i.eq(0)  # for the next head's gather (not under the unit's ready)
        with m.If(equals(phase, 2) & att.q.ready):  # ``send_q``: the query's valid
            last_head = equals(lane, hp - 1)
            m.d.sync += [lane.eq(lane + 1), phase.eq(Mux(last_head, 3, 1)),
                         self.flag["send_q"].eq(0), self.flag["gather"].eq(~last_head),
                         self.flag["draining"].eq(last_head)]
        # ``draining``: the results out; ``j`` counts rows
        with m.If(equals(phase, 3) & att.out.valid):
            m.d.sync += j.eq(j + 1)
            with m.If(att.out.payload.last):
                m.d.sync += [head.eq(head + hp), phase.eq(0), self.flag["draining"].eq(0),
                             self.first[0].eq(self.first[0] + hp * head_rows)]
                with m.If(equals(head, c.heads - hp)):
                    self.next_op(op)
                with m.Else():  # the next job's command
                    m.d.sync += self.flag["cmd_att"].eq(1)

    def silu_table(self, op: Operator) -> None:
        # ``silu`` (raised by the operator before): the table's entries in, one a cycle
        m, param, i = self.m, self.param, self.silu_index
        with m.If(param.valid):
            m.d.sync += self.i.eq(i + 1)
            with m.If(equals(i, 255)):  # the buffer's next entry is the next operator's
                m.d.sync += self.flag["silu"].eq(0)
                self.next_op(op)
