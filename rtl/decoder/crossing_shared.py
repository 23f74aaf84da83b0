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
from heteroreason.rtl.decoder.crossing import CROSSING_DEPTH
from heteroreason.rtl.decoder.pipeline import GROUP_BITS, KEEP, Mirrored
from heteroreason.rtl.limits import SIZE_LIMIT

__all__ = ["WAYS_LIMIT", "SharedCrossingReceiver", "SharedCrossingSender",
           "SharedCrossingSignature"]

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
    As :class:`~heteroreason.rtl.decoder.crossing.CrossingSender`: a beat taken is on
    ``link`` the next cycle.

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
        # the payload register's select reaches every bit: a group of GROUP_BITS takes it from
        # a copy of its own, made from kept copies of the credit flags and the round robin's
        # pointer (no net over MAX_FANOUT; the copies' LUTs differ in their inputs, so
        # synthesis cannot merge them)
        groups = -(-width // GROUP_BITS)
        has_credit = [Mirrored(groups, name=f"has_credit{i}", init=1) for i in range(n)]
        last = Mirrored(groups, name="last", shape=range(n), init=n - 1)
        offers, all_home = [], []
        takes = [Signal(name=f"take{i}") for i in range(n)]
        for i, s in enumerate(self.streams):
            credits = Signal(range(depth + 1), init=depth, name=f"credits{i}")
            returned = Signal(name=f"returned{i}")  # the receiver's pulse, into a flip-flop
            after = Signal(range(depth + 2), name=f"after{i}")
            home = Signal(init=1, name=f"home{i}")
            m.d.comb += [s.ready.eq(takes[i]), after.eq(credits - takes[i] + returned)]
            m.d.sync += [returned.eq(self.link.credit[i]), credits.eq(after),
                         *has_credit[i].eq(after != 0), home.eq(after == depth)]
            offers.append(s.valid & has_credit[i].value)
            all_home.append(home)
        _grant(m, offers, last.value, takes)
        valid = Signal()
        way = Signal(range(n))
        payload = Signal(width, reset_less=True)  # ``link.valid`` says when
        for k in range(groups):
            lo, hi = k * GROUP_BITS, min(width, (k + 1) * GROUP_BITS)
            # kept: the group's select is a net of its own, not folded into each bit's LUT
            # (which would make every bit a load of the streams' ``valid``)
            grants = [Signal(name=f"take{i}_group{k}", attrs=KEEP) for i in range(n)]
            _grant(m, [s.valid & has_credit[i].copy(k) for i, s in enumerate(self.streams)],
                   last.copy(k), grants)
            chosen = Value.cast(self.streams[0].payload)[lo:hi]
            for i in range(1, n):
                chosen = Mux(grants[i], Value.cast(self.streams[i].payload)[lo:hi], chosen)
            m.d.sync += payload[lo:hi].eq(chosen)
        which = 0
        for i in range(1, n):
            which = Mux(takes[i], i, which)
        taken = _any(takes)
        m.d.sync += valid.eq(taken)
        with m.If(taken):
            m.d.sync += [way.eq(which), *last.eq(which)]
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
