"""A KVMU holding several problems (contexts) at once: a §4.1 KVMU each, routed by context id."""

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model import checks
from heteroreason.model.spec.protocol import ContextError, Error, Mode, Op, Source
from heteroreason.rtl.compare import equals, is_zero
from heteroreason.rtl.kvmu import Kvmu
from heteroreason.rtl.limits import CONTEXT_LIMIT, SIZE_LIMIT

__all__ = ["ContextStateLayout", "MultiAllocLayout", "MultiCommandLayout", "MultiKvmu",
           "MultiSpanLayout", "context_id_bits"]


def context_id_bits(contexts):
    """Bits of a context id: enough for ``contexts`` itself, so that every design can be sent
    an id out of range (and reports it)."""
    return contexts.bit_length()


def MultiCommandLayout(contexts, capacity):
    """Host command to context ``ctx``: ``op`` and ``pos`` (INIT only)."""
    return data.StructLayout({"ctx": context_id_bits(contexts), "op": Op,
                              "pos": range(capacity + 1)})


def MultiAllocLayout(contexts):
    """A token of context ``ctx`` admitted by the decoder: its source and marks."""
    return data.StructLayout({"ctx": context_id_bits(contexts), "source": Source, "last": 1,
                              "step_end": 1})


def MultiSpanLayout(contexts, capacity):
    """A step of context ``ctx`` submitted for verification: KV positions ``[start, end)``."""
    return data.StructLayout({"ctx": context_id_bits(contexts), "start": range(capacity + 1),
                              "end": range(capacity + 1)})


def ContextStateLayout(capacity):
    """One context's state, as :attr:`MultiKvmu.view_state` shows it."""
    return data.StructLayout({
        "valid": range(capacity + 1), "curr": range(capacity + 1), "ahead": range(capacity + 1),
        "mode": Mode, "pending": 1, "stalled": 1, "error": Error,
        "context_error": ContextError, "initialised": 1,
    })


