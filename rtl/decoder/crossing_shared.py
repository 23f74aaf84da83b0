"""Several streams of one payload shape on one crossing (:mod:`~heteroreason.rtl.decoder.
crossing`): a beat a cycle between them, each beat tagged with its stream (``way``), each
stream with its own credits and its own queue on the receiving side, so that a stream whose
consumer stalls never holds another back.

For streams whose sources share a memory port anyway (an external KV cache's key and value
rows: :mod:`~heteroreason.model.timing.fpga.hbm`, ``shared_kv_ports``), one link carries
them for the SLLs of one: the U280 design's key and value rows are 2,048 bits each.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Shape, Signal, Value
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model import checks
from heteroreason.rtl.decoder.crossing import CREDIT_ROUND_TRIP, CROSSING_DEPTH, CROSSING_LATENCY
from heteroreason.rtl.decoder.pipeline import GROUP_BITS, delay
from heteroreason.rtl.limits import SIZE_LIMIT

__all__ = ["SHARED_LATENCY", "SHARED_ROUND_TRIP", "WAYS_LIMIT", "SharedCrossingReceiver",
           "SharedCrossingSender", "SharedCrossingSignature"]

# a beat taken by the sender -> valid on the receiver's stream: a crossing's, and the sender's
# landing register
SHARED_LATENCY = CROSSING_LATENCY + 1
# a credit spent -> spendable again, with the beat taken at once (the receiver's queue of
# CROSSING_DEPTH, 8, covers it: a way alone runs a beat a cycle)
SHARED_ROUND_TRIP = CREDIT_ROUND_TRIP + 1

# streams one link may carry (the arbitration is a priority chain over them)
WAYS_LIMIT = 8


def _any(bits):
    return Cat(*bits).any() if bits else Const(0)


def _grant(m, offers, last, takes) -> None:
    """Round robin: way ``i`` is taken (``takes[i]``) when it offers and no way after the
    ``last`` one taken and before ``i`` does."""
    n = len(offers)
    with m.Switch(last):
        for prev in range(n):
            with m.Case(prev):
                for i in range(n):
                    ahead = [offers[(prev + 1 + j) % n] for j in range((i - prev - 1) % n)]
                    m.d.comb += takes[i].eq(offers[i] & ~_any(ahead))


def _check(ways, depth):
    checks.integer("ways", ways, low=2, high=WAYS_LIMIT, error=TypeError)
    checks.integer("depth", depth, low=1, high=SIZE_LIMIT, error=TypeError)


class SharedCrossingSignature(wiring.Signature):
    """The wires of a shared crossing, from the sender's side: ``valid``, ``way`` (the beat's
    stream) and ``payload`` out, each a flip-flop's output; ``credit`` in, a pulse a way for
    each beat of that way the receiver handed on. A unit's port of this kind has no stream of
    its own in :class:`~heteroreason.rtl.decoder.crossing.Across` (``served_by_far_side``):
    the unit's ``far_side`` builds the sender and gives its ways their streams."""

    served_by_far_side = True

    def __init__(self, payload_shape, ways):
        self._payload_shape = payload_shape
        self._ways = ways
        super().__init__({"valid": Out(1), "way": Out(range(ways)),
                          "payload": Out(payload_shape), "credit": In(ways)})

    @property
    def payload_shape(self):
        return self._payload_shape

    @property
    def ways(self):
        return self._ways

    def __eq__(self, other):
        return (isinstance(other, SharedCrossingSignature)
                and (other._payload_shape, other._ways) == (self._payload_shape, self._ways))

    def __repr__(self):
        return f"SharedCrossingSignature({self._payload_shape!r}, {self._ways})"


