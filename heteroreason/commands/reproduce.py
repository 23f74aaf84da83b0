"""The main job: does HeteroReason beat GPU-only serving, with which FPGA, against which GPU
draft? The paper's evaluation replayed on the system scheduler, the verdict first.

    heteroreason reproduce                    # bundled synthetic traces, both configs
    heteroreason reproduce --gpu-draft vllm-a100 --full
    A=../shared/data/heteroreason-artifact/Hardware/inputs/Config1
    heteroreason reproduce --traces $A/with_bt --no-bt-traces $A/no_bt \\
        --prompt-tokens 128 --configs config1

It prints the verdict (at most 100 columns): first a sentence per configuration, then per
configuration and dataset the latency of the three-GPU baseline, of the GPU-only t2 and of
HeteroReason with each FPGA model, its speed-up over both, J/token and the FPGA draft's
break-even against t2.
``--full`` adds the full table (every mode, with and without backtracking, the paper's figures
beside ours) and every input's source. Writes OUT/reproduction.{csv,json} (the full table, a
row per mode and FPGA model), OUT/verdict.{csv,json}, OUT/sources.csv, OUT/run.json (the
command, version, commit and models), OUT/ablation.png, OUT/breakdown.png, OUT/gantt.png and
OUT/gantt.trace.json (open it in chrome://tracing or Perfetto). Bad input exits with status 2.
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import signal
import sys
import textwrap
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

from heteroreason.commands.common import (
    check_workers,
    command_parser,
    note,
    run_staged,
    write_run_record,
)
from heteroreason.model.experiments.report import format_table
from heteroreason.model.experiments.reproduce import (
    SOURCES_HEADER,
    ReproRow,
    add_trace_set_options,
    bundled_sets,
    check_companions,
    check_trace_set_options,
    config_sources,
    load_trace_sets,
    ordered_datasets,
    reproduce,
    synthetic_no_backtrack_sets,
    write_rows,
    write_sources,
)
from heteroreason.model.experiments.verdict import (
    BREAK_EVEN_BASE,
    VERDICT_FPGAS,
    VerdictRow,
    format_verdict,
    verdict_rows,
)
from heteroreason.model.system.config import system_config
from heteroreason.model.system.scheduler import ScheduleError
from heteroreason.model.system.simulate import chrome_trace, write_json
from heteroreason.model.workload.bundled import BUNDLED_PROBLEMS, BUNDLED_SEED
from heteroreason.model.workload.traces import TraceError


def _gantt(rows, results, config: str, fpgas: list[str], out: Path) -> list[Path]:
    """The Gantt chart and Chrome trace of one problem of ``rows``' set (one that backtracks,
    in few steps, if any): baseline, t2 and HeteroReason with this project's U280 design (or
    the first FPGA model)."""
    from heteroreason.model.experiments.plots import plot_gantt

    dataset = rows[0].dataset
    base = results[(config, dataset, True, "baseline", "")]
    pick = next((i for i, r in enumerate(base.runs)
                 if r.trace.backtracks and len(r.trace.steps) <= 14),
                next((i for i, r in enumerate(base.runs)
                      if any(s.outcome != "accept" for s in r.trace.steps)), 0))
    fpga = BREAK_EVEN_BASE if BREAK_EVEN_BASE in fpgas else fpgas[0]
    runs = [results[(config, dataset, True, m, f)].runs[pick]
            for m, f in (("baseline", ""), ("t2", ""), ("heteroreason", fpga))]
    return [plot_gantt(runs, out / "gantt.png"),
            write_json(chrome_trace(runs[-1]), out / "gantt.trace.json")]


def _replay(task: tuple[str, str], with_bt, without_bt, fpgas: list[str], gpu_draft: str,
            plotted: tuple[Path, tuple[str, str]] | None, verdict: bool):
    """One configuration and dataset: its rows, its verdict, and (when ``plotted`` is
    ``(folder, this task)``) the Gantt chart drawn into the folder: what a worker runs."""
    config_name, dataset = task
    mine = {dataset: with_bt[dataset]}
    first = plotted is not None and plotted[1] == task
    rows, results = reproduce([config_name], mine,
                              {dataset: without_bt[dataset]} if without_bt and
                              dataset in without_bt else None,
                              fpgas=fpgas, gpu_draft=gpu_draft,
                              keep_runs_for=task if first else None)
    drawn = _gantt(rows, results, config_name, fpgas, plotted[0]) if first else []
    verdicts = verdict_rows(rows, mine, gpu_draft=gpu_draft) if verdict else []
    return rows, drawn, verdicts


def _ignore_interrupts() -> None:
    """A worker leaves Ctrl-C and SIGTERM to the parent, which stops the run and cleans up."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _replay_all(configs: list[str], workers: int, with_bt, without_bt, *args):
    """:func:`_replay` of every configuration and dataset, in ``workers`` processes (forked
    after the FPGA designs are built, so each finds them built; the plotting library loads
    here while they run); the same figures in the same order however many."""
    check_companions(with_bt, without_bt)
    for name in configs:  # the designs' search runs once, here, before any fork
        for fpga in args[0]:
            system_config(name, fpga=fpga, gpu_draft=args[1])
    tasks = [(name, dataset) for name in configs for dataset in ordered_datasets(with_bt)]
    plot_dir, *others = args[2:]
    plotted = None if plot_dir is None else (plot_dir, tasks[0])  # the first set is drawn
    rest = [with_bt, without_bt, args[0], args[1], plotted, *others]
    if workers > 1 and len(tasks) > 1:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=context,
                                 initializer=_ignore_interrupts) as pool:
            futures = [pool.submit(_replay, task, *rest) for task in tasks]
            if plot_dir is not None:
                import heteroreason.model.experiments.plots  # noqa: F401
            parts = [f.result() for f in futures]
    else:
        parts = [_replay(task, *rest) for task in tasks]
    rows, drawn, verdicts = [], [], []
    for part_rows, part_drawn, part_verdicts in parts:
        rows += part_rows
        drawn += part_drawn
        verdicts += part_verdicts
    return rows, drawn, verdicts


