"""The fleet simulator: batch-1 equivalence at vanishing load, accounting, determinism,
batching monotonicity, the cost model's checks and bad input."""

from __future__ import annotations

import itertools
import random

import pytest

from heteroreason.model.executor import executor, run_chunked
from heteroreason.model.fleet.devices import FleetError
from heteroreason.model.fleet.engine import FleetSpec, simulate_fleet
from heteroreason.model.fleet.metrics import fleet_metrics, percentile
from heteroreason.model.fleet.search import FleetPoint, capacity, compare_points, evaluate
from heteroreason.model.fleet.workload import (
    Arrivals,
    Workload,
    arrival_times_ms,
    load_arrival_trace,
    sample_workload,
)
from heteroreason.model.system.config import ServingMode, system_config
from heteroreason.model.system.records import JobKind
from heteroreason.model.system.scheduler import simulate_problem
from heteroreason.model.timing.batch_cost import (
    PER_ITEM_MS,
    BatchCost,
    batch_cost,
    fit_per_item_ms,
    published_checks,
)
from heteroreason.model.timing.device_timing import timing
from heteroreason.model.workload.bundled import load_bundled
from heteroreason.model.workload.traces import StepOutcome

SEED = 20261202


def _traces(dataset: str, mode: ServingMode):
    return [t for t in load_bundled(dataset) if mode.backtracking or not t.backtracks]


@pytest.mark.parametrize("config", ["config1", "config2"])
@pytest.mark.parametrize("mode", list(ServingMode))
def test_vanishing_load_reproduces_the_batch1_scheduler(config, mode):
    cfg = system_config(config)
    traces = _traces("math500", mode)[:40]
    gap_ms = 1e7  # far longer than any problem: each runs alone
    run = simulate_fleet(FleetSpec(cfg, mode), traces, [k * gap_ms for k in range(len(traces))])
    for p, trace in zip(run.problems, traces, strict=True):
        batch1 = simulate_problem(trace, cfg, mode)
        assert p.latency_ms == pytest.approx(batch1.latency_ms, rel=1e-12, abs=1e-5), \
            (trace.problem_id, p.latency_ms, batch1.latency_ms)
        assert p.output_tokens == batch1.output_tokens


def _loaded_run(mode=ServingMode.HETEROREASON, pools=(3, 2, 2), rate=0.3, n=300, seed=SEED,
                keep_timelines=0, **kw):
    wl = Workload.single("math500", _traces("math500", mode))
    problems, times = sample_workload(wl, Arrivals.poisson(rate), n, seed)
    spec = FleetSpec(system_config("config1"), mode, drafts=pools[0], prms=pools[1],
                     targets=pools[2], **kw)
    run = simulate_fleet(spec, problems, times, check=True, keep_timelines=keep_timelines)
    return run, problems


@pytest.mark.parametrize("mode", [ServingMode.HETEROREASON, ServingMode.T2, ServingMode.BASELINE])
def test_under_load_every_token_is_accounted_for_and_queues_obey_littles_law(mode):
    run, problems = _loaded_run(mode)  # check=True: each problem's timeline invariants
    assert len(run.problems) == len(problems)
    for p, trace in zip(run.problems, problems, strict=True):
        assert p.output_tokens == trace.output_tokens, f"seed {SEED}"
        assert p.done_ms >= p.admitted_ms >= p.arrival_ms
    for d in run.devices:
        # the time-integrated queue length equals the total of the recorded waits
        assert d.queue_area_ms == pytest.approx(d.wait_ms, rel=1e-9, abs=1e-6), (d.name, SEED)
        assert d.busy_ms <= run.span_ms + 1e-6
    waits = {}
    for p in run.problems:
        for pool, ms in p.waits_ms:
            waits[pool] = waits.get(pool, 0.0) + ms
    for pool, total in waits.items():
        recorded = sum(d.wait_ms for d in run.devices if d.pool == pool)
        assert total == pytest.approx(recorded, rel=1e-9, abs=1e-6)


