#!/usr/bin/env python3
"""Fleet-scale serving: problems arriving over pools of draft devices, PRM GPUs and target GPUs.

    heteroreason fleet simulate --rate 0.2 --pools 4 2 2 --out build/fleet
    heteroreason fleet sweep --rates 0.05 0.1 0.2 0.4 --out build/fleet --workers 2
    heteroreason fleet capacity --slo 60 --configs config1 config2 --out build/fleet
    heteroreason fleet compare --slo 60 --pools 4 1 1 --out build/fleet
    heteroreason fleet costs --config config1      # the cost model and its sources
    heteroreason fleet size --slo 120 --drafts 1 2 4 8 --prms 1 2 --targets 1 2 --rate 0.2
    heteroreason fleet size --slo 120 --contexts 4 16 --per-pass 1 2 4   # the board's N and B

``simulate`` runs one fleet at one load (metrics, a CSV/JSON record, Chrome traces of its first
problems and of every device over a window); ``sweep`` latency against load (CSV, JSON, PNG);
``capacity`` the highest arrival rate whose P99 meets the SLO for each configuration and dataset;
``compare`` HeteroReason pools against GPU-only (t2) pools at equal device count and at equal
active power, its verdict first, and how much of the batch-1 speed-up survives at 50 % and 90 %
of capacity;
``size`` the capacity of every pool size of a grid, the frontier of capacity against power, the
pool ratio of the most goodput per kW and (with ``--rate``) the least-power one that carries that
load; ``costs`` the batched cost model's coefficients with their sources. The FPGA is this
project's U280 design built for a pass of four, as the RTL builds it (its MultiDraftEngine holds
32 problems and drafts up to four a pass, priced by the calibrated pass); ``--contexts N`` and
``--per-pass B`` make a board hold N problems and draft B a pass (more problems than the
design's is a what-if; ``--fpga rtl-u280-300``: one problem a board). Sweeps and searches run
serially, on a local Dask cluster (``--workers N``) or an existing one (``--scheduler
tcp://HOST:PORT`` or ``$DASK_SCHEDULER_ADDRESS``); the results are the same. Bad input exits 2.
"""

from __future__ import annotations

import csv
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from heteroreason.commands.common import (
    OutputBusy,
    ProgressBar,
    command_parser,
    in_stage,
    non_negative,
    positive,
)
from heteroreason.commands.fleet_options import cluster_options, fleet_options, fleet_point
from heteroreason.model.executor import executor, run_chunked
from heteroreason.model.experiments.plots import plot_fleet_curves, plot_fleet_sizing
from heteroreason.model.experiments.report import format_table
from heteroreason.model.files import InputError, output_problem
from heteroreason.model.fleet.devices import FleetError
from heteroreason.model.fleet.engine import FleetSpec, simulate_fleet
from heteroreason.model.fleet.metrics import fleet_metrics
from heteroreason.model.fleet.search import (
    CAPACITY_SPAN_SLOS,
    bundled_workload,
    capacities,
    compare_points,
    evaluate,
    load_curve,
    point_record,
    power_frontier,
    size_points,
    speedup_points,
    speedup_rows,
)
from heteroreason.model.fleet.timeline import fleet_chrome_trace
from heteroreason.model.fleet.verdict import fleet_verdict
from heteroreason.model.fleet.workload import load_arrival_trace, sample_workload
from heteroreason.model.system.config import CONFIGS, ServingMode, system_config
from heteroreason.model.system.simulate import chrome_trace
from heteroreason.model.timing.batch_cost import fit_per_item_ms, published_checks


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


def _final(args, paths: list[Path]) -> list[Path]:
    """Where ``paths``, written into the staging folder, end up: in the output directory."""
    return [args.final_out / Path(p).relative_to(args.out) for p in paths]


