"""MultiDraftEngine: several problems resident, drafted for several a pass of the weights: the
multi-context KVMU, an input MUX a context, a pass gatherer and the decoder core with contexts
(docs/design.md §4.7)."""

from types import SimpleNamespace

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model import checks
from heteroreason.model.spec.numerics.qwen2_int8 import QuantizedModel
from heteroreason.model.spec.protocol import ContextError, Mode, Op, Source
from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.core import KV_PORTS, DecoderCore
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.rtl.draft_engine import connect_memory_ports
from heteroreason.rtl.input_mux import InputMux
from heteroreason.rtl.multi_kvmu import (
    ContextStateLayout,
    MultiKvmu,
    MultiSpanLayout,
    context_id_bits,
)

__all__ = ["MultiDraftEngine", "MultiHostLayout"]


def MultiHostLayout(contexts, token_width, capacity):
    """One message from the host to context ``ctx``: a command (``is_token`` low: ``op``,
    ``pos``) or a target-model token (``is_token`` high: ``token``, ``last``)."""
    return data.StructLayout({"ctx": context_id_bits(contexts), "is_token": 1, "op": Op,
                              "pos": range(capacity + 1), "token": token_width, "last": 1})


class MultiDraftEngine(wiring.Component):
    """The draft engine holding ``params.contexts`` problems and drafting for up to
    ``params.ingest_batch`` of them a pass of the weights.

    The host stream carries each context's INIT(pos)/ACCEPT/REJECT/CLEAR_ERROR and target-model
    tokens, in order, each with its context id. Commands go to the
    :class:`~heteroreason.rtl.multi_kvmu.MultiKvmu`; a token goes to its context's
    :class:`~heteroreason.rtl.input_mux.InputMux` (it waits at the head, ``host_blocked``, while
    its context is not ingesting, as with one context); a token to an id out of range or to a
    context never initialised is taken as a KVMU event, which reports it
    (``context_error``, ``view_state.context_error``), and goes no further.

    A gatherer visits the contexts in turn, a context a cycle, and takes the token its MUX
    offers (a host token or its next draft token) into the next pass, the KVMU giving it its
    position; it stays on a context while it takes host tokens and the pass has room. A pass
    goes to the core when it holds ``ingest_batch`` tokens, or once every context has been
    visited since its first token, whichever is first, and the core is free; each token keeps
    its logits when its MUX says so (a host ``last`` token, every draft token). The core's
    samples (:class:`~heteroreason.rtl.decoder.pass_sampler.PassSampler`) go back to their
    context's MUX through a register a context, so that the core never waits on the gatherer.
    Each draft token is reported on ``draft_out`` when it is gathered, with its context and
    position; each finished step's span on ``submit``, with its context.

    A host token id outside the vocabulary, or a token the KVMU refuses at capacity, is taken
    without being processed and sets the sticky ``bad_token``.

    Parameters
    ----------
    model : QuantizedModel
    params : DecoderParams
        The core's parameters, ``contexts`` >= 2 (with one context: :class:`~heteroreason.rtl.
        draft_engine.DraftEngine`).
    capacity : int
        Tokens a context's KV region holds (at most the model's maximum context).

    Members
    -------
    host : In(stream.Signature(MultiHostLayout(contexts, token_width, capacity)))
    draft_out : Out(stream.Signature(StructLayout ctx, token, pos, step_end, eos))
    submit : Out(stream.Signature(MultiSpanLayout(contexts, capacity)))
    wreq, preq, wdata, pdata
        The core's memory ports (and its KV ports with ``external_kv``).
    initialised, ingesting, drafting, waiting : Out(contexts)
        A bit a context, as the KVMU's.
    view : In(context_id_bits(contexts))
    view_state : Out(ContextStateLayout(capacity))
    context_error, bad_context
        The engine's sticky context error and the first id out of range.
    bad_token, host_blocked : Out(1)
    tokens, passes, busy_cycles, weight_wait_cycles, buffer_full_cycles : Out(32)
        Counters: tokens the core processed; passes; cycles the core was busy; cycles an
        operator waited for a weight beat; cycles the weight stream was held back.

    Latency
    -------
    A pass takes :meth:`~heteroreason.model.timing.fpga.core_cycles.CoreTiming.
    contexts_pass_cycles`; gathering it takes a cycle a token and at most a cycle a context
    besides, while the core runs the pass before.
    """

    def __init__(self, *, model: QuantizedModel, params: DecoderParams, capacity: int):
        if not isinstance(model, QuantizedModel):
            raise TypeError(f"model must be a QuantizedModel, not {type(model).__name__}")
        if not isinstance(params, DecoderParams):
            raise TypeError(f"params must be a DecoderParams, not {type(params).__name__}")
        if params.contexts < 2:
            raise ValueError(f"params.contexts must be at least 2 (one context: DraftEngine), "
                             f"not {params.contexts}")
        c = model.config
        checks.integer("capacity", capacity, low=1, high=c.max_context,
                       note="the model's maximum context")
        self._core = DecoderCore(model=model, params=params)
        self._kvmu = MultiKvmu(contexts=params.contexts, capacity=capacity)
        self._token_width = max(1, (c.vocab - 1).bit_length())
        self._muxes = [InputMux(token_width=self._token_width)
                       for _ in range(params.contexts)]
        self._vocab, self._eos, self._capacity = c.vocab, params.eos, capacity
        n, core = params.contexts, self._core
        bits = context_id_bits(n)
        kv_ports = {name: core.signature.members[name] for name in KV_PORTS if params.external_kv}
        super().__init__(kv_ports | {
            "host": In(stream.Signature(MultiHostLayout(n, self._token_width, capacity))),
            "draft_out": Out(stream.Signature(data.StructLayout({
                "ctx": bits, "token": self._token_width, "pos": range(capacity + 1),
                "step_end": 1, "eos": 1}))),
            "submit": Out(stream.Signature(MultiSpanLayout(n, capacity))),
            "wreq": Out(stream.Signature(core.wreq.payload.shape())),
            "preq": Out(stream.Signature(core.preq.payload.shape())),
            "wdata": In(stream.Signature(core.wdata.payload.shape())),
            "pdata": In(stream.Signature(core.pdata.payload.shape())),
            "initialised": Out(n), "ingesting": Out(n), "drafting": Out(n), "waiting": Out(n),
            "view": In(bits),
            "view_state": Out(ContextStateLayout(capacity)),
            "context_error": Out(ContextError),
            "bad_context": Out(bits),
            "bad_token": Out(1),
            "host_blocked": Out(1),
            **{name: Out(32) for name in ("tokens", "passes", "busy_cycles",
                                          "weight_wait_cycles", "buffer_full_cycles")},
        })

    @property
    def core(self):
        return self._core

    @property
    def contexts(self):
        return self._core.params.contexts

    def elaborate(self, platform):
        m = Module()
        m.submodules.kvmu = kvmu = self._kvmu
        m.submodules.core = core = self._core
        for i, mux in enumerate(self._muxes):
            m.submodules[f"mux{i}"] = mux
        connect_memory_ports(m, core, self)
        wiring.connect(m, kvmu.submit, wiring.flipped(self.submit))
        m.d.comb += [self.initialised.eq(kvmu.initialised), self.ingesting.eq(kvmu.ingesting),
                     self.drafting.eq(kvmu.drafting), self.waiting.eq(kvmu.waiting),
                     kvmu.view.eq(self.view), self.view_state.eq(kvmu.view_state),
                     self.context_error.eq(kvmu.context_error),
                     self.bad_context.eq(kvmu.bad_context)]
        event = self._event(m, kvmu)
        self._host(m, kvmu, event)
        self._samples(m, core)
        self._gather(m, kvmu, core, event)
        self._counters(m, core)
        return m

    def _event(self, m, kvmu):
        """The KVMU's one event register: a command, a gathered token or a refused host token,
        presented from flip-flops the cycle after it is decided (so no MUX's offer reaches the
        KVMU's ports, nor the KVMU's readiness the host's) and held until taken; a new one is
        decided only while it is empty, so each sees the state the last one left."""
        ev = SimpleNamespace(
            full=Signal(name="event_full"), token=Signal(name="event_token"),
            ctx=Signal(kvmu.cmd.payload.ctx.shape(), name="event_ctx"),
            op=Signal(Op, name="event_op"), pos=Signal(kvmu.cmd.payload.pos.shape(),
                                                        name="event_pos"),
            source=Signal(Source, name="event_source"), last=Signal(name="event_last"),
            step_end=Signal(name="event_step_end"),
            value=Signal(self._token_width, name="event_value"),
            keep=Signal(name="event_keep"), gathered=Signal(name="event_gathered"))
        is_draft = equals(ev.source, Source.DRAFT)
        m.d.comb += [
            kvmu.cmd.valid.eq(ev.full & ~ev.token), kvmu.cmd.payload.ctx.eq(ev.ctx),
            kvmu.cmd.payload.op.eq(ev.op), kvmu.cmd.payload.pos.eq(ev.pos),
            kvmu.alloc.valid.eq(ev.full & ev.token & (~is_draft | self.draft_out.ready)),
            kvmu.alloc.payload.ctx.eq(ev.ctx), kvmu.alloc.payload.source.eq(ev.source),
            kvmu.alloc.payload.last.eq(ev.last), kvmu.alloc.payload.step_end.eq(ev.step_end),
            # a draft token is reported as the KVMU takes it, with its position
            self.draft_out.valid.eq(ev.full & ev.token & is_draft & kvmu.alloc.ready),
            self.draft_out.payload.ctx.eq(ev.ctx), self.draft_out.payload.token.eq(ev.value),
            self.draft_out.payload.pos.eq(kvmu.write_pos),
            self.draft_out.payload.step_end.eq(ev.step_end),
            self.draft_out.payload.eos.eq(equals(ev.value, self._eos)),
        ]
        ev.fired = (kvmu.cmd.valid & kvmu.cmd.ready) | (kvmu.alloc.valid & kvmu.alloc.ready)
        ev.token_fired = kvmu.alloc.valid & kvmu.alloc.ready
        with m.If(ev.fired):
            m.d.sync += ev.full.eq(0)
        return ev

    def _host(self, m, kvmu, ev):
        """The host stream's head, taken while the event register is empty: a command into it;
        a token to a context that exists and is initialised into that context's host register
        (its MUX takes it from there); any other token into the event register, as a KVMU
        event that reports its context and goes no further. A command waits while its
        context's host register holds a token, so that nothing overtakes it."""
        msg, n = self.host.payload, self.contexts
        live = Signal(name="host_ctx_live")  # the message's context exists and is initialised
        held = Signal(name="host_ctx_held")  # its context's host register holds a token
        full = Signal(n, name="host_held")
        with m.Switch(msg.ctx):
            for i in range(n):
                with m.Case(i):
                    m.d.comb += [live.eq(kvmu.initialised[i]), held.eq(full[i])]
        ev.host_event = self.host.valid & (~msg.is_token | ~live)  # the event register's
        with m.If(~ev.full & ~held):
            m.d.comb += self.host.ready.eq(1)
        taken = self.host.valid & self.host.ready
        with m.If(taken & (~msg.is_token | ~live)):
            m.d.sync += [ev.full.eq(1), ev.token.eq(msg.is_token), ev.ctx.eq(msg.ctx),
                         ev.op.eq(msg.op), ev.pos.eq(msg.pos), ev.source.eq(Source.HOST),
                         ev.last.eq(msg.last), ev.step_end.eq(0), ev.value.eq(msg.token),
                         ev.gathered.eq(0)]
        blocked = 0
        for i, mux in enumerate(self._muxes):
            token = Signal(self._token_width, name=f"host{i}_token")
            last = Signal(name=f"host{i}_last")
            m.d.comb += [mux.host.valid.eq(full[i]), mux.host.payload.token.eq(token),
                         mux.host.payload.last.eq(last),
                         mux.stalled.eq(kvmu.waiting[i]),
                         mux.flush.eq(kvmu.flush & equals(kvmu.flush_ctx, i))]
            # the MUX tells host modes from the others only
            m.d.comb += mux.mode.eq(Mode.SPECULATION)
            with m.If(kvmu.ingesting[i]):
                m.d.comb += mux.mode.eq(Mode.INITIALIZATION)
            with m.If(mux.host.valid & mux.host.ready):
                m.d.sync += full[i].eq(0)
            with m.If(taken & msg.is_token & live & equals(msg.ctx, i)):
                m.d.sync += [full[i].eq(1), token.eq(msg.token), last.eq(msg.last)]
            blocked = blocked | (full[i] & ~kvmu.ingesting[i])
        m.d.comb += self.host_blocked.eq(blocked)

    def _samples(self, m, core):
        """The core's samples into a register a context; each MUX takes its own from there."""
        sample = core.sample
        for i, mux in enumerate(self._muxes):
            full = Signal(name=f"sample{i}_full")
            held = Signal(mux.sampler.payload.shape(), name=f"sample{i}")
            m.d.comb += [mux.sampler.valid.eq(full), mux.sampler.payload.eq(held)]
            arriving = sample.valid & equals(sample.payload.ctx, i)
            with m.If(arriving):
                m.d.comb += sample.ready.eq(~full)
            with m.If(mux.sampler.valid & mux.sampler.ready):
                m.d.sync += full.eq(0)
            with m.If(arriving & ~full):
                m.d.sync += [full.eq(1), held.token.eq(sample.payload.token),
                             held.step_end.eq(sample.payload.step_end)]

    def _gather(self, m, kvmu, core, ev) -> None:
        """The pass gatherer (see the class's description): the token the visited context's
        MUX offers into the event register; as the KVMU takes it, into the pass with its
        position; the pass to the core."""
        p, n = core.params, self.contexts
        b = p.ingest_batch
        scan = Signal(range(n), name="scan")  # the context visited
        count = Signal(range(b + 1), name="pass_count")
        swept = Signal(range(n + 1), name="pass_swept")  # contexts visited since its first
        beat = core.token.payload
        slots = Signal(beat.shape(), name="pass_slots")
        offer = Signal(self._muxes[0].out.payload.shape(), name="offer")
        offered = Signal(name="offered")
        with m.Switch(scan):
            for i, mux in enumerate(self._muxes):
                with m.Case(i):
                    m.d.comb += [offer.eq(mux.out.payload), offered.eq(mux.out.valid)]
        issue = core.token.valid & core.token.ready
        # a token joins the pass while the event register is free and the host's message
        # does not take it, the pass has room (the gathered token counted) and is not on
        # offer to the core: registers and the host's valid only
        pending = ev.full & ev.gathered
        room = (count + pending < b) & ~core.token.valid
        take = offered & room & ~ev.full & ~ev.host_event
        m.d.comb += [core.token.valid.eq((count != 0) & ~pending
                                         & (equals(count, b) | equals(swept, n))),
                     beat.eq(slots), beat.count.eq(count)]
        for i, mux in enumerate(self._muxes):
            m.d.comb += mux.out.ready.eq(take & equals(scan, i))
        with m.If(take):
            m.d.sync += [ev.full.eq(1), ev.token.eq(1), ev.ctx.eq(scan),
                         ev.source.eq(offer.source), ev.last.eq(offer.last),
                         ev.step_end.eq(offer.step_end), ev.value.eq(offer.token),
                         ev.keep.eq(offer.keep_logits), ev.gathered.eq(1)]
        usable = (ev.value < self._vocab) & (kvmu.write_pos < self._capacity)
        bad_token = Signal()
        m.d.comb += self.bad_token.eq(bad_token)
        with m.If(issue):
            m.d.sync += [count.eq(0), swept.eq(0), slots.keep.eq(0)]
        joined = ev.token_fired & ev.gathered & usable
        with m.If(joined):
            m.d.sync += [slots.tokens[count].eq(ev.value), slots.ctx[count].eq(ev.ctx),
                         slots.pos[count].eq(kvmu.write_pos),
                         slots.keep.bit_select(count, 1).eq(ev.keep), count.eq(count + 1)]
        with m.If(ev.token_fired & ~usable):
            m.d.sync += bad_token.eq(1)
        # stay on a context while its host tokens fill the pass; else on to the next (not
        # while the event register is full: the visit waits)
        stay = ev.full | (take & ~equals(offer.source, Source.DRAFT) & (count + 1 < b))
        with m.If(~stay):
            m.d.sync += scan.eq(Mux(equals(scan, n - 1), 0, scan + 1))
            with m.If(~issue & ((count != 0) | take) & (swept < n)):
                m.d.sync += swept.eq(swept + 1)

    def _counters(self, m, core) -> None:
        tokens, passes, busy, wait, full = (Signal(32) for _ in range(5))
        m.d.comb += [self.tokens.eq(tokens), self.passes.eq(passes), self.busy_cycles.eq(busy),
                     self.weight_wait_cycles.eq(wait), self.buffer_full_cycles.eq(full)]
        with m.If(core.token.valid & core.token.ready):
            m.d.sync += [tokens.eq(tokens + core.token.payload.count), passes.eq(passes + 1)]
        for counter, flag in ((busy, core.busy), (wait, core.weight_wait),
                              (full, core.buffer_full)):
            with m.If(flag):
                m.d.sync += counter.eq(counter + 1)
