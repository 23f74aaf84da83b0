"""The BRSD controller: its decisions on scripted backends, its traces, the reference backends,
backend misbehaviour and crash safety of the trace file."""

import math

import numpy as np
import pytest

from heteroreason.model.controller.brsd import (
    ControllerConfig,
    ControllerError,
    ReferenceGenerator,
    RewardHeadScorer,
    run_problem,
    run_problems,
)
from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.spec.numerics.qwen2_float import FloatDecoder, random_weights
from heteroreason.model.system.config import ServingMode, system_config
from heteroreason.model.system.scheduler import simulate_problem
from heteroreason.model.workload.traces import load_traces, parse_trace, trace_to_json

EOS, DELIM = 0, 9


class Scripted:
    """A generator or scorer that replays a script; records what it was asked."""

    def __init__(self, name, script, max_context=10_000):
        self.name = name
        self.script = list(script)
        self.max_context = max_context
        self.calls = []

    def generate_step(self, context, *, max_tokens, stop):
        self.calls.append(list(context))
        return list(self.script.pop(0))

    def score_step(self, context, step):
        self.calls.append((list(context), list(step)))
        return self.script.pop(0)


def config(**kw):
    """Scripted runs leave the prefetch out unless a test asks for it."""
    return ControllerConfig(delimiters=frozenset({DELIM}), eos=EOS,
                            **({"record_prefetch": False} | kw))


def test_accepted_steps_record_the_targets_prefetch():
    draft = Scripted("draft", [[1, 2, DELIM], [3, DELIM], [5, EOS]])
    target = Scripted("target", [[6, 6, 6, DELIM], [7, DELIM], [8, EOS]])
    prm = Scripted("prm", [0.9, 0.2, 0.8, 0.95])  # accept, reject (rescue), accept
    trace, chain = run_problem([100], draft=draft, target=target, prm=prm,
                               config=config(record_prefetch=True, backtracking=False),
                               dataset="toy", problem_id="p")
    assert [(s.outcome, s.prefetch_tokens) for s in trace.steps] == \
        [("accept", 4), ("rescue", 0), ("accept", 2)]
    # the prefetch starts from the accepted step's own context
    assert target.calls == [[100], [100, 1, 2, DELIM], [100, 1, 2, DELIM, 7, DELIM]]
    assert chain == [1, 2, DELIM, 7, DELIM, 5, EOS]
    assert parse_trace(trace_to_json(trace), "t") == trace


def test_accept_rescue_backtrack_and_eos():
    draft = Scripted("draft", [[1, 2, DELIM], [3, DELIM], [4, 4, DELIM], [5, EOS]])
    target = Scripted("target", [[6, 6, DELIM], [7, DELIM], [8, 8, 8, DELIM]])
    #            step1 accept, step2 rescue (target ok), step3 draft rejected, target fails ->
    #            backtrack: regenerate step2; step4 accepted with EOS
    prm = Scripted("prm", [0.9, 0.2, 0.8, 0.1, 0.3, 0.95])
    trace, chain = run_problem([100, 101], draft=draft, target=target, prm=prm, config=config(),
                               dataset="toy", problem_id="p")
    assert [s.outcome for s in trace.steps] == ["accept", "rescue", "backtrack", "accept"]
    bt = trace.steps[2]
    assert (bt.draft_tokens, bt.target_tokens, bt.backtrack_steps, bt.regenerated_tokens) == \
        (3, 2, 1, 4)
    assert chain == [1, 2, DELIM, 8, 8, 8, DELIM, 5, EOS]
    assert target.calls[2] == [100, 101, 1, 2, DELIM], "regenerated from before the dropped step"
    assert parse_trace(trace_to_json(trace), "t") == trace
    assert trace.output_tokens == len(chain)


def test_rsd_never_backtracks_or_scores_the_target():
    draft = Scripted("draft", [[1, DELIM], [2, EOS]])
    target = Scripted("target", [[3, EOS]])
    prm = Scripted("prm", [0.9, 0.1])
    trace, _ = run_problem([1], draft=draft, target=target, prm=prm,
                           config=config(backtracking=False), dataset="t", problem_id="0")
    assert [s.outcome for s in trace.steps] == ["accept", "rescue"]
    assert trace.steps[1].target_score is None and len(prm.calls) == 2
    assert trace.policy.max_backtracks == 0


def test_budget_and_limits():
    draft = Scripted("draft", [[1, DELIM]] * 20)
    target = Scripted("target", [[2, DELIM]] * 40)
    prm = Scripted("prm", [0.9] + [0.1, 0.1] * 19)
    trace, _ = run_problem([1], draft=draft, target=target, prm=prm,
                           config=config(max_backtracks=2, max_steps=8), dataset="t",
                           problem_id="0")
    outcomes = [s.outcome for s in trace.steps]
    assert len(outcomes) == 8 and outcomes.count("backtrack") == 2
    trace, _ = run_problem([1], draft=Scripted("d", [[1, 1, DELIM]] * 10),
                           target=target, prm=Scripted("p", [0.9] * 10),
                           config=config(max_total_tokens=7), dataset="t", problem_id="0")
    assert len(trace.steps) == 3  # 3 steps of 3 tokens reach the limit of 7


