"""Sweeps and searches over fleets, each point a self-contained, picklable description (so any
executor can run it): load curves, the capacity at an SLO (bisection on the arrival rate, as
serving simulators search it), and HeteroReason pools against GPU-only pools at equal power and
at equal device count.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, replace

from heteroreason.model import checks
from heteroreason.model.executor import Ask, drive, run_chunked, run_searches
from heteroreason.model.fleet.devices import FleetError
from heteroreason.model.fleet.engine import FleetRun, FleetSpec, Routing, simulate_fleet
from heteroreason.model.fleet.limits import MAX_PROBLEMS, SLO_S
from heteroreason.model.fleet.metrics import fleet_metrics
from heteroreason.model.fleet.workload import ArrivalKind, Arrivals, Workload, sample_workload
from heteroreason.model.system.config import ServingMode, design_per_pass, system_config
from heteroreason.model.workload.bundled import load_bundled

__all__ = ["CAPACITY_SPAN_SLOS", "FLEET_FPGA", "CapacityResult", "FleetPoint", "bundled_workload",
           "capacities", "capacity", "capacity_search", "compare_points", "evaluate",
           "load_curve", "point_record", "power_frontier", "size_points", "speedup_points",
           "speedup_rows"]


# the FPGA a fleet drafts on where its user names none (the command line, the Python API): this
# project's U280 design at 300 MHz built for a pass of four, as the RTL builds it (its
# MultiDraftEngine holds ENGINE_CONTEXTS problems, 32, and drafts for up to four a pass;
# FleetPoint's own default, None, is the configuration's: the paper artifact's board)
FLEET_FPGA = "rtl-u280-300-batch4"


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
    min_span_s: float | None = None  # at least this many seconds of arrivals: more problems
    max_prefetch: int | None = None  # step-ahead prefetches a target batch may hold
    contexts: int | None = None  # problems a draft board holds (None: the design's)
    # drafts an FPGA board runs a pass (None: its design's, one for a GPU draft)
    per_pass: int | None = None

    def __post_init__(self):
        checks.integer("problems", self.problems, low=1, high=MAX_PROBLEMS, error=FleetError)
        checks.integer("seed", self.seed, low=0, error=FleetError)
        if self.contexts is not None:
            checks.integer("contexts", self.contexts, low=1, note="or None", error=FleetError)
        if self.slo_s is not None:
            checks.number("slo_s", self.slo_s, low=SLO_S[0], high=SLO_S[1],
                          note="seconds, or None", error=FleetError)
        if self.min_span_s is not None:
            checks.number("min_span_s", self.min_span_s, low=0, low_open=True,
                          note="seconds, or None", error=FleetError)
        if isinstance(self.datasets, str) or not self.datasets:
            raise FleetError(f"datasets must be a non-empty sequence of names, not "
                             f"{self.datasets!r}")

    @property
    def problem_count(self) -> int:
        """``problems``, or more: as many as arrive in ``min_span_s`` at the point's rate."""
        if self.min_span_s is None:
            return self.problems
        count = max(self.problems, math.ceil(self.rate_per_s * self.min_span_s))
        if count > MAX_PROBLEMS:  # a search's span at a high rate: refused, not run for hours
            raise FleetError(f"{self.min_span_s:g} s of arrivals at {self.rate_per_s:g}/s are "
                             f"{count:,} problems, more than {MAX_PROBLEMS:,}")
        return count

    def spec(self) -> FleetSpec:
        return FleetSpec(system_config(self.config, fpga=self.fpga), ServingMode.parse(self.mode),
                         drafts=self.drafts, prms=self.prms, targets=self.targets,
                         routing=Routing.parse(self.routing),
                         max_prefetch_items=self.max_prefetch, draft_slots=self.contexts,
                         per_pass=self.passes)

    @property
    def passes(self) -> int:
        """Drafts a pass: ``per_pass``, or the FPGA design's where the mode drafts on it (at
        most the problems a board holds, ``contexts``, a power of two)."""
        if self.per_pass is not None:
            return self.per_pass
        fpga = system_config(self.config, fpga=self.fpga)
        passes = design_per_pass(self.fpga) \
            if fpga.draft(ServingMode.parse(self.mode)).on_fpga else 1
        while self.contexts is not None and passes > self.contexts:
            passes //= 2
        return passes

    def arrivals(self) -> Arrivals:
        return Arrivals.poisson(self.rate_per_s) if self.cv == 1.0 else \
            Arrivals(ArrivalKind.GAMMA, self.rate_per_s, self.cv)

    @property
    def label(self) -> str:
        pools = f"{self.drafts}:{self.prms}:{self.targets}"
        cap = "" if self.max_prefetch is None else f"/prefetch<={self.max_prefetch}"
        ctx = "" if self.contexts is None else f"/contexts={self.contexts}"
        if self.passes > 1:
            ctx += f"/per_pass={self.passes}"
        return f"{self.config}/{self.mode}/{'+'.join(self.datasets)}/{pools}{ctx}{cap}"


