"""Attention unit: one query head against its KV head's cache, with the reference's integer
softmax (exp table, one division per row) and weighted sum of values."""

from amaranth.hdl import Const, Module, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model.qwen2_int8 import EXP
from heteroreason.rtl.arith import requantize
from heteroreason.rtl.compare import equals

__all__ = ["Attention"]

_IDLE, _SCORE, _EXP, _DIVIDE, _ACCUMULATE, _EMIT = range(6)
_SUM_BITS = 32  # sum of up to 2**16 exp values of at most 2**15


class Attention(wiring.Component):
    """Decode-time attention of ``heads`` query heads that share one KV head
    (:mod:`heteroreason.model.qwen2_int8`, *Attention scores and softmax*).

    The KV cache of every layer and KV head lives in on-chip memory, written through
    ``kv_write`` (one K and one V row per beat). A ``cmd`` beat names the layer, KV head,
    attention length ``T`` and the job's multipliers; ``heads`` beats on ``q`` bring the rotated
    query heads. For all heads at once the unit computes the ``T`` scores (``heads`` dot products
    of ``head_dim`` a cycle, one cache row read), their table exponentials and sums, the rows'
    reciprocals by restoring dividers, the probability-weighted sums of the values
    (``heads * head_dim`` accumulators, one cache row a cycle), and emits ``heads * head_dim``
    int8 outputs, head by head (``last`` on the job's final one).

    Parameters
    ----------
    head_dim, kv_heads, layers, max_context : int
    heads : int
        Query heads per job (grouped-query attention: heads that share the KV head).

    Members
    -------
    kv_write : In(stream.Signature(layer, kv_head, pos, k, v))
    cmd : In(stream.Signature(layer, kv_head, length, exp_mult, exp_shift, out_mult, out_shift))
    q : In(stream.Signature(ArrayLayout(signed(8), head_dim)))
    out : Out(stream.Signature(StructLayout value signed(8), last))

    Latency
    -------
    ``3 T + 48 + heads * head_dim`` cycles from the last query beat to the last output (plus
    output stalls).

    Throughput
    ----------
    ``heads * head_dim`` MACs a cycle in the score and weighted-sum passes.
    """

    def __init__(self, *, head_dim, kv_heads, layers, max_context, heads=1):
        for name, value in (("head_dim", head_dim), ("kv_heads", kv_heads), ("layers", layers),
                            ("max_context", max_context), ("heads", heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise TypeError(f"{name} must be a positive integer, not {value!r}")
        if max_context > 2**16:
            raise ValueError(f"max_context must be at most 65536, not {max_context}")
        self._head_dim = head_dim
        self._kv_heads = kv_heads
        self._layers = layers
        self._max_context = max_context
        self._heads = heads
        row = data.ArrayLayout(signed(8), head_dim)
        super().__init__({
            "kv_write": In(stream.Signature(data.StructLayout({
                "layer": range(layers), "kv_head": range(kv_heads), "pos": range(max_context),
                "k": row, "v": row}))),
            "cmd": In(stream.Signature(data.StructLayout({
                "layer": range(layers), "kv_head": range(kv_heads),
                "length": range(1, max_context + 1),
                "exp_mult": unsigned(31), "exp_shift": unsigned(6),
                "out_mult": unsigned(31), "out_shift": unsigned(6)}))),
            "q": In(stream.Signature(row)),
            "out": Out(stream.Signature(data.StructLayout({"value": signed(8), "last": 1}))),
        })

    @property
    def heads(self):
        return self._heads

    def elaborate(self, platform):
        m = Module()
        hd, nh = self._head_dim, self._heads
        rows = self._layers * self._kv_heads * self._max_context
        row = data.ArrayLayout(signed(8), hd)
        m.submodules.keys = keys = memory.Memory(shape=row, depth=rows, init=[])
        m.submodules.values = values = memory.Memory(shape=row, depth=rows, init=[])
        m.submodules.scores = scores = memory.Memory(
            shape=data.ArrayLayout(signed(32), nh), depth=self._max_context, init=[])
        m.submodules.exp = exp_rom = memory.Memory(shape=unsigned(16), depth=256,
                                                   init=[int(v) for v in EXP])
        k_wr, v_wr = keys.write_port(), values.write_port()
        k_rd, v_rd = keys.read_port(domain="comb"), values.read_port(domain="comb")
        s_wr, s_rd = scores.write_port(), scores.read_port(domain="comb")
        e_rds = [exp_rom.read_port(domain="comb") for _ in range(nh)]

        def base(layer, kv_head):
            return (layer * self._kv_heads + kv_head) * self._max_context

        # cache writes are accepted whenever no job is running
        state = Signal(range(6))
        idle = equals(state, _IDLE)
        w = self.kv_write.payload
        m.d.comb += [
            self.kv_write.ready.eq(idle),
            k_wr.addr.eq(base(w.layer, w.kv_head) + w.pos), k_wr.data.eq(w.k),
            v_wr.addr.eq(base(w.layer, w.kv_head) + w.pos), v_wr.data.eq(w.v),
            k_wr.en.eq(self.kv_write.valid & idle), v_wr.en.eq(self.kv_write.valid & idle),
        ]

        job = Signal(self.cmd.payload.shape())
        query = Signal(data.ArrayLayout(row, nh))
        queries = Signal(range(nh + 1))
        t = Signal(range(self._max_context + 1))
        best = Signal(data.ArrayLayout(signed(32), nh))
        total = Signal(data.ArrayLayout(unsigned(_SUM_BITS), nh))
        remainder = Signal(data.ArrayLayout(unsigned(48), nh))
        quotient = Signal(data.ArrayLayout(unsigned(47), nh))
        bit = Signal(range(48))
        acc = Signal(data.ArrayLayout(signed(32), nh * hd))
        d = Signal(range(nh * hd + 1))
        start = Signal(range(rows + 1))
        m.d.comb += [k_rd.addr.eq(start + t), v_rd.addr.eq(start + t), s_rd.addr.eq(t),
                     s_wr.addr.eq(t)]
        last_row = t == job.length - 1

        with m.If(idle):
            m.d.comb += self.cmd.ready.eq(~self.kv_write.valid)
            with m.If(self.cmd.valid & ~self.kv_write.valid):
                m.d.sync += [job.eq(self.cmd.payload), t.eq(0), queries.eq(0),
                             start.eq(base(self.cmd.payload.layer, self.cmd.payload.kv_head)),
                             state.eq(_SCORE)]

        with m.If(equals(state, _SCORE)):
            m.d.comb += self.q.ready.eq(queries < nh)
            with m.If(self.q.valid & (queries < nh)):
                index_bits = max(1, (nh - 1).bit_length())
                m.d.sync += [query.as_value().word_select(queries[:index_bits], hd * 8).eq(
                                 self.q.payload), queries.eq(queries + 1)]
            with m.Elif(equals(queries, nh)):
                for h in range(nh):
                    dot = Signal(signed(32), name=f"dot{h}")
                    m.d.comb += [dot.eq(sum(query[h][i] * k_rd.data[i] for i in range(hd))),
                                 s_wr.data[h].eq(dot)]
                    with m.If((t == 0) | (dot > best[h])):
                        m.d.sync += best[h].eq(dot)
                m.d.comb += s_wr.en.eq(1)
                m.d.sync += t.eq(t + 1)
                with m.If(last_row):
                    m.d.sync += [t.eq(0), total.eq(0), state.eq(_EXP)]

        with m.If(equals(state, _EXP)):
            for h, e_rd in enumerate(e_rds):
                diff = Signal(signed(33), name=f"diff{h}")
                m.d.comb += diff.eq(s_rd.data[h] - best[h])
                scaled = requantize(m, diff, job.exp_mult, job.exp_shift, 34)
                index = Signal(unsigned(8), name=f"index{h}")
                with m.If(-scaled > 255):
                    m.d.comb += index.eq(255)
                with m.Else():
                    m.d.comb += index.eq(-scaled)
                m.d.comb += [e_rd.addr.eq(index), s_wr.data[h].eq(e_rd.data)]
                m.d.sync += total[h].eq(total[h] + e_rd.data)
            m.d.comb += s_wr.en.eq(1)
            m.d.sync += t.eq(t + 1)
            with m.If(last_row):
                m.d.sync += [t.eq(0), remainder.eq(0), quotient.eq(0), bit.eq(47),
                             state.eq(_DIVIDE)]

        with m.If(equals(state, _DIVIDE)):
            # 2**46 // total, one quotient bit per cycle from bit 46 down, every head at once
            with m.If(bit != 0):
                position = Signal(range(47))
                m.d.comb += position.eq(bit - 1)
                for h in range(nh):
                    shifted = Signal(unsigned(48), name=f"shifted{h}")
                    m.d.comb += shifted.eq((remainder[h] << 1) | equals(position, 46))
                    with m.If(shifted >= total[h]):
                        m.d.sync += [remainder[h].eq(shifted - total[h]),
                                     quotient[h].eq(quotient[h] | (Const(1, 47) << position))]
                    with m.Else():
                        m.d.sync += remainder[h].eq(shifted)
                m.d.sync += bit.eq(bit - 1)
            with m.Else():
                m.d.sync += [acc.eq(0), t.eq(0), state.eq(_ACCUMULATE)]

        with m.If(equals(state, _ACCUMULATE)):
            for h in range(nh):
                prob = Signal(unsigned(17), name=f"prob{h}")
                wide = Signal(unsigned(64), name=f"wide{h}")
                m.d.comb += [wide.eq(s_rd.data[h].as_unsigned()[:16] * quotient[h] + (1 << 29)),
                             prob.eq(wide[30:47])]
                for i in range(hd):
                    m.d.sync += acc[h * hd + i].eq(acc[h * hd + i] + prob * v_rd.data[i])
            m.d.sync += t.eq(t + 1)
            with m.If(last_row):
                m.d.sync += [d.eq(0), state.eq(_EMIT)]

        with m.If(equals(state, _EMIT)):
            element = Signal(signed(32))
            m.d.comb += element.eq(acc.as_value().word_select(d, 32).as_signed())
            value = requantize(m, element, job.out_mult, job.out_shift, 8)
            last = equals(d, nh * hd - 1)
            m.d.comb += [self.out.valid.eq(1), self.out.payload.value.eq(value),
                         self.out.payload.last.eq(last)]
            with m.If(self.out.ready):
                m.d.sync += d.eq(d + 1)
                with m.If(last):
                    m.d.sync += state.eq(_IDLE)
        return m
