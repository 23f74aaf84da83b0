#!/usr/bin/env python3
"""Fleet-scale serving: problems arriving over pools of draft devices, PRM GPUs and target GPUs.

    python scripts/fleet.py simulate --rate 0.2 --pools 4 2 2 --out build/fleet
    python scripts/fleet.py sweep --rates 0.05 0.1 0.2 0.4 --out build/fleet --workers 2
    python scripts/fleet.py capacity --slo 60 --configs config1 config2 --out build/fleet
    python scripts/fleet.py compare --slo 60 --pools 4 1 1 --out build/fleet

``simulate`` runs one fleet at one load (metrics, a CSV/JSON record, a Chrome trace of its first
problems); ``sweep`` a latency-vs-load curve (CSV, JSON, PNG); ``capacity`` the highest arrival
rate whose P99 meets the SLO for each configuration and dataset; ``compare`` HeteroReason pools
against GPU-only (t2) pools at equal device count and at equal active power. Sweeps and searches
run serially, on a local Dask cluster (``--workers N``) or an existing one (``--scheduler
tcp://HOST:PORT`` or ``$DASK_SCHEDULER_ADDRESS``); the results are the same. Bad input exits 2.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from heteroreason.model.experiments.plots import plot_fleet_curves
from heteroreason.model.files import InputError, output_problem
from heteroreason.model.fleet.devices import FleetError
from heteroreason.model.fleet.engine import simulate_fleet
from heteroreason.model.fleet.executor import executor
from heteroreason.model.fleet.metrics import fleet_metrics
from heteroreason.model.fleet.search import (
    FleetPoint,
    bundled_workload,
    capacities,
    compare_points,
    load_curve,
    point_record,
)
from heteroreason.model.fleet.workload import load_arrival_trace, sample_workload
from heteroreason.model.system.config import CONFIGS, FPGA_MODELS, Mode
from heteroreason.model.system.simulate import chrome_trace
from heteroreason.model.workload.bundled import BUNDLED_DIR

DATASETS = sorted(p.stem for p in BUNDLED_DIR.glob("*.jsonl"))


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text} must be > 0")
        return value
    return parse


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, not {value}")
    return value


def _options(parser: argparse.ArgumentParser, *, rate: bool = True) -> None:
    parser.add_argument("--config", choices=sorted(CONFIGS), default="config1")
    parser.add_argument("--mode", choices=[m.value for m in Mode], default="heteroreason")
    parser.add_argument("--fpga", choices=sorted(FPGA_MODELS), default=None,
                        help="the FPGA draft model (default: the artifact simulator's U280)")
    parser.add_argument("--pools", nargs=3, type=_positive(int), default=[1, 1, 1],
                        metavar=("DRAFTS", "PRMS", "TARGETS"))
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=["math500"])
    if rate:
        parser.add_argument("--rate", type=_positive(float), default=0.1,
                            help="mean arrivals per second")
    parser.add_argument("--cv", type=_positive(float), default=1.0,
                        help="coefficient of variation of the gaps (1: Poisson; gamma otherwise)")
    parser.add_argument("--problems", type=_positive(int), default=400)
    parser.add_argument("--seed", type=_non_negative, default=0)
    parser.add_argument("--routing", choices=["least", "round-robin"], default="least")
    parser.add_argument("--out", type=Path, default=Path("build/fleet"))


def _cluster_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=_positive(int), default=None,
                        help="a local Dask cluster of this many processes")
    parser.add_argument("--scheduler", default=None,
                        help="an existing Dask scheduler (tcp://HOST:PORT)")


def _point(args, **changes) -> FleetPoint:
    d, p, t = args.pools
    point = FleetPoint(config=args.config, mode=args.mode, fpga=args.fpga, drafts=d, prms=p,
                       targets=t, datasets=tuple(args.datasets),
                       rate_per_s=getattr(args, "rate", 0.1), cv=args.cv,
                       problems=args.problems, seed=args.seed, routing=args.routing)
    return replace(point, **changes)


def _write(rows: list[dict], out: Path, stem: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    csv_path, json_path = out / f"{stem}.csv", out / f"{stem}.json"
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, keys)
        writer.writeheader()
        writer.writerows(rows)
    json_path.write_text(json.dumps(rows, indent=1))
    return [csv_path, json_path]


def _print(rows: list[dict], keys: list[str]) -> None:
    print("  ".join(f"{k:>16}" for k in keys))
    for row in rows:
        cells = []
        for k in keys:
            v = row.get(k)
            cells.append(f"{v:>16.4g}" if isinstance(v, float) else f"{v!s:>16}")
        print("  ".join(cells))


def cmd_simulate(args) -> int:
    point = _point(args, slo_s=args.slo)
    spec = point.spec()
    workload = bundled_workload(point.datasets, point.mode)
    arrivals = load_arrival_trace(args.arrivals) if args.arrivals else point.arrivals()
    problems, times = sample_workload(workload, arrivals, point.problems, point.seed)
    start = time.perf_counter()
    run = simulate_fleet(spec, problems, times, keep_timelines=args.trace_problems)
    elapsed = time.perf_counter() - start
    m = fleet_metrics(run, slo_ms=None if args.slo is None else 1e3 * args.slo)
    if args.arrivals:
        print(f"  (arrivals from {args.arrivals}: --rate and --cv are not used)")
    print(f"{point.label}: {len(problems)} problems (seed {point.seed}), "
          f"{run.events} events in {elapsed:.2f} s ({run.events / elapsed:,.0f} events/s)")
    for key, value in m.as_dict().items():
        print(f"  {key}: {value}")
    paths = _write([point_record(point, run)], args.out, "simulate")
    events = []
    for k, tl in enumerate(run.timelines):
        trace = chrome_trace(tl)["traceEvents"]
        for e in trace:
            e["pid"] = k + 1
        events += trace
    trace_path = args.out / "simulate.trace.json"
    trace_path.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
    print("wrote", *paths, trace_path)
    return 0


def cmd_sweep(args) -> int:
    point = _point(args, slo_s=args.slo)
    with executor(workers=args.workers, scheduler=args.scheduler) as ex:
        start = time.perf_counter()
        rows = load_curve(ex, point, sorted(args.rates))
        print(f"{len(rows)} points in {time.perf_counter() - start:.1f} s")
    _print(rows, ["rate_per_s", "p50_s", "p99_s", "problems_per_s", "energy_j_per_problem",
                  "utilization.draft", "utilization.target"])
    paths = _write(rows, args.out, "sweep")
    png = plot_fleet_curves({point.label: rows}, args.out / "sweep.png", slo_s=args.slo)
    print("wrote", *paths, png)
    return 0


def cmd_capacity(args) -> int:
    points = [replace(_point(args), config=c, datasets=(d,)) for c in args.configs
              for d in args.datasets]
    return _capacities(args, points, "capacity")


def cmd_compare(args) -> int:
    points = []
    for c in args.configs:
        for d in args.datasets:
            points += compare_points(replace(_point(args), config=c, datasets=(d,)))
    return _capacities(args, points, "compare")


def _capacities(args, points, stem) -> int:
    with executor(workers=args.workers, scheduler=args.scheduler) as ex:
        start = time.perf_counter()
        rows = capacities(ex, points, args.slo)
        print(f"{len(rows)} capacity searches in {time.perf_counter() - start:.1f} s")
    _print(rows, ["system", "active_power_w", "capacity_per_s", "p99_at_capacity_s",
                  "p99_vanishing_load_s", "evaluations"])
    print("wrote", *_write(rows, args.out, stem))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("simulate", help="one fleet at one load")
    _options(p)
    p.add_argument("--slo", type=_positive(float), default=None, help="latency SLO in s")
    p.add_argument("--arrivals", type=Path, default=None,
                   help="an arrival trace (one time in s per line) instead of --rate")
    p.add_argument("--trace-problems", type=_non_negative, default=5,
                   help="problems in the Chrome trace")
    p.set_defaults(fn=cmd_simulate)
    p = sub.add_parser("sweep", help="latency against load")
    _options(p, rate=False)
    p.add_argument("--rates", nargs="+", type=_positive(float), required=True)
    p.add_argument("--slo", type=_positive(float), default=None)
    _cluster_options(p)
    p.set_defaults(fn=cmd_sweep)
    for name, fn in (("capacity", cmd_capacity), ("compare", cmd_compare)):
        p = sub.add_parser(name, help=fn.__doc__)
        _options(p, rate=False)
        p.add_argument("--configs", nargs="+", choices=sorted(CONFIGS), default=["config1"])
        p.add_argument("--slo", type=_positive(float), required=True, help="P99 SLO in s")
        _cluster_options(p)
        p.set_defaults(fn=fn)
    args = parser.parse_args(argv)
    problem = output_problem(args.out, folder=True)
    if problem:
        parser.error(problem)
    try:
        return args.fn(args)
    except (FleetError, InputError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
