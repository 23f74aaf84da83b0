"""A fleet run's devices as a timeline in Chrome's trace-event format (chrome://tracing,
Perfetto): one process per pool, one thread per device, a slice per job or GPU segment (its batch
size and iterations as arguments), and a row of the problems that arrived in the window (arrival
to last verdict, admission marked)."""

from __future__ import annotations

from heteroreason.model.fleet.engine import FleetRun

__all__ = ["fleet_chrome_trace"]

POOLS = ("draft", "link", "prm", "target")


def fleet_chrome_trace(run: FleetRun, until_ms: float) -> dict:
    """The run's recorded device activity (``simulate_fleet(record_until_ms=...)``) and the
    problems arriving before ``until_ms``."""
    pids = {pool: k for k, pool in enumerate(POOLS, start=1)}
    problems_pid = len(POOLS) + 1
    events: list[dict] = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                           "args": {"name": pool}} for pool, pid in pids.items()]
    events.append({"name": "process_name", "ph": "M", "pid": problems_pid, "tid": 0,
                   "args": {"name": "problems"}})
    tids: dict[str, int] = {}
    for d in run.devices:
        tids[d.name] = len(tids) + 1
        events.append({"name": "thread_name", "ph": "M", "pid": pids[d.pool],
                       "tid": tids[d.name], "args": {"name": d.name}})
    for a in run.activity:
        args = {"items": a.items, "iterations": a.iterations}
        if a.problem >= 0:
            args["problem"] = a.problem
        name = a.what if a.problem >= 0 else f"{a.what} x{a.items}"
        events.append({"name": name, "ph": "X", "pid": pids[a.pool], "tid": tids[a.device],
                       "ts": 1e3 * a.start_ms, "dur": 1e3 * (a.end_ms - a.start_ms),
                       "args": args})
    rows: list[float] = []  # when each row of the problems' process is free again
    for p in sorted(run.problems, key=lambda p: p.arrival_ms):
        if p.arrival_ms >= until_ms:
            break
        row = next((k for k, free in enumerate(rows) if free <= p.arrival_ms), len(rows))
        if row == len(rows):
            rows.append(0.0)
        rows[row] = p.done_ms
        events.append({"name": f"{p.dataset}/{p.problem_id}", "ph": "X", "pid": problems_pid,
                       "tid": row + 1, "ts": 1e3 * p.arrival_ms, "dur": 1e3 * p.latency_ms,
                       "args": {"problem": p.index,
                                "admission_wait_ms": p.admitted_ms - p.arrival_ms,
                                "output_tokens": p.output_tokens,
                                **{f"wait_{pool}_ms": ms for pool, ms in p.waits_ms}}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"fleet": f"{run.spec.config.name}/{run.spec.mode.value}/"
                                   f"{run.spec.drafts}:{run.spec.prms}:{run.spec.targets}",
                          "window_ms": until_ms}}
