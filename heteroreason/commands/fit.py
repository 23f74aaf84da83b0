#!/usr/bin/env python3
"""Does each board's design fit its board, SLR by SLR, from synthesis: resources per unit, the
floorplan per SLR against the failfast guidelines, the bits crossing each boundary, the largest
nets, and the analytic estimate's error.

    heteroreason fit                                  # the committed evidence, every board
    heteroreason fit --synthesize --board u280-300 --write-evidence
    heteroreason fit --synthesize --case small        # the small case CI runs (minutes)
    heteroreason fit --carry --write-evidence         # new RTL, the same RTLIL: no Yosys

Reads data/fit_evidence.json (each design synthesized with its hierarchy kept by a native
Yosys: sim/flow/hierarchy.py) and the boards' SLRs (model/timing/fpga/data/slr.json, each
figure with its source). Exit status 2 on a bad board, case or path, or evidence that cannot be
read; 1 with --check when a design does not fit or its evidence is stale, and with --carry when
this RTL gives a design another RTLIL than the one its evidence was synthesized from.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from heteroreason.commands.common import command_parser, note
from heteroreason.model.files import InputError, output_problem, read_text
from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.timing.fpga.calibration import CalibrationError, rtl_hash
from heteroreason.model.timing.fpga.fit import (
    FIT_FILE,
    DesignFit,
    load_fit_evidence,
    parse_fit_evidence,
)
from heteroreason.model.timing.fpga.floorplan import RESOURCES
from heteroreason.model.timing.fpga.platform import BOARDS, design_for, estimate_resources
from heteroreason.model.timing.fpga.unit_logic import FITTED_ON
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.sim.flow.export import DecoderDesign
from heteroreason.sim.flow.fit import (
    carried_evidence_json,
    design_source,
    evidence_json,
    native_yosys,
    reread_design,
    source_sha256,
    synthesize_design,
    write_evidence,
)
from heteroreason.sim.measure.grid import git_revision

MODEL = "qwen2.5-0.5b"
FIT_BOARDS = ("u280-300", "v80")
# the small case: the core at the test-small model, four rows a beat, the KV cache in memory
# (about three minutes of Yosys), placed on the U280's SLRs
SMALL = ("small", "u280-300", DecoderDesign("test-small", DecoderParams(
    32, 32, heads_parallel=4, weight_buffer=256, vector_width=8, param_width=8,
    rows_per_beat=4, external_kv=True)))
DEFAULT_EVIDENCE = Path("<default>")


def _parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = command_parser(__doc__, prog=prog)
    parser.add_argument("--board", action="append", choices=FIT_BOARDS,
                        help=f"a board whose chosen design to report (repeatable; default "
                             f"{' '.join(FIT_BOARDS)})")
    parser.add_argument("--case", choices=("small",),
                        help="the small case instead of the boards' designs")
    parser.add_argument("--synthesize", action="store_true",
                        help="synthesize now (a full-width core: hours) instead of "
                             "reading the evidence")
    parser.add_argument("--evidence", type=Path, default=FIT_FILE,
                        help="the fit evidence to read")
    parser.add_argument("--write-evidence", nargs="?", type=Path, const=DEFAULT_EVIDENCE,
                        metavar="PATH", help="with --synthesize: write the figures as the fit "
                                             "evidence (default the committed file)")
    parser.add_argument("--work", type=Path, help="folder for the RTLIL and the netlists, a "
                                                  "subfolder a design (default a temporary "
                                                  "one)")
    parser.add_argument("--reread", action="store_true",
                        help="with --synthesize and --work: read the netlists an earlier run "
                             "left there (of this RTL) instead of running Yosys again")
    parser.add_argument("--carry", action="store_true",
                        help="elaborate the designs (minutes, GBs at full width) and carry "
                             "their evidence to this RTL where it gives the very RTLIL they "
                             "were synthesized from (on the evidence's own RTL: record the "
                             "RTLIL's digest); with --write-evidence, write it")
    parser.add_argument("--yosys", metavar="PATH", help="the native Yosys (default yosys)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a design does not fit or the evidence is stale")
    return parser


def _cases(args) -> list[tuple[str, str, DecoderDesign]]:
    """``(name, board, design)`` for each design to report."""
    if args.case == "small":
        return [SMALL]
    return [(b, b, DecoderDesign(MODEL, design_for(MODEL, b))) for b in args.board or FIT_BOARDS]


def _digest(name: str, design: DecoderDesign) -> str:
    note(f"elaborating {name} ({design.preset}) for its RTLIL's digest ...")
    return source_sha256(design_source(design))


def _row(values) -> str:
    return " ".join(f"{values[r]:>9,}" for r in RESOURCES)


def verdict(fit: DesignFit, board: str) -> tuple[bool, str]:
    """``(fits, the verdict in words)``: every SLR within its guidelines, every boundary within
    its SLL share, every crossing registered on both sides and no net over the fanout bound."""
    plan = fit.floorplan(board)
    if plan is None:
        have = BOARDS[board].resources
        over = [f"{r.upper()} {fit.total[r]:,} > {getattr(have, r):,}" for r in RESOURCES
                if fit.total[r] > getattr(have, r)]
        return False, (f"not checked per SLR (no SLR data for {board}); the whole device: "
                       + ("; ".join(over) if over else "within every resource"))
    problems = list(plan.over)
    unregistered = sum(fit.unregistered_crossing_bits(plan).values())
    if unregistered:
        problems.append(f"{unregistered:,} crossing bits not registered on both sides")
    over = fit.over_fanout(plan.floor.guidelines.fanout)
    if over:
        problems.append(f"{len(over)}{'+' if len(over) == len(fit.largest_nets) else ''} nets "
                        f"over {plan.floor.guidelines.fanout:,} loads (largest "
                        f"{over[0]['loads']:,})")
    if problems:
        return False, "DOES NOT FIT: " + "; ".join(problems)
    return True, "fits: every SLR within its guidelines (synthesized, not placed or routed)"


def report(fit: DesignFit, board: str, *, stale: bool) -> bool:
    """Print one design's fit, the verdict first; True when it fits."""
    fits, words = verdict(fit, board)
    p = fit.design.params
    print(f"{fit.name}: {words}" + (" -- STALE: the evidence is from other RTL" if stale
                                    else ""))
    print(f"  {fit.top} of {fit.design.preset} on {board}: {p.lanes} lanes x "
          f"{p.rows_per_beat} rows, weight buffer {p.weight_buffer} beats, "
          f"{p.heads_parallel} heads, vector {p.vector_width}, gains {p.param_width}, KV rows "
          f"{p.kv_rows}; Yosys took {fit.yosys_s:,.0f} s" + (
              f" on RTL {fit.synthesized_rtl_hash[:12]} (carried: this RTL gives the same "
              f"RTLIL, sha256 {fit.source_sha256[:12]})" if fit.synthesized_rtl_hash
              else ""))
    print(f"  {'unit':10s} " + " ".join(f"{r.upper():>9s}" for r in RESOURCES))
    for unit, res in sorted(fit.units.items(), key=lambda u: -u[1]["lut"]):
        print(f"  {unit:10s} {_row(res)}")
    print(f"  {'total':10s} {_row(fit.total)}")
    estimate = estimate_resources(qwen2_config(fit.design.preset), p)
    errors = fit.estimate_error(estimate)
    sample = ("its LUT and FF lines fitted on this design" if fit.name in FITTED_ON else
              "out of sample: its LUT and FF lines fitted on " + " and ".join(FITTED_ON))
    print("  the analytic estimate (platform.estimate_resources, the design search's; "
          f"{sample}) against it: " + ", ".join(f"{r.upper()} {getattr(estimate, r):,} "
                             + ("(both 0)" if e is None else f"({e:+.0%})")
                             for r, e in errors.items()))
    plan = fit.floorplan(board)
    if plan is not None:
        g = plan.floor.guidelines
        print(f"  floorplan on the {plan.floor.device}'s user regions (HBM at "
              f"SLR{plan.floor.hbm_slr}; '!' over a guideline: LUT {g.lut:.0%}, DSP "
              f"{g.dsp:.0%}, BRAM {g.bram18k:.0%}, URAM {g.uram:.0%}, SLL {g.sll:.0%}):")
        for line in plan.table():
            print(f"    {line}")
        unregistered = fit.unregistered_crossing_bits(plan)
        crossing = sum(plan.crossing_bits)
        print(f"  crossings: {crossing:,} bits" + (
            "; not registered on both sides: " + ", ".join(
                f"{n:,} driven by {u}" for u, n in sorted(unregistered.items()))
            if unregistered else ", every one registered on both sides" if crossing else ""))
    print("  largest nets (loads through the hierarchy, the clock left out): " + ", ".join(
        f"{n['module'].split('.')[-1]}:{n['net'][:40]} {n['loads']:,} ({n['driver']})"
        for n in fit.largest_nets[:6]))
    return fits


