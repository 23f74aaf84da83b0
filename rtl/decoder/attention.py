"""Attention unit: one query head against its KV head's cache, with the reference's integer
softmax (exp table, one division per row) and weighted sum of values; two stages, so that a
job's scores are computed while the job before it finishes."""

from types import SimpleNamespace

from amaranth.hdl import Cat, Module, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model import checks
from heteroreason.model.spec.numerics.tables import EXP
from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.attention_controls import AttentionControls
from heteroreason.rtl.decoder.attention_memory import (
    AttentionMemory,
    kv_cache_rows,
    kv_memory_ports,
)
from heteroreason.rtl.decoder.attention_phases import (
    _B_IDLE,
    _DIVIDE,
    _EXP,
    _F_IDLE,
    _HELD,
    _QUERY,
    _SCORE,
    _SUM_BITS,
    ACCUMULATE_LATENCY,
    DIVIDE_CYCLES,
    EMIT_LATENCY,
    EXP_LATENCY,
    HANDOFF_CYCLES,
    AttentionPhases,
    _goto,
    accumulate_latency,
    back_cycles,
    exp_latency,
    job_cycles,
    jobs_cycles,
    score_bits,
    score_latency,
)
from heteroreason.rtl.decoder.attention_values import AttentionValues
from heteroreason.rtl.decoder.crossing import crossing_members, stream_ends
from heteroreason.rtl.decoder.crossing_shared import (
    SharedCrossingReceiver,
    SharedCrossingSignature,
)
from heteroreason.rtl.decoder.kv_aside import without_rows
from heteroreason.rtl.limits import CONTEXT_LIMIT, MULTIPLE_LIMIT, SIZE_LIMIT, WIDTH_LIMIT

__all__ = [
    "ACCUMULATE_LATENCY",
    "DIVIDE_CYCLES",
    "EMIT_LATENCY",
    "EXP_LATENCY",
    "HANDOFF_CYCLES",
    "Attention",
    "accumulate_latency",
    "back_cycles",
    "exp_latency",
    "job_cycles",
    "jobs_cycles",
    "kv_cache_rows",
    "kv_memory_ports",
    "score_latency",
]


