"""A stream carried between two units that a floorplan may place in different SLRs, registered on
both sides of the boundary: the sender's flip-flops drive every wire of the link, and every
wire lands in a flip-flop of the receiver before any logic; the flow is held back by credits
(the receiver's room), never by a ready signal that would cross in the same cycle.

An UltraScale+ SLR crossing is a super long line between two Laguna sites; Xilinx's guidance
(UG949, "Super Long Line (SLL) Crossing") is to register it at both ends, which the placer
then packs into the Laguna flip-flops. This is that discipline in the RTL: the fit's
registration check (:mod:`heteroreason.sim.flow.hierarchy`) counts a link bit as registered
when its driver is a flip-flop's Q and each of its loads a flip-flop's D.
"""

from amaranth.hdl import Module, Shape, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model import checks
from heteroreason.rtl.decoder.pipeline import delay
from heteroreason.rtl.limits import SIZE_LIMIT

__all__ = [
    "BOUNDARY_LATENCY",
    "CREDIT_ROUND_TRIP",
    "CROSSING_DEPTH",
    "CROSSING_LATENCY",
    "Across",
    "CrossingReceiver",
    "CrossingSender",
    "CrossingSignature",
    "boundary",
    "crossing_members",
    "crossing_names",
    "far_ends",
    "stream_ends",
]

# a beat taken by the sender -> valid on the receiver's ``out``: the sender's register, the
# receiver's, the receiver's queue's write
CROSSING_LATENCY = 3
# a credit spent (a beat taken) -> spendable again, with the beat taken at once: the latency,
# the receiver's credit register, the sender's, the count's
CREDIT_ROUND_TRIP = CROSSING_LATENCY + 3
# the receiver's queue: room for a round trip of beats, so that a link runs a beat a cycle
CROSSING_DEPTH = 8


class CrossingSignature(wiring.Signature):
    """The wires of a crossing, from the sender's side: ``valid`` and ``payload`` out, both
    flip-flops' outputs, and ``credit`` in, a pulse a beat the receiver handed on."""

    def __init__(self, payload_shape):
        self._payload_shape = payload_shape
        super().__init__({"valid": Out(1), "payload": Out(payload_shape), "credit": In(1)})

    @property
    def payload_shape(self):
        return self._payload_shape

    def __eq__(self, other):
        return isinstance(other, CrossingSignature) and \
            other._payload_shape == self._payload_shape

    def __repr__(self):
        return f"CrossingSignature({self._payload_shape!r})"


class CrossingSender(wiring.Component):
    """The sending half of a crossing: takes a beat of ``stream`` while it holds a credit and
    puts it on ``link`` from registers.

    Parameters
    ----------
    shape : shape-castable
        The payload's shape.
    depth : int
        Credits at reset: the receiver's :attr:`CrossingReceiver.depth` (the same value).

    Members
    -------
    stream : In(stream.Signature(shape))
        ``ready`` is a register: a credit is held.
    link : Out(CrossingSignature(shape))
    idle : Out(1)
        Registered: every credit is home (every beat sent was handed on by the receiver).

    Latency
    -------
    A beat taken is on ``link`` the next cycle (:data:`CROSSING_LATENCY` to the receiver's
    ``out``).

    Throughput
    ----------
    A beat a cycle while credits come back: ``depth`` beats a :data:`CREDIT_ROUND_TRIP`
    cycles at most.
    """

    def __init__(self, *, shape, depth=CROSSING_DEPTH):
        checks.integer("depth", depth, low=1, high=SIZE_LIMIT, error=TypeError)
        self._shape = shape
        self._depth = depth
        super().__init__({"stream": In(stream.Signature(shape)),
                          "link": Out(CrossingSignature(shape)), "idle": Out(1)})

    @property
    def depth(self):
        return self._depth

    def elaborate(self, platform):
        m = Module()
        credits = Signal(range(self._depth + 1), init=self._depth)
        has_credit = Signal(init=1)
        idle = Signal(init=1)
        returned = Signal()  # the receiver's credit pulse, into a flip-flop first
        take = Signal()
        payload = Signal(self._shape, reset_less=True)  # ``link.valid`` says when
        valid = Signal()
        after = Signal(range(self._depth + 2))
        m.d.comb += [
            self.stream.ready.eq(has_credit),
            take.eq(self.stream.valid & has_credit),
            after.eq(credits - take + returned),
            self.link.valid.eq(valid),
            self.link.payload.eq(payload),
        ]
        m.d.sync += [returned.eq(self.link.credit), valid.eq(take), credits.eq(after),
                     has_credit.eq(after != 0), idle.eq(after == self._depth)]
        m.d.comb += self.idle.eq(idle)
        # the payload register loads every cycle, with no enable: ``valid`` says which cycles
        # carry a beat, and an enable would be one net to every bit of a wide payload (2,048
        # loads for the U280 design's key rows)
        m.d.sync += payload.eq(self.stream.payload)
        return m


