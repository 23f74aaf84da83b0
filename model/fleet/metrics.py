"""Fleet metrics, all from a run's recorded problems and device records.

Latency: arrival to the last verdict, P50 / P90 / P99 (nearest rank). Queueing delay per pool:
the time calls waited before a device first served them, per problem; the admission wait:
arrival to a draft device with room. Throughput: problems and accepted (output) tokens per
second over the run's span (first arrival to last completion); goodput under an SLO: problems
finished within ``slo_ms`` per second. Utilization: a device's busy share of the span (a GPU is
busy while it runs a batch). Energy: each device's active power over its busy time and idle
power over the rest of the span, per problem and per output token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from heteroreason.model import checks
from heteroreason.model.fleet.engine import FleetRun

__all__ = ["FleetMetrics", "fleet_metrics", "percentile"]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted ``values`` (``q`` in (0, 100])."""
    if not values:
        raise ValueError("no values")
    rank = max(1, math.ceil(q / 100 * len(values)))
    return values[rank - 1]


@dataclass(frozen=True)
class FleetMetrics:
    problems: int
    span_s: float
    p50_s: float
    p90_s: float
    p99_s: float
    mean_latency_s: float
    admission_wait_s: float
    queue_wait_s: dict[str, float]
    problems_per_s: float
    output_tokens_per_s: float
    slo_s: float | None
    goodput_per_s: float | None
    slo_attainment: float | None
    utilization: dict[str, float]
    energy_j_per_problem: float
    energy_j_per_output_token: float | None  # None: no problem kept a token (every chain empty)
    average_power_w: float

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def fleet_metrics(run: FleetRun, *, slo_ms: float | None = None) -> FleetMetrics:
    """The run's latency percentiles, waits, rates, energy and (with ``slo_ms``, a finite
    positive number of milliseconds) the share of problems within the SLO."""
    if slo_ms is not None:
        checks.number("slo_ms", slo_ms, low=0, low_open=True, note="milliseconds, or None")
    probs = run.problems
    n = len(probs)
    span_ms = run.span_ms
    if span_ms <= 0:
        raise ValueError("a run of no duration has no rates")
    lat = sorted(p.latency_ms for p in probs)
    waits: dict[str, float] = {}
    for p in probs:
        for pool, ms in p.waits_ms:
            waits[pool] = waits.get(pool, 0.0) + ms
    output = sum(p.output_tokens for p in probs)
    pools: dict[str, list[float]] = {}
    energy_j = 0.0
    for d in run.devices:
        pools.setdefault(d.pool, []).append(d.busy_ms / span_ms)
        if d.power is not None:
            busy = min(d.busy_ms, span_ms)
            energy_j += 1e-3 * (d.power.active_w * busy + d.power.idle_w * (span_ms - busy))
    met = None if slo_ms is None else sum(1 for x in lat if x <= slo_ms)
    return FleetMetrics(
        problems=n, span_s=1e-3 * span_ms,
        p50_s=1e-3 * percentile(lat, 50), p90_s=1e-3 * percentile(lat, 90),
        p99_s=1e-3 * percentile(lat, 99), mean_latency_s=1e-3 * sum(lat) / n,
        admission_wait_s=1e-3 * sum(p.admitted_ms - p.arrival_ms for p in probs) / n,
        queue_wait_s={k: 1e-3 * v / n for k, v in sorted(waits.items())},
        problems_per_s=n / (1e-3 * span_ms), output_tokens_per_s=output / (1e-3 * span_ms),
        slo_s=None if slo_ms is None else 1e-3 * slo_ms,
        goodput_per_s=None if met is None else met / (1e-3 * span_ms),
        slo_attainment=None if met is None else met / n,
        utilization={k: sum(v) / len(v) for k, v in sorted(pools.items())},
        energy_j_per_problem=energy_j / n,
        energy_j_per_output_token=energy_j / output if output else None,
        average_power_w=energy_j / (1e-3 * span_ms))
