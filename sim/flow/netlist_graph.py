"""A mapped UltraScale+ netlist as a timing graph (:class:`NetlistGraph`): where paths start
and end, the combinational cells between, and each net's deepest arrival, by the rules of
:mod:`heteroreason.sim.flow.logic_depth` (which reports the deepest paths)."""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["CARRY_BITS_PER_LEVEL", "NetlistGraph", "levels"]

CARRY_BITS_PER_LEVEL = 8


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


def levels(entry: tuple) -> int:
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


class NetlistGraph:
    """A module's timing graph: where paths start (registers, ports, registered blocks), the
    combinational cells between (LUTs, carries, unregistered DSPs), where paths end, and each
    net's deepest arrival."""

    def __init__(self, module: Mapping):
        self.module = module
        self.names = _bit_names(module)
        # arrival[bit] = (luts, carry bits, 1 if it starts off a flip-flop, start bit, start
        # cell type, through an unregistered DSP)
        self.sources: dict[int, tuple] = {}
        self.comb: dict[int, tuple[str, list[int], str]] = {}  # out bit -> (kind, ins, type)
        self.endpoints: list[tuple[int, int, str, str]] = []  # (bit, extra, type, name bit)
        self.longest_chain: dict[int, int] = {}
        self.carry_in: dict[int, list[int]] = {}
        self.counts = {"dsp": 0, "bare_dsp": 0, "lutram": 0}
        self.chain_memo: dict[int, int] = {}
        # a net no register or port drives (a constant, or logic of constants) starts no path
        self.arrival: dict[int, tuple | None] = {}
        for port in module.get("ports", {}).values():
            for bit in port["bits"]:
                if isinstance(bit, int):
                    if port["direction"] == "input":
                        self.sources[bit] = (0, 0, 0, bit, "port", False)
                    else:
                        self.endpoints.append((bit, 0, "port", bit))
        self._find_loads()
        for cell in module.get("cells", {}).values():
            self._add_cell(cell)

    def _find_loads(self) -> None:
        """The flip-flops' and shift registers' outputs, the input ports, and every net's
        loads (what a DSP's registers could be packed from)."""
        self.ff_q: set[int] = set()
        self.srl_q: set[int] = set()
        self.loads: dict[int, list[tuple[str, str]]] = {}
        for cell in self.module.get("cells", {}).values():
            directions = cell.get("port_directions", {})
            for p, bits in cell.get("connections", {}).items():
                for b in bits:
                    if not isinstance(b, int):
                        continue
                    if directions.get(p) == "input":
                        self.loads.setdefault(b, []).append((cell["type"], p))
                    elif cell["type"] in _FF_TYPES and p == "Q":
                        self.ff_q.add(b)
                    elif cell["type"].startswith("SRL") and p.startswith("Q"):
                        self.srl_q.add(b)
        self.input_ports: set[int] = set()
        for port in self.module.get("ports", {}).values():
            for b in port["bits"]:
                if not isinstance(b, int):
                    continue
                if port["direction"] == "input":
                    self.input_ports.add(b)
                else:
                    self.loads.setdefault(b, []).append(("port", ""))

    def _ends(self, conns, directions, extra: int, ctype: str, skip) -> None:
        """Every input bit of a cell but those of the ports ``skip`` accepts ends a path."""
        for p, bits in conns.items():
            if directions.get(p) == "input" and not skip(p):
                for b in bits:
                    if isinstance(b, int):
                        self.endpoints.append((b, extra, ctype, b))

    def _add_cell(self, cell: Mapping) -> None:
        ctype = cell["type"]
        kind = _kind(ctype)
        if kind == "ignore":
            return
        directions = cell.get("port_directions", {})
        conns = cell.get("connections", {})
        ins = [b for p, bits in conns.items() if directions.get(p) == "input"
               for b in bits if isinstance(b, int)]
        outs = [b for p, bits in conns.items() if directions.get(p) == "output"
                for b in bits if isinstance(b, int)]
        if kind == "ff":
            q = [b for b in conns.get("Q", []) if isinstance(b, int)]
            for bit in q:
                self.sources[bit] = (0, 0, 0, bit, ctype, False)
            for p, bits in conns.items():
                if directions.get(p) == "input" and p != "C":
                    for b in bits:
                        if isinstance(b, int):
                            self.endpoints.append((b, 0, ctype, q[0] if q else b))
        elif kind == "dsp":
            self._add_dsp(cell, ins, outs)
        elif kind == "block":
            for bit in outs:
                self.sources[bit] = (0, 0, 1, bit, ctype, False)
            self._ends(conns, directions, 1, ctype, lambda p: p.startswith("CLK"))
        elif kind == "lutram":
            self.counts["lutram"] += 1
            addr = [b for p, bits in conns.items() if directions.get(p) == "input"
                    and (p.startswith("ADDR") or (p.startswith("A") and p[1:].isdigit())
                         or p in ("A", "RADR", "DPRA"))
                    for b in bits if isinstance(b, int)]
            self._ends(conns, directions, 1, ctype, lambda p: p in ("WCLK", "CLK"))
            for bit in outs:
                # the stored word is state (a source); the read through the address is a LUT
                self.sources[bit] = (1, 0, 0, bit, ctype, False)
                self.comb[bit] = ("lut", addr, ctype)
        else:
            for bit in outs:
                self.comb[bit] = (kind, ins, ctype)
            if kind == "carry":
                width = 8 if ctype == "CARRY8" else 4
                ci = [b for p in ("CI", "CIN") for b in conns.get(p, []) if isinstance(b, int)]
                co = [b for b in conns.get("CO", []) if isinstance(b, int)]
                if co:
                    self.carry_in[co[-1]] = ci
                    self.longest_chain[co[-1]] = width

    def _add_dsp(self, cell: Mapping, ins: list[int], outs: list[int]) -> None:
        """A DSP is a path's end and start when its registers are used or could be packed
        from the flip-flops around it; otherwise it is combinational (and reported)."""
        ctype = cell["type"]
        self.counts["dsp"] += 1
        params = cell.get("parameters", {})
        registered = any(_param_int(params.get(r, 0)) for r in _DSP_REGS)
        if registered or _packable(cell.get("connections", {}), self.ff_q, self.srl_q,
                                   self.input_ports, self.loads):
            for bit in outs:
                self.sources[bit] = (0, 0, 1, bit, ctype, False)
            for bit in ins:
                self.endpoints.append((bit, 1, ctype, bit))
        else:
            self.counts["bare_dsp"] += 1
            for bit in outs:
                self.comb[bit] = ("dsp", ins, ctype)

    def chain_bits(self, bit: int) -> int:
        """The carry bits of the chain that ends at ``bit``."""
        seen, cur = [], bit
        while cur in self.longest_chain and cur not in self.chain_memo:
            seen.append(cur)
            prev = self.carry_in.get(cur, [])
            cur = prev[0] if prev else -1
        base = self.chain_memo.get(cur, 0)
        for b in reversed(seen):
            base += self.longest_chain[b]
            self.chain_memo[b] = base
        return self.chain_memo.get(bit, 0)

    def resolve(self, bit: int) -> tuple | None:
        """The deepest arrival at ``bit`` (depth first without recursion: netlists are deep)."""
        arrival, comb, sources = self.arrival, self.comb, self.sources
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
                                     f"{self.names.get(nxt, nxt)}")
                path[-1] = (cur, index)
                path.append((nxt, 0))
                in_path.add(nxt)
                continue
            arrival[cur] = self._through(cur, [arrival[b] for b in ins if arrival[b] is not None])
            path.pop()
            in_path.discard(cur)
        return arrival[bit]

    def _through(self, cur: int, driven: list[tuple]) -> tuple | None:
        """The arrival at the output ``cur`` of a combinational cell from its inputs'."""
        kind, _, ctype = self.comb[cur]
        entry = None
        if driven:
            luts, carry, extra, start, stype, bare = max(driven, key=levels)
            if kind == "lut":
                luts += 1
            elif kind == "carry":
                carry += 8 if ctype == "CARRY8" else 4
            elif kind == "dsp":
                bare = True
            entry = (luts, carry, extra, start, stype, bare)
        if cur in self.sources:  # a LUT-RAM output: its state, or the read through the address
            entry = self.sources[cur] if entry is None else \
                max(entry, self.sources[cur], key=levels)
        return entry
