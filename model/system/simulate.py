"""Replay whole trace sets: the entry point for users of the system model.

    from heteroreason.model.system.simulate import simulate_file
    result = simulate_file("traces.jsonl", config="config1", mode="heteroreason")
    print(result.summary.latency_s, result.summary.j_per_token_system)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from heteroreason.model.files import write_text_atomic
from heteroreason.model.system.config import ServingMode, SystemConfig, system_config
from heteroreason.model.system.metrics import (
    DatasetMetrics,
    MetricsTotals,
    ProblemMetrics,
    problem_metrics,
)
from heteroreason.model.system.records import STATIONS, ProblemRun
from heteroreason.model.system.scheduler import simulate_problem
from heteroreason.model.workload.traces import ProblemTrace, load_traces

__all__ = ["SimulationResult", "chrome_trace", "simulate", "simulate_file", "timeline_json"]


@dataclass(frozen=True)
class SimulationResult:
    """A trace set replayed on one system in one mode: every problem's run and metrics, and the
    set's summary."""

    config: SystemConfig
    mode: ServingMode
    runs: tuple[ProblemRun, ...]
    metrics: tuple[ProblemMetrics, ...]
    summary: DatasetMetrics


def simulate(traces: Sequence[ProblemTrace], config: SystemConfig | str,
             mode: ServingMode | str, *, keep_runs: bool | int = True) -> SimulationResult:
    """Replay every trace; any problem the mode cannot replay stops the whole run (no metric
    is ever computed from a partial replay). ``keep_runs``: keep every problem's timeline and
    metrics (True), none (False: ``runs`` and ``metrics`` are empty) or the first
    ``keep_runs``; the set's summary is summed as the problems are replayed, so without
    timelines memory does not grow with the number of problems."""
    if isinstance(config, str):
        config = system_config(config)
    if isinstance(mode, str):
        mode = ServingMode.parse(mode)
    if not traces:
        raise ValueError("no traces to simulate")
    limit = len(traces) if keep_runs is True else int(keep_runs)
    runs, metrics, totals = [], [], MetricsTotals()
    for trace in traces:
        run = simulate_problem(trace, config, mode)
        problem = problem_metrics(run)
        totals.add(problem)
        if len(runs) < limit:
            runs.append(run)
            metrics.append(problem)
    return SimulationResult(config, mode, tuple(runs), tuple(metrics), totals.summary())


def simulate_file(path: Path | str, *, config: str = "config1", mode: str = "heteroreason",
                  fpga: str | None = None) -> SimulationResult:
    return simulate(load_traces(path), system_config(config, fpga=fpga), ServingMode.parse(mode))


def timeline_json(run: ProblemRun) -> dict:
    return {
        "dataset": run.trace.dataset, "problem_id": run.trace.problem_id,
        "config": run.config.name, "mode": run.mode.value, "latency_ms": run.latency_ms,
        "intervals": [{"resource": iv.resource, "kind": iv.kind, "start_ms": iv.start_ms,
                       "end_ms": iv.end_ms, "step": iv.step, "tokens": iv.tokens,
                       "wasted": iv.wasted} for iv in run.intervals],
    }


def chrome_trace(run: ProblemRun) -> dict:
    """The timeline in Chrome's trace-event format (chrome://tracing, Perfetto)."""
    tids = {r: i for i, r in enumerate(STATIONS, start=1)}
    events = [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": res}}
              for res, tid in tids.items()]
    for iv in sorted(run.intervals, key=lambda iv: iv.start_ms):
        events.append({
            "name": iv.kind + (" (wasted)" if iv.wasted else ""), "ph": "X", "pid": 1,
            "tid": tids[iv.resource], "ts": 1e3 * iv.start_ms, "dur": 1e3 * iv.duration_ms,
            "args": {"step": iv.step, "tokens": iv.tokens}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"problem": f"{run.trace.dataset}/{run.trace.problem_id}",
                          "mode": run.mode.value, "config": run.config.name}}


def write_json(obj, path: Path | str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(obj, indent=1))
    return path
