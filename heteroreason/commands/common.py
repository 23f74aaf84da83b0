"""What every subcommand shares: its parser (the description whole, the docstring's examples
below the options, every option's default shown), ``--quiet`` and ``--verbose``, the messages
that go to standard error, and progress bars.

Standard output carries results only (tables, the files written); notes, warnings and progress
go to standard error. ``--quiet`` silences notes and progress, ``--verbose`` adds detail notes.
Progress bars are tqdm's (:func:`progress`): one line that rewrites itself on a terminal, with
the rate and the time left, and nothing when standard error is not a terminal or under
``--quiet``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from heteroreason.model.fleet.limits import CV, MAX_POOL, MAX_PROBLEMS, RATE_PER_S, SLO_S

__all__ = ["CommandParser", "OutputBusy", "ProgressBar", "command_parser", "describe", "detail",
           "non_negative", "note", "positive", "progress", "run_staged", "staged_output",
           "write_run_record", "write_table"]

T = TypeVar("T")

# set by CommandParser.parse_args: 0 quiet, 1 normal, 2 verbose
_VERBOSITY = [1]


def describe(doc: str | None) -> tuple[str, str]:
    """``(description, epilog)`` of a command's docstring: its first paragraph joined into one
    line (never cut), and the rest as written."""
    text = (doc or "").strip("\n")
    first, _, rest = text.partition("\n\n")
    return " ".join(line.strip() for line in first.splitlines()), rest.strip("\n")


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the epilog's layout and shows each option's default where its help does not."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("default" in text or default in (None, False, argparse.SUPPRESS)
                or not action.option_strings or isinstance(action, argparse._VersionAction)):
            return text
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else default
        return f"{text} (default: {shown})".lstrip()


class _Subcommands(argparse._SubParsersAction):
    """Subcommands whose one-line help is also their description."""

    def add_parser(self, name, **kwargs):
        if "help" in kwargs:
            kwargs.setdefault("description", kwargs["help"])
        return super().add_parser(name, **kwargs)


class CommandParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` with ``--quiet`` and ``--verbose``; parsing sets how
    much :func:`note`, :func:`detail` and :func:`progress` say."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, formatter_class=_Formatter, **kwargs)
        group = self.add_mutually_exclusive_group()
        group.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                           help="print results only: no notes, no progress bars")
        group.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                           help="print detail notes on standard error")

    def add_subparsers(self, **kwargs):
        kwargs.setdefault("action", _Subcommands)
        return super().add_subparsers(**kwargs)

    def parse_known_args(self, args=None, namespace=None):
        parsed, rest = super().parse_known_args(args, namespace)
        _VERBOSITY[0] = 0 if getattr(parsed, "quiet", False) else \
            2 if getattr(parsed, "verbose", False) else 1
        return parsed, rest


def command_parser(doc: str | None, *, prog: str | None = None, **kwargs) -> CommandParser:
    """The parser of a command whose module docstring is ``doc``."""
    description, epilog = describe(doc)
    return CommandParser(prog=prog, description=textwrap.fill(description, 100),
                         epilog=kwargs.pop("epilog", None) or epilog or None, **kwargs)


def note(message: str) -> None:
    """A note on standard error (silent under ``--quiet``)."""
    if _VERBOSITY[0] >= 1:
        print(message, file=sys.stderr, flush=True)


def detail(message: str) -> None:
    """A detail on standard error (only under ``--verbose``)."""
    if _VERBOSITY[0] >= 2:
        print(message, file=sys.stderr, flush=True)


class ProgressBar:
    """A tqdm bar an executor feeds ``(done, total)`` (``executor(progress=...)``): a new bar
    each time a map starts, closed when it ends; nothing under ``--quiet`` or off a terminal."""

    def __init__(self, desc: str, unit: str = "task"):
        self.desc, self.unit, self._bar = desc, unit, None

    def __call__(self, done: int, total: int) -> None:
        if _VERBOSITY[0] == 0 or not sys.stderr.isatty():
            return
        from tqdm import tqdm

        if self._bar is None or done == 0:
            self.close()
            self._bar = tqdm(total=total, desc=self.desc, unit=self.unit, file=sys.stderr,
                             leave=False, dynamic_ncols=True)
        self._bar.n = done
        self._bar.refresh()
        if done >= total:
            self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def progress(items: Iterable[T], *, total: int | None = None, desc: str = "",
             unit: str = "it") -> Iterator[T]:
    """``items``, with a tqdm progress bar (rate and time left) on standard error while they
    are consumed; no bar under ``--quiet`` or when standard error is not a terminal."""
    from tqdm import tqdm  # imported on use: --help stays fast

    disable = _VERBOSITY[0] == 0 or not sys.stderr.isatty()
    yield from tqdm(items, total=total, desc=desc, unit=unit, disable=disable,
                    file=sys.stderr, leave=False, dynamic_ncols=True)


def _git_commit() -> str | None:
    """The commit of the source tree this package runs from, where it is a git checkout."""

    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def write_run_record(out_dir, *, command: str, argv: list[str], models: dict, seeds: dict,
                     outputs: list) -> object:
    """``OUT/run.json``: what made the folder's outputs: the command line, the package's
    version, the git commit (where the package runs from a checkout), every model and preset
    with its source, the seeds and the files written. Written whole (a temporary file
    renamed over it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        package_version = version("heteroreason")
    except PackageNotFoundError:
        package_version = None
    record = {"command": ["heteroreason", *command.split(), *argv],
              "version": package_version, "git_commit": _git_commit(),
              "python": platform.python_version(), "models": models, "seeds": seeds,
              "outputs": [str(Path(p).name) for p in outputs]}
    path = Path(out_dir) / "run.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_table(stem, header, rows) -> list:
    """A printed table as ``STEM.csv`` and ``STEM.json`` (a list of objects keyed by the
    header), each written whole (a temporary file renamed over it)."""

    stem = Path(stem)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    written = []
    for suffix, text in ((".csv", buffer.getvalue()),
                         (".json", json.dumps([dict(zip(header, r, strict=True)) for r in rows],
                                              indent=1) + "\n")):
        path = stem.with_suffix(suffix)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        written.append(path)
    return written


class OutputBusy(Exception):
    """Another run is writing the same output directory."""


def _alive(pid: int) -> bool:

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _lock(out):
    """Take ``OUT``'s lock (a file beside it, made exclusively): refused while a live process
    holds it; taken over from a process that is gone."""

    lock = out.parent / f".{out.name}.lock"
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                holder = int(lock.read_text(encoding="utf-8").strip() or 0)
            except (OSError, ValueError):
                holder = 0
            if holder and _alive(holder):
                raise OutputBusy(f"{out} is being written by another run (process {holder}; "
                                 f"remove {lock} if that process is not heteroreason)") from None
            lock.unlink(missing_ok=True)  # left by a run that is gone
            continue
        with os.fdopen(fd, "w") as handle:
            handle.write(f"{os.getpid()}\n")
        return lock
    raise OutputBusy(f"cannot take the lock {lock}")


@contextmanager
def staged_output(out) -> Iterator:
    """Outputs whole or absent: a run writes into a staging folder beside ``out`` (yielded),
    and only when it ends without an error are its files moved into ``out``, one
    ``os.replace`` each (a file is never seen half written); an error, Ctrl-C or SIGTERM
    leaves ``out`` as it was and removes the staging folder. ``out``'s lock refuses a second
    run writing the same folder at the same time (:class:`OutputBusy`)."""

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lock = _lock(out)
    try:
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".staging",
                                      dir=out.parent.resolve()))  # absolute: tools run elsewhere
        try:
            yield stage
            staged = sorted(stage.rglob("*"))
            if staged:  # a run that wrote nothing leaves no folder either
                out.mkdir(parents=True, exist_ok=True)
            for path in staged:
                target = out / path.relative_to(stage)
                if path.is_dir():
                    target.mkdir(exist_ok=True)
                else:
                    os.replace(path, target)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    finally:
        lock.unlink(missing_ok=True)


