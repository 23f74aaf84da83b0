"""Traces against the models' contexts: each step's context worked out by hand, the first step
beyond the tightest model named, and the scheduler, the fleet and the programs refusing it."""

from __future__ import annotations

import pytest

from heteroreason.model.fleet.devices import FleetError
from heteroreason.model.fleet.engine import FleetSpec, simulate_fleet
from heteroreason.model.system.config import ServingMode, system_config
from heteroreason.model.system.contexts import check_contexts, context_limits
from heteroreason.model.system.replay import ScheduleError
from heteroreason.model.system.scheduler import simulate_problem
from heteroreason.model.workload.traces import ProblemTrace, StepEvent


def _trace(prompt: int, *steps: StepEvent) -> ProblemTrace:
    return ProblemTrace("hand", "p0", prompt, tuple(steps))


def test_step_contexts_by_hand():
    t = _trace(100,
               StepEvent("accept", 50),                        # 100 + 50
               StepEvent("rescue", 30, 80),                    # 150 + 80 (the target's step)
               StepEvent("backtrack", 40, 60, backtrack_steps=1, regenerated_tokens=200),
               # before: 100 + 50 + 80 = 230, + 60; regenerated after dropping the rescue:
               # 100 + 50 + 200 = 350
               StepEvent("accept", 10))                        # 100 + 50 + 200 + 10
    assert t.step_contexts() == [150, 230, 350, 360]
    assert t.accepted_chain() == [50, 200, 10]


def test_the_prm_is_the_tightest_context_and_is_named():
    limits = {limit.role: limit for limit in context_limits(system_config("config1"),
                                                            ServingMode.HETEROREASON)}
    assert limits["PRM"].max_context == 4096 and limits["PRM"].model == "qwen2.5-math-prm-7b"
    assert limits["draft"].max_context == 32768 and limits["target"].max_context == 131072
    long = _trace(4000, StepEvent("accept", 90), StepEvent("accept", 20))
    check_contexts(_trace(4000, StepEvent("accept", 96)), system_config("config1"), ServingMode.T2)
    with pytest.raises(ScheduleError, match=r"problem p0 \(hand\) step 1: needs 4110 tokens of "
                                            r"context .* the PRM \(qwen2.5-math-prm-7b\) holds "
                                            r"4096"):
        check_contexts(long, system_config("config1"), ServingMode.T2)


@pytest.mark.parametrize("mode", list(ServingMode))
def test_the_scheduler_and_the_fleet_refuse_a_step_beyond_the_context(mode):
    long = _trace(4000, StepEvent("accept", 200))
    with pytest.raises(ScheduleError, match="step 0: needs 4200 tokens"):
        simulate_problem(long, system_config("config2"), mode)
    with pytest.raises(FleetError, match="step 0: needs 4200 tokens"):
        simulate_fleet(FleetSpec(system_config("config2"), mode), [long], [0.0])
