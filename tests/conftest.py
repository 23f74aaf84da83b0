"""Shared pytest options: the simulator choice and the random seeds."""

import pytest

from heteroreason.sim.toolchain import SIMULATORS, SimulatorNotFound, find_simulator


def pytest_addoption(parser):
    parser.addoption("--sim", choices=SIMULATORS, default=None,
                     help="HDL simulator for cocotb tests "
                          "(default: $HETEROREASON_SIM or verilator)")


@pytest.fixture(scope="session")
def simulator(request):
    return request.config.getoption("--sim")


@pytest.fixture
def icarus():
    """Skips the test, saying how to install it, when Icarus Verilog is absent."""
    try:
        find_simulator("icarus")
    except SimulatorNotFound as exc:
        pytest.skip(str(exc))
    return "icarus"
