"""The decoder core's control: the units it sequences, the prefetch buffers' read ports, the
activation scratchpad, and the sequencer — a program counter over the operator table
(:data:`heteroreason.rtl.decoder.operators.OPERATORS`) with one method per unit that
elaborates an operator's case. Used by :class:`heteroreason.rtl.decoder.core.DecoderCore`."""

from amaranth.hdl import Cat, Const, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory

from heteroreason.model.numerics.qwen2_int8 import QuantizedModel
from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.arith import requantize, saturate
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

__all__ = ["SCRATCH_BUFFERS", "Port", "Scratchpad", "Sequencer", "Units"]

SCRATCH_BUFFERS = ("r", "h", "q", "k", "v", "a", "g", "x")


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
    with two combinational read ports and a write port with a per-element enable."""

    def __init__(self, m, config, width: int):
        self.m, self.width, self.shift = m, width, width.bit_length() - 1
        self.start, at = {}, 0
        for name, size in zip(SCRATCH_BUFFERS, (config.hidden, config.hidden, config.q_dim,
                                                config.kv_dim, config.kv_dim, config.q_dim,
                                                config.ffn, config.ffn), strict=True):
            self.start[name] = at  # every size is a multiple of the width: buffers start a row
            at += size
        self.row_of = {name: start >> self.shift for name, start in self.start.items()}
        m.submodules.scratch = mem = memory.Memory(shape=data.ArrayLayout(signed(16), width),
                                                   depth=at // width, init=[])
        self.rd0 = mem.read_port(domain="comb")
        self.rd1 = mem.read_port(domain="comb")
        self.wr = mem.write_port(granularity=1)

    def load_element(self, port, addr):
        """Element ``addr`` of the scratchpad, read through ``port``."""
        m, element = self.m, Signal(signed(16))
        m.d.comb += port.addr.eq(addr >> self.shift)
        if self.shift:
            m.d.comb += element.eq(
                port.data.as_value().word_select(addr[:self.shift], 16).as_signed())
        else:
            m.d.comb += element.eq(port.data[0])
        return element

    def store_element(self, addr, value, enable) -> None:
        m, vw, wr = self.m, self.width, self.wr
        m.d.comb += wr.addr.eq(addr >> self.shift)
        m.d.comb += [wr.data[k].eq(value) for k in range(vw)]
        lane_bit = Const(1, vw) << addr[:self.shift] if self.shift else Const(1, 1)
        with m.If(enable):
            m.d.comb += wr.en.eq(lane_bit)

    def store_row(self, row, values, enable) -> None:
        """Write ``width`` int8 ``values`` (an array) at scratchpad row ``row``."""
        m, vw, wr = self.m, self.width, self.wr
        m.d.comb += [wr.addr.eq(row)] + [wr.data[k].eq(values[k]) for k in range(vw)]
        with m.If(enable):
            m.d.comb += wr.en.eq(Const((1 << vw) - 1, vw))

    def low_bytes(self, port):
        """The int8 elements of the row on ``port``, packed."""
        return Cat(*(port.data[k][:8] for k in range(self.width)))


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
        self.head_rows = c.head_dim // p.vector_width  # scratchpad rows of a head
        self.index_bits = max(1, (self.head_rows - 1).bit_length())

    def _per_layer(self, values, shape):
        """The current layer's entry of a constant table."""
        out = Signal(shape)
        with self.m.Switch(self.layer):
            for k, v in enumerate(values):
                with self.m.Case(k):
                    self.m.d.comb += out.eq(int(v))
        return out

    def _counters(self):
        return [self.phase.eq(0), self.i.eq(0), self.j.eq(0), self.k.eq(0), self.lane.eq(0),
                self.head.eq(0), self.have.eq(0)]

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
            with m.Else():
                element = Signal(signed(8))
                m.d.comb += element.eq(self.beat.as_value().word_select(lane, 8).as_signed())
                sp.store_element(sp.start[op.dst] + i,
                                 requantize(m, element, self.p_mult, self.p_shift, 16), 1)
                m.d.sync += [i.eq(i + 1), lane.eq(lane + 1)]
                with m.If(equals(lane, self.p.lanes - 1)):
                    m.d.sync += have.eq(0)
                with m.If(equals(i, self.c.hidden - 1)):
                    self.next_op(op)

    def norm(self, op: Operator) -> None:
        m, c, sp, param, norm = self.m, self.c, self.sp, self.param, self.units.norm
        phase, i, j, vw = self.phase, self.i, self.j, self.p.vector_width
        with m.If(equals(phase, 0)):
            m.d.comb += [norm.cmd.valid.eq(1), norm.cmd.payload.length.eq(c.hidden),
                         norm.cmd.payload.eps_q.eq(self.q_model.eps_q)]
            with m.If(norm.cmd.ready):
                m.d.sync += phase.eq(1)
        with m.If(equals(phase, 1)):  # ``i`` counts rows in, ``j`` elements out
            m.d.comb += [sp.rd0.addr.eq(sp.row_of[op.src] + i), norm.x.payload.eq(sp.rd0.data),
                         norm.x.valid.eq(i < c.hidden // vw)]
            with m.If(norm.x.valid & norm.x.ready):
                m.d.sync += i.eq(i + 1)
            m.d.comb += [norm.gain.valid.eq(param.valid),
                         norm.gain.payload.mult.eq(param.data.mult),
                         norm.gain.payload.shift.eq(param.data.shift),
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
        with m.If(equals(phase, 0)):
            m.d.comb += [mvu.cmd.valid.eq(1), mvu.cmd.payload.rows.eq(rows),
                         mvu.cmd.payload.beats.eq(beats),
                         mvu.cmd.payload.out_bits.eq(OutBits[f"INT{op.out_bits}"]),
                         mvu.cmd.payload.reuse.eq(op.reuse)]
            with m.If(mvu.cmd.ready):
                m.d.sync += phase.eq(2 if op.reuse else 1)
        if not op.reuse:
            # load the vector, ``vw`` elements (one scratchpad row) a cycle and ``lanes`` a
            # beat; ``i`` counts rows, ``lane`` the rows of the beat
            with m.If(equals(phase, 1)):
                with m.If(~have):
                    m.d.comb += sp.rd0.addr.eq(sp.row_of[op.src] + i)
                    chunk = Signal(8 * vw)
                    m.d.comb += chunk.eq(sp.low_bytes(sp.rd0))
                    with m.If(i >= cols // vw):
                        m.d.comb += chunk.eq(0)
                    m.d.sync += [beat.as_value().word_select(lane, 8 * vw).eq(chunk),
                                 i.eq(i + 1), lane.eq(lane + 1)]
                    with m.If(equals(lane, lanes // vw - 1)):
                        m.d.sync += [have.eq(1), lane.eq(0)]
                with m.Else():
                    m.d.comb += [mvu.vec.valid.eq(1), mvu.vec.payload.eq(beat)]
                    with m.If(mvu.vec.ready):
                        m.d.sync += have.eq(0)
                        with m.If(i >= beats * lanes // vw):
                            m.d.sync += phase.eq(2)
        with m.If(equals(phase, 2)):
            w, param = self.w, self.param
            m.d.comb += [mvu.weights.valid.eq(w.valid), mvu.weights.payload.eq(w.data),
                         w.ready.eq(mvu.weights.ready),
                         mvu.rowparam.valid.eq(param.valid),
                         mvu.rowparam.payload.bias.eq(param.data.value),
                         mvu.rowparam.payload.mult.eq(param.data.mult),
                         mvu.rowparam.payload.shift.eq(param.data.shift),
                         param.ready.eq(mvu.rowparam.ready)]
            self._sink(op)
            with m.If(mvu.out.valid & mvu.out.ready):
                m.d.sync += j.eq(j + 1)
                if op.sink is not Sink.SWIGLU:
                    with m.If(mvu.out.payload.last):
                        self.next_op(op)

    def _sink(self, op: Operator) -> None:
        """Where the matrix-vector results go, one a cycle (``j`` counts them)."""
        m, sp, j, mvu = self.m, self.sp, self.j, self.units.mvu
        value, last = mvu.out.payload.value, mvu.out.payload.last
        if op.sink is Sink.SAMPLE:
            sampler = self.units.sampler
            m.d.comb += [sampler.logits.valid.eq(mvu.out.valid),
                         sampler.logits.payload.value.eq(value),
                         sampler.logits.payload.last.eq(last),
                         mvu.out.ready.eq(sampler.logits.ready)]
        elif op.sink is Sink.ADD:  # r[j] = sat16(r[j] + value)
            total = Signal(signed(18))
            m.d.comb += [total.eq(sp.load_element(sp.rd1, sp.start[op.dst] + j) + value),
                         mvu.out.ready.eq(1)]
            sp.store_element(sp.start[op.dst] + j, saturate(m, total, 16), mvu.out.valid)
        elif op.sink is Sink.SWIGLU:  # x[k] = swiglu(g[k], up[k]), g read as up[j] leaves
            swiglu = self.units.swiglu
            gate = sp.load_element(sp.rd1, sp.start["g"] + j)
            m.d.comb += [swiglu.x.valid.eq(mvu.out.valid),
                         swiglu.x.payload.gate.eq(gate[:8]),
                         swiglu.x.payload.up.eq(value[:8]),
                         swiglu.x.payload.last.eq(last),
                         mvu.out.ready.eq(swiglu.x.ready), swiglu.y.ready.eq(1)]
            # the unit's results trail its inputs by its pipeline: ``k`` counts them
            sp.store_element(sp.start[op.dst] + self.k, swiglu.y.payload.value, swiglu.y.valid)
            with m.If(swiglu.y.valid):
                m.d.sync += self.k.eq(self.k + 1)
                with m.If(swiglu.y.payload.last):
                    self.next_op(op)
        else:
            m.d.comb += mvu.out.ready.eq(1)
            sp.store_element(sp.start[op.dst] + j, value, mvu.out.valid)

    def rope(self, op: Operator) -> None:  # in place, a scratchpad row a beat
        m, sp, rope = self.m, self.sp, self.units.rope
        phase, i, j = self.phase, self.i, self.j
        n = getattr(self.c, op.heads) * self.c.head_dim // self.p.vector_width
        with m.If(equals(phase, 0)):
            m.d.comb += [rope.cmd.valid.eq(1), rope.cmd.payload.eq(self.token.pos)]
            with m.If(rope.cmd.ready):
                m.d.sync += phase.eq(1)
        with m.If(equals(phase, 1)):
            m.d.comb += [sp.rd0.addr.eq(sp.row_of[op.src] + i),
                         rope.x.payload.value.eq(sp.low_bytes(sp.rd0)),
                         rope.x.payload.last.eq(equals(i, n - 1)), rope.x.valid.eq(i < n)]
            with m.If(rope.x.valid & rope.x.ready):
                m.d.sync += i.eq(i + 1)
            m.d.comb += rope.y.ready.eq(1)
            sp.store_row(sp.row_of[op.dst] + j, rope.y.payload.value, rope.y.valid)
            with m.If(rope.y.valid):
                m.d.sync += j.eq(j + 1)
                with m.If(rope.y.payload.last):
                    self.next_op(op)

    def kv_write(self, op: Operator) -> None:
        m, sp, att = self.m, self.sp, self.units.att
        i, head, have, vw = self.i, self.head, self.have, self.p.vector_width
        head_rows, bits = self.head_rows, self.index_bits
        with m.If(~have):  # gather K then V of one KV head, a scratchpad row a cycle
            with m.If(i < head_rows):
                m.d.comb += sp.rd0.addr.eq(sp.row_of["k"] + head * head_rows + i)
                m.d.sync += self.krow.as_value().word_select(i[:bits], 8 * vw).eq(
                    sp.low_bytes(sp.rd0))
            with m.Else():
                m.d.comb += sp.rd0.addr.eq(sp.row_of["v"] + head * head_rows + i - head_rows)
                m.d.sync += self.row.as_value().word_select((i - head_rows)[:bits],
                                                            8 * vw).eq(sp.low_bytes(sp.rd0))
            m.d.sync += i.eq(i + 1)
            with m.If(equals(i, 2 * head_rows - 1)):
                m.d.sync += [have.eq(1), i.eq(0)]
        with m.Else():
            p = att.kv_write.payload
            m.d.comb += [att.kv_write.valid.eq(1), p.layer.eq(self.layer), p.kv_head.eq(head),
                         p.pos.eq(self.token.pos), p.k.eq(self.krow), p.v.eq(self.row)]
            with m.If(att.kv_write.ready):
                m.d.sync += [have.eq(0), head.eq(head + 1)]
                with m.If(equals(head, self.c.kv_heads - 1)):
                    self.next_op(op)

    def attention(self, op: Operator) -> None:
        # ``head`` is the job's first query head, ``lane`` counts its query beats sent
        m, c, sp, att = self.m, self.c, self.sp, self.units.att
        phase, i, j, lane, head = self.phase, self.i, self.j, self.lane, self.head
        hp, vw, head_rows = self.p.heads_parallel, self.p.vector_width, self.head_rows
        group = c.heads // c.kv_heads
        with m.If(equals(phase, 0)):
            cmd = att.cmd.payload
            m.d.comb += [att.cmd.valid.eq(1), cmd.layer.eq(self.layer),
                         cmd.kv_head.eq(head // group if group > 1 else head),
                         cmd.length.eq(self.token.pos + 1),
                         cmd.exp_mult.eq(self.exp_mult), cmd.exp_shift.eq(self.exp_shift),
                         cmd.out_mult.eq(self.out_mult), cmd.out_shift.eq(self.out_shift)]
            with m.If(att.cmd.ready):
                m.d.sync += [phase.eq(1), i.eq(0), j.eq(0), lane.eq(0)]
        with m.If(equals(phase, 1)):  # gather a query head, a scratchpad row a cycle
            m.d.comb += sp.rd0.addr.eq(sp.row_of[op.src] + (head + lane) * head_rows + i)
            m.d.sync += [self.row.as_value().word_select(i[:self.index_bits], 8 * vw).eq(
                             sp.low_bytes(sp.rd0)),
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
                     swiglu.table.payload.addr.eq(i[:8]),
                     swiglu.table.payload.value.eq(param.data.value[:16])]
        with m.If(param.valid):
            m.d.sync += i.eq(i + 1)
            with m.If(equals(i, 255)):
                self.next_op(op)