@pytest.mark.parametrize("mode", [ServingMode.HETEROREASON, ServingMode.T2])
def test_no_device_is_double_booked(mode):
    wl = Workload.single("math500", _traces("math500", mode))
    problems, times = sample_workload(wl, Arrivals.poisson(0.4), 200, SEED)
    spec = FleetSpec(system_config("config1"), mode, drafts=3, prms=2, targets=2)
    run = simulate_fleet(spec, problems, times, record_until_ms=float("inf"))
    by_device = {}
    for a in run.activity:
        by_device.setdefault(a.device, []).append(a)
    for d in run.devices:
        spans = sorted(by_device.get(d.name, ()), key=lambda a: a.start_ms)
        for a, b in itertools.pairwise(spans):
            assert b.start_ms >= a.end_ms - 1e-9, (d.name, a, b, SEED)
        # the recorded work is all the device was busy with
        assert sum(a.end_ms - a.start_ms for a in spans) == pytest.approx(d.busy_ms, rel=1e-9)
        if d.pool in ("prm", "target"):
            assert all(1 <= a.items <= 256 for a in spans)
    assert {a.pool for a in run.activity} == {"draft", "link", "prm", "target"}


@pytest.mark.parametrize("cap", [0, 1])
def test_a_prefetch_cap_still_serves_every_problem(cap):
    # a step's target run begins as a step-ahead prefetch; once the step is rejected it is what
    # the problem waits for and runs whatever the cap (cap 0: no speculation at all)
    run, problems = _loaded_run(pools=(8, 1, 1), rate=0.8, n=400, max_prefetch_items=cap,
                                keep_timelines=400)
    assert len(run.problems) == len(problems), f"seed {SEED}"
    if cap == 0:
        ran = [(tl.trace, iv) for tl in run.timelines for iv in tl.intervals
               if iv.kind is JobKind.PREFETCH and iv.end_ms > iv.start_ms]
        assert ran, "no target step ran"
        assert all(trace.steps[iv.step].outcome is not StepOutcome.ACCEPT for trace, iv in ran), \
            f"seed {SEED}"


def test_load_stretches_latency_and_adds_queueing():
    light, _ = _loaded_run(rate=0.01, n=150)
    heavy, _ = _loaded_run(rate=0.5, n=150)
    m_light, m_heavy = fleet_metrics(light), fleet_metrics(heavy)
    assert m_heavy.p99_s > m_light.p99_s
    assert sum(m_heavy.queue_wait_s.values()) > sum(m_light.queue_wait_s.values())
    assert m_heavy.utilization["target"] > m_light.utilization["target"]


def test_same_seed_same_bytes_and_another_seed_differs():
    a = evaluate(FleetPoint(drafts=2, rate_per_s=0.2, problems=120, seed=7))
    b = evaluate(FleetPoint(drafts=2, rate_per_s=0.2, problems=120, seed=7))
    c = evaluate(FleetPoint(drafts=2, rate_per_s=0.2, problems=120, seed=8))
    assert repr(a) == repr(b)
    assert a["p99_s"] != c["p99_s"]


def test_dask_and_serial_give_identical_results():
    pytest.importorskip("distributed")
    points = [FleetPoint(rate_per_s=r, problems=60, seed=3) for r in (0.05, 0.1, 0.2)]
    with executor() as serial:
        expected = run_chunked(serial, evaluate, points, chunk_size=2)
    with executor(workers=2) as ex:
        got = run_chunked(ex, evaluate, points, chunk_size=2)
    assert repr(got) == repr(expected)


def test_throughput_never_falls_when_a_pool_gains_a_device():
    base = dict(rate_per_s=0.6, problems=200, seed=SEED)
    for key in ("drafts", "prms", "targets"):
        before = evaluate(FleetPoint(**base))
        after = evaluate(FleetPoint(**base, **{key: 2}))
        # within 1 %: the span ends with the last problem, whose place in the order can move
        assert after["problems_per_s"] >= before["problems_per_s"] * 0.99, key
        assert after["p99_s"] <= before["p99_s"] * 1.05, key


# ---------------------------------------------------------------------- the cost model


@pytest.mark.parametrize("name", ["config1/target", "config1/prm", "config2/target",
                                  "config1/draft", "config2/draft"])
