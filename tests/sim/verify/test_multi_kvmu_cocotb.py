"""The multi-context KVMU's cocotb testbench on an HDL simulator: the context rules, the paper's
scenarios interleaved across contexts, and constrained-random sequences with every context
interleaved at random under three traffic profiles."""

import pytest

from heteroreason.sim.verify.plan import Stimulus
from heteroreason.sim.verify.runner import run_cocotb

TB = "heteroreason.sim.verify.tb.multi_kvmu_tb"
TESTS_PER_RUN = 9  # 6 directed + 3 random traffic profiles


@pytest.mark.parametrize(("contexts", "seed"),
                         [(3, 3), pytest.param(4, 2, marks=pytest.mark.slow)])
def test_multi_kvmu(simulator, contexts, seed):
    result = run_cocotb("multi_kvmu", TB, params={"contexts": contexts, "capacity": 64},
                        simulator=simulator, seed=seed, stimulus=Stimulus(random_events=3_000))
    assert (result.tests, result.failed) == (TESTS_PER_RUN, 0)


@pytest.mark.slow
@pytest.mark.evidence
def test_multi_kvmu_sixteen_contexts(simulator, long_seed):
    """The U280 design's 16 contexts (issue 43's goal), a capacity not a power of two."""
    result = run_cocotb("multi_kvmu", TB, params={"contexts": 16, "capacity": 100},
                        simulator=simulator, seed=long_seed,
                        stimulus=Stimulus(random_events=8_000))
    assert (result.tests, result.failed) == (TESTS_PER_RUN, 0)