@functools.lru_cache(maxsize=16)
def bundled_workload(datasets: tuple[str, ...], mode: str) -> Workload:
    """The bundled trace sets, equally weighted (less traces ``mode`` cannot replay)."""
    backtracking = ServingMode.parse(mode).backtracking
    sets = {}
    for name in datasets:
        traces = [t for t in load_bundled(name) if backtracking or not t.backtracks]
        sets[name] = tuple(traces)
    return Workload(sets, dict.fromkeys(datasets, 1.0))


def evaluate(point: FleetPoint) -> dict:
    """Simulate the point; its description and metrics as one flat record."""
    problems, times = sample_workload(bundled_workload(point.datasets, point.mode),
                                      point.arrivals(), point.problem_count, point.seed)
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
    """The capacity of ``point``'s fleet at ``slo_s``; ``at_capacity``: the record of the run at
    that rate (:func:`point_record`)."""

    point: FleetPoint
    slo_s: float
    capacity_per_s: float
    p99_s: float
    evaluations: int
    floor_p99_s: float
    at_capacity: dict

    def as_dict(self) -> dict:
        at = self.at_capacity
        power = at["average_power_w"]
        return {"system": self.point.label, "config": self.point.config,
                "mode": self.point.mode, "datasets": "+".join(self.point.datasets),
                "drafts": self.point.drafts, "prms": self.point.prms,
                "targets": self.point.targets, "board_contexts": self.point.spec().slots(),
                "per_pass": self.point.passes,
                "active_power_w": self.point.spec().active_power_w, "slo_s": self.slo_s,
                "capacity_per_s": self.capacity_per_s, "p99_at_capacity_s": self.p99_s,
                "p99_vanishing_load_s": self.floor_p99_s,
                "goodput_at_capacity_per_s": at["goodput_per_s"],
                "average_power_at_capacity_w": power,
                "goodput_per_kw": 1e3 * at["goodput_per_s"] / power,
                "energy_j_per_problem_at_capacity": at["energy_j_per_problem"],
                "evaluations": self.evaluations}


CAPACITY_SPAN_SLOS = 10.0


def capacity(point: FleetPoint, slo_s: float, *, rel_tol: float = 0.02,
             low_rate_per_s: float = 1e-4, max_rate_per_s: float = 1e4) -> CapacityResult:
    """The highest arrival rate whose P99 latency meets ``slo_s``: from a vanishing load,
    doubling until the SLO fails, then bisection to ``rel_tol``. Each run holds at least
    ``point.problems`` problems and at least :data:`CAPACITY_SPAN_SLOS` SLOs of arrivals (unless
    ``point.min_span_s`` says otherwise): a burst of a few problems drains within the SLO
    however fast they come, a fleet past its capacity falls behind only over time."""
    return drive(capacity_search(point, slo_s, rel_tol=rel_tol, low_rate_per_s=low_rate_per_s,
                                 max_rate_per_s=max_rate_per_s), evaluate)


def capacity_search(point: FleetPoint, slo_s: float, *, rel_tol: float = 0.02,
                    low_rate_per_s: float = 1e-4, max_rate_per_s: float = 1e4):
    """:func:`capacity` as a search (:func:`~heteroreason.model.executor.run_searches`): it
    yields the points it runs, each with the ones it may run next (the next two doublings;
    both halves of the bracket it is about to halve)."""
    checks.number("slo_s", slo_s, low=0, low_open=True, error=FleetError)
    span_s = point.min_span_s if point.min_span_s is not None else CAPACITY_SPAN_SLOS * slo_s
    evals = 0

    def at(rate: float) -> FleetPoint:
        return replace(point, rate_per_s=rate, slo_s=slo_s, min_span_s=span_s)

    def ask(rate: float, *ahead: float) -> Ask:
        nonlocal evals
        evals += 1
        return Ask(at(rate), tuple(at(r) for r in ahead if r <= max_rate_per_s))

    floor = yield ask(low_rate_per_s, 2 * low_rate_per_s, 4 * low_rate_per_s)
    if floor["p99_s"] > slo_s:
        raise FleetError(f"{point.label}: the SLO of {slo_s} s is below the fastest possible "
                         f"P99 latency ({floor['p99_s']:.2f} s at a vanishing load): no load "
                         "meets it")
    lo, lo_record = low_rate_per_s, floor
    hi = low_rate_per_s
    while True:
        hi *= 2
        if hi > max_rate_per_s:
            raise FleetError(f"{point.label}: the SLO is still met at {max_rate_per_s}/s "
                             "(max_rate_per_s)")
        # ahead: the next doublings, and the first halving should this rate fail
        record = yield ask(hi, 2 * hi, 4 * hi, math.sqrt(lo * hi))
        if record["p99_s"] > slo_s:
            break
        lo, lo_record = hi, record
    while hi - lo > rel_tol * lo:
        mid = math.sqrt(lo * hi)
        record = yield ask(mid, *_halves(lo, mid, hi, rel_tol))
        if record["p99_s"] <= slo_s:
            lo, lo_record = mid, record
        else:
            hi = mid
    return CapacityResult(point, slo_s, lo, lo_record["p99_s"], evals, floor["p99_s"],
                          lo_record)