class SharedCrossingSender(wiring.Component):
    """The sending half: of the ``streams`` that offer a beat and hold a credit of their way,
    takes one a cycle (round robin: the way after the last one taken first) and puts it on
    ``link`` from registers.

    Every way's payload lands in a register of its own first, with a registered copy of which
    way was taken for each group of :data:`~heteroreason.rtl.decoder.pipeline.GROUP_BITS`
    bits; the link's payload register then picks its way by that copy. So the select of
    every bit is a flip-flop (no net over ``MAX_FANOUT``), and neither the streams' ``valid``
    nor the arbitration reaches the payload's logic (synthesis would otherwise fold the
    arbitration into every bit's LUT, each bit a load of each stream's ``valid``).

    Parameters
    ----------
    shape : shape-castable
        The payload's shape.
    ways : int
        Streams, 2 to :data:`WAYS_LIMIT`.
    depth : int
        Credits of each way at reset: the receiver's queue of that way.

    Members
    -------
    streams : In(stream.Signature(shape)).array(ways)
        A stream's ``ready``: it is the way taken this cycle (its credit register and the
        other ways' offers).
    link : Out(SharedCrossingSignature(shape, ways))
    idle : Out(1)
        Registered: every way's credits are home.

    Latency
    -------
    A beat taken is on ``link`` two cycles later (one more than a
    :class:`~heteroreason.rtl.decoder.crossing.CrossingSender`): :data:`SHARED_LATENCY`
    to the receiver's stream.

    Throughput
    ----------
    A beat a cycle over all ways; a way alone, a beat a cycle while its credits come back.
    """

    def __init__(self, *, shape, ways=2, depth=CROSSING_DEPTH):
        _check(ways, depth)
        self._shape, self._ways, self._depth = shape, ways, depth
        super().__init__({"streams": In(stream.Signature(shape)).array(ways),
                          "link": Out(SharedCrossingSignature(shape, ways)), "idle": Out(1)})

    @property
    def ways(self):
        return self._ways

    @property
    def depth(self):
        return self._depth

    def elaborate(self, platform):
        m = Module()
        n, depth = self._ways, self._depth
        width = Shape.cast(self._shape).width
        offers, all_home = [], []
        takes = [Signal(name=f"take{i}") for i in range(n)]
        landed = []  # each way's payload, registered every cycle (no enable: see below)
        for i, s in enumerate(self.streams):
            credits = Signal(range(depth + 1), init=depth, name=f"credits{i}")
            has_credit = Signal(init=1, name=f"has_credit{i}")
            returned = Signal(name=f"returned{i}")  # the receiver's pulse, into a flip-flop
            after = Signal(range(depth + 2), name=f"after{i}")
            home = Signal(init=1, name=f"home{i}")
            m.d.comb += [s.ready.eq(takes[i]), after.eq(credits - takes[i] + returned)]
            m.d.sync += [returned.eq(self.link.credit[i]), credits.eq(after),
                         has_credit.eq(after != 0), home.eq(after == depth)]
            offers.append(s.valid & has_credit)
            all_home.append(home)
            landed.append(delay(m, Value.cast(s.payload), 1, name=f"landed{i}",
                                reset_less=True))
        last = Signal(range(n), init=n - 1)
        _grant(m, offers, last, takes)
        which = 0
        for i in range(1, n):
            which = Mux(takes[i], i, which)
        taken = _any(takes)
        with m.If(taken):
            m.d.sync += last.eq(which)
        # the beat taken, a cycle later: valid, way, and a copy of the way for each group of
        # the payload's bits (kept: each copy's loads are its group's bits)
        valid = delay(m, taken, 2, name="valid")
        way = delay(m, which, 2, name="way")
        payload = Signal(width, reset_less=True)  # ``link.valid`` says when
        for k in range(-(-width // GROUP_BITS)):
            lo, hi = k * GROUP_BITS, min(width, (k + 1) * GROUP_BITS)
            chosen = delay(m, which, 1, name=f"way_group{k}_", keep=True)
            beat = landed[0][lo:hi]
            for i in range(1, n):
                beat = Mux(chosen == i, landed[i][lo:hi], beat)
            m.d.sync += payload[lo:hi].eq(beat)
        m.d.comb += [self.link.valid.eq(valid), self.link.way.eq(way),
                     self.link.payload.eq(payload), self.idle.eq(Cat(*all_home).all())]
        return m


class SharedCrossingReceiver(wiring.Component):
    """The receiving half: registers ``link``'s wires, queues each beat in its way's queue and
    returns a credit of that way for each beat its stream hands on.

    Parameters
    ----------
    shape : shape-castable
        The payload's shape.
    ways : int
        Streams, 2 to :data:`WAYS_LIMIT`.
    depth : int
        Beats each way's queue holds: the sender's credits of that way.

    Members
    -------
    link : In(SharedCrossingSignature(shape, ways))
    streams : Out(stream.Signature(shape)).array(ways)

    Latency
    -------
    A beat on ``link`` is valid on its way's stream two cycles later (its register, the
    queue), as with :class:`~heteroreason.rtl.decoder.crossing.CrossingReceiver`.

    Throughput
    ----------
    A beat a cycle over all ways.
    """

    def __init__(self, *, shape, ways=2, depth=CROSSING_DEPTH):
        _check(ways, depth)
        self._shape, self._ways, self._depth = shape, ways, depth
        super().__init__({"link": In(SharedCrossingSignature(shape, ways)),
                          "streams": Out(stream.Signature(shape)).array(ways)})

    @property
    def ways(self):
        return self._ways

    @property
    def depth(self):
        return self._depth

    def elaborate(self, platform):
        m = Module()
        width = Shape.cast(self._shape).width
        arrived = Signal()
        way = Signal(range(self._ways))
        beat = Signal(width, reset_less=True)  # ``arrived`` says when it holds one
        m.d.sync += [arrived.eq(self.link.valid), way.eq(self.link.way),
                     beat.eq(self.link.payload)]
        credit = Signal(self._ways)
        for i, s in enumerate(self.streams):
            m.submodules[f"queue{i}"] = queue = fifo.SyncFIFO(width=width, depth=self._depth)
            m.d.comb += [queue.w_en.eq(arrived & (way == i)), queue.w_data.eq(beat),
                         s.valid.eq(queue.r_rdy), s.payload.eq(queue.r_data),
                         queue.r_en.eq(s.ready)]
            m.d.sync += credit[i].eq(queue.r_rdy & queue.r_en)
        m.d.comb += self.link.credit.eq(credit)
        return m