def _write_verdict(verdicts: list[VerdictRow], out: Path) -> list[Path]:
    """OUT/verdict.csv (a row per configuration, dataset and FPGA model) and verdict.json."""
    header = ("config", "dataset", "fpga", "baseline s", "t2 s", "heteroreason s", "x t2",
              "x baseline", "baseline J/token", "t2 J/token", "heteroreason J/token",
              "break-even vs t2 ms/token")
    csv_path, json_path = out / "verdict.csv", out / "verdict.json"
    with csv_path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for v in verdicts:
            even = "" if v.break_even.ms_per_token is None else f"{v.break_even.ms_per_token:.3f}"
            for o in v.fpgas:
                writer.writerow([v.config, v.dataset, o.fpga, f"{v.baseline_s:.3f}",
                                 f"{v.t2_s:.3f}", f"{o.latency_s:.3f}", f"{o.over_t2:.3f}",
                                 f"{o.over_baseline:.3f}", f"{v.baseline_j_per_token:.3f}",
                                 f"{v.t2_j_per_token:.3f}", f"{o.j_per_token:.3f}", even])
    json_path.write_text(json.dumps([asdict(v) for v in verdicts], indent=1, default=str))
    return [csv_path, json_path]


def _trace_sets(args):
    """The traces with and without backtracking, and where each came from."""
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
    return with_bt, without_bt, source, no_bt_source