def _print(rows: list[dict], keys: list[str]) -> None:
    """The records' ``keys`` as an aligned table (each column as wide as its widest cell)."""
    print(format_table(keys, [[f"{v:.4g}" if isinstance(v, float) else str(v)
                               for v in (row.get(k) for k in keys)] for row in rows]))


def cmd_simulate(args) -> int:
    point = fleet_point(args, slo_s=args.slo)
    spec = point.spec()
    workload = bundled_workload(point.datasets, point.mode)
    arrivals = load_arrival_trace(args.arrivals) if args.arrivals else point.arrivals()
    problems, times = sample_workload(workload, arrivals, point.problems, point.seed)
    start = time.perf_counter()
    window_ms = times[0] + 1e3 * args.trace_window
    run = simulate_fleet(spec, problems, times, keep_timelines=args.trace_problems,
                         record_until_ms=window_ms)
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
    devices_path = args.out / "simulate.devices.trace.json"
    devices_path.write_text(json.dumps(fleet_chrome_trace(run, window_ms)))
    print("wrote", *_final(args, [*paths, trace_path, devices_path]))
    return 0


def cmd_sweep(args) -> int:
    curves = {}
    with executor(workers=args.workers, scheduler=args.scheduler,
                  progress=ProgressBar(f"fleet {args.command}", "chunk")) as ex:
        start = time.perf_counter()
        for mode in args.modes:
            point = fleet_point(args, slo_s=args.slo, mode=mode)
            curves[point.label] = load_curve(ex, point, sorted(args.rates))
        print(f"{len(args.modes) * len(args.rates)} points in {time.perf_counter() - start:.1f} s")
    rows = [row for curve in curves.values() for row in curve]
    _print(rows, ["mode", "rate_per_s", "p50_s", "p99_s", "problems_per_s", "goodput_per_s",
                  "energy_j_per_problem", "utilization.draft", "utilization.target"])
    paths = _write(rows, args.out, "sweep")
    png = plot_fleet_curves(curves, args.out / "sweep.png", slo_s=args.slo)
    print("wrote", *_final(args, [*paths, png]))
    return 0


def cmd_capacity(args) -> int:
    """The highest arrival rate each configuration and dataset carries within the P99 SLO."""
    points = [replace(fleet_point(args), config=c, datasets=(d,)) for c in args.configs
              for d in args.datasets]
    with executor(workers=args.workers, scheduler=args.scheduler,
                  progress=ProgressBar(f"fleet {args.command}", "chunk")) as ex:
        _capacities(ex, args, points, "capacity")
    return 0


def cmd_compare(args) -> int:
    """Every serving mode on the same pools: capacities, and speed-ups at a common load."""
    points = []
    for c in args.configs:
        for d in args.datasets:
            points += compare_points(replace(fleet_point(args), config=c, datasets=(d,)))
    with executor(workers=args.workers, scheduler=args.scheduler,
                  progress=ProgressBar(f"fleet {args.command}", "chunk")) as ex:
        rows, timed = _capacity_rows(ex, points, args.slo)
        pairs = []
        for k in range(0, len(points), 3):
            base, cap_base = points[k], rows[k]["capacity_per_s"]
            for fleet, row in ((points[k + 1], rows[k + 1]), (points[k + 2], rows[k + 2])):
                span = {"slo_s": args.slo, "min_span_s": CAPACITY_SPAN_SLOS * args.slo}
                pairs.append((replace(base, **span), replace(fleet, **span),
                              min(cap_base, row["capacity_per_s"])))
        start = time.perf_counter()
        records = run_chunked(ex, evaluate, speedup_points(pairs), chunk_size=2)
    # the answer first, as the main job gives it; then how it was reached
    print(fleet_verdict(rows, args.slo, fpga=args.fpga))
    print()
    print(timed)
    print(f"{len(records)} speed-up points in {time.perf_counter() - start:.1f} s "
          "(both fleets at 0 / 50 / 90 % of the lower capacity)")
    paths = _report_capacities(args, rows, "compare")
    speedups = speedup_rows(records)
    _print(speedups, ["config", "datasets", "fleet", "load_fraction", "rate_per_s", "t2_mean_s",
                      "hr_mean_s", "speedup_mean", "speedup_p50", "retained_of_batch1"])
    print("wrote", *_final(args, [*paths, *_write(speedups, args.out, "compare_speedup")]))
    return 0


