"""Logic depth of a mapped UltraScale+ netlist: the most LUT levels and carry bits between two
registers, read from Yosys's JSON netlist after ``synth_xilinx -family xcup``.

The budget follows Xilinx's ``report_failfast`` (XilinxTclStore,
``tclapp/xilinx/designutils/report_failfast.tcl``, "LUT budgeting"): a path may hold
``floor(period / t_lut)`` LUTs, with ``t_lut`` 0.350 / 0.300 / 0.250 ns for UltraScale+ speed
grades -1 / -2 / -3 (a LUT and its net), and a path that starts or ends on anything but a
flip-flop (a DSP, a block RAM, a LUT-RAM write) counts one level more at each such end.

Carry chains are not in that rule; this project counts every 8 carry bits a path runs through
(one CARRY8, two CARRY4) as one more level. That is an assumption, chosen to overstate: a CARRY8
propagates in far less time than a LUT and its net. A multiply is acceptable only inside a
DSP48E2 that uses its pipeline registers. Yosys maps DSP48E2 without packing registers into it,
so a DSP counts as registered when its data inputs come straight from flip-flops and its product
goes straight into flip-flops or shift registers (what Vivado packs into AREG/BREG and
MREG/PREG); a path through any other DSP is reported on its own, whatever its levels.

Top-level ports count as flip-flops (the block sits inside a design that registers them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from heteroreason.sim.flow.netlist_graph import NetlistGraph, levels

__all__ = [
    "LUT_NS_ULTRASCALE_PLUS",
    "DepthReport",
    "PathEnd",
    "PathSummary",
    "lut_budget",
    "netlist_depth",
]

# ns per LUT and its net that Xilinx's report_failfast budgets on UltraScale+ by speed grade
# (XilinxTclStore, tclapp/xilinx/designutils/report_failfast.tcl, "LUT budgeting")
LUT_NS_ULTRASCALE_PLUS = {1: 0.350, 2: 0.300, 3: 0.250}


def lut_budget(clock_hz: float, *, speed_grade: int = 2) -> int:
    """Most logic levels a register-to-register path may hold at ``clock_hz`` on an
    UltraScale+ of ``speed_grade`` (1, 2 or 3, i.e. -1/-2/-3): ``floor(period / t_LUT)``."""
    if speed_grade not in LUT_NS_ULTRASCALE_PLUS:
        raise ValueError(f"UltraScale+ speed grade must be one of "
                         f"{', '.join(f'-{g}' for g in LUT_NS_ULTRASCALE_PLUS)}, "
                         f"not -{speed_grade}")
    if not clock_hz > 0:
        raise ValueError(f"clock must be positive, not {clock_hz!r} Hz")
    return math.floor(1e9 / clock_hz / LUT_NS_ULTRASCALE_PLUS[speed_grade] + 1e-9)


DEEPEST_KEPT = 12


@dataclass(frozen=True)
class PathEnd:
    """One end of a path: the signal (its HDL name and bit) and the kind of cell there."""

    signal: str
    cell_type: str

    def __str__(self) -> str:
        return f"{self.signal} ({self.cell_type})"


@dataclass(frozen=True)
class PathSummary:
    """One register's deepest incoming path (see :attr:`DepthReport.deepest`)."""

    levels: int
    start: PathEnd
    end: PathEnd

    def __str__(self) -> str:
        return f"{self.levels:>3}  {self.start} -> {self.end}"


@dataclass(frozen=True)
class DepthReport:
    """The deepest path of a netlist and what the netlist holds.

    ``levels`` is the budgeted figure: LUTs + carry levels (``ceil(carry_bits / 8)``) + one per
    end that is not a flip-flop. ``longest_carry_bits`` is the longest single carry chain.
    ``deepest`` lists the deepest path into each of the :data:`DEEPEST_KEPT` deepest end
    signals (a signal's bits together), deepest first: the places a pipeline needs work.
    """

    levels: int
    lut_levels: int
    carry_bits: int
    start: PathEnd
    end: PathEnd
    longest_carry_bits: int
    unregistered_dsps: int
    dsps: int
    lutram_cells: int
    cells: int
    deepest: tuple[PathSummary, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping) -> DepthReport:
        """The report from :func:`dataclasses.asdict`'s form (a cache file)."""
        return cls(**(dict(data) | {
            "start": PathEnd(**data["start"]), "end": PathEnd(**data["end"]),
            "deepest": tuple(PathSummary(p["levels"], PathEnd(**p["start"]),
                                         PathEnd(**p["end"])) for p in data["deepest"])}))

    def within(self, budget: int) -> bool:
        return self.levels <= budget and self.unregistered_dsps == 0


def netlist_depth(netlist: Mapping, top: str) -> DepthReport:
    """The deepest register-to-register path of module ``top`` in a Yosys JSON netlist
    (``write_json`` after ``synth_xilinx``, flattened)."""
    modules = netlist.get("modules", {})
    if top not in modules:
        raise ValueError(f"logic depth: module {top!r} is not in the netlist "
                         f"(it has {', '.join(sorted(modules)) or 'none'})")
    graph = NetlistGraph(modules[top])
    names = graph.names
    worst = None
    per_signal: dict[str, tuple] = {}  # end signal (bits together) -> its deepest path
    for bit, end_extra, etype, name_bit in graph.endpoints:
        entry = graph.resolve(bit)
        if entry is None:
            continue
        total = levels(entry) + end_extra
        found = (total, entry[0], entry[1], entry[3], entry[4], etype, name_bit)
        if worst is None or total > worst[0]:
            worst = found
        signal = names.get(name_bit, f"bit {name_bit}").rsplit("[", 1)[0]
        if signal.startswith("$") or signal.startswith("bit "):  # a name Yosys made up
            signal = f"{names.get(entry[3], entry[3])} -> {etype}"
        if signal not in per_signal or total > per_signal[signal][0]:
            per_signal[signal] = found
    if worst is None:
        raise ValueError(f"logic depth: module {top!r} has no paths")
    deepest = tuple(
        PathSummary(p[0], PathEnd(names.get(p[3], f"bit {p[3]}"), p[4]),
                    PathEnd(names.get(p[6], f"bit {p[6]}"), p[5]))
        for p in sorted(per_signal.values(), key=lambda p: (-p[0], str(p[6])))[:DEEPEST_KEPT])
    total, luts, carry, start, stype, etype, name_bit = worst
    return DepthReport(
        levels=total, lut_levels=luts, carry_bits=carry,
        start=PathEnd(names.get(start, f"bit {start}"), stype),
        end=PathEnd(names.get(name_bit, f"bit {name_bit}"), etype),
        longest_carry_bits=max((graph.chain_bits(b) for b in graph.longest_chain), default=0),
        unregistered_dsps=graph.counts["bare_dsp"], dsps=graph.counts["dsp"],
        lutram_cells=graph.counts["lutram"], cells=len(graph.module.get("cells", {})),
        deepest=deepest,
    )
