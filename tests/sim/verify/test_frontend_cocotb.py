"""The KV front end (KVMU + input MUX) in closed loop with host and decoder models."""

import pytest

from heteroreason.sim.verify.plan import Stimulus
from heteroreason.sim.verify.runner import run_cocotb

TB = "heteroreason.sim.verify.tb.frontend_tb"
TESTS_PER_RUN = 6  # 3 scenarios + 3 random traffic profiles
PARAMS = {"capacity": 512, "token_width": 16, "max_in_flight": 4}


@pytest.mark.parametrize("seed", [pytest.param(1, marks=pytest.mark.slow), 2,
                                  pytest.param(3, marks=pytest.mark.slow)])
def test_frontend(simulator, seed):
    result = run_cocotb("kv_frontend", TB, params=PARAMS, simulator=simulator, seed=seed,
                        stimulus=Stimulus(random_events=10_000))
    assert (result.tests, result.failed) == (TESTS_PER_RUN, 0)


@pytest.mark.slow
def test_frontend_one_sample_in_flight(simulator):
    params = PARAMS | {"max_in_flight": 1, "token_width": 8}
    result = run_cocotb("kv_frontend", TB, params=params, simulator=simulator, seed=4,
                        stimulus=Stimulus(random_events=3_000))
    assert (result.tests, result.failed) == (TESTS_PER_RUN, 0)


def test_frontend_icarus(icarus):
    result = run_cocotb("kv_frontend", TB, params=PARAMS, simulator=icarus, seed=5,
                        stimulus=Stimulus(random_events=2_000))
    assert (result.tests, result.failed) == (TESTS_PER_RUN, 0)


@pytest.mark.slow
def test_frontend_long(simulator, long_seed):
    result = run_cocotb("kv_frontend", TB, params=PARAMS, simulator=simulator, seed=long_seed,
                        stimulus=Stimulus(random_events=20_000))
    assert (result.tests, result.failed) == (TESTS_PER_RUN, 0)
