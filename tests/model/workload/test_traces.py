"""The trace format: round trips, derived quantities, and every kind of malformed input."""

import json
import re

import pytest

from heteroreason.model.workload.traces import (
    RSD_POLICY,
    ProblemTrace,
    StepEvent,
    TraceError,
    dump_traces,
    load_traces,
)

GOOD = {"dataset": "toy", "problem_id": "7", "prompt_tokens": 40, "correct": True,
        "steps": [{"outcome": "accept", "draft_tokens": 10, "draft_score": 0.9},
                  {"outcome": "rescue", "draft_tokens": 12, "target_tokens": 30,
                   "draft_score": 0.2, "target_score": 0.8},
                  {"outcome": "backtrack", "draft_tokens": 5, "target_tokens": 6,
                   "target_score": 0.1, "backtrack_steps": 2, "regenerated_tokens": 17},
                  {"outcome": "accept", "draft_tokens": 4}]}


def write_lines(tmp_path, *objs):
    path = tmp_path / "t.jsonl"
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs))
    return path


def with_(base=GOOD, **changes):
    obj = json.loads(json.dumps(base))
    obj.update(changes)
    return obj


def with_step(i, **changes):
    obj = json.loads(json.dumps(GOOD))
    obj["steps"][i].update(changes)
    return obj


def test_round_trip_and_derived_quantities(tmp_path):
    path = write_lines(tmp_path, GOOD)
    [trace] = load_traces(path)
    assert trace.accepted_chain() == [17, 4]
    assert trace.output_tokens == 21
    assert trace.generated_tokens == 10 + 12 + 30 + 5 + 6 + 17 + 4
    assert trace.backtracks == 1
    out = tmp_path / "again.jsonl"
    dump_traces([trace], out)
    assert load_traces(out) == [trace]


def test_prefetch_tokens_round_trip(tmp_path):
    path = write_lines(tmp_path, with_step(0, prefetch_tokens=9))
    [trace] = load_traces(path)
    assert trace.steps[0].prefetch_tokens == 9 and trace.steps[1].prefetch_tokens == 0
    out = tmp_path / "again.jsonl"
    dump_traces([trace], out)
    assert '"prefetch_tokens":9' in out.read_text().replace(" ", "")
    assert load_traces(out) == [trace]


def test_policy_round_trip(tmp_path):
    trace = ProblemTrace("toy", "1", 5, (StepEvent("rescue", 3, 4),), None, RSD_POLICY)
    dump_traces([trace], tmp_path / "r.jsonl")
    assert load_traces(tmp_path / "r.jsonl")[0].policy == RSD_POLICY


MALFORMED = [
    ("{not json", None, "is not valid JSON"),
    ("[1, 2]", None, "must be a JSON object"),
    (with_(dataset=""), "dataset", "non-empty string"),
    (with_(dataset=3), "dataset", "non-empty string"),
    (with_(problem_id=None), "problem_id", "non-empty string or an integer"),
    (with_(prompt_tokens=0), "prompt_tokens", "at least 1"),
    (with_(prompt_tokens=12.5), "prompt_tokens", "must be an integer"),
    (with_(prompt_tokens=True), "prompt_tokens", "must be an integer"),
    (with_(correct="yes"), "correct", "true, false or null"),
    (with_(steps=[]), "steps", "non-empty list"),
    (with_(steps="accept"), "steps", "non-empty list"),
    (with_(format="other/2"), "format", "heteroreason-trace/1"),
    (with_(colour="red"), "colour", "is not a trace field"),
    (with_(policy=[0.7]), "policy", "must be an object"),
    (with_(policy={"max_backtracks": -1}), "max_backtracks", "at least 0"),
    (with_(policy={"accept_threshold": 1.5}), "accept_threshold", "in [0, 1]"),
    (with_(policy={"depth": 3}), "depth", "is not a trace field"),
    (with_(steps=[7]), None, "a step must be an object"),
    (with_step(0, outcome="skip"), "outcome", "accept, rescue, backtrack"),
    (with_step(0, draft_tokens=-3), "draft_tokens", "at least 0"),
    (with_step(0, draft_tokens=0), "draft_tokens", "at least one token"),
    (with_step(0, target_tokens=4), "target_tokens", "no target tokens"),
    (with_step(0, draft_score=0.5), "draft_score", "scores at least 0.7"),
    (with_step(1, draft_score=0.95), "draft_score", "scores below 0.7"),
    (with_step(1, target_tokens=0), "target_tokens", "at least one target token"),
    (with_step(1, target_score="high"), "target_score", "number in [0, 1]"),
    (with_step(1, draft_score=float("nan")), "draft_score", "number in [0, 1]"),
    (with_step(0, backtrack_steps=1), "backtrack_steps", "only a backtrack"),
    (with_step(2, backtrack_steps=-1), "backtrack_steps", "at least 0"),
    (with_step(2, backtrack_steps=3), "backtrack_steps", "beyond the start"),
    (with_step(2, target_score=0.9), "target_score", "below 0.7"),
    (with_step(3, shoe=1), "shoe", "is not a trace field"),
    (with_step(1, prefetch_tokens=5), "prefetch_tokens", "only an accepted step"),
    (with_step(0, prefetch_tokens=-1), "prefetch_tokens", "at least 0"),
    (with_(policy={"max_backtracks": 0}), "outcome", "exceeds the policy's budget of 0"),
    (with_(policy={"max_backtrack_depth": 1}), "backtrack_steps", "depth of 1"),
]


@pytest.mark.parametrize("line, field, reason", MALFORMED)
def test_malformed_input_is_rejected_with_its_location(tmp_path, line, field, reason):
    path = write_lines(tmp_path, GOOD, line)
    with pytest.raises(TraceError) as info:
        load_traces(path)
    message = str(info.value)
    assert message.startswith(f"{path}:2"), message
    assert reason in message, message
    if field is not None:
        assert f"field '{field}'" in message, message


def test_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(TraceError, match=rf"^{re.escape(str(tmp_path))}/"
                                         r"empty\.jsonl: holds no problems$"):
        load_traces(empty)
    with pytest.raises(TraceError, match=rf"^{re.escape(str(tmp_path))}/"
                                         r"absent\.jsonl: cannot be read: No such file or "
                                         r"directory$"):
        load_traces(tmp_path / "absent.jsonl")


def test_backtrack_budget_counts_per_problem(tmp_path):
    steps = [{"outcome": "accept", "draft_tokens": 3}]
    for _ in range(6):
        steps.append({"outcome": "backtrack", "draft_tokens": 1, "target_tokens": 1,
                      "backtrack_steps": 1, "regenerated_tokens": 2})
    path = write_lines(tmp_path, with_(steps=steps))
    with pytest.raises(TraceError, match=rf"^{re.escape(str(tmp_path))}/"
                                         r"t\.jsonl:1: steps\[6\]: field 'outcome': backtrack 6 "
                                         r"exceeds the policy's budget of 5 \(got "
                                         r"'backtrack'\)$"):
        load_traces(path)


def test_token_counts_are_bounded(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"dataset": "toy", "problem_id": "0", "prompt_tokens": 1000000000000000, '
                    '"steps": [{"outcome": "accept", "draft_tokens": 5}]}\n')
    with pytest.raises(TraceError, match=rf"^{re.escape(str(path))}:1: field 'prompt_tokens': "
                                         r"must be at most 1,000,000 \(got 1000000000000000\)$"):
        load_traces(path)