class CrossingReceiver(wiring.Component):
    """The receiving half of a crossing: registers ``link``'s wires, queues the beats and
    returns a credit for each beat ``stream`` hands on.

    Parameters
    ----------
    shape : shape-castable
        The payload's shape.
    depth : int
        Beats the queue holds: the sender's credits (at least :data:`CREDIT_ROUND_TRIP` for a
        beat a cycle).

    Members
    -------
    link : In(CrossingSignature(shape))
    stream : Out(stream.Signature(shape))

    Latency
    -------
    A beat on ``link`` is valid on ``stream`` two cycles later (its register, the queue).

    Throughput
    ----------
    A beat a cycle.
    """

    def __init__(self, *, shape, depth=CROSSING_DEPTH):
        checks.integer("depth", depth, low=1, high=SIZE_LIMIT, error=TypeError)
        self._shape = shape
        self._depth = depth
        super().__init__({"link": In(CrossingSignature(shape)),
                          "stream": Out(stream.Signature(shape))})

    @property
    def depth(self):
        return self._depth

    def elaborate(self, platform):
        m = Module()
        width = Shape.cast(self._shape).width
        m.submodules.queue = queue = fifo.SyncFIFO(width=width, depth=self._depth)
        arrived = Signal()
        beat = Signal(width, reset_less=True)  # ``arrived`` says when it holds one
        credit = Signal()
        m.d.sync += [arrived.eq(self.link.valid), beat.eq(self.link.payload),
                     credit.eq(queue.r_rdy & queue.r_en)]
        m.d.comb += [
            queue.w_en.eq(arrived), queue.w_data.eq(beat),
            self.stream.valid.eq(queue.r_rdy), self.stream.payload.eq(queue.r_data),
            queue.r_en.eq(self.stream.ready),
            self.link.credit.eq(credit),
        ]
        return m


# a signal carried between two modules by :func:`boundary`: a register on each side
BOUNDARY_LATENCY = 2


def boundary(source, target, value, name: str, *, reset_less: bool = True):
    """``value`` of module ``source`` carried into module ``target`` registered on both sides
    (kept registers: synthesis neither merges them with twins nor moves logic between them):
    :data:`BOUNDARY_LATENCY` cycles later. For signals whose every consumer is delayed alike
    (a unit's whole input), where a stream's credits are not needed."""
    sent = delay(source, value, 1, name=f"{name}_tx", reset_less=reset_less, keep=True)
    return delay(target, sent, 1, name=f"{name}_rx", reset_less=reset_less, keep=True)


def crossing_members(members: dict) -> dict:
    """``members`` (a component's signature members, name -> ``In``/``Out``) with every stream
    made a crossing of the same payload and direction: the ports of a unit whose streams leave
    and enter it through its own :class:`CrossingSender` and :class:`CrossingReceiver`."""
    out = {}
    for name, member in members.items():
        sig = member.signature if member.is_signature else None
        if isinstance(sig, stream.Signature):
            crossing = CrossingSignature(sig.members["payload"].shape)
            out[name] = In(crossing) if member.flow is wiring.In else Out(crossing)
        else:
            out[name] = member
    return out