def test_batch1_iterations_equal_the_fitted_calls(name):
    t = timing(name)
    cost = batch_cost(t)
    for p in (1, 57, 900):
        assert cost.iteration_ms(prefill_tokens=(p,)) == pytest.approx(t.prefill_ms(p))
    if t.decode_ms_per_token:
        for kv in (0, 300, 4000):
            tokens = 25
            total = sum(cost.iteration_ms(decode_kv=(kv + i,), decode_calls=int(i == 0))
                        for i in range(tokens))
            assert total == pytest.approx(t.decode_ms(tokens, kv))


def test_iteration_cost_never_decreases_as_the_batch_grows():
    rng = random.Random(SEED)
    for name in ("config1/target", "config1/prm", "config2/target", "config1/draft"):
        cost = batch_cost(timing(name))
        for _ in range(200):
            prefills = [rng.randrange(1, 3000) for _ in range(rng.randrange(0, 4))]
            decodes = [rng.randrange(0, 4000) for _ in range(rng.randrange(0, 40))]
            items = [("p", x) for x in prefills] + ([("d", x) for x in decodes]
                                                   if cost.decodes else [])
            previous = 0.0
            for k in range(1, len(items) + 1):
                part = items[:k]
                ms = cost.iteration_ms(prefill_tokens=tuple(x for w, x in part if w == "p"),
                                       decode_kv=tuple(x for w, x in part if w == "d"))
                assert ms >= previous - 1e-12, (name, part, f"seed {SEED}")
                previous = ms


def test_per_item_overhead_is_the_published_fit_and_the_checks_are_close():
    t = timing("config1/target")
    assert fit_per_item_ms(t) == pytest.approx(PER_ITEM_MS, abs=0.005)
    checks = published_checks(t)
    assert len({c.source for c in checks}) >= 2
    for c in checks:
        assert 0.5 < c.ratio < 1.5, (c.what, c.published, c.modelled)


def test_cost_model_rejects_what_batching_cannot_mean():
    good = batch_cost(timing("config1/target"))
    with pytest.raises(ValueError, match="kv_capacity_tokens"):
        BatchCost(**{**good.__dict__, "kv_capacity_tokens": 0})
    with pytest.raises(ValueError, match="token_compute_ms"):
        BatchCost(**{**good.__dict__, "token_compute_ms": good.decode_floor_ms * 2})
    with pytest.raises(ValueError, match="memory_utilization"):
        batch_cost(timing("config1/target"), memory_utilization=1.5)


# ---------------------------------------------------------------------- workload


def test_arrivals_have_the_asked_rate_and_burstiness():
    for arrivals in (Arrivals.poisson(2.0), Arrivals.gamma(2.0, 3.0)):
        times = arrival_times_ms(arrivals, 20000, random.Random(SEED))
        gaps = [b - a for a, b in itertools.pairwise(times)]
        mean = sum(gaps) / len(gaps)
        var = sum((g - mean) ** 2 for g in gaps) / len(gaps)
        assert mean == pytest.approx(500.0, rel=0.05), f"seed {SEED}"
        assert var ** 0.5 / mean == pytest.approx(arrivals.cv, rel=0.1), f"seed {SEED}"


def test_mixed_workload_draws_by_weight():
    wl = Workload({"math500": load_bundled("math500"), "gsm8k": load_bundled("gsm8k")},
                  {"math500": 3.0, "gsm8k": 1.0})
    problems, _ = sample_workload(wl, Arrivals.poisson(1.0), 4000, SEED)
    share = sum(p.dataset == "math500" for p in problems) / len(problems)
    assert share == pytest.approx(0.75, abs=0.03), f"seed {SEED}"


def test_arrival_trace_file(tmp_path):
    path = tmp_path / "arrivals.txt"
    path.write_text("# seconds\n0\n0.5\n0.5\n2.0  # a burst ends\n")
    arrivals = load_arrival_trace(path)
    assert arrival_times_ms(arrivals, 4, random.Random(0)) == [0.0, 500.0, 500.0, 2000.0]
    path.write_text("0\n1\n0.5\n")
    with pytest.raises(ValueError, match=r"arrivals.txt:3.*before the previous"):
        load_arrival_trace(path)
    path.write_text("0\nsoon\n")
    with pytest.raises(ValueError, match=r"arrivals.txt:2.*not a number"):
        load_arrival_trace(path)


