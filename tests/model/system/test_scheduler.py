"""The system scheduler: hand-computed latencies, invariants, the modes' relations, errors."""

import json

import pytest

from heteroreason.model.system.config import ServingMode, system_config
from heteroreason.model.system.scheduler import ScheduleError, check_timeline, simulate_problem
from heteroreason.model.system.simulate import chrome_trace, simulate, timeline_json
from heteroreason.model.workload.trace_synth import PROFILES, generate_traces
from heteroreason.model.workload.traces import RSD_POLICY, ProblemTrace, StepEvent, TraceError

CFG = system_config("config1")


def trace(*steps, prompt=100, policy=None):
    kwargs = {"policy": policy} if policy else {}
    return ProblemTrace("toy", "0", prompt, tuple(steps), None, **kwargs)


def test_sequential_baseline_latency_by_hand():
    tr = trace(StepEvent("accept", 10), StepEvent("rescue", 8, 5))
    run = simulate_problem(tr, CFG, ServingMode.BASELINE)
    d, p, t, link = CFG.draft_gpu, CFG.prm, CFG.target, CFG.link
    expected = (d.prefill_ms(100)                                   # draft prompt prefill
                + d.decode_ms(10, 100) + link.tokens_ms(10) + p.prefill_ms(110)
                + d.decode_ms(8, 110) + link.tokens_ms(8) + p.prefill_ms(118)
                + t.prefill_ms(110) + t.decode_ms(5, 110)           # target from scratch
                + link.tokens_ms(5) + p.prefill_ms(115))            # target step scored
    assert run.latency_ms == pytest.approx(expected)
    assert run.output_tokens == 15


def test_rsd_skips_scoring_the_target_step():
    tr = trace(StepEvent("accept", 10), StepEvent("rescue", 8, 5))
    base = simulate_problem(tr, CFG, ServingMode.BASELINE)
    rsd = simulate_problem(tr, CFG, ServingMode.RSD)
    assert base.latency_ms - rsd.latency_ms == pytest.approx(CFG.prm.prefill_ms(115))


def test_backtrack_in_the_sequential_baseline():
    tr = trace(StepEvent("accept", 10), StepEvent("accept", 20),
               StepEvent("backtrack", 7, 6, backtrack_steps=1, regenerated_tokens=9),
               StepEvent("accept", 4))
    run = simulate_problem(tr, CFG, ServingMode.BASELINE)
    assert run.output_tokens == 10 + 9 + 4
    kinds = [iv.kind for iv in run.intervals if iv.resource == "target"]
    assert kinds == ["generate", "regenerate"]


@pytest.mark.parametrize("mode", list(ServingMode))
@pytest.mark.parametrize("name", list(PROFILES))
def test_invariants_hold_on_synthetic_traces(mode, name):
    policy = RSD_POLICY if mode is ServingMode.RSD else None
    kwargs = {"policy": policy} if policy else {}
    traces = generate_traces(PROFILES[name], seed=9, problems=60, **kwargs)
    result = simulate(traces, CFG, mode)
    for run in result.runs:
        check_timeline(run)  # already checked inside; asserted again for the record
        assert run.output_tokens == run.trace.output_tokens


@pytest.mark.parametrize("config", ["config1", "config2"])
@pytest.mark.parametrize("lengths", [[30], [12, 40, 7], [5] * 12, [200, 3, 90, 60]])
def test_overlap_never_slower_than_baseline_without_rejections(config, lengths):
    tr = trace(*(StepEvent("accept", n) for n in lengths))
    for cfg in (system_config(config),
                system_config(config).with_fpga(system_config(config).draft_gpu)):
        base = simulate_problem(tr, cfg, ServingMode.BASELINE).latency_ms
        assert simulate_problem(tr, cfg, ServingMode.T2).latency_ms <= base + 1e-9
        if cfg.fpga.decode_ms(sum(lengths), 100) > cfg.draft_gpu.decode_ms(sum(lengths), 100):
            continue  # an FPGA slower than the GPU draft can lose; T1 promises nothing then
        # the FPGA starts after the GPU's prompt prefill, the KV migration and the first token
        startup = (cfg.link.kv_migration_ms(cfg.draft_model, 100)
                   + cfg.fpga.ingest_ms(1, 100))
        latency_ms = simulate_problem(tr, cfg, ServingMode.HETEROREASON).latency_ms
        assert latency_ms <= base + startup + 1e-9


