"""A design synthesized for UltraScale+ with its hierarchy kept: resources per unit, the bits
between units, the largest nets by load, and whether each unit's ports are registered.

One synthesis of the whole top (``synth_xilinx -family xcup -noiopad -uram``, not flattened;
the drivers of kept signals kept, without ``xilinx_dffopt``: :mod:`.synth`)
gives every unit, the children of the top as Amaranth names them (``mvu``, ``att``, ``wbuf``,
...), its own module. Its cells, summed over its own children, are the unit's resources; the
top's own cells are the ``glue`` (sequencer, scratchpads, sinks), and so are those of its
children named :data:`GLUE_PARTS` (the far halves of the attention's crossings). The netlist,
written as BLIF with the primitives' port directions, is read twice as a stream (its size grows
with the design: no whole netlist is held in memory) for:

* the top's nets between units: for each set of units a net joins, its bits, its driver and
  which ends are not flip-flops (the floorplan prices what crosses an SLR boundary, and what
  crosses unregistered, from these);
* each net's loads, flattened: a load inside a child counts as the child's loads of that port
  (a unit's ready signal that reaches 3,584 lanes counts 3,584, not 1); the clock, which a
  global buffer drives, is left out;
* each unit's ports: how many bits arrive straight into flip-flops' D inputs and leave straight
  from flip-flops' Q outputs (a crossing registered on both sides needs both).

What this is not: Yosys's mapping, not Vivado's (Yosys leaves the DSP slices' A/B/M/P registers
as flip-flops, so its flip-flop count is an upper bound); no placement, no routing.
"""

from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from heteroreason.sim.flow.blif_netlist import CONSTANTS as _CONSTANTS
from heteroreason.sim.flow.blif_netlist import NetlistModule
from heteroreason.sim.flow.blif_netlist import read_modules as _modules
from heteroreason.sim.flow.blif_netlist import read_ports as _ports
from heteroreason.sim.flow.synth import (
    KEEP_DRIVERS,
    SynthesizedResources,
    read_stat_json,
    summarize_cells,
    xcup_without_dffopt,
)

__all__ = ["FIT_TIMEOUT_S", "GLUE", "GLUE_PARTS", "PORTS", "SPLIT_UNITS", "HierarchySynthesis",
           "Link", "NetLoad", "PortRegistration", "read_hierarchy", "synthesize_hierarchy"]

# a full-width core takes Yosys over two hours of one core when another synthesis shares the
# machine's two (the U280 design, 2026-12-06); a limit only for a run that never ends
FIT_TIMEOUT_S = 6 * 3600
GLUE = "glue"    # the top's own cells
PORTS = "ports"  # the top's ports (the memory, the host)
# children of a unit that are units of their own (a floorplan may place them in another SLR):
# the attention's datapath after the division (``att.pv``: the probabilities, the value
# products, the accumulators and the output requantizers)
SPLIT_UNITS = {"att": ("pv",)}
# children of the top that are the glue's own (the far halves of a unit's crossings, which
# stand beside the glue's logic: :func:`heteroreason.rtl.decoder.crossing.far_ends`)
GLUE_PARTS = "xing_"
_FF = ("FDRE", "FDSE", "FDCE", "FDPE")
_BIT = re.compile(r"^(.*)\[(\d+)\]$")


@dataclass(frozen=True)
class NetLoad:
    """A net of the flattened design and its loads (the module it is named in)."""

    module: str
    net: str
    loads: int
    driver: str  # the driving cell's type, or "input" for a module's port


@dataclass(frozen=True)
class Link:
    """A kind of net of the top: the units it joins (GLUE and PORTS among them), the one
    that drives it, whether that driver is a flip-flop, and the units whose loads on it are
    not all flip-flops' D inputs (a crossing is registered on both sides when its driver is
    and no unit across the boundary is among these)."""

    units: frozenset
    driver: str
    driver_registered: bool
    unregistered_loads: frozenset


