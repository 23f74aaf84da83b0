"""Synthetic traces: profile statistics reproduced, determinism, the bundled set."""

import filecmp
import json

import pytest

from heteroreason.model.workload.bundled import (
    BUNDLED_PROBLEMS,
    BUNDLED_SEED,
    bundled_path,
    load_bundled,
)
from heteroreason.model.workload.trace_synth import (
    PROFILES,
    STEP_TARGET_FIELDS,
    DatasetProfile,
    generate_traces,
    iter_traces,
    step_targets,
    trace_stats,
)
from heteroreason.model.workload.traces import RSD_POLICY, dump_traces, parse_trace, trace_to_json


@pytest.mark.parametrize("name", list(PROFILES))
def test_statistics_match_the_profile_within_5_percent(name):
    prof = PROFILES[name]
    traces = generate_traces(prof, seed=3)
    stats = trace_stats(traces)
    assert stats.problems == prof.problems
    for got, want in [
        (stats.steps_per_problem, prof.steps_per_problem),
        (stats.accept_share, prof.accept_share),
        (stats.rescue_share, prof.rescue_share),
        (stats.backtrack_share, prof.backtrack_share),
        (stats.backtracks_per_problem, prof.backtracks_per_problem),
        (stats.draft_tokens_per_step, prof.draft_tokens_per_step),
        (stats.draft_tokens_per_problem, prof.draft_tokens_per_problem),
        (stats.target_tokens_per_rescue, prof.target_tokens_per_rescue),
        (stats.prompt_tokens, prof.prompt_tokens),
    ]:
        assert got == pytest.approx(want, rel=0.05), (name, got, want)


def test_generated_traces_are_valid_and_deterministic():
    prof = PROFILES["olympiadbench"]
    a = generate_traces(prof, seed=11, problems=200)
    assert a == generate_traces(prof, seed=11, problems=200)
    assert a != generate_traces(prof, seed=12, problems=200)
    for i, trace in enumerate(a):
        assert parse_trace(trace_to_json(trace), f"problem {i}") == trace
    assert max(t.backtracks for t in a) <= 5


def test_rsd_policy_generates_no_backtracks():
    traces = generate_traces(PROFILES["math500"], seed=1, policy=RSD_POLICY)
    stats = trace_stats(traces)
    assert stats.backtrack_share == 0
    assert stats.rescue_share == pytest.approx(
        PROFILES["math500"].rescue_share + PROFILES["math500"].backtrack_share, rel=0.02)


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"^seed must be a non-negative integer, not -1$"):
        generate_traces(PROFILES["gsm8k"], seed=-1)
    with pytest.raises(ValueError, match=r"^problems must be an integer in \[1, 1,000,000\], "
                                         r"not 0$"):
        generate_traces(PROFILES["gsm8k"], seed=1, problems=0)
    with pytest.raises(ValueError, match=r"^profile 'bad': outcome shares sum to "
                                         r"0\.7999999999999999, not 1$"):
        DatasetProfile("bad", 10, 5.0, 0.5, 0.2, 0.1, 50.0, 0.5, 60.0, 0.5, 100.0)
    with pytest.raises(ValueError, match=r"^no traces to summarize$"):
        trace_stats([])


@pytest.mark.parametrize("name", list(PROFILES))
def test_bundled_traces_are_what_the_generator_makes(tmp_path, name):
    traces = generate_traces(PROFILES[name], seed=BUNDLED_SEED, problems=BUNDLED_PROBLEMS)
    dump_traces(traces, tmp_path / "again.jsonl")
    assert filecmp.cmp(tmp_path / "again.jsonl", bundled_path(name), shallow=False)
    assert load_bundled(name) == traces