# processes a run starts on this machine (a local pool or Dask cluster): beyond any machine this
# project runs on (CI's has 2 cores), short of what would exhaust the process table
WORKERS_LIMIT = 64


# the bounds of every size a user passes: a run within them ends in minutes and keeps its
# time resolution (the fleet's, and why, in model/fleet/limits.py)
BOUNDS = {
    "rate": (*RATE_PER_S, "arrivals per second"),
    "cv": (*CV, "the gaps' coefficient of variation"),
    "problems": (1, MAX_PROBLEMS, "problems"),
    "pool": (1, MAX_POOL, "devices a pool"),
    "slo": (*SLO_S, "seconds"),
    "window": (1e-3, 1e6, "seconds"),
    "workers": (1, WORKERS_LIMIT, "processes"),
    "contexts": (1, 65_536, "problems a board"),
    "per_pass": (1, 8, "drafts a pass"),
    "repeats": (1, 100, "runs"),
}


def check_workers(parser: argparse.ArgumentParser, workers: int | None) -> None:
    """``--workers`` within [1, WORKERS_LIMIT] (None: the command's default), or exit 2."""
    if workers is not None and not 1 <= workers <= WORKERS_LIMIT:
        parser.error(f"--workers must be an integer in [1, {WORKERS_LIMIT}], not {workers}")


def positive(kind, bound: str | None = None):
    """An option's type: a number of ``kind`` > 0 (finite), within ``BOUNDS[bound]`` where
    given (the range and its unit in the error)."""
    low, high, unit = BOUNDS[bound] if bound else (None, None, "")

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0 or not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text} must be a finite number > 0")
        if bound and not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} must be in [{low:g}, {high:g}] ({unit})")
        return value
    return parse


def non_negative(text: str) -> int:
    """A non-negative integer (an option's type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, not {value}")
    return value


class _Failed(Exception):
    """A staged run that ended with an error status (its outputs are discarded)."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


def in_stage(out, body) -> int:
    """``body(stage)`` inside :func:`staged_output`: its status, with its outputs moved into
    ``out`` unless the status is 2 or more (an error: nothing new is left; 1, a check that
    failed, keeps what the run measured). :class:`OutputBusy` passes through."""
    try:
        with staged_output(out) as stage:
            status = body(stage)
            if status >= 2:
                raise _Failed(status)
            return status
    except _Failed as failed:
        return failed.status


def run_staged(parser: argparse.ArgumentParser, args, argv: list[str] | None, run) -> int:
    """The end of a command that writes ``args.out``: the folder checked before any work,
    then ``run(args, argv, stage)`` inside :func:`in_stage` (whole or absent, one writer at a
    time); a folder another run is writing exits 2 naming it."""
    from heteroreason.model.files import output_problem

    problem = output_problem(args.out, folder=True)
    if problem:
        parser.error(f"--out: {problem}")
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return in_stage(args.out, lambda stage: run(args, argv, stage))
    except OutputBusy as exc:
        print(f"{parser.prog}: error: --out: {exc}", file=sys.stderr)
        return 2