@dataclass(frozen=True)
class PortRegistration:
    """A unit's port bits: how many of its inputs go only into flip-flops' D inputs and how
    many of its outputs come straight from a flip-flop."""

    inputs: int
    registered_inputs: int
    outputs: int
    registered_outputs: int


@dataclass(frozen=True)
class HierarchySynthesis:
    """What :func:`synthesize_hierarchy` measured of one top."""

    top: str
    units: Mapping[str, SynthesizedResources]
    total: SynthesizedResources
    links: Mapping[Link, int]  # the bits of each kind of net between units
    largest_nets: tuple[NetLoad, ...]
    registration: Mapping[str, PortRegistration]


def synthesize_hierarchy(rtlil_file: Path, top: str, *, yosys: str = "yosys",
                         timeout_s: float = FIT_TIMEOUT_S, keep: int = 20) -> HierarchySynthesis:
    """Synthesize ``rtlil_file`` (Amaranth's RTLIL of ``top``) with the native ``yosys`` and
    read it back (``keep``: how many of the largest nets to report)."""
    rtlil_file = Path(rtlil_file).resolve()
    work = rtlil_file.parent
    script = (f"read_rtlil {rtlil_file.name}; proc; {KEEP_DRIVERS}; "
              f"{xcup_without_dffopt(f'-noiopad -uram -top {top}')}; "
              f"tee -q -o {top}.stat.json stat -json; write_blif -blackbox -conn {top}.blif")
    try:
        proc = subprocess.run([yosys, "-q", "-p", script], cwd=work, capture_output=True,
                              text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{yosys} did not finish {rtlil_file.name} within "
                           f"{timeout_s:g} s") from None
    except OSError as exc:
        raise RuntimeError(f"cannot run {yosys}: {exc}") from None
    if proc.returncode != 0:
        raise RuntimeError(f"{yosys} failed on {rtlil_file.name}:\n"
                           f"{(proc.stdout + proc.stderr)[-3000:]}")
    return read_hierarchy(work / f"{top}.stat.json", work / f"{top}.blif", top, keep=keep)


def _stat_modules(stat_file: Path) -> dict[str, dict[str, int]]:
    """Each module's own cells by type from Yosys's ``stat -json`` (Yosys 0.23 prints the
    hierarchy's lines into the JSON; they are left out)."""
    modules = read_stat_json(stat_file)["modules"]
    return {name.lstrip("\\"): dict(m["num_cells_by_type"]) for name, m in modules.items()}


def _unit_resources(modules: Mapping[str, Mapping[str, int]], top: str
                    ) -> tuple[dict[str, SynthesizedResources], SynthesizedResources]:
    def flat(name: str) -> dict[str, int]:
        cells: dict[str, int] = defaultdict(int)
        for cell, n in modules[name].items():
            if cell in modules:
                for c, m in flat(cell).items():
                    cells[c] += n * m
            else:
                cells[cell] += n
        return cells

    own: dict[str, int] = defaultdict(int)
    for c, n in modules[top].items():
        parts = flat(c) if c in modules and _glue_part(c, top) else \
            ({} if c in modules else {c: 1})
        for cell, k in parts.items():
            own[cell] += n * k
    units = {GLUE: summarize_cells(own)}
    for child in modules[top]:
        if child in modules and not _glue_part(child, top):
            name = child.removeprefix(top + ".")
            cells = flat(child)
            for part in SPLIT_UNITS.get(name, ()):
                if f"{child}.{part}" in modules[child]:
                    inner = flat(f"{child}.{part}")
                    units[f"{name}.{part}"] = summarize_cells(inner)
                    cells = {c: n - inner.get(c, 0) for c, n in cells.items()}
            units[name] = summarize_cells(cells)
    return units, summarize_cells(flat(top))


def _glue_part(child: str, top: str) -> bool:
    """Whether the top's child module ``child`` is the glue's own (:data:`GLUE_PARTS`)."""
    return child.removeprefix(top + ".").startswith(GLUE_PARTS)