@pytest.mark.parametrize("name", list(PROFILES))
def test_no_generated_step_exceeds_the_context_and_only_long_problems_are_cut(name):
    prof = PROFILES[name]
    cut = generate_traces(prof, seed=3)
    whole = generate_traces(prof, seed=3, max_context_tokens=10**6)
    assert max(max(t.step_contexts()) for t in cut) <= 4096
    for c, w in zip(cut, whole, strict=True):
        if max(w.step_contexts()) <= 4096:
            assert c == w
        else:  # ended before its first step beyond the context, the rest of it as it was
            assert c.steps == w.steps[:len(c.steps)]
            assert w.step_contexts()[len(c.steps)] > 4096
    with pytest.raises(ValueError, match="max_context_tokens must be a positive integer"):
        generate_traces(prof, seed=3, max_context_tokens=0)
    with pytest.raises(ValueError, match="its prompt and first step need"):
        generate_traces(prof, seed=3, problems=5, max_context_tokens=10)


def test_the_stream_is_the_set_and_checks_its_arguments_before_the_first_trace():
    prof = PROFILES["olympiadbench"]
    stream = iter_traces(prof, seed=4, problems=300)
    assert next(stream) == generate_traces(prof, seed=4, problems=300)[0]
    assert [next(stream) for _ in range(299)] == generate_traces(prof, seed=4, problems=300)[1:]
    assert next(stream, None) is None
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        iter_traces(prof, seed=-2)  # not iterated: the error comes from the call
    with pytest.raises(ValueError, match=r"problems must be an integer in \[1, 1,000,000\]"):
        iter_traces(prof, seed=1, problems=1_000_001)


def test_a_failing_stream_leaves_the_output_as_it_was(tmp_path):
    out = tmp_path / "t.jsonl"
    out.write_text("before\n")
    traces = iter_traces(PROFILES["gsm8k"], seed=1, problems=5, max_context_tokens=10)
    with pytest.raises(ValueError, match="beyond max_context_tokens 10"):
        dump_traces(traces, out)
    assert out.read_text() == "before\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


def test_the_profiles_are_the_artifacts_full_sets_in_step_semantics(artifact):
    reference = json.loads((artifact / "Hardware/reference_results/simulator_reference.json")
                           .read_text())["cases"]["Config1"]["with_bt"]["datasets"]
    assert set(reference) == set(PROFILES)
    for name, metrics in reference.items():
        targets = step_targets(metrics, where=name)
        prof = PROFILES[name]
        for field in STEP_TARGET_FIELDS:
            assert getattr(prof, field) == pytest.approx(targets[field], rel=2e-3), (name, field)
        # a backtrack event and its rescue are one step: fewer steps than events
        assert prof.steps_per_problem < metrics["events"] / metrics["examples"]


def test_the_conversion_by_hand_and_its_errors():
    metrics = {"examples": 10, "events": 110, "total_generated_tokens": 5000,
               "target_total_tokens": 3000,
               "status_counts": {"accept_pure_draft": 80, "target_rescue": 20,
                                 "BACKTRACK_EVENT": 10}}
    # 100 steps: 80 accepted, 10 rescued, 10 backtracks; 30 target draws
    assert step_targets(metrics) == {
        "problems": 10, "steps_per_problem": 10.0, "accept_share": 0.8, "rescue_share": 0.1,
        "backtrack_share": 0.1, "draft_tokens_per_step": 50.0, "target_tokens_per_rescue": 100.0}
    with pytest.raises(ValueError, match=r"^x: status_counts sum to 110, not the 111 events$"):
        step_targets({**metrics, "events": 111}, where="x")
    with pytest.raises(ValueError, match=r"^x: 30 backtrack events but 20 rescues"):
        step_targets({**metrics, "events": 130, "status_counts": {
            **metrics["status_counts"], "BACKTRACK_EVENT": 30}}, where="x")
    with pytest.raises(ValueError, match=r"^x: field 'status_counts.target_rescue' must be a "
                                         r"non-negative number, not None$"):
        step_targets({**metrics, "status_counts": {"accept_pure_draft": 1}}, where="x")


def test_a_profile_the_generator_cannot_reach_is_refused():
    # one step a problem: no slot for a backtrack (never at a problem's first step)
    prof = DatasetProfile("tight", 10, 1.0, 0.5, 0.2, 0.3, 50.0, 0.5, 60.0, 0.5, 100.0,
                          steps_dispersion=1e6)
    with pytest.raises(ValueError, match=r"^profile 'tight': 3 backtracks \(share 0\.3\) do not "
                                         r"fit 10 problems of 10 steps"):
        generate_traces(prof, seed=1)
