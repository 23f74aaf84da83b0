"""Sweeps and searches over fleets, each point a self-contained, picklable description (so any
executor can run it): load curves, the capacity at an SLO (bisection on the arrival rate, as
serving simulators search it), and HeteroReason pools against GPU-only pools at equal power and
at equal device count.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, replace

from heteroreason.model.fleet.devices import FleetError
from heteroreason.model.fleet.engine import FleetRun, FleetSpec, Routing, simulate_fleet
from heteroreason.model.fleet.executor import run_chunked
from heteroreason.model.fleet.metrics import fleet_metrics
from heteroreason.model.fleet.workload import ArrivalKind, Arrivals, Workload, sample_workload
from heteroreason.model.system.config import Mode, system_config
from heteroreason.model.workload.bundled import load_bundled

__all__ = ["CapacityResult", "FleetPoint", "bundled_workload", "capacities", "capacity",
           "compare_points", "evaluate", "load_curve", "point_record"]


@dataclass(frozen=True)
class FleetPoint:
    """One fleet at one load, on bundled trace sets."""

    config: str = "config1"
    mode: str = "heteroreason"
    fpga: str | None = None
    drafts: int = 1
    prms: int = 1
    targets: int = 1
    datasets: tuple[str, ...] = ("math500",)
    rate_per_s: float = 0.1
    cv: float = 1.0
    problems: int = 400
    seed: int = 0
    slo_s: float | None = None
    routing: str = "least"

    def spec(self) -> FleetSpec:
        return FleetSpec(system_config(self.config, fpga=self.fpga), Mode.parse(self.mode),
                         drafts=self.drafts, prms=self.prms, targets=self.targets,
                         routing=Routing.parse(self.routing))

    def arrivals(self) -> Arrivals:
        return Arrivals.poisson(self.rate_per_s) if self.cv == 1.0 else \
            Arrivals(ArrivalKind.GAMMA, self.rate_per_s, self.cv)

    @property
    def label(self) -> str:
        pools = f"{self.drafts}:{self.prms}:{self.targets}"
        return f"{self.config}/{self.mode}/{'+'.join(self.datasets)}/{pools}"


@functools.lru_cache(maxsize=16)
def bundled_workload(datasets: tuple[str, ...], mode: str) -> Workload:
    """The bundled trace sets, equally weighted (less traces ``mode`` cannot replay)."""
    backtracking = Mode.parse(mode).backtracking
    sets = {}
    for name in datasets:
        traces = [t for t in load_bundled(name) if backtracking or not t.backtracks]
        sets[name] = tuple(traces)
    return Workload(sets, dict.fromkeys(datasets, 1.0))


def evaluate(point: FleetPoint) -> dict:
    """Simulate the point; its description and metrics as one flat record."""
    problems, times = sample_workload(bundled_workload(point.datasets, point.mode),
                                      point.arrivals(), point.problems, point.seed)
    return point_record(point, simulate_fleet(point.spec(), problems, times, check=False))


def point_record(point: FleetPoint, run: FleetRun) -> dict:
    """The point's description and its run's metrics as one flat record."""
    slo_ms = None if point.slo_s is None else 1e3 * point.slo_s
    m = fleet_metrics(run, slo_ms=slo_ms).as_dict()
    record = {**asdict(point), "datasets": "+".join(point.datasets), "events": run.events}
    for key, value in m.items():
        if isinstance(value, dict):
            for k, v in value.items():
                record[f"{key}.{k}"] = v
        else:
            record[key] = value
    record["active_power_w"] = point.spec().active_power_w
    return record


def load_curve(ex, point: FleetPoint, rates: list[float], *, chunk_size: int = 2) -> list[dict]:
    return run_chunked(ex, evaluate, [replace(point, rate_per_s=r) for r in rates],
                       chunk_size=chunk_size)


@dataclass(frozen=True)
class CapacityResult:
    point: FleetPoint
    slo_s: float
    capacity_per_s: float
    p99_s: float
    evaluations: int
    floor_p99_s: float

    def as_dict(self) -> dict:
        return {"system": self.point.label, "config": self.point.config,
                "mode": self.point.mode, "datasets": "+".join(self.point.datasets),
                "drafts": self.point.drafts, "prms": self.point.prms,
                "targets": self.point.targets,
                "active_power_w": self.point.spec().active_power_w, "slo_s": self.slo_s,
                "capacity_per_s": self.capacity_per_s, "p99_at_capacity_s": self.p99_s,
                "p99_vanishing_load_s": self.floor_p99_s, "evaluations": self.evaluations}


def capacity(point: FleetPoint, slo_s: float, *, rel_tol: float = 0.02,
             low_rate_per_s: float = 1e-4, max_rate_per_s: float = 1e4) -> CapacityResult:
    """The highest arrival rate whose P99 latency meets ``slo_s``: from a vanishing load,
    doubling until the SLO fails, then bisection to ``rel_tol``."""
    if not (math.isfinite(slo_s) and slo_s > 0):
        raise FleetError(f"slo_s must be a finite number > 0, not {slo_s!r}")
    evals = 0

    def p99(rate: float) -> float:
        nonlocal evals
        evals += 1
        return evaluate(replace(point, rate_per_s=rate))["p99_s"]

    floor = p99(low_rate_per_s)
    if floor > slo_s:
        raise FleetError(f"{point.label}: the SLO of {slo_s} s is below the fastest possible "
                         f"P99 latency ({floor:.2f} s at a vanishing load): no load meets it")
    lo, lo_p99 = low_rate_per_s, floor
    hi = low_rate_per_s
    while True:
        hi *= 2
        if hi > max_rate_per_s:
            raise FleetError(f"{point.label}: the SLO is still met at {max_rate_per_s}/s "
                             "(max_rate_per_s)")
        value = p99(hi)
        if value > slo_s:
            break
        lo, lo_p99 = hi, value
    while hi - lo > rel_tol * lo:
        mid = math.sqrt(lo * hi)
        value = p99(mid)
        if value <= slo_s:
            lo, lo_p99 = mid, value
        else:
            hi = mid
    return CapacityResult(point, slo_s, lo, lo_p99, evals, floor)


def _capacity_task(args) -> dict:
    point, slo_s = args
    return capacity(point, slo_s).as_dict()


def compare_points(point: FleetPoint) -> list[FleetPoint]:
    """A GPU-only (``t2``) fleet of ``point``'s pools, the HeteroReason fleet of as many
    devices (FPGA boards for the draft GPUs), and the HeteroReason fleet of equal active power
    (the draft GPUs' watts spent on as many FPGA boards as they pay for)."""
    if point.mode != "heteroreason":
        raise FleetError(f"compare starts from a heteroreason fleet, not mode {point.mode!r}")
    spec = point.spec()
    fpga_w = spec.powers()["draft"].active_w
    gpu_w = spec.config.draft_gpu_power.active_w
    equal_power = max(1, math.floor(point.drafts * gpu_w / fpga_w + 1e-9))
    return [replace(point, mode="t2"), point, replace(point, drafts=equal_power)]


def capacities(ex, points: list[FleetPoint], slo_s: float) -> list[dict]:
    """One capacity search per point, one task each."""
    return run_chunked(ex, _capacity_task, [(p, slo_s) for p in points], chunk_size=1)
