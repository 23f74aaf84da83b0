"""The board that drafts several problems a pass (issue 43's engine, estimated): against a naive
pass-by-pass simulation written from its description, and in a fleet (every problem served,
every token accounted for, never more drafts a pass than it runs, its bad input refused)."""

from __future__ import annotations

import itertools
import random

import pytest

from heteroreason.model.fleet.devices import FleetError, GpuWork, Item
from heteroreason.model.fleet.engine import FleetSpec, simulate_fleet
from heteroreason.model.fleet.pass_board import PassBoard
from heteroreason.model.fleet.workload import Arrivals, Workload, sample_workload
from heteroreason.model.system.config import ServingMode, system_config
from heteroreason.model.system.event_loop import EventLoop, Priority
from heteroreason.model.system.records import JobKind, Station
from heteroreason.model.timing.fpga.passes import PassTable, pass_table
from heteroreason.model.workload.bundled import load_bundled

SEED = 20261205


def _cost(n: int, positions_sum: float) -> float:
    """A pass of n contexts: linear in n and in the positions (so a table of it is exact)."""
    return 1.0 + 0.1 * n + 0.001 * positions_sum


def _table(per_pass: int) -> PassTable:
    positions = (0, 500, 1000, 4000)
    return PassTable("test", per_pass, positions,
                     tuple(tuple(_cost(n, n * p) for p in positions)
                           for n in range(1, per_pass + 1)))


class _Owner:
    index = 0

    def __init__(self, loop):
        self.loop = loop
        self.ends: dict[int, float] = {}

    def completed(self, item):
        self.ends[item.job_id] = self.loop.now


def _naive(jobs, per_pass):
    """Pass by pass: at each boundary the jobs arrived and unfinished, in order of arrival; a
    job that is not a draft first runs alone; else up to ``per_pass`` drafts a token each."""
    left = {j["id"]: j["tokens"] for j in jobs}
    kv = {j["id"]: j["kv"] for j in jobs}
    ends, t = {}, 0.0
    while len(ends) < len(jobs):
        ready = [j for j in jobs if j["at"] <= t + 1e-12 and j["id"] not in ends]
        if not ready:
            t = min(j["at"] for j in jobs if j["id"] not in ends)
            continue
        if ready[0]["tokens"] == 0:
            t += ready[0]["ms"]
            ends[ready[0]["id"]] = t
            continue
        run = [j for j in ready if j["tokens"]][:per_pass]
        t += _cost(len(run), sum(kv[j["id"]] for j in run))
        for j in run:
            kv[j["id"]] += 1
            left[j["id"]] -= 1
            if left[j["id"]] == 0:
                ends[j["id"]] = t
    return ends


@pytest.mark.parametrize("per_pass", [1, 2, 4])
@pytest.mark.parametrize("trial", range(6))
def test_the_board_runs_passes_as_the_naive_simulation(per_pass, trial):
    rng = random.Random(SEED + 10 * per_pass + trial)
    jobs = []
    for k in range(rng.randint(3, 12)):
        alone = rng.random() < 0.2
        jobs.append({"id": k, "at": round(rng.uniform(0, 20), 3),
                     "tokens": 0 if alone else rng.randint(1, 9),
                     "kv": rng.randint(0, 3000), "ms": rng.uniform(0.5, 3.0)})
    jobs.sort(key=lambda j: (j["at"], j["id"]))
    loop = EventLoop()
    board = PassBoard("draft0", "draft", loop, _table(per_pass))
    owner = _Owner(loop)
    for j in jobs:
        work = None if not j["tokens"] else GpuWork(1.0, None, None, j["tokens"], j["kv"])
        item = Item(owner, Station.DRAFT, JobKind.INGEST if work is None else JobKind.DRAFT,
                    j["at"], j["ms"] if work is None else float(j["tokens"]), 0, j["tokens"],
                    j["id"], 0, Priority.DRAFT, False, board, None, ())
        loop.at(j["at"], Priority.START, _submit, board, item, work)
    loop.run()
    expected = _naive(jobs, per_pass)
    assert owner.ends == pytest.approx(expected, rel=1e-12), f"seed {SEED + 10 * per_pass + trial}"
    assert board.outstanding_ms == pytest.approx(0, abs=1e-9)
    assert board.queued == 0 and not board.batch and not board.waiting


def _submit(board, item, work):
    item.submit_ms = item.start_ms = board.loop.now
    board.submit(item, work)


def test_the_table_interpolates_and_refuses_what_it_cannot_price():
    table = _table(2)
    assert table.ms_at(2, 1500) == pytest.approx(_cost(2, 1500))
    with pytest.raises(ValueError, match="a pass of 3 contexts; the design drafts 1 to 2"):
        table.ms_at(3, 0)
    with pytest.raises(ValueError, match="beyond the model's context"):
        table.ms_at(1, 4001)
    real = pass_table("qwen2.5-0.5b", "u280-300", 2)
    assert real.positions[0] == 0 and real.positions[-1] == 32767
    assert real.ms_at(1, 0) < real.ms_at(2, 0) < 2 * real.ms_at(1, 0)


def _spec(**kw):
    return FleetSpec(system_config("config1", fpga="rtl-u280-300"), ServingMode.HETEROREASON,
                     **kw)


@pytest.mark.parametrize("per_pass", [2, 4])
def test_a_fleet_of_boards_drafting_several_a_pass_serves_every_token(per_pass):
    traces = load_bundled("gsm8k")
    problems, times = sample_workload(Workload.single("gsm8k", traces), Arrivals.poisson(2.0),
                                      150, SEED)
    spec = _spec(drafts=1, prms=2, targets=2, draft_slots=8, per_pass=per_pass)
    run = simulate_fleet(spec, problems, times, check=True, record_until_ms=float("inf"))
    for p, trace in zip(run.problems, problems, strict=True):
        assert p.output_tokens == trace.output_tokens, f"seed {SEED}"
    drafts = [a for a in run.activity if a.pool == "draft"]
    assert max(a.items for a in drafts if a.what == "passes") == per_pass, f"seed {SEED}"
    spans = sorted(drafts, key=lambda a: a.start_ms)
    assert all(b.start_ms >= a.end_ms - 1e-9 for a, b in itertools.pairwise(spans))
    board = next(d for d in run.devices if d.name == "draft0")
    assert board.queue_area_ms == pytest.approx(board.wait_ms, rel=1e-9, abs=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    ({"per_pass": 3}, "per_pass must be a power of two <= 8, not 3"),
    ({"per_pass": 4}, "per_pass 4: a board holds 1 problem"),
    ({"per_pass": 4, "draft_slots": 2}, "per_pass 4: a board holds 2 problem"),
])
def test_bad_passes_are_refused(kwargs, match):
    with pytest.raises(FleetError, match=match):
        _spec(**kwargs).pass_table()


def test_only_this_projects_board_drafts_several_a_pass():
    spec = FleetSpec(system_config("config1"), ServingMode.HETEROREASON, draft_slots=8,
                     per_pass=2)
    with pytest.raises(FleetError, match="only an FPGA board of this project's design"):
        spec.pass_table()