def stream_ends(m, component, names, *, depth: int = CROSSING_DEPTH):
    """For ``component``'s crossing ports ``names`` (:func:`crossing_members`), the streams its
    logic uses: a :class:`CrossingReceiver`'s for an input, a :class:`CrossingSender`'s for an
    output (submodules ``{name}_rx`` / ``{name}_tx`` of ``m``); name -> the half (its
    ``stream`` the logic's)."""
    ends = {}
    for name in names:
        port = getattr(component, name)
        shape = port.signature.payload_shape
        if component.signature.members[name].flow is wiring.In:
            m.submodules[f"{name}_rx"] = half = CrossingReceiver(shape=shape, depth=depth)
            wiring.connect(m, wiring.flipped(port), half.link)
        else:
            m.submodules[f"{name}_tx"] = half = CrossingSender(shape=shape, depth=depth)
            wiring.connect(m, half.link, wiring.flipped(port))
        ends[name] = half
    return ends


def crossing_names(unit) -> list:
    """The names of ``unit``'s ports that are crossings (:class:`CrossingSignature`)."""
    return [name for name, member in unit.signature.members.items()
            if member.is_signature and isinstance(member.signature, CrossingSignature)]


def far_ends(m, unit, names, *, prefix: str, depth: int = CROSSING_DEPTH) -> dict:
    """The other halves of ``unit``'s crossing ports ``names``, in ``m`` (the module around
    it): a :class:`CrossingSender` for each of the unit's inputs, a :class:`CrossingReceiver`
    for each output (submodules ``{prefix}_{name}_tx`` / ``_rx``); name -> the stream ``m``'s
    logic uses in place of the port."""
    ends = {}
    for name in names:
        port = getattr(unit, name)
        shape = port.signature.payload_shape
        if unit.signature.members[name].flow is wiring.In:
            m.submodules[f"{prefix}_{name}_tx"] = half = CrossingSender(shape=shape, depth=depth)
            wiring.connect(m, half.link, port)
        else:
            m.submodules[f"{prefix}_{name}_rx"] = half = CrossingReceiver(shape=shape,
                                                                          depth=depth)
            wiring.connect(m, port, half.link)
        ends[name] = half.stream
    return ends


class Across(wiring.Component):
    """``unit``, whose streams are crossings (:func:`crossing_members`), with the far half of
    each of them: its ports as streams again, each beat through the crossing. How a unit with
    crossings is tested alone, and what its surroundings see of it.

    Parameters
    ----------
    unit : wiring.Component
        Its crossing ports become streams of the same payload and direction; its other ports
        stay as they are.

    Latency
    -------
    :data:`CROSSING_LATENCY` on every stream, in or out.
    """

    def __init__(self, unit):
        self._unit = unit
        members = {}
        for name, member in unit.signature.members.items():
            sig = member.signature if member.is_signature else None
            if isinstance(sig, CrossingSignature):
                shape = stream.Signature(sig.payload_shape)
                members[name] = In(shape) if member.flow is wiring.In else Out(shape)
            elif getattr(sig, "served_by_far_side", False):
                continue  # another kind of link, which the unit's ``far_side`` serves
            else:
                members[name] = member
        # what its surroundings make of some of them (and of links whose signature is
        # ``served_by_far_side``, which have no port here)
        if hasattr(unit, "far_members"):
            members |= unit.far_members()
        super().__init__(members)

    @property
    def unit(self):
        return self._unit

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = unit = self._unit
        ends = far_ends(m, unit, crossing_names(unit), prefix="far")
        if hasattr(unit, "far_side"):  # what the unit's surroundings add to its far halves
            ends = unit.far_side(m, ends)
        # this component's ports: a far half's stream (or what ``far_side`` made of it), or
        # the unit's own port
        for name, member in self.signature.members.items():
            port = getattr(self, name)
            if name in ends:
                if member.flow is wiring.In:
                    wiring.connect(m, wiring.flipped(port), ends[name])
                else:
                    wiring.connect(m, ends[name], wiring.flipped(port))
            elif member.flow is wiring.In:
                m.d.comb += getattr(unit, name).eq(port)
            else:
                m.d.comb += port.eq(getattr(unit, name))
        return m
