#!/usr/bin/env python3
"""Benchmark the fleet simulator: many problems through one fleet on one core, and capacity
searches serially against a local Dask cluster.

    heteroreason bench fleet                      # 100,000 problems (target: < 60 s)
    heteroreason bench fleet --problems 20000
    heteroreason bench fleet --searches --workers 2
    heteroreason bench fleet --scaling --problems 20000   # cost per event, 8:2:2 and 128:32:32

The throughput run: Config1 HeteroReason, pools 8:2:2, MATH500 and GSM8K equally mixed, Poisson
arrivals at 0.5/s, no per-problem timeline checks; prints events/s, problems/s, peak memory
and the load it ran at (each pool's utilization, the P99 latency). ``--searches``: a capacity
search at the SLO for the four bundled datasets x three systems (GPU-only t2 2:1:1,
HeteroReason 2:1:1, HeteroReason of equal power), serially and on ``--workers`` local Dask
workers; prints both times, the speed-up, and whether the results are identical.
``--scaling``: the throughput run's fleet at 8:2:2 and at sixteen times its pools and its rate
(128:32:32 at 8/s, each device as loaded), ``--repeats`` runs of each taken in turn; prints the
least CPU time per event of each and their ratio (the goal: the large fleet within
1.3x; CPU time, the least of the repeats, because this machine is shared and its speed varies).
"""

from __future__ import annotations

import resource
import sys
import time

from heteroreason.commands.common import check_workers, command_parser, positive
from heteroreason.model.executor import executor
from heteroreason.model.fleet.engine import simulate_fleet
from heteroreason.model.fleet.metrics import fleet_metrics
from heteroreason.model.fleet.search import (
    FleetPoint,
    bundled_workload,
    capacities,
    compare_points,
)
from heteroreason.model.fleet.workload import sample_workload

DATASETS = ("math500", "gsm8k", "olympiadbench", "gaokao2023en")
TARGET_S = 60.0
SCALE = 16  # the large fleet of --scaling: 128:32:32
SCALING_GOAL = 1.3


def _point(problems: int, seed: int, rate: float = 0.5, scale: int = 1) -> FleetPoint:
    return FleetPoint(config="config1", mode="heteroreason", drafts=8 * scale, prms=2 * scale,
                      targets=2 * scale, datasets=("math500", "gsm8k"), rate_per_s=rate * scale,
                      problems=problems, seed=seed)


def throughput(problems: int, seed: int, rate: float = 0.5) -> int:
    point = _point(problems, seed, rate)
    traces, times = sample_workload(bundled_workload(point.datasets, point.mode),
                                    point.arrivals(), problems, seed)
    start = time.perf_counter()
    run = simulate_fleet(point.spec(), traces, times, check=False)
    seconds = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{point.label} at {point.rate_per_s}/s (seed {seed}): {problems:,} problems, "
          f"{run.events:,} events in {seconds:.1f} s — {run.events / seconds:,.0f} events/s, "
          f"{problems / seconds:,.0f} problems/s, {1e3 * seconds / problems:.2f} ms/problem; "
          f"peak memory {peak_mib:.0f} MiB")
    m = fleet_metrics(run)
    print("load: utilization " + ", ".join(f"{k} {100 * v:.0f} %" for k, v in
                                           m.utilization.items())
          + f"; P50 {m.p50_s:.1f} s, P99 {m.p99_s:.1f} s")
    if problems >= 100_000:
        verdict = "meets" if seconds < TARGET_S * problems / 100_000 else "misses"
        print(f"target: {problems:,} problems in < {TARGET_S * problems / 100_000:.0f} s — "
              f"{verdict} it")
    return 0


def scaling(problems: int, seed: int, repeats: int) -> int:
    """CPU time per event of the 8:2:2 fleet and of one ``SCALE`` times larger, as loaded."""
    points = [_point(problems, seed), _point(problems, seed, scale=SCALE)]
    inputs = [(p, *sample_workload(bundled_workload(p.datasets, p.mode), p.arrivals(),
                                   problems, seed)) for p in points]
    best: dict[str, float] = {}
    for r in range(repeats):
        for point, traces, times in inputs:
            start = time.process_time()
            run = simulate_fleet(point.spec(), traces, times, check=False)
            us = 1e6 * (time.process_time() - start) / run.events
            best[point.label] = min(best.get(point.label, us), us)
            print(f"  run {r + 1}/{repeats} {point.label} at {point.rate_per_s:g}/s: "
                  f"{run.events:,} events, {us:.2f} us CPU per event", flush=True)
    (small, small_us), (large, large_us) = best.items()
    ratio = large_us / small_us
    print(f"least CPU per event over {repeats} runs: {small} {small_us:.2f} us, {large} "
          f"{large_us:.2f} us: {ratio:.2f}x (goal <= {SCALING_GOAL}x: "
          f"{'meets' if ratio <= SCALING_GOAL else 'misses'} it)")
    return 0


def searches(workers: int, problems: int, slo_s: float) -> int:
    points = []
    for dataset in DATASETS:
        points += compare_points(FleetPoint(drafts=2, prms=1, targets=1, datasets=(dataset,),
                                            problems=problems))
    timings, results = {}, {}
    for name, kwargs in (("serial", {}), (f"dask x{workers}", {"workers": workers})):
        with executor(**kwargs) as ex:
            start = time.perf_counter()
            results[name] = capacities(ex, points, slo_s)
            timings[name] = time.perf_counter() - start
        print(f"{len(points)} capacity searches ({len(DATASETS)} datasets x 3 systems, "
              f"{problems} problems per point, SLO {slo_s:g} s) {name}: {timings[name]:.1f} s")
    serial, parallel = timings.values()
    same = results["serial"] == results[f"dask x{workers}"]
    print(f"speed-up {serial / parallel:.2f}x; results identical: {same}")
    for row in results["serial"]:
        print(f"  {row['system']:<44} capacity {row['capacity_per_s']:.4f}/s "
              f"({row['evaluations']} runs)")
    return 0 if same else 1


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = command_parser(__doc__, prog=prog)
    parser.add_argument("--problems", type=positive(int, "problems"), default=100_000,
                        help='problems through one fleet')
    parser.add_argument("--seed", type=int, default=0, help='seed of the arrivals')
    parser.add_argument("--searches", action="store_true",
                        help="time the capacity searches serially and on a local Dask cluster")
    parser.add_argument("--workers", type=int, default=2,
                        help="processes of the local Dask cluster")
    parser.add_argument("--search-problems", type=positive(int, "problems"), default=300,
                        help="problems a point of a capacity search")
    parser.add_argument("--slo", type=positive(float, "slo"), default=120.0,
                        help="P99 SLO in s (searches)")
    parser.add_argument("--scaling", action="store_true",
                        help=f"CPU per event at 8:2:2 and at {SCALE}x its pools and rate")
    parser.add_argument("--repeats", type=positive(int, "repeats"), default=3,
                        help="runs of each fleet (--scaling)")
    args = parser.parse_args(argv)
    check_workers(parser, args.workers)
    if args.seed < 0:
        parser.error(f"--seed must be a non-negative integer, not {args.seed}")
    if args.searches:
        try:
            return searches(args.workers, args.search_problems, args.slo)
        except RuntimeError as exc:  # no Dask, or its cluster would not start
            print(f"heteroreason bench fleet: error: {exc}", file=sys.stderr)
            return 2
    if args.scaling:
        return scaling(args.problems, args.seed, args.repeats)
    return throughput(args.problems, args.seed)


if __name__ == "__main__":
    sys.exit(main())
