#!/usr/bin/env python3
"""Reproduce the paper's evaluation with the system scheduler: table, CSV/JSON and plots.

    python scripts/reproduce.py              # bundled synthetic traces, both configs
    A=../shared/data/heteroreason-artifact/Hardware/inputs/Config1
    python scripts/reproduce.py --traces $A/with_bt --no-bt-traces $A/no_bt \\
        --prompt-tokens 128 --configs config1

Writes OUT/reproduction.{csv,json}, OUT/sources.csv (every input's figures and source),
OUT/ablation.png, OUT/breakdown.png, OUT/gantt.png and
OUT/gantt.trace.json (open it in chrome://tracing or Perfetto). Bad input exits with status 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from heteroreason.model.experiments.break_even import BreakEven, break_even_table
from heteroreason.model.experiments.plots import plot_ablation, plot_breakdown, plot_gantt
from heteroreason.model.experiments.report import format_table
from heteroreason.model.experiments.reproduce import (
    SOURCES_HEADER,
    ReproRow,
    add_trace_set_options,
    bundled_sets,
    check_trace_set_options,
    config_sources,
    load_trace_sets,
    ordered_datasets,
    reproduce,
    synthetic_no_backtrack_sets,
    write_rows,
    write_sources,
)
from heteroreason.model.files import output_problem
from heteroreason.model.system.config import system_config
from heteroreason.model.system.scheduler import ScheduleError
from heteroreason.model.system.simulate import chrome_trace, write_json
from heteroreason.model.workload.bundled import BUNDLED_PROBLEMS, BUNDLED_SEED
from heteroreason.model.workload.traces import TraceError


def _plots(rows, results, config: str, out: Path) -> list[Path]:
    """The ablation, the breakdown, and the Gantt chart and Chrome trace of one problem of the
    first configuration's first dataset (one that backtracks, in few steps, if any)."""
    written = [plot_ablation(rows, out / "ablation.png"),
               plot_breakdown(rows, out / "breakdown.png")]
    dataset = rows[0].dataset
    base = results[(config, dataset, True, "baseline")]
    pick = next((i for i, r in enumerate(base.runs)
                 if r.trace.backtracks and len(r.trace.steps) <= 14),
                next((i for i, r in enumerate(base.runs)
                      if any(s.outcome != "accept" for s in r.trace.steps)), 0))
    runs = [results[(config, dataset, True, m)].runs[pick]
            for m in ("baseline", "t2", "heteroreason")]
    written.append(plot_gantt(runs, out / "gantt.png"))
    written.append(write_json(chrome_trace(runs[-1]), out / "gantt.trace.json"))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_trace_set_options(parser, fpga_help="FPGA draft model (default: the artifact "
                                            "simulator's coefficients)")
    parser.add_argument("--no-bt-traces", nargs="+", type=Path, default=None,
                        help="traces without backtracking (default with bundled traces: their "
                             "synthetic RSD companions; none with --traces)")
    parser.add_argument("--out", type=Path, default=Path("build/reproduce"))
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--break-even", action="store_true",
                        help="also print the FPGA draft's break-even against t2 and baseline "
                             "per configuration and dataset (scripts/break_even.py; about "
                             "20 more replays of each set)")
    args = parser.parse_args(argv)
    check_trace_set_options(parser, args)
    problem = output_problem(args.out, folder=True)
    if problem:
        parser.error(f"--out: {problem}")

    start = time.monotonic()
    try:
        if args.traces is None:
            with_bt, without_bt = bundled_sets(), synthetic_no_backtrack_sets()
            source = f"bundled synthetic sets (seed {BUNDLED_SEED}, {BUNDLED_PROBLEMS} problems)"
            no_bt_source = "their synthetic RSD companions (same seed and size)"
        else:
            with_bt = load_trace_sets(args.traces, prompt_tokens=args.prompt_tokens)
            without_bt, no_bt_source = None, "none"
            source = ", ".join(map(str, args.traces))
        if args.no_bt_traces is not None:
            without_bt = load_trace_sets(args.no_bt_traces, prompt_tokens=args.prompt_tokens)
            no_bt_source = ", ".join(map(str, args.no_bt_traces))
        plotted = None if args.no_plots else (args.configs[0], ordered_datasets(with_bt)[0])
        rows, results = reproduce(args.configs, with_bt, without_bt, fpga=args.fpga,
                                  gpu_draft=args.gpu_draft,
                                  keep_runs_for=plotted)
    except (TraceError, ScheduleError, ValueError) as exc:
        print(f"reproduce: error: {exc}", file=sys.stderr)
        return 2
    elapsed = time.monotonic() - start
    break_even_rows = []
    if args.break_even:  # before anything is written: an error leaves no partial output
        try:
            break_even_rows, _ = break_even_table(
                {d: with_bt[d] for d in ordered_datasets(with_bt)}, args.configs,
                fpga=args.fpga, gpu_draft=args.gpu_draft)
        except (ScheduleError, ValueError) as exc:
            print(f"reproduce: error: {exc}", file=sys.stderr)
            return 2

    print(f"traces with backtracking (bt yes): {source}; without (bt no): {no_bt_source}; "
          f"FPGA model: {args.fpga}; GPU draft: {args.gpu_draft}; "
          f"speedup: the latency of the mode in 'vs' on the same "
          f"traces over the row's; J/token = busy-average system power x latency / drafted "
          f"tokens (paper's method)")
    print(format_table(ReproRow.HEADER, [r.cells() for r in rows]))
    configs = [system_config(name, fpga=args.fpga, gpu_draft=args.gpu_draft)
               for name in args.configs]
    print("the inputs of each configuration and their sources (OUT/sources.csv):")
    print(format_table(SOURCES_HEADER, [list(r) for c in configs for r in config_sources(c)]))
    csv_path, json_path = write_rows(rows, args.out)
    written = [csv_path, json_path, write_sources(configs, args.out)]
    if not args.no_plots:
        written += _plots(rows, results, args.configs[0], args.out)
    if args.break_even:
        print(f"break-even of the FPGA draft ({args.fpga} model, decode ms/token varied): "
              f"heteroreason's latency equals the mode's")
        print(format_table(BreakEven.HEADER, [b.cells() for b in break_even_rows]))
    problems = sum(r.metrics.problems for r in rows)
    print(f"{problems} problem replays in {elapsed:.1f} s; wrote "
          + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
