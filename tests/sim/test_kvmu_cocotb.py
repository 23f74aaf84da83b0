"""The KVMU's cocotb testbench on an HDL simulator: directed rows of the event table, the
paper's three scenarios, and constrained-random sequences under three traffic profiles."""

import pytest

from heteroreason.sim.cocotb_run import run_cocotb

TB = "heteroreason.sim.tb.kvmu_tb"
TESTS_PER_RUN = 15  # 12 directed + 3 random traffic profiles


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kvmu(simulator, seed):
    result = run_cocotb("kvmu", TB, params={"capacity": 64}, simulator=simulator, seed=seed,
                        extra_env={"HR_RANDOM_EVENTS": "10000"})
    assert (result.tests, result.failed) == (TESTS_PER_RUN, 0)


def test_kvmu_capacity_not_a_power_of_two(simulator):
    result = run_cocotb("kvmu", TB, params={"capacity": 100}, simulator=simulator, seed=4,
                        extra_env={"HR_RANDOM_EVENTS": "3000"})
    assert (result.tests, result.failed) == (TESTS_PER_RUN, 0)


def test_kvmu_icarus(icarus):
    result = run_cocotb("kvmu", TB, params={"capacity": 64}, simulator=icarus, seed=5,
                        extra_env={"HR_RANDOM_EVENTS": "2000"})
    assert (result.tests, result.failed) == (TESTS_PER_RUN, 0)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 104))
def test_kvmu_long(simulator, seed):
    result = run_cocotb("kvmu", TB, params={"capacity": 48}, simulator=simulator, seed=seed,
                        extra_env={"HR_RANDOM_EVENTS": "20000"})
    assert (result.tests, result.failed) == (TESTS_PER_RUN, 0)