def cmd_size(args) -> int:
    points = size_points(fleet_point(args), args.drafts, args.prms, args.targets, args.contexts,
                         args.per_pass)
    with executor(workers=args.workers, scheduler=args.scheduler,
                  progress=ProgressBar(f"fleet {args.command}", "chunk")) as ex:
        start = time.perf_counter()
        rows = capacities(ex, points, args.slo)
        print(f"{len(rows)} capacity searches in {time.perf_counter() - start:.1f} s")
    for row, front in zip(rows, power_frontier(rows), strict=True):
        row["frontier"] = front
    _print(rows, ["system", "board_contexts", "per_pass", "active_power_w", "capacity_per_s",
                  "goodput_per_kw", "average_power_at_capacity_w", "frontier"])
    best = max(rows, key=lambda r: r["goodput_per_kw"])
    print(f"most goodput per kW: {best['drafts']}:{best['prms']}:{best['targets']}"
          f"{_contexts(best)} "
          f"({best['goodput_per_kw']:.3f} problems/s per kW at its capacity "
          f"{best['capacity_per_s']:.4f}/s)")
    if args.rate is not None:
        fits = [r for r in rows if r["capacity_per_s"] >= args.rate]
        if fits:
            low = min(fits, key=lambda r: (r["active_power_w"], -r["capacity_per_s"]))
            print(f"least active power carrying {args.rate:g}/s at the SLO: "
                  f"{low['drafts']}:{low['prms']}:{low['targets']}{_contexts(low)} "
                  f"({low['active_power_w']:.0f} W,"
                  f" capacity {low['capacity_per_s']:.4f}/s)")
        else:
            print(f"no pool size of the grid carries {args.rate:g}/s at the SLO "
                  f"(largest capacity {max(r['capacity_per_s'] for r in rows):.4f}/s)")
    paths = _write(rows, args.out, "size")
    png = plot_fleet_sizing(rows, args.out / "size.png", rate_per_s=args.rate)
    print("wrote", *_final(args, [*paths, png]))
    return 0


def _contexts(row: dict) -> str:
    n = row["board_contexts"]
    passes = f", {row['per_pass']} a pass" if row["per_pass"] > 1 else ""
    return "" if n is None else f" ({n} problem{'s' if n != 1 else ''} a board{passes})"


def cmd_costs(args) -> int:
    spec = FleetSpec(system_config(args.config), ServingMode.HETEROREASON)
    for role in ("draft", "prm", "target"):
        cost = spec.cost(role)
        print(f"{role}: {cost.name}")
        for key, source in cost.sources:
            print(f"  {key:>18} = {getattr(cost, key):<12.6g} {source}")
    target = spec.config.target
    print(f"published checks of {target.name} batched (modelled / published):")
    for check in published_checks(target):
        print(f"  {check.what:<40} {check.modelled:9.3f} / {check.published:9.3f} {check.unit}"
              f"  = {check.ratio:.2f}   [{check.source}]")
    print(f"fitted per-item overhead: {fit_per_item_ms(target):.2f} ms (PER_ITEM_MS in use: "
          f"{spec.per_item_ms:.2f} ms)")
    return 0


def _capacities(ex, args, points, stem) -> list[dict]:
    rows, timed = _capacity_rows(ex, points, args.slo)
    print(timed)
    print("wrote", *_final(args, _report_capacities(args, rows, stem)))
    return rows