class Attention(AttentionMemory, AttentionPhases, AttentionValues, AttentionControls,
                wiring.Component):
    """Decode-time attention of ``heads`` query heads that share one KV head
    (:mod:`heteroreason.model.spec.numerics.qwen2_int8`, *Attention scores and softmax*).

    The KV cache of every layer and KV head lives in on-chip memory, written through
    ``kv_write`` (one K and one V row per beat); with ``external_kv`` it lives in memory outside
    instead: ``kv_write`` beats leave on ``kv_store`` with their row address, and a job requests
    its ``T`` key rows on ``k_req`` as it starts and its value rows on ``v_req`` once its scores
    are done (see :meth:`_requests` for when), and takes them on ``k_rows``/``v_rows``.

    A ``cmd`` beat names the layer, KV head, attention length ``T`` and the job's multipliers;
    ``heads`` beats on ``q`` bring the rotated query heads. For all heads at once the unit
    computes the ``T`` scores (``heads`` dot products of ``head_dim`` for each of ``kv_rows``
    cache rows a cycle), their table exponentials and sums (``kv_rows`` a cycle), the rows'
    reciprocals by restoring dividers, the probability-weighted sums of the values (``heads *
    head_dim`` accumulators, ``kv_rows`` cache rows a cycle), and emits ``heads * head_dim``
    int8 outputs, head by head, ``width`` a beat (``last`` on the job's final beat). A pass
    takes ``ceil(T / kv_rows)`` cycles of rows; the rows of its last cycle beyond ``T`` (what
    the memory holds there, or zeros) take no part in the result.

    Two stages hold a job each: the score stage takes the command, the queries and the key
    rows and writes the scores into its half of the score memory; it hands the job over
    (:data:`HANDOFF_CYCLES`) to the stage after it, which computes the exponentials, the
    division, the weighted sums and the outputs, and takes the next command meanwhile. Jobs
    leave in the order they came.

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
    crossings : bool
        Every stream port a crossing (:func:`~heteroreason.rtl.decoder.crossing.
        crossing_members`: the same payload, registered on both sides of the boundary, held
        back by credits) whose near half is inside the unit and whose far half the unit's
        surroundings build (:func:`~heteroreason.rtl.decoder.crossing.far_ends`): the decoder
        core's attention, which a floorplan places in another SLR than the glue. Tested alone
        through :class:`~heteroreason.rtl.decoder.crossing.Across`. With ``external_kv`` too,
        ``kv_write`` brings no rows and ``kv_store`` carries only the address: the rows wait
        outside (:meth:`far_side`), so that they do not cross in and straight out again; and
        the key and value rows share one crossing, ``kv_read`` (way 0 the keys, way 1 the
        values: :class:`~heteroreason.rtl.decoder.crossing_shared.SharedCrossingReceiver`),
        as they share their memory's ports.

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
    :func:`job_cycles` from the last query beat to the last output (plus output stalls; with
    ``crossings``, :data:`~heteroreason.rtl.decoder.crossing.CROSSING_LATENCY` more on each
    stream, seen from the far halves, and :data:`~heteroreason.rtl.decoder.crossing_shared.
    SHARED_LATENCY` on the key and value rows' shared one): each
    of the three passes over the ``T`` rows takes ``kv_rows`` rows a cycle and drains its
    pipeline (:func:`score_latency`, :func:`exp_latency`, :func:`accumulate_latency`), the
    hand-over :data:`HANDOFF_CYCLES`, the division :data:`DIVIDE_CYCLES`, the outputs a beat
    a cycle through :data:`EMIT_LATENCY` stages. Jobs whose commands and queries come while
    the job before them is in the second stage: :func:`jobs_cycles`.

    Throughput
    ----------
    ``kv_rows * heads * head_dim`` MACs a cycle in the score and weighted-sum passes.
    """

    def __init__(self, *, head_dim, kv_heads, layers, max_context, heads=1, external_kv=False,
                 width=1, kv_rows=1, contexts=1, crossings=False):
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
        self._crossings = bool(crossings)
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
        out_layout = data.StructLayout({"value": data.ArrayLayout(signed(8), width), "last": 1})
        members = ports | {
            "kv_write": In(stream.Signature(data.StructLayout({
                "layer": range(layers), "kv_head": range(kv_heads), "pos": range(max_context),
                **ctx, "k": row, "v": row}))),
            "cmd": In(stream.Signature(data.StructLayout({
                "layer": range(layers), "kv_head": range(kv_heads), **ctx,
                "length": range(1, max_context + 1),
                "exp_mult": unsigned(31), "exp_shift": unsigned(6),
                "out_mult": unsigned(31), "out_shift": unsigned(6)}))),
            "q": In(stream.Signature(row)),
            "out": Out(stream.Signature(out_layout)),
        }
        # behind crossings, an external cache's rows stay outside (:meth:`far_side`): a write
        # brings only where it goes, and only its address leaves
        self._rows_aside = self._crossings and self._external_kv
        if self._rows_aside:
            self._write_layout = members["kv_write"].signature.members["payload"].shape
            members["kv_write"] = In(stream.Signature(without_rows(self._write_layout)))
            members["kv_store"] = Out(stream.Signature(data.StructLayout({"addr": range(rows)})))
            # the key and value rows on one crossing: their memory serves them on shared
            # ports, a row a cycle between them, so one link carries both
            self._read_layout = members.pop("k_rows").signature.members["payload"].shape
            del members["v_rows"]
        members = crossing_members(members) if crossings else members
        if self._rows_aside:
            members["kv_read"] = In(SharedCrossingSignature(self._read_layout, 2))
        super().__init__(members)

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
        # the streams the logic uses: the ports, or with ``crossings`` their halves inside
        names = [n for n in self.signature.members if n not in ("out", "kv_read")]
        self._halves = stream_ends(m, self, names) if self._crossings else {}
        self._io = SimpleNamespace(**({n: h.stream for n, h in self._halves.items()}
                                      if self._crossings
                                      else {n: getattr(self, n) for n in names}))
        if self._rows_aside:  # the key and value rows, each from its way of one crossing
            m.submodules.kv_read_rx = read = SharedCrossingReceiver(shape=self._read_layout,
                                                                    ways=2)
            wiring.connect(m, wiring.flipped(self.kv_read), read.link)
            self._io.k_rows, self._io.v_rows = read.streams[0], read.streams[1]
        nh, nr = self._heads, self._kv_rows
        groups = self._max_context // nr
        # the scores of a cycle's rows side by side, a half of the memory a stage's job (the
        # half's bit on top of the address: no adder); their exponentials, the second stage's
        m.submodules.scores = scores = memory.Memory(
            shape=data.ArrayLayout(data.ArrayLayout(signed(score_bits(self._head_dim)), nh),
                                   nr),
            depth=2 << (groups - 1).bit_length(), init=[])
        m.submodules.exps = exps = memory.Memory(
            shape=data.ArrayLayout(data.ArrayLayout(unsigned(16), nh), nr), depth=groups,
            init=[])
        m.submodules.exp = exp_rom = memory.Memory(shape=unsigned(16), depth=256,
                                                   init=[int(v) for v in EXP])
        f = self._stage("f", _F_IDLE, 4)
        b = self._stage("b", _B_IDLE, 5)
        f.s_wr = scores.write_port()
        b.s_rd, b.e_wr, b.e_rd = scores.read_port(), exps.write_port(), exps.read_port()
        b.e_rds = [exp_rom.read_port() for _ in range(nr * nh)]
        self._stage_memory(m, f, b, groups)
        idle = f.idle & b.idle
        self._cache(m, f, b, idle)
        # a job starts once no cache write is offered or still on its way into the cache
        free = ~self._io.kv_write.valid & ~f.write_pending
        f.starting = f.idle & self._io.cmd.valid & free
        with m.If(f.idle):
            m.d.comb += self._io.cmd.ready.eq(free)
            with m.If(self._io.cmd.valid & free):
                m.d.sync += [f.job.eq(self._io.cmd.payload), f.queries.eq(0),
                             *_goto(f, _F_IDLE, _QUERY)]
        # the job's first row, its last cycle of rows and which rows of that cycle lie within
        # the length, from the registered command
        shift = (nr - 1).bit_length()
        final = Signal(range(self._max_context), name="final")  # the length's last index
        m.d.comb += final.eq(f.job.length - 1)
        m.d.sync += [f.start.eq(self._address(f.job)), f.last_t.eq(final >> shift)]
        if nr > 1:
            m.d.sync += f.tail.eq(Cat(final[:shift] >= r for r in range(nr)))
        handoff = f.state[_HELD] & b.idle
        self._handoff(m, f, b, handoff)
        if self._external_kv:
            self._requests(m, f, b, handoff, b.state[_DIVIDE])
        with m.If(f.state[_QUERY]):
            self._queries(m, f)
        self._score(m, f)
        self._exp(m, b)
        self._divide(m, b)
        # the second stage's datapath after the division: a module of its own (``pv``)
        m.submodules.pv = pv = Module()
        self._values(m, pv, b)
        return m

    def _stage(self, name, idle_state, states) -> SimpleNamespace:
        """A stage's job and the counters of its passes (``state`` one-hot: every test of the
        state is one flip-flop, not a state register decoded across the unit)."""
        hd, nh = self._head_dim, self._heads
        state = Signal(states, init=1 << idle_state, name=f"{name}_state")
        s = SimpleNamespace(
            state=state, idle=state[idle_state],
            job=Signal(self._io.cmd.payload.shape(), name=f"{name}_job"),
            start=Signal(range(self._cache_rows + 1), name=f"{name}_start"),
            last_t=Signal(range(self._max_context), name=f"{name}_last_t"),  # last cycle
            tail=Signal(self._kv_rows, name=f"{name}_tail"),  # its rows within the length
            bank=Signal(name=f"{name}_bank"),  # the score memory's half the job's scores use
            # rows sent into a pass's pipeline, while ``issuing``; its results out
            issued=Signal(range(self._max_context + 1), name=f"{name}_issued"),
            issuing=Signal(name=f"{name}_issuing"),
            issue_last=Signal(name=f"{name}_issue_last"),  # the row issued is the last
            written=Signal(range(self._max_context), name=f"{name}_written"),
            # the result being written is the pass's last: a register, set as the one before
            # it is written (no comparison between ``written`` and the state changes)
            at_last=Signal(name=f"{name}_at_last"),
            # as wide as a score (no wider: its comparison is four carry chains of a quarter)
            best=Signal(data.ArrayLayout(signed(score_bits(hd)), nh), name=f"{name}_best"))
        s.done = s.at_last
        if name == "f":
            row = data.ArrayLayout(signed(8), hd)
            s.query = Signal(data.ArrayLayout(row, nh), name="query", reset_less=True)
            s.queries = Signal(range(nh + 1), name="queries")
        else:
            # data, no reset: each is cleared (or wholly shifted in) before a job reads it
            s.total = Signal(data.ArrayLayout(unsigned(_SUM_BITS), nh), name="total",
                             reset_less=True)
            s.remainder = Signal(data.ArrayLayout(unsigned(_SUM_BITS), nh), name="remainder",
                                 reset_less=True)
            s.quotient = Signal(data.ArrayLayout(unsigned(47), nh), name="quotient",
                                reset_less=True)
            s.step = Signal(range(47), name="step")
            s.step_last = Signal(name="step_last")  # the division's last step (registered)
            s.step_first = Signal(name="step_first")  # its first step (registered)
            s.acc = Signal(data.ArrayLayout(signed(32), nh * hd), name="acc", reset_less=True)
        return s

    def _stage_memory(self, m, f, b, groups) -> None:
        """The score memory's ports: the score stage writes its half, the stage after it reads
        its own; the exponentials' memory is the second stage's alone."""
        bits = (groups - 1).bit_length()
        m.d.comb += [f.s_wr.addr.eq(Cat(f.written[:bits], f.bank)),
                     b.s_rd.addr.eq(Cat(b.issued[:bits], b.bank)),
                     b.e_wr.addr.eq(b.written), b.e_rd.addr.eq(b.issued)]

    def _handoff(self, m, f, b, handoff) -> None:
        """A job whose scores are done (``_HELD``) moves to the idle second stage with its
        command, its first row, its length's last cycle, its half of the score memory and its
        maxima; the score stage takes the other half for its next job."""
        with m.If(handoff):
            m.d.sync += [*_goto(f, _HELD, _F_IDLE), f.bank.eq(~f.bank),
                         b.job.eq(f.job), b.start.eq(f.start), b.last_t.eq(f.last_t),
                         b.tail.eq(f.tail), b.bank.eq(f.bank), b.best.eq(f.best),
                         *(b.total[h].eq(0) for h in range(self._heads))]
            self._next_pass(m, b, _B_IDLE, _EXP, length=f.job.length)

    def _next_pass(self, m, s, source, state, length=None) -> None:
        # ``job`` holds the command from the cycle after it is taken; ``last_t`` a cycle later
        length = s.job.length if length is None else length
        first_is_last = equals(length, 1) if self._kv_rows == 1 else length <= self._kv_rows
        m.d.sync += [*_goto(s, source, state), s.issued.eq(0), s.issuing.eq(1), s.written.eq(0),
                     s.at_last.eq(first_is_last), s.issue_last.eq(first_is_last)]

    def _wrote(self, m, s) -> None:
        """A pass's result is written: the next one is the last when this one is before it."""
        m.d.sync += [s.written.eq(s.written + 1), s.at_last.eq(s.written + 1 == s.last_t)]

    def _issue(self, m, s, taken) -> None:
        """A row enters the pass's pipeline (the last one stops the issue)."""
        with m.If(taken):
            m.d.sync += [s.issued.eq(s.issued + 1), s.issue_last.eq(s.issued + 1 == s.last_t)]
            with m.If(s.issue_last):
                m.d.sync += s.issuing.eq(0)

    def _queries(self, m, f) -> None:
        hd, nh = self._head_dim, self._heads
        m.d.comb += self._io.q.ready.eq(1)
        with m.If(self._io.q.valid):
            index_bits = max(1, (nh - 1).bit_length())
            m.d.sync += [f.query.as_value().word_select(f.queries[:index_bits], hd * 8).eq(
                             self._io.q.payload), f.queries.eq(f.queries + 1)]
            with m.If(equals(f.queries, nh - 1)):
                self._next_pass(m, f, _QUERY, _SCORE)
                # below every score (a sum of head_dim products >= -16256 each): the first
                # row's score replaces it, with no flag in the comparison's path
                m.d.sync += [f.best[h].eq(-(1 << (score_bits(hd) - 1))) for h in range(nh)]
