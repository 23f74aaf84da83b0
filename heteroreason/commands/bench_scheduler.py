#!/usr/bin/env python3
"""Benchmark the system scheduler: the four datasets at full size (2,879 problems) x 4 modes.

    heteroreason bench scheduler [--config config1] [--seed 1]

Prints problems/s and events/s (one process, one core). rsd replays the traces' companions
without backtracking, the other modes the traces with it.
"""

from __future__ import annotations

import sys
import time

from heteroreason.commands.common import command_parser
from heteroreason.model.system.config import CONFIGS, ServingMode, system_config
from heteroreason.model.system.scheduler import simulate_problem
from heteroreason.model.workload.trace_synth import PROFILES, generate_traces
from heteroreason.model.workload.traces import RSD_POLICY


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = command_parser(__doc__, prog=prog)
    parser.add_argument("--config", default="config1", choices=list(CONFIGS),
                        help="the system configuration")
    parser.add_argument("--seed", type=int, default=1, help="a non-negative integer (default 1)")
    args = parser.parse_args(argv)
    if args.seed < 0:
        parser.error(f"--seed must be a non-negative integer, not {args.seed}")
    config = system_config(args.config)
    brsd = [t for p in PROFILES.values() for t in generate_traces(p, seed=args.seed)]
    rsd = [t for p in PROFILES.values()
           for t in generate_traces(p, seed=args.seed, policy=RSD_POLICY)]
    total_problems = total_events = 0
    start = time.perf_counter()
    for mode in ServingMode:
        traces = rsd if mode is ServingMode.RSD else brsd
        t0 = time.perf_counter()
        events = sum(simulate_problem(t, config, mode).events for t in traces)
        seconds = time.perf_counter() - t0
        print(f"{mode.value:>12}: {len(traces)} problems in {seconds:.2f} s "
              f"({len(traces) / seconds:,.0f} problems/s, {events / seconds:,.0f} events/s)")
        total_problems += len(traces)
        total_events += events
    seconds = time.perf_counter() - start
    print(f"{'all':>12}: {total_problems} problems, {total_events} events in {seconds:.2f} s "
          f"({total_problems / seconds:,.0f} problems/s, {total_events / seconds:,.0f} "
          "events/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