class _Refused(Exception):
    """``(message, exit status)``: what stops a synthesis or a carry."""


def _synthesized(args, cases, target) -> str:
    """The evidence's text after synthesizing each case (or reading its netlists again)."""
    try:
        yosys = None if args.reread else native_yosys(args.yosys)
    except RuntimeError as exc:
        raise _Refused(str(exc), 2) from None
    records = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, _board, design in cases:
            work = (args.work or Path(scratch)) / name
            if args.reread:
                try:
                    record = reread_design(work, rtl_hash=rtl_hash())
                except ValueError as exc:
                    raise _Refused(f"--reread: {exc}", 2) from None
                if record.design != design or record.name != name:
                    raise _Refused(f"--reread: {work} holds another design than {name}'s", 2)
                records.append(record)
                continue
            note(f"synthesizing {name} ({design.preset}) in {work} ...")
            records.append(synthesize_design(name, design, work, rtl_hash=rtl_hash(),
                                             yosys=yosys))
    earlier = Path(target).read_text() if target is not None and Path(target).is_file() \
        else None
    return evidence_json(records, rtl_hash=rtl_hash(), rtl_revision=git_revision(),
                         earlier=earlier)


def _carried(args, cases, _target) -> str:
    """The evidence's text carried to this RTL (:func:`carried_evidence_json`); what the
    evidence lacks is refused before any elaboration."""
    try:
        earlier = read_text(args.evidence)
        held = parse_fit_evidence(earlier, str(args.evidence))
    except InputError as exc:
        raise _Refused(str(exc), 2) from None
    for name, _board, design in cases:
        fit = held.design(name)
        why = ("holds no design of that name" if fit is None else
               "holds another design of that name" if fit.design != design else
               "keeps no digest of its RTLIL and is of other RTL: synthesize it again"
               if fit.source_sha256 is None and held.stale else None)
        if why:
            raise _Refused(f"--carry: {args.evidence}: {name}: {why}", 2)
    try:
        return carried_evidence_json(
            earlier, {name: _digest(name, design) for name, _board, design in cases},
            rtl_hash=rtl_hash(), rtl_revision=git_revision())
    except ValueError as exc:  # this RTL gives another RTLIL
        raise _Refused(f"--carry: {args.evidence}: {exc}", 1) from None


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = _parser(prog)
    args = parser.parse_args(argv)
    if args.write_evidence is not None and not (args.synthesize or args.carry):
        parser.error("--write-evidence needs --synthesize or --carry")
    if args.carry and args.synthesize:
        parser.error("--carry reads the evidence's netlists, --synthesize makes new ones: "
                     "give one")
    if args.case and args.board:
        parser.error("--case and --board name different designs: give one")
    if args.reread and not (args.synthesize and args.work):
        parser.error("--reread needs --synthesize and --work")
    target = FIT_FILE if args.write_evidence == DEFAULT_EVIDENCE else args.write_evidence
    for flag, path, folder in (("--write-evidence", target, False), ("--work", args.work, True)):
        problem = path is not None and output_problem(path, folder=folder)
        if problem:
            print(f"heteroreason fit: error: {flag}: {problem}", file=sys.stderr)
            return 2
    try:
        cases = _cases(args)
    except CalibrationError as exc:  # the boards' designs are chosen on the calibrated model
        print(f"heteroreason fit: error: {exc}", file=sys.stderr)
        return 2
    if args.synthesize or args.carry:
        try:
            text = (_synthesized if args.synthesize else _carried)(args, cases, target)
        except _Refused as exc:
            print(f"heteroreason fit: error: {exc.args[0]}", file=sys.stderr)
            return exc.args[1]
        if target is not None:
            write_evidence(target, text)
        evidence_path = target or Path("(this run)")
    else:
        evidence_path = args.evidence
    try:
        evidence = load_fit_evidence(evidence_path) if not (args.synthesize or args.carry) \
            else parse_fit_evidence(text, str(evidence_path))
    except InputError as exc:
        print(f"heteroreason fit: error: {exc}", file=sys.stderr)
        return 2
    fits = True
    for name, board, design in cases:
        fit = evidence.design(name)
        if fit is None or fit.design != design:
            what = "holds no design of that name" if fit is None else "holds another design"
            print(f"{name}: not synthesized: {evidence_path} {what} (it has "
                  f"{', '.join(d.name for d in evidence.designs) or 'none'}); run heteroreason "
                  f"fit --synthesize {'--case small' if name == 'small' else '--board ' + name}"
                  " --write-evidence")
            fits = False
            continue
        fits &= report(fit, board, stale=evidence.stale)
    if (args.synthesize or args.carry) and target is not None:
        print(f"wrote {target}")
    print(f"evidence: {evidence_path} (RTL {evidence.rtl_hash[:12]}, revision "
          f"{evidence.rtl_revision[:12]}; {evidence.method})")
    if evidence.stale:
        print("the evidence is from other RTL: rerun heteroreason fit --synthesize "
              "--write-evidence")
    return 1 if args.check and (not fits or evidence.stale) else 0


if __name__ == "__main__":
    sys.exit(main())