def test_step_ahead_stalls_when_verification_is_slow():
    slow_prm = CFG.prm.with_(prefill_call_ms=500.0)
    cfg = CFG.__class__(**{**CFG.__dict__, "prm": slow_prm})
    tr = trace(*(StepEvent("accept", 5) for _ in range(6)))
    run = simulate_problem(tr, cfg, ServingMode.T2)
    stalls = [iv for iv in run.intervals if iv.kind == "stall"]
    assert run.stalled_steps == len(stalls) >= 4
    assert all(iv.resource == "draft" and iv.duration_ms > 0 for iv in stalls)


def test_reject_squashes_the_step_ahead_draft():
    tr = trace(StepEvent("accept", 40), StepEvent("rescue", 40, 30), StepEvent("accept", 40))
    run = simulate_problem(tr, CFG, ServingMode.HETEROREASON)
    wasted = [iv for iv in run.intervals if iv.wasted and iv.resource == "draft"]
    assert wasted and all(iv.kind in ("draft", "ingest") for iv in wasted)
    ingests = [iv for iv in run.intervals if iv.kind == "ingest" and not iv.wasted]
    assert any(iv.tokens == 30 for iv in ingests), "shadow ingest of the refined step"
    assert any(iv.kind == "kv_migration" for iv in run.intervals)


def test_cached_prefetch_is_reused_by_a_backtrack():
    tr = trace(StepEvent("accept", 60), StepEvent("accept", 60),
               StepEvent("backtrack", 10, 10, backtrack_steps=1, regenerated_tokens=20),
               StepEvent("accept", 5))
    run = simulate_problem(tr, CFG, ServingMode.T2)
    assert run.cached_tokens_reused > 0


def test_recorded_prefetch_lengths_bound_the_prefetch_and_the_cache():
    def run(prefetch):
        tr = trace(StepEvent("accept", 60, prefetch_tokens=prefetch),
                   StepEvent("accept", 60, prefetch_tokens=prefetch),
                   StepEvent("backtrack", 10, 10, backtrack_steps=1, regenerated_tokens=20),
                   StepEvent("accept", 5))
        return simulate_problem(tr, CFG, ServingMode.T2)
    unknown, short = run(0), run(12)
    prefetches = [iv for iv in short.intervals if iv.kind == "prefetch"]
    assert prefetches and all(iv.tokens <= 12 for iv in prefetches if iv.step < 2)
    # the regeneration reuses what the finished prefetch of that position produced, no more
    assert 0 < short.cached_tokens_reused <= 12 < unknown.cached_tokens_reused


@pytest.mark.parametrize("mode", [ServingMode.BASELINE, ServingMode.T2, ServingMode.HETEROREASON])
def test_a_backtrack_of_no_steps_drops_the_failed_step_alone(mode):
    """``backtrack_steps`` 0 (a token log's backtrack to the step before the failed one): the
    chain keeps every accepted step; drafting resumes at the failed step's position."""
    tr = trace(StepEvent("accept", 10), StepEvent("accept", 20),
               StepEvent("backtrack", 5, 6, backtrack_steps=0), StepEvent("accept", 7))
    assert tr.accepted_chain() == [10, 20, 7]
    run = simulate_problem(tr, CFG, mode)
    check_timeline(run)
    assert run.output_tokens == 37
    drafts = [iv for iv in run.intervals if iv.kind == "draft" and not iv.wasted]
    assert sorted({iv.step for iv in drafts}) == [0, 1, 2, 3]


