"""The KVMU and the input MUX wired together: the draft engine's front end."""

from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model.spec.protocol import Error, Mode, Op, Source
from heteroreason.rtl.compare import equals
from heteroreason.rtl.input_mux import InputMux, SampledTokenLayout
from heteroreason.rtl.kvmu import Kvmu, SpanLayout

__all__ = ["DecoderTokenLayout", "HostMessageLayout", "KvFrontEnd"]


def HostMessageLayout(token_width, capacity):
    """One message from the host: a command (``is_token`` low: ``op``, ``pos``) or a
    target-model token (``is_token`` high: ``token``, ``last``)."""
    return data.StructLayout({
        "is_token": 1,
        "op": Op,
        "pos": range(capacity + 1),
        "token": token_width,
        "last": 1,
    })


def DecoderTokenLayout(token_width, capacity):
    """A token handed to the decoder with the KV position it is written at."""
    return data.StructLayout({
        "token": token_width,
        "source": Source,
        "keep_logits": 1,
        "pos": range(capacity + 1),
    })


class KvFrontEnd(wiring.Component):
    """KVMU plus input MUX: what feeds the decoder pipeline and tracks its KV cache.

    A token leaves on ``decoder`` only in the cycle the KVMU takes it on its ``alloc`` stream, so
    every token handed to the decoder has been given its KV position (``pos``) and every KVMU
    token event corresponds to exactly one token handed over.

    The host sends commands and target-model tokens on one ordered stream (``host``), as they
    cross PCIe: the message at its head goes to the KVMU (a command) or to the MUX (a token), so
    a refined step's tokens are ingested after the REJECT or INIT that precedes them. A command
    is taken only in a cycle in which no token is handed to the decoder. A token at the head
    while the KVMU is in Speculation or Accept (a host protocol error: tokens follow INIT or
    REJECT) waits there with ``host_blocked`` high.

    The one exception to the stream rule (an offered beat stays unchanged until taken): after a
    legal INIT or REJECT an offered draft token is withdrawn, since it is stale.

    The KVMU refuses one kind of token the MUX lets through: a write at capacity. That token
    still reaches the decoder, with ``pos == capacity`` and the KVMU's ``error`` set; the host
    keeps ``ahead`` below capacity (backtracking with INIT), and the decoder writes no KV at
    ``pos == capacity``.

    Parameters
    ----------
    capacity : int
        KV-cache capacity in tokens.
    token_width : int
        Width of a token id in bits.
    max_in_flight : int
        Most samples in flight at once (see :class:`~heteroreason.rtl.input_mux.InputMux`).

    Members
    -------
    host : In(stream.Signature(HostMessageLayout(token_width, capacity)))
        Commands and target-model tokens from the host, in order.
    sampler : In(stream.Signature(SampledTokenLayout(token_width)))
        Tokens from the local sampler.
    decoder : Out(stream.Signature(DecoderTokenLayout(token_width, capacity)))
        Tokens for the decoder pipeline.
    submit : Out(stream.Signature(SpanLayout(capacity)))
        Steps submitted for verification.
    mode, pending, stalled, error, valid_ptr, curr_ptr, ahead_ptr, squash, in_flight
        Status, as on the KVMU and the MUX.
    host_blocked : Out(1)
        A host token waits at the head of ``host`` outside Initialization and Rollback.

    Latency
    -------
    Combinational from ``host``/``sampler`` to ``decoder``; KVMU state one cycle after an event.

    Throughput
    ----------
    One token per cycle; a host command is taken in a cycle with no token handed over.
    """

    def __init__(self, *, capacity, token_width, max_in_flight=4):
        self._kvmu = Kvmu(capacity=capacity)
        self._mux = InputMux(token_width=token_width, max_in_flight=max_in_flight)
        super().__init__({
            "host": In(stream.Signature(HostMessageLayout(token_width, capacity))),
            "sampler": In(stream.Signature(SampledTokenLayout(token_width))),
            "decoder": Out(stream.Signature(DecoderTokenLayout(token_width, capacity))),
            "submit": Out(stream.Signature(SpanLayout(capacity))),
            "mode": Out(Mode),
            "pending": Out(1),
            "stalled": Out(1),
            "error": Out(Error),
            "valid_ptr": Out(range(capacity + 1)),
            "curr_ptr": Out(range(capacity + 1)),
            "ahead_ptr": Out(range(capacity + 1)),
            "squash": Out(1),
            "in_flight": Out(range(max_in_flight + 1)),
            "host_blocked": Out(1),
        })

    @property
    def capacity(self):
        return self._kvmu.capacity

    @property
    def token_width(self):
        return self._mux.token_width

    @property
    def max_in_flight(self):
        return self._mux.max_in_flight

    def elaborate(self, platform):
        m = Module()
        m.submodules.kvmu = kvmu = self._kvmu
        m.submodules.mux = mux = self._mux

        msg = self.host.payload
        host_mode = equals(kvmu.mode, Mode.INITIALIZATION) | equals(kvmu.mode, Mode.ROLLBACK)
        with m.If(msg.is_token):
            m.d.comb += [
                mux.host.valid.eq(self.host.valid),
                mux.host.payload.token.eq(msg.token),
                mux.host.payload.last.eq(msg.last),
                self.host.ready.eq(mux.host.ready),
                self.host_blocked.eq(self.host.valid & ~host_mode),
            ]
        with m.Else():
            m.d.comb += [
                kvmu.cmd.valid.eq(self.host.valid),
                kvmu.cmd.payload.op.eq(msg.op),
                kvmu.cmd.payload.pos.eq(msg.pos),
                self.host.ready.eq(kvmu.cmd.ready),
            ]

        wiring.connect(m, wiring.flipped(self.sampler), mux.sampler)
        wiring.connect(m, kvmu.submit, wiring.flipped(self.submit))

        m.d.comb += [
            mux.mode.eq(kvmu.mode),
            mux.stalled.eq(kvmu.stalled),
            mux.flush.eq(kvmu.flush),
            kvmu.alloc.valid.eq(mux.out.valid & self.decoder.ready),
            kvmu.alloc.payload.source.eq(mux.out.payload.source),
            kvmu.alloc.payload.last.eq(mux.out.payload.last),
            kvmu.alloc.payload.step_end.eq(mux.out.payload.step_end),
            mux.out.ready.eq(self.decoder.ready & kvmu.alloc.ready),
            self.decoder.valid.eq(mux.out.valid & kvmu.alloc.ready),
            self.decoder.payload.token.eq(mux.out.payload.token),
            self.decoder.payload.source.eq(mux.out.payload.source),
            self.decoder.payload.keep_logits.eq(mux.out.payload.keep_logits),
            self.decoder.payload.pos.eq(kvmu.write_pos),
            self.mode.eq(kvmu.mode),
            self.pending.eq(kvmu.pending),
            self.stalled.eq(kvmu.stalled),
            self.error.eq(kvmu.error),
            self.valid_ptr.eq(kvmu.valid_ptr),
            self.curr_ptr.eq(kvmu.curr_ptr),
            self.ahead_ptr.eq(kvmu.ahead_ptr),
            self.squash.eq(mux.squash),
            self.in_flight.eq(mux.in_flight),
        ]
        return m
