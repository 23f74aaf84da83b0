"""DraftEngine: the KV front end (KVMU + input MUX) and the decoder core behind the host
interface of docs/design.md §4.4."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model import checks
from heteroreason.model.spec.numerics.qwen2_int8 import QuantizedModel
from heteroreason.model.spec.protocol import Error, Mode, Source
from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.core import KV_PORTS, DecoderCore
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.rtl.kv_frontend import HostMessageLayout, KvFrontEnd
from heteroreason.rtl.kvmu import SpanLayout

__all__ = ["DraftEngine", "connect_memory_ports"]


def connect_memory_ports(m, core: DecoderCore, engine) -> None:
    """The core's memory ports (weights, parameters, and its KV ports with ``external_kv``)
    as the engine's own."""
    outgoing = ("wreq", "preq", "kv_store", "k_req", "v_req")
    for name in ("wreq", "preq", "wdata", "pdata") + (KV_PORTS if core.external_kv else ()):
        if name in outgoing:
            wiring.connect(m, getattr(core, name), wiring.flipped(getattr(engine, name)))
        else:
            wiring.connect(m, wiring.flipped(getattr(engine, name)), getattr(core, name))


class DraftEngine(wiring.Component):
    """The draft model's engine: host commands and target tokens in, draft tokens out.

    The host stream carries INIT(pos)/ACCEPT/REJECT/CLEAR_ERROR and target-model tokens (``last``
    on the one whose logits start drafting), in order. Every token the decoder processes gets its
    KV position from the KVMU; sampled tokens feed back through the input MUX (held while
    drafting is stalled, squashed when stale). Each draft token is reported on ``draft_out`` when
    the decoder takes it (with its position and step-end/EOS marks); each finished step's span on
    ``submit``. Weights come from memory through ``wreq``/``wdata`` and ``preq``/``pdata`` (see
    :class:`~heteroreason.rtl.decoder.core.DecoderCore`).

    A host token id outside the vocabulary is consumed without being processed and sets the
    sticky ``bad_token`` status (the KVMU's position for it is left unwritten; the host recovers
    with INIT).

    With ``ingest_batch`` B > 1 host tokens are gathered into batches for the core (see
    :meth:`_batches`): up to B at consecutive positions, closed by a token that keeps its
    logits; a batch goes to the core once the core is free and no token that could join it is
    offered. Draft tokens still go one at a time. ``tokens`` counts tokens, not passes.

    Parameters
    ----------
    model : QuantizedModel
    params : DecoderParams
        The decoder core's parameters (:class:`~heteroreason.rtl.decoder.params.
        DecoderParams`); with ``external_kv`` the core's KV ports appear here.
    capacity : int
        KV-cache capacity in tokens (at most the model's maximum context).

    Members
    -------
    host : In(stream.Signature(HostMessageLayout(token_width, capacity)))
    draft_out : Out(stream.Signature(StructLayout token, pos, step_end, eos))
    submit : Out(stream.Signature(SpanLayout(capacity)))
    wreq, preq, wdata, pdata
        The memory ports of the decoder core.
    mode, error, bad_token
        Status.
    tokens, busy_cycles, weight_wait_cycles, buffer_full_cycles, stall_cycles : Out(32)
        Counters: tokens processed; cycles the core was busy; cycles an operator waited for a
        weight beat (memory-bound); cycles the weight stream was held back by a full prefetch
        buffer (compute-bound); cycles drafting was stalled waiting for a verdict.
    """

    def __init__(self, *, model: QuantizedModel, params: DecoderParams, capacity: int):
        if not isinstance(model, QuantizedModel):
            raise TypeError(f"model must be a QuantizedModel, not {type(model).__name__}")
        c = model.config
        checks.integer("capacity", capacity, low=1, high=c.max_context,
                       note="the model's maximum context")
        if isinstance(params, DecoderParams) and params.contexts > 1:
            raise ValueError(f"params.contexts is {params.contexts}: a DraftEngine holds one "
                             f"context (several: MultiDraftEngine)")
        self._core = DecoderCore(model=model, params=params)
        self._token_width = max(1, (c.vocab - 1).bit_length())
        self._front = KvFrontEnd(capacity=capacity, token_width=self._token_width)
        self._vocab = c.vocab
        self._eos = params.eos
        core = self._core
        kv_ports = {name: core.signature.members[name] for name in KV_PORTS if params.external_kv}
        super().__init__(kv_ports | {
            "host": In(stream.Signature(HostMessageLayout(self._token_width, capacity))),
            "draft_out": Out(stream.Signature(data.StructLayout({
                "token": self._token_width, "pos": range(capacity + 1), "step_end": 1,
                "eos": 1}))),
            "submit": Out(stream.Signature(SpanLayout(capacity))),
            "wreq": Out(stream.Signature(core.wreq.payload.shape())),
            "preq": Out(stream.Signature(core.preq.payload.shape())),
            "wdata": In(stream.Signature(core.wdata.payload.shape())),
            "pdata": In(stream.Signature(core.pdata.payload.shape())),
            "mode": Out(Mode),
            "error": Out(Error),
            "bad_token": Out(1),
            "tokens": Out(32),
            "busy_cycles": Out(32),
            "weight_wait_cycles": Out(32),
            "buffer_full_cycles": Out(32),
            "stall_cycles": Out(32),
        })

    @property
    def core(self):
        return self._core

    def elaborate(self, platform):
        m = Module()
        m.submodules.front = front = self._front
        m.submodules.core = core = self._core

        wiring.connect(m, wiring.flipped(self.host), front.host)
        wiring.connect(m, front.submit, wiring.flipped(self.submit))
        connect_memory_ports(m, core, self)

        # samples feed back into the MUX as draft tokens
        m.d.comb += [
            front.sampler.valid.eq(core.sample.valid),
            front.sampler.payload.token.eq(core.sample.payload.token),
            front.sampler.payload.step_end.eq(core.sample.payload.step_end),
            core.sample.ready.eq(front.sampler.ready),
        ]

        if core.params.ingest_batch > 1:
            self._batches(m, front, core)
            return m
        # a token the decoder takes goes to the core; draft tokens are also reported
        beat = front.decoder.payload
        is_draft = equals(beat.source, Source.DRAFT)
        in_vocab = beat.token < self._vocab
        bad_token = Signal()
        report_ready = ~is_draft | self.draft_out.ready
        m.d.comb += [
            core.token.payload.token.eq(beat.token),
            core.token.payload.pos.eq(beat.pos),
            core.token.payload.keep.eq(beat.keep_logits),
            core.token.valid.eq(front.decoder.valid & in_vocab & report_ready),
            self.draft_out.valid.eq(front.decoder.valid & is_draft & core.token.ready),
            self.draft_out.payload.token.eq(beat.token),
            self.draft_out.payload.pos.eq(beat.pos),
            self.draft_out.payload.eos.eq(equals(beat.token, self._eos)),
            front.decoder.ready.eq(
                (core.token.ready & report_ready) | (front.decoder.valid & ~in_vocab)),
            self.bad_token.eq(bad_token),
            self.mode.eq(front.mode),
            self.error.eq(front.error),
        ]
        # a draft token reaches the decoder in the cycle the MUX takes it from the sampler, so
        # its step-end mark is the sampler's payload of that cycle
        m.d.comb += self.draft_out.payload.step_end.eq(core.sample.payload.step_end)
        with m.If(front.decoder.valid & front.decoder.ready & ~in_vocab):
            m.d.sync += bad_token.eq(1)

        self._counters(m, front, core, core.token.valid & core.token.ready)
        return m

    def _counters(self, m, front, core, taken) -> None:
        """The status counters; ``taken``: the tokens the core takes this cycle (a flag with
        one token a pass)."""
        tokens, busy, wait, full, stall = (Signal(32) for _ in range(5))
        m.d.comb += [self.tokens.eq(tokens), self.busy_cycles.eq(busy),
                     self.weight_wait_cycles.eq(wait), self.buffer_full_cycles.eq(full),
                     self.stall_cycles.eq(stall)]
        if core.params.ingest_batch == 1:
            with m.If(taken):
                m.d.sync += tokens.eq(tokens + 1)
        else:
            m.d.sync += tokens.eq(tokens + taken)
        with m.If(core.busy):
            m.d.sync += busy.eq(busy + 1)
        with m.If(core.weight_wait):
            m.d.sync += wait.eq(wait + 1)
        with m.If(core.buffer_full):
            m.d.sync += full.eq(full + 1)
        with m.If(front.stalled):
            m.d.sync += stall.eq(stall + 1)

    def _batches(self, m, front, core) -> None:
        """Host tokens gathered into batches of up to ``ingest_batch`` at consecutive positions
        (a batch closes at its B-th token, at a token that keeps its logits, or when the next
        host token is not at the next position); a batch goes to the core once the core is free
        and no token that could join it is offered in that cycle. Draft tokens go to the core
        one at a time, as with one token a pass, once no batch is gathered."""
        n = core.params.ingest_batch
        beat = front.decoder.payload
        is_draft = equals(beat.source, Source.DRAFT)
        in_vocab = beat.token < self._vocab
        report_ready = ~is_draft | self.draft_out.ready
        tokens = Signal(data.ArrayLayout(range(self._vocab), n), name="batch_tokens")
        count = Signal(range(n + 1), name="batch_count")
        pos = Signal(beat.pos.shape(), name="batch_pos")
        keep = Signal(name="batch_keep")
        closed = Signal(name="batch_closed")
        empty = equals(count, 0)
        # a host token in the vocabulary that can join the batch
        joins = front.decoder.valid & ~is_draft & in_vocab & ~closed \
            & (empty | (beat.pos == pos + count))
        issue = ~empty & core.token.ready & ~joins
        draft = front.decoder.valid & is_draft & in_vocab & empty
        bad_token = Signal()
        m.d.comb += [
            core.token.valid.eq(issue | (draft & report_ready)),
            core.token.payload.count.eq(Mux(issue, count, 1)),
            core.token.payload.pos.eq(Mux(issue, pos, beat.pos)),
            core.token.payload.keep.eq(Mux(issue, keep, beat.keep_logits)),
            self.draft_out.valid.eq(draft & ~issue & core.token.ready),
            self.draft_out.payload.token.eq(beat.token),
            self.draft_out.payload.pos.eq(beat.pos),
            self.draft_out.payload.eos.eq(equals(beat.token, self._eos)),
            # a token joins the batch, a draft token goes to the core, or a token outside the
            # vocabulary is dropped (a host token not at the next position waits for the batch
            # to go)
            front.decoder.ready.eq(joins | (draft & ~issue & core.token.ready & report_ready)
                                   | (front.decoder.valid & ~in_vocab)),
            self.bad_token.eq(bad_token),
            self.mode.eq(front.mode),
            self.error.eq(front.error),
            self.draft_out.payload.step_end.eq(core.sample.payload.step_end),
        ]
        for k in range(n):
            m.d.comb += core.token.payload.tokens[k].eq(Mux(issue, tokens[k],
                                                            beat.token if k == 0 else 0))
        with m.If(issue):
            m.d.sync += [count.eq(0), closed.eq(0), keep.eq(0)]
        with m.Elif(joins):
            index = count[:max(1, (n - 1).bit_length())]
            m.d.sync += [tokens[index].eq(beat.token), count.eq(count + 1),
                         keep.eq(beat.keep_logits),
                         closed.eq(beat.keep_logits | equals(count, n - 1))]
            with m.If(empty):
                m.d.sync += pos.eq(beat.pos)
        with m.If(front.decoder.valid & front.decoder.ready & ~in_vocab):
            m.d.sync += bad_token.eq(1)
        taken = Mux(issue, count, draft & core.token.ready & report_ready)
        self._counters(m, front, core, taken)