def _halves(lo: float, mid: float, hi: float, rel_tol: float) -> tuple[float, ...]:
    """The midpoints the bisection runs next, whichever way ``mid`` goes (none where the
    bracket is then narrow enough)."""
    return tuple(math.sqrt(a * b) for a, b in ((lo, mid), (mid, hi)) if b - a > rel_tol * a)


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
    """One capacity search per point, all advancing at once on ``ex`` (a task per run)."""
    return [r.as_dict() for r in
            run_searches(ex, evaluate, [capacity_search(p, slo_s) for p in points])]


def size_points(point: FleetPoint, drafts: list[int], prms: list[int],
                targets: list[int], contexts: list[int] | None = None,
                per_pass: list[int] | None = None) -> list[FleetPoint]:
    """``point``'s fleet at every pool size of the grid ``drafts`` x ``prms`` x ``targets``
    (x ``contexts``, problems a draft board holds, x ``per_pass``, drafts a pass, where given;
    a board drafting more a pass than it holds is left out)."""
    grid = (("drafts", drafts), ("prms", prms), ("targets", targets))
    if contexts is not None:
        grid += (("contexts", contexts),)
    if per_pass is not None:
        grid += (("per_pass", per_pass),)
    for name, values in grid:
        if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                             for v in values):
            raise FleetError(f"the sizing grid's {name} must be integers >= 1, not {values!r}")
    boards = [point.contexts] if contexts is None else sorted(set(contexts))
    passes = [point.per_pass] if per_pass is None else sorted(set(per_pass))
    return [replace(point, drafts=d, prms=p, targets=t, contexts=c, per_pass=b)
            for c in boards for b in passes if c is None or b is None or b <= c
            for d in sorted(set(drafts)) for p in sorted(set(prms))
            for t in sorted(set(targets))]


def power_frontier(rows: list[dict]) -> list[bool]:
    """Whether each capacity row is on the frontier of active power against capacity: no other
    row serves at least as much for at most the power, better in one of them."""
    def beats(a, b):
        return (a["active_power_w"] <= b["active_power_w"]
                and a["capacity_per_s"] >= b["capacity_per_s"]
                and (a["active_power_w"] < b["active_power_w"]
                     or a["capacity_per_s"] > b["capacity_per_s"]))
    return [not any(beats(other, row) for other in rows if other is not row) for row in rows]


VANISHING_RATE_PER_S = 1e-4  # arrivals ~3 h apart: no problem waits for another


def speedup_points(pairs: list[tuple[FleetPoint, FleetPoint, float]],
                   fractions: tuple[float, ...] = (0.0, 0.5, 0.9)) -> list[FleetPoint]:
    """For each (GPU-only point, HeteroReason point, lower capacity of the two): both fleets at
    each fraction of that capacity — the same traffic for both, within both capacities; a
    fraction of 0 is a vanishing load (the batch-1 latencies)."""
    for f in fractions:
        if not 0 <= f < 1:
            raise FleetError(f"load fractions must be in [0, 1), not {f!r}")
    out = []
    for base, fleet, cap in pairs:
        for f in fractions:
            rate = f * cap if f > 0 else VANISHING_RATE_PER_S
            out += [replace(base, rate_per_s=rate), replace(fleet, rate_per_s=rate)]
    return out


def speedup_rows(records: list[dict], fractions: tuple[float, ...] = (0.0, 0.5, 0.9)) -> list[dict]:
    """The records of :func:`speedup_points` (pairs in its order) as speed-ups of HeteroReason
    over the GPU-only fleet (mean and median latency ratios) and the mean speed-up as a share of
    the vanishing-load one (``retained_of_batch1``: 1 when load costs both fleets alike)."""
    rows, per_pair = [], 2 * len(fractions)
    for start in range(0, len(records), per_pair):
        group = records[start:start + per_pair]
        batch1 = None
        for k, f in enumerate(fractions):
            base, fleet = group[2 * k], group[2 * k + 1]
            speedup = base["mean_latency_s"] / fleet["mean_latency_s"]
            if f == 0:
                batch1 = speedup
            rows.append({
                "config": fleet["config"], "datasets": fleet["datasets"],
                "fleet": f"{fleet['drafts']}:{fleet['prms']}:{fleet['targets']}",
                "baseline": f"t2 {base['drafts']}:{base['prms']}:{base['targets']}",
                "load_fraction": f, "rate_per_s": fleet["rate_per_s"],
                "t2_mean_s": base["mean_latency_s"], "hr_mean_s": fleet["mean_latency_s"],
                "t2_p99_s": base["p99_s"], "hr_p99_s": fleet["p99_s"],
                "speedup_mean": speedup,
                "speedup_p50": base["p50_s"] / fleet["p50_s"],
                "retained_of_batch1": None if batch1 is None else speedup / batch1})
    return rows
