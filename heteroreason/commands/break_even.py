#!/usr/bin/env python3
"""The FPGA draft's break-even: the ms/token at which HeteroReason equals GPU t2 and baseline.

    heteroreason break-even                       # bundled traces, both configs
    heteroreason break-even --traces A/with_bt --configs config1 --range 0.5 50

For each configuration and dataset it prints the FPGA decode cost per token at which the
``heteroreason`` mode's mean latency equals each GPU-only mode's, and plots the latency against
the FPGA's ms/token with the GPU draft, the artifact's U280 and this project's calibrated
boards marked, one curve per FPGA model (OUT/break_even.png; the tables as CSV and JSON
beside it). With ``--ingest-scales`` it also prints the ``heteroreason``
latency with the FPGA's ingest cost per token scaled (what a batched shadow ingest would buy).
Bad input exits with status 2.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from heteroreason.commands.common import (
    command_parser,
    note,
    run_staged,
    write_run_record,
    write_table,
)
from heteroreason.model.experiments.break_even import (
    DEFAULT_RANGE_MS,
    BreakEven,
    IngestSensitivity,
    break_even_table,
    ingest_sensitivity,
)
from heteroreason.model.experiments.plots import plot_break_even
from heteroreason.model.experiments.report import format_table
from heteroreason.model.experiments.reproduce import (
    add_trace_set_options,
    bundled_sets,
    check_trace_set_options,
    load_trace_sets,
    ordered_datasets,
)
from heteroreason.model.system.config import ServingMode, system_config
from heteroreason.model.system.scheduler import ScheduleError
from heteroreason.model.timing.fpga.platform import BOARDS, draft_timing
from heteroreason.model.workload.traces import TraceError

GPU_ONLY = [m.value for m in ServingMode if not m.on_fpga and m.backtracking]


def draft_marks(config_name: str) -> dict[str, float]:
    """Draft speeds to mark: the GPU draft (measured, and the paper's claim), the
    configuration's FPGA model, this project's RTL-calibrated boards (decode ms/token at
    context 0)."""
    config = system_config(config_name)
    marks = {"GPU draft (measured)": config.draft_gpu.decode_ms_per_token,
             "GPU draft (paper)": system_config(config_name, gpu_draft="paper")
             .draft_gpu.decode_ms_per_token,
             "artifact U280": config.fpga.decode_ms_per_token}
    for board in BOARDS:
        marks[f"rtl-{board}"] = draft_timing(board).base_decode_ms_per_token
    return marks


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = command_parser(__doc__, prog=prog)
    add_trace_set_options(parser, default_fpgas=["artifact", "rtl-u280-300"],
                          fpgas_help="the FPGA models whose per-call, KV and ingest terms are "
                                     "kept, each its own curve")
    parser.add_argument("--against", nargs="+", default=["t2", "baseline"], choices=GPU_ONLY,
                        help="the GPU-only modes HeteroReason is compared with")
    parser.add_argument("--range", nargs=2, type=float, default=list(DEFAULT_RANGE_MS),
                        metavar=("LOW_MS", "HIGH_MS"),
                        help=f"FPGA ms/token searched (default {DEFAULT_RANGE_MS[0]:g} "
                             f"{DEFAULT_RANGE_MS[1]:g})")
    parser.add_argument("--out", type=Path, default=Path("build/break_even"),
                        help="the output directory (break_even.png, break_even.csv/json, "
                             "run.json)")
    parser.add_argument("--no-plots", action="store_true", help="write no plot")
    parser.add_argument("--ingest-scales", nargs="+", type=float, default=[], metavar="SCALE",
                        help="also replay heteroreason with the FPGA's ingest cost per token "
                             "times each SCALE (e.g. 0.25 0)")
    args = parser.parse_args(argv)
    bad = [s for s in args.ingest_scales if not 0 <= s < float("inf")]
    if bad:
        parser.error(f"--ingest-scales must be finite numbers >= 0, not {bad[0]:g}")
    low, high = args.range
    if not 0 < low < high < float("inf"):
        parser.error(f"--range must be two finite numbers 0 < LOW_MS < HIGH_MS, not "
                     f"{low:g} {high:g}")
    check_trace_set_options(parser, args)
    return run_staged(parser, args, argv, _run)  # whole or absent; one writer at a time


def _run(args, argv: list[str], stage: Path) -> int:
    """The searches and the tables printed, every output written into ``stage``."""
    low, high = args.range
    start = time.monotonic()
    try:
        # the boards' calibrated figures first: a stale calibration is refused before any work
        marks = None if args.no_plots else {c: draft_marks(c) for c in args.configs}
        sets = bundled_sets() if args.traces is None else \
            load_trace_sets(args.traces, prompt_tokens=args.prompt_tokens)
        rows, panels = [], {}
        for fpga in args.fpgas:
            found, drawn = break_even_table(
                {d: sets[d] for d in ordered_datasets(sets)}, args.configs, fpga=fpga,
                gpu_draft=args.gpu_draft, against=args.against, low_ms=low, high_ms=high,
                progress=lambda line, fpga=fpga: note(f"  {fpga}: {line}"))
            rows += found
            for config_name, dataset, curve, modes in drawn:
                panel = panels.setdefault((config_name, dataset), (config_name, dataset, {},
                                                                   modes))
                panel[2][fpga] = curve
        ingest_rows = []
        for config_name in args.configs if args.ingest_scales else ():
            config = system_config(config_name, fpga=args.fpgas[0], gpu_draft=args.gpu_draft)
            for dataset in ordered_datasets(sets):
                ingest_rows += ingest_sensitivity(sets[dataset], config, args.ingest_scales,
                                                  dataset=dataset)
    except (TraceError, ScheduleError, ValueError) as exc:
        print(f"heteroreason break-even: error: {exc}", file=sys.stderr)
        return 2
    print(f"FPGA draft: each model of {', '.join(args.fpgas)} with its decode ms/token varied "
          f"in [{low:g}, {high:g}]; break-even: heteroreason's mean latency equals the mode's "
          f"(GPU draft '{args.gpu_draft}')")
    print(format_table(BreakEven.HEADER, [r.cells() for r in rows]))
    written = write_table(stage / "break_even", BreakEven.HEADER, [r.cells() for r in rows])
    if ingest_rows:
        print(f"shadow ingest: heteroreason with the {args.fpgas[0]} model's ingest cost per "
              f"token scaled (its KV term kept); change against the model as it is")
        print(format_table(IngestSensitivity.HEADER, [r.cells() for r in ingest_rows]))
        written += write_table(stage / "ingest", IngestSensitivity.HEADER,
                               [r.cells() for r in ingest_rows])
    if not args.no_plots:
        written.append(plot_break_even(list(panels.values()), marks,
                                       stage / "break_even.png",
                                       title=f"GPU draft '{args.gpu_draft}'"))
    written.append(write_run_record(
        stage, command="break-even", argv=argv,
        models={f: system_config(args.configs[0], fpga=f).fpga.source for f in args.fpgas},
        seeds={}, outputs=written))
    print(f"wrote {args.out}/ (" + ", ".join(p.name for p in written) + f") in "
          f"{time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
