"""``heteroreason``: one command, a subcommand per job.

Each subcommand is a module of :mod:`heteroreason.commands` whose ``main(argv, prog)`` parses
its own options; this dispatcher reads only their docstrings for ``--help`` (nothing heavy is
imported until a subcommand runs). The parsing is the standard library's :mod:`argparse`: it
types and checks options, exits 2 with the option named, and needs no dependency; the project
adds one formatter (defaults shown, descriptions whole) and ``--quiet``/``--verbose``
(:mod:`heteroreason.commands.common`).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import os
import signal
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from heteroreason.commands.common import describe

__all__ = ["COMMANDS", "Command", "Terminated", "main", "script_main"]


@dataclass(frozen=True)
class Command:
    """A subcommand: its name, the module that runs it, and the script in ``scripts/`` that
    calls it (the same entry point)."""

    name: str
    module: str
    script: str

    @property
    def summary(self) -> str:
        """The first paragraph of the module's docstring (read from its file, not imported)."""
        spec = importlib.util.find_spec(f"heteroreason.commands.{self.module}")
        assert spec is not None and spec.origin is not None, self.module
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        return describe(ast.get_docstring(tree, clean=False))[0]


# in the order --help lists them: the main job, then the system's models, then the hardware's
COMMANDS: dict[str, Command] = {c.name: c for c in (
    Command("reproduce", "reproduce", "reproduce.py"),
    Command("break-even", "break_even", "break_even.py"),
    Command("predict", "predict", "predict_fpga.py"),
    Command("fleet", "fleet", "fleet.py"),
    Command("validate", "validate", "validate.py"),
    Command("traces", "traces", "traces.py"),
    Command("devices", "devices", "device_models.py"),
    Command("brsd", "brsd", "run_brsd.py"),
    Command("cosim", "cosim", "cosim_brsd.py"),
    Command("export", "export", "export_verilog.py"),
    Command("rtl-checks", "rtl_checks", "run_rtl_checks.py"),
    Command("timing", "timing", "timing_report.py"),
    Command("calibrate", "calibrate", "calibrate.py"),
    Command("fit", "fit", "fit_report.py"),
    Command("numerics", "numerics", "numerics_report.py"),
    Command("bench decoder", "bench_decoder", "bench_decoder.py"),
    Command("bench fleet", "bench_fleet", "bench_fleet.py"),
    Command("bench memory", "bench_memory", "bench_memory.py"),
    Command("bench scheduler", "bench_scheduler", "bench_scheduler.py"),
)}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("heteroreason")
    except PackageNotFoundError:  # run from a source tree that was not installed
        return "unknown (not installed)"


def _usage() -> str:
    width = max(len(name) for name in COMMANDS) + 2
    lines = ["usage: heteroreason [-h] [--version] COMMAND [options]", "",
             textwrap.fill("An open, cycle-approximate model of HeteroReason (an FPGA draft, a "
                           "GPU process reward model and a GPU target): does it win, on which "
                           "FPGA, against which GPU.", 100), "", "commands:"]
    lines += [textwrap.fill(c.summary, 100, initial_indent=f"  {name:<{width}}",
                            subsequent_indent=" " * (width + 2)) for name, c in COMMANDS.items()]
    lines += ["", "'heteroreason COMMAND --help' describes a command's options and shows their "
              "defaults."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``heteroreason`` with ``argv`` (default: the process's arguments); the exit
    status: 0 done, 2 bad input (the option and its allowed values named), 1 a failure."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "--version"):
        try:
            if args and args[0] == "--version":
                print(f"heteroreason {_version()}")
            else:
                print(_usage(), file=sys.stdout if args else sys.stderr)
        except BrokenPipeError:  # the reader (grep -q, head) went away: not an error of ours
            _silence_stdout()
        return 0 if args else 2
    name = args[0]
    if name == "bench" and len(args) > 1 and not args[1].startswith("-"):
        name, args = f"bench {args[1]}", args[1:]
    command = COMMANDS.get(name)
    if command is None:
        known = ", ".join(COMMANDS)
        print(f"heteroreason: error: unknown command {' '.join(name.split()[:2])!r}; choose one "
              f"of: {known}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"heteroreason.commands.{command.module}")
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return int(module.main(args[1:], prog=f"heteroreason {name}") or 0)
    except BrokenPipeError:  # the reader (a pager, head) went away: not an error of ours
        _silence_stdout()
        return 0
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (staged outputs are left as they were)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        terminated = isinstance(exc, Terminated)
        print(f"heteroreason {name}: {'terminated' if terminated else 'interrupted'}",
              file=sys.stderr)
        return 143 if terminated else 130
    finally:
        with contextlib.suppress(ValueError, TypeError):
            signal.signal(signal.SIGTERM, previous)


def _silence_stdout() -> None:
    """Point standard output at the null device, so that the interpreter's last flush does not
    fail on the pipe whose reader has gone."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is so that its cleanup runs as on Ctrl-C."""


def _terminated(signum, frame):
    raise Terminated


def script_main(script: str) -> int:
    """What ``scripts/<script>`` runs: its subcommand with the process's arguments."""
    command = next(c for c in COMMANDS.values() if c.script == script)
    return main([*command.name.split(), *sys.argv[1:]])
