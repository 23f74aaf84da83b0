"""Trace-driven discrete-event simulation of FPGA-GPU co-execution, one problem at a time
(batch 1), on four resources: the draft device, the PRM GPU, the target GPU and the link.

Every step event of a trace is replayed 1:1. Costs come from :class:`SystemConfig`:

* drafting step ``j`` with ``kv`` validated tokens before it: ``draft.decode_ms(d_j, kv)``;
* each transfer of token ids: ``link.tokens_ms(n)``; the FPGA's prompt KV: ``kv_migration_ms``;
* PRM scoring of a step: ``prm.prefill_ms(context + step)`` (the whole ``[z_i, y_i]``);
* target generation: ``target.prefill_ms(new context tokens)`` for what its KV cache lacks,
  then ``target.decode_ms(t_j, kv)``;
* the GPU draft after a refinement: ``draft.prefill_ms(t_j)``; the FPGA draft instead ingests
  the target's tokens as they stream (shadow synchronisation), finishing at
  ``max(start + ingest_ms(t_j), last token's arrival + ingest of one token)``.

The sequential modes' state machine is :class:`~heteroreason.model.system.sequential.
SequentialReplay`, the overlapped modes' :class:`~heteroreason.model.system.overlapped.
OverlappedReplay`. The result is a timeline of intervals; :mod:`heteroreason.model.system.
metrics` derives every metric from it. Invariants are checked on every run
(:func:`check_timeline`).
"""

from __future__ import annotations

import itertools

from heteroreason.model.system.config import ServingMode, SystemConfig
from heteroreason.model.system.contexts import check_contexts
from heteroreason.model.system.overlapped import PREFETCH_LIMIT_TOKENS, OverlappedReplay
from heteroreason.model.system.records import (
    STATIONS,
    Interval,
    JobKind,
    ProblemRun,
    Station,
)
from heteroreason.model.system.replay import ScheduleError
from heteroreason.model.system.sequential import SequentialReplay
from heteroreason.model.workload.traces import ProblemTrace, check_trace

__all__ = [
    "PREFETCH_LIMIT_TOKENS",
    "STATIONS",
    "Interval",
    "ProblemRun",
    "ScheduleError",
    "Station",
    "check_timeline",
    "simulate_problem",
]

_EPS = 1e-9


def simulate_problem(trace: ProblemTrace, config: SystemConfig, mode: ServingMode) -> ProblemRun:
    """Replay one problem; raises :class:`ScheduleError` if the mode cannot replay it (a
    backtracking trace in a mode without, a step beyond a model's context) and
    :class:`~heteroreason.model.workload.traces.TraceError` if the trace is not one the loader
    would accept."""
    check_trace(trace)
    if not mode.backtracking and trace.backtracks:
        raise ScheduleError(f"problem {trace.problem_id} ({trace.dataset}) has "
                            f"{trace.backtracks} backtrack(s): mode {mode.value} replays "
                            "traces without backtracking")
    check_contexts(trace, config, mode)
    replay = OverlappedReplay if mode.overlapped else SequentialReplay
    run = replay(trace, config, mode).run()
    check_timeline(run)
    return run


def check_timeline(run: ProblemRun) -> None:
    """Invariants: no resource busy twice at once, no interval backwards or past the end,
    every accepted token accounted for exactly once."""
    where = f"problem {run.trace.problem_id} ({run.trace.dataset}, {run.mode.value})"
    by_resource: dict[Station, list[Interval]] = {r: [] for r in STATIONS}
    for iv in run.intervals:
        if iv.end_ms < iv.start_ms - _EPS:
            raise ScheduleError(f"{where}: {iv} ends before it starts")
        if iv.end_ms > run.latency_ms + _EPS:
            raise ScheduleError(f"{where}: {iv} ends after the problem ({run.latency_ms} ms)")
        if iv.kind is not JobKind.STALL:
            by_resource[iv.resource].append(iv)
    for res, items in by_resource.items():
        items.sort(key=lambda iv: (iv.start_ms, iv.end_ms))
        for a, b in itertools.pairwise(items):
            if b.start_ms < a.end_ms - _EPS:
                raise ScheduleError(f"{where}: {res} busy twice at once: {a} and {b}")
    if run.output_tokens != run.trace.output_tokens:
        raise ScheduleError(f"{where}: {run.output_tokens} tokens accepted, the trace's chain "
                            f"has {run.trace.output_tokens}")
