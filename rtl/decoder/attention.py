"""Attention unit: one query head against its KV head's cache, with the reference's integer
softmax (exp table, one division per row) and weighted sum of values."""

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model import checks
from heteroreason.model.spec.numerics.tables import EXP
from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.attention_phases import (
    _IDLE,
    _QUERY,
    _SCORE,
    _SUM_BITS,
    ACCUMULATE_LATENCY,
    DIVIDE_CYCLES,
    EMIT_LATENCY,
    EXP_LATENCY,
    AttentionPhases,
    _goto,
    accumulate_latency,
    exp_latency,
    job_cycles,
    score_bits,
    score_latency,
)
from heteroreason.rtl.decoder.pipeline import delay
from heteroreason.rtl.limits import CONTEXT_LIMIT, MULTIPLE_LIMIT, SIZE_LIMIT, WIDTH_LIMIT

__all__ = [
    "ACCUMULATE_LATENCY",
    "DIVIDE_CYCLES",
    "EMIT_LATENCY",
    "EXP_LATENCY",
    "Attention",
    "accumulate_latency",
    "exp_latency",
    "job_cycles",
    "kv_cache_rows",
    "kv_memory_ports",
    "score_latency",
]


def kv_cache_rows(*, layers: int, kv_heads: int, max_context: int, contexts: int = 1) -> int:
    """Rows of the KV cache (a K and a V row each): every layer's KV heads' ``max_context``
    positions; with several contexts a region each, padded to a power of two (the context id
    is the row address's top bits: no adder on the address path)."""
    rows = layers * kv_heads * max_context
    return rows if contexts == 1 else contexts << (rows - 1).bit_length()


def kv_memory_ports(*, head_dim: int, rows: int, max_context: int, kv_rows: int = 1) -> dict:
    """The members of an external KV cache's ports (see :class:`Attention`): a read beat
    carries ``kv_rows`` rows."""
    row = data.ArrayLayout(signed(8), head_dim)
    group = data.ArrayLayout(row, kv_rows)
    request = stream.Signature(data.StructLayout({
        "addr": range(rows), "count": range(1, max_context + 1)}))
    return {
        "kv_store": Out(stream.Signature(data.StructLayout({
            "addr": range(rows), "k": row, "v": row}))),
        "k_req": Out(request), "v_req": Out(request),
        "k_rows": In(stream.Signature(group)), "v_rows": In(stream.Signature(group)),
    }


