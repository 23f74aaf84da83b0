"""Packing of flip-flops into the ECP5 multipliers' own registers, on a ``synth_ecp5`` netlist.

Yosys maps a multiply to a ``MULT18X18D`` with every register left in the fabric (its
``REG_INPUTA_CLK``, ``REG_INPUTB_CLK`` and ``REG_OUTPUT_CLK`` stay ``NONE``), so a registered
multiply places as flip-flop, route, multiplier, route, flip-flop: about 3 ns in the multiplier
and 2-4 ns of routing to and from the DSP rows, which caps a design at 130-155 MHz on speed
grade 8. Lattice's own synthesis puts those registers inside the block; this pass does the same
on Yosys's JSON netlist before nextpnr reads it:

* the operands (A and B) are packed when each of their 36 pins is a constant 0 or the ``Q``
  of a plain flip-flop (no set/reset, no GSR, starting at 0; one clock and one clock enable,
  or none, for all): each pin is then driven by its flip-flop's ``D`` and the block's input
  registers take their place. Both or neither: nextpnr times a block with one registered
  operand as if neither were (the set-up to the register is then the whole multiply);
* the product is packed when every used ``P`` pin drives exactly one plain flip-flop's ``D`` and
  nothing else (one clock enable, or none, for all): the pin then drives that flip-flop's ``Q``
  net and the flip-flop goes.

The operands' registers take the block's clock enable ``CE0``, the product's ``CE1`` (each the
flip-flops' own enable, or constant 1).

An operand flip-flop fed from a block RAM or another DSP (directly or through a LUT or two)
stays in the fabric (with its twin, the other operand's): packed, it would put that block's
clock-to-output (4-4.5 ns for a ``DP16KD`` read) and the route to the multiplier into one
cycle.

Each packed group replaces one register stage by one, so every path keeps its cycle count.
Input flip-flops left without a load are removed. Flip-flops that start from a reset value or
have a set or reset are never packed (the block's registers would reset differently); the
constant-0 operand pins read 0 from the block's register too (its registers start at 0), so the
packed netlist computes what the unpacked one does from the first cycle.

nextpnr-ecp5 then times the operand pins as set-up to the block's register and the product as
its clock-to-output; the multiply between the block's registers is not a path it times (the
sysDSP's registered rate is that of the hard block, Lattice FPGA-DS-02012).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

__all__ = ["DspPacking", "pack_dsp_registers"]

_PLAIN_FF = {"CLKMUX": "CLK", "LSRMUX": "LSR", "GSR": "DISABLED", "REGSET": "RESET"}
_ALWAYS = ("1",)  # the clock enable of a flip-flop without one
# hard blocks with a long clock-to-output: a register they feed stays in the fabric beside them
# (packed into the multiplier it would move their route into the same cycle)
_HARD_BLOCKS = {"DP16KD", "PDPW16KD", "MULT18X18D", "ALU54B"}
_OPERAND_PINS = 18
_PRODUCT_PINS = 36


@dataclass(frozen=True)
class DspPacking:
    """What the pass packed: multipliers seen, operand groups (A, B) and products packed,
    flip-flops removed."""

    multipliers: int
    operands_packed: int
    products_packed: int
    flip_flops_removed: int


def _control(cell: dict) -> tuple | None:
    """``(clock, enable)`` nets of a plain flip-flop (no set/reset, no GSR, starting at 0; a
    clock enable or none), None for any other cell."""
    params = {key: str(value).strip() for key, value in cell.get("parameters", {}).items()}
    if (cell["type"] != "TRELLIS_FF"
            or any(params.get(key) != value for key, value in _PLAIN_FF.items())
            or cell["connections"].get("LSR", ["0"]) != ["0"]):
        return None
    if params.get("CEMUX") == "1":
        enable = _ALWAYS
    elif params.get("CEMUX") == "CE":
        enable = tuple(cell["connections"]["CE"])
    else:
        return None
    return tuple(cell["connections"]["CLK"]), enable


class _Nets:
    """Which cell pin drives each bit and which pins read it (module ports included)."""

    def __init__(self, module: dict):
        self.drivers: dict[int, tuple[str, str]] = {}
        self.loads: dict[int, list[tuple[str, str]]] = defaultdict(list)
        for name, cell in module["cells"].items():
            for port, bits in cell["connections"].items():
                output = cell["port_directions"].get(port) == "output"
                for bit in bits:
                    if isinstance(bit, int):
                        if output:
                            self.drivers[bit] = (name, port)
                        else:
                            self.loads[bit].append((name, port))
        for name, port in module["ports"].items():
            for bit in port["bits"]:
                if isinstance(bit, int):
                    if port["direction"] == "input":
                        self.drivers[bit] = ("$port", name)
                    else:
                        self.loads[bit].append(("$port", name))


def _operand_ffs(cells: dict, nets: _Nets, pins: dict, group: str) -> dict[int, str] | None:
    """Pin index -> the plain flip-flop driving it, or None when the group cannot be packed."""
    ffs = {}
    for i in range(_OPERAND_PINS):
        bit = pins[f"{group}{i}"][0]
        if isinstance(bit, str):
            if bit != "0":
                return None
            continue
        driver = nets.drivers.get(bit)
        if driver is None or driver[0] == "$port" or driver[1] != "Q" \
                or _control(cells[driver[0]]) is None or _fed_by_hard_block(cells, nets,
                                                                            driver[0]):
            return None
        ffs[i] = driver[0]
    return ffs or None


_LUT_CELLS = {"LUT4", "PFUMX", "L6MUX21"}
_LUTS_LOOKED_THROUGH = 2


def _fed_by_hard_block(cells: dict, nets: _Nets, name: str) -> bool:
    """The flip-flop's ``D`` comes from a block RAM or DSP output, directly or through at most
    :data:`_LUTS_LOOKED_THROUGH` LUTs (a bit select, a sign extension)."""
    frontier, depth = [cells[name]["connections"]["DI"][0]], 0
    while frontier and depth <= _LUTS_LOOKED_THROUGH:
        next_frontier = []
        for bit in frontier:
            driver = nets.drivers.get(bit) if isinstance(bit, int) else None
            if driver is None or driver[0] == "$port":
                continue
            cell = cells[driver[0]]
            if cell["type"] in _HARD_BLOCKS:
                return True
            if cell["type"] in _LUT_CELLS:
                next_frontier += [b for port, bits in cell["connections"].items()
                                  if cell["port_directions"].get(port) == "input"
                                  for b in bits]
        frontier, depth = next_frontier, depth + 1
    return False


def _product_ffs(cells: dict, nets: _Nets, pins: dict) -> dict[int, str] | None:
    """Pin index -> the plain flip-flop the used product pin alone feeds, or None."""
    ffs = {}
    for i in range(_PRODUCT_PINS):
        bit = pins[f"P{i}"][0]
        readers = nets.loads.get(bit, []) if isinstance(bit, int) else []
        if not readers:
            continue
        if len(readers) != 1:
            return None
        name, port = readers[0]
        if name == "$port" or port != "DI" or _control(cells[name]) is None:
            return None
        ffs[i] = name
    return ffs or None


def _shared_control(cells: dict, ffs: dict[int, str]) -> tuple | None:
    """The one ``(clock, enable)`` of a group of flip-flops, or None when they differ."""
    controls = {_control(cells[name]) for name in ffs.values()}
    return next(iter(controls)) if len(controls) == 1 else None


def pack_dsp_registers(netlist: dict, top: str) -> DspPacking:
    """Pack the operand and product flip-flops of every ``MULT18X18D`` of module ``top`` into
    the block (in place) and say what was packed."""
    if top not in netlist.get("modules", {}):
        raise ValueError(f"the netlist has no module {top!r}")
    module = netlist["modules"][top]
    cells = module["cells"]
    nets = _Nets(module)
    multipliers = operands = products = 0
    doomed: set[str] = set()
    inputs_seen: set[str] = set()
    for cell in list(cells.values()):
        if cell["type"] != "MULT18X18D":
            continue
        multipliers += 1
        params = cell.setdefault("parameters", {})
        if any(str(params.get(f"REG_{r}_CLK", "NONE")).strip() != "NONE"
               for r in ("INPUTA", "INPUTB", "INPUTC", "PIPELINE", "OUTPUT")):
            continue  # already uses its registers
        pins = cell["connections"]
        plan: dict[str, dict[int, str]] = {}
        # both operands or neither: nextpnr times a block with one registered operand as an
        # unregistered one (the set-up to the register is then the whole multiply)
        operand_ffs = {group: _operand_ffs(cells, nets, pins, group) for group in ("A", "B")}
        inputs = outputs = None
        # (an operand register already moved into another block as its product register is
        # never one: it is fed by that block, see _fed_by_hard_block)
        if all(operand_ffs.values()):
            inputs = _shared_control(
                cells, operand_ffs["A"] | {18 + i: n for i, n in operand_ffs["B"].items()})
            if inputs is not None:
                plan = {"A": operand_ffs["A"], "B": operand_ffs["B"]}
        product_ffs = _product_ffs(cells, nets, pins)
        if product_ffs:
            outputs = _shared_control(cells, product_ffs)
            if outputs is not None and (inputs is None or inputs[0] == outputs[0]):
                plan["P"] = product_ffs
            else:
                outputs = None
        if not plan:
            continue
        clock = (inputs or outputs)[0]
        # the operands' registers take enable CE0, the product's CE1
        for group in ("A", "B"):
            if group in plan:
                for i, name in plan[group].items():
                    pins[f"{group}{i}"] = list(cells[name]["connections"]["DI"])
                    inputs_seen.add(name)
                params[f"REG_INPUT{group}_CLK"] = "CLK0"
                params[f"REG_INPUT{group}_CE"] = "CE0"
                operands += 1
        if "P" in plan:
            for i, name in plan["P"].items():
                pins[f"P{i}"] = list(cells[name]["connections"]["Q"])
                doomed.add(name)
            params["REG_OUTPUT_CLK"] = "CLK0"
            params["REG_OUTPUT_CE"] = "CE1"
            products += 1
        enables = {"CE0": list((inputs or (None, _ALWAYS))[1]),
                   "CE1": list((outputs or (None, _ALWAYS))[1])}
        for port, value in (("CLK0", list(clock)), *enables.items(), ("RST0", ["0"])):
            pins[port] = value
            cell["port_directions"][port] = "input"
    for name in doomed:
        del cells[name]
    # operand flip-flops whose every reader was a packed pin
    nets = _Nets(module)
    for name in inputs_seen - doomed:
        if not any(nets.loads.get(bit) for bit in cells[name]["connections"]["Q"]):
            del cells[name]
            doomed.add(name)
    return DspPacking(multipliers=multipliers, operands_packed=operands,
                      products_packed=products, flip_flops_removed=len(doomed))
