"""The KVMU's cocotb testbench on an HDL simulator: directed rows of the event table, the
paper's three scenarios, and constrained-random sequences under three traffic profiles."""

import pytest

from heteroreason.sim.verify.plan import Stimulus
from heteroreason.sim.verify.runner import run_cocotb

TB = "heteroreason.sim.verify.tb.kvmu_tb"
TESTS_PER_RUN = 15  # 12 directed + 3 random traffic profiles


@pytest.mark.parametrize("seed", [pytest.param(1, marks=pytest.mark.slow), 2, 3])
def test_kvmu(simulator, seed):
    result = run_cocotb("kvmu", TB, params={"capacity": 64}, simulator=simulator, seed=seed,
                        stimulus=Stimulus(random_events=10_000))
    assert (result.tests, result.failed) == (TESTS_PER_RUN, 0)


def test_kvmu_capacity_not_a_power_of_two(simulator):
    result = run_cocotb("kvmu", TB, params={"capacity": 100}, simulator=simulator, seed=4,
                        stimulus=Stimulus(random_events=3_000))
    assert (result.tests, result.failed) == (TESTS_PER_RUN, 0)


def test_kvmu_icarus(icarus):
    result = run_cocotb("kvmu", TB, params={"capacity": 64}, simulator=icarus, seed=5,
                        stimulus=Stimulus(random_events=2_000))
    assert (result.tests, result.failed) == (TESTS_PER_RUN, 0)


@pytest.mark.slow
def test_kvmu_long(simulator, long_seed):
    result = run_cocotb("kvmu", TB, params={"capacity": 48}, simulator=simulator, seed=long_seed,
                        stimulus=Stimulus(random_events=20_000))
    assert (result.tests, result.failed) == (TESTS_PER_RUN, 0)
