#!/usr/bin/env python3
"""Calibrate the FPGA timing model from RTL simulation: run the decoder core on Verilator over a
grid, fit the per-operator overheads on the training points, report the model against the RTL
on the held-out points, and write the calibration file.

    heteroreason calibrate                    # full grid, writes model/timing/fpga/data/
    heteroreason calibrate --quick --check    # the CI grid against the committed file
    heteroreason calibrate --workers 4        # the grid's runs on a local Dask cluster

Each grid entry is an independent Verilator build and run (minutes each); they run serially, on a
local Dask cluster (``--workers N``) or an existing one (``--scheduler tcp://HOST:PORT`` or
``$DASK_SCHEDULER_ADDRESS``), each entry in its own build directory, with the same results.

Exit status 1 when a held-out point (or, with --check, any point) is off by more than 2 %.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from heteroreason.commands.common import ProgressBar, check_workers, command_parser
from heteroreason.model.executor import executor, run_chunked
from heteroreason.model.experiments.report import format_table
from heteroreason.model.files import output_problem
from heteroreason.model.timing.fpga.calibration import (
    CALIBRATION_FILE,
    Calibration,
    CalibrationError,
    Point,
    fit_overheads,
    load_calibration,
    rtl_hash,
    save_calibration,
)
from heteroreason.sim.measure.grid import FULL_GRID, QUICK_GRID, git_revision, measure

TOLERANCE = 0.02


def _measure_entry(task) -> tuple[list, Path]:
    entry, waves = task
    return measure(entry, waves=waves)


def report(rows_in, overheads) -> tuple[list[list], float]:
    rows, worst = [], 0.0
    for kind, p in rows_in:
        model = p.timing(overheads).token_cycles(p.position)
        error = model / p.cycles - 1.0
        if kind == "held out" or kind == "check":
            worst = max(worst, abs(error))
        q = p.params
        rows.append([kind, p.preset, q.beat_bytes, q.stream_bytes, q.heads_parallel,
                     q.vector_width, q.param_width, q.rows_per_beat, q.weight_buffer,
                     p.memory_latency_cycles,
                     "yes" if q.external_kv else "no", p.position, p.cycles, f"{model:.0f}",
                     f"{100 * error:+.2f}"])
    return rows, worst


HEADERS = ["set", "preset", "MACs", "stream B", "heads ||", "vector", "gains", "rows/beat",
           "buffer", "latency", "ext KV", "position", "RTL cycles", "model cycles", "error %"]


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = command_parser(__doc__, prog=prog)
    parser.add_argument("--quick", action="store_true", help="the small grid CI runs")
    parser.add_argument("--check", action="store_true",
                        help="compare the RTL with the committed calibration instead of fitting")
    parser.add_argument("--out", type=Path, default=CALIBRATION_FILE.parent,
                        help=f"the output directory: {CALIBRATION_FILE.name} is written there "
                             "(with --check, read from there)")
    parser.add_argument("--waves", action="store_true",
                        help="record waveforms (VCD under each run's build directory)")
    parser.add_argument("--workers", type=int, default=None,
                        help="run the grid on a local Dask cluster of this many processes")
    parser.add_argument("--scheduler", default=None,
                        help="run the grid on an existing Dask scheduler (tcp://HOST:PORT)")
    args = parser.parse_args(argv)
    check_workers(parser, args.workers)
    problem = output_problem(args.out, folder=True)
    if problem:
        parser.error(f"--out: {problem}")
    target = args.out / CALIBRATION_FILE.name
    grid = QUICK_GRID if args.quick else FULL_GRID
    start = time.monotonic()
    measured = []
    try:
        with executor(workers=args.workers, scheduler=args.scheduler,
                      progress=ProgressBar("calibration grid", "run")) as ex:
            runs = run_chunked(ex, _measure_entry, [(e, args.waves) for e in grid],
                               chunk_size=1)
    except RuntimeError as exc:
        print(f"heteroreason calibrate: error: {exc}", file=sys.stderr)
        return 2
    for entry, (points, build) in zip(grid, runs, strict=True):
        measured += [(entry.held_out, Point.of(p)) for p in points]
        if args.waves:
            print(f"waves: {build / 'dump.vcd'}", file=sys.stderr)
    if args.check:
        try:
            calibration = load_calibration(target)
        except CalibrationError as exc:
            print(f"heteroreason calibrate: error: {exc}", file=sys.stderr)
            return 2
        rows, worst = report([("check", p) for _, p in measured], calibration.overheads)
        print(format_table(HEADERS, rows))
        print(f"worst error {100 * worst:.2f} % against {target} "
              f"({time.monotonic() - start:.0f} s)")
        return 0 if worst <= TOLERANCE else 1
    train = [p for held, p in measured if not held]
    held_out = [p for held, p in measured if held]
    overheads = fit_overheads(train)
    calibration = Calibration(overheads, rtl_hash(), git_revision(), tuple(train),
                              tuple(held_out))
    rows, worst = report([("train", p) for p in train] + [("held out", p) for p in held_out],
                         overheads)
    print(format_table(HEADERS, rows))
    print("overheads (cycles): " + ", ".join(f"{k} {v:g}" for k, v in
                                             vars(overheads).items()))
    path = save_calibration(calibration, target)
    print(f"worst held-out error {100 * worst:.2f} %; wrote {path} "
          f"({time.monotonic() - start:.0f} s)")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
