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


CARRY_BITS_PER_LEVEL = 8
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


_FF_TYPES = {"FDRE", "FDSE", "FDCE", "FDPE", "LDCE", "LDPE"}
_IGNORED = {"BUFG", "BUFGCE", "GND", "VCC", "IBUF", "OBUF", "$scopeinfo"}
_DSP_REGS = ("AREG", "BREG", "MREG", "PREG")
_DSP_DATA_INPUTS = ("A", "B", "C", "D")


def _kind(cell_type: str) -> str:
    if cell_type in _FF_TYPES:
        return "ff"
    if cell_type.startswith("LUT") or cell_type == "INV":
        return "lut"
    if cell_type in ("CARRY4", "CARRY8"):
        return "carry"
    if cell_type.startswith("MUXF"):
        return "mux"
    if cell_type.startswith("DSP48"):
        return "dsp"
    if cell_type.startswith(("RAMB", "URAM", "FIFO")):
        return "block"
    if cell_type.startswith(("RAM", "SRL")):
        return "lutram"
    if cell_type in _IGNORED:
        return "ignore"
    raise ValueError(f"logic depth: no timing rule for cell type {cell_type!r}")


def _levels(entry: tuple) -> int:
    luts, carry, extra = entry[:3]
    return luts + math.ceil(carry / CARRY_BITS_PER_LEVEL) + extra


def _packable(conns: Mapping, ff_q: set[int], srl_q: set[int], input_ports: set[int],
              loads: Mapping) -> bool:
    """A DSP whose data inputs all come straight from flip-flops (or the last stage of a shift
    register, which Vivado pulls out into one) and whose product goes straight into flip-flops:
    Vivado packs those into its A/B and M/P registers (Yosys maps DSP48E2 without packing
    them)."""
    inputs_registered = all(not isinstance(b, int) or b in ff_q or b in srl_q or b in input_ports
                            for p in _DSP_DATA_INPUTS for b in conns.get(p, []))
    outputs_registered = all((t in _FF_TYPES or t.startswith("SRL")) and port == "D"
                             for b in conns.get("P", []) if isinstance(b, int)
                             for t, port in loads.get(b, []))
    return inputs_registered and outputs_registered


def _param_int(value) -> int:
    return int(value, 2) if isinstance(value, str) else int(value)


def _bit_names(module: Mapping) -> dict[int, str]:
    names: dict[int, str] = {}
    for name, net in sorted(module.get("netnames", {}).items(),
                            key=lambda item: (item[0].startswith("$"), item[0])):
        bits = net["bits"]
        for index, bit in enumerate(bits):
            if isinstance(bit, int) and bit not in names:
                names[bit] = name if len(bits) == 1 else f"{name}[{index}]"
    return names