def _capacity_rows(ex, points, slo_s: float) -> tuple[list[dict], str]:
    """The capacity searches' rows, and a line saying how long they took."""
    start = time.perf_counter()
    rows = capacities(ex, points, slo_s)
    return rows, f"{len(rows)} capacity searches in {time.perf_counter() - start:.1f} s"


def _report_capacities(args, rows: list[dict], stem: str) -> list[Path]:
    _print(rows, ["system", "board_contexts", "active_power_w", "capacity_per_s",
                  "p99_at_capacity_s", "p99_vanishing_load_s", "goodput_per_kw", "evaluations"])
    return _write(rows, args.out, stem)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = command_parser(__doc__, prog=prog)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("simulate", help="one fleet at one load")
    fleet_options(p)
    p.add_argument("--slo", type=positive(float, "slo"), default=None,
                   help="latency SLO in s")
    p.add_argument("--arrivals", type=Path, default=None,
                   help="an arrival trace (one time in s per line) instead of --rate")
    p.add_argument("--trace-problems", type=non_negative, default=5,
                   help="problems in the per-problem Chrome trace")
    p.add_argument("--trace-window", type=positive(float, "window"), default=120.0,
                   help="seconds from the first arrival in the devices' Chrome trace")
    p.set_defaults(fn=cmd_simulate)
    p = sub.add_parser("sweep", help="latency against load")
    fleet_options(p, rate=False, modes=True)
    p.add_argument("--rates", nargs="+", type=positive(float, "rate"), required=True,
                   help="the mean arrival rates swept, per second")
    p.add_argument("--slo", type=positive(float, "slo"), default=None,
                   help="a P99 latency SLO in s, drawn on the plot")
    cluster_options(p)
    p.set_defaults(fn=cmd_sweep)
    for name, fn in (("capacity", cmd_capacity), ("compare", cmd_compare)):
        p = sub.add_parser(name, help=fn.__doc__)
        fleet_options(p, rate=False, configs=True)
        p.add_argument("--slo", type=positive(float, "slo"), required=True,
                       help="P99 SLO in s")
        cluster_options(p)
        p.set_defaults(fn=fn)
    p = sub.add_parser("costs", help="the batched cost model's coefficients, their sources "
                                     "and its published checks")
    p.add_argument("--config", choices=sorted(CONFIGS), default="config1",
                   help="the system configuration")
    p.add_argument("--out", type=Path, default=Path("build/fleet"),
                   help="the output directory")
    p.set_defaults(fn=cmd_costs)
    p = sub.add_parser("size", help="capacity of every pool size of a grid; the frontier")
    fleet_options(p, rate=False, grid=True)
    p.add_argument("--slo", type=positive(float, "slo"), required=True,
                       help="P99 SLO in s")
    p.add_argument("--drafts", nargs="+", type=positive(int, "pool"), default=[1, 2, 4],
                   help="draft pool sizes of the grid")
    p.add_argument("--prms", nargs="+", type=positive(int, "pool"), default=[1, 2],
                   help="PRM pool sizes of the grid")
    p.add_argument("--targets", nargs="+", type=positive(int, "pool"), default=[1, 2],
                   help="target pool sizes of the grid")
    p.add_argument("--rate", type=positive(float, "rate"), default=None,
                   help="a load to carry: report the least-power pool size that does")
    cluster_options(p)
    p.set_defaults(fn=cmd_size)
    args = parser.parse_args(argv)
    # a subcommand that compares several configurations or modes starts from the first
    if hasattr(args, "modes"):
        args.mode = args.modes[0]
    if hasattr(args, "configs"):
        args.config = args.configs[0]
    problem = output_problem(args.out, folder=True)
    if problem:
        parser.error(problem)
    def body(stage):
        args.final_out, args.out = args.out, stage
        return args.fn(args)

    try:  # whole or absent (an error leaves no file); one writer at a time
        return in_stage(args.out, body)
    except (FleetError, InputError, RuntimeError, OutputBusy) as exc:
        print(f"heteroreason fleet: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
