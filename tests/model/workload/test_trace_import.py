"""Importers of the artifact's execution traces and token logs."""

import json
import re

import pytest

from heteroreason.model.workload.trace_import import (
    import_artifact_file,
    import_artifact_problem,
    import_token_log,
)
from heteroreason.model.workload.trace_synth import trace_stats
from heteroreason.model.workload.traces import StepEvent, TraceError


def test_artifact_fixture_with_backtrack(fixtures):
    trace = import_artifact_file(fixtures / "artifact" / "toyset" / "example_0.json")
    assert trace.dataset == "toyset" and trace.problem_id == "0" and trace.correct is True
    assert trace.steps == (
        StepEvent("accept", 10), StepEvent("accept", 20), StepEvent("rescue", 15, 12),
        StepEvent("backtrack", 9, 8, backtrack_steps=1, regenerated_tokens=25),
        StepEvent("accept", 7))
    assert trace.accepted_chain() == [10, 20, 25, 7]


def test_token_log_fixture(fixtures):
    with pytest.raises(TraceError, match=rf"^{re.escape(str(fixtures))}/token_log\.jsonl:3: "
                                         r"step_attempts\[1\]: field 'from_step': is not the "
                                         r"position of the failed target step before it \(0\) "
                                         r"\(got 5\)$"):
        import_token_log(fixtures / "token_log.jsonl", dataset="toy", prompt_tokens=30)
    traces, skipped = import_token_log(fixtures / "token_log.jsonl", dataset="toy",
                                       prompt_tokens=30, skip_invalid=True)
    assert [t.problem_id for t in traces] == ["0", "1"] and len(skipped) == 1
    # from 2 to 1: the failed step at position 2 alone is dropped, step 1 is kept
    assert traces[1].steps[2] == StepEvent("backtrack", 113, 23, backtrack_steps=0)
    assert traces[1].accepted_chain() == [14, 26, 38]
    assert traces[1].correct is False and traces[1].prompt_tokens == 30


AT = r"^example_0\.json: execution_trace\[0\]: field "


@pytest.mark.parametrize("mutate, message", [
    (lambda o: o.pop("prompt_tokens"),
     r"^example_0\.json: field 'prompt_tokens': is missing \(no_bt traces\): give the prompt "
     r"length explicitly$"),
    (lambda o: o.update(execution_trace=[]),
     r"^example_0\.json: field 'execution_trace': must be a non-empty list \(got \[\]\)$"),
    (lambda o: o["execution_trace"][0].update(status="teleport"),
     AT + r"'status': is not accept_pure_draft, target_rescue or BACKTRACK_EVENT "
          r"\(got 'teleport'\)$"),
    (lambda o: o["execution_trace"][0].update(draft_tokens_spent=-1),
     AT + r"'draft_tokens_spent': must not be negative \(got -1\)$"),
    (lambda o: o["execution_trace"][0].update(draft_tokens_spent="9"),
     AT + r"'draft_tokens_spent': must be int \(got '9'\)$"),
    (lambda o: o["execution_trace"].insert(0, dict(o["execution_trace"][4])),
     AT + r"'status': a backtrack must follow a target rescue \(got 'BACKTRACK_EVENT'\)$"),
    (lambda o: o.pop("idx"), r"^example_0\.json: field 'idx': is required$"),
])
def test_bad_artifact_traces(fixtures, mutate, message):
    obj = json.loads((fixtures / "artifact" / "toyset" / "example_0.json").read_text())
    mutate(obj)
    with pytest.raises(TraceError, match=message):
        import_artifact_problem(obj, dataset="toy", where="example_0.json")


def test_no_bt_trace_takes_an_explicit_prompt_length(fixtures):
    obj = json.loads((fixtures / "artifact" / "toyset" / "example_1.json").read_text())
    del obj["prompt_tokens"]
    trace = import_artifact_problem(obj, dataset="toy", where="x", prompt_tokens=77)
    assert trace.prompt_tokens == 77


def test_artifact_samples_import_and_match_their_statistics(artifact):
    folder = artifact / "Hardware" / "inputs" / "Config1" / "with_bt"
    expected_events = {"olympiadbench": 22.1, "gaokao2023en": 14.8, "gsm8k": 6.9,
                       "math500": 11.9}
    for dataset, events_per_problem in expected_events.items():
        files = sorted((folder / dataset).glob("example_*.json"))
        traces = [import_artifact_file(f) for f in files]
        assert len(traces) == 30
        stats = trace_stats(traces)
        # the artifact counts a backtrack as a rescue event plus a BACKTRACK_EVENT
        events = stats.steps_per_problem + stats.backtracks_per_problem
        assert events == pytest.approx(events_per_problem, abs=0.05), dataset


def test_artifact_token_log_sample(artifact):
    path = (artifact / "AE_hardware" / "inputs" / "token_logs" / "weak_config2"
            / "gsm8k.head8.jsonl")
    traces, skipped = import_token_log(path, dataset="gsm8k", prompt_tokens=116,
                                       skip_invalid=True)
    # every record consistent once to_step is read as the last position kept
    assert len(traces) == 8 and not skipped
    assert sum(t.backtracks for t in traces) == 10
    # record 8 (idx 7): backtracks 3 -> 1, 2 -> 0, 3 -> 2, then two accepted steps
    assert [s.backtrack_steps for s in traces[7].steps if s.outcome == "backtrack"] == [1, 1, 0]
    assert traces[7].accepted_chain() == [40, 140, 75, 56, 27]