def netlist_depth(netlist: Mapping, top: str) -> DepthReport:
    """The deepest register-to-register path of module ``top`` in a Yosys JSON netlist
    (``write_json`` after ``synth_xilinx``, flattened)."""
    modules = netlist.get("modules", {})
    if top not in modules:
        raise ValueError(f"logic depth: module {top!r} is not in the netlist "
                         f"(it has {', '.join(sorted(modules)) or 'none'})")
    module = modules[top]
    names = _bit_names(module)
    # arrival[bit] = (luts, carry bits, 1 if it starts off a flip-flop, start bit, start cell
    # type, through an unregistered DSP)
    sources: dict[int, tuple] = {}
    comb: dict[int, tuple[str, list[int], str]] = {}  # out bit -> (kind, inputs, type)
    endpoints: list[tuple[int, int, str, str]] = []  # (bit, extra level, type, name bit)
    longest_chain: dict[int, int] = {}
    carry_in: dict[int, list[int]] = {}
    counts = {"dsp": 0, "bare_dsp": 0, "lutram": 0}

    for port in module.get("ports", {}).values():
        for bit in port["bits"]:
            if isinstance(bit, int):
                if port["direction"] == "input":
                    sources[bit] = (0, 0, 0, bit, "port", False)
                else:
                    endpoints.append((bit, 0, "port", bit))

    ff_q: set[int] = set()
    srl_q: set[int] = set()
    loads: dict[int, list[tuple[str, str]]] = {}
    for cell in module.get("cells", {}).values():
        directions = cell.get("port_directions", {})
        for p, bits in cell.get("connections", {}).items():
            for b in bits:
                if not isinstance(b, int):
                    continue
                if directions.get(p) == "input":
                    loads.setdefault(b, []).append((cell["type"], p))
                elif cell["type"] in _FF_TYPES and p == "Q":
                    ff_q.add(b)
                elif cell["type"].startswith("SRL") and p.startswith("Q"):
                    srl_q.add(b)
    input_ports: set[int] = set()
    for port in module.get("ports", {}).values():
        for b in port["bits"]:
            if not isinstance(b, int):
                continue
            if port["direction"] == "input":
                input_ports.add(b)
            else:
                loads.setdefault(b, []).append(("port", ""))

    for cell in module.get("cells", {}).values():
        ctype = cell["type"]
        kind = _kind(ctype)
        if kind == "ignore":
            continue
        directions = cell.get("port_directions", {})
        conns = cell.get("connections", {})
        ins = [b for p, bits in conns.items() if directions.get(p) == "input"
               for b in bits if isinstance(b, int)]
        outs = [b for p, bits in conns.items() if directions.get(p) == "output"
                for b in bits if isinstance(b, int)]
        if kind == "ff":
            q = [b for b in conns.get("Q", []) if isinstance(b, int)]
            for bit in q:
                sources[bit] = (0, 0, 0, bit, ctype, False)
            for p, bits in conns.items():
                if directions.get(p) == "input" and p != "C":
                    for b in bits:
                        if isinstance(b, int):
                            endpoints.append((b, 0, ctype, q[0] if q else b))
        elif kind == "dsp":
            counts["dsp"] += 1
            params = cell.get("parameters", {})
            registered = any(_param_int(params.get(r, 0)) for r in _DSP_REGS)
            if registered or _packable(conns, ff_q, srl_q, input_ports, loads):
                for bit in outs:
                    sources[bit] = (0, 0, 1, bit, ctype, False)
                for bit in ins:
                    endpoints.append((bit, 1, ctype, bit))
            else:
                counts["bare_dsp"] += 1
                for bit in outs:
                    comb[bit] = ("dsp", ins, ctype)
        elif kind == "block":
            for bit in outs:
                sources[bit] = (0, 0, 1, bit, ctype, False)
            for p, bits in conns.items():
                if directions.get(p) == "input" and not p.startswith("CLK"):
                    for b in bits:
                        if isinstance(b, int):
                            endpoints.append((b, 1, ctype, b))
        elif kind == "lutram":
            counts["lutram"] += 1
            addr = [b for p, bits in conns.items() if directions.get(p) == "input"
                    and (p.startswith("ADDR") or (p.startswith("A") and p[1:].isdigit())
                         or p in ("A", "RADR", "DPRA"))
                    for b in bits if isinstance(b, int)]
            for p, bits in conns.items():
                if directions.get(p) == "input" and p not in ("WCLK", "CLK"):
                    for b in bits:
                        if isinstance(b, int):
                            endpoints.append((b, 1, ctype, b))
            for bit in outs:
                # the stored word is state (a source); the read through the address is a LUT
                sources[bit] = (1, 0, 0, bit, ctype, False)
                comb[bit] = ("lut", addr, ctype)
        else:
            for bit in outs:
                comb[bit] = (kind, ins, ctype)
            if kind == "carry":
                width = 8 if ctype == "CARRY8" else 4
                ci = [b for p in ("CI", "CIN") for b in conns.get(p, []) if isinstance(b, int)]
                co = [b for b in conns.get("CO", []) if isinstance(b, int)]
                if co:
                    carry_in[co[-1]] = ci
                    longest_chain[co[-1]] = width

    chain_memo: dict[int, int] = {}

    def chain_bits(bit: int) -> int:
        seen, cur = [], bit
        while cur in longest_chain and cur not in chain_memo:
            seen.append(cur)
            prev = carry_in.get(cur, [])
            cur = prev[0] if prev else -1
        base = chain_memo.get(cur, 0)
        for b in reversed(seen):
            base += longest_chain[b]
            chain_memo[b] = base
        return chain_memo.get(bit, 0)

    # a net no register or port drives (a constant, or logic of constants) starts no path
    arrival: dict[int, tuple | None] = {}

    def resolve(bit: int) -> tuple:
        if bit in arrival:
            return arrival[bit]
        path = [(bit, 0)]
        in_path = {bit}
        while path:
            cur, index = path[-1]
            if cur not in comb:
                arrival[cur] = sources.get(cur)
                path.pop()
                in_path.discard(cur)
                continue
            ins = comb[cur][1]
            while index < len(ins) and ins[index] in arrival:
                index += 1
            if index < len(ins):
                nxt = ins[index]
                if nxt in in_path:
                    raise ValueError(f"logic depth: combinational loop through "
                                     f"{names.get(nxt, nxt)}")
                path[-1] = (cur, index)
                path.append((nxt, 0))
                in_path.add(nxt)
                continue
            kind, _, ctype = comb[cur]
            driven = [arrival[b] for b in ins if arrival[b] is not None]
            entry = None
            if driven:
                luts, carry, extra, start, stype, bare = max(driven, key=_levels)
                if kind == "lut":
                    luts += 1
                elif kind == "carry":
                    carry += 8 if ctype == "CARRY8" else 4
                elif kind == "dsp":
                    bare = True
                entry = (luts, carry, extra, start, stype, bare)
            if cur in sources:  # a LUT-RAM output: its state, or the read through the address
                entry = sources[cur] if entry is None else max(entry, sources[cur], key=_levels)
            arrival[cur] = entry
            path.pop()
            in_path.discard(cur)
        return arrival[bit]

    worst = None
    per_signal: dict[str, tuple] = {}  # end signal (bits together) -> its deepest path
    for bit, end_extra, etype, name_bit in endpoints:
        entry = resolve(bit)
        if entry is None:
            continue
        total = _levels(entry) + end_extra
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
        longest_carry_bits=max((chain_bits(b) for b in longest_chain), default=0),
        unregistered_dsps=counts["bare_dsp"], dsps=counts["dsp"],
        lutram_cells=counts["lutram"], cells=len(module.get("cells", {})), deepest=deepest,
    )
