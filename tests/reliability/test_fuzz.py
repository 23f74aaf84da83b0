"""Property-based bad input (Hypothesis, derandomized: the same examples on every run, and a
failure prints the example that broke): whatever a trace line, a profile CSV or a hand-built
trace holds, the reader either takes it or raises its own error naming where; no other
exception, and what it takes satisfies the format's rules."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_cases import valid_problem

from heteroreason.model.system.simulate import simulate
from heteroreason.model.timing.profile_fit import REQUIRED, ProfileError, fit_profile, read_profile
from heteroreason.model.workload.traces import (
    ProblemTrace,
    StepEvent,
    TraceError,
    check_trace,
    load_traces,
)

FUZZ = settings(derandomize=True, max_examples=100, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

json_scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6)

STEP_KEYS = ["outcome", "draft_tokens", "target_tokens", "draft_score", "target_score",
             "backtrack_steps", "regenerated_tokens", "prefetch_tokens", "unknown"]
TOP_KEYS = ["dataset", "problem_id", "prompt_tokens", "correct", "policy", "steps", "format",
            "unknown"]
POLICY_KEYS = ["accept_threshold", "backtrack_threshold", "max_backtracks",
               "max_backtrack_depth"]


@st.composite
def mutated_problems(draw):
    """The valid problem with one to three values replaced, fields deleted or steps dropped,
    duplicated or reordered."""
    obj = copy.deepcopy(valid_problem())
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["top", "step", "policy", "delete", "steps"]))
        if kind == "top":
            obj[draw(st.sampled_from(TOP_KEYS))] = draw(json_values)
        elif kind == "policy" and isinstance(obj.get("policy"), dict):
            obj["policy"][draw(st.sampled_from(POLICY_KEYS))] = draw(json_values)
        elif kind == "step" and isinstance(obj.get("steps"), list) and obj["steps"]:
            step = obj["steps"][draw(st.integers(0, len(obj["steps"]) - 1))]
            if isinstance(step, dict):
                step[draw(st.sampled_from(STEP_KEYS))] = draw(json_values)
        elif kind == "delete":
            key = draw(st.sampled_from(TOP_KEYS))
            obj.pop(key, None)
        elif isinstance(obj.get("steps"), list):
            steps = obj["steps"]
            obj["steps"] = draw(st.permutations(steps)) + draw(
                st.lists(st.sampled_from(steps), max_size=3)) if steps else steps
    return obj


def check_taken(trace: ProblemTrace) -> None:
    """What the loader takes obeys the format's rules (written from the format's text)."""
    assert isinstance(trace.prompt_tokens, int) and trace.prompt_tokens >= 1
    chain = backtracks = 0
    for step in trace.steps:
        assert step.draft_tokens >= 0 and step.target_tokens >= 0
        if step.outcome == "accept":
            assert step.draft_tokens >= 1 and step.target_tokens == 0
            chain += 1
        elif step.outcome == "rescue":
            assert step.target_tokens >= 1
            chain += 1
        else:
            backtracks += 1
            assert 1 <= step.backtrack_steps <= min(chain, trace.policy.max_backtrack_depth)
            chain += -step.backtrack_steps + (step.regenerated_tokens > 0)
        for score in (step.draft_score, step.target_score):
            assert score is None or 0.0 <= score <= 1.0
    assert backtracks <= trace.policy.max_backtracks


@FUZZ
@given(problem=mutated_problems())
def test_a_mutated_trace_is_taken_valid_or_refused_by_line(tmp_path_factory, problem):
    path = tmp_path_factory.mktemp("fuzz") / "t.jsonl"
    path.write_text(json.dumps(valid_problem()) + "\n" + json.dumps(problem) + "\n")
    try:
        traces = load_traces(path)
    except TraceError as exc:
        assert str(exc).startswith(f"{path}:2: "), str(exc)
        return
    check_taken(traces[1])


@FUZZ
@given(line=st.binary(max_size=60))
def test_arbitrary_bytes_are_refused_with_their_line(tmp_path_factory, line):
    path = tmp_path_factory.mktemp("fuzz") / "t.jsonl"
    line = line.replace(b"\n", b" ")
    path.write_bytes(json.dumps(valid_problem()).encode() + b"\n" + line)
    try:
        traces = load_traces(path)
    except TraceError as exc:
        assert str(exc).startswith(f"{path}:2: "), str(exc)
        return
    assert len(traces) == 1 + bool(line.strip(b" \t\r"))
    check_taken(traces[-1])


cells = st.one_of(st.integers(-5, 10**6).map(str), st.floats(allow_nan=True).map(repr),
                  st.text(alphabet=st.characters(blacklist_characters=",\n\r\"",
                                                 blacklist_categories=["Cs"]), max_size=6))


@FUZZ
@given(rows=st.lists(st.lists(cells, min_size=len(REQUIRED), max_size=len(REQUIRED) + 1),
                     min_size=1, max_size=8))
def test_a_fuzzed_profile_is_read_and_fitted_or_refused(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("fuzz") / "profile.csv"
    path.write_text(",".join(REQUIRED) + "\n" + "".join(",".join(r) + "\n" for r in rows))
    try:
        columns = read_profile(path)
    except ProfileError as exc:
        assert str(exc).startswith(str(path)), str(exc)
        return
    assert all(np.all(np.isfinite(v)) and np.all(v >= 0) for v in columns.values())
    try:
        fits = fit_profile(columns)
    except ProfileError as exc:
        assert str(exc).startswith("no component can be fitted: ")
        return
    for fit in fits:
        assert fit.rows >= 3 and math.isfinite(fit.call_ms) and math.isfinite(fit.ms_per_token)


counts = st.one_of(st.integers(-3, 40), st.floats(-2, 40), st.none(), st.text(max_size=3))
scores = st.one_of(st.none(), st.floats(allow_nan=True), st.integers(-1, 2))


@st.composite
def hand_built_steps(draw):
    outcome = draw(st.sampled_from(["accept", "rescue", "backtrack"]))
    return StepEvent(outcome, draw(counts), draw(counts), draw(scores), draw(scores),
                     draw(counts), draw(counts), draw(counts))


@FUZZ
@given(steps=st.lists(hand_built_steps(), min_size=0, max_size=5), prompt=counts)
def test_a_hand_built_trace_replays_or_is_refused_by_name(steps, prompt):
    trace = ProblemTrace("toy", "p9", prompt, tuple(steps))
    try:
        check_trace(trace)
    except TraceError as exc:
        assert str(exc).startswith("problem 'p9' (toy)"), str(exc)
        return
    check_taken(trace)
    result = simulate([trace], "config1", "heteroreason")
    assert result.summary.latency_s > 0
