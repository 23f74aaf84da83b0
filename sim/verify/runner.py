"""Builds a top for a simulator (one cached build directory per parameter set) and runs a cocotb
test module on it through ``cocotb_tools.runner``."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cocotb_tools.check_results import get_results
from cocotb_tools.runner import get_runner

from heteroreason.sim.flow.export import export_verilog, parse_params
from heteroreason.sim.flow.toolchain import find_simulator
from heteroreason.sim.verify.plan import RunPlan, Stimulus

__all__ = ["DEFAULT_BUILD_ROOT", "CocotbResult", "build_dir_for", "run_cocotb"]

DEFAULT_BUILD_ROOT = Path(os.environ.get("HETEROREASON_BUILD_DIR", "build")) / "sim"
"""Where builds go: ``$HETEROREASON_BUILD_DIR/sim``, by default ``build/sim`` under the working
directory (ignored by git)."""


# Amaranth writes signed arithmetic with operands narrower than the result and FSM cases
# without defaults, which Verilator's default lint turns into fatal warnings; simulation builds
# keep the warnings in build.log but do not stop on them (the lint check of exported tops is
# separate, tests/sim/test_export.py)
SIM_BUILD_ARGS = {"verilator": ["-Wno-fatal"]}


@dataclass(frozen=True)
class CocotbResult:
    """Counts of a cocotb run; ``waves`` is the waveform file when waves were recorded
    (VCD from Verilator, FST from Icarus)."""

    tests: int
    failed: int
    results_xml: Path
    build_dir: Path
    waves: Path | None = None


def build_dir_for(top: str, params: Mapping[str, int], simulator: str, *, waves: bool,
                  root: Path = DEFAULT_BUILD_ROOT) -> Path:
    """One directory per (simulator, top, parameter set, waves)."""
    tag = "-".join(f"{name}{params[name]}" for name in sorted(params))
    return Path(root) / simulator / f"{top}-{tag}{'-waves' if waves else ''}"


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _locked(build_dir: Path) -> Iterator[None]:
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def run_cocotb(top: str, test_module: str, *, params: Mapping[str, int] | None = None,
               simulator: str | None = None, testcase: str | Sequence[str] | None = None,
               seed: int | None = None, stimulus: Stimulus | None = None,
               waves: bool = False, build_root: Path = DEFAULT_BUILD_ROOT,
               log_file: Path | None = None) -> CocotbResult:
    """Export ``top`` with ``params``, build it (cached), run ``test_module`` and return counts.

    Under pytest a failing cocotb test raises ``SystemExit`` from the runner; elsewhere the
    counts say whether it passed. With ``log_file`` the simulator's output goes there instead
    of the terminal. The test module reads the top, its parameters and ``stimulus`` as one
    :class:`~heteroreason.sim.verify.plan.RunPlan` (``RunPlan.current()``), the seed as
    ``COCOTB_RANDOM_SEED``.
    """
    params = parse_params(top, []) | dict(params or {})
    tools = find_simulator(simulator)
    build_dir = build_dir_for(top, params, tools.name, waves=waves, root=build_root).resolve()
    env = RunPlan(top, params, stimulus or Stimulus()).to_env()
    with _environment(tools.env):
        runner = get_runner(tools.name)
        with _locked(build_dir):
            source = export_verilog(top, build_dir, params)
            runner.build(sources=[source], hdl_toplevel=top, build_dir=build_dir,
                         waves=waves, timescale=("1ns", "1ps"),
                         build_args=SIM_BUILD_ARGS.get(tools.name, []),
                         log_file=build_dir / "build.log")
        test_args = ["--trace-file", str(build_dir / "dump.vcd")] if (
            waves and tools.name == "verilator") else []
        xml = runner.test(hdl_toplevel=top, test_module=test_module, testcase=testcase,
                          build_dir=build_dir, test_dir=build_dir, extra_env=env, seed=seed,
                          waves=waves, test_args=test_args, log_file=log_file)
    tests, failed = get_results(Path(xml))
    wave_file = None
    if waves:
        wave_file = build_dir / ("dump.vcd" if tools.name == "verilator" else f"{top}.fst")
    return CocotbResult(tests=tests, failed=failed, results_xml=Path(xml), build_dir=build_dir,
                        waves=wave_file)
