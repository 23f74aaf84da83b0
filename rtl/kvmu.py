"""KV-cache management unit (KVMU): three pointers and four modes over the draft's KV cache."""

from types import SimpleNamespace

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model import checks
from heteroreason.model.spec.protocol import Error, Mode, Op, Source
from heteroreason.rtl.compare import equals, is_zero
from heteroreason.rtl.limits import SIZE_LIMIT

__all__ = ["AllocLayout", "CommandLayout", "Kvmu", "SpanLayout"]


def CommandLayout(capacity):
    """Host command: ``op`` (:class:`~heteroreason.model.spec.protocol.Op`) and ``pos`` (INIT
    only)."""
    return data.StructLayout({"op": Op, "pos": range(capacity + 1)})


AllocLayout = data.StructLayout({"source": Source, "last": 1, "step_end": 1})
"""A token admitted by the decoder: its source, and the host ``last`` / draft ``step_end`` marks."""


def SpanLayout(capacity):
    """A step submitted for verification: KV positions ``[start, end)``."""
    return data.StructLayout({"start": range(capacity + 1), "end": range(capacity + 1)})


class Kvmu(wiring.Component):
    """KV-cache management unit (docs/design.md §4.1).

    Tracks ``valid <= curr <= ahead <= capacity`` over the draft model's KV cache, hands the
    decoder the KV position of every token it admits, submits finished steps for verification,
    and applies the host's verdicts. The event semantics are those of the golden model
    :class:`heteroreason.model.spec.golden.kvmu.Kvmu`, whose docstring is the specification.

    Parameters
    ----------
    capacity : int
        KV-cache capacity in tokens; positions are ``0 .. capacity - 1``.

    Members
    -------
    cmd : In(stream.Signature(CommandLayout(capacity)))
        Host commands INIT(pos), ACCEPT, REJECT, CLEAR_ERROR.
    alloc : In(stream.Signature(AllocLayout))
        One beat per token the decoder admits (KV written at ``write_pos``).
    submit : Out(stream.Signature(SpanLayout(capacity)))
        One beat per step submitted for verification. A one-entry register: while it holds an
        untaken beat, an event that would submit another waits (its stream is not ready).
    write_pos : Out(range(capacity + 1))
        KV position of the token admitted on ``alloc`` this cycle (the ``ahead`` pointer).
    attn_len : Out(range(capacity + 2))
        Number of KV entries that token attends to, itself included (``ahead + 1``).
    valid_ptr, curr_ptr, ahead_ptr : Out(range(capacity + 1))
        The pointers.
    mode : Out(Mode)
        Initialization, Speculation, Accept or Rollback; selects the input MUX's source.
    pending : Out(1)
        The step ``[valid, curr)`` awaits a verdict.
    stalled : Out(1)
        The step-ahead step is complete as well; drafting waits for the verdict.
    error : Out(Error)
        Sticky code of the first illegal event since reset or CLEAR_ERROR.
    flush : Out(1)
        High in the cycle a legal INIT or REJECT is taken: every sample in flight is stale.

    Latency
    -------
    An event taken in cycle ``t`` is visible on every output register in cycle ``t + 1``;
    ``flush`` is combinational.

    Throughput
    ----------
    One event per cycle. When ``cmd`` and ``alloc`` are both valid, the token is taken and the
    command waits: ``alloc.ready`` never depends on ``cmd``, so a token offered downstream of the
    KVMU is not withdrawn because a command arrived.
    """

    def __init__(self, *, capacity):
        checks.integer("capacity", capacity, low=1, high=SIZE_LIMIT, error=TypeError)
        self._capacity = capacity
        super().__init__({
            "cmd": In(stream.Signature(CommandLayout(capacity))),
            "alloc": In(stream.Signature(AllocLayout)),
            "submit": Out(stream.Signature(SpanLayout(capacity))),
            "write_pos": Out(range(capacity + 1)),
            "attn_len": Out(range(capacity + 2)),
            "valid_ptr": Out(range(capacity + 1)),
            "curr_ptr": Out(range(capacity + 1)),
            "ahead_ptr": Out(range(capacity + 1)),
            "mode": Out(Mode),
            "pending": Out(1),
            "stalled": Out(1),
            "error": Out(Error),
            "flush": Out(1),
        })

    @property
    def capacity(self):
        return self._capacity

    def _init_is_legal(self, pos):
        return pos <= self.capacity

    def elaborate(self, platform):
        m = Module()
        cap = self.capacity

        valid = Signal(range(cap + 1))
        curr = Signal(range(cap + 1))
        ahead = Signal(range(cap + 1))
        mode = Signal(Mode, init=Mode.INITIALIZATION)
        pending = Signal()
        stalled = Signal()
        error = Signal(Error)

        m.d.comb += [
            self.valid_ptr.eq(valid),
            self.curr_ptr.eq(curr),
            self.ahead_ptr.eq(ahead),
            self.mode.eq(mode),
            self.pending.eq(pending),
            self.stalled.eq(stalled),
            self.error.eq(error),
            self.write_pos.eq(ahead),
            self.attn_len.eq(ahead + 1),
        ]

        host_mode = equals(mode, Mode.INITIALIZATION) | equals(mode, Mode.ROLLBACK)
        full = equals(ahead, cap)

        cmd = self.cmd.payload
        is_init = equals(cmd.op, Op.INIT)
        is_accept = equals(cmd.op, Op.ACCEPT)
        is_reject = equals(cmd.op, Op.REJECT)
        init_legal = self._init_is_legal(cmd.pos)
        cmd_error = Signal(Error)
        with m.If(is_init & ~init_legal):
            m.d.comb += cmd_error.eq(Error.INIT_BEYOND_CAPACITY)
        with m.Elif(is_accept & ~pending):
            m.d.comb += cmd_error.eq(Error.ACCEPT_WITHOUT_PENDING)
        with m.Elif(is_reject & ~pending):
            m.d.comb += cmd_error.eq(Error.REJECT_WITHOUT_PENDING)

        tok = self.alloc.payload
        is_draft = equals(tok.source, Source.DRAFT)
        alloc_error = Signal(Error)
        with m.If(~is_draft & ~host_mode):
            m.d.comb += alloc_error.eq(Error.HOST_TOKEN_IN_SPECULATION)
        with m.Elif(is_draft & host_mode):
            m.d.comb += alloc_error.eq(Error.DRAFT_TOKEN_OUTSIDE_SPECULATION)
        with m.Elif(is_draft & stalled):
            m.d.comb += alloc_error.eq(Error.DRAFT_TOKEN_WHILE_STALLED)
        with m.Elif(full):
            m.d.comb += alloc_error.eq(Error.WRITE_AT_CAPACITY)

        st = SimpleNamespace()  # what the stages share
        vars(st).update(cap=cap, valid=valid, curr=curr, ahead=ahead, mode=mode, pending=pending)
        vars(st).update(stalled=stalled, error=error, cmd=cmd, is_init=is_init, is_accept=is_accept)
        vars(st).update(is_reject=is_reject, cmd_error=cmd_error, tok=tok, is_draft=is_draft)
        vars(st).update(alloc_error=alloc_error)
        self._submit_and_update(m, st)
        return m

    def _submit_and_update(self, m, st):
        """The submit stream, the handshakes and the pointers' and mode's updates."""
        cap, valid, curr, ahead, mode = st.cap, st.valid, st.curr, st.ahead, st.mode
        pending, stalled, error, cmd, is_init = st.pending, st.stalled, st.error, st.cmd, st.is_init
        is_accept, is_reject, cmd_error, tok = st.is_accept, st.is_reject, st.cmd_error, st.tok
        is_draft, alloc_error = st.is_draft, st.alloc_error
        sub_full = Signal()
        sub_span = Signal(SpanLayout(cap))
        m.d.comb += [self.submit.valid.eq(sub_full), self.submit.payload.eq(sub_span)]
        with m.If(self.submit.valid & self.submit.ready):
            m.d.sync += sub_full.eq(0)

        cmd_submits = is_accept & pending & stalled
        alloc_submits = is_draft & tok.step_end & ~pending & is_zero(alloc_error)
        m.d.comb += [
            self.cmd.ready.eq(~self.alloc.valid & ~(cmd_submits & sub_full)),
            self.alloc.ready.eq(~(alloc_submits & sub_full)),
        ]
        cmd_fire = self.cmd.valid & self.cmd.ready
        alloc_fire = self.alloc.valid & self.alloc.ready

        m.d.comb += self.flush.eq(cmd_fire & is_zero(cmd_error) & (is_init | is_reject))

        def fail(code):
            with m.If(is_zero(error)):
                m.d.sync += error.eq(code)

        with m.If(alloc_fire):
            with m.If(alloc_error.any()):
                fail(alloc_error)
            with m.Elif(~is_draft):
                m.d.sync += ahead.eq(ahead + 1)
                with m.If(tok.last):
                    m.d.sync += [valid.eq(ahead + 1), curr.eq(ahead + 1),
                                 mode.eq(Mode.SPECULATION)]
            with m.Else():
                m.d.sync += [ahead.eq(ahead + 1), mode.eq(Mode.SPECULATION)]
                with m.If(tok.step_end):
                    with m.If(pending):
                        m.d.sync += stalled.eq(1)
                    with m.Else():
                        m.d.sync += [
                            curr.eq(ahead + 1), pending.eq(1),
                            sub_full.eq(1), sub_span.start.eq(valid), sub_span.end.eq(ahead + 1),
                        ]
        with m.Elif(cmd_fire):
            with m.If(cmd_error.any()):
                fail(cmd_error)
            with m.Elif(is_init):
                m.d.sync += [
                    valid.eq(cmd.pos), curr.eq(cmd.pos), ahead.eq(cmd.pos),
                    mode.eq(Mode.INITIALIZATION), pending.eq(0), stalled.eq(0),
                ]
            with m.Elif(is_accept):
                m.d.sync += [valid.eq(curr), mode.eq(Mode.ACCEPT)]
                with m.If(stalled):
                    m.d.sync += [
                        curr.eq(ahead), stalled.eq(0),
                        sub_full.eq(1), sub_span.start.eq(curr), sub_span.end.eq(ahead),
                    ]
                with m.Else():
                    m.d.sync += pending.eq(0)
            with m.Elif(is_reject):
                m.d.sync += [
                    curr.eq(valid), ahead.eq(valid),
                    mode.eq(Mode.ROLLBACK), pending.eq(0), stalled.eq(0),
                ]
            with m.Else():
                m.d.sync += error.eq(Error.NONE)
