"""Attention unit: one query head against its KV head's cache, with the reference's integer
softmax (exp table, one division per row) and weighted sum of values."""

from types import SimpleNamespace

from amaranth.hdl import Const, Module, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model.numerics.qwen2_int8 import EXP
from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.arith import requantize, tree_sum

__all__ = ["Attention", "kv_memory_ports"]

_IDLE, _SCORE, _EXP, _DIVIDE, _ACCUMULATE, _EMIT = range(6)
_SUM_BITS = 32  # sum of up to 2**16 exp values of at most 2**15


def kv_memory_ports(*, head_dim: int, rows: int, max_context: int) -> dict:
    """The members of an external KV cache's ports (see :class:`Attention`)."""
    row = data.ArrayLayout(signed(8), head_dim)
    request = stream.Signature(data.StructLayout({
        "addr": range(rows), "count": range(1, max_context + 1)}))
    return {
        "kv_store": Out(stream.Signature(data.StructLayout({
            "addr": range(rows), "k": row, "v": row}))),
        "k_req": Out(request), "v_req": Out(request),
        "k_rows": In(stream.Signature(row)), "v_rows": In(stream.Signature(row)),
    }


class Attention(wiring.Component):
    """Decode-time attention of ``heads`` query heads that share one KV head
    (:mod:`heteroreason.model.numerics.qwen2_int8`, *Attention scores and softmax*).

    The KV cache of every layer and KV head lives in on-chip memory, written through
    ``kv_write`` (one K and one V row per beat); with ``external_kv`` it lives in memory outside
    instead: ``kv_write`` beats leave on ``kv_store`` with their row address, and a job requests
    its ``T`` key rows on ``k_req`` and value rows on ``v_req`` as it starts (both at once, so
    the values arrive while the scores are computed) and takes them on ``k_rows``/``v_rows``.

    A ``cmd`` beat names the layer, KV head, attention length ``T`` and the job's multipliers;
    ``heads`` beats on ``q`` bring the rotated query heads. For all heads at once the unit
    computes the ``T`` scores (``heads`` dot products of ``head_dim`` a cycle, one cache row
    read), their table exponentials and sums, the rows' reciprocals by restoring dividers, the
    probability-weighted sums of the values (``heads * head_dim`` accumulators, one cache row a
    cycle), and emits ``heads * head_dim`` int8 outputs, head by head, ``width`` a beat (``last``
    on the job's final beat).

    Parameters
    ----------
    head_dim, kv_heads, layers, max_context : int
    heads : int
        Query heads per job (grouped-query attention: heads that share the KV head).
    external_kv : bool
        Keep the KV cache behind the memory ports instead of on chip.
    width : int
        Outputs per ``out`` beat; must divide ``head_dim``.

    Members
    -------
    kv_write : In(stream.Signature(layer, kv_head, pos, k, v))
    cmd : In(stream.Signature(layer, kv_head, length, exp_mult, exp_shift, out_mult, out_shift))
    q : In(stream.Signature(ArrayLayout(signed(8), head_dim)))
    out : Out(stream.Signature(StructLayout value ArrayLayout(signed(8), width), last))
    kv_store : Out(stream.Signature(StructLayout addr, k, v))
        Only with ``external_kv``; row ``(layer * kv_heads + kv_head) * max_context + pos``.
    k_req, v_req : Out(stream.Signature(StructLayout addr, count))
    k_rows, v_rows : In(stream.Signature(ArrayLayout(signed(8), head_dim)))
        Only with ``external_kv``.

    Latency
    -------
    ``3 T + 48 + heads * head_dim / width`` cycles from the last query beat to the last output
    (plus output stalls).

    Throughput
    ----------
    ``heads * head_dim`` MACs a cycle in the score and weighted-sum passes.
    """

    def __init__(self, *, head_dim, kv_heads, layers, max_context, heads=1, external_kv=False,
                 width=1):
        for name, value in (("head_dim", head_dim), ("kv_heads", kv_heads), ("layers", layers),
                            ("max_context", max_context), ("heads", heads), ("width", width)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise TypeError(f"{name} must be a positive integer, not {value!r}")
        if head_dim % width:
            raise ValueError(f"width ({width}) must divide head_dim ({head_dim})")
        if max_context > 2**16:
            raise ValueError(f"max_context must be at most 65536, not {max_context}")
        self._head_dim = head_dim
        self._kv_heads = kv_heads
        self._layers = layers
        self._max_context = max_context
        self._heads = heads
        self._external_kv = bool(external_kv)
        self._width = width
        row = data.ArrayLayout(signed(8), head_dim)
        rows = layers * kv_heads * max_context
        ports = kv_memory_ports(head_dim=head_dim, rows=rows, max_context=max_context) if \
            external_kv else {}
        super().__init__(ports | {
            "kv_write": In(stream.Signature(data.StructLayout({
                "layer": range(layers), "kv_head": range(kv_heads), "pos": range(max_context),
                "k": row, "v": row}))),
            "cmd": In(stream.Signature(data.StructLayout({
                "layer": range(layers), "kv_head": range(kv_heads),
                "length": range(1, max_context + 1),
                "exp_mult": unsigned(31), "exp_shift": unsigned(6),
                "out_mult": unsigned(31), "out_shift": unsigned(6)}))),
            "q": In(stream.Signature(row)),
            "out": Out(stream.Signature(data.StructLayout({
                "value": data.ArrayLayout(signed(8), width), "last": 1}))),
        })

    @property
    def heads(self):
        return self._heads

    @property
    def external_kv(self):
        return self._external_kv

    @property
    def width(self):
        return self._width

    def elaborate(self, platform):
        m = Module()
        nh = self._heads
        m.submodules.scores = scores = memory.Memory(
            shape=data.ArrayLayout(signed(32), nh), depth=self._max_context, init=[])
        m.submodules.exp = exp_rom = memory.Memory(shape=unsigned(16), depth=256,
                                                   init=[int(v) for v in EXP])
        # synchronous reads (block RAM): each pass reads one row ahead of the one it uses
        s_wr = scores.write_port()
        j = self._job_signals(m, s_wr, scores.read_port(transparent_for=(s_wr,)),
                              [exp_rom.read_port(domain="comb") for _ in range(nh)])
        self._cache(m, j)
        with m.If(j.idle):
            m.d.comb += self.cmd.ready.eq(~self.kv_write.valid)
            with m.If(self.cmd.valid & ~self.kv_write.valid):
                m.d.sync += [j.job.eq(self.cmd.payload), j.t.eq(0), j.queries.eq(0),
                             j.start.eq(self._base(self.cmd.payload.layer,
                                                   self.cmd.payload.kv_head)),
                             j.state.eq(_SCORE)]
        if self._external_kv:  # both requests go out as the job starts
            self._requests(m, j)
        with m.If(equals(j.state, _SCORE)):
            self._score(m, j)
        with m.If(equals(j.state, _EXP)):
            self._exp(m, j)
        with m.If(equals(j.state, _DIVIDE)):
            self._divide(m, j)
        with m.If(equals(j.state, _ACCUMULATE)):
            self._accumulate(m, j)
        with m.If(equals(j.state, _EMIT)):
            self._emit(m, j)
        return m

    def _base(self, layer, kv_head):
        """The cache row of position 0 of ``kv_head`` in ``layer``."""
        return (layer * self._kv_heads + kv_head) * self._max_context

    def _job_signals(self, m, s_wr, s_rd, e_rds) -> SimpleNamespace:
        """The state of a job, shared by the passes."""
        hd, nh = self._head_dim, self._heads
        row = data.ArrayLayout(signed(8), hd)
        state = Signal(range(6))
        j = SimpleNamespace(
            s_wr=s_wr, s_rd=s_rd, e_rds=e_rds, state=state, idle=equals(state, _IDLE),
            key_row=Signal(row), value_row=Signal(row),  # the cache rows at start + t
            job=Signal(self.cmd.payload.shape()),
            query=Signal(data.ArrayLayout(row, nh)),
            queries=Signal(range(nh + 1)),
            t=Signal(range(self._max_context + 1)),
            best=Signal(data.ArrayLayout(signed(32), nh)),
            total=Signal(data.ArrayLayout(unsigned(_SUM_BITS), nh)),
            remainder=Signal(data.ArrayLayout(unsigned(48), nh)),
            quotient=Signal(data.ArrayLayout(unsigned(47), nh)),
            bit=Signal(range(48)),
            acc=Signal(data.ArrayLayout(signed(32), nh * hd)),
            d=Signal(range(nh * hd + 1)),
            start=Signal(range(self._layers * self._kv_heads * self._max_context + 1)))
        j.last_row = j.t == j.job.length - 1
        m.d.comb += s_wr.addr.eq(j.t)
        return j

    def _cache(self, m, j) -> None:
        """The KV cache: on chip, or behind the memory ports; writes are accepted whenever no
        job is running."""
        w = self.kv_write.payload
        if self._external_kv:
            m.d.comb += [
                self.kv_store.valid.eq(self.kv_write.valid & j.idle),
                self.kv_store.payload.addr.eq(self._base(w.layer, w.kv_head) + w.pos),
                self.kv_store.payload.k.eq(w.k), self.kv_store.payload.v.eq(w.v),
                self.kv_write.ready.eq(j.idle & self.kv_store.ready),
                j.key_row.eq(self.k_rows.payload), j.value_row.eq(self.v_rows.payload),
            ]
            j.key_valid, j.value_valid = self.k_rows.valid, self.v_rows.valid
            return
        row = data.ArrayLayout(signed(8), self._head_dim)
        rows = self._layers * self._kv_heads * self._max_context
        m.submodules.keys = keys = memory.Memory(shape=row, depth=rows, init=[])
        m.submodules.values = values = memory.Memory(shape=row, depth=rows, init=[])
        k_wr, v_wr = keys.write_port(), values.write_port()
        j.k_rd, j.v_rd = keys.read_port(), values.read_port()
        m.d.comb += [
            self.kv_write.ready.eq(j.idle),
            k_wr.addr.eq(self._base(w.layer, w.kv_head) + w.pos), k_wr.data.eq(w.k),
            v_wr.addr.eq(self._base(w.layer, w.kv_head) + w.pos), v_wr.data.eq(w.v),
            k_wr.en.eq(self.kv_write.valid & j.idle), v_wr.en.eq(self.kv_write.valid & j.idle),
            j.key_row.eq(j.k_rd.data), j.value_row.eq(j.v_rd.data),
            # row 0 of the job unless a pass is under way
            j.k_rd.addr.eq(j.start), j.v_rd.addr.eq(j.start),
        ]
        j.key_valid = j.value_valid = 1

    def _requests(self, m, j) -> None:
        k_pending, v_pending = Signal(), Signal()
        with m.If(j.idle & self.cmd.valid & ~self.kv_write.valid):
            m.d.sync += [k_pending.eq(1), v_pending.eq(1)]
        for req, pending in ((self.k_req, k_pending), (self.v_req, v_pending)):
            m.d.comb += [req.valid.eq(pending), req.payload.addr.eq(j.start),
                         req.payload.count.eq(j.job.length)]
            with m.If(req.valid & req.ready):
                m.d.sync += pending.eq(0)

    def _score(self, m, j) -> None:
        """The queries in, then a score per key row and head (and each head's maximum)."""
        hd, nh = self._head_dim, self._heads
        m.d.comb += self.q.ready.eq(j.queries < nh)
        with m.If(self.q.valid & (j.queries < nh)):
            index_bits = max(1, (nh - 1).bit_length())
            m.d.sync += [j.query.as_value().word_select(j.queries[:index_bits], hd * 8).eq(
                             self.q.payload), j.queries.eq(j.queries + 1)]
        with m.Elif(equals(j.queries, nh)):
            if self._external_kv:
                m.d.comb += self.k_rows.ready.eq(1)
            else:
                m.d.comb += j.k_rd.addr.eq(j.start + j.t + 1)
            with m.If(j.key_valid):
                for h in range(nh):
                    dot = Signal(signed(32), name=f"dot{h}")
                    m.d.comb += [dot.eq(tree_sum(j.query[h][i] * j.key_row[i]
                                                 for i in range(hd))),
                                 j.s_wr.data[h].eq(dot)]
                    with m.If((j.t == 0) | (dot > j.best[h])):
                        m.d.sync += j.best[h].eq(dot)
                m.d.comb += j.s_wr.en.eq(1)
                m.d.sync += j.t.eq(j.t + 1)
                with m.If(j.last_row):
                    m.d.sync += [j.t.eq(0), j.total.eq(0), j.state.eq(_EXP)]

    def _exp(self, m, j) -> None:
        """Each score's exponential from the table, summed per head."""
        m.d.comb += j.s_rd.addr.eq(j.t + 1)
        for h, e_rd in enumerate(j.e_rds):
            diff = Signal(signed(33), name=f"diff{h}")
            m.d.comb += diff.eq(j.s_rd.data[h] - j.best[h])
            scaled = requantize(m, diff, j.job.exp_mult, j.job.exp_shift, 34)
            index = Signal(unsigned(8), name=f"index{h}")
            with m.If(-scaled > 255):
                m.d.comb += index.eq(255)
            with m.Else():
                m.d.comb += index.eq(-scaled)
            m.d.comb += [e_rd.addr.eq(index), j.s_wr.data[h].eq(e_rd.data)]
            m.d.sync += j.total[h].eq(j.total[h] + e_rd.data)
        m.d.comb += j.s_wr.en.eq(1)
        m.d.sync += j.t.eq(j.t + 1)
        with m.If(j.last_row):
            m.d.sync += [j.t.eq(0), j.remainder.eq(0), j.quotient.eq(0), j.bit.eq(47),
                         j.state.eq(_DIVIDE)]

    def _divide(self, m, j) -> None:
        """2**46 // total, one quotient bit per cycle from bit 46 down, every head at once."""
        with m.If(j.bit != 0):
            position = Signal(range(47))
            m.d.comb += position.eq(j.bit - 1)
            for h in range(self._heads):
                shifted = Signal(unsigned(48), name=f"shifted{h}")
                m.d.comb += shifted.eq((j.remainder[h] << 1) | equals(position, 46))
                with m.If(shifted >= j.total[h]):
                    m.d.sync += [j.remainder[h].eq(shifted - j.total[h]),
                                 j.quotient[h].eq(j.quotient[h] | (Const(1, 47) << position))]
                with m.Else():
                    m.d.sync += j.remainder[h].eq(shifted)
            m.d.sync += j.bit.eq(j.bit - 1)
        with m.Else():
            m.d.sync += [j.acc.eq(0), j.t.eq(0), j.state.eq(_ACCUMULATE)]

    def _accumulate(self, m, j) -> None:
        """The probability-weighted sum of the value rows."""
        hd = self._head_dim
        m.d.comb += j.s_rd.addr.eq(j.t + j.value_valid)
        if self._external_kv:
            m.d.comb += self.v_rows.ready.eq(1)
        else:
            m.d.comb += j.v_rd.addr.eq(j.start + j.t + 1)
        with m.If(j.value_valid):
            for h in range(self._heads):
                prob = Signal(unsigned(17), name=f"prob{h}")
                wide = Signal(unsigned(64), name=f"wide{h}")
                m.d.comb += [
                    wide.eq(j.s_rd.data[h].as_unsigned()[:16] * j.quotient[h] + (1 << 29)),
                    prob.eq(wide[30:47])]
                for i in range(hd):
                    m.d.sync += j.acc[h * hd + i].eq(j.acc[h * hd + i] + prob * j.value_row[i])
            m.d.sync += j.t.eq(j.t + 1)
            with m.If(j.last_row):
                m.d.sync += [j.d.eq(0), j.state.eq(_EMIT)]

    def _emit(self, m, j) -> None:
        """The requantized outputs, ``width`` a beat (``d`` counts beats)."""
        width = self._width
        chunk = Signal(data.ArrayLayout(signed(32), width))
        m.d.comb += chunk.eq(j.acc.as_value().word_select(j.d, 32 * width))
        for k in range(width):
            m.d.comb += self.out.payload.value[k].eq(
                requantize(m, chunk[k], j.job.out_mult, j.job.out_shift, 8))
        last = equals(j.d, self._heads * self._head_dim // width - 1)
        m.d.comb += [self.out.valid.eq(1), self.out.payload.last.eq(last)]
        with m.If(self.out.ready):
            m.d.sync += j.d.eq(j.d + 1)
            with m.If(last):
                m.d.sync += j.state.eq(_IDLE)
