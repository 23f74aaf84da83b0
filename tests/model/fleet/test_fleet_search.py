"""Fleet searches: the capacity's record at capacity, the sizing grid and its power frontier,
the speed-up points (the same traffic for both fleets) and their rows, checked against answers
worked out by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from heteroreason.model.fleet.devices import FleetError
from heteroreason.model.fleet.search import (
    CAPACITY_SPAN_SLOS,
    VANISHING_RATE_PER_S,
    FleetPoint,
    capacity,
    power_frontier,
    size_points,
    speedup_points,
    speedup_rows,
)

SEED = 20261202


def test_capacity_carries_the_record_of_its_rate():
    result = capacity(FleetPoint(problems=80, seed=SEED), 150.0, rel_tol=0.1)
    at = result.at_capacity
    assert at["rate_per_s"] == result.capacity_per_s
    assert at["p99_s"] == result.p99_s <= 150.0
    assert at["slo_s"] == 150.0 and 0 < at["goodput_per_s"] <= at["problems_per_s"]
    # not a burst that drains within the SLO: at least ten SLOs of arrivals
    assert at["problems"] >= max(80, CAPACITY_SPAN_SLOS * 150.0 * result.capacity_per_s)
    row = result.as_dict()
    assert row["goodput_per_kw"] == pytest.approx(1e3 * at["goodput_per_s"]
                                                  / at["average_power_w"])
    # idle power counts: the fleet draws less than all devices active, more than all idle
    spec = result.point.spec()
    idle_w = sum(n * spec.powers()[pool].idle_w for pool, n in
                 (("draft", spec.drafts), ("prm", spec.prms), ("target", spec.targets)))
    assert idle_w < row["average_power_at_capacity_w"] < spec.active_power_w


def test_min_span_sets_the_problem_count():
    assert FleetPoint(problems=50, rate_per_s=0.5).problem_count == 50
    assert FleetPoint(problems=50, rate_per_s=0.5, min_span_s=300.0).problem_count == 150
    with pytest.raises(FleetError, match=r"min_span_s must be a finite positive number "
                                         r"\(seconds, or None\)"):
        FleetPoint(min_span_s=0.0)


def test_size_points_span_the_grid_once_each():
    points = size_points(FleetPoint(), [4, 1, 4], [1], [2, 1])
    assert [(p.drafts, p.prms, p.targets) for p in points] == [
        (1, 1, 1), (1, 1, 2), (4, 1, 1), (4, 1, 2)]


@pytest.mark.parametrize("grid, match", [
    (([], [1], [1]), "drafts must be integers >= 1"),
    (([1], [0], [1]), "prms must be integers >= 1"),
    (([1], [1], [True]), "targets must be integers >= 1"),
])
def test_size_points_refuse_a_bad_grid(grid, match):
    with pytest.raises(FleetError, match=match):
        size_points(FleetPoint(), *grid)


def test_power_frontier_keeps_what_nothing_beats():
    rows = [{"active_power_w": w, "capacity_per_s": c} for w, c in
            [(100, 1.0), (200, 1.0), (200, 3.0), (300, 2.0), (400, 4.0), (100, 1.0)]]
    # (200, 1.0) is beaten by (100, 1.0); (300, 2.0) by (200, 3.0); equal rows do not beat
    # each other
    assert power_frontier(rows) == [True, False, True, False, True, True]


def test_speedup_points_give_both_fleets_the_same_traffic():
    base, fleet = FleetPoint(mode="t2"), FleetPoint(drafts=8)
    points = speedup_points([(base, fleet, 0.2)], fractions=(0.0, 0.5, 0.9))
    assert [p.mode for p in points] == ["t2", "heteroreason"] * 3
    assert [p.rate_per_s for p in points] == [VANISHING_RATE_PER_S] * 2 + [0.1] * 2 + \
        [pytest.approx(0.18)] * 2
    assert points[1] == replace(fleet, rate_per_s=VANISHING_RATE_PER_S)
    with pytest.raises(FleetError, match=r"load fractions must be in \[0, 1\), not 1.0"):
        speedup_points([(base, fleet, 0.2)], fractions=(1.0,))


def test_speedup_rows_divide_the_latencies():
    def record(mode, rate, mean, p50):
        return {"config": "config1", "datasets": "math500", "mode": mode, "drafts": 2,
                "prms": 1, "targets": 1, "rate_per_s": rate, "mean_latency_s": mean,
                "p50_s": p50, "p99_s": 3 * mean}
    records = [record("t2", 1e-4, 30.0, 20.0), record("heteroreason", 1e-4, 20.0, 16.0),
               record("t2", 0.1, 33.0, 22.0), record("heteroreason", 0.1, 27.5, 20.0)]
    rows = speedup_rows(records, fractions=(0.0, 0.5))
    assert [r["speedup_mean"] for r in rows] == [1.5, 1.2]
    assert [r["speedup_p50"] for r in rows] == [1.25, 1.1]
    assert rows[1]["retained_of_batch1"] == pytest.approx(0.8)
    assert rows[0]["fleet"] == "2:1:1" and rows[0]["baseline"] == "t2 2:1:1"


def test_a_fleet_of_empty_chains_has_defined_metrics():
    import json

    from heteroreason.model.fleet.engine import FleetSpec, simulate_fleet
    from heteroreason.model.fleet.metrics import fleet_metrics
    from heteroreason.model.system.config import ServingMode, system_config
    from heteroreason.model.workload.traces import ProblemTrace, StepEvent

    # an accepted step, then a backtrack over it that regenerates nothing: the chain ends empty
    empty = ProblemTrace("hand", "e", 100, (StepEvent("accept", 10), StepEvent(
        "backtrack", 5, 6, backtrack_steps=1, regenerated_tokens=0)))
    run = simulate_fleet(FleetSpec(system_config("config1"), ServingMode.HETEROREASON), [empty] * 3,
                         [0.0, 1.0, 2.0])
    m = fleet_metrics(run, slo_ms=1e6)
    assert m.output_tokens_per_s == 0 and m.energy_j_per_output_token is None
    assert m.energy_j_per_problem > 0 and m.goodput_per_s == m.problems_per_s
    json.dumps(m.as_dict(), allow_nan=False)  # every figure is valid JSON