def _only_flip_flops(modules, kind: str, pin: str) -> bool:
    """Whether every load behind ``kind``'s input ``pin`` is a flip-flop's D input."""
    if kind not in modules:
        return kind in _FF and pin == "D"
    child = modules[kind]
    loads = child.loads.get(child.find(pin), [])
    return bool(loads) and all(_only_flip_flops(modules, k, p) for k, p in loads)


def _from_flip_flop(modules, kind: str, pin: str) -> bool:
    """Whether ``kind``'s output ``pin`` comes straight from one flip-flop's Q output."""
    if kind not in modules:
        return kind in _FF and pin == "Q"
    child = modules[kind]
    drivers = child.drivers.get(child.find(pin), [])
    return len(drivers) == 1 and _from_flip_flop(modules, *drivers[0])


def _wires_through(modules, top_module):
    """The top's nets' drivers and loads with two kinds of unit pin left out: an output a
    constant drives inside the unit (each side ties its own: nothing crosses), and an output
    that is one of the unit's inputs inside (a wire through it, such as the KV rows the
    attention passes from the glue to the memory ports): its net and the input's are one net
    that never enters the unit. Returns the drivers, the loads and the nets' joining."""
    pins = {(kind, pin): net for table in (top_module.drivers, top_module.loads)
            for net, entries in table.items() for kind, pin in entries}
    joined = NetlistModule(set(), set())  # the top's nets joined through the units
    inputs_at: dict[str, dict[str, list[str]]] = {}  # a unit's inputs by their net inside
    dropped = set()
    for (kind, pin), net in pins.items():
        child = modules.get(kind)
        if child is None or pin not in child.outputs:
            continue
        root = child.find(pin)
        if root in _CONSTANTS:
            dropped.add((kind, pin))
            continue
        if kind not in inputs_at:
            inputs_at[kind] = defaultdict(list)
            for other in child.inputs:
                inputs_at[kind][child.find(other)].append(other)
        for other in inputs_at[kind].get(root, ()):
            if (kind, other) in pins:
                dropped |= {(kind, pin), (kind, other)}
                joined.join(net, pins[kind, other])
    tables: tuple[dict[str, list], dict[str, list]] = (defaultdict(list), defaultdict(list))
    for table, merged in zip((top_module.drivers, top_module.loads), tables, strict=True):
        for net, entries in table.items():
            merged[joined.find(net)].extend(e for e in entries if e not in dropped)
    return (*tables, joined.find)


