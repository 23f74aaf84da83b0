"""scripts/fleet.py: a small simulate writes its records and trace; bad input exits 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fleet.py"


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_simulate_writes_records_and_a_chrome_trace(tmp_path):
    r = _run("simulate", "--rate", "0.2", "--pools", "2", "1", "1", "--problems", "40",
             "--slo", "120", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    record = json.loads((tmp_path / "simulate.json").read_text())[0]
    assert record["problems"] == 40 and record["p99_s"] >= record["p50_s"] > 0
    trace = json.loads((tmp_path / "simulate.trace.json").read_text())
    assert any(e.get("ph") == "X" for e in trace["traceEvents"])


@pytest.mark.parametrize("args, message", [
    (["simulate", "--rate", "0"], "must be > 0"),
    (["simulate", "--pools", "0", "1", "1"], "must be > 0"),
    (["capacity", "--slo", "0.5", "--problems", "30"], "below the fastest possible"),
    (["simulate", "--seed", "-1"], "must be a non-negative integer, not -1"),
])
def test_bad_input_exits_2(tmp_path, args, message):
    r = _run(*args, "--out", str(tmp_path))
    assert r.returncode == 2
    assert message in r.stderr


def test_malformed_arrival_trace(tmp_path):
    path = tmp_path / "arrivals.txt"
    path.write_text("0\n2\n1\n")
    r = _run("simulate", "--arrivals", str(path), "--problems", "3", "--out", str(tmp_path))
    assert r.returncode == 2
    assert "arrivals.txt:3" in r.stderr
