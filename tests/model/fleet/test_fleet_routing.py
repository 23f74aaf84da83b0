"""Routing in the fleet and what a large fleet keeps alive: the least-outstanding pick (the first
of equals, only the allowed), and runs that keep no timelines giving what runs that check every
timeline give."""

from __future__ import annotations

import random

import pytest

from heteroreason.model.fleet.engine import FleetSpec, Routing, _Fleet, simulate_fleet
from heteroreason.model.fleet.problem_replay import LastRecord
from heteroreason.model.fleet.workload import Arrivals, Workload, sample_workload
from heteroreason.model.system.config import ServingMode, system_config
from heteroreason.model.workload.bundled import load_bundled

SEED = 20261205


def _fleet(routing=Routing.LEAST, drafts=5):
    spec = FleetSpec(system_config("config1"), ServingMode.HETEROREASON, drafts=drafts,
                     prms=1, targets=1, routing=routing)
    return _Fleet(spec, check=False, keep=0)


def _naive_least(loads, allowed):
    """The spec, written out: the lowest index among the allowed of the least load."""
    best = None
    for k, load in enumerate(loads):
        if allowed(k) and (best is None or load < loads[best]):
            best = k
    return best


@pytest.mark.parametrize("trial", range(20))
def test_least_picks_the_first_of_the_least_loaded_among_the_allowed(trial):
    rng = random.Random(SEED + trial)
    fleet = _fleet(drafts=rng.randint(2, 9))
    loads = [float(rng.choice([0, 1, 2, 3])) for _ in fleet.drafts]  # ties are common
    for device, load in zip(fleet.drafts, loads, strict=True):
        device.outstanding_ms = load
    banned = {k for k in range(len(loads)) if rng.random() < 0.4}
    for allowed in (None, lambda k: k not in banned):
        got = fleet._pick("draft", fleet.drafts, allowed)
        want = _naive_least(loads, allowed or (lambda k: True))
        assert got == want, (f"seed {SEED + trial}", loads, banned)


def test_round_robin_takes_turns_and_skips_the_disallowed():
    fleet = _fleet(Routing.ROUND_ROBIN, drafts=4)
    assert [fleet._pick("draft", fleet.drafts) for _ in range(6)] == [0, 1, 2, 3, 0, 1]
    assert fleet._pick("draft", fleet.drafts, lambda k: k == 1) == 1
    assert fleet._pick("draft", fleet.drafts, lambda k: False) is None


def test_last_record_keeps_only_the_last():
    records = LastRecord()
    with pytest.raises(IndexError, match="only the last record"):
        records[-1]
    records.append("a")
    records.append("b")
    assert records[-1] == "b"
    with pytest.raises(IndexError, match="record 0"):
        records[0]


@pytest.mark.parametrize("mode", [ServingMode.HETEROREASON, ServingMode.T2, ServingMode.BASELINE])
def test_a_run_that_keeps_no_timelines_serves_every_problem_alike(mode):
    traces = [t for t in load_bundled("math500") if mode.backtracking or not t.backtracks]
    problems, times = sample_workload(Workload.single("math500", traces), Arrivals.poisson(0.5),
                                      250, SEED)
    spec = FleetSpec(system_config("config1"), mode, drafts=6, prms=2, targets=2)
    checked = simulate_fleet(spec, problems, times, check=True)
    lean = simulate_fleet(spec, problems, times, check=False)
    some = simulate_fleet(spec, problems, times, check=False, keep_timelines=7)
    assert lean.problems == checked.problems == some.problems, f"seed {SEED}"
    assert lean.devices == checked.devices and lean.events == checked.events
    # the kept timelines are the first problems to finish, as a checking run keeps them
    assert [t.trace.problem_id for t in some.timelines] == \
        [t.trace.problem_id for t in simulate_fleet(spec, problems, times, check=True,
                                                    keep_timelines=7).timelines]
    assert len(some.timelines) == 7
