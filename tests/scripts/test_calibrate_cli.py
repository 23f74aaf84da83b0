"""scripts/calibrate.py: the grid's Verilator runs go through the sweep executor — a local Dask
cluster checks the quick grid as the serial run does; bad cluster options exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "calibrate.py"


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


@pytest.mark.slow
def test_quick_check_on_a_local_dask_cluster():
    pytest.importorskip("distributed")
    r = _run("--quick", "--check", "--workers", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith("check")]
    assert len(rows) == 3  # every quick-grid position, in grid order
    assert [int(row[11]) for row in rows] == [16, 300, 100]  # the position column
    assert "worst error" in r.stdout


def test_workers_below_one_exit_2():
    r = _run("--quick", "--check", "--workers", "0")
    assert r.returncode == 2
    assert "--workers must be an integer in [1, 64], not 0" in r.stderr


def test_an_unreachable_scheduler_exits_2():
    pytest.importorskip("distributed")
    r = _run("--quick", "--check", "--scheduler", "tcp://127.0.0.1:9")
    assert r.returncode == 2
    assert "cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'" in r.stderr


@pytest.mark.parametrize("address", ["tcp://nohost:", "udp://127.0.0.1:9", "tcp://[::1"])
def test_a_malformed_scheduler_address_exits_2_at_once(address):
    pytest.importorskip("distributed")
    r = _run("--quick", "--check", "--scheduler", address)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"the Dask scheduler at {address!r}" in r.stderr
    assert "not an address of the form tcp://HOST:PORT" in r.stderr
