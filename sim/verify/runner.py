"""Builds a top for a simulator (one cached build directory per parameter set) and runs a cocotb
test module on it through ``cocotb_tools.runner``."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cocotb_tools.check_results import get_results
from cocotb_tools.runner import get_runner

from heteroreason.sim.flow.export import DECODER_TOPS, DecoderDesign, export_verilog, parse_params
from heteroreason.sim.flow.toolchain import find_simulator
from heteroreason.sim.verify.plan import RunPlan, Stimulus

__all__ = ["BUILD_STAMP", "CXX_OPT_LEVELS", "DEFAULT_BUILD_ROOT", "CocotbResult", "build_dir_for",
           "build_key", "run_cocotb"]

DEFAULT_BUILD_ROOT = Path(os.environ.get("HETEROREASON_BUILD_DIR", "build")) / "sim"
"""Where builds go: ``$HETEROREASON_BUILD_DIR/sim``, by default ``build/sim`` under the working
directory (ignored by git)."""


# Amaranth writes signed arithmetic with operands narrower than the result and FSM cases
# without defaults, which Verilator's default lint turns into fatal warnings; simulation builds
# keep the warnings in build.log but do not stop on them (the lint check of exported tops is
# separate, tests/sim/test_export.py)
# Icarus as a Verilog-2005 compiler (cocotb's runner asks for -g2012; a later -g wins): Yosys
# starts every combinational block with a test of a register declared "= 0", whose change at
# time 0 runs the block once. Under SystemVerilog's rules a declaration's value is set before
# any process starts, so a block whose inputs never change (an output decoded from a state
# register that stays at its reset value) would stay X until they do
SIM_BUILD_ARGS = {"verilator": ["-Wno-fatal"], "icarus": ["-g2005"]}


BUILD_STAMP = "build.stamp"
"""The file in a build directory that names the finished build's :func:`build_key`."""

_SOURCE_ROOT = Path(__file__).resolve().parents[2]
# what a build is made of: the RTL, the export that elaborates it, and the tools' versions
_BUILD_SOURCES = ("rtl", "sim/flow")
_BUILD_TOOLS = ("amaranth", "cocotb", "verilator")

# Verilator's intermediates: once the model is linked, the simulation needs none of them; the
# two precompiled headers alone are about 150 MB a build, and a full run of the tests leaves
# some thirty builds
_VERILATOR_INTERMEDIATES = (".o", ".a", ".gch", ".d", ".cpp", ".h", ".mk", ".dat")


