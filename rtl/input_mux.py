"""Input MUX: selects the decoder's next token from the local sampler or the host stream."""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model import checks
from heteroreason.model.spec.protocol import Mode, Source
from heteroreason.rtl.compare import equals
from heteroreason.rtl.limits import SIZE_LIMIT, TOKEN_BITS_LIMIT

__all__ = ["DecoderInputLayout", "HostTokenLayout", "InputMux", "SampledTokenLayout"]


def HostTokenLayout(token_width):
    """A target-model token from the host; ``last`` ends ingestion and starts drafting."""
    return data.StructLayout({"token": token_width, "last": 1})


def SampledTokenLayout(token_width):
    """A token from the local sampler; ``step_end`` marks the step delimiter."""
    return data.StructLayout({"token": token_width, "step_end": 1})


def DecoderInputLayout(token_width):
    """The decoder's input: the token, its source, its marks and whether its logits are kept."""
    return data.StructLayout({
        "token": token_width,
        "source": Source,
        "last": 1,
        "step_end": 1,
        "keep_logits": 1,
    })


class InputMux(wiring.Component):
    """Input MUX of the draft engine (docs/design.md §4.2).

    In Initialization and Rollback the decoder's input comes from ``host`` (logits kept only for
    the ``last`` token; the others are shadow ingests); in Speculation and Accept it comes from
    ``sampler`` unless drafting is ``stalled``. Every token is one beat, so a switch of source
    happens between beats: no beat is split, lost or duplicated.

    Samples in flight are counted (tokens admitted with logits kept whose sampled token has not
    been taken yet). ``flush`` (a legal INIT or REJECT) marks all of them stale; stale samples are
    taken from ``sampler`` and dropped, with ``squash`` high, even while the host path forwards.
    A draft beat offered on ``out`` when a flush arrives is withdrawn: that is the one case where
    ``out.valid`` falls without a transfer, and the beat is stale by definition.

    Parameters
    ----------
    token_width : int
        Width of a token id in bits.
    max_in_flight : int
        Most samples in flight at once; while that many are outstanding a host ``last`` token
        waits. A sampler beat with no sample in flight is never taken.

    Members
    -------
    host : In(stream.Signature(HostTokenLayout(token_width)))
    sampler : In(stream.Signature(SampledTokenLayout(token_width)))
    out : Out(stream.Signature(DecoderInputLayout(token_width)))
    mode : In(Mode)
    stalled : In(1)
    flush : In(1)
    squash : Out(1)
        A stale sample is dropped this cycle.
    in_flight : Out(range(max_in_flight + 1))

    Latency
    -------
    Combinational from ``host``/``sampler`` to ``out``; ``mode``, ``stalled`` and ``flush`` act
    in the cycle they are presented.

    Throughput
    ----------
    One token per cycle.
    """

    def __init__(self, *, token_width, max_in_flight=4):
        checks.integer("token_width", token_width, low=1, high=TOKEN_BITS_LIMIT, error=TypeError)
        checks.integer("max_in_flight", max_in_flight, low=1, high=SIZE_LIMIT, error=TypeError)
        self._token_width = token_width
        self._max_in_flight = max_in_flight
        super().__init__({
            "host": In(stream.Signature(HostTokenLayout(token_width))),
            "sampler": In(stream.Signature(SampledTokenLayout(token_width))),
            "out": Out(stream.Signature(DecoderInputLayout(token_width))),
            "mode": In(Mode),
            "stalled": In(1),
            "flush": In(1),
            "squash": Out(1),
            "in_flight": Out(range(max_in_flight + 1)),
        })

    @property
    def token_width(self):
        return self._token_width

    @property
    def max_in_flight(self):
        return self._max_in_flight

    def elaborate(self, platform):
        m = Module()

        in_flight = Signal(range(self.max_in_flight + 1))
        stale = Signal(range(self.max_in_flight + 1))
        m.d.comb += self.in_flight.eq(in_flight)

        host_selected = equals(self.mode, Mode.INITIALIZATION) | equals(self.mode, Mode.ROLLBACK)
        sampler_selected = ~host_selected & ~self.stalled
        squashing = stale.any()
        room = ~equals(in_flight, self.max_in_flight)
        sample_due = in_flight.any()

        with m.If(squashing):
            m.d.comb += [self.sampler.ready.eq(1), self.squash.eq(self.sampler.valid)]

        with m.If(host_selected):
            host_ok = ~self.host.payload.last | room
            m.d.comb += [
                self.out.valid.eq(self.host.valid & host_ok),
                self.out.payload.token.eq(self.host.payload.token),
                self.out.payload.source.eq(Source.HOST),
                self.out.payload.last.eq(self.host.payload.last),
                self.out.payload.keep_logits.eq(self.host.payload.last),
                self.host.ready.eq(self.out.ready & host_ok),
            ]
        with m.Elif(sampler_selected & ~squashing):
            m.d.comb += [
                self.out.valid.eq(self.sampler.valid & sample_due),
                self.out.payload.token.eq(self.sampler.payload.token),
                self.out.payload.source.eq(Source.DRAFT),
                self.out.payload.step_end.eq(self.sampler.payload.step_end),
                self.out.payload.keep_logits.eq(1),
                self.sampler.ready.eq(self.out.ready & sample_due),
            ]

        admitted = self.out.valid & self.out.ready & self.out.payload.keep_logits
        returned = self.sampler.valid & self.sampler.ready
        in_flight_next = Signal.like(in_flight)
        m.d.comb += in_flight_next.eq(in_flight + admitted - returned)
        m.d.sync += in_flight.eq(in_flight_next)
        with m.If(self.flush):
            m.d.sync += stale.eq(in_flight_next)
        with m.Elif(self.squash):
            m.d.sync += stale.eq(stale - 1)

        return m