def _links(modules, top: str) -> dict[Link, int]:
    """The top's nets between units (:class:`Link`), a split unit's followed inside; a wire
    through a unit and a constant are no link (:func:`_wires_through`)."""
    prefix = top + "."
    top_module = modules[top]
    links: dict[Link, int] = defaultdict(int)
    top_drivers, top_loads, joined = _wires_through(modules, top_module)
    nets = {n for n in set(top_drivers) | set(top_loads) if n not in _CONSTANTS}
    top_ports = {joined(top_module.find(p)) for p in top_module.inputs | top_module.outputs}

    # a split unit's pins are its own cells' and its parts' (each part a unit): a top net on
    # its port is followed inside, and its nets between its own cells and a part are links
    split = {prefix + u: {f"{prefix}{u}.{part}": f"{u}.{part}" for part in parts
                          if f"{prefix}{u}.{part}" in modules}
             for u, parts in SPLIT_UNITS.items() if prefix + u in modules}

    def end(kind: str, within: str | None = None) -> str:
        if within is not None:
            return split[within].get(kind, within.removeprefix(prefix))
        return kind.removeprefix(prefix) if kind in modules and not _glue_part(kind, top) \
            else GLUE

    def followed(pins, table: str):
        """``(end, kind, pin)`` of a top net's drivers (``table`` "drivers") or loads: a split
        unit's port followed inside to its own cells' and its parts' pins."""
        out = []
        for kind, pin in pins:
            if kind in split:
                child = modules[kind]
                inner = getattr(child, table).get(child.find(pin), [])
                out += [(end(k, kind), k, p) for k, p in inner]
            else:
                out.append((end(kind), kind, pin))
        return out

    def add(drivers, loads, port: bool) -> None:
        if any(k.startswith("BUFG") for _, k, _ in drivers + loads):
            return  # the clock, into or out of its global buffer: no SLL carries it
        ends = {e for e, _, _ in drivers + loads}
        if port:
            ends.add(PORTS)
        if len(ends) < 2:
            return
        # the driving side: a top input is the memory's or the host's (registered outside)
        driver = drivers[0][0] if drivers else PORTS
        driver_registered = not drivers or all(_from_flip_flop(modules, k, p)
                                               for _, k, p in drivers)
        unregistered = frozenset(e for e, k, p in loads if not _only_flip_flops(modules, k, p))
        links[Link(frozenset(ends), driver, driver_registered, unregistered)] += 1

    for net in nets:
        add(followed(top_drivers.get(net, []), "drivers"),
            followed(top_loads.get(net, []), "loads"), net in top_ports)
    for kind in split:  # a split unit's own nets between its cells and its parts
        child = modules[kind]
        own_ports = {child.find(p) for p in child.inputs | child.outputs}
        for net in set(child.drivers) | set(child.loads):
            if net in own_ports:
                continue  # followed from the top
            drivers = [(end(k, kind), k, p) for k, p in child.drivers.get(net, [])]
            loads = [(end(k, kind), k, p) for k, p in child.loads.get(net, [])]
            add(drivers, loads, False)

    return dict(links)


def read_hierarchy(stat_file: Path, blif: Path, top: str, *, keep: int = 20
                   ) -> HierarchySynthesis:
    """:class:`HierarchySynthesis` of a synthesized ``top`` from its ``stat -json`` and its
    ``write_blif -blackbox -conn`` output."""
    units, total = _unit_resources(_stat_modules(stat_file), top)
    ports = _ports(blif)
    modules = _modules(blif, ports)
    fanout: dict[tuple[str, str], int] = {}

    def pin_loads(kind: str, pin: str) -> int:
        """Loads behind a child's input pin, flattened (a primitive's pin is one)."""
        if kind not in modules:
            return 1
        key = (kind, pin)
        if key not in fanout:
            child = modules[kind]
            fanout[key] = sum(pin_loads(k, p) for k, p in child.loads.get(child.find(pin), []))
        return fanout[key]

    def only_flip_flops(kind: str, pin: str) -> bool:
        return _only_flip_flops(modules, kind, pin)

    def from_flip_flop(kind: str, pin: str) -> bool:
        return _from_flip_flop(modules, kind, pin)

    largest: list[NetLoad] = []
    for name, module in modules.items():
        clocks = {module.find(p) for p in module.inputs if p == "clk"}
        for net, pins in module.loads.items():
            if net in clocks or any(k.startswith("BUFG") for k, _ in module.drivers.get(net, [])):
                continue  # a clock: a global buffer's, not a routed net's, fanout
            n = sum(pin_loads(k, p) for k, p in pins)
            drivers = module.drivers.get(net, [])
            largest.append(NetLoad(name, net, n, drivers[0][0] if drivers else "input"))
        largest.sort(key=lambda x: (-x.loads, x.module, x.net))
        del largest[keep:]

    prefix = top + "."
    links = _links(modules, top)

    registration = {}
    for unit in units:
        if unit == GLUE:
            continue
        kind = prefix + unit
        if kind not in ports:
            continue
        ins, outs, _ = ports[kind]
        ins = {p for p in ins if p not in ("clk", "rst")}
        registration[unit] = PortRegistration(
            len(ins), sum(only_flip_flops(kind, p) for p in ins),
            len(outs), sum(from_flip_flop(kind, p) for p in outs))
    return HierarchySynthesis(top, units, total, links, tuple(largest), registration)