def _models(configs: list[str], fpgas: list[str], gpu_draft: str) -> dict:
    """Every model and preset of the run with its figures' source (for run.json)."""
    models: dict = {}
    for name in configs:
        for fpga in fpgas:
            for row in config_sources(system_config(name, fpga=fpga, gpu_draft=gpu_draft)):
                models[f"{name} {fpga} {row[1]}"] = {"model": row[2], "figures": row[3],
                                                     "source": row[4]}
    return models


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = command_parser(__doc__, prog=prog)
    add_trace_set_options(parser, default_fpgas=list(VERDICT_FPGAS),
                          fpgas_help="the FPGA draft models HeteroReason runs with (the "
                                     "verdict compares artifact, rtl-u280-300 and rtl-v80)")
    parser.add_argument("--no-bt-traces", nargs="+", type=Path, default=None,
                        help="traces without backtracking (default with bundled traces: their "
                             "synthetic RSD companions; none with --traces)")
    parser.add_argument("--out", type=Path, default=Path("build/reproduce"),
                        help="the output directory")
    parser.add_argument("--full", action="store_true",
                        help="also print the full table and every input's source")
    parser.add_argument("--no-plots", action="store_true", help="write no plots")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes replaying the configurations and datasets at once (1: in "
                             "this one; "
                             "the figures are the same)")
    args = parser.parse_args(argv)
    check_workers(parser, args.workers)
    check_trace_set_options(parser, args)
    return run_staged(parser, args, argv, _run)  # whole or absent; one writer at a time


def _run(args, argv: list[str], stage: Path) -> int:
    """The replays, the verdict and the tables printed, every output written into ``stage``
    (moved into ``args.out`` once all are written)."""
    verdict_wanted = all(f in args.fpgas for f in VERDICT_FPGAS)
    start = time.monotonic()
    try:
        with_bt, without_bt, source, no_bt_source = _trace_sets(args)
        plotted = None if args.no_plots else stage
        note(f"replaying {sum(map(len, with_bt.values()))} problems per mode and FPGA model "
             f"({source})")
        rows, drawn, verdicts = _replay_all(args.configs, args.workers, with_bt, without_bt,
                                              args.fpgas, args.gpu_draft, plotted,
                                              verdict_wanted)
    except (TraceError, ScheduleError, ValueError) as exc:
        print(f"heteroreason reproduce: error: {exc}", file=sys.stderr)
        return 2
    elapsed = time.monotonic() - start

    if verdicts:
        print(format_verdict(verdicts, gpu_draft=args.gpu_draft))
    else:
        note(f"no verdict: it compares the FPGA models {', '.join(VERDICT_FPGAS)} (--fpgas)")
    print(textwrap.fill(f"traces: {source}; without backtracking: {no_bt_source}", 100))
    configs = [system_config(name, gpu_draft=args.gpu_draft) for name in args.configs]
    if args.full or not verdicts:
        print()
        print("speedup: the latency of the mode in 'vs' on the same traces over the row's; "
              "x t2: t2's over the row's; J/token = busy-average system power x latency / "
              "drafted tokens (the paper's method)")
        print(format_table(ReproRow.HEADER, [r.cells() for r in rows]))
        print("the inputs of each configuration and their sources (OUT/sources.csv):")
        print(format_table(SOURCES_HEADER, [list(r) for c in configs for r in config_sources(c)]))
    written = [*write_rows(rows, stage), write_sources(configs, stage)]
    if verdicts:
        written += _write_verdict(verdicts, stage)
    if not args.no_plots:
        from heteroreason.model.experiments.plots import plot_ablation, plot_breakdown

        written += [plot_ablation(rows, stage / "ablation.png"),
                    plot_breakdown(rows, stage / "breakdown.png"), *drawn]
    written.append(write_run_record(
        stage, command="reproduce", argv=argv,
        models=_models(args.configs, args.fpgas, args.gpu_draft),
        seeds={"bundled traces": BUNDLED_SEED} if args.traces is None else {},
        outputs=written))
    problems = sum(r.metrics.problems for r in rows)
    print(f"\n{problems} problem replays in {elapsed:.1f} s; wrote {args.out}/ ("
          + ", ".join(p.name for p in written) + ")")
    return 0
