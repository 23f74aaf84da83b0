"""The one command: every subcommand answers --help with its description whole and every
option's help, unknown commands list the known ones, and the scripts in scripts/ run the same
entry points."""

import argparse
import contextlib
import importlib
import io
import subprocess
import sys
from pathlib import Path

import pytest

from heteroreason.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]


def _parsers(name: str):
    """The parser of a subcommand (and of its own subcommands), captured from its main."""
    module = importlib.import_module(f"heteroreason.commands.{COMMANDS[name].module}")
    captured = []
    original = argparse.ArgumentParser.parse_args

    def capture(self, args=None, namespace=None):
        captured.append(self)
        raise SystemExit(0)

    argparse.ArgumentParser.parse_args = capture
    try:
        with contextlib.suppress(SystemExit):
            module.main([], prog=f"heteroreason {name}")
    finally:
        argparse.ArgumentParser.parse_args = original
    assert captured, name
    parsers = [captured[0]]
    for action in captured[0]._actions:
        if isinstance(action, argparse._SubParsersAction):
            parsers += list(action.choices.values())
    return parsers


def test_help_lists_every_subcommand():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--help"]) == 0
    text = out.getvalue()
    for name in COMMANDS:
        assert f"\n  {name} " in text, name
    assert all(len(line) <= 100 for line in text.splitlines())


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_option_has_help_and_the_description_is_whole(name):
    for parser in _parsers(name):
        assert parser.description and not parser.description.endswith((",", ":", "the")), name
        missing = [a.option_strings for a in parser._actions
                   if a.option_strings and not a.help]
        assert not missing, (name, parser.prog, missing)
        text = parser.format_help()
        for action in parser._actions:
            if (action.option_strings and action.default not in (None, False,
                                                                 argparse.SUPPRESS)
                    and not isinstance(action, (argparse._HelpAction,
                                                argparse._VersionAction))):
                assert "default" in (action.help or "") or "(default:" in text, \
                    (name, action.option_strings)


def test_an_unknown_command_lists_the_known_ones(capsys):
    assert main(["reprodoce"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'reprodoce'" in err and "reproduce, break-even" in err


def test_no_command_prints_the_usage_and_exits_2(capsys):
    assert main([]) == 2
    assert "commands:" in capsys.readouterr().err


def test_python_m_and_the_scripts_run_the_same_entry_point(tmp_path):
    by_module = subprocess.run([sys.executable, "-m", "heteroreason", "--version"],
                               capture_output=True, text=True, cwd=tmp_path)
    assert by_module.returncode == 0 and by_module.stdout.startswith("heteroreason ")
    scripts = sorted(p.name for p in (ROOT / "scripts").glob("*.py"))
    assert scripts == sorted(c.script for c in COMMANDS.values())
    for command in COMMANDS.values():
        text = (ROOT / "scripts" / command.script).read_text()
        assert f'script_main("{command.script}")' in text, command.script
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "traces.py"), "--help"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: heteroreason traces")


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_a_reader_that_goes_away_is_not_an_error(flag):
    """``heteroreason --help | grep -q reproduce`` with an unbuffered interpreter: the reader
    has gone before the last write, and the command still ends with status 0, no traceback."""
    import os
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    reader, writer = os.pipe()
    os.close(reader)  # the reader is gone before anything is written
    with os.fdopen(writer, "wb") as out:
        proc = subprocess.run([sys.executable, "-m", "heteroreason", flag], stdout=out,
                              stderr=subprocess.PIPE, text=True, env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


def test_quiet_and_verbose_exclude_each_other(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "heteroreason", "reproduce", "--quiet",
                           "--verbose", "--out", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "not allowed with argument" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_wheel_lists_every_package():
    """Every folder with an __init__.py is a package the wheel ships (a missing one installs a
    wheel whose imports fail and whose RTL fingerprint differs from the checkout's)."""
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    roots = {folder: package for package, folder in config["package-dir"].items()}
    roots["heteroreason"] = "heteroreason"
    found = {".".join([package, *init.parent.relative_to(ROOT / folder).parts])
             for folder, package in roots.items()
             for init in (ROOT / folder).rglob("__init__.py")}
    assert found == set(config["packages"])