def build_key(top: str, params: Mapping[str, int | str], simulator: str,
              build_args: Sequence[str], *, waves: bool) -> str:
    """SHA-256 of everything a build depends on: the top and its parameters, the simulator and
    its arguments, the waves switch, the source of the RTL and of its export (every byte, so
    a comment's edit rebuilds too) and the versions of Amaranth, cocotb and Verilator."""
    digest = hashlib.sha256()
    digest.update(json.dumps({"top": top, "params": {k: params[k] for k in sorted(params)},
                              "simulator": simulator, "build_args": list(build_args),
                              "waves": waves}, sort_keys=True).encode())
    for package in _BUILD_TOOLS:
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"{package}={version}".encode())
    for folder in _BUILD_SOURCES:
        for path in sorted((_SOURCE_ROOT / folder).rglob("*.py")):
            digest.update(path.relative_to(_SOURCE_ROOT).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _built(build_dir: Path, top: str, simulator: str, key: str) -> bool:
    stamp = build_dir / BUILD_STAMP
    program = build_dir / (top if simulator == "verilator" else "sim.vvp")
    return stamp.exists() and stamp.read_text() == key and program.exists()


def _prune(build_dir: Path) -> None:
    for path in build_dir.iterdir():
        if path.is_file() and path.suffix in _VERILATOR_INTERMEDIATES:
            path.unlink()


@dataclass(frozen=True)
class CocotbResult:
    """Counts of a cocotb run; ``waves`` is the waveform file when waves were recorded
    (VCD from Verilator, FST from Icarus)."""

    tests: int
    failed: int
    results_xml: Path
    build_dir: Path
    waves: Path | None = None


# C++ optimization of Verilator's model: None keeps Verilator's own (-Os for the model's fast
# code, none for its constructors). One of the full-size layer's 1.4 MB model files compiles in
# 26.9 s at -Os, 13.7 s at -O1 and 5.2 s at -O0 on a CI-sized machine, so that design's test
# takes -O0 (it ran in 371 s here, the export and compilation 172 s of it). -O1 is no default:
# given as CFLAGS it reaches the constructors too, and GCC took over ten minutes on the
# symbol-table constructor of a small core at -O1
CXX_OPT_LEVELS = ("-O0", "-O1", "-O2", "-Os")


def build_dir_for(top: str, params: Mapping[str, int], simulator: str, *, waves: bool,
                  root: Path = DEFAULT_BUILD_ROOT, cxx_opt: str | None = None) -> Path:
    """One directory per (simulator, top, parameter set, waves, C++ optimization)."""
    tag = "-".join(f"{name}{params[name]}" for name in sorted(params))
    suffix = ("-waves" if waves else "") + (cxx_opt if cxx_opt and simulator == "verilator"
                                           else "")
    return Path(root) / simulator / f"{top}-{tag}{suffix}"


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
               log_file: Path | None = None, cxx_opt: str | None = None) -> CocotbResult:
    """Export ``top`` with ``params``, build it (cached), run ``test_module`` and return counts.

    A build directory whose :data:`BUILD_STAMP` names the current :func:`build_key` is used
    as it is: neither exported nor built again; any other is exported and built again, even
    where its Verilog is unchanged (a new simulator version, other arguments). A Verilator
    build keeps only its program (its intermediates are deleted once it links).

    Under pytest a failing cocotb test raises ``SystemExit`` from the runner; elsewhere the
    counts say whether it passed. With ``log_file`` the simulator's output goes there instead
    of the terminal. The test module reads the top, its parameters and ``stimulus`` as one
    :class:`~heteroreason.sim.verify.plan.RunPlan` (``RunPlan.current()``), the seed as
    ``COCOTB_RANDOM_SEED``. ``cxx_opt`` (one of :data:`CXX_OPT_LEVELS`; default Verilator's
    own) sets the C++ optimization of a Verilator model (the other simulators compile no C++:
    there it changes nothing).
    """
    params = parse_params(top, []) | dict(params or {})
    tools = find_simulator(simulator)
    if cxx_opt is not None and cxx_opt not in CXX_OPT_LEVELS:
        raise ValueError(f"cxx_opt must be one of {', '.join(CXX_OPT_LEVELS)}, not {cxx_opt!r}")
    build_args = list(SIM_BUILD_ARGS.get(tools.name, []))
    if tools.name == "verilator" and cxx_opt is not None:
        # the user's CFLAGS follow Verilator's OPT_FAST/OPT_SLOW on the compiler's command
        # line, and the last -O a compiler reads is the one it uses
        build_args += ["-CFLAGS", cxx_opt]
    build_dir = build_dir_for(top, params, tools.name, waves=waves, root=build_root,
                              cxx_opt=cxx_opt).resolve()
    design = DecoderDesign.from_export_params(params) if top in DECODER_TOPS else None
    env = RunPlan(top, params, stimulus or Stimulus(), design).to_env()
    with _environment(tools.env):
        runner = get_runner(tools.name)
        key = build_key(top, params, tools.name, build_args, waves=waves)
        with _locked(build_dir):
            if not _built(build_dir, top, tools.name, key):
                (build_dir / BUILD_STAMP).unlink(missing_ok=True)
                # Verilator zeroes uninitialized memories, Icarus starts them at x
                source = export_verilog(top, build_dir, params,
                                        omit_zero_memory_init=tools.name == "verilator")
                # ``always``: the export leaves an unchanged Verilog file as it was, and the
                # runner would then keep a program built with other tools or arguments
                runner.build(sources=[source], hdl_toplevel=top, build_dir=build_dir,
                             waves=waves, timescale=("1ns", "1ps"),
                             build_args=build_args, always=True,
                             log_file=build_dir / "build.log")
                if tools.name == "verilator":
                    _prune(build_dir)
                (build_dir / BUILD_STAMP).write_text(key)
        test_args = ["--trace-file", str(build_dir / "dump.vcd")] if (
            waves and tools.name == "verilator") else []
        xml = runner.test(hdl_toplevel=top, hdl_toplevel_lang="verilog",
                          test_module=test_module, testcase=testcase,
                          build_dir=build_dir, test_dir=build_dir, extra_env=env, seed=seed,
                          waves=waves, test_args=test_args, log_file=log_file)
    tests, failed = get_results(Path(xml))
    wave_file = None
    if waves:
        wave_file = build_dir / ("dump.vcd" if tools.name == "verilator" else f"{top}.fst")
    return CocotbResult(tests=tests, failed=failed, results_xml=Path(xml), build_dir=build_dir,
                        waves=wave_file)
