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
)
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.rtl.decoder.pipeline import REQUANT_LATENCY, delay, requantize_pipelined

__all__ = ["EMBED_LATENCY", "READ_LATENCY", "SCRATCH_BUFFERS", "Port", "RowReader",
           "Scratchpad", "Sequencer", "Units"]

SCRATCH_BUFFERS = ("r", "h", "q", "k", "v", "a", "g", "x")
# a reader started in one cycle has its first row this many cycles after the next: the read,
# the register
READ_LATENCY = 2
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

    def __init__(self, m, config, width: int):
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
        m.submodules.scratch = mem = memory.Memory(shape=row, depth=self.rows, init=[])
        self.reader0 = RowReader(m, mem.read_port(), self.rows, row, name="reader0")
        self.reader1 = RowReader(m, mem.read_port(), self.rows, row, name="reader1")
        wr = mem.write_port(granularity=1)
        # what the operators write this cycle; registered into the port
        self.w_addr = Signal(range(self.rows), name="w_addr")
        self.w_data = Signal(row, name="w_data")
        self.w_en = Signal(width, name="w_en")
        m.d.sync += [wr.addr.eq(self.w_addr), wr.data.eq(self.w_data), wr.en.eq(self.w_en)]

    def element(self, row, index):
        """Element ``index`` (its low bits) of scratchpad ``row`` (a reader's)."""
        if self.shift:
            return row.as_value().word_select(index[:self.shift], 16).as_signed()
        return row[0]

    def store_element(self, addr, value, enable) -> None:
        m, vw = self.m, self.width
        m.d.comb += self.w_addr.eq(addr >> self.shift)
        m.d.comb += [self.w_data[k].eq(value) for k in range(vw)]
        lane_bit = Const(1, vw) << addr[:self.shift] if self.shift else Const(1, 1)
        with m.If(enable):
            m.d.comb += self.w_en.eq(lane_bit)

    def store_row(self, row, values, enable) -> None:
        """Write ``width`` int8 ``values`` (an array) at scratchpad row ``row``."""
        m, vw = self.m, self.width
        m.d.comb += [self.w_addr.eq(row)] + [self.w_data[k].eq(values[k]) for k in range(vw)]
        with m.If(enable):
            m.d.comb += self.w_en.eq(Const((1 << vw) - 1, vw))

    def low_bytes(self, row):
        """The int8 elements of a scratchpad ``row``, packed."""
        return Cat(*(row[k][:8] for k in range(self.width)))


