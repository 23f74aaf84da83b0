"""A top whose reset reaches its registers through a tree of kept copies (:class:`ResetTree`).

Amaranth's ``sync`` domain resets every register from one net, the top's ``rst``: 4,034 loads
in the U280 design's synthesis, twice the project's fanout bound
(:data:`~heteroreason.rtl.decoder.pipeline.MAX_FANOUT`). A :class:`ResetTree` around a top
takes ``rst`` as an ordinary input and registers it into copies, each in the module whose
registers it resets and each resetting at most
:data:`~heteroreason.rtl.decoder.pipeline.GROUP_BITS` register bits; the domain itself has no
reset. ``rst`` then drives only the copies, and each copy a group of flip-flops' synchronous
resets.
"""

from __future__ import annotations

from amaranth.hdl import ClockDomain, ClockSignal, Const, Fragment, Module, Signal
from amaranth.hdl._xfrm import LHSMaskCollector  # ResetInserter's own (Amaranth 0.5)
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from heteroreason.rtl.decoder.pipeline import GROUP_BITS, KEEP

__all__ = ["RESET_LATENCY", "ResetTree"]

# cycles from ``rst`` to the registers it resets: the copy's register
RESET_LATENCY = 1


def _reset_chunks(fragment: Fragment) -> list[tuple[Signal, int, int]]:
    """The register bits of ``fragment``'s own ``sync`` statements that have a reset (not its
    submodules'), as (signal, start, stop) runs of the bits those statements assign (another
    module or domain may drive a register's other bits), none longer than GROUP_BITS."""
    collector = LHSMaskCollector()
    collector.visit_stmt(fragment.statements.get("sync", []))
    chunks = []
    for signal, start, stop in collector.chunks():
        stop = len(signal) if stop is None else stop
        if not signal.reset_less:  # a register wider than a group: a run a group
            chunks += [(signal, a, min(a + GROUP_BITS, stop))
                       for a in range(start, stop, GROUP_BITS)]
    return chunks


def _insert(fragment: Fragment, rst: Signal, copies: list[int]) -> None:
    """Give ``fragment`` and its submodules their reset copies (in place): the registers of a
    module in groups of at most GROUP_BITS bits, a copy of ``rst`` for each group, registered
    in that module. ``copies`` collects each copy's register bits."""
    for sub, _name, _src_loc in fragment.subfragments:
        _insert(sub, rst, copies)
    groups, bits = [], GROUP_BITS
    for chunk in _reset_chunks(fragment):
        width = chunk[2] - chunk[1]
        if bits + width > GROUP_BITS and bits > 0:
            groups.append([])
            bits = 0
        groups[-1].append(chunk)
        bits += width
    if not groups:
        return
    m = Module()
    for k, group in enumerate(groups):
        copy = Signal(name=f"rst_copy{k}", init=1, reset_less=True, attrs=KEEP)
        m.d.sync += copy.eq(rst)
        with m.If(copy):
            m.d.sync += [s[a:b].eq(Const(s.init, s.shape())[a:b]) for s, a, b in group]
        copies.append(sum(b - a for _, a, b in group))
    # appended after the module's own statements: the reset wins over their assignments
    fragment.add_statements("sync", *Fragment.get(m, None).statements["sync"])


class ResetTree(wiring.Component):
    """``top`` with a replicated synchronous reset: the same ports, plus ``clk`` and ``rst``
    (those of Amaranth's own ``sync`` domain, now members).

    Parameters
    ----------
    top : wiring.Component
        The component wrapped (not yet elaborated). Its ports are this component's; it must
        not have a member named ``clk`` or ``rst``, nor define the ``sync`` domain.

    Members
    -------
    clk : In(1)
        The ``sync`` domain's clock.
    rst : In(1)
        The reset: while it is high, every register with a reset is held at its initial value,
        :data:`RESET_LATENCY` cycle later. The copies start high, so the design also comes out
        of configuration in reset until ``rst`` has been low for a cycle.

    Latency
    -------
    The reset takes effect :data:`RESET_LATENCY` cycle after ``rst``, and ends as late.
    """

    def __init__(self, top: wiring.Component):
        if not isinstance(top, wiring.Component):
            raise TypeError(f"top must be a wiring.Component, not {top!r}")
        members = dict(top.signature.members.items())
        for name in ("clk", "rst"):
            if name in members:
                raise ValueError(f"top {type(top).__name__} already has a member named "
                                 f"{name!r}")
        self._top = top
        self._copies: list[int] = []
        super().__init__(wiring.Signature({**members, "clk": In(1), "rst": In(1)}))
        for name in members:  # the top's own port objects: its module is this one's
            setattr(self, name, getattr(top, name))

    @property
    def top(self) -> wiring.Component:
        return self._top

    @property
    def copy_bits(self) -> tuple[int, ...]:
        """The register bits each reset copy resets (known once elaborated)."""
        return tuple(self._copies)

    def elaborate(self, platform):
        fragment = Fragment.get(self._top, platform)
        if "sync" in fragment.domains:
            raise ValueError(f"top {type(self._top).__name__} defines the sync domain itself")
        self._copies.clear()
        _insert(fragment, self.rst, self._copies)
        # the domain is this top's own (so it has no reset), its clock the ``clk`` port
        fragment.add_domains(ClockDomain("sync", reset_less=True))
        fragment.add_statements("comb", ClockSignal("sync").eq(self.clk))
        return fragment
