"""RTL in the loop: the BRSD controller with the DraftEngine on Verilator as its draft gives the
same run, token for token, as with the integer reference as its draft; the engine's KVMU modes
follow the controller's decisions; the captured trace replays through the scheduler."""

import re

import numpy as np
import pytest

from heteroreason.model.controller.brsd import ControllerConfig
from heteroreason.model.system.simulate import simulate_file
from heteroreason.model.workload.traces import load_traces
from heteroreason.sim.verify.cosim import run_cosim, run_reference

PRESET, SEED = "test-tiny", 1
# two problems whose runs use every host command: accepted steps (ACCEPT, drafting continues),
# a rescue of a submitted step (REJECT, the target's step shadow-ingested) and backtracks and a
# new problem (INIT to the first difference, then the host's tokens)
PROMPTS = [[int(t) for t in np.random.default_rng(s).integers(2, 256, 6)] for s in (1, 2)]
CONTROLLER = ControllerConfig(delimiters=frozenset({16, 34}), eos=1, max_step_tokens=8,
                              max_total_tokens=24, max_steps=4)


def test_rtl_in_the_loop(tmp_path):
    """One test, so that one worker runs the co-simulation (about a minute) and no other waits
    for it: the same run as with the reference draft, the commands the controller's decisions
    call for, and the captured trace's replay."""
    trace_file = tmp_path / "traces.jsonl"
    reference = run_reference(PROMPTS, CONTROLLER, preset=PRESET, seed=SEED)
    cosim = run_cosim(PROMPTS, CONTROLLER, preset=PRESET, seed=SEED, trace_out=trace_file)

    # the same run as the reference draft's, with every outcome
    assert cosim["traces"] == reference["traces"]
    assert cosim["chains"] == reference["chains"]
    outcomes = {s["outcome"] for t in reference["traces"] for s in t["steps"]}
    assert outcomes == {"accept", "rescue", "backtrack"}

    # the commands follow the controller
    commands = [c[1] for c in cosim["commands"]]
    assert {"accept", "reject", "init"} <= set(commands)
    # every command was confirmed by the mode it led to (ACCEPT, ROLLBACK, INITIALIZATION)
    assert all(c[3] for c in cosim["commands"])
    # the verdict on a step the engine submitted (it ended at a delimiter) reaches the engine
    # with the next draft call of the problem: ACCEPT for an accepted step, REJECT for a rescued
    # one; everything else (backtracks, cut steps, a new problem) resynchronizes with INIT
    def count(outcome):
        return sum(s["outcome"] == outcome and s["draft_tokens"] < CONTROLLER.max_step_tokens
                   for t in reference["traces"] for s in t["steps"][:-1])
    assert commands.count("accept") == count("accept")
    assert commands.count("reject") == count("rescue")
    steps = [s for t in reference["traces"] for s in t["steps"]]
    assert commands[0] == "init" and cosim["draft_calls"] == len(steps)

    # the captured trace replays
    traces = load_traces(trace_file)
    assert [t.problem_id for t in traces] == ["0", "1"]
    assert [len(t.steps) for t in traces] == [len(t["steps"]) for t in cosim["traces"]]
    result = simulate_file(trace_file, config="config1", mode="heteroreason")
    assert result.summary.latency_s > 0 and len(result.runs) == 2


@pytest.mark.slow
def test_several_problems_at_once(tmp_path):
    """Four problems on the MultiDraftEngine of two contexts, two drafts a pass (about 90 s on
    Verilator): a controller a context, each taking the next problem when its last one ends, the
    same run per problem as with the reference draft, every command confirmed by its context's
    mode, and the contexts' drafts sharing passes of the weights."""
    prompts = [[int(t) for t in np.random.default_rng(s).integers(2, 256, 6)]
               for s in (1, 2, 3, 4)]
    trace_file = tmp_path / "traces.jsonl"
    reference = run_reference(prompts, CONTROLLER, preset=PRESET, seed=SEED)
    cosim = run_cosim(prompts, CONTROLLER, preset=PRESET, seed=SEED, contexts=2, per_pass=2,
                      trace_out=trace_file)
    assert cosim["traces"] == reference["traces"]
    assert cosim["chains"] == reference["chains"]
    outcomes = {s["outcome"] for t in reference["traces"] for s in t["steps"]}
    assert outcomes == {"accept", "rescue", "backtrack"}
    # both contexts served problems, each problem once, two at a time from the start
    ran = cosim["contexts"]
    assert sorted(i for problems in ran.values() for i in problems) == [0, 1, 2, 3]
    assert ran["0"][0] == 0 and ran["1"][0] == 1
    commands = cosim["commands"]  # [cycle, context, command, pos, mode]
    assert {c[2] for c in commands} == {"accept", "reject", "init"}
    assert all(c[4] for c in commands) and {c[1] for c in commands} == {0, 1}
    steps = sum(len(t["steps"]) for t in reference["traces"])
    assert cosim["draft_calls"] == steps == len(commands)
    # drafts of both contexts in one pass: more tokens than passes
    assert cosim["tokens"] > 1.2 * cosim["passes"], cosim
    assert [t.problem_id for t in load_traces(trace_file)] == ["0", "1", "2", "3"]


def test_run_cosim_refuses_bad_contexts():
    for contexts, per_pass, message in ((0, 2, "contexts must be an integer in [1, 1024]"),
                                        (2, 4, "per_pass must be 2, 4 or 8 and at most "
                                               "contexts (2), not 4"),
                                        (4, 3, "per_pass must be 2, 4 or 8")):
        with pytest.raises(ValueError, match=re.escape(message)):
            run_cosim(PROMPTS, CONTROLLER, preset=PRESET, seed=SEED, contexts=contexts,
                      per_pass=per_pass)