class Attention(AttentionPhases, wiring.Component):
    """Decode-time attention of ``heads`` query heads that share one KV head
    (:mod:`heteroreason.model.spec.numerics.qwen2_int8`, *Attention scores and softmax*).

    The KV cache of every layer and KV head lives in on-chip memory, written through
    ``kv_write`` (one K and one V row per beat); with ``external_kv`` it lives in memory outside
    instead: ``kv_write`` beats leave on ``kv_store`` with their row address, and a job requests
    its ``T`` key rows on ``k_req`` and value rows on ``v_req`` as it starts (both at once, so
    the values arrive while the scores are computed) and takes them on ``k_rows``/``v_rows``.

    A ``cmd`` beat names the layer, KV head, attention length ``T`` and the job's multipliers;
    ``heads`` beats on ``q`` bring the rotated query heads. For all heads at once the unit
    computes the ``T`` scores (``heads`` dot products of ``head_dim`` for each of ``kv_rows``
    cache rows a cycle), their table exponentials and sums (``kv_rows`` a cycle), the rows'
    reciprocals by restoring dividers, the probability-weighted sums of the values (``heads *
    head_dim`` accumulators, ``kv_rows`` cache rows a cycle), and emits ``heads * head_dim``
    int8 outputs, head by head, ``width`` a beat (``last`` on the job's final beat). A pass
    takes ``ceil(T / kv_rows)`` cycles of rows; the rows of its last cycle beyond ``T`` (what
    the memory holds there, or zeros) take no part in the result.

    Parameters
    ----------
    head_dim, kv_heads, layers, max_context : int
    heads : int
        Query heads per job (grouped-query attention: heads that share the KV head).
    external_kv : bool
        Keep the KV cache behind the memory ports instead of on chip.
    width : int
        Outputs per ``out`` beat; must divide ``head_dim``.
    kv_rows : int
        Cache rows a cycle in each pass: a power of two that divides ``max_context`` (a job's
        rows start at a multiple of it). The on-chip cache is split into ``kv_rows`` banks
        (position modulo ``kv_rows``); an external cache's read beats carry ``kv_rows`` rows.
    contexts : int
        KV regions: above one, ``kv_write`` and ``cmd`` carry a context id (``ctx``), and a
        job reads only its context's region (:func:`kv_cache_rows`).

    Members
    -------
    kv_write : In(stream.Signature(layer, kv_head, pos, k, v))
    cmd : In(stream.Signature(layer, kv_head, length, exp_mult, exp_shift, out_mult, out_shift))
    q : In(stream.Signature(ArrayLayout(signed(8), head_dim)))
    out : Out(stream.Signature(StructLayout value ArrayLayout(signed(8), width), last))
    kv_store : Out(stream.Signature(StructLayout addr, k, v))
        Only with ``external_kv``; row ``(layer * kv_heads + kv_head) * max_context + pos`` of
        the context's region.
    k_req, v_req : Out(stream.Signature(StructLayout addr, count))
        The first row (a multiple of ``kv_rows``) and the rows wanted, ``T``.
    k_rows, v_rows : In(stream.Signature(ArrayLayout(ArrayLayout(signed(8), head_dim), kv_rows)))
        Only with ``external_kv``: ``ceil(T / kv_rows)`` beats answer a request, beat ``b``
        holding rows ``addr + b * kv_rows`` onwards (those past ``T`` are ignored).

    Latency
    -------
    :func:`job_cycles` from the last query beat to the last output (plus output stalls): each
    of the three passes over the ``T`` rows takes ``kv_rows`` rows a cycle and drains its
    pipeline (:func:`score_latency`, :func:`exp_latency`, :func:`accumulate_latency`), the
    division :data:`DIVIDE_CYCLES`, the outputs a beat a cycle through :data:`EMIT_LATENCY`
    stages.

    Throughput
    ----------
    ``kv_rows * heads * head_dim`` MACs a cycle in the score and weighted-sum passes.
    """

    def __init__(self, *, head_dim, kv_heads, layers, max_context, heads=1, external_kv=False,
                 width=1, kv_rows=1, contexts=1):
        for name, value in (("head_dim", head_dim), ("kv_heads", kv_heads), ("layers", layers),
                            ("max_context", max_context), ("heads", heads), ("width", width)):
            checks.integer(name, value, low=1, error=TypeError,
                           high=SIZE_LIMIT if name in ("layers", "max_context") else WIDTH_LIMIT)
        if head_dim % width:
            raise ValueError(f"width ({width}) must divide head_dim ({head_dim})")
        if max_context > 2**16:
            raise ValueError(f"max_context must be at most 65536, not {max_context}")
        checks.power_of_two("kv_rows", kv_rows, high=MULTIPLE_LIMIT)
        if max_context % kv_rows:
            raise ValueError(f"kv_rows ({kv_rows}) must divide max_context ({max_context})")
        checks.integer("contexts", contexts, low=1, high=CONTEXT_LIMIT, error=TypeError)
        self._contexts = contexts
        self._kv_rows = kv_rows
        self._head_dim = head_dim
        self._kv_heads = kv_heads
        self._layers = layers
        self._max_context = max_context
        self._heads = heads
        self._external_kv = bool(external_kv)
        self._width = width
        row = data.ArrayLayout(signed(8), head_dim)
        rows = kv_cache_rows(layers=layers, kv_heads=kv_heads, max_context=max_context,
                             contexts=contexts)
        self._cache_rows = rows
        ports = kv_memory_ports(head_dim=head_dim, rows=rows, max_context=max_context,
                                kv_rows=kv_rows) if external_kv else {}
        ctx = {"ctx": range(contexts)} if contexts > 1 else {}
        super().__init__(ports | {
            "kv_write": In(stream.Signature(data.StructLayout({
                "layer": range(layers), "kv_head": range(kv_heads), "pos": range(max_context),
                **ctx, "k": row, "v": row}))),
            "cmd": In(stream.Signature(data.StructLayout({
                "layer": range(layers), "kv_head": range(kv_heads), **ctx,
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

    @property
    def kv_rows(self):
        return self._kv_rows

    def elaborate(self, platform):
        m = Module()
        nh, nr = self._heads, self._kv_rows
        # a cycle's rows side by side: scores, then exponentials
        m.submodules.scores = scores = memory.Memory(
            shape=data.ArrayLayout(data.ArrayLayout(signed(32), nh), nr),
            depth=self._max_context // nr, init=[])
        m.submodules.exp = exp_rom = memory.Memory(shape=unsigned(16), depth=256,
                                                   init=[int(v) for v in EXP])
        j = self._job_signals(m, scores.write_port(), scores.read_port(),
                              [exp_rom.read_port() for _ in range(nr * nh)])
        self._cache(m, j)
        # a job starts once no cache write is offered or still on its way into the cache
        free = ~self.kv_write.valid & ~j.write_pending
        j.starting = j.idle & self.cmd.valid & free
        with m.If(j.idle):
            m.d.comb += self.cmd.ready.eq(free)
            with m.If(self.cmd.valid & free):
                m.d.sync += [j.job.eq(self.cmd.payload), j.queries.eq(0), *_goto(j, _IDLE, _QUERY)]
        # the job's first row, its last cycle of rows and which rows of that cycle lie within
        # the length, from the registered command
        shift = (nr - 1).bit_length()
        final = Signal(range(self._max_context), name="final")  # the length's last index
        m.d.comb += final.eq(j.job.length - 1)
        m.d.sync += [j.start.eq(self._address(j.job)),
                     j.last_t.eq(final >> shift)]
        if nr > 1:
            m.d.sync += j.tail.eq(Cat(final[:shift] >= r for r in range(nr)))
        if self._external_kv:  # both requests go out as the job starts
            self._requests(m, j)
        with m.If(j.state[_QUERY]):
            self._queries(m, j)
        self._score(m, j)
        self._exp(m, j)
        self._divide(m, j)
        self._accumulate(m, j)
        self._emit(m, j)
        return m

    def _base(self, layer, kv_head):
        """The cache row of position 0 of ``kv_head`` in ``layer`` within a region, read from
        a table of the bases (a multiply would put a DSP on the address path)."""
        head_bits = len(kv_head)
        bases = [((index >> head_bits) * self._kv_heads + (index & ((1 << head_bits) - 1)))
                 * self._max_context for index in range(1 << (len(layer) + head_bits))]
        rows = self._cache_rows // self._contexts
        return Array(Const(b if b <= rows else 0, range(rows + 1)) for b in bases)[
            Cat(kv_head, layer)]

    def _address(self, beat, pos=None):
        """The cache row of ``pos`` (``None``: 0) of ``beat``'s layer, KV head and context
        (the region's top bits, see :func:`kv_cache_rows`)."""
        row = self._base(beat.layer, beat.kv_head)
        row = row if pos is None else row + pos
        if self._contexts == 1:
            return row
        return Cat(row[:(self._cache_rows // self._contexts - 1).bit_length()], beat.ctx)

    def _job_signals(self, m, s_wr, s_rd, e_rds) -> SimpleNamespace:
        """The state of a job, shared by the passes."""
        hd, nh = self._head_dim, self._heads
        row = data.ArrayLayout(signed(8), hd)
        # one-hot: every test of the state is one flip-flop (a state register decoded in every
        # pass would fan out across the unit)
        state = Signal(7, init=1 << _IDLE)
        rows = self._cache_rows
        j = SimpleNamespace(
            s_wr=s_wr, s_rd=s_rd, e_rds=e_rds, state=state, idle=state[_IDLE],
            job=Signal(self.cmd.payload.shape(), name="job"),
            start=Signal(range(rows + 1), name="start"),
            last_t=Signal(range(self._max_context), name="last_t"),  # the last cycle of rows
            tail=Signal(self._kv_rows, name="tail"),  # the last cycle's rows within the length
            query=Signal(data.ArrayLayout(row, nh), name="query"),
            queries=Signal(range(nh + 1), name="queries"),
            # rows sent into a pass's pipeline, while ``issuing``; its results out
            issued=Signal(range(self._max_context + 1), name="issued"),
            issuing=Signal(name="issuing"),
            issue_last=Signal(name="issue_last"),  # the row being issued is the pass's last
            written=Signal(range(self._max_context), name="written"),
            # the result being written is the pass's last: a register, set as the one before
            # it is written (so that no comparison lies between ``written`` and the passes'
            # state changes)
            at_last=Signal(name="at_last"),
            # as wide as a score (no wider: its comparison is four carry chains of a quarter)
            best=Signal(data.ArrayLayout(signed(score_bits(self._head_dim)), nh), name="best"),
            total=Signal(data.ArrayLayout(unsigned(_SUM_BITS), nh), name="total"),
            remainder=Signal(data.ArrayLayout(unsigned(_SUM_BITS), nh), name="remainder"),
            quotient=Signal(data.ArrayLayout(unsigned(47), nh), name="quotient"),
            step=Signal(range(47), name="step"),
            step_last=Signal(name="step_last"),  # the division's last step (registered)
            acc=Signal(data.ArrayLayout(signed(32), nh * hd), name="acc"),
            beat=Signal(range(nh * hd // self._width + 1), name="beat"))
        j.done = j.at_last
        m.d.comb += [s_wr.addr.eq(j.written), s_rd.addr.eq(j.issued)]
        return j

    def _next_pass(self, m, j, source, state) -> None:
        # ``job`` holds the command from the cycle after it is taken; ``last_t`` a cycle later
        first_is_last = equals(j.job.length, 1) if self._kv_rows == 1 else \
            j.job.length <= self._kv_rows
        m.d.sync += [*_goto(j, source, state), j.issued.eq(0), j.issuing.eq(1), j.written.eq(0),
                     j.at_last.eq(first_is_last), j.issue_last.eq(first_is_last)]

    def _wrote(self, m, j) -> None:
        """A pass's result is written: the next one is the last when this one is before it."""
        m.d.sync += [j.written.eq(j.written + 1), j.at_last.eq(j.written + 1 == j.last_t)]

    def _issue(self, m, j, taken) -> None:
        """A row enters the pass's pipeline (the last one stops the issue)."""
        with m.If(taken):
            m.d.sync += [j.issued.eq(j.issued + 1), j.issue_last.eq(j.issued + 1 == j.last_t)]
            with m.If(j.issue_last):
                m.d.sync += j.issuing.eq(0)

    def _cache(self, m, j) -> None:
        """The KV cache: on chip, or behind the memory ports; writes are accepted whenever no
        job is running."""
        w = self.kv_write.payload
        j.write_pending = Const(0)
        if self._external_kv:
            m.d.comb += [
                self.kv_store.valid.eq(self.kv_write.valid & j.idle),
                self.kv_store.payload.addr.eq(self._address(w, w.pos)),
                self.kv_store.payload.k.eq(w.k), self.kv_store.payload.v.eq(w.v),
                self.kv_write.ready.eq(j.idle & self.kv_store.ready),
            ]
            return
        nr = self._kv_rows
        shift = (nr - 1).bit_length()
        row = data.ArrayLayout(signed(8), self._head_dim)
        rows = self._cache_rows
        # a bank a position modulo ``kv_rows``: a job's rows start at a multiple of it
        k_wrs, v_wrs, k_rds, v_rds = [], [], [], []
        for b in range(nr):
            suffix = "" if nr == 1 else str(b)
            keys = memory.Memory(shape=row, depth=rows // nr, init=[])
            values = memory.Memory(shape=row, depth=rows // nr, init=[])
            m.submodules["keys" + suffix], m.submodules["values" + suffix] = keys, values
            k_wrs.append(keys.write_port())
            v_wrs.append(values.write_port())
            k_rds.append(keys.read_port())
            v_rds.append(values.read_port())
        # a write is registered on its way in (address, rows, enable): the cache's ports are
        # fed from flip-flops; a job waits for it (``write_pending``)
        taken = self.kv_write.valid & j.idle
        addr = Signal(range(rows), name="kv_write_addr")
        k = Signal(row, name="kv_write_k", reset_less=True)
        v = Signal(row, name="kv_write_v", reset_less=True)
        en = Signal(name="kv_write_en")
        m.d.sync += [addr.eq(self._address(w, w.pos)), k.eq(w.k), v.eq(w.v),
                     en.eq(taken)]
        j.write_pending = en
        m.d.comb += self.kv_write.ready.eq(j.idle)
        for b, (k_wr, v_wr) in enumerate(zip(k_wrs, v_wrs, strict=True)):
            bank_en = en & equals(addr[:shift], b) if nr > 1 else en
            m.d.comb += [k_wr.addr.eq(addr[shift:]), k_wr.data.eq(k), k_wr.en.eq(bank_en),
                         v_wr.addr.eq(addr[shift:]), v_wr.data.eq(v), v_wr.en.eq(bank_en)]
        for port in (*k_rds, *v_rds):
            m.d.comb += port.addr.eq(j.start[shift:] + j.issued)
        j.k_rd = Cat(p.data for p in k_rds)
        j.v_rd = Cat(p.data for p in v_rds)

    def _rows(self, m, j, state, kind):
        """The pass's cache rows (``kv_rows`` of them), registered beside its multipliers:
        ``(rows, valid, last)`` two cycles after each cycle's rows are taken (from the on-chip
        banks' synchronous read, or from the port and a register); ``last``: they are the
        pass's last cycle of rows."""
        in_pass = j.state[state] & j.issuing
        group = data.ArrayLayout(data.ArrayLayout(signed(8), self._head_dim), self._kv_rows)
        if self._external_kv:
            port = self.k_rows if kind == "k" else self.v_rows
            m.d.comb += port.ready.eq(in_pass)
            taken = port.valid & in_pass
            rows = delay(m, port.payload, 1, name=f"{kind}_port_row", reset_less=True)
        else:
            taken = in_pass
            rows = data.View(group, j.k_rd if kind == "k" else j.v_rd)
        last = delay(m, taken & j.issue_last, 2, name=f"{kind}_row_last")
        self._issue(m, j, taken)
        return (delay(m, rows, 1, name=f"{kind}_row", reset_less=True),
                delay(m, taken, 2, name=f"{kind}_row_valid"), last)

    def _requests(self, m, j) -> None:
        k_pending, v_pending = Signal(), Signal()
        starting = delay(m, j.starting, 1, name="starting")
        with m.If(starting):  # ``start`` is ready the cycle after the command
            m.d.sync += [k_pending.eq(1), v_pending.eq(1)]
        for req, pending in ((self.k_req, k_pending), (self.v_req, v_pending)):
            m.d.comb += [req.valid.eq(pending), req.payload.addr.eq(j.start),
                         req.payload.count.eq(j.job.length)]
            with m.If(req.valid & req.ready):
                m.d.sync += pending.eq(0)

    def _queries(self, m, j) -> None:
        hd, nh = self._head_dim, self._heads
        m.d.comb += self.q.ready.eq(1)
        with m.If(self.q.valid):
            index_bits = max(1, (nh - 1).bit_length())
            m.d.sync += [j.query.as_value().word_select(j.queries[:index_bits], hd * 8).eq(
                             self.q.payload), j.queries.eq(j.queries + 1)]
            with m.If(equals(j.queries, nh - 1)):
                self._next_pass(m, j, _QUERY, _SCORE)
                # below every score (a sum of head_dim products >= -16256 each): the first
                # row's score replaces it, with no flag in the comparison's path
                m.d.sync += [j.best[h].eq(-(1 << (score_bits(hd) - 1))) for h in range(nh)]
