"""Shared pytest options and fixtures: the simulator choice, the artifact's data."""

from pathlib import Path

import pytest

from heteroreason.sim.flow.toolchain import SIMULATORS, SimulatorNotFound, find_simulator


def pytest_addoption(parser):
    parser.addoption("--sim", choices=SIMULATORS, default=None,
                     help="HDL simulator for cocotb tests "
                          "(default: $HETEROREASON_SIM or verilator)")
    parser.addoption("--long-seeds", type=int, default=1, metavar="N",
                     help="seeds 100 .. 99+N for each long random run (the tests taking "
                          "long_seed; default 1, what CI runs)")


def pytest_generate_tests(metafunc):
    if "long_seed" in metafunc.fixturenames:
        count = metafunc.config.getoption("--long-seeds")
        if count < 1:
            raise pytest.UsageError(f"--long-seeds must be at least 1, not {count}")
        metafunc.parametrize("long_seed", range(100, 100 + count))


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


SHARED_DATA = (Path(__file__).resolve().parents[2] / "shared" / "data"
               / "heteroreason-artifact")
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session")
def artifact():
    """The paper artifact's data beside the checkout (../shared/data), or a skip."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"the artifact's data is not at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def fixtures():
    return FIXTURES


@pytest.fixture
def stale_calibration(tmp_path, monkeypatch):
    """The committed calibration as if of other RTL (hash all zeros), put where the boards'
    designs are chosen from; its path."""
    import json

    from heteroreason.model.timing.fpga import calibration, platform

    stale = tmp_path / "decoder_core.json"
    obj = json.loads(calibration.CALIBRATION_FILE.read_text())
    stale.write_text(json.dumps(obj | {"rtl_hash": "0" * 64}))
    monkeypatch.setattr(platform, "CALIBRATION_FILE", stale)
    platform._committed_calibration.cache_clear()
    yield stale
    platform._committed_calibration.cache_clear()