@pytest.mark.parametrize("step, score, message", [
    ([], 0.9, r"^draft: returned an empty step$"),
    ([1, DELIM], float("nan"), r"^prm: returned score nan, not a number in \[0, 1\]$"),
    ([1, DELIM], 1.5, r"^prm: returned score 1\.5, not a number in \[0, 1\]$"),
    ([1, DELIM], "high", r"^prm: returned score 'high', not a number in \[0, 1\]$"),
])
def test_backend_misbehaviour(step, score, message):
    with pytest.raises(ControllerError, match=message):
        run_problem([1], draft=Scripted("draft", [step]), target=Scripted("target", []),
                    prm=Scripted("prm", [score]), config=config(), dataset="t", problem_id="0")


def test_bad_configuration():
    with pytest.raises(ValueError, match=r"^accept_threshold must be in \[0, 1\], not 1\.2$"):
        config(accept_threshold=1.2)
    with pytest.raises(ValueError, match=r"^max_steps must be a non-negative integer, not -1$"):
        config(max_steps=-1)
    for key in ("max_step_tokens", "max_total_tokens", "max_steps"):
        with pytest.raises(ValueError, match=rf"^{key} must be at least 1, not 0$"):
            config(**{key: 0})
    with pytest.raises(ValueError, match=r"^the prompt must hold at least one token$"):
        run_problem([], draft=None, target=None, prm=None, config=config(), dataset="t",
                    problem_id="0")


@pytest.fixture(scope="module")
def reference_backends():
    c = qwen2_config("test-tiny")
    draft = ReferenceGenerator("draft", FloatDecoder(random_weights(c, seed=1)))
    target = ReferenceGenerator("target", FloatDecoder(random_weights(c, seed=2)))
    prm = RewardHeadScorer("prm", FloatDecoder(random_weights(c, seed=3)), seed=4)
    return c, draft, target, prm


def test_reference_generator_reuses_its_cache_exactly(reference_backends):
    c, draft, _, _ = reference_backends
    stops = frozenset(range(0, c.vocab, 16))
    context = list(range(1, 20))
    first = draft.generate_step(context, max_tokens=12, stop=stops)
    longer = draft.generate_step(context + first, max_tokens=12, stop=stops)
    again = draft.generate_step(context, max_tokens=12, stop=stops)  # rolled back
    fresh = ReferenceGenerator("fresh", FloatDecoder(random_weights(c, seed=1)))
    assert again == first == fresh.generate_step(context, max_tokens=12, stop=stops)
    assert longer == fresh.generate_step(context + first, max_tokens=12, stop=stops)
    with pytest.raises(ControllerError, match=r"^draft: context of 540 tokens plus a step of up "
                                              r"to 12 exceeds its maximum of 512$"):
        draft.generate_step(list(range(1, 10)) * 60, max_tokens=12, stop=stops)


def test_captured_traces_replay_through_the_scheduler(tmp_path, reference_backends):
    c, draft, target, prm = reference_backends
    cfg = ControllerConfig(delimiters=frozenset(range(0, c.vocab, 16)), eos=1,
                           max_step_tokens=20, max_total_tokens=120, max_steps=12)
    prompts = [(str(i), list(np.random.default_rng(i).integers(2, c.vocab, 12)))
               for i in range(3)]
    out = tmp_path / "captured.jsonl"
    traces = run_problems(prompts, out, draft=draft, target=target, prm=prm, config=cfg,
                          dataset="toy")
    assert load_traces(out) == traces
    accepted = [s for t in traces for s in t.steps if s.outcome == "accept"]
    assert accepted and all(1 <= s.prefetch_tokens <= 20 for s in accepted)
    for trace in traces:
        for mode in (ServingMode.BASELINE, ServingMode.T2, ServingMode.HETEROREASON):
            run = simulate_problem(trace, system_config("config1"), mode)
            assert run.output_tokens == trace.output_tokens


def test_a_crash_leaves_only_complete_problems(tmp_path):
    class Exploding(Scripted):
        def score_step(self, context, step):
            if context[0] == 2:
                raise RuntimeError("GPU fell off the bus")
            return 0.9

    out = tmp_path / "t.jsonl"
    with pytest.raises(RuntimeError, match=r"^GPU fell off the bus$"):
        run_problems([("a", [1]), ("b", [2])], out, draft=Scripted("d", [[5, EOS]] * 2),
                     target=Scripted("t", []), prm=Exploding("p", []), config=config(),
                     dataset="t")
    assert [t.problem_id for t in load_traces(out)] == ["a"]
    assert math.isfinite(load_traces(out)[0].steps[0].draft_score)