class MultiKvmu(wiring.Component):
    """Multi-context KV-cache management unit (docs/design.md §4.6).

    Holds ``contexts`` problems, each a :class:`~heteroreason.rtl.kvmu.Kvmu` of ``capacity``
    positions with its own pointers, flags and sticky error, and its own KV region
    (``write_addr = ctx x capacity + position``). Every command and token carries a context id
    and reaches only that context's KVMU, so an event to one context never moves another's
    state (proven, :mod:`heteroreason.sim.flow.formal_contexts`). The event semantics are those
    of the golden model :class:`heteroreason.model.spec.golden.multi_kvmu.GoldenMultiKvmu`:

    * an id ``>= contexts`` is taken and changes nothing but the engine's sticky
      ``context_error`` (CONTEXT_OUT_OF_RANGE, the first kept with its id in ``bad_context``);
    * any event but INIT and CLEAR_ERROR to a context never initialised is taken and changes
      nothing but that context's sticky context error (CONTEXT_NOT_INITIALISED);
    * a CLEAR_ERROR to a context clears its errors and the engine's; a legal INIT initialises.

    Parameters
    ----------
    contexts : int
        Problems held at once, ids ``0 .. contexts - 1`` (:func:`context_id_bits` bits).
    capacity : int
        Tokens a context's KV region holds.

    Members
    -------
    cmd : In(stream.Signature(MultiCommandLayout(contexts, capacity)))
        Host commands INIT(pos), ACCEPT, REJECT, CLEAR_ERROR, each to a context.
    alloc : In(stream.Signature(MultiAllocLayout(contexts)))
        One beat per token the decoder admits, of a context.
    submit : Out(stream.Signature(MultiSpanLayout(contexts, capacity)))
        One beat per step submitted for verification, with its context. Each context's KVMU holds
        one submission (an event of that context that would submit another waits); an output
        register takes them in round-robin order, so no context waits behind more than
        ``contexts - 1`` others.
    write_pos : Out(range(capacity + 1))
        KV position of the token on ``alloc`` this cycle (its context's ``ahead``).
    attn_len : Out(range(capacity + 2))
        Number of KV entries of its context that token attends to (``ahead + 1``).
    write_addr : Out(range(contexts * capacity + 1))
        Its KV address in the regions (``ctx x capacity + write_pos``); nothing is written when
        ``write_pos == capacity`` (the KVMU refuses the token, as §4.1's does).
    flush : Out(1)
        High in the cycle a legal INIT or REJECT is taken: that context's samples in flight are
        stale; ``flush_ctx`` names it.
    flush_ctx : Out(context_id_bits(contexts))
    initialised, ingesting, drafting, waiting, holding : Out(contexts)
        A bit per context: initialised by a legal INIT; taking host tokens (Initialization or
        Rollback); drafting (Speculation or Accept, not stalled); stalled for a verdict; its
        submission waiting for the output register. What a pass scheduler reads.
    view : In(context_id_bits(contexts))
        The context that ``view_state`` shows (all zeros for an id out of range).
    view_state : Out(ContextStateLayout(capacity))
    context_error : Out(ContextError)
        The engine's sticky error (CONTEXT_OUT_OF_RANGE or NONE).
    bad_context : Out(context_id_bits(contexts))
        The first id out of range since reset or CLEAR_ERROR.

    Latency
    -------
    As :class:`~heteroreason.rtl.kvmu.Kvmu`: an event taken in cycle ``t`` shows on the state in
    cycle ``t + 1``; a submission leaves its context's register in ``t + 1`` at the earliest and
    is valid on ``submit`` from ``t + 2``.

    Throughput
    ----------
    One event per cycle over all contexts. A token is taken before a command (``alloc.ready``
    never depends on ``cmd``); a token or command waits only while it would submit and its own
    context's submission is still held.
    """

    def __init__(self, *, contexts, capacity):
        checks.integer("contexts", contexts, low=1, high=CONTEXT_LIMIT, error=TypeError)
        checks.integer("capacity", capacity, low=1, high=SIZE_LIMIT, error=TypeError)
        self._contexts = contexts
        self._capacity = capacity
        bits = context_id_bits(contexts)
        super().__init__({
            "cmd": In(stream.Signature(MultiCommandLayout(contexts, capacity))),
            "alloc": In(stream.Signature(MultiAllocLayout(contexts))),
            "submit": Out(stream.Signature(MultiSpanLayout(contexts, capacity))),
            "write_pos": Out(range(capacity + 1)),
            "attn_len": Out(range(capacity + 2)),
            "write_addr": Out(range(contexts * capacity + 1)),
            "flush": Out(1),
            "flush_ctx": Out(bits),
            "initialised": Out(contexts),
            "ingesting": Out(contexts),
            "drafting": Out(contexts),
            "waiting": Out(contexts),
            "holding": Out(contexts),
            "view": In(bits),
            "view_state": Out(ContextStateLayout(capacity)),
            "context_error": Out(ContextError),
            "bad_context": Out(bits),
        })
        # each context's state, made here so that a proof harness can name it
        self.kvmus = [Kvmu(capacity=capacity) for _ in range(contexts)]
        self.context_errors = [Signal(ContextError, name=f"context_error_{i}")
                               for i in range(contexts)]

    @property
    def contexts(self):
        return self._contexts

    @property
    def capacity(self):
        return self._capacity

    def _routes(self, ctx, i):
        """Whether an event to ``ctx`` goes to context ``i``."""
        return equals(ctx, i)

    def elaborate(self, platform):
        m = Module()
        cap = self.capacity
        for i, kvmu in enumerate(self.kvmus):
            m.submodules[f"context_{i}"] = kvmu

        cmd, tok = self.cmd.payload, self.alloc.payload
        is_init, is_clear = equals(cmd.op, Op.INIT), equals(cmd.op, Op.CLEAR_ERROR)
        init_legal = is_init & (cmd.pos <= cap)
        cmd_blocked, tok_blocked = [], []
        cmd_to, tok_to = [], []  # an event that reaches context i's KVMU
        for i, kvmu in enumerate(self.kvmus):
            ready_i = self.initialised[i]
            cmd_to.append(self._routes(cmd.ctx, i) & (is_init | is_clear | ready_i))
            tok_to.append(self._routes(tok.ctx, i) & ready_i)
            m.d.comb += [
                kvmu.cmd.valid.eq(self.cmd.valid & ~self.alloc.valid & cmd_to[i]),
                kvmu.cmd.payload.op.eq(cmd.op),
                kvmu.cmd.payload.pos.eq(cmd.pos),
                kvmu.alloc.valid.eq(self.alloc.valid & tok_to[i]),
                kvmu.alloc.payload.source.eq(tok.source),
                kvmu.alloc.payload.last.eq(tok.last),
                kvmu.alloc.payload.step_end.eq(tok.step_end),
            ]
            cmd_blocked.append(cmd_to[i] & ~kvmu.cmd.ready)
            tok_blocked.append(tok_to[i] & ~kvmu.alloc.ready)
        m.d.comb += [
            self.alloc.ready.eq(~Cat(*tok_blocked).any()),
            self.cmd.ready.eq(~self.alloc.valid & ~Cat(*cmd_blocked).any()),
        ]
        self._state(m, cmd_to, init_legal, is_clear)
        self._views(m)
        self._submissions(m)
        return m

    def _state(self, m, cmd_to, init_legal, is_clear):
        """The context errors, the engine's error and the initialised bits."""
        n = self.contexts
        cmd, tok = self.cmd.payload, self.alloc.payload
        cmd_fire = self.cmd.valid & self.cmd.ready
        tok_fire = self.alloc.valid & self.alloc.ready
        cmd_in_range, tok_in_range = cmd.ctx < n, tok.ctx < n
        initialised = Signal(n)
        m.d.comb += self.initialised.eq(initialised)

        bad_ctx = Signal(self.bad_context.shape())
        engine_error = Signal(ContextError)
        m.d.comb += [self.bad_context.eq(bad_ctx), self.context_error.eq(engine_error)]
        first = is_zero(engine_error)
        with m.If(tok_fire & ~tok_in_range & first):
            m.d.sync += [engine_error.eq(ContextError.CONTEXT_OUT_OF_RANGE), bad_ctx.eq(tok.ctx)]
        with m.Elif(cmd_fire & ~cmd_in_range & first):
            m.d.sync += [engine_error.eq(ContextError.CONTEXT_OUT_OF_RANGE), bad_ctx.eq(cmd.ctx)]
        with m.Elif(cmd_fire & cmd_in_range & is_clear):
            m.d.sync += [engine_error.eq(ContextError.NONE), bad_ctx.eq(0)]

        for i, error in enumerate(self.context_errors):
            cmd_here = cmd_fire & self._routes(cmd.ctx, i)
            tok_here = tok_fire & self._routes(tok.ctx, i)
            refused = (tok_here | (cmd_here & ~cmd_to[i])) & ~initialised[i]
            with m.If(refused & is_zero(error)):
                m.d.sync += error.eq(ContextError.CONTEXT_NOT_INITIALISED)
            with m.Elif(cmd_here & is_clear):
                m.d.sync += error.eq(ContextError.NONE)
            with m.If(cmd_here & init_legal):
                m.d.sync += initialised[i].eq(1)

    def _views(self, m):
        """The masks, the viewed context's state, the token's KV position and the flush."""
        tok = self.alloc.payload
        m.d.comb += self.flush_ctx.eq(self.cmd.payload.ctx)
        flushes = []
        for i, kvmu in enumerate(self.kvmus):
            host_mode = equals(kvmu.mode, Mode.INITIALIZATION) | equals(kvmu.mode, Mode.ROLLBACK)
            live = self.initialised[i]
            m.d.comb += [
                self.ingesting[i].eq(live & host_mode),
                self.drafting[i].eq(live & ~host_mode & ~kvmu.stalled),
                self.waiting[i].eq(live & kvmu.stalled),
                self.holding[i].eq(kvmu.submit.valid),
            ]
            flushes.append(kvmu.flush)
        m.d.comb += self.flush.eq(Cat(*flushes).any())

        view = self.view_state
        with m.Switch(self.view):
            for i, kvmu in enumerate(self.kvmus):
                with m.Case(i):
                    m.d.comb += [
                        view.valid.eq(kvmu.valid_ptr), view.curr.eq(kvmu.curr_ptr),
                        view.ahead.eq(kvmu.ahead_ptr), view.mode.eq(kvmu.mode),
                        view.pending.eq(kvmu.pending), view.stalled.eq(kvmu.stalled),
                        view.error.eq(kvmu.error), view.context_error.eq(self.context_errors[i]),
                        view.initialised.eq(self.initialised[i]),
                    ]
            with m.Default():
                m.d.comb += view.eq(0)
        width = len(self.write_addr)
        base = Signal(width)  # the token's context's region
        with m.Switch(tok.ctx):
            for i, kvmu in enumerate(self.kvmus):
                with m.Case(i):
                    m.d.comb += [
                        self.write_pos.eq(kvmu.write_pos),
                        self.attn_len.eq(kvmu.attn_len),
                        base.eq(i * self.capacity),
                    ]
            with m.Default():
                m.d.comb += [self.write_pos.eq(0), self.attn_len.eq(0), base.eq(0)]
        m.d.comb += self.write_addr.eq(base + self.write_pos)

    def _submissions(self, m):
        """The contexts' submissions into one output register, round robin.

        The contexts after the one granted last are a register (``after``, reset to those after
        context 0), so the choice is two carry chains side by side: the lowest request after the
        last grant and the lowest request of all, each with the mask of the contexts above it
        (``x ^ (x - 1)`` is the lowest set bit of ``x`` and every bit below it). The output's
        fields are the granted context's, OR-ed under the one-hot grant (no chain of
        ``contexts`` priority multiplexers): 11 levels (LUTs and carry) at 32 contexts, the 300 MHz
        budget (13 with the last grant decoded, masked and reduced before the chain)."""
        n = self.contexts
        every = (1 << n) - 1
        requests = Cat(*(kvmu.submit.valid for kvmu in self.kvmus))
        after = Signal(n, init=every & ~1)  # the contexts after the one granted last
        masked = Signal(n)
        m.d.comb += masked.eq(requests & after)
        lowest = []  # (one-hot lowest request, the contexts above it) of each kind
        for kind in (masked, requests):
            up_to = Signal(n)  # the lowest request and the contexts below it
            m.d.comb += up_to.eq(kind ^ (kind - 1)[:n])
            lowest.append((kind & up_to, ~up_to))
        grant = Signal(n)  # one-hot: the lowest request after the last grant, else the lowest
        above = Signal(n)
        with m.If(masked.any()):
            m.d.comb += [grant.eq(lowest[0][0]), above.eq(lowest[0][1])]
        with m.Else():
            m.d.comb += [grant.eq(lowest[1][0]), above.eq(lowest[1][1])]

        out_full = Signal()
        out = Signal(self.submit.payload.shape())
        m.d.comb += [self.submit.valid.eq(out_full), self.submit.payload.eq(out)]
        take = ~out_full | self.submit.ready
        with m.If(self.submit.valid & self.submit.ready):
            m.d.sync += out_full.eq(0)
        chosen = Signal(self.submit.payload.shape())  # the granted context's, OR-ed
        fields = []
        for i, kvmu in enumerate(self.kvmus):
            m.d.comb += kvmu.submit.ready.eq(take & grant[i])
            span = Cat(kvmu.submit.payload.start, kvmu.submit.payload.end)
            fields.append(Cat(span & grant[i].replicate(len(span)),
                              Const(i, len(out.ctx)) & grant[i].replicate(len(out.ctx))))
        while len(fields) > 1:  # a balanced tree of ORs
            fields = [fields[k] | fields[k + 1] if k + 1 < len(fields) else fields[k]
                      for k in range(0, len(fields), 2)]
        merged = fields[0]
        span_bits = len(out.start) + len(out.end)
        m.d.comb += [Cat(chosen.start, chosen.end).eq(merged[:span_bits]),
                     chosen.ctx.eq(merged[span_bits:])]
        with m.If(take & requests.any()):
            m.d.sync += [out_full.eq(1), out.eq(chosen), after.eq(above)]