def test_bad_input():
    bt = trace(StepEvent("accept", 3), StepEvent("backtrack", 1, 1, backtrack_steps=1))
    with pytest.raises(ScheduleError, match=r"^problem 0 \(toy\) has 1 backtrack\(s\): mode rsd "
                                            r"replays traces without backtracking$"):
        simulate_problem(bt, CFG, ServingMode.RSD)
    with pytest.raises(ValueError, match=r"^unknown mode 'fast'; choose one of rsd, baseline, t2, "
                                         r"heteroreason$"):
        simulate([bt], CFG, "fast")
    with pytest.raises(ValueError, match=r"^unknown config 'config9'; choose one of config1, "
                                         r"config2$"):
        simulate([bt], "config9", "baseline")
    with pytest.raises(ValueError, match=r"^no traces to simulate$"):
        simulate([], CFG, "baseline")
    with pytest.raises(ValueError, match=r"^unknown FPGA model 'u50'; choose one of artifact, "
                                         r"artifact-v80, rtl-u280-200, rtl-u280-300, rtl-v80, "
                                         r"rtl-u280-300-batch4, rtl-v80-batch4$"):
        system_config("config1", fpga="u50")


def test_timeline_exports():
    tr = trace(StepEvent("accept", 10), StepEvent("rescue", 8, 5))
    run = simulate_problem(tr, CFG, ServingMode.HETEROREASON)
    doc = json.loads(json.dumps(timeline_json(run)))
    assert doc["mode"] == "heteroreason" and len(doc["intervals"]) == len(run.intervals)
    chrome = chrome_trace(run)
    spans = [e for e in chrome["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(run.intervals)
    assert {e["tid"] for e in spans} <= {1, 2, 3, 4}
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(1e3 * run.latency_ms)


def test_a_chain_that_ends_empty_replays_with_defined_metrics():
    """An accepted step undone by a one-step backtrack that regenerates nothing: a valid trace
    whose final chain is empty."""
    tr = trace(StepEvent("accept", 10), StepEvent("backtrack", 6, 4, backtrack_steps=1))
    assert tr.output_tokens == 0
    for mode in (ServingMode.BASELINE, ServingMode.T2, ServingMode.HETEROREASON):
        result = simulate([tr], CFG, mode)
        s = result.summary
        assert result.runs[0].output_tokens == 0 and s.goodput_tokens_s == 0.0
        assert s.j_per_output_token_device == float("inf") and s.latency_s > 0


@pytest.mark.parametrize("step, message", [
    (StepEvent("accept", 10, backtrack_steps=2),
     r"^problem '0' \(toy\): steps\[1\]: field 'backtrack_steps': is not used by accept steps "
     r"\(got 2\)$"),
    (StepEvent("rescue", 10, 0),
     r"^problem '0' \(toy\): steps\[1\]: field 'target_tokens': a rescue has at least one "
     r"target token \(got 0\)$"),
    (StepEvent("accept", -3),
     r"^problem '0' \(toy\): steps\[1\]: field 'draft_tokens': must be at least 0 \(got -3\)$"),
])
def test_hand_built_traces_are_checked_like_loaded_ones(step, message):
    with pytest.raises(TraceError, match=message):
        simulate_problem(trace(StepEvent("accept", 5), step), CFG, ServingMode.T2)


def test_a_replay_without_timelines_keeps_no_per_problem_records_and_the_same_summary():
    from heteroreason.model.system.metrics import dataset_metrics, problem_metrics
    from heteroreason.model.workload.bundled import load_bundled
    traces = load_bundled("gsm8k")[:40]
    full = simulate(traces, "config1", "heteroreason")
    lean = simulate(traces, "config1", "heteroreason", keep_runs=False)
    some = simulate(traces, "config1", "heteroreason", keep_runs=3)
    assert len(full.runs) == len(full.metrics) == 40
    assert lean.runs == lean.metrics == ()
    assert len(some.runs) == len(some.metrics) == 3
    assert some.metrics == full.metrics[:3]
    # the running sums give the figures of a sum over every problem, to the bit
    assert lean.summary == some.summary == full.summary
    assert full.summary == dataset_metrics(problem_metrics(run) for run in full.runs)