class RowReader:
    """Consecutive scratchpad rows as a stream, through a synchronous read port that reads
    ahead into three registers. :meth:`start` (from an operator's case) names the first row
    and the count; ``valid``, ``row`` and ``ready`` are the stream; the first row is ``valid``
    :data:`READ_LATENCY` cycles after the cycle that follows the start, then one a cycle
    while ``ready``.

    The port's address is a register (the next row to read): the read happens every cycle, and
    a read is kept (``issue``) when its row will have a register to go to — decided from the
    reader's own registers, so that the consumer's ``ready`` reaches no address."""

    DEPTH = 3

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
        arriving = Signal(name=f"{name}_arriving")  # the read of the last cycle was kept
        issue = Signal(name=f"{name}_issue")
        take = Signal(name=f"{name}_take")
        at = Signal(range(self.DEPTH), name=f"{name}_at")  # where an arriving row goes
        m.d.comb += [port.addr.eq(self.next), self.valid.eq(held != 0),
                     take.eq(self.valid & self.ready),
                     issue.eq((self.left != 0) & (held + arriving < self.DEPTH)),
                     at.eq(held - take)]
        m.d.sync += [arriving.eq(issue), held.eq(held + arriving - take)]
        with m.If(issue):
            m.d.sync += [self.next.eq(self.next + 1), self.left.eq(self.left - 1)]
        for k, reg in enumerate(regs):
            with m.If(arriving & equals(at, k)):
                m.d.sync += reg.eq(port.data)
            if k + 1 < self.DEPTH:
                with m.Elif(take):
                    m.d.sync += reg.eq(regs[k + 1])

    def start(self, first_row, count) -> None:
        """Begin a run of ``count`` rows at ``first_row`` (the previous run must be done)."""
        self.m.d.sync += [self.next.eq(first_row), self.left.eq(count)]


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
        self.sp = Scratchpad(m, c, p.vector_width)
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
        self.lane = Signal(range(p.lanes + 1))
        self.head = Signal(range(max(c.heads, 1) + 1))
        self.beat = Signal(data.ArrayLayout(signed(8), p.lanes))
        self.row = Signal(data.ArrayLayout(signed(8), c.head_dim))
        self.krow = Signal(data.ArrayLayout(signed(8), c.head_dim))
        self.have = Signal()
        self.p_mult, self.p_shift = Signal(unsigned(31)), Signal(unsigned(6))
        # a matrix-vector operator's weights flow, and where its results go: registered as
        # the operator enters its streaming phase, so that no program-counter decode lies
        # between the streams and the unit's take (see :meth:`matvec_streams`)
        self.streaming = Signal(name="streaming")
        self.sink_of = {sink: Signal(name=f"sink_{sink.value}") for sink in Sink}
        self.head_rows = c.head_dim // p.vector_width  # scratchpad rows of a head
        self.index_bits = max(1, (self.head_rows - 1).bit_length())
        self._embed_pipeline()

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
        return [self.phase.eq(0), self.i.eq(0), self.j.eq(0), self.k.eq(0), self.lane.eq(0),
                self.head.eq(0), self.have.eq(0), self.streaming.eq(0),
                *(flag.eq(0) for flag in self.sink_of.values())]

    def _stream(self, op: Operator):
        """Assignments that enter ``op``'s streaming phase (phase 2)."""
        return [self.phase.eq(2), self.streaming.eq(1), self.sink_of[op.sink].eq(1)]

    def matvec_streams(self) -> None:
        """The prefetch buffers' payloads to the units, the weight and row-parameter streams'
        handshakes with the matrix-vector unit and its results' ``ready``, from the registered
        flags (elaborated once, outside the operators' cases)."""
        m, mvu, w, param, sp = self.m, self.units.mvu, self.w, self.param, self.sp
        # the prefetch buffers' payloads go to every unit that reads them ungated (a block
        # RAM's output has most of a cycle's time spent before it): only valid and ready
        # follow the operator
        norm, swiglu = self.units.norm, self.units.swiglu
        m.d.comb += [mvu.weights.payload.eq(w.data),
                     mvu.rowparam.payload.bias.eq(param.data.value),
                     mvu.rowparam.payload.mult.eq(param.data.mult),
                     mvu.rowparam.payload.shift.eq(param.data.shift),
                     norm.gain.payload.mult.eq(param.data.mult),
                     norm.gain.payload.shift.eq(param.data.shift),
                     swiglu.table.payload.value.eq(param.data.value[:16])]
        with m.If(self.streaming):
            m.d.comb += [mvu.weights.valid.eq(w.valid), w.ready.eq(mvu.weights.ready),
                         mvu.rowparam.valid.eq(param.valid),
                         param.ready.eq(mvu.rowparam.ready)]
        # the results: to the sampler, added to the residual, through SwiGLU with the gate
        # (both read by the second reader as the results leave), or stored
        flag, reader, j = self.sink_of, sp.reader1, self.j
        sampler, swiglu = self.units.sampler, self.units.swiglu
        value, last = mvu.out.payload.value, mvu.out.payload.last
        # the reader's row is done with its last element (or the vector's)
        row_done = (equals(j[:sp.shift], self.p.vector_width - 1) if sp.shift else 1) | last
        m.d.comb += [
            mvu.out.ready.eq((flag[Sink.SAMPLE] & sampler.logits.ready)
                             | (flag[Sink.ADD] & reader.valid)
                             | (flag[Sink.SWIGLU] & swiglu.x.ready & reader.valid)
                             | flag[Sink.STORE]),
            sampler.logits.valid.eq(flag[Sink.SAMPLE] & mvu.out.valid),
            sampler.logits.payload.value.eq(value), sampler.logits.payload.last.eq(last),
            swiglu.x.valid.eq(flag[Sink.SWIGLU] & mvu.out.valid & reader.valid),
            swiglu.x.payload.gate.eq(sp.element(reader.row, j)[:8]),
            swiglu.x.payload.up.eq(value[:8]), swiglu.x.payload.last.eq(last),
            reader.ready.eq(mvu.out.valid & row_done
                            & (flag[Sink.ADD] | (flag[Sink.SWIGLU] & swiglu.x.ready))),
        ]

    def reset(self) -> None:
        """A new token: the first operator, the first layer."""
        self.m.d.sync += [*self._counters(), self.pc.eq(0), self.layer.eq(0)]

    def run(self, op: Operator) -> None:
        """Elaborate operator ``op``'s case of the program counter."""
        {Unit.EMBED: self.embed, Unit.NORM: self.norm, Unit.MATVEC: self.linear,
         Unit.ROPE: self.rope, Unit.KV_WRITE: self.kv_write, Unit.ATTENTION: self.attention,
         Unit.SILU_TABLE: self.silu_table}[op.unit](op)

    def next_op(self, op: Operator) -> None:
        """``op`` is done: on to the next operator (after a layer's last, the next layer)."""
        m = self.m
        m.d.sync += self._counters()
        if OPERATORS.index(op) == last_layer_pc():  # the next layer, or the final norm
            with m.If(self.layer == self.n_layers - 1):
                m.d.sync += self.pc.eq(self.pc + 1)
            with m.Else():
                m.d.sync += [self.pc.eq(first_layer_pc()), self.layer.eq(self.layer + 1)]
        else:
            m.d.sync += self.pc.eq(self.pc + 1)

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
        m, w, param, sp = self.m, self.w, self.param, self.sp
        phase, have, lane, i = self.phase, self.have, self.lane, self.i
        with m.If(equals(phase, 0)):  # the row's multiplier
            m.d.comb += param.ready.eq(1)
            with m.If(param.valid):
                m.d.sync += [self.p_mult.eq(param.data.mult), self.p_shift.eq(param.data.shift),
                             phase.eq(1)]
        with m.If(equals(phase, 1)):
            with m.If(~have):
                m.d.comb += w.ready.eq(1)
                with m.If(w.valid):
                    m.d.sync += [self.beat.eq(w.data), have.eq(1), lane.eq(0)]
            with m.Else():  # an element a cycle into the requantizer
                m.d.comb += self.embed_pick.eq(1)
                m.d.sync += [i.eq(i + 1), lane.eq(lane + 1)]
                with m.If(equals(lane, self.p.lanes - 1)):
                    m.d.sync += have.eq(0)
                with m.If(equals(i, self.c.hidden - 1)):
                    m.d.sync += phase.eq(2)
        sp.store_element(sp.start[op.dst] + self.embed_index, self.embed_value,
                         self.embed_stored)
        with m.If(self.embed_last):
            self.next_op(op)

    def norm(self, op: Operator) -> None:
        m, c, sp, param, norm = self.m, self.c, self.sp, self.param, self.units.norm
        phase, j, vw = self.phase, self.j, self.p.vector_width
        reader = sp.reader0
        with m.If(equals(phase, 0)):
            m.d.comb += [norm.cmd.valid.eq(1), norm.cmd.payload.length.eq(c.hidden),
                         norm.cmd.payload.eps_q.eq(self.q_model.eps_q)]
            with m.If(norm.cmd.ready):
                reader.start(sp.row_of[op.src], c.hidden // vw)
                m.d.sync += phase.eq(1)
        with m.If(equals(phase, 1)):  # rows in from the reader, ``j`` counts elements out
            m.d.comb += [norm.x.payload.eq(reader.row), norm.x.valid.eq(reader.valid),
                         reader.ready.eq(norm.x.ready),
                         norm.gain.valid.eq(param.valid),
                         param.ready.eq(norm.gain.ready),
                         norm.y.ready.eq(1)]
            sp.store_element(sp.start[op.dst] + j, norm.y.payload.value, norm.y.valid)
            with m.If(norm.y.valid):
                m.d.sync += j.eq(j + 1)
                with m.If(norm.y.payload.last):
                    self.next_op(op)

    def linear(self, op: Operator) -> None:
        m, sp, mvu = self.m, self.sp, self.units.mvu
        phase, i, j, lane, have, beat = self.phase, self.i, self.j, self.lane, self.have, self.beat
        lanes, vw = self.p.lanes, self.p.vector_width
        cols, rows = getattr(self.c, op.cols), getattr(self.c, op.rows)
        beats = -(-cols // lanes)
        reader = sp.reader0
        with m.If(equals(phase, 0)):
            m.d.comb += [mvu.cmd.valid.eq(1), mvu.cmd.payload.rows.eq(rows),
                         mvu.cmd.payload.beats.eq(beats),
                         mvu.cmd.payload.out_bits.eq(OutBits[f"INT{op.out_bits}"]),
                         mvu.cmd.payload.reuse.eq(op.reuse)]
            with m.If(mvu.cmd.ready):
                m.d.sync += self._stream(op) if op.reuse else phase.eq(1)
                if not op.reuse:
                    reader.start(sp.row_of[op.src], cols // vw)
                self._start_sink(op)
        if not op.reuse:
            # load the vector, ``vw`` elements (one scratchpad row) a cycle and ``lanes`` a
            # beat; ``i`` counts rows, ``lane`` the rows of the beat; rows past the vector
            # are zeros
            with m.If(equals(phase, 1)):
                with m.If(~have):
                    padding = Signal()
                    m.d.comb += padding.eq(i >= cols // vw)
                    chunk = Signal(8 * vw)
                    m.d.comb += [chunk.eq(Mux(padding, 0, sp.low_bytes(reader.row))),
                                 reader.ready.eq(~padding)]
                    with m.If(padding | reader.valid):
                        m.d.sync += [beat.as_value().word_select(lane, 8 * vw).eq(chunk),
                                     i.eq(i + 1), lane.eq(lane + 1)]
                        with m.If(equals(lane, lanes // vw - 1)):
                            m.d.sync += [have.eq(1), lane.eq(0)]
                with m.Else():
                    m.d.comb += [mvu.vec.valid.eq(1), mvu.vec.payload.eq(beat)]
                    with m.If(mvu.vec.ready):
                        m.d.sync += have.eq(0)
                        with m.If(i >= beats * lanes // vw):
                            m.d.sync += self._stream(op)
        with m.If(equals(phase, 2)):  # the streams: :meth:`matvec_streams`
            self._sink(op)
            with m.If(mvu.out.valid & mvu.out.ready):
                m.d.sync += j.eq(j + 1)
                if op.sink is not Sink.SWIGLU:
                    with m.If(mvu.out.payload.last):
                        self.next_op(op)

    def _start_sink(self, op: Operator) -> None:
        """The rows a sink reads as the results leave (the residual, the gate), read ahead."""
        sp, vw, rows = self.sp, self.p.vector_width, getattr(self.c, op.rows)
        if op.sink is Sink.ADD:
            sp.reader1.start(sp.row_of[op.dst], rows // vw)
        elif op.sink is Sink.SWIGLU:
            sp.reader1.start(sp.row_of["g"], rows // vw)

    def _sink(self, op: Operator) -> None:
        """Where the matrix-vector results go, one a cycle (``j`` counts them); the
        handshakes are :meth:`matvec_streams`'s."""
        m, sp, j, mvu = self.m, self.sp, self.j, self.units.mvu
        value = mvu.out.payload.value
        reader = sp.reader1
        if op.sink is Sink.ADD:  # r[j] = sat16(r[j] + value)
            total = Signal(signed(18))
            m.d.comb += total.eq(sp.element(reader.row, j) + value)
            sp.store_element(sp.start[op.dst] + j, saturate(m, total, 16),
                             mvu.out.valid & reader.valid)
        elif op.sink is Sink.SWIGLU:  # x[k] = swiglu(g[k], up[k]), g read as up[j] leaves
            swiglu = self.units.swiglu
            m.d.comb += swiglu.y.ready.eq(1)
            # the unit's results trail its inputs by its pipeline: ``k`` counts them
            sp.store_element(sp.start[op.dst] + self.k, swiglu.y.payload.value, swiglu.y.valid)
            with m.If(swiglu.y.valid):
                m.d.sync += self.k.eq(self.k + 1)
                with m.If(swiglu.y.payload.last):
                    self.next_op(op)
        elif op.sink is Sink.STORE:
            sp.store_element(sp.start[op.dst] + j, value, mvu.out.valid)

    def rope(self, op: Operator) -> None:  # in place, a scratchpad row a beat
        m, sp, rope = self.m, self.sp, self.units.rope
        phase, i, j = self.phase, self.i, self.j
        reader = sp.reader0
        n = getattr(self.c, op.heads) * self.c.head_dim // self.p.vector_width
        with m.If(equals(phase, 0)):
            m.d.comb += [rope.cmd.valid.eq(1), rope.cmd.payload.eq(self.token.pos)]
            with m.If(rope.cmd.ready):
                reader.start(sp.row_of[op.src], n)
                m.d.sync += phase.eq(1)
        with m.If(equals(phase, 1)):
            m.d.comb += [rope.x.payload.value.eq(sp.low_bytes(reader.row)),
                         rope.x.payload.last.eq(equals(i, n - 1)),
                         rope.x.valid.eq(reader.valid), reader.ready.eq(rope.x.ready)]
            with m.If(rope.x.valid & rope.x.ready):
                m.d.sync += i.eq(i + 1)
            m.d.comb += rope.y.ready.eq(1)
            sp.store_row(sp.row_of[op.dst] + j, rope.y.payload.value, rope.y.valid)
            with m.If(rope.y.valid):
                m.d.sync += j.eq(j + 1)
                with m.If(rope.y.payload.last):
                    self.next_op(op)

    def kv_write(self, op: Operator) -> None:
        # per KV head: its K rows gathered (phases 0-1), its V rows (2-3), the write (4)
        m, sp, att, reader = self.m, self.sp, self.units.att, self.sp.reader0
        i, head, phase, vw = self.i, self.head, self.phase, self.p.vector_width
        head_rows, bits = self.head_rows, self.index_bits
        for start_phase, buffer, target in ((0, "k", self.krow), (2, "v", self.row)):
            with m.If(equals(phase, start_phase)):
                reader.start(sp.row_of[buffer] + head * head_rows, head_rows)
                m.d.sync += [phase.eq(start_phase + 1), i.eq(0)]
            with m.If(equals(phase, start_phase + 1)):
                m.d.comb += reader.ready.eq(1)
                with m.If(reader.valid):
                    m.d.sync += [target.as_value().word_select(i[:bits], 8 * vw).eq(
                                     sp.low_bytes(reader.row)), i.eq(i + 1)]
                    with m.If(equals(i, head_rows - 1)):
                        m.d.sync += phase.eq(start_phase + 2)
        with m.If(equals(phase, 4)):
            p = att.kv_write.payload
            m.d.comb += [att.kv_write.valid.eq(1), p.layer.eq(self.layer), p.kv_head.eq(head),
                         p.pos.eq(self.token.pos), p.k.eq(self.krow), p.v.eq(self.row)]
            with m.If(att.kv_write.ready):
                m.d.sync += [phase.eq(0), head.eq(head + 1)]
                with m.If(equals(head, self.c.kv_heads - 1)):
                    self.next_op(op)

    def attention(self, op: Operator) -> None:
        # ``head`` is the job's first query head, ``lane`` counts its query beats sent
        m, c, sp, att = self.m, self.c, self.sp, self.units.att
        phase, i, j, lane, head = self.phase, self.i, self.j, self.lane, self.head
        hp, vw, head_rows = self.p.heads_parallel, self.p.vector_width, self.head_rows
        reader = sp.reader0
        group = c.heads // c.kv_heads
        with m.If(equals(phase, 0)):
            cmd = att.cmd.payload
            m.d.comb += [att.cmd.valid.eq(1), cmd.layer.eq(self.layer),
                         cmd.kv_head.eq(head // group if group > 1 else head),
                         cmd.length.eq(self.token.pos + 1),
                         cmd.exp_mult.eq(self.exp_mult), cmd.exp_shift.eq(self.exp_shift),
                         cmd.out_mult.eq(self.out_mult), cmd.out_shift.eq(self.out_shift)]
            with m.If(att.cmd.ready):
                # the job's query heads are consecutive rows
                reader.start(sp.row_of[op.src] + head * head_rows, hp * head_rows)
                m.d.sync += [phase.eq(1), i.eq(0), j.eq(0), lane.eq(0)]
        with m.If(equals(phase, 1)):  # gather a query head, a scratchpad row a cycle
            m.d.comb += reader.ready.eq(1)
            with m.If(reader.valid):
                m.d.sync += [self.row.as_value().word_select(i[:self.index_bits], 8 * vw).eq(
                                 sp.low_bytes(reader.row)),
                             i.eq(i + 1)]
                with m.If(equals(i, head_rows - 1)):
                    m.d.sync += phase.eq(2)
        with m.If(equals(phase, 2)):
            m.d.comb += [att.q.valid.eq(1), att.q.payload.eq(self.row)]
            with m.If(att.q.ready):
                m.d.sync += [lane.eq(lane + 1), i.eq(0),
                             phase.eq(Mux(equals(lane, hp - 1), 3, 1))]
        with m.If(equals(phase, 3)):  # ``j`` counts output rows
            m.d.comb += att.out.ready.eq(1)
            sp.store_row(sp.row_of[op.dst] + head * head_rows + j, att.out.payload.value,
                         att.out.valid)
            with m.If(att.out.valid):
                m.d.sync += j.eq(j + 1)
                with m.If(att.out.payload.last):
                    m.d.sync += [head.eq(head + hp), phase.eq(0)]
                    with m.If(equals(head, c.heads - hp)):
                        self.next_op(op)

    def silu_table(self, op: Operator) -> None:
        m, param, swiglu, i = self.m, self.param, self.units.swiglu, self.i
        m.d.comb += [swiglu.params.valid.eq(1),
                     swiglu.params.payload.mult.eq(self.act_mult),
                     swiglu.params.payload.shift.eq(self.act_shift),
                     param.ready.eq(1), swiglu.table.valid.eq(param.valid),
                     swiglu.table.payload.addr.eq(i[:8])]
        with m.If(param.valid):
            m.d.sync += i.eq(i + 1)
            with m.If(equals(i, 255)):
                self.next_op(op)