# ---------------------------------------------------------------------- bad input


@pytest.mark.parametrize("kwargs, match", [
    ({"drafts": 0}, r"drafts must be an integer in \[1, 1,024\]"),
    ({"prms": -1}, r"prms must be an integer in \[1, 1,024\]"),
    ({"targets": 1.5}, r"targets must be an integer in \[1, 1,024\]"),
    ({"draft_slots": 0}, "draft_slots"),
    ({"routing": "random"}, "unknown routing"),
    ({"max_prefetch_items": -1}, r"max_prefetch_items must be a non-negative integer \(or None\)"),
])
def test_bad_pools(kwargs, match):
    with pytest.raises(FleetError, match=match):
        FleetSpec(system_config("config1"), ServingMode.HETEROREASON, **kwargs)


@pytest.mark.parametrize("rate", [0, -1.0, float("nan"), float("inf")])
def test_bad_rates(rate):
    with pytest.raises(ValueError,
                       match=r"rate_per_s must be a finite number in \[0.0001, 10000\]"):
        Arrivals.poisson(rate)


def test_kv_capacity_that_cannot_hold_one_problem():
    traces = _traces("math500", ServingMode.T2)[:3]
    spec = FleetSpec(system_config("config1"), ServingMode.T2, memory_utilization=0.5925)
    with pytest.raises(FleetError, match="cannot hold one problem"):
        simulate_fleet(spec, traces, [0.0, 1.0, 2.0])


def test_slo_below_the_fastest_latency_says_so():
    with pytest.raises(FleetError, match="below the fastest possible"):
        capacity(FleetPoint(problems=50), 0.5)


def test_capacity_meets_the_slo_and_the_next_rate_does_not():
    point = FleetPoint(problems=120, seed=SEED)
    result = capacity(point, 150.0, rel_tol=0.05)
    assert result.p99_s <= 150.0
    assert result.capacity_per_s > 0
    from dataclasses import replace
    above = evaluate(replace(point, rate_per_s=result.capacity_per_s * 1.6))
    assert above["p99_s"] > 150.0, f"seed {SEED}"


def test_compare_matches_power_and_device_count():
    gpus, same_count, same_power = compare_points(FleetPoint(drafts=2))
    assert gpus.mode == "t2" and same_count.mode == same_power.mode == "heteroreason"
    assert same_count.spec().devices == gpus.spec().devices
    assert same_power.drafts == 8  # 2 x 249 W of draft GPUs buy 8 boards of 60 W
    assert same_power.spec().active_power_w <= gpus.spec().active_power_w
    with pytest.raises(FleetError, match="starts from a heteroreason"):
        compare_points(FleetPoint(mode="t2"))


def test_unreachable_scheduler():
    pytest.importorskip("distributed")
    with pytest.raises(RuntimeError, match="cannot reach the Dask scheduler"), \
            executor(scheduler="tcp://127.0.0.1:9"):
        pass


def test_percentile_is_nearest_rank():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 99) == 4.0


@pytest.mark.parametrize("mode", [ServingMode.BASELINE, ServingMode.HETEROREASON])
def test_step_contexts_are_what_the_prm_calls_hold(monkeypatch, mode):
    from heteroreason.model.fleet import batched_gpu
    seen = {}
    submit = batched_gpu.BatchedGpu.submit

    def spy(self, item, work):
        submit(self, item, work)  # shapes the item
        if self.pool == "prm":
            seen[item.owner.index] = max(seen.get(item.owner.index, 0), item.kv_tokens)

    monkeypatch.setattr(batched_gpu.BatchedGpu, "submit", spy)
    traces = _traces("olympiadbench", mode)[:30]
    simulate_fleet(FleetSpec(system_config("config1"), mode), traces,
                   [k * 1e7 for k in range(len(traces))])
    for k, trace in enumerate(traces):
        peak = max(trace.step_contexts())
        # sequential modes score exactly the trace's steps; overlapped ones also speculate
        assert peak == seen[k] if mode is ServingMode.BASELINE else peak <= seen[k], \
            trace.problem_id
